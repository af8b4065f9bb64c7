"""The steps the site commands (apply, status, revert) are recipes of: find what is installed,
check its commits, recognise each file, rebuild the new contents (each patched module built and
compiled here, in memory), and turn them into a write set: targets, their bytecode, the state."""

from __future__ import annotations

import importlib.util
import marshal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ..cookbook.catalog import Catalog
from ..core import rebuild, recognise
from ..core.bytecode import hash_based_pyc
from ..core.fingerprint import patch_digest, sha256
from ..core.plan import pack_chain
from ..errors import FixpackError, Refused
from ..models import Action, Change, FileRecord, FileState, Fix, Plan, Profile
from ..site import commits
from ..site.destination import Destination, Write
from ..site.distributions import Distribution, Environment
from ..site.layout import MANIFEST
from ..site.manifest import Manifest
from ..site.record import rewrite_record
from ..site.state import pristine_copy, read_file, read_manifest
from .results import FixResult

__all__ = [
    "InstalledFile",
    "installed",
    "check_commits",
    "recognise_files",
    "refuse_drift",
    "Rebuilt",
    "rebuild_files",
    "write_set",
    "nothing_changed",
    "pulled_in_notes",
    "already_applied",
    "refused_results",
]

Counts = dict[str, list[tuple[str, int, int]]]  # fix id -> (path, lines added, removed) per file


@dataclass
class InstalledFile:
    """One file the plan touches, as it is installed, and what it was recognised as."""

    path: str
    dist: Distribution
    current: bytes | None
    base: recognise.Base
    stored: bytes | None  # the pristine copy kept in the state directory, if any


def installed(profile: Profile, site: Path | None) -> tuple[Environment, dict[str, Distribution]]:
    """The environment and each pinned distribution in it (EnvironmentProblem if one is missing)."""
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
            if commit.id and len(commit.id) < commits.SHORTEST and version_ok:
                what += f" (too short to match: at least {commits.SHORTEST} hex digits are needed)"
            message = (
                f"the image does not match profile {profile.name}: {pin.dist} is {what}; "
                f"the profile pins {pin.version} at {', '.join(c[:12] for c in pin.commits)}"
            )
            if not allow_unpinned:
                raise Refused(message + " (--allow-unpinned applies anyway if every fingerprint holds)")
            notes.append(message + "; going on (--allow-unpinned): every fingerprint must hold")
    return notes


def recognise_files(
    fixes: Mapping[str, Fix],
    profile: Profile,
    dists: dict[str, Distribution],
    manifest: Manifest,
    paths: list[str],
    state_dir: Path,
) -> dict[str, InstalledFile]:
    """Read each file and recognise it against the pack's chain of changes to it."""
    out = {}
    for path in paths:
        pin = profile.pin_for_path(path)
        assert pin is not None  # the catalog checked every change's path against the pins
        dist = dists[pin.dist]
        current = read_file(dist.file(path))
        stored = read_file(pristine_copy(state_dir, path))
        chain = pack_chain(fixes, profile, path)
        base = recognise.base_of(path, current, manifest.files.get(path), chain, stored)
        out[path] = InstalledFile(path, dist, current, base, stored)
    return out


def _how_it_differs(f: InstalledFile, chain: list[Change], record: FileRecord | None) -> str:
    """What fixpack left (rebuilt from the kept pristine copy) against what is there now; without a
    copy, how the file looks through the first change's hunks."""
    if record is not None and f.stored is not None and sha256(f.stored) == record.pristine:
        recorded = [c for fid in record.fixes for c in chain if c.fix_id == fid]
        try:
            return recognise.explain_edit(f.path, rebuild.build(f.stored, recorded), f.current)
        except Refused:
            pass
    return recognise.explain_drift(f.current, chain)


def refuse_drift(files: dict[str, InstalledFile], plan: Plan, recorded: dict[str, FileRecord]) -> None:
    """Refuse the plan, naming the first drifted or missing file (and counting the others)."""
    problems = []
    for path, f in files.items():
        if f.base.state not in (FileState.DRIFTED, FileState.MISSING):
            continue
        chain = [pc.change for pc in plan.changes_for(path)]
        owner = chain[0].fix_id if chain else (recorded[path].fixes[0] if path in recorded else None)
        details = ""
        if f.base.state is FileState.DRIFTED:
            details = _how_it_differs(f, chain, recorded.get(path))
            pip_hash = f.dist.record_hash(path)
            if pip_hash is not None and pip_hash == sha256(f.current):
                details = (details + "\n" if details else "") + (
                    "the file is as pip installed it: this build differs from the pinned release"
                )
        message = f"{f.base.state.value}: {path} ({f.dist.name}, {f.dist.file(path)}): {f.base.problem}"
        problems.append(Refused(message, fix_id=owner, path=path, details=details))
    if problems:
        first = problems[0]
        if len(problems) > 1:
            first.message += f" (and {len(problems) - 1} more: " + "; ".join(p.message for p in problems[1:]) + ")"
        raise first


