"""``fixpack apply``: a profile's fixes and the opt-ins asked for, applied all or nothing.

The recipe: recover -> plan -> recognise -> rebuild -> write set -> destination.commit. Every new
file content is computed and compiled in memory before the first write.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..cookbook.catalog import Catalog
from ..core.fingerprint import patch_digest, sha256
from ..core.names import suggest
from ..core.plan import resolve
from ..errors import FixpackError, Refused, UsageError
from ..models import Action, Change, FileRecord, Plan, Profile
from ..site import warm
from ..site.destination import InPlace
from ..site.distributions import Distribution
from ..site.manifest import Manifest
from ..site.state import read_manifest
from .results import FixResult, Result
from .steps import (
    InstalledFile,
    check_commits,
    installed,
    nothing_changed,
    rebuild_files,
    recognise_files,
    refuse_drift,
    write_set,
)

__all__ = ["apply"]

Renderer = Callable[[Result], tuple[str, str]]  # a result -> (stdout, stderr) as the CLI prints it


def apply(
    catalog: Catalog,
    profile_name: str,
    asked: tuple[str, ...] = (),
    site: Path | None = None,
    dry_run: bool = False,
    allow_unpinned: bool = False,
    render: Renderer | None = None,
) -> Result:
    """``render``: how the CLI prints a result; given, a writing apply records the warm stamp."""
    profile = catalog.profile(profile_name)
    result = Result("apply", profile.name, dry_run=dry_run)
    for name in asked:
        if name not in catalog.fixes:
            raise UsageError(f"unknown fix {name!r}{suggest(name, list(profile.pack))}", fix_id=name)
    env, dists = installed(profile, site)
    commit_notes = check_commits(profile, dists, allow_unpinned)
    result.notes += commit_notes
    destination = InPlace.of(env)
    with destination.locked():
        recovered = destination.recover()
        if recovered:
            result.notes.append(recovered)
        manifest = read_manifest(destination.state_dir, catalog.fixes, catalog.root)
        if manifest.release not in (None, profile.release):
            raise Refused(
                f"this environment has fixes of release {manifest.release} (profile {manifest.profile}) applied; "
                "revert them first"
            )
        plan = resolve(catalog.fixes, profile, asked, keep=manifest.fixes)
        result.notes += _pulled_in(plan)
        if _all_applied(manifest, plan, dists, profile):
            result.fixes = _already_applied(plan)
            return result
        paths = list(dict.fromkeys([*plan.paths(), *manifest.files]))
        files = recognise_files(catalog.fixes, profile, dists, manifest, paths, destination.state_dir)
        try:
            refuse_drift(files, plan, manifest.files)
            rebuilt = rebuild_files(plan, files, plan.fix_ids)
        except Refused as refused:
            result.error = nothing_changed(refused)
            result.fixes = _refused(plan, refused)
            return result
        for fix in plan.fixes:
            done = all(_still_applied(c, files[c.path], manifest) for c in fix.changes[profile.release])
            action = Action.ALREADY_APPLIED if done else (Action.WOULD_APPLY if dry_run else Action.APPLIED)
            pulled_in_by = plan.pulled_in.get(fix.id)
            result.fixes.append(FixResult(fix.id, action, None, rebuilt.counts.get(fix.id, []), pulled_in_by))
        new_manifest = Manifest(profile.name, profile.release, plan.fix_ids, rebuilt.records)

        def stamp() -> dict:  # how the all-applied state this apply leaves is recognised next time
            done = Result("apply", profile.name, _already_applied(plan), [*commit_notes, *_pulled_in(plan)])
            key = warm.request_key(catalog.root, profile.name, list(asked), site, allow_unpinned)
            targets = _targets(rebuilt.records, dists)
            return warm.make_stamp(key, list(dists.values()), destination.state_dir, targets, render(done))

        state_dir, installed_dists = destination.state_dir, list(dists.values())
        writes = write_set(
            files, rebuilt, new_manifest, manifest, state_dir, installed_dists, stamp if render else None
        )
        if dry_run:
            destination.check(writes)
            return result
        destination.commit(writes)
    return result


def _pulled_in(plan: Plan) -> list[str]:
    notes = [f"{fid} is pulled in: {by} requires it" for fid, by in plan.pulled_in.items()]
    return notes + [f"{old} is left out: {new} supersedes it" for old, new in plan.superseded.items()]


def _already_applied(plan: Plan) -> list[FixResult]:
    return [FixResult(f.id, Action.ALREADY_APPLIED, pulled_in_by=plan.pulled_in.get(f.id)) for f in plan.fixes]


def _refused(plan: Plan, refused: FixpackError) -> list[FixResult]:
    """The fix that caused the refusal with its reason first; the others were not applied because of it."""
    culprit = refused.fix_id if refused.fix_id in plan.fix_ids else None
    out = []
    for fix in plan.fixes:
        reason = refused.message if fix.id == culprit else "not applied: the plan was refused"
        out.append(FixResult(fix.id, Action.REFUSED, reason))
    out.sort(key=lambda r: r.id != culprit)
    return out


def _all_applied(manifest: Manifest, plan: Plan, dists: dict[str, Distribution], profile: Profile) -> bool:
    """Everything the plan asks for is applied and no file changed since: only hashes read."""
    if set(plan.fix_ids) != set(manifest.fixes) or manifest.profile != profile.name:
        return False
    if set(plan.paths()) != set(manifest.files):
        return False
    for path in plan.paths():  # the same changes, patch for patch, as the cookbook has now
        wanted = tuple((pc.change.fix_id, patch_digest(pc.change.patch)) for pc in plan.changes_for(path))
        if wanted != manifest.steps(path):
            return False
    for path, record in manifest.files.items():
        pin = profile.pin_for_path(path)
        if pin is None:
            return False
        target = dists[pin.dist].file(path)
        if sha256(target.read_bytes() if target.is_file() else None) != record.applied:
            return False
    return True


def _still_applied(change: Change, f: InstalledFile, manifest: Manifest) -> bool:
    """The change is in the file already: applied, and (when recorded) with the same patch."""
    if change.fix_id not in f.base.applied:
        return False
    steps = manifest.steps(change.path)
    return not steps or (change.fix_id, patch_digest(change.patch)) in steps


def _targets(records: dict[str, FileRecord], dists: dict[str, Distribution]) -> dict[str, str | None]:
    """Each patched file on disk and its hash after this apply."""
    by_name = {d.name: d for d in dists.values()}
    return {str(by_name[r.dist].file(path)): r.applied for path, r in records.items()}
