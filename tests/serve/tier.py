"""What became of the serve tier's tests in one run: how many ran, which did not and why, and
where their time went (``time_sheet``: each test's servers, from start to ready, up, and stopping).

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


@dataclass(frozen=True)
class Served:
    """One server a test started: seconds from start to ready (None: never ready), from start to
    the stop (None: never stopped), and the stop itself."""

    test: str
    ready_s: float | None
    up_s: float | None
    stop_s: float | None


def time_sheet(servers: list[Served], width: int = 60) -> list[str]:
    """Where the tier's server time went: a line per test (its servers, the seconds they took to be
    ready, to be used once ready, and to stop), the slowest first, then the totals."""
    by_test: dict[str, list[Served]] = {}
    for s in servers:
        by_test.setdefault(s.test or "(outside a test)", []).append(s)

    def sums(group: list[Served]) -> tuple[float, float, float]:
        ready = sum(s.ready_s or s.up_s or 0.0 for s in group)
        used = sum(max((s.up_s or 0.0) - (s.ready_s or s.up_s or 0.0), 0.0) for s in group)
        return ready, used, sum(s.stop_s or 0.0 for s in group)

    rows = sorted(by_test.items(), key=lambda kv: -sum(sums(kv[1])))
    ready, used, stop = sums(servers)
    lines = [
        f"serve tier time: {len(servers)} servers in {len(by_test)} tests: {ready:.0f} s starting, "
        f"{used:.0f} s in use once ready, {stop:.0f} s stopping"
    ]
    for test, group in rows:
        r, u, st = sums(group)
        name = test if len(test) <= width else "..." + test[-(width - 3) :]
        lines.append(
            f"  {name:<{width}} {len(group)} server(s): {r:6.1f} s starting, {u:6.1f} s in use, {st:5.1f} s stopping"
        )
    return lines
