"""``fixpack verify``: does every fix of every profile still hold on its pinned sources?

For each profile and its release, on scratch copies of the ``--source`` trees (never the trees
themselves): the locked fingerprints hold; the whole plan (every opt-in included) applies and
compiles; reversing it gives back the exact pristine bytes; each fix's proof fails on the pristine
tree and passes on the patched one; the metadata a maintainer needs is there, and its recorded
``[upstream]`` fields agree with the pinned tree's git history (see ``upstream``). Every failure is
collected, not just the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ....cookbook.catalog import Catalog
from ....core import patch, rebuild
from ....core.fingerprint import sha256
from ....core.plan import chains
from ....errors import FixpackError, Refused
from ....models import SUBJECT_MAX, Fix, Profile, ProofOutcome
from ..authoring import lock
from ..trees import Pack, Scratch
from ..upstream.status import recorded_contradictions
from .coverage import FixCoverage, fix_lines, measured, rcfile
from .mutants import FixMutants, mutate
from .proofs import ProofPair, ProofPool, warm_up

__all__ = ["FixVerdict", "verify_profile", "verify_profiles", "junit"]


@dataclass
class FixVerdict:
    fix: str
    release: str
    profile: str
    applies: bool = True
    compiles: bool = True
    reverts: bool = True
    level: str = "none"  # the proof level fix.toml claims
    runs: ProofPair | None = None  # its proof's runs, when it has a proof and it was run
    failures: list[str] = field(default_factory=list)
    mutants: FixMutants | None = None  # with --mutants
    coverage: FixCoverage | None = None  # with --coverage

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def proven(self) -> bool:
        """Its proof fails on the pristine tree and passes on the patched one."""
        return self.runs is not None and self.runs.holds

    @property
    def proof(self) -> str:
        """The word ``verify --json`` reports: demonstrated or partial (as fix.toml claims) when the
        proof holds, failed when it ran and does not, none when it did not run."""
        if self.runs is None:
            return "none"
        if not self.proven:
            return "failed"
        return "partial" if self.level == "partial" else "demonstrated"

    def fail(self, what: str) -> None:
        self.failures.append(what)


def _placeholder(text: str) -> bool:
    # record's skeleton marks what the maintainer must write with "TODO:".
    return text.lstrip().startswith("TODO") or "TODO:" in text


def _metadata_failures(fix: Fix) -> list[str]:
    out = []
    if len(fix.why) < 40 or _placeholder(fix.why):
        out.append("metadata: 'why' is missing or a placeholder")
    if _placeholder(fix.title):
        out.append("metadata: 'title' is a placeholder")
    up = fix.upstream
    # The new form's fields are checked as fix.toml is read; the old form's status may lack its ref.
    refs = {
        "submitted": "" if up.forwarded == "yes" else up.forwarded,
        "backport": up.origin,
        "upstream": up.applied_upstream,
    }
    if up.status in refs and not refs[up.status]:
        out.append(f"metadata: upstream status {up.status!r} needs a ref")
    if up.status == "inappropriate" and not up.note:
        out.append("metadata: upstream status 'inappropriate' needs a note giving the reason")
    if len(fix.upstream_subject) > SUBJECT_MAX:
        out.append(
            f"metadata: the title is {len(fix.upstream_subject)} characters, too long for an upstream subject "
            f"(at most {SUBJECT_MAX}): give fix.toml a subject"
        )
    return out


def verify_profiles(
    catalog: Catalog,
    profiles: list[Profile],
    sources: dict[str, Path],
    only: frozenset[str] | None = None,
    **options: Any,
) -> list[FixVerdict]:
    """``verify_profile`` (with its ``options``) for each profile in turn, a fix's proof (and its
    coverage and mutants) run in the first profile that has it only: profiles of one release share
    the fix's bytes (the catalog holds each file's chain of changes the same), so a second run would
    prove nothing new. Every profile is still locked, applied, compiled and reverted."""
    proven: set[str] = set()
    verdicts: list[FixVerdict] = []
    for profile in profiles:
        mine = frozenset(f for f in profile.pack if (only is None or f in only) and f not in proven)
        verdicts += verify_profile(catalog, profile, sources, only=mine, **options)
        proven |= mine
    return verdicts


def verify_profile(
    catalog: Catalog,
    profile: Profile,
    sources: dict[str, Path],
    jobs: int = 2,
    mutants: bool = False,
    per_fix: int | None = 8,
    coverage: bool = False,
    only: frozenset[str] | None = None,
) -> list[FixVerdict]:
    """Every check of every fix of the profile; with ``mutants``, also up to ``per_fix`` mutants
    (None: all) of each fix whose proof holds (see ``mutants``), a survivor not recorded as harmless a failure;
    with ``coverage``, the lines each fix adds that its proof runs on the patched tree (see
    ``coverage``), an unrun one not declared unreachable a failure.

    ``only``: the proofs, coverage and mutants of these fixes alone. The whole pack is still locked,
    applied, compiled and reverted (the proofs run on it), and a fix left out is still reported
    when one of those checks fails on it."""
    checked = [fid for fid in profile.pack if only is None or fid in only]
    warm_up(catalog.fixes[fid] for fid in checked)
    verdicts = {
        fid: FixVerdict(fid, profile.release, profile.name, level=catalog.fixes[fid].proof.level)
        for fid in profile.pack
    }
    for fid in profile.pack:
        verdicts[fid].failures += _metadata_failures(catalog.fixes[fid])
        verdicts[fid].failures += recorded_contradictions(catalog.fixes[fid], profile, sources)
    # Fingerprints: what lock would write now must equal what is locked.
    try:
        fresh = lock.fingerprints(catalog, profile, sources)
    except FixpackError as exc:  # a refusal names its fix: report it against that fix, else all
        fresh = {}
        for v in verdicts.values():
            if v.fix == exc.fix_id or exc.fix_id not in verdicts:
                v.applies = False
                v.fail(f"does not apply: {exc.message}")
    for fid, files in fresh.items():
        for change in catalog.fixes[fid].changes[profile.release]:
            if change.fingerprint is None:
                verdicts[fid].fail(f"{change.path}: not locked (run fixpack lock)")
            elif change.fingerprint != files.get(change.path):
                verdicts[fid].fail(f"{change.path}: locked fingerprints do not match the source (run fixpack lock)")

    with Scratch(sources, profile, "fixpack-verify-") as scratch:
        _apply_and_revert(catalog, profile, scratch, verdicts)
        pack = Pack([catalog.fixes[f] for f in profile.pack], scratch) if coverage or mutants else None
        lines = fix_lines(catalog, profile, pack, scratch) if pack is not None and coverage else {}
        lines = {fid: found for fid, found in lines.items() if fid in checked}
        include = sorted({ln.file for fl in lines.values() for ln in fl})
        data_dirs = {fid: scratch.root / "coverage" / fid for fid in lines}
        rcs = {fid: rcfile(data_dirs[fid], include) for fid in data_dirs}
        with ProofPool(jobs) as pool:
            runs = pool.pairs(
                [catalog.fixes[f] for f in checked],
                scratch.trees(scratch.pristine),
                scratch.trees(scratch.changed),
                measure=rcs,
            )
        for fid in checked:
            _judge_proof(catalog.fixes[fid], verdicts[fid], runs.get(fid))
        for fid, fl in lines.items():
            fix = catalog.fixes[fid]
            report = measured(fid, fl, data_dirs[fid], dict(fix.proof.unreachable))
            verdicts[fid].coverage = report
            verdicts[fid].failures += report.failures()
        if pack is not None and mutants:
            proven = [f for f in checked if verdicts[f].proven]
            found = mutate(catalog, profile, pack, scratch, proven, per_fix, jobs)
            for fid in checked:
                survived = found[fid]
                verdicts[fid].mutants = survived
                verdicts[fid].failures += [f"mutant {r.id} survives: {r.description}" for r in survived.survivors]
    return [v for fid, v in verdicts.items() if fid in checked or v.failures]


def _apply_and_revert(catalog: Catalog, profile: Profile, scratch: Scratch, verdicts: dict[str, FixVerdict]) -> None:
    """Apply the whole pack to the scratch tree, check it compiles and that reversing it is exact."""
    for path, chain in chains((catalog.fixes[f] for f in profile.pack), profile.release).items():
        target = scratch.file(scratch.pristine, path)
        pristine = target.read_bytes() if target.exists() else None
        try:
            patched = rebuild.build(pristine, chain)
        except Refused as exc:
            verdicts[exc.fix_id or chain[0].fix_id].applies = False
            verdicts[exc.fix_id or chain[0].fix_id].fail(f"does not apply: {exc.message}")
            continue
        problem = rebuild.compile_error(path, patched)
        if problem:
            for change in chain:
                verdicts[change.fix_id].compiles = False
                verdicts[change.fix_id].fail(f"does not compile: {problem}")
        try:
            reverts = sha256(rebuild.reverse(patched, chain)) == sha256(pristine)
        except patch.HunkFailed:
            reverts = False
        if not reverts:
            for change in chain:
                verdicts[change.fix_id].reverts = False
                verdicts[change.fix_id].fail(f"{path}: reverting the pack does not give the pristine bytes")
        scratch.put(path, patched)


def _judge_proof(fix: Fix, verdict: FixVerdict, runs: ProofPair | None) -> None:
    verdict.runs = runs
    if not fix.proof.script:
        if fix.proof.level != "none":
            verdict.fail("proof: fix.toml claims a proof but has no proof.py")
        return
    assert runs is not None  # every checked fix with a proof was run
    before, after = runs.before, runs.after
    if before.outcome is not ProofOutcome.BUG_PRESENT:
        what = "passes" if before.outcome is ProofOutcome.PASSES else "errors"
        verdict.fail(f"proof {what} on the pristine tree (it must fail there): {before.tail()}")
    if after.outcome is not ProofOutcome.PASSES:
        what = "fails" if after.outcome is ProofOutcome.BUG_PRESENT else "errors"
        verdict.fail(f"proof {what} on the patched tree: {after.tail()}")


def junit(verdicts: list[FixVerdict]) -> str:
    from xml.sax.saxutils import escape, quoteattr

    failures = sum(1 for v in verdicts if not v.ok)
    cases = []
    for v in verdicts:
        name = quoteattr(f"{v.profile}/{v.fix}")
        body = "".join(f"<failure message={quoteattr(f)}>{escape(f)}</failure>" for f in v.failures)
        cases.append(f'  <testcase classname="fixpack.verify" name={name}>{body}</testcase>')
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<testsuite name="fixpack verify" tests="{len(verdicts)}" failures="{failures}">\n'
        + "\n".join(cases)
        + "\n</testsuite>\n"
    )
