"""Where an apply's writes go. A destination takes the lock, recovers an interrupted transaction
and commits a write set all or nothing; the plan and the bytes are the same for every destination.

:class:`InPlace` is the installed site itself; ``fixpack.site.overlay.Overlay`` is a folder beside
it that a process puts on ``PYTHONPATH``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from . import lock, plugin, transaction
from .distributions import Environment
from .layout import JOURNAL
from .transaction import Write

__all__ = ["Destination", "InPlace", "Write"]


class Destination(Protocol):
    state_dir: Path

    def locked(self) -> contextlib.AbstractContextManager[None]: ...

    def recover(self) -> str | None: ...

    def check(self, writes: list[Write]) -> None: ...

    def commit(self, writes: list[Write]) -> None: ...


class InPlace:
    """Writes into site-packages (or an editable checkout), with fixpack's state beside the dist-info.

    ``roots``: the folders a write may land in, by the name the journal gives them; the state
    directory and the folder holding it are always two of them."""

    def __init__(self, state_dir: Path, roots: dict[str, Path] | None = None) -> None:
        self.state_dir = state_dir
        self.roots = {transaction.STATE: state_dir, transaction.SITE: state_dir.parent, **(roots or {})}

    @classmethod
    def of(cls, env: Environment) -> InPlace:
        """The environment's site, with each distribution's root (an editable one's is its checkout)."""
        return cls(env.state_dir, {f"dist:{d.name}": d.files_root for d in env.found.values()})

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with lock.locked(self.state_dir):
            yield

    def recover(self) -> str | None:
        """A note when an interrupted transaction was rolled back."""
        if transaction.recover(self.state_dir, self.roots):
            plugin.prune(self.state_dir.parent)
            return f"recovered an interrupted transaction from {self.state_dir / JOURNAL}"
        return None

    def discard(self) -> Path | None:
        """Set an interrupted transaction's journal aside, files as they are; where it went."""
        return transaction.discard(self.state_dir)

    def check(self, writes: list[Write]) -> None:
        """Refuse, before any write, what the commit could not do."""
        transaction.check(self.state_dir, writes, self.roots)

    def commit(self, writes: list[Write]) -> None:
        """``writes``, all or nothing."""
        if not writes:
            return
        self.check(writes)
        try:
            transaction.commit(self.state_dir, writes, self.roots)
        finally:
            plugin.prune(self.state_dir.parent)
