"""The in-place destination: the installed site itself. The patched files are written where pip
put them, with their bytecode; fixpack's state (manifest, pristine copies, journal) lives beside
the dist-info; each distribution's RECORD is kept true to what is installed; the runtime check is a
distribution of its own beside the others. Every write goes through one journalled transaction
(``fixpack.installation.transaction``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from ..core.bytecode import hash_based_pyc, pyc_path
from ..core.fingerprint import sha256
from . import flock, plugin, transaction
from .destination import Destination, Held, InstalledFile, Placement, Rebuilt, Shadow, Write
from .distributions import Distribution, Environment
from .layout import JOURNAL, MANIFEST
from .manifest import Manifest
from .pip_record import rewrite_record
from .state import pristine_copy, read_file, read_manifest

__all__ = ["InPlace", "InPlaceAt"]


class InPlace:
    """Writes into site-packages (or an editable checkout), with fixpack's state beside the dist-info.

    ``roots``: the folders a write may land in, by the name the journal gives them; the state
    directory and the folder holding it are always two of them. ``dists``: the distributions
    installed there, whose files the runtime check lists."""

    where = "in this environment"
    mode = "in-place"
    pythonpath: Path | None = None  # every process of the environment runs what is applied there
    own_files = tuple(plugin.CODE)

    def __init__(
        self, state_dir: Path, roots: dict[str, Path] | None = None, dists: Sequence[Distribution] = ()
    ) -> None:
        self.state_dir = state_dir
        self.roots = {transaction.STATE: state_dir, transaction.SITE: state_dir.parent, **(roots or {})}
        self.dists = tuple(dists)

    @classmethod
    def of(cls, env: Environment) -> InPlace:
        """The environment's site, with each distribution's root (an editable one's is its checkout)."""
        found = list(env.found.values())
        return cls(env.state_dir, {f"dist:{d.name}": d.files_root for d in found}, found)

    @property
    def site(self) -> Path:
        return self.state_dir.parent

    @contextlib.contextmanager
    def locked(self, create: bool = False) -> Iterator[None]:
        with flock.locked(self.state_dir):
            yield

    def recover(self) -> str | None:
        """A note when an interrupted transaction was rolled back."""
        if transaction.recover(self.state_dir, self.roots):
            plugin.prune(self.site)
            return f"recovered an interrupted transaction from {self.state_dir / JOURNAL}"
        return None

    def discard(self) -> Path | None:
        """Set an interrupted transaction's journal aside, files as they are; where it went."""
        return transaction.discard(self.state_dir)

    def read(self) -> Held:
        """The manifest, against which the installed files are recognised; each patched file as a
        process runs it, the installed file itself; and the runtime check's files as it must find
        them (none where the manifest names a distribution that is not installed: it cannot hold then)."""
        manifest = read_manifest(self.state_dir)
        by_name = {d.name: d for d in self.dists}
        shadows = {
            path: Shadow(sha256(read_file(by_name[r.dist].file(path))), r.applied, None, None)
            for path, r in manifest.files.items()
            if r.dist in by_name
        }
        if len(shadows) < len(manifest.files):
            return Held(manifest, manifest, shadows, None)
        own = plugin.in_place(self.site, manifest, list(self.dists))
        return Held(manifest, manifest, shadows, {p: sha256(c) for p, c in own.items()})

    def place(
        self,
        files: Mapping[str, InstalledFile],
        rebuilt: Rebuilt,
        new: Manifest,
        old: Manifest,
        dists: Mapping[str, Distribution],
    ) -> Placement:
        """Targets and their bytecode, pristine copies, the runtime check's files and each
        distribution's RECORD; the manifest with those RECORDs' hashes."""
        content = rebuilt.new
        patched = {f.dist.file(path): path for path, f in files.items() if content[path] != f.current}
        targets = [Write(target, content[path]) for target, path in patched.items()]
        runtime = plugin.in_place(self.site, new, list(dists.values()))
        writes = [Write(p, c) for p, c in runtime.items() if read_file(p) != c]
        kept: dict[str, bytes] = {}
        for path, f in files.items():  # keep the release's bytes of every patched file, and only those
            keep = f.base.pristine if path in new.files else None
            if keep is not None:
                kept[path] = keep
            if keep != f.stored:
                writes.append(Write(pristine_copy(self.state_dir, path), keep, same_as=f.dist.file(path)))
        # the copies of what a distribution uninstalled since took with it: its files, its RECORD
        present = {d.dist_info.name for d in dists.values()}
        went = [p for p in old.files if p not in files and p not in new.files]
        went += [f"{name}/RECORD" for name in old.record_digests if name not in present]
        writes += [
            Write(pristine_copy(self.state_dir, p), None) for p in went if pristine_copy(self.state_dir, p).exists()
        ]
        rows = {p.relative_to(self.site).as_posix(): c for p, c in runtime.items() if c is not None}
        record_writes, digests = records_after(
            list(dists.values()), self.state_dir, new, old, {p: content[p] for p in new.files}, kept, rows
        )
        by_name = {d.name: d for d in dists.values()}
        expected = {str(by_name[r.dist].file(path)): r.applied for path, r in new.files.items()}
        expected.update({str(p): sha256(c) for p, c in runtime.items()})  # None: must stay absent
        return Placement(
            (*targets, *_bytecode(patched, rebuilt), *writes, *record_writes),
            replace(new, record_digests=digests),
            self.state_dir / MANIFEST,
            expected,
        )

    def preflight(self, writes: list[Write]) -> None:
        transaction.preflight(self.state_dir, writes, self.roots)

    def commit(self, writes: list[Write]) -> None:
        if not writes:
            return
        self.preflight(writes)
        try:
            transaction.commit(self.state_dir, writes, self.roots)
        finally:
            plugin.prune(self.site)


class InPlaceAt:
    """In place, chosen on the command line: the fixes go into the site the distributions are in
    (``site``; None: this interpreter's path)."""

    def __init__(self, site: Path | None = None) -> None:
        self.site = site
        self.where = f"in {site}" if site is not None else "in this environment"

    def open(self, env: Environment) -> Destination | None:
        return InPlace.of(env) if env.found else None


def _bytecode(patched: dict[Path, str], rebuilt: Rebuilt) -> list[Write]:
    """The hash-based .pyc of each patched module, from the code object the rebuild compiled (none
    when this Python writes no bytecode, or writes it outside the site)."""
    out = []
    for target, path in patched.items():
        code, content, pyc = rebuilt.code.get(path), rebuilt.new[path], pyc_path(str(target))
        if code is not None and content is not None and pyc is not None:
            out.append(Write(Path(pyc), hash_based_pyc(code, content)))
    return out


def records_after(
    dists: Sequence[Distribution],
    state_dir: Path,
    new: Manifest,
    old: Manifest,
    content: Mapping[str, bytes | None],
    kept: Mapping[str, bytes],
    runtime: Mapping[str, bytes],
) -> tuple[list[Write], dict[str, str]]:
    """Each installed (not editable) distribution's RECORD as pip must find it once ``new`` is
    applied: the hashes of the files fixes changed (``content``: repository path -> bytes after),
    the files they created, and, in the RECORD of the distribution whose site holds the state
    directory, fixpack's state (the pristine copies ``kept``, the manifest, the runtime check's
    files ``runtime`` by site-relative path), so that ``pip uninstall`` leaves nothing of fixpack
    behind. The pip-written RECORD is kept beside the pristine copies and written back, byte for
    byte, when the last fix goes. Returns the writes and each RECORD's hash for the manifest."""
    bases: dict[str, tuple[Distribution, bytes | None, bytes]] = {}
    for d in sorted({d.name: d for d in dists if not d.editable}.values(), key=lambda d: d.name):
        current = read_file(d.dist_info / "RECORD")
        stored = read_file(pristine_copy(state_dir, _kept_as(d)))
        as_left = stored is not None and sha256(current) == old.record_digests.get(d.dist_info.name)
        base = stored if as_left else current  # pip wrote the RECORD that is there now: it is the base
        if base is not None:
            bases[d.dist_info.name] = (d, current, base)
    owner = next((n for n, (d, _, _) in bases.items() if d.site == state_dir.parent), None)
    state_rows = {_state_row(state_dir, p): c for p, c in kept.items()}
    state_rows.update({_state_row(state_dir, _kept_as(d)): base for d, _, base in bases.values()})
    state_rows.update(runtime)  # the runtime check goes with the state when pip uninstalls
    writes, digests = [], {}
    for name, (d, current, base) in bases.items():
        if new.empty:
            record, keep = base, None
        else:
            changed = {p: content[p] for p, r in new.files.items() if r.dist == d.name}
            extra = state_rows if name == owner else {}
            unhashed = [_state_row(state_dir, MANIFEST)] if name == owner else []
            record, keep = rewrite_record(base, {**changed, **extra}, unhashed), base
            digests[name] = sha256(record) or ""
        if record != current:
            writes.append(Write(d.dist_info / "RECORD", record))
        if keep != read_file(pristine_copy(state_dir, _kept_as(d))):
            # a copy, never a link to pip's file: it is believed as it is (installation/state.py), so it is
            # fixpack's own
            writes.append(Write(pristine_copy(state_dir, _kept_as(d)), keep))
    return writes, digests


def _kept_as(d: Distribution) -> str:
    """Where a distribution's pip-written RECORD is kept among the pristine copies."""
    return f"{d.dist_info.name}/RECORD"


def _state_row(state_dir: Path, path: str) -> str:
    """A state file's path as RECORD lists it: relative to the site that holds the state directory."""
    full = pristine_copy(state_dir, path) if path != MANIFEST else state_dir / MANIFEST
    return full.relative_to(state_dir.parent).as_posix()
