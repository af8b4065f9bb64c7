"""The commands' recipes: apply, status and revert, from the environment to a result.

Each reads the environment, recovers an interrupted transaction, works out every new file content
in memory (compose), and only then, all checks passed, hands the writes to the transaction.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from . import commits, compose, transaction
from .catalog import Catalog, suggest
from .compose import Base, ChangeFailed
from .environment import Distribution, Environment
from .errors import FixpackError, Refused, UsageError
from .fingerprint import State, patch_digest, sha256
from .layout import MANIFEST, PRISTINE_DIR
from .manifest import FileRecord, Manifest
from .model import Change, Fix, Plan, Profile
from .plan import resolve


@dataclass
class FixResult:
    id: str
    action: str  # applied | already-applied | would-apply | refused | reverted | would-revert
    reason: str | None = None
    files: list[tuple[str, int, int]] = field(default_factory=list)  # path, lines added, removed
    pulled_in_by: str | None = None


@dataclass
class Result:
    command: str
    profile: str | None
    fixes: list[FixResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # facts worth a line: commits, recovery
    error: FixpackError | None = None
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def exit_code(self) -> int:
        return 0 if self.error is None else self.error.exit_code


@dataclass
class FileState:
    path: str
    dist: Distribution
    current: bytes | None
    base: Base
    stored: bytes | None  # the pristine copy kept in the state directory, if any


def _environment(profile: Profile, site: Path | None) -> tuple[Environment, dict[str, Distribution]]:
    env = Environment.read({p.dist: p.package for p in profile.pins}, site)
    return env, {p.dist: env.get(p.dist) for p in profile.pins}


def check_commits(profile: Profile, dists: dict[str, Distribution], allow_unpinned: bool) -> list[str]:
    """Refuse a known commit the profile does not accept; say where each commit came from."""
    notes = []
    for pin in profile.pins:
        dist = dists[pin.dist]
        if dist.version == pin.version:
            version_ok = True  # the usual case, without importing packaging (start-up time)
        else:
            from packaging.version import InvalidVersion, Version

            try:
                version_ok = Version(dist.version).public == Version(pin.version).public
            except InvalidVersion:
                version_ok = False
        commit = dist.commit
        if commit.id is None:
            notes.append(
                f"{pin.dist} {dist.version}: commit could not be read ({commit.source}); file fingerprints decide"
            )
            ok = version_ok
        else:
            ok = version_ok and any(commits.matches(commit.id, c) for c in pin.commits)
            notes.append(f"{pin.dist} {dist.version}: commit {commit.id} (from {commit.source})")
        if not ok:
            what = f"version {dist.version}" + (f", commit {commit.id}" if commit.id else "")
            message = (
                f"the image does not match profile {profile.name}: {pin.dist} is {what}; "
                f"the profile pins {pin.version} at {', '.join(c[:12] for c in pin.commits)}"
            )
            if not allow_unpinned:
                raise Refused(message + " (--allow-unpinned applies anyway if every fingerprint holds)")
            notes.append(message + "; going on (--allow-unpinned): every fingerprint must hold")
    return notes


def pack_chain(catalog: Catalog, profile: Profile, path: str) -> list[Change]:
    """Every change the profile's pack makes to ``path``, in pack order."""
    return [c for fid in profile.pack for c in catalog.fixes[fid].changes[profile.release] if c.path == path]


def read_manifest(state_dir: Path, catalog: Catalog) -> Manifest:
    """The manifest, refusing one that names fixes this cookbook does not have (they could not be
    recognised or reverted without their changes)."""
    try:
        manifest = Manifest.from_bytes((state_dir / MANIFEST).read_bytes())
    except FileNotFoundError:
        return Manifest()
    except ValueError as exc:
        raise UsageError(f"unreadable manifest {state_dir / MANIFEST}: {exc}") from None
    unknown = [f for f in manifest.fixes if f not in catalog.fixes]
    if unknown:
        raise Refused(
            f"this environment has {', '.join(unknown)} applied, which this cookbook ({catalog.root}) does not have: "
            "run fixpack from the cookbook that applied them (fixpack revert, then apply)"
        )
    return manifest


