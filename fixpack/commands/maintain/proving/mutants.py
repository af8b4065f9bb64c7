"""``fixpack verify --mutants``: does each fix's proof catch the fix when it is nearly right?

For every fix whose proof verify has just seen fail on the pristine tree and pass on the patched
one, up to N mutants of its patch (``fixpack.core.mutants``: a hunk left out, one token of an
added line changed) are each put in the place of the fix's patch, on the tree with the whole pack
applied, and the proof is run again. A mutant is caught when the proof fails or errors; it
survives when the proof passes. A survivor is either a gap in the proof or a harmless slip, which
the maintainer records in fix.toml (``[[proof.harmless]] mutant = ID, why = ...``); those count as
explained.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from ....cookbook.catalog import Catalog
from ....core import patch, rebuild
from ....core.mutants import Mutant, mutants
from ....models import Fix, Profile, ProofOutcome
from ..trees import Pack, Scratch, put
from .proofs import ProofPool

__all__ = ["MutantRun", "FixMutants", "mutate"]

# A slip can make the code loop for ever; a proof that has not finished by then counts as caught.
MUTANT_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class MutantRun:
    id: str
    description: str
    caught: bool
    diff: str  # the mutated file against the patched one (the whole pack applied)


@dataclass
class FixMutants:
    fix: str
    runs: list[MutantRun] = field(default_factory=list)
    harmless: dict[str, str] = field(default_factory=dict)  # mutant id -> why, from fix.toml
    skipped: str = ""  # why no mutant was run

    @property
    def caught(self) -> int:
        return sum(1 for r in self.runs if r.caught)

    @property
    def survivors(self) -> list[MutantRun]:
        return [r for r in self.runs if not r.caught and r.id not in self.harmless]

    @property
    def explained(self) -> list[MutantRun]:
        return [r for r in self.runs if not r.caught and r.id in self.harmless]

    @property
    def unmatched(self) -> list[str]:
        """Ids fix.toml records as harmless that survived nothing here: caught now, or not run."""
        survived = {r.id for r in self.runs if not r.caught}
        return [m for m in self.harmless if m not in survived]

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "caught": self.caught,
            "total": len(self.runs),
            "survivors": [{"id": r.id, "description": r.description, "diff": r.diff} for r in self.survivors],
            "explained": [
                {"id": r.id, "description": r.description, "why": self.harmless[r.id]} for r in self.explained
            ],
        }
        if self.skipped:
            out["skipped"] = self.skipped
        if self.unmatched:
            out["unmatched_harmless"] = self.unmatched
        return out


@dataclass(frozen=True, slots=True)
class _Job:
    fix: Fix
    mutant: Mutant
    content: bytes | None  # the mutated file, with the fixes after this one applied over the mutant
    patched: bytes | None  # the same file as the whole pack makes it


def _jobs(fix: Fix, pack: Pack) -> Iterator[_Job]:
    """The fix's mutants as jobs, each with its whole-pack file; a mutant the later fixes of its
    file cannot be applied over is passed over."""
    steps = pack.steps(fix)
    if steps is None:  # verify has reported that the pack does not apply there
        return
    later = {s.change.path: s for s in steps}
    for mutant in mutants([s.target for s in steps]):
        step = later[mutant.path]
        try:
            content = patch.apply_chain([rebuild.parsed(c) for c in step.later], mutant.after)
        except patch.HunkFailed:
            continue
        yield _Job(fix, mutant, content, step.final)


def _run(job: _Job, slots: queue.Queue[dict[str, Path]], scratch: Scratch, pool: ProofPool) -> MutantRun:
    roots = slots.get()
    target = scratch.file(roots, job.mutant.path)
    try:
        put(target, job.content)
        done = pool.run(job.fix.proof.script or "", scratch.trees(roots), timeout=MUTANT_TIMEOUT)
    finally:
        put(target, job.patched)
        slots.put(roots)
    shown = patch.render(job.mutant.path, job.patched, job.content, context=2)
    return MutantRun(job.mutant.id, job.mutant.description, done.outcome is not ProofOutcome.PASSES, shown)


def mutate(
    catalog: Catalog,
    profile: Profile,
    pack: Pack,
    scratch: Scratch,
    proven: list[str],
    per_fix: int | None,
    jobs: int = 2,
) -> dict[str, FixMutants]:
    """Run up to ``per_fix`` mutants (None: all) of each fix in ``proven`` (those whose proof verify has
    demonstrated) on copies of ``scratch``'s patched trees; every other fix of the pack is reported
    as skipped, with the reason."""
    fixes = [catalog.fixes[f] for f in profile.pack]
    report = {f.id: FixMutants(f.id, harmless=dict(f.proof.harmless)) for f in fixes}
    work: list[_Job] = []
    for fix in fixes:
        if not fix.proof.script:
            report[fix.id].skipped = "no proof"
        elif fix.id not in proven:
            report[fix.id].skipped = "its proof does not fail on the pristine tree and pass on the patched one"
        else:
            work += islice(_jobs(fix, pack), per_fix)
    # One slot per proof running at once: each puts its mutant in a copy no other run sees.
    slots: queue.Queue[dict[str, Path]] = queue.Queue()
    for n in range(max(1, jobs)):
        slots.put(scratch.link(f"mutants/slot{n}"))
    with ProofPool(jobs) as pool:
        runs = [pool.submit(_run, job, slots, scratch, pool) for job in work]
        for job, run in zip(work, runs):
            report[job.fix.id].runs.append(run.result())
    return report