@dataclass
class Rebuilt:
    """What a plan makes of the files it touches."""

    new: dict[str, bytes | None]  # path -> new content (None: removed)
    records: dict[str, FileRecord]  # the manifest's record of each file a fix changes
    counts: Counts
    code: dict[str, bytes]  # each patched module's marshalled code object, when bytecode is written


def rebuild_files(plan: Plan, files: dict[str, InstalledFile], fix_ids: tuple[str, ...]) -> Rebuilt:
    """New content and manifest record of every file, for the fixes ``fix_ids`` of the plan, and
    the code of each patched module. Raises Refused for a change that does not apply or, once
    every file is built, for a result that does not compile (naming the last change to it)."""
    chains = {path: [pc.change for pc in plan.changes_for(path) if pc.change.fix_id in fix_ids] for path in files}
    out = Rebuilt({path: rebuild.build(f.base.pristine, chains[path]) for path, f in files.items()}, {}, {}, {})
    keep = _writes_bytecode()
    for path, f in files.items():
        changes, content = chains[path], out.new[path]
        if not changes:  # the file goes back to the release's bytes, recognised by their hash
            continue
        code, problem = rebuild.compiled(path, content)
        if problem:
            raise rebuild.failed(changes[-1], f"the result does not compile: {problem}")
        if code is not None and keep:
            out.code[path] = marshal.dumps(code)
        out.records[path] = FileRecord(
            f.dist.name,
            sha256(f.base.pristine),
            sha256(content),
            tuple(c.fix_id for c in changes),
            tuple(patch_digest(c.patch) for c in changes),
        )
        for c in changes:
            out.counts.setdefault(c.fix_id, []).append((path, *rebuild.line_counts(c)))
    return out


def write_set(
    files: dict[str, InstalledFile],
    rebuilt: Rebuilt,
    new_manifest: Manifest,
    old_manifest: Manifest,
    state_dir: Path,
    dists: list[Distribution],
    stamp: Callable[[], dict] | None = None,
    runtime: dict[Path, bytes | None] | None = None,
) -> list[Write]:
    """The writes that take the site from what it is to the rebuilt files: targets and their
    bytecode, pristine copies, the runtime check's files (``runtime``: path -> bytes, None to
    remove), each distribution's RECORD kept true to what is installed, and the manifest (with
    the warm path's ``stamp`` when anything is written)."""
    new = rebuilt.new
    patched = {f.dist.file(path): path for path, f in files.items() if new[path] != f.current}  # target -> path
    targets = [Write(target, new[path]) for target, path in patched.items()]
    runtime = runtime or {}
    writes = [Write(p, c) for p, c in runtime.items() if read_file(p) != c]
    kept: dict[str, bytes] = {}
    for path, f in files.items():  # keep the release's bytes of every patched file, and only those
        keep = f.base.pristine if path in new_manifest.files else None
        if keep is not None:
            kept[path] = keep
        if keep != f.stored:
            writes.append(Write(pristine_copy(state_dir, path), keep, same_as=f.dist.file(path)))
    rows = {p.relative_to(state_dir.parent).as_posix(): c for p, c in runtime.items() if c is not None}
    record_writes, records = _records(files, new, new_manifest, old_manifest, state_dir, dists, kept, rows)
    writes += record_writes
    new_manifest = replace(new_manifest, records=records)
    if (targets or writes) and stamp is not None and not new_manifest.empty:
        new_manifest = replace(new_manifest, warm=stamp())
    if targets or writes or not new_manifest.same_content(old_manifest):
        content = None if new_manifest.empty else new_manifest.to_bytes()
        if content is not None or (state_dir / MANIFEST).exists():
            writes.append(Write(state_dir / MANIFEST, content))
    return [*targets, *_bytecode(patched, rebuilt), *writes]


def _writes_bytecode() -> bool:
    return not (sys.dont_write_bytecode or sys.pycache_prefix)


def _pyc(source: Path) -> Path:
    return Path(importlib.util.cache_from_source(str(source)))


def _bytecode(patched: dict[Path, str], rebuilt: Rebuilt) -> list[Write]:
    """The hash-based .pyc of each patched module, from the code object the rebuild compiled (none
    when this Python writes no bytecode, or writes it outside the site)."""
    out = []
    for target, path in patched.items():
        code, content = rebuilt.code.get(path), rebuilt.new[path]
        if code is not None and content is not None:
            out.append(Write(_pyc(target), hash_based_pyc(code, content)))
    return out


