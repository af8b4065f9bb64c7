"""Where an apply's writes go. The pipeline (``fixpack.commands.install.pipeline``) decides: it
recognises the files, rebuilds them, judges what is applied and whether it still holds. A
destination only reads what it holds and places the decided files: it turns the rebuilt files into
its own write set, which it checks and commits all or nothing.

Two implement it: ``fixpack.site.inplace.InPlace``, the installed site itself (with pristine
copies, RECORD kept true and the runtime check beside the dist-info), and
``fixpack.site.overlay.Overlay``, a folder a process puts first on ``PYTHONPATH`` (patched copies
of the modules, the import hook, the runtime check inside it). The install commands
(``fixpack.commands.install``) are written once, over this protocol.

The records it exchanges with the pipeline are frozen: built once, never filled in later."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..core import recognise
from ..models import FileEntry
from .distributions import Distribution
from .manifest import Manifest
from .transaction import Write

__all__ = ["Destination", "Held", "InstalledFile", "NO_COPY", "Placement", "Rebuilt", "Shadow", "Write"]

Counts = dict[str, list[tuple[str, int, int]]]  # fix id -> (path, lines added, removed) per file


@dataclass(frozen=True)
class InstalledFile:
    """One file the plan touches, as it is installed, and what it was recognised as."""

    path: str
    dist: Distribution
    current: bytes | None
    base: recognise.Base
    stored: bytes | None  # the pristine copy kept in the state directory, if any


@dataclass(frozen=True)
class Rebuilt:
    """What a plan makes of the files it touches."""

    new: dict[str, bytes | None]  # path -> new content (None: removed)
    entries: dict[str, FileEntry]  # the manifest's entry for each file a fix changes
    counts: Counts
    code: dict[str, bytes]  # each patched module's marshalled code object, when bytecode is written


@dataclass(frozen=True)
class Shadow:
    """An overlay's copy of one installed file: as its index lists it, and its hash as read now."""

    copy: str | None  # sha256 of the overlay's copy now (None: absent)
    built: str | None  # sha256 of the copy as the index says it was built
    original: Path | None  # the installed file it shadows
    pristine: str | None  # sha256 of the original the overlay was built over


NO_COPY = Shadow(None, None, None, None)  # a file the overlay's index does not list


@dataclass(frozen=True)
class Held:
    """What a destination holds, as read under its lock."""

    manifest: Manifest
    # By repository path, the overlay's copy of each patched file; None where the fixes patch the
    # installed files themselves (in place), which are then recognised against the manifest.
    shadows: Mapping[str, Shadow] | None
    # The hash each of the destination's own files (the runtime check, the hook) must have for it
    # to hold the manifest (None: absent); None when it cannot hold it (a distribution it names is
    # not installed).
    own: Mapping[Path, str | None] | None


@dataclass(frozen=True)
class Placement:
    """The decided files as a destination places them: its writes (the manifest aside), the
    manifest as it will be recorded there, where that goes, and the hash every file it leaves must
    have (the warm stamp's targets)."""

    writes: tuple[Write, ...]
    manifest: Manifest
    manifest_at: Path
    expected: Mapping[str, str | None]


class Destination(Protocol):
    state_dir: Path
    where: str  # how messages name it: "in this environment", "in the overlay DIR"

    def locked(self, create: bool = False) -> contextlib.AbstractContextManager[None]:
        """Its lock (``create``: make the folder that holds it first, for a writing run)."""
        ...

    def recover(self) -> str | None:
        """Roll back or finish an interrupted commit; a note when there was one."""
        ...

    def read(self) -> Held:
        """What it holds now."""
        ...

    def place(
        self,
        files: Mapping[str, InstalledFile],
        rebuilt: Rebuilt,
        new: Manifest,
        old: Manifest,
        dists: Mapping[str, Distribution],
    ) -> Placement:
        """The writes that leave it holding ``new``: the files, their bytecode and its own files."""
        ...

    def preflight(self, writes: list[Write]) -> None:
        """Refuse, before any write, what the commit could not do."""
        ...

    def commit(self, writes: list[Write]) -> None:
        """``writes``, all or nothing."""
        ...