def pristine_copy(state_dir: Path, path: str) -> Path:
    return state_dir / PRISTINE_DIR / path


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


def _file_states(
    catalog: Catalog,
    profile: Profile,
    dists: dict[str, Distribution],
    manifest: Manifest,
    paths: list[str],
    state_dir: Path,
) -> dict[str, FileState]:
    states = {}
    for path in paths:
        pin = profile.pin_for_path(path)
        assert pin is not None  # the catalog checked every change's path against the pins
        dist = dists[pin.dist]
        current = _read(dist.file(path))
        stored = _read(pristine_copy(state_dir, path))
        chain = pack_chain(catalog, profile, path)
        base = compose.base_of(path, current, manifest.files.get(path), chain, stored)
        states[path] = FileState(path, dist, current, base, stored)
    return states


def _recover(env: Environment, notes: list[str]) -> None:
    if transaction.recover(env.state_dir):
        notes.append(f"recovered an interrupted transaction from {env.state_dir / transaction.JOURNAL}")


def _warm(manifest: Manifest, plan: Plan, dists: dict[str, Distribution], profile: Profile) -> bool:
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
        if sha256(target.read_bytes() if target.exists() else None) != record.applied:
            return False
    return True


def _plan_writes(
    plan: Plan, states: dict[str, FileState], fix_ids: tuple[str, ...]
) -> tuple[dict[str, bytes | None], dict[str, FileRecord], dict[str, list[tuple[str, int, int]]]]:
    """New content and manifest record of every file, for the fixes ``fix_ids`` of the plan."""
    new: dict[str, bytes | None] = {}
    records: dict[str, FileRecord] = {}
    counts: dict[str, list[tuple[str, int, int]]] = {}
    for path, st in states.items():
        changes = [pc.change for pc in plan.changes_for(path) if pc.change.fix_id in fix_ids]
        content = compose.build(st.base.pristine, changes)
        # Without changes the file goes back to the release's bytes, recognised by their hash.
        problem = compose.compile_error(path, content) if changes else None
        if problem:
            raise ChangeFailed(changes[-1], f"the result does not compile: {problem}")
        new[path] = content
        if changes:
            records[path] = FileRecord(
                st.dist.name,
                sha256(st.base.pristine),
                sha256(content),
                tuple(c.fix_id for c in changes),
                tuple(patch_digest(c.patch) for c in changes),
            )
        for c in changes:
            counts.setdefault(c.fix_id, []).append((path, *compose.line_counts(c)))
    return new, records, counts


def _how_it_differs(st: FileState, chain: list[Change], record: FileRecord | None) -> str:
    """What fixpack left (rebuilt from the kept pristine copy) against what is there now; without a
    copy, how the file looks through the first change's hunks."""
    if record is not None and st.stored is not None and sha256(st.stored) == record.pristine:
        recorded = [c for fid in record.fixes for c in chain if c.fix_id == fid]
        try:
            return compose.explain_edit(st.path, compose.build(st.stored, recorded), st.current)
        except ChangeFailed:
            pass
    return compose.explain_drift(st.current, chain)


def _problems(
    states: dict[str, FileState], plan: Plan, manifest_files: dict[str, FileRecord]
) -> list[tuple[str, str, str]]:
    """(fix, message, details) for every drifted or missing file the plan touches."""
    out = []
    for path, st in states.items():
        if st.base.state not in (State.DRIFTED, State.MISSING):
            continue
        owners = [pc.change.fix_id for pc in plan.changes_for(path)] or ["(recorded)"]
        chain = [pc.change for pc in plan.changes_for(path)]
        details = ""
        if st.base.state is State.DRIFTED:
            details = _how_it_differs(st, chain, manifest_files.get(path))
        recorded = st.dist.record_hash(path)
        if st.base.state is State.DRIFTED and recorded is not None and recorded == sha256(st.current):
            details = (
                details + "\n" if details else ""
            ) + "the file is as pip installed it: this build differs from the pinned release"
        location = st.dist.file(path)
        out.append((owners[0], f"{st.base.state.value}: {location}: {st.base.problem}", details))
    return out


