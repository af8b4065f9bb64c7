"""The steps ``apply``, ``status`` and ``revert`` are made of, in the order they take them:

1. the guards: ``to_build`` (the destination an apply builds, refused over fixes applied in place
   when it has a state of its own), ``holding`` (under its lock: an interrupted transaction rolled
   back, what it holds read from a state no other user could write);
2. the judging: ``unchanged`` (the destination holds this very plan, every file as it was left),
   ``as_run`` and ``rows`` (the files as a process runs them, and their hashes for the digest rule);
3. the building: ``decide`` (each file recognised, drift refused, the new contents built and
   compiled in memory, and which fixes are there already), for the destination to place
   (``fixpack.installation.destination``);
4. the recording: ``manifest_last`` (the placement's writes with the manifest last) and what the
   command says (``usage_notes``, ``nothing_changed``, the results).

Every decision is taken here, the same way for every destination, from what it read (``Held``)
and what it placed (``Placement``)."""

from __future__ import annotations

import contextlib
import marshal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ...cookbook.catalog import Catalog
from ...core import rebuild, recognise
from ...core.bytecode import writes_bytecode
from ...core.fingerprint import patch_digest, sha256
from ...core.plan import pack_chain
from ...errors import FixpackError, Refused
from ...installation.destination import NO_COPY, Destination, Held, InstalledFile, Placement, Rebuilt, Where, Write
from ...installation.distributions import Distribution, Environment
from ...installation.manifest import Manifest
from ...installation.overlay import activation
from ...installation.state import pristine_copy, read_file, read_manifest, refuse_untrusted
from ...models import Action, Change, FileEntry, FileState, Fix, Plan, Profile
from .results import FixResult

# (repository path, sha256 recorded, sha256 read now) per patched file: what fixpack.runtime.fixset judges
Rows = list[tuple[str, str | None, str | None]]

__all__ = [
    "to_build",
    "holding",
    "open_state",
    "unchanged",
    "holds_plan",
    "holds",
    "as_run",
    "rows",
    "fix_state",
    "Decided",
    "decide",
    "already_there",
    "recognise_files",
    "refuse_drift",
    "rebuild_files",
    "still_applied",
    "manifest_last",
    "usage_notes",
    "nothing_changed",
    "pulled_in_notes",
    "already_applied",
    "refused_results",
]


# -- 1. the guards ---------------------------------------------------------------------------------


def to_build(where: Where, env: Environment) -> Destination:
    """The destination an apply builds, over ``env`` (whose pinned distributions were found). One
    with a state of its own (an overlay) is built over the installed release: refused over fixes
    applied in place."""
    target = where.open(env)
    assert target is not None, "opened before the distributions were found"
    if target.state_dir != env.state_dir and env.state_dir.parent.is_dir():
        refuse_untrusted(env.state_dir)
        applied = read_manifest(env.state_dir)
        if not applied.empty:
            raise Refused(
                f"{env.state_dir.parent} has fixes applied in place ({', '.join(applied.fixes)}): an overlay is "
                "built over the installed release; use the in-place fixes, or fixpack revert them first"
            )
    return target


@contextlib.contextmanager
def holding(
    target: Destination, catalog: Catalog, notes: list[str], create: bool = False, foreign_ok: bool = False
) -> Iterator[Held]:
    """Under ``target``'s lock (``create``: a writing run makes the folder that holds it): what it
    holds, as ``open_state`` reads it."""
    with target.locked(create=create):
        yield open_state(target, catalog, notes, foreign_ok)


def open_state(destination: Destination, catalog: Catalog, notes: list[str], foreign_ok: bool = False) -> Held:
    """The first step under the lock: roll back an interrupted transaction (saying so), then read
    what is applied, both only from a state no other user could have written. A fix applied that
    this cookbook does not have is refused (it could not be recognised or rebuilt without its
    changes) unless ``foreign_ok`` (revert, which takes it back from the pristine copies)."""
    refuse_untrusted(destination.state_dir)
    recovered = destination.recover()
    if recovered:
        notes.append(recovered)
    held = destination.read()
    unknown = [f for f in held.manifest.fixes if f not in catalog.fixes]
    if unknown and not foreign_ok:
        raise Refused(
            f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} applied {destination.where}, which this "
            f"cookbook ({catalog.root}) does not have: fixpack revert takes back every fix (or run fixpack from "
            "the cookbook that applied them), then apply",
            fix_id=unknown[0],
        )
    return held


# -- 2. the judging --------------------------------------------------------------------------------


def unchanged(held: Held, plan: Plan, profile: Profile, recipe: tuple[str | None, tuple]) -> bool:
    """The destination holds this very plan (``holds_plan``) and every file as it was left (``holds``)."""
    return holds_plan(held.manifest, plan, profile, recipe) and holds(held)


def holds_plan(manifest: Manifest, plan: Plan, profile: Profile, recipe: tuple[str | None, tuple]) -> bool:
    """``manifest`` records exactly this plan: its profile and fixes, and patch for patch the
    changes the cookbook has now, with the same recipe (slug, rules). Pure: nothing read."""
    if manifest.profile != profile.name or set(plan.fix_ids) != set(manifest.fixes):
        return False
    if (manifest.recipe, manifest.rules) != recipe or set(plan.paths()) != set(manifest.files):
        return False
    return all(
        tuple((pc.change.fix_id, patch_digest(pc.change.patch)) for pc in plan.changes_for(path))
        == manifest.steps(path)
        for path in plan.paths()
    )


