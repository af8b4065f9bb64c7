"""``fixpack record``: turn a maintainer's hand edits of the installed files into a new fix module.

patch-package's workflow for Python. Which files changed: for a pip install, those whose bytes no
longer hash as RECORD says (and files RECORD does not list); for an editable install, those that
differ from the pristine source. What they were: the ``--source DIST=DIR`` tree, or, without one,
the editable install's git checkout (``HEAD``). RECORD keeps only hashes, so a pip-installed file
edited by hand needs ``--source``; its RECORD hash then proves the source is the installed build.
A file the pristine tree lacks is recorded as a new one only if it is Python source.

Edits fixpack made itself are not the maintainer's: a file the manifest says fixpack patched is
compared with what fixpack made of it (the pristine bytes with the recorded fixes applied), so the
new fix holds only the edits on top, and its fingerprints are taken at the end of the pack's chain.
The edit's hunks are written against the release's pristine bytes (a three-way merge takes the
fixes' changes out), with git's ``index`` line, unless it sits on a fix's lines: then they are
taken on top of the fixes and the fix is required. Only the files the profile's fixes touch and
Python files are compared: a binary a copied site lacks is not an edit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ....cookbook.catalog import Catalog
from ....cookbook.fix_module import FIX_ID, load_fix, skeleton
from ....core import patch, rebuild, recognise
from ....core.fingerprint import of, sha256
from ....core.plan import pack_chain
from ....errors import Refused, UsageError
from ....installation.distributions import Distribution, Environment
from ....installation.files import write_output
from ....installation.inplace import InPlace
from ....installation.manifest import Manifest
from ....installation.state import pristine_copy
from ....models import Change, FileEntry, FileState, Fingerprint, Profile
from ...install.pipeline import open_state
from .. import history
from . import lock


@dataclass
class Recorded:
    fix_dir: Path
    files: list[tuple[str, int, int]]  # path, lines added, removed
    on_top_of: list[str]  # fixes the diff of an edited file is taken on (the edit sits on one of theirs)
    notes: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)  # the fixes whose lines the edit sits on


@dataclass(frozen=True, slots=True)
class _Edit:
    path: str
    pristine: bytes | None
    base: bytes | None  # what the file was before the maintainer: pristine plus fixpack's fixes
    current: bytes | None
    applied: tuple[Change, ...] = ()  # fixpack's changes that made ``base``


def _skipped(rel: str) -> bool:
    """Bytecode, hidden files (fixpack's temporaries) and the build's ``_version.py`` are never an edit."""
    parts = rel.split("/")
    generated = len(parts) == 2 and parts[1] == "_version.py"
    return (
        generated or "__pycache__" in parts or rel.endswith((".pyc", ".pyo")) or any(p.startswith(".") for p in parts)
    )


def _walk(root: Path, package: str) -> set[str]:
    top = root / package
    return {p.relative_to(root).as_posix() for p in top.rglob("*") if p.is_file()} if top.is_dir() else set()


def _record_paths(dist: Distribution) -> list[str]:
    return [path for path in dist.record_hashes() if path.startswith(f"{dist.package}/")]


class _Source:
    """A distribution's pristine bytes: a ``--source`` tree, the editable checkout's git HEAD, or none."""

    def __init__(self, dist: Distribution, tree: Path | None) -> None:
        self.dist, self.tree = dist, tree
        head = history.git(["rev-parse", "HEAD"], dist.files_root) if dist.editable and tree is None else None
        self.git = head is not None and head.returncode == 0

    @property
    def known(self) -> bool:
        return self.tree is not None or self.git

    def read(self, path: str) -> bytes | None:
        if self.tree is not None:
            target = self.tree / path
            return target.read_bytes() if target.is_file() else None
        shown = history.git(["show", f"HEAD:./{path}"], self.dist.files_root)
        return shown.stdout if shown.returncode == 0 else None

    def candidates(self) -> list[str]:
        """Paths that may hold an edit, before fixpack's own changes are told apart."""
        dist, pkg = self.dist, self.dist.package
        if not dist.editable:
            listed = _record_paths(dist)
            changed = [p for p in listed if dist.record_hash(p) and sha256(_read(dist, p)) != dist.record_hash(p)]
            extra = _walk(dist.files_root, pkg) - set(listed)  # files pip did not install
            return sorted({*changed, *extra})
        if self.tree is not None:
            paths = _walk(dist.files_root, pkg) | _walk(self.tree, pkg)
            return sorted(p for p in paths if _read(dist, p) != self.read(p))
        root = dist.files_root
        if not self.git:
            raise Refused(
                f"{dist.name} is an editable install at {root}, not a git checkout: give --source {dist.name}=DIR"
            )
        diffed = history.git(["diff", "--name-only", "--relative", "-z", "HEAD", "--", pkg], root).stdout
        new = history.git(["ls-files", "-z", "--others", "--exclude-standard", "--", pkg], root).stdout
        return sorted({p.decode() for p in (diffed + new).split(b"\0") if p})


def _read(dist: Distribution, path: str) -> bytes | None:
    return _read_file(dist.file(path))


def _read_file(target: Path) -> bytes | None:
    return target.read_bytes() if target.is_file() else None


def _fixpacks_own(path: str, current: bytes | None, rec: FileEntry | None, chain: list[Change]) -> bool:
    """The file is exactly as fixpack left it (per the manifest, or per the locked chain if it is gone)."""
    if rec is not None:
        return sha256(current) == rec.applied
    if recognise.pristine_hash(chain) is None:
        return False
    return recognise.base_of(path, current, None, chain).state is FileState.APPLIED


def _expected_pristine(dist: Distribution, path: str, rec: FileEntry | None, chain: list[Change]) -> str | None:
    if rec is not None:
        return rec.pristine
    if not dist.editable and dist.record_hash(path):
        return dist.record_hash(path)
    return recognise.pristine_hash(chain)


def _edits(
    catalog: Catalog, profile: Profile, dist: Distribution, source: _Source, manifest: Manifest, state_dir: Path
) -> tuple[list[_Edit], list[str]]:
    """The maintainer's edits in one distribution, and the paths whose pristine bytes are unknown."""
    edits, unknown = [], []
    touched = {c.path for fid in profile.pack for c in catalog.fixes[fid].changes.get(profile.release, ())}
    for path in source.candidates():
        if _skipped(path) or not (path in touched or path.endswith(".py")):
            continue  # a file no fix touches that is not Python (a binary a copied site lacks) is no edit
        current = _read(dist, path)
        rec = manifest.files.get(path)
        chain = pack_chain(catalog.fixes, profile, path)
        if _fixpacks_own(path, current, rec, chain):
            continue
        listed = dist.record_hash(path) is not None
        kept = _read_file(pristine_copy(state_dir, path))  # apply kept the release's bytes of what it patched
        if source.known:
            pristine = source.read(path)
        elif rec is not None and kept is not None and sha256(kept) == rec.pristine:
            pristine = kept
        elif listed or rec is not None:
            unknown.append(path)
            continue
        else:
            pristine = None
        if pristine is None and rec is None and not path.endswith(".py"):
            continue  # a build's by-product (an in-place extension, a cache), not an authored file
        want = _expected_pristine(dist, path, rec, chain)
        if want is not None and sha256(pristine) != want:
            where = f"--source {source.tree}" if source.tree else f"git HEAD of {dist.files_root}"
            raise Refused(
                f"{path}: the pristine file from {where} is not the one installed "
                f"(sha256 {sha256(pristine) or 'absent'}, expected {want}): give the release's tree"
            )
        applied = [_change_of(catalog, manifest, fid, path) for fid in (rec.fixes if rec else ())]
        base = rebuild.build(pristine, applied)
        if base != current:
            edits.append(_Edit(path, pristine, base, current, tuple(applied)))
    return edits, unknown


def _change_of(catalog: Catalog, manifest: Manifest, fix_id: str, path: str) -> Change:
    fix = catalog.fixes.get(fix_id)
    change = next((c for c in (fix.changes.get(manifest.release or "", ()) if fix else ()) if c.path == path), None)
    if change is None:
        raise Refused(f"{path}: the manifest says {fix_id} patched it, but this cookbook has no such change")
    return change


def fingerprint_at_end(catalog: Catalog, profile: Profile, path: str, pristine: bytes | None, text: str) -> Fingerprint:
    """A new fix's change to ``path`` fingerprinted as ``fixpack lock`` will take it, with the fix at
    the end of the pack (after every other fix, the opt-ins included)."""
    before = rebuild.build(pristine, pack_chain(catalog.fixes, profile, path))
    (fd,) = patch.split_files(text)
    try:
        after = patch.apply(fd, before)
    except patch.HunkFailed as exc:
        raise Refused(
            f"{path}: the change does not apply after the pack's other fixes (the opt-ins included): {exc}",
            details=exc.nearest,
        ) from None
    return Fingerprint(of(pristine), of(before), of(after))


def new_fix_dir(catalog: Catalog, fix_id: str) -> Path:
    """Where a new fix ``fix_id`` goes: refused unless the id is well formed and not taken."""
    if not FIX_ID.match(fix_id):
        raise UsageError(f"fix id {fix_id!r} must be lower-case-with-dashes")
    fix_dir = catalog.root / "fixes" / fix_id
    if fix_id in catalog.fixes or fix_dir.exists():
        raise UsageError(f"fix {fix_id!r} already exists ({fix_dir})")
    return fix_dir


def record(
    catalog: Catalog, fix_id: str, profile_name: str, site: Path | None = None, sources: dict[str, Path] | None = None
) -> Recorded:
    sources = sources or {}
    fix_dir = new_fix_dir(catalog, fix_id)
    profile = catalog.profile(profile_name)
    stray = sorted(set(sources) - {p.dist for p in profile.pins})
    if stray:
        raise UsageError(f"--source {', '.join(stray)}: profile {profile.name} pins no such distribution")
    env = Environment.read({p.dist: p.package for p in profile.pins}, site)
    dists = {p.dist: env.get(p.dist) for p in profile.pins}
    notes: list[str] = []
    destination = InPlace.of(env)
    with destination.locked():
        manifest = open_state(destination, catalog, notes).manifest
    if manifest.release not in (None, profile.release):
        raise Refused(f"this environment has fixes of release {manifest.release} applied, not {profile.release}")

    edits, unknown = [], []
    for pin in profile.pins:
        source = _Source(dists[pin.dist], sources.get(pin.dist))
        found, missing = _edits(catalog, profile, dists[pin.dist], source, manifest, env.state_dir)
        edits += found
        unknown += [f"{p} ({pin.dist})" for p in missing]
    if unknown:
        raise Refused(
            "the pristine bytes of edited files are unknown (RECORD keeps only their hashes): "
            f"{', '.join(unknown)}; give --source DIST=DIR, a tree of the release"
        )
    if not edits:
        raise Refused("no edits found: every installed file is pristine or as fixpack left it")

    patches: dict[str, str] = {}
    on_top_of: list[str] = []
    requires: list[str] = []
    for e in edits:
        patches[e.path], sits_on = _patch(e)
        if sits_on:
            on_top_of += [c.fix_id for c in e.applied]
            requires += sits_on
    prints = {e.path: fingerprint_at_end(catalog, profile, e.path, e.pristine, patches[e.path]) for e in edits}
    on_top_of, requires = list(dict.fromkeys(on_top_of)), list(dict.fromkeys(requires))
    fix_dir.mkdir(parents=True)
    write_output(fix_dir / "fix.toml", skeleton(fix_id, profile.release, on_top_of, requires).encode())
    write_output(fix_dir / f"{profile.release}.patch", "".join(patches.values()).encode(patch.ENC, patch.ERRORS))
    fix = load_fix(fix_dir)
    lock.write(Catalog({**catalog.fixes, fix_id: fix}, catalog.profiles, catalog.root), profile, {fix_id: prints})
    files = [(c.path, *rebuild.line_counts(c)) for c in fix.changes[profile.release]]
    notes.append(f"add {fix_id!r} to the pack of profiles/{profile.name}.toml (its fingerprints assume the end)")
    return Recorded(fix_dir, files, on_top_of, notes, requires)


def _patch(edit: _Edit) -> tuple[str, list[str]]:
    """The edit's diff against the pristine bytes when the fixes' changes merge out of it, else on
    top of them; and the fixes whose lines it sits on (none in the first case)."""
    if not edit.applied:
        return patch.render(edit.path, edit.pristine, edit.current, blobs=True), []
    own = _merged(edit.pristine, edit.base, edit.current)
    if own is not None:
        proposed = patch.render(edit.path, edit.pristine, own, blobs=True)
        try:  # the pristine-based hunks must give the edited file back on top of the fixes
            if patch.apply(patch.split_files(proposed)[0], edit.base) == edit.current:
                return proposed, []
        except patch.HunkFailed:
            pass
    sits_on = []
    for change in edit.applied:
        others = [c for c in edit.applied if c is not change]
        try:
            without = rebuild.build(edit.pristine, others)
        except Refused:
            without = None
        if _merged(without, edit.base, edit.current) is None:
            sits_on.append(change.fix_id)
    return patch.render(edit.path, edit.base, edit.current, blobs=True), sits_on or [c.fix_id for c in edit.applied]


def _merged(onto: bytes | None, base: bytes | None, edited: bytes | None) -> bytes | None:
    """``git merge-file``: the change from ``base`` to ``edited`` made on ``onto``; None on a conflict."""
    if onto is None or base is None or edited is None:
        return None
    done = history.merge(onto, base, edited, "pristine", "edit")
    return done.content if done is not None and not done.conflicts else None