def apply(
    catalog: Catalog,
    profile_name: str,
    asked: tuple[str, ...] = (),
    site: Path | None = None,
    dry_run: bool = False,
    allow_unpinned: bool = False,
) -> Result:
    profile = catalog.profile(profile_name)
    result = Result("apply", profile.name, dry_run=dry_run)
    for name in asked:
        if name not in catalog.fixes:
            raise UsageError(f"unknown fix {name!r}{suggest(name, list(profile.pack))}")
    env, dists = _environment(profile, site)
    commit_notes = check_commits(profile, dists, allow_unpinned)
    result.notes += commit_notes
    state_dir = env.state_dir
    with transaction.locked(state_dir):
        _recover(env, result.notes)
        manifest = read_manifest(state_dir, catalog)
        if manifest.release not in (None, profile.release):
            raise Refused(
                f"this environment has fixes of release {manifest.release} (profile {manifest.profile}) applied; "
                "revert them first"
            )
        plan = resolve(catalog, profile, asked, keep=manifest.fixes)
        for fid, by in plan.pulled_in.items():
            result.notes.append(f"{fid} is pulled in: {by} requires it")
        if _warm(manifest, plan, dists, profile):
            result.fixes = [
                FixResult(f.id, "already-applied", pulled_in_by=plan.pulled_in.get(f.id)) for f in plan.fixes
            ]
            return result
        paths = list(dict.fromkeys([*plan.paths(), *manifest.files]))
        states = _file_states(catalog, profile, dists, manifest, paths, state_dir)
        try:
            new, records, counts = _new_contents(plan, states, manifest, plan.fix_ids)
        except PlanRefused as refused:
            result.error = refused.error()
            result.fixes = [
                FixResult(
                    f.id, "refused", refused.message if f.id == refused.fix_id else "not applied: the plan was refused"
                )
                for f in plan.fixes
            ]
            return result
        for fix in plan.fixes:
            done = all(_still_applied(c, states[c.path], manifest) for c in fix.changes[profile.release])
            action = "already-applied" if done else ("would-apply" if dry_run else "applied")
            result.fixes.append(FixResult(fix.id, action, None, counts.get(fix.id, []), plan.pulled_in.get(fix.id)))
        new_manifest = Manifest(profile.name, profile.release, plan.fix_ids, records)
        if not dry_run:
            writes = _writes(states, new, new_manifest, manifest, state_dir)
            if writes:  # this apply writes: record the stamp of the all-applied state it leaves
                stamp = _warm_stamp(
                    catalog, profile, asked, site, allow_unpinned, dists, state_dir, plan, records, commit_notes
                )
                new_manifest = Manifest(profile.name, profile.release, plan.fix_ids, records, warm=stamp)
                writes = _writes(states, new, new_manifest, manifest, state_dir)
            _commit(writes, state_dir)
    return result


