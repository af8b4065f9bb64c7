"""The errors fixpack reports. Each carries the contract's exit code and, as fields, the fix and
the path it is about, so that callers never parse a message."""

from __future__ import annotations

__all__ = [
    "DONE",
    "REFUSED",
    "USAGE",
    "ENVIRONMENT",
    "INTERRUPTED",
    "INTERRUPTED_LINE",
    "FixpackError",
    "Refused",
    "UsageError",
    "EnvironmentProblem",
]

DONE, REFUSED, USAGE, ENVIRONMENT = 0, 1, 2, 3
INTERRUPTED = 130  # Ctrl-C, as a shell reports a process that SIGINT ended
INTERRUPTED_LINE = (
    "fixpack: error: interrupted (Ctrl-C); a transaction under way was rolled back, and the next fixpack "
    "command finishes any rollback left: fixpack status shows what is applied"
)


class FixpackError(Exception):
    """A failure to report in one line; ``exit_code`` follows the exit codes of docs/reference/exit-codes.md."""

    exit_code = REFUSED

    def __init__(
        self,
        message: str,
        *,
        fix_id: str | None = None,
        path: str | None = None,
        details: str = "",
        line: int | None = None,
        way_out: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.fix_id = fix_id  # the fix the failure is about, when there is one
        self.path = path  # the file (repository path, or a path on disk) it is about
        self.line = line  # the line of ``path`` it is about (1-based), when known
        self.details = details  # extra text (a diff, a list), printed after the line
        self.way_out = way_out  # what to do next, where the message itself does not say

    def __str__(self) -> str:
        return self.message

    @property
    def said(self) -> str:
        """The one line a user reads: the message, then the way out when it is separate."""
        return f"{self.message}. {self.way_out}" if self.way_out else self.message


class Refused(FixpackError):
    """Drift, commit mismatch, a change that does not apply or compile: nothing was changed."""

    exit_code = REFUSED


class UsageError(FixpackError):
    """Unknown fix or profile, bad arguments, an invalid fix module or profile."""

    exit_code = USAGE


class EnvironmentProblem(FixpackError):
    """Distribution not installed, target not writable, lock not obtained, unrecoverable journal."""

    exit_code = ENVIRONMENT
