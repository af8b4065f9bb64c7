"""The errors fixpack reports, each carrying the exit code of the contract."""

from __future__ import annotations

DONE, REFUSED, USAGE, ENVIRONMENT = 0, 1, 2, 3


class FixpackError(Exception):
    """A failure to report in one line; ``exit_code`` follows DESIGN.md's contract."""

    exit_code = REFUSED

    def __init__(self, message: str, *, details: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.details = details  # optional extra text (a diff, a list), printed after the line


class Refused(FixpackError):
    """Drift, commit mismatch, a change that does not apply or compile: nothing was changed."""

    exit_code = REFUSED


class UsageError(FixpackError):
    """Unknown fix or profile, bad arguments, an invalid fix module or profile."""

    exit_code = USAGE


class EnvironmentProblem(FixpackError):
    """Distribution not installed, target not writable, lock not obtained, unrecoverable journal."""

    exit_code = ENVIRONMENT
