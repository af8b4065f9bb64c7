"""Where an apply's writes go. The pipeline (``fixpack.commands.install.pipeline``) decides: it
recognises the files, rebuilds them, judges what is applied and whether it still holds. A
destination only reads what it holds and places the decided files: it turns the rebuilt files into
its own write set, which it checks and commits all or nothing.

Two implement it: ``fixpack.installation.inplace.InPlace``, the installed site itself (with pristine
copies, RECORD kept true and the runtime check beside the dist-info), and
``fixpack.installation.overlay.Overlay``, a folder a process puts first on ``PYTHONPATH`` (patched copies
of the modules, the import hook, the runtime check inside it). The install commands
(``fixpack.commands.install``) are written once, over this protocol.

A command never asks which one it has. The command line chooses once (``Where``: ``InPlaceAt`` or
``OverlayAt``), and what differs is data the destination reads or declares: what a process runs of
each patched file (``Held.shadows``: in place, the installed file itself; in an overlay, its copy
over the installed file), what the installed files are recognised against, the folder a process
puts on ``PYTHONPATH`` to run the fixes (none in place), its mode word and its own files. The
standard-library side (``fixpack.installation.warm``, ``fixpack.runtime``) reads the same from its own
records: the warm stamp's ``exec_overlay`` and the runtime index's ``mode`` and entries; a new
destination writes those records as these two do.

The records it exchanges with the pipeline are frozen: built once, never filled in later."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..core import recognise
from ..models import FileEntry
from .distributions import Distribution, Environment
from .manifest import Manifest
from .transaction import Write

__all__ = ["Destination", "Held", "InstalledFile", "NO_COPY", "Placement", "Rebuilt", "Shadow", "Where", "Write"]

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
    """What a process runs of one patched file: its hash now and as the destination left it; and,
    where it is a copy over the installed file (an overlay's), that file and the hash it was built
    over. In place, the file a process runs is the installed file itself: ``original`` is None."""

    copy: str | None  # sha256 of the file a process runs, read now (None: absent)
    built: str | None  # sha256 it had when the destination was left (an overlay: as its index lists it)
    original: Path | None  # the installed file a copy shadows (None: the running file is the installed one)
    pristine: str | None  # sha256 of that installed file when the copy was built over it


NO_COPY = Shadow(None, None, None, None)  # a patched file the destination did not list


@dataclass(frozen=True)
class Held:
    """What a destination holds, as read under its lock."""

    manifest: Manifest
    # What the installed files are recognised against: the manifest where the fixes are in them
    # (in place); the release's (an empty manifest) where copies shadow them (an overlay).
    installed: Manifest
    # By repository path, what a process runs of each patched file.
    shadows: Mapping[str, Shadow]
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
    state_dir: Path  # fixpack's state there; its parent holds what processes run (the site, the overlay)
    where: str  # how messages name it: "in this environment", "in the overlay DIR"
    mode: str  # the runtime index's and the SBOM's word for it: "in-place", "overlay"
    pythonpath: Path | None  # the folder a process puts first on PYTHONPATH to run the fixes (None: none)
    own_files: tuple[str, ...]  # what it adds for every process (the runtime check, a hook), under state_dir.parent

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


class Where(Protocol):
    """The destination a command line chose, before the environment is read: where the
    distributions are looked for, and the destination made over them."""

    site: Path | None  # the site the distributions are read from (None: this interpreter's path)
    where: str  # how messages name it before it is opened: "in SITE", "in the overlay DIR"

    def open(self, env: Environment) -> Destination | None:
        """The destination over ``env``; None where it has nothing to stand on (in place, with none
        of the distributions installed)."""
        ...
