"""The in-place destination: the installed site itself. The patched files are written where pip
put them, with their bytecode; fixpack's state (manifest, pristine copies, journal) lives beside
the dist-info; each distribution's RECORD is kept true to what is installed; the runtime check is a
distribution of its own beside the others. Every write goes through one journalled transaction
(``fixpack.site.transaction``)."""

from __future__ import annotations

import contextlib
from collections.abc import Container, Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from ..core.bytecode import hash_based_pyc, pyc_path
from ..core.fingerprint import patch_digest, sha256
from ..models import Change
from . import lock, plugin, transaction
from .destination import InstalledFile, Rebuilt, Rows, Stamp, Write
from .distributions import Distribution, Environment
from .layout import JOURNAL, MANIFEST
from .manifest import Manifest
from .record import records_after
from .state import pristine_copy, read_file, read_manifest

__all__ = ["InPlace"]


class InPlace:
    """Writes into site-packages (or an editable checkout), with fixpack's state beside the dist-info.

    ``roots``: the folders a write may land in, by the name the journal gives them; the state
    directory and the folder holding it are always two of them."""

    where = "in this environment"

    def __init__(self, state_dir: Path, roots: dict[str, Path] | None = None) -> None:
        self.state_dir = state_dir
        self.roots = {transaction.STATE: state_dir, transaction.SITE: state_dir.parent, **(roots or {})}

    @classmethod
    def of(cls, env: Environment) -> InPlace:
        """The environment's site, with each distribution's root (an editable one's is its checkout)."""
        return cls(env.state_dir, {f"dist:{d.name}": d.files_root for d in env.found.values()})

    @property
    def site(self) -> Path:
        return self.state_dir.parent

    @contextlib.contextmanager
    def locked(self, create: bool = False) -> Iterator[None]:
        with lock.locked(self.state_dir):
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

    def admit(self, env: Environment, known: Container[str], cookbook: Path | str) -> None:
        return None  # what is applied here is this destination's own state

    def manifest(self, known: Container[str], cookbook: Path | str) -> Manifest:
        return read_manifest(self.state_dir, known, cookbook)

    def recorded(self, manifest: Manifest) -> Manifest:
        return manifest

    def holds(self, manifest: Manifest, dists: Mapping[str, Distribution]) -> bool:
        for path, record in manifest.files.items():
            dist = dists.get(record.dist)
            if dist is None or sha256(read_file(dist.file(path))) != record.applied:
                return False
        wanted = plugin.in_place(self.site, manifest, list(dists.values()))
        return all(read_file(p) == c for p, c in wanted.items())

    def still_applied(self, change: Change, files: Mapping[str, InstalledFile], manifest: Manifest) -> bool:
        if change.fix_id not in files[change.path].base.applied:
            return False
        steps = manifest.steps(change.path)
        return not steps or (change.fix_id, patch_digest(change.patch)) in steps

    def rows(self, files: dict[str, InstalledFile], manifest: Manifest, dists: Mapping[str, Distribution]) -> Rows:
        """The patched files as installed: ``files`` recognised them already (read once)."""
        out: Rows = []
        for path, record in manifest.files.items():
            f, dist = files.get(path), dists.get(record.dist)
            if f is not None:
                current = f.current
            else:  # applied, but not among the files the fixes asked about touch
                current = read_file(dist.file(path)) if dist is not None else None
            out.append((path, record.applied, sha256(current)))
        return out

    def writes(
        self,
        files: Mapping[str, InstalledFile],
        rebuilt: Rebuilt,
        new: Manifest,
        old: Manifest,
        dists: Mapping[str, Distribution],
        stamp: Stamp | None = None,
    ) -> list[Write]:
        """Targets and their bytecode, pristine copies, the runtime check's files, each
        distribution's RECORD, and the manifest (with the warm stamp when anything is written)."""
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
        rows = {p.relative_to(self.site).as_posix(): c for p, c in runtime.items() if c is not None}
        record_writes, records = records_after(
            list(dists.values()), self.state_dir, new, old, {p: content[p] for p in new.files}, kept, rows
        )
        writes += record_writes
        new = replace(new, records=records)
        if (targets or writes) and stamp is not None and not new.empty:
            by_name = {d.name: d for d in dists.values()}
            after = {str(by_name[r.dist].file(path)): r.applied for path, r in new.files.items()}
            after.update({str(p): sha256(c) for p, c in runtime.items()})  # None: must stay absent
            new = replace(new, warm=stamp(after))
        if targets or writes or not new.same_content(old):
            manifest = None if new.empty else new.to_bytes()
            if manifest is not None or (self.state_dir / MANIFEST).exists():
                writes.append(Write(self.state_dir / MANIFEST, manifest))
        return [*targets, *_bytecode(patched, rebuilt), *writes]

    def check(self, writes: list[Write]) -> None:
        transaction.check(self.state_dir, writes, self.roots)

    def commit(self, writes: list[Write]) -> None:
        if not writes:
            return
        self.check(writes)
        try:
            transaction.commit(self.state_dir, writes, self.roots)
        finally:
            plugin.prune(self.site)

    def notes(self, manifest: Manifest) -> list[str]:
        return []


def _bytecode(patched: dict[Path, str], rebuilt: Rebuilt) -> list[Write]:
    """The hash-based .pyc of each patched module, from the code object the rebuild compiled (none
    when this Python writes no bytecode, or writes it outside the site)."""
    out = []
    for target, path in patched.items():
        code, content, pyc = rebuilt.code.get(path), rebuilt.new[path], pyc_path(str(target))
        if code is not None and content is not None and pyc is not None:
            out.append(Write(Path(pyc), hash_based_pyc(code, content)))
    return out