def _records(
    files: dict[str, InstalledFile],
    new: dict[str, bytes | None],
    new_manifest: Manifest,
    old_manifest: Manifest,
    state_dir: Path,
    dists: list[Distribution],
    kept: dict[str, bytes],
    runtime_rows: dict[str, bytes] | None = None,
) -> tuple[list[Write], dict[str, str]]:
    """Each installed (not editable) distribution's RECORD as pip must find it: the hashes of the
    files fixes changed, the files they created, and, in the RECORD of the distribution whose
    site holds the state directory, fixpack's state, so that ``pip uninstall`` leaves nothing of
    fixpack behind. The pip-written RECORD is kept beside the pristine copies and written back,
    byte for byte, when the last fix goes."""
    bases: dict[str, tuple[Distribution, bytes | None, bytes]] = {}
    for d in sorted({d.name: d for d in dists if not d.editable}.values(), key=lambda d: d.name):
        current = read_file(d.dist_info / "RECORD")
        stored = read_file(pristine_copy(state_dir, _record_key(d)))
        as_left = stored is not None and sha256(current) == old_manifest.records.get(d.dist_info.name)
        base = stored if as_left else current  # pip wrote the RECORD that is there now: it is the base
        if base is not None:
            bases[d.dist_info.name] = (d, current, base)
    owner = next((n for n, (d, _, _) in bases.items() if d.site == state_dir.parent), None)
    state_rows = {_state_row(state_dir, p): c for p, c in kept.items()}
    state_rows.update({_state_row(state_dir, _record_key(d)): base for d, _, base in bases.values()})
    state_rows.update(runtime_rows or {})  # the runtime check goes with the state when pip uninstalls
    writes, records = [], {}
    for name, (d, current, base) in bases.items():
        if new_manifest.empty:
            record, keep = base, None
        else:
            changed = {p: new[p] for p in new_manifest.files if files[p].dist.name == d.name}
            extra = state_rows if name == owner else {}
            unhashed = [_state_row(state_dir, MANIFEST)] if name == owner else []
            record, keep = rewrite_record(base, {**changed, **extra}, unhashed), base
            records[name] = sha256(record) or ""
        if record != current:
            writes.append(Write(d.dist_info / "RECORD", record))
        if keep != read_file(pristine_copy(state_dir, _record_key(d))):
            writes.append(Write(pristine_copy(state_dir, _record_key(d)), keep, same_as=d.dist_info / "RECORD"))
    return writes, records


def _record_key(d: Distribution) -> str:
    """Where a distribution's pip-written RECORD is kept among the pristine copies."""
    return f"{d.dist_info.name}/RECORD"


def _state_row(state_dir: Path, path: str) -> str:
    """A state file's path as RECORD lists it: relative to the site that holds the state directory."""
    full = pristine_copy(state_dir, path) if path != MANIFEST else state_dir / MANIFEST
    return full.relative_to(state_dir.parent).as_posix()


def nothing_changed(refused: Refused) -> Refused:
    """The command's error for a refused plan: the fix first, and that nothing was written."""
    who = f"{refused.fix_id}: " if refused.fix_id else ""
    return Refused(
        f"{who}{refused.message}; nothing was changed",
        fix_id=refused.fix_id,
        path=refused.path,
        details=refused.details,
    )


def pulled_in_notes(plan: Plan) -> list[str]:
    notes = [f"{fid} is pulled in: {by} requires it" for fid, by in plan.pulled_in.items()]
    return notes + [f"{old} is left out: {new} supersedes it" for old, new in plan.superseded.items()]


def already_applied(plan: Plan) -> list[FixResult]:
    return [FixResult(f.id, Action.ALREADY_APPLIED, pulled_in_by=plan.pulled_in.get(f.id)) for f in plan.fixes]


def refused_results(plan: Plan, refused: FixpackError) -> list[FixResult]:
    """The fix that caused the refusal with its reason first; the others were not applied because of it."""
    culprit = refused.fix_id if refused.fix_id in plan.fix_ids else None
    out = []
    for fix in plan.fixes:
        reason = refused.message if fix.id == culprit else "not applied: the plan was refused"
        out.append(FixResult(fix.id, Action.REFUSED, reason))
    out.sort(key=lambda r: r.id != culprit)
    return out


def open_state(destination: Destination, catalog: Catalog, notes: list[str]) -> Manifest:
    """The first step under the lock: roll back an interrupted transaction (saying so), then read
    what is applied."""
    recovered = destination.recover()
    if recovered:
        notes.append(recovered)
    return read_manifest(destination.state_dir, catalog.fixes, catalog.root)
