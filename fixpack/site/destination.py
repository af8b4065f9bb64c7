"""Where an apply's writes go. A destination takes the lock, recovers an interrupted transaction
and commits a write set all or nothing; the plan and the bytes are the same for every destination.

Today there is one: :class:`InPlace`, the installed site itself."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from . import transaction
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
    """Writes into site-packages (or an editable checkout), with fixpack's state beside the dist-info."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with transaction.locked(self.state_dir):
            yield

    def recover(self) -> str | None:
        """A note when an interrupted transaction was rolled back."""
        if transaction.recover(self.state_dir):
            return f"recovered an interrupted transaction from {self.state_dir / JOURNAL}"
        return None

    def check(self, writes: list[Write]) -> None:
        """Refuse, before any write, what the commit could not do."""
        transaction.check_writable([w.path for w in writes], self.state_dir)

    def commit(self, writes: list[Write]) -> None:
        if writes:
            self.check(writes)
            transaction.commit(self.state_dir, writes)