def holds(held: Held) -> bool:
    """Every file the destination was left with is as it was left, its own files (the runtime
    check, the hook) included: only hashes read. Each file a process runs as it was left and, under
    a copy, the installed file as the copy was built over."""
    if held.own is None:
        return False
    for path, record in held.manifest.files.items():
        shadow = held.shadows.get(path)
        if shadow is None or shadow.built != record.applied or shadow.copy != record.applied:
            return False
        if shadow.original is not None and sha256(read_file(shadow.original)) != shadow.pristine:
            return False
    return all(sha256(read_file(path)) == expected for path, expected in held.own.items())


def as_run(files: Mapping[str, InstalledFile], held: Held) -> dict[str, InstalledFile]:
    """The files as a process sees them: each one a copy shadows recognised through that copy
    (``recognise.through_copy``), the others as installed."""
    out = dict(files)
    for path, record in held.manifest.files.items():
        f, shadow = files.get(path), held.shadows.get(path, NO_COPY)
        if f is None or path in held.shadows and shadow.original is None:  # it runs the installed file
            continue
        base = recognise.through_copy(f.current, shadow.copy, record.applied, shadow.pristine, record.fixes)
        out[path] = replace(f, base=base)
    return out


def rows(held: Held) -> Rows:
    """Each patched file's recorded and current hash, for the digest rule: the file a process runs
    and, under a copy, the installed file as the copy was built over."""
    out: Rows = []
    for path, record in held.manifest.files.items():
        shadow = held.shadows.get(path, NO_COPY)
        out.append((path, record.applied, shadow.copy))
        if shadow.original is not None:
            out.append((path, shadow.pristine, sha256(read_file(shadow.original))))
    return out


def fix_state(fix: Fix, release: str, files: Mapping[str, InstalledFile]) -> FileState | str:
    """A fix's state from its files': drifted or missing as the first such file, else applied,
    partial or pending by how many of its files it is applied in."""
    per_file = []
    for change in fix.changes[release]:
        base = files[change.path].base
        if base.state in (FileState.DRIFTED, FileState.MISSING):
            return base.state
        per_file.append(fix.id in base.applied)
    if per_file and all(per_file):
        return FileState.APPLIED
    return "partial" if any(per_file) else "pending"


# -- 3. the building -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decided:
    """What the building step made of the files: each as installed, recognised; their new contents."""

    files: dict[str, InstalledFile]
    rebuilt: Rebuilt


def decide(
    catalog: Catalog,
    profile: Profile,
    plan: Plan,
    dists: dict[str, Distribution],
    held: Held,
    target: Destination,
    paths: list[str],
    fix_ids: tuple[str, ...],
) -> Decided:
    """Each of ``paths`` recognised against what the installed files hold, drift refused (naming the
    first file), and the new contents built for ``fix_ids`` and compiled."""
    files = recognise_files(catalog.fixes, profile, dists, held.installed, paths, target.state_dir)
    refuse_drift(files, plan, held.installed.files)
    return Decided(files, rebuild_files(plan, files, fix_ids))


def already_there(plan: Plan, profile: Profile, decided: Decided, held: Held) -> frozenset[str]:
    """The plan's fixes already in what a process runs, with the same patches."""
    running = as_run(decided.files, held)
    return frozenset(
        f.id for f in plan.fixes if all(still_applied(c, running, held) for c in f.changes[profile.release])
    )


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


def _how_it_differs(f: InstalledFile, chain: list[Change], record: FileEntry | None) -> str:
    """What fixpack left (rebuilt from the kept pristine copy) against what is there now; without a
    copy, how the file looks through the first change's hunks."""
    if record is not None and f.stored is not None and sha256(f.stored) == record.pristine:
        recorded = [c for fid in record.fixes for c in chain if c.fix_id == fid]
        try:
            return recognise.explain_edit(f.path, rebuild.build(f.stored, recorded), f.current)
        except Refused:
            pass
    return recognise.explain_drift(f.current, chain)


def refuse_drift(files: dict[str, InstalledFile], plan: Plan, recorded: dict[str, FileEntry]) -> None:
    """Refuse the plan, naming the first drifted or missing file (and counting the others)."""
    problems = []
    for path, f in files.items():
        if f.base.state not in (FileState.DRIFTED, FileState.MISSING):
            continue
        chain = [pc.change for pc in plan.changes_for(path)]
        owner = chain[0].fix_id if chain else (recorded[path].fixes[0] if path in recorded else None)
        details, as_pip = "", False
        if f.base.state is FileState.DRIFTED:
            details = _how_it_differs(f, chain, recorded.get(path))
            pip_hash = f.dist.record_hash(path)
            as_pip = pip_hash is not None and pip_hash == sha256(f.current)
            if as_pip:
                details = (details + "\n" if details else "") + (
                    "the file is as pip installed it: this build differs from the pinned release"
                )
        message = f"{f.base.state.value}: {path} ({f.dist.name}, {f.dist.file(path)}): {f.base.problem}"
        problems.append(Refused(message, fix_id=owner, path=path, details=details, way_out=_drift_way_out(f, as_pip)))
    if problems:
        first = problems[0]
        if len(problems) > 1:
            first.message += f" (and {len(problems) - 1} more: " + "; ".join(p.message for p in problems[1:]) + ")"
        raise first


