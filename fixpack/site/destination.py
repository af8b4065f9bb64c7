"""Where an apply's writes go. The plan, the recognised files and the rebuilt bytes are the same for
every destination; a destination says what is applied there now, whether it still holds it, and
turns the rebuilt files into its own write set, which it checks and commits all or nothing.

Two implement it: ``fixpack.site.inplace.InPlace``, the installed site itself (with pristine
copies, RECORD kept true and the runtime check beside the dist-info), and
``fixpack.site.overlay.Overlay``, a folder a process puts first on ``PYTHONPATH`` (patched copies
of the modules, the import hook, the runtime check inside it). The install commands
(``fixpack.commands.install``) are written once, over this protocol."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..core import recognise
from ..models import Change, FileRecord
from .distributions import Distribution, Environment
from .manifest import Manifest
from .transaction import Write

__all__ = ["Destination", "InstalledFile", "Rebuilt", "Rows", "Stamp", "Write"]

Counts = dict[str, list[tuple[str, int, int]]]  # fix id -> (path, lines added, removed) per file
# (repository path, sha256 recorded, sha256 read now) per patched file: what fixpack.runtime.fixset judges
Rows = list[tuple[str, str | None, str | None]]
# The warm stamp of the all-applied state a write set leaves, from its targets (file -> hash after)
Stamp = Callable[[dict[str, str | None]], "dict | None"]


@dataclass
class InstalledFile:
    """One file the plan touches, as it is installed, and what it was recognised as."""

    path: str
    dist: Distribution
    current: bytes | None
    base: recognise.Base
    stored: bytes | None  # the pristine copy kept in the state directory, if any


@dataclass
class Rebuilt:
    """What a plan makes of the files it touches."""

    new: dict[str, bytes | None]  # path -> new content (None: removed)
    records: dict[str, FileRecord]  # the manifest's record of each file a fix changes
    counts: Counts
    code: dict[str, bytes]  # each patched module's marshalled code object, when bytecode is written


class Destination(Protocol):
    state_dir: Path
    where: str  # how messages name it: "in this environment", "in the overlay DIR"

    def locked(self, create: bool = False) -> contextlib.AbstractContextManager[None]:
        """Its lock (``create``: make the folder that holds it first, for a writing run)."""
        ...

    def recover(self) -> str | None:
        """Roll back or finish an interrupted commit; a note when there was one."""
        ...

    def admit(self, env: Environment, known: Container[str], cookbook: Path | str) -> None:
        """Refuse (Refused) to be applied to over what ``env`` has applied elsewhere."""
        ...

    def manifest(self, known: Container[str], cookbook: Path | str) -> Manifest:
        """What is applied there now."""
        ...

    def recorded(self, manifest: Manifest) -> Manifest:
        """What the installed files are recognised against: the manifest where fixes patch them in
        place, nothing where they are never patched (an overlay shadows them)."""
        ...

    def holds(self, manifest: Manifest, dists: Mapping[str, Distribution]) -> bool:
        """Every file it was left with is as it was left, its own files (the runtime check, the
        hook) included: only hashes read."""
        ...

    def still_applied(self, change: Change, files: Mapping[str, InstalledFile], manifest: Manifest) -> bool:
        """``change`` is there already, with the same patch, in a file as it was left."""
        ...

    def rows(self, files: dict[str, InstalledFile], manifest: Manifest, dists: Mapping[str, Distribution]) -> Rows:
        """Each patched file's recorded and current hash, for the digest rule; marks in ``files``
        the ones that changed there since, so that their fixes read as drifted."""
        ...

    def writes(
        self,
        files: Mapping[str, InstalledFile],
        rebuilt: Rebuilt,
        new: Manifest,
        old: Manifest,
        dists: Mapping[str, Distribution],
        stamp: Stamp | None = None,
    ) -> list[Write]:
        """The write set that leaves it holding ``new``: the files, their bytecode, its own files
        and the manifest (with ``stamp``'s warm stamp when anything is written)."""
        ...

    def check(self, writes: list[Write]) -> None:
        """Refuse, before any write, what the commit could not do."""
        ...

    def commit(self, writes: list[Write]) -> None:
        """``writes``, all or nothing."""
        ...

    def notes(self, manifest: Manifest) -> list[str]:
        """What to tell the user about it once it holds ``manifest`` (how to use it, that it went)."""
        ...
