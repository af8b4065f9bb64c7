"""What became of the serve tier's tests in one run: how many ran, and which did not and why.

The serve conftest feeds it every report of a serve test and asks it, at the end, for the run's
summary line and whether any test did not run. Apart from pytest's own hooks so that the verdict can
be tested on reports made up in a test."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class Report(Protocol):
    """The part of pytest's ``TestReport`` read here."""

    nodeid: str
    when: str
    outcome: str  # "passed", "failed" or "skipped"
    longrepr: object


def _reason(report: Report) -> str:
    """A skip's reason or an error's first line: pytest's longrepr of a skip is ``(file, line,
    "Skipped: why")``, of an error an object whose ``reprcrash.message`` is the exception's."""
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    return text.strip().partition("\n")[0].removeprefix("Failed: ")


@dataclass
class Tally:
    collected: set[str] = field(default_factory=set)
    ran: dict[str, str] = field(default_factory=dict)  # node id -> "passed" or "failed" (its call ran)
    skipped: dict[str, str] = field(default_factory=dict)  # node id -> why
    errors: dict[str, str] = field(default_factory=dict)  # node id -> its setup's or teardown's error

    def note(self, report: Report) -> None:
        if report.outcome == "skipped":
            self.skipped[report.nodeid] = _reason(report)
        elif report.when == "call":
            self.ran[report.nodeid] = report.outcome
        elif report.outcome == "failed":
            self.errors.setdefault(report.nodeid, _reason(report))

    def not_run(self) -> list[str]:
        """The collected tests whose body did not run (skipped, an error before it, never reached)."""
        return sorted(self.collected - set(self.ran))

    def summary(self, asked: bool) -> str:
        passed = sum(1 for outcome in self.ran.values() if outcome == "passed")
        line = (
            f"serve tier: {len(self.ran)} of {len(self.collected)} ran ({passed} passed, "
            f"{len(self.ran) - passed} failed), {len(self.skipped)} skipped"
        )
        missing = self.not_run()
        if not missing:
            return line
        why = self.skipped.get(missing[0]) or self.errors.get(missing[0]) or "not reached"
        if not asked:
            return f"{line}: not asked for ({why})"
        return f"{line}: FAILED, the tier was asked for (FIXPACK_SERVE_ENV) and {len(missing)} did not run: {why}"
