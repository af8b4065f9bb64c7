"""Running fixes' proofs side by side and reading how they ended, for verify, port and verify
--mutants (with --coverage): the one place a proof's exit code becomes a ``ProofOutcome``.

A fix's proof is judged on a pair of trees (``ProofPair``): without the fix it must fail (the bug
is there), with it it must pass. verify runs the pair on the pristine and the patched tree, port on
the new release's tree as it is and with the ported pack; a mutant is one more run, caught unless
it passes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from ....models import Fix, ProofOutcome
from ....proofkit import BUG_PRESENT, PASSED, Trees
from ....proofrun import run_proof, start_server, threads_per_proof

__all__ = ["Run", "NOT_RUN", "ProofPair", "ProofPool", "warm_up"]

T = TypeVar("T")

# proofkit's exit codes; anything else (ERROR, a crash, a timeout) is the proof's own error
_OUTCOMES = {PASSED: ProofOutcome.PASSES, BUG_PRESENT: ProofOutcome.BUG_PRESENT}


@dataclass(frozen=True, slots=True)
class Run:
    """How one run of a proof ended, and what it printed."""

    outcome: ProofOutcome
    output: str = ""

    def tail(self, lines: int = 6) -> str:
        """The last lines of the output, on one line."""
        return " | ".join(self.output.strip().splitlines()[-lines:])


NOT_RUN = Run(ProofOutcome.NOT_RUN)


@dataclass(frozen=True, slots=True)
class ProofPair:
    """A fix's proof on the tree without the fix (``before``) and on the tree with it (``after``)."""

    before: Run
    after: Run = NOT_RUN

    @property
    def holds(self) -> bool:
        """The proof shows the bug without the fix and passes with it."""
        return self.before.outcome is ProofOutcome.BUG_PRESENT and self.after.outcome is ProofOutcome.PASSES


def warm_up(fixes: Iterable[Fix]) -> None:
    """Start the proof server now when a proof will run, so that its imports (seconds) overlap the
    caller's own work (locking, copying trees)."""
    if any(fix.proof.script for fix in fixes):
        start_server()


class ProofPool:
    """Proofs run ``jobs`` at a time, each in a process of its own with its share of the cores (a
    proof that takes every core oversubscribes them when others run beside it)."""

    def __init__(self, jobs: int) -> None:
        self._threads = threads_per_proof(jobs)
        self._executor = ThreadPoolExecutor(max_workers=max(1, jobs))

    def __enter__(self) -> ProofPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._executor.shutdown(wait=True)

    def run(self, script: str | Path, trees: Trees, timeout: float = 600.0, coverage: str | None = None) -> Run:
        """One proof, in the calling thread (``coverage``: the coverage.py configuration it runs under)."""
        done = run_proof(Path(script), trees, timeout=timeout, threads=self._threads, coverage=coverage)
        return Run(_OUTCOMES.get(done.code, ProofOutcome.ERROR), done.output)

    def submit(self, work: Callable[..., T], *args: object, **kwargs: object) -> Future[T]:
        """``work(*args, **kwargs)`` in one of the pool's places: for a run that needs more than the
        trees, such as a mutant that puts its file in a slot first and takes it out after."""
        return self._executor.submit(work, *args, **kwargs)

    def pairs(
        self,
        fixes: Iterable[Fix],
        before: Trees,
        after: Trees,
        measure: Mapping[str, str] | None = None,
        before_only: Collection[str] = (),
    ) -> dict[str, ProofPair]:
        """Each fix's proof on ``before`` and on ``after``, all side by side; a fix in
        ``before_only`` runs on ``before`` alone, a fix without a proof not at all (it has no pair).
        ``measure``: fix id -> the coverage.py configuration its run on ``after`` runs under."""
        measure = measure or {}
        runs: dict[str, tuple[Future[Run], Future[Run] | None]] = {}
        for fix in fixes:
            if not fix.proof.script:
                continue
            first = self.submit(self.run, fix.proof.script, before)
            second = None
            if fix.id not in before_only:
                second = self.submit(self.run, fix.proof.script, after, coverage=measure.get(fix.id))
            runs[fix.id] = (first, second)
        return {
            fid: ProofPair(first.result(), NOT_RUN if second is None else second.result())
            for fid, (first, second) in runs.items()
        }
