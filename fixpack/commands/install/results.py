"""What the site commands return: data for the CLI to render, never printed here."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...core.identity import FixSet
from ...errors import FixpackError
from ...installation.distributions import Distribution
from ...installation.manifest import Manifest
from ...models import Action, FileState
from ...runtime import fixset

__all__ = ["FixResult", "Result", "StatusResult"]


@dataclass(frozen=True)
class FixResult:
    id: str
    action: Action
    reason: str | None = None
    files: list[tuple[str, int, int]] = field(default_factory=list)  # path, lines added, removed
    pulled_in_by: str | None = None


@dataclass
class Result:
    """An apply or revert: one line per fix, notes worth a line (commits, recovery), and the error.

    Left mutable on purpose: a command fills in its own result as it goes (notes as they are said,
    the fixes once judged, the error where it stops); it never crosses into a destination."""

    command: str
    profile: str | None
    fixes: list[FixResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: FixpackError | None = None
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def exit_code(self) -> int:
        return 0 if self.error is None else self.error.exit_code


@dataclass
class StatusResult:
    profile: str | None
    distributions: list[Distribution]
    fixes: list[tuple[str, FileState | str]]  # id, state ("partial" is a fix's state, not a file's)
    notes: list[str] = field(default_factory=list)
    manifest: Manifest | None = None
    drifted: list[str] = field(default_factory=list)  # patched files that do not hold their hashes now
    runtime_refused: str | None = None  # why every vLLM process would refuse the runtime index

    @property
    def fix_set(self) -> FixSet | None:
        """The identity of what is applied there, vouched for only while every patched file holds
        its recorded hash as read now (``fixpack.runtime.fixset``) and the runtime check would take
        its index; None otherwise or when nothing is."""
        applied = None if self.manifest is None or self.runtime_refused else self.manifest.fix_set
        return None if applied is None else fixset.vouched(applied, self.drifted)

    @property
    def no_fix_set(self) -> str | None:
        """Why fixes are applied but no digest is reported: ``2 files drifted: a.py, b.py``, or the
        runtime check's refusal."""
        if not self.manifest or self.manifest.empty:
            return None
        if self.runtime_refused:
            return f"every vLLM process would refuse to start: {self.runtime_refused}; run fixpack apply again"
        return fixset.reason(self.drifted) if self.drifted else None