def _warm_stamp(
    catalog: Catalog,
    profile: Profile,
    asked: tuple[str, ...],
    site: Path | None,
    allow_unpinned: bool,
    dists: dict[str, Distribution],
    state_dir: Path,
    plan: Plan,
    records: dict[str, FileRecord],
    commit_notes: list[str],
) -> dict:
    """fastpath's stamp for the state this apply leaves: everything applied, as planned."""
    import io

    from . import fastpath, report

    engine = Path(__file__).resolve().parent.parent
    warm = Result("apply", profile.name)
    warm.notes = [*commit_notes, *(f"{fid} is pulled in: {by} requires it" for fid, by in plan.pulled_in.items())]
    warm.fixes = [FixResult(f.id, "already-applied", pulled_in_by=plan.pulled_in.get(f.id)) for f in plan.fixes]
    out, err = io.StringIO(), io.StringIO()
    report.human(warm, out, err)
    dist_files = []
    for d in dists.values():
        files = [d.dist_info / "METADATA", d.dist_info / "direct_url.json", d.files_root / d.package / "_version.py"]
        dist_files.append(
            {
                "name": d.name,
                "dist_info": os.path.abspath(d.dist_info),
                "files": {os.path.abspath(f): sha256(f.read_bytes() if f.exists() else None) for f in files},
            }
        )
    targets = {}
    for path, record in records.items():
        pin = profile.pin_for_path(path)
        assert pin is not None
        targets[os.path.abspath(dists[pin.dist].file(path))] = record.applied
    return {
        "format": fastpath.FORMAT,
        "key": fastpath.request_key(
            str(engine),
            os.path.abspath(catalog.root),
            profile.name,
            list(asked),
            os.path.abspath(site) if site is not None else None,
            allow_unpinned,
        ),
        "state_dir": os.path.abspath(state_dir),
        "dists": dist_files,
        "targets": targets,
        "stdout": out.getvalue(),
        "stderr": err.getvalue(),
    }


def _still_applied(change: Change, st: FileState, manifest: Manifest) -> bool:
    """The change is in the file already: applied, and (when recorded) with the same patch."""
    if change.fix_id not in st.base.applied:
        return False
    steps = manifest.steps(change.path)
    return not steps or (change.fix_id, patch_digest(change.patch)) in steps


class PlanRefused(Exception):
    """A file is drifted or missing, or a change does not apply or compile: nothing is written."""

    def __init__(self, fix_id: str, message: str, details: str = "") -> None:
        super().__init__(message)
        self.fix_id, self.message, self.details = fix_id, message, details

    def error(self) -> Refused:
        return Refused(f"{self.fix_id}: {self.message}; nothing was changed", details=self.details)


def _new_contents(
    plan: Plan, states: dict[str, FileState], manifest: Manifest, fix_ids: tuple[str, ...]
) -> tuple[dict[str, bytes | None], dict[str, FileRecord], dict[str, list[tuple[str, int, int]]]]:
    """Every file's new bytes for ``fix_ids``, or PlanRefused naming the first problem (and counting the rest)."""
    problems = _problems(states, plan, manifest.files)
    if problems:
        fix_id, message, details = problems[0]
        if len(problems) > 1:
            message += f" (and {len(problems) - 1} more: " + "; ".join(p[1] for p in problems[1:]) + ")"
        raise PlanRefused(fix_id, message, details)
    try:
        return _plan_writes(plan, states, fix_ids)
    except ChangeFailed as exc:
        raise PlanRefused(exc.change.fix_id, exc.message, exc.details) from None


def _commit(writes: list[transaction.Write], state_dir: Path) -> None:
    if writes:
        transaction.check_writable([w.path for w in writes], state_dir)
        transaction.commit(state_dir, writes)


def _writes(
    states: dict[str, FileState],
    new: dict[str, bytes | None],
    new_manifest: Manifest,
    old_manifest: Manifest,
    state_dir: Path,
) -> list[transaction.Write]:
    writes = [
        transaction.Write(st.dist.file(path), new[path]) for path, st in states.items() if new[path] != st.current
    ]
    for path, st in states.items():  # keep the release's bytes of every patched file, and only those
        keep = st.base.pristine if path in new_manifest.files else None
        if keep != st.stored:
            writes.append(transaction.Write(pristine_copy(state_dir, path), keep))
    if writes or not new_manifest.same_content(old_manifest):
        content = None if new_manifest.empty else new_manifest.to_bytes()
        if content is not None or (state_dir / MANIFEST).exists():
            writes.append(transaction.Write(state_dir / MANIFEST, content))
    return writes


