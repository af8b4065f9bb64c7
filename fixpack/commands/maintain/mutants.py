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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from ...cookbook.catalog import Catalog
from ...core import patch, rebuild
from ...core.mutants import Mutant, Target, mutants
from ...core.plan import chains
from ...models import Change, Fix, Profile
from ...proofkit import PASSED
from ...proofrun import run_proof, threads_per_proof
from .trees import link_trees, proof_trees, put

__all__ = ["MutantRun", "FixMutants", "chain_contents", "mutate", "pack_files"]

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
    dist: str
    content: bytes | None  # the mutated file, with the fixes after this one applied over the mutant
    patched: bytes | None  # the same file as the whole pack makes it


def chain_contents(pristine: bytes | None, chain: list[Change]) -> list[bytes | None] | None:
    """The file before each change of the chain and after the last; None if a change does not apply."""
    out = [pristine]
    try:
        for change in chain:
            out.append(patch.apply(rebuild.parsed(change), out[-1]))
    except patch.HunkFailed:
        return None
    return out


def pack_files(
    fixes: list[Fix], profile: Profile, pristine_roots: dict[str, Path]
) -> dict[str, tuple[list[Change], list[bytes | None]]]:
    """Each file the pack edits: its chain of changes and the content before each change and after
    the last (a file where the pack does not apply is left out: verify reports it)."""
    files: dict[str, tuple[list[Change], list[bytes | None]]] = {}
    for path, chain in chains(fixes, profile.release).items():
        pin = profile.pin_for_path(path)
        assert pin is not None
        target = pristine_roots[pin.dist] / path
        contents = chain_contents(target.read_bytes() if target.exists() else None, chain)
        if contents is not None:
            files[path] = (chain, contents)
    return files


def _jobs(fix: Fix, profile: Profile, files: dict[str, tuple[list[Change], list[bytes | None]]]) -> Iterator[_Job]:
    """The fix's mutants as jobs, each with its whole-pack file; a mutant the later fixes of its
    file cannot be applied over is passed over."""
    targets, later = [], {}
    for change in fix.changes[profile.release]:
        if change.path not in files:  # verify has reported that the pack does not apply there
            return
        chain, contents = files[change.path]
        i = next(n for n, c in enumerate(chain) if c.fix_id == fix.id)
        targets.append(Target(rebuild.parsed(change), contents[i]))
        later[change.path] = (chain[i + 1 :], contents[-1])
    for mutant in mutants(targets):
        rest, patched = later[mutant.path]
        try:
            content = patch.apply_chain([rebuild.parsed(c) for c in rest], mutant.after)
        except patch.HunkFailed:
            continue
        pin = profile.pin_for_path(mutant.path)
        assert pin is not None
        yield _Job(fix, mutant, pin.dist, content, patched)


def _run(job: _Job, slots: queue.Queue[dict[str, Path]], profile: Profile, threads: int) -> MutantRun:
    roots = slots.get()
    target = roots[job.dist] / job.mutant.path
    try:
        put(target, job.content)
        trees = proof_trees(profile, roots)
        done = run_proof(Path(job.fix.proof.script or ""), trees, timeout=MUTANT_TIMEOUT, threads=threads)
    finally:
        put(target, job.patched)
        slots.put(roots)
    shown = patch.render(job.mutant.path, job.patched, job.content, context=2)
    return MutantRun(job.mutant.id, job.mutant.description, done.code != PASSED, shown)


def mutate(
    catalog: Catalog,
    profile: Profile,
    pristine_roots: dict[str, Path],
    patched_roots: dict[str, Path],
    proven: list[str],
    per_fix: int | None,
    scratch: Path,
    jobs: int = 2,
) -> dict[str, FixMutants]:
    """Run up to ``per_fix`` mutants (None: all) of each fix in ``proven`` (those whose proof verify has
    demonstrated); every other fix of the pack is reported as skipped, with the reason."""
    fixes = [catalog.fixes[f] for f in profile.pack]
    files = pack_files(fixes, profile, pristine_roots)
    report = {f.id: FixMutants(f.id, harmless=dict(f.proof.harmless)) for f in fixes}
    work: list[_Job] = []
    for fix in fixes:
        if not fix.proof.script:
            report[fix.id].skipped = "no proof"
        elif fix.id not in proven:
            report[fix.id].skipped = "its proof does not fail on the pristine tree and pass on the patched one"
        else:
            work += islice(_jobs(fix, profile, files), per_fix)
    slots: queue.Queue[dict[str, Path]] = queue.Queue()
    for n in range(max(1, jobs)):
        slots.put(link_trees(patched_roots, scratch / f"slot{n}"))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        runs = [pool.submit(_run, job, slots, profile, threads_per_proof(jobs)) for job in work]
        for job, run in zip(work, runs):
            report[job.fix.id].runs.append(run.result())
    return report
