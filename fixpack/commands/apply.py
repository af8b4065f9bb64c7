"""``fixpack apply``: a profile's fixes and the opt-ins asked for, applied all or nothing.

The recipe: recover -> plan -> recognise -> rebuild (build + compile) -> write set ->
destination.commit. Every new file content is built and compiled in memory before the first write:
a module that does not compile refuses the plan, and the bytecode of each patched module is written
in the same transaction as its source. In place, the runtime check (``fixpack.site.plugin``) is
installed in that transaction too; ``overlay``: the same plan goes to a folder instead
(``fixpack.commands.overlay``). With a recipe's ``gate`` (``fixpack.commands.launch``), its rules
are judged on the plan before anything else, and the recipe is recorded with the fixes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..cookbook.catalog import Catalog
from ..core.fingerprint import patch_digest, sha256
from ..core.names import suggest
from ..core.plan import resolve
from ..errors import Refused, UsageError
from ..models import Action, Change, FileRecord, Plan, Profile
from ..site import plugin
from ..site.destination import InPlace
from ..site.distributions import Distribution
from ..site.manifest import Manifest
from .pin import expectation, pinned, refuse_unexpected
from .results import FixResult, Result
from .stamping import Invocation, warm_stamp
from .steps import (
    InstalledFile,
    already_applied,
    check_commits,
    installed,
    nothing_changed,
    open_state,
    pulled_in_notes,
    rebuild_files,
    recognise_files,
    refuse_drift,
    refused_results,
    write_set,
)

if TYPE_CHECKING:
    from .recipes.launch import Gate

__all__ = ["apply"]


def apply(
    catalog: Catalog,
    profile_name: str,
    asked: tuple[str, ...] = (),
    site: Path | None = None,
    dry_run: bool = False,
    allow_unpinned: bool = False,
    invocation: Invocation | None = None,
    overlay: Path | None = None,
    expect_fix_set: str | None = None,
    gate: Gate | None = None,
) -> Result:
    """``invocation``: the command line asked for this; given, a writing apply records the warm stamp.
    ``overlay``: build the patched modules into this folder instead of writing in place.
    ``expect_fix_set``: refuse unless the fix set the apply leaves has this digest (``.pin``).
    ``gate``: the recipe whose rules must hold for the plan (Refused, nothing written, when one refuses)."""
    expected = expectation(expect_fix_set)
    profile = catalog.profile(profile_name)
    result = Result("apply", profile.name, dry_run=dry_run)
    for name in asked:
        if name not in catalog.fixes:
            raise UsageError(f"unknown fix {name!r}{suggest(name, list(profile.pack))}", fix_id=name)
    if overlay is not None:
        from .overlay import apply_overlay  # the in-place apply of a container start does without it

        return apply_overlay(
            catalog, profile, asked, site, overlay, dry_run, allow_unpinned, invocation, expected, gate
        )
    env, dists = installed(profile, site)
    commit_notes = check_commits(profile, dists, allow_unpinned)
    result.notes += commit_notes
    destination = InPlace.of(env)
    with destination.locked():
        manifest = open_state(destination, catalog, result.notes)
        if manifest.release not in (None, profile.release):
            raise Refused(
                f"this environment has fixes of release {manifest.release} (profile {manifest.profile}) applied; "
                "revert them first"
            )
        plan = resolve(catalog.fixes, profile, asked, keep=manifest.fixes)
        result.notes += pulled_in_notes(plan)
        if gate is not None:
            result.notes += gate.judge(plan)
        recipe, rules = gate.record() if gate is not None else (None, ())
        site_dir = destination.state_dir.parent
        if (
            _all_applied(manifest, plan, dists, profile)
            and (manifest.recipe, manifest.rules) == (recipe, rules)
            and not _runtime_writes(site_dir, manifest, dists)
        ):
            result.fixes = already_applied(plan)
            return pinned(result, plan, expected, manifest.fix_set)
        paths = list(dict.fromkeys([*plan.paths(), *manifest.files]))
        files = recognise_files(catalog.fixes, profile, dists, manifest, paths, destination.state_dir)
        try:
            refuse_drift(files, plan, manifest.files)
            rebuilt = rebuild_files(plan, files, plan.fix_ids)
            for fix in plan.fixes:
                done = all(_still_applied(c, files[c.path], manifest) for c in fix.changes[profile.release])
                action = Action.ALREADY_APPLIED if done else (Action.WOULD_APPLY if dry_run else Action.APPLIED)
                pulled_in_by = plan.pulled_in.get(fix.id)
                result.fixes.append(FixResult(fix.id, action, None, rebuilt.counts.get(fix.id, []), pulled_in_by))
            new_manifest = Manifest(
                profile.name, profile.release, plan.fix_ids, rebuilt.records, recipe=recipe, rules=rules
            )
            refuse_unexpected(expected, new_manifest.fix_set, manifest.fix_set)
            runtime = plugin.in_place(site_dir, new_manifest, list(dists.values()))

            def stamp() -> dict | None:  # how the all-applied state this apply leaves is recognised next time
                done = Result("apply", profile.name, already_applied(plan), [*commit_notes, *pulled_in_notes(plan)])
                targets = _targets(rebuilt.records, dists)
                targets.update({str(p): sha256(c) for p, c in runtime.items()})  # None: must stay absent
                return warm_stamp(invocation, catalog, done, list(dists.values()), targets, state_dir, site)

            state_dir, installed_dists = destination.state_dir, list(dists.values())
            writes = write_set(
                files,
                rebuilt,
                new_manifest,
                manifest,
                state_dir,
                installed_dists,
                stamp if invocation is not None else None,
                runtime,
            )
            if dry_run:
                destination.check(writes)
                return result
            destination.commit(writes)
        except Refused as refused:
            result.error = nothing_changed(refused)
            result.fixes = refused_results(plan, refused)
            return result
    return result


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


def _runtime_writes(site_dir: Path, manifest: Manifest, dists: dict[str, Distribution]) -> bool:
    """The runtime check's files differ from what ``manifest`` needs (absent, older, or left over)."""
    wanted = plugin.in_place(site_dir, manifest, list(dists.values()))
    return any((p.read_bytes() if p.is_file() else None) != c for p, c in wanted.items())


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