@dataclass
class StatusResult:
    profile: str | None
    distributions: list[Distribution]
    fixes: list[tuple[str, str]]  # id, state
    notes: list[str] = field(default_factory=list)
    manifest: Manifest | None = None


def _fix_state(fix: Fix, release: str, states: dict[str, FileState]) -> str:
    per_file = []
    for change in fix.changes[release]:
        base = states[change.path].base
        if base.state in (State.DRIFTED, State.MISSING):
            return base.state.value
        per_file.append(fix.id in base.applied)
    if all(per_file):
        return "applied"
    return "partial" if any(per_file) else "pending"


def status(catalog: Catalog, profile_name: str | None, site: Path | None) -> StatusResult:
    pins = {p.dist: p.package for prof in catalog.profiles.values() for p in prof.pins}
    env = Environment.read(pins, site)
    notes: list[str] = []
    manifest = Manifest()
    if env.found:
        with transaction.locked(env.state_dir):
            _recover(env, notes)
            manifest = read_manifest(env.state_dir, catalog)
    name = profile_name or manifest.profile
    if name is None:
        return StatusResult(None, list(env.found.values()), [], notes, manifest)
    profile = catalog.profile(name)
    _, dists = _environment(profile, site)
    fix_ids = list(profile.pack) if profile_name else list(manifest.fixes)
    paths = list(dict.fromkeys(c.path for fid in fix_ids for c in catalog.fixes[fid].changes[profile.release]))
    states = _file_states(catalog, profile, dists, manifest, paths, env.state_dir)
    fixes = [(fid, _fix_state(catalog.fixes[fid], profile.release, states)) for fid in fix_ids]
    return StatusResult(profile.name, list(env.found.values()), fixes, notes, manifest)


def revert(catalog: Catalog, names: tuple[str, ...], site: Path | None, dry_run: bool = False) -> Result:
    pins = {p.dist: p.package for prof in catalog.profiles.values() for p in prof.pins}
    env = Environment.read(pins, site)
    result = Result("revert", None, dry_run=dry_run)
    if not env.found:
        result.notes.append("nothing is applied here")
        return result
    with transaction.locked(env.state_dir):
        _recover(env, result.notes)
        manifest = read_manifest(env.state_dir, catalog)
        if manifest.empty:
            result.notes.append("nothing is applied here")
            return result
        profile = catalog.profile(manifest.profile or "")
        result.profile = profile.name
        _, dists = _environment(profile, site)
        for name in names:
            if name not in manifest.fixes:
                raise UsageError(f"fix {name!r} is not applied here{suggest(name, list(manifest.fixes))}")
        removing = _with_dependents(catalog, set(names) if names else set(manifest.fixes), manifest.fixes)
        keep = tuple(f for f in manifest.fixes if f not in removing)
        plan = resolve(catalog, profile, (), keep=manifest.fixes)
        states = _file_states(catalog, profile, dists, manifest, list(manifest.files), env.state_dir)
        try:
            new, records, _ = _new_contents(plan, states, manifest, keep)
        except PlanRefused as refused:
            result.error = refused.error()
            return result
        for fid in manifest.fixes:
            if fid in removing:
                why = None if fid in names or not names else "depends on a fix being reverted"
                result.fixes.append(FixResult(fid, "would-revert" if dry_run else "reverted", why))
        new_manifest = Manifest(profile.name, profile.release, keep, records) if keep else Manifest()
        if not dry_run:
            _commit(_writes(states, new, new_manifest, manifest, env.state_dir), env.state_dir)
    return result


def _with_dependents(catalog: Catalog, removing: set[str], applied: tuple[str, ...]) -> set[str]:
    changed = True
    while changed:
        changed = False
        for fid in applied:
            if fid not in removing and set(catalog.fixes[fid].requires) & removing:
                removing.add(fid)
                changed = True
    return removing