def _drift_way_out(f: InstalledFile, as_pip_installed: bool) -> str:
    """What to do about a file that is not what the fixes expect (docs/operators/when-it-refuses.md)."""
    reinstall = f"pip install --force-reinstall --no-deps {f.dist.name}=={f.dist.version}"
    if as_pip_installed:
        return (
            f"To go on: this build of {f.dist.name} is not the pinned release's; apply the profile for the build "
            "you run (fixpack profiles), or install the pinned release"
        )
    if f.base.state is FileState.MISSING:
        return f"To go on: reinstall {f.dist.name} ({reinstall}), then run fixpack again"
    return (
        f"To go on: undo the edit shown below, or reinstall {f.dist.name} ({reinstall}), then run fixpack again; "
        "or keep the edit as a fix of your own (fixpack record: docs/fix-authors/hand-edit.md)"
    )


def rebuild_files(plan: Plan, files: dict[str, InstalledFile], fix_ids: tuple[str, ...]) -> Rebuilt:
    """New content and manifest record of every file, for the fixes ``fix_ids`` of the plan, and
    the code of each patched module. Raises Refused for a change that does not apply or, once
    every file is built, for a result that does not compile (naming the last change to it)."""
    chains = {path: [pc.change for pc in plan.changes_for(path) if pc.change.fix_id in fix_ids] for path in files}
    new = {path: rebuild.build(f.base.pristine, chains[path]) for path, f in files.items()}
    entries: dict[str, FileEntry] = {}
    counts: dict[str, list[tuple[str, int, int]]] = {}
    compiled: dict[str, bytes] = {}
    keep = writes_bytecode()
    for path, f in files.items():
        changes, content = chains[path], new[path]
        if not changes:  # the file goes back to the release's bytes, recognised by their hash
            continue
        code, problem = rebuild.compiled(path, content)
        if problem:
            raise rebuild.failed(changes[-1], f"the result does not compile: {problem}")
        if code is not None and keep:
            compiled[path] = marshal.dumps(code)
        entries[path] = FileEntry(
            f.dist.name,
            sha256(f.base.pristine),
            sha256(content),
            tuple(c.fix_id for c in changes),
            tuple(patch_digest(c.patch) for c in changes),
        )
        for c in changes:
            counts.setdefault(c.fix_id, []).append((path, *rebuild.line_counts(c)))
    return Rebuilt(new, entries, counts, compiled)


def still_applied(change: Change, files: Mapping[str, InstalledFile], held: Held) -> bool:
    """``change`` is there already, with the same patch: in the file a process runs, as recognised
    (``files``: as run, ``as_run``), and with the patch the manifest records for it where it records one."""
    step, steps = (change.fix_id, patch_digest(change.patch)), held.manifest.steps(change.path)
    return change.fix_id in files[change.path].base.applied and (not steps or step in steps)


# -- 4. the recording ------------------------------------------------------------------------------


def manifest_last(placement: Placement, old: Manifest, warm: dict | None = None) -> list[Write]:
    """The placement's writes with the manifest last (``warm``: the stamp it records): written when
    anything else is or what it records changed; removed when nothing is applied any more."""
    manifest = placement.manifest if warm is None else replace(placement.manifest, warm=warm)
    writes = list(placement.writes)
    if writes or not manifest.same_content(old):
        if not manifest.empty:
            writes.append(Write(placement.manifest_at, manifest.to_bytes()))
        elif not old.empty:
            writes.append(Write(placement.manifest_at, None))
    return writes


def usage_notes(target: Destination, manifest: Manifest, removed: bool = False, broken: str | None = None) -> list[str]:
    """What to tell the user about a destination a process must be started with (an overlay, on
    PYTHONPATH) once it holds ``manifest``: how to use it, that it went (``removed``: this command
    removed it), or (``broken``: why) that it would not run the fixes."""
    folder = target.pythonpath
    if folder is None:
        return []
    if manifest.empty:
        return [f"removed the overlay {folder}" if removed else f"no overlay at {folder}"]
    if broken:
        return [f"the overlay {folder} would not run its fixes ({broken}): build it again (fixpack apply --overlay)"]
    return [f"the overlay is {folder}; to use it: {activation(folder)}"]


def nothing_changed(refused: Refused) -> Refused:
    """The command's error for a refused plan: the fix first, and that nothing was written."""
    who = f"{refused.fix_id}: " if refused.fix_id else ""
    return Refused(
        f"{who}{refused.message}; nothing was changed",
        fix_id=refused.fix_id,
        path=refused.path,
        details=refused.details,
        way_out=refused.way_out,  # said after it (FixpackError.said), as every error's
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
