"""What verify (with --coverage and --mutants) and port print: lines for people and the JSON shapes."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..models import ProofOutcome
from .render import notes, paint

if TYPE_CHECKING:  # the commands' result types: imported by the command that runs them, not by the CLI's start
    from ..commands.maintain.porting.report import PortReport
    from ..commands.maintain.proving.verify import FixVerdict

__all__ = [
    "verify_json",
    "verify_human",
    "coverage_human",
    "mutants_json",
    "mutants_human",
    "port_human",
    "port_proofs_human",
]


def verify_json(verdicts: list[FixVerdict]) -> dict[str, object]:
    keys = ("fix", "release", "profile", "applies", "compiles", "reverts", "proof", "failures")
    results = []
    for v in verdicts:
        result = {k: getattr(v, k) for k in keys}
        if v.coverage is not None:  # with --coverage
            result["coverage"] = v.coverage.to_json()
        results.append(result)
    return {"ok": all(v.ok for v in verdicts), "results": results}


def coverage_human(verdicts: list[FixVerdict]) -> None:
    reports = [v.coverage for v in verdicts if v.coverage is not None]
    print("coverage: the statements each fix adds that its proof runs on the patched tree")
    width = max((len(c.fix) for c in reports), default=0)
    for c in reports:
        covered = len(c.lines) - len(c.unrun) - len(c.excluded)
        declared = f", {len(c.excluded)} unreachable (fix.toml)" if c.excluded else ""
        print(f"  {c.fix:<{width}}  {covered}/{len(c.lines)} run{declared}")
        for ln in c.unrun:
            print(f"      not run {ln.id}: {ln.where}")
        for ln in c.excluded:
            print(f"      unreachable {ln.id}: {ln.where}: {c.unreachable[ln.id]}")
        if c.unmatched:
            print(
                f"      declared unreachable, but no such unrun line (run now, or no such line): "
                f"{', '.join(c.unmatched)}"
            )
    covered = sum(len(c.lines) - len(c.unrun) - len(c.excluded) for c in reports)
    total, excluded = sum(len(c.lines) for c in reports), sum(len(c.excluded) for c in reports)
    unrun = sum(len(c.unrun) for c in reports)
    print(f"fixpack verify --coverage: {covered}/{total} added statements run, {excluded} unreachable, {unrun} not run")


def _yn(flag: bool) -> str:
    return "yes" if flag else "NO"


def verify_human(verdicts: list[FixVerdict]) -> None:
    for v in verdicts:
        mark = paint("ok  " if v.ok else "FAIL", "applied" if v.ok else "refused", sys.stdout)
        checks = f"applies={_yn(v.applies)} compiles={_yn(v.compiles)} reverts={_yn(v.reverts)} proof={v.proof}"
        print(f"{mark} {v.profile:<10} {v.fix:<24} {checks}")
        for failure in v.failures:
            print(f"       {failure}")
    failed = sum(1 for v in verdicts if not v.ok)
    print(f"fixpack verify: {len(verdicts) - failed} passed, {failed} failed")


def port_human(result: PortReport) -> None:
    width = max((len(c.fix) for c in result.changes), default=0)
    for c in result.changes:
        print(f"  {c.outcome:<9}  {c.fix:<{width}}  {c.path}")
        if c.detail:
            print(f"      {c.detail}")
        for block in (c.hunk, c.nearest):
            if block:
                print("\n".join(f"      | {line}" for line in block.splitlines()))
    for fix_id, why in result.skipped.items():
        print(f"  skipped    {fix_id:<{width}}  {why}")
    notes(result.notes)
    for path in result.written:
        print(f"  wrote {path}")
    counts = ", ".join(f"{n} {o}" for o, n in result.counts().items())
    skipped = f", {len(result.skipped)} fix(es) skipped" if result.skipped else ""
    print(f"fixpack port: {result.from_release} -> {result.to_release}: {counts}{skipped}")


def mutants_json(verdicts: list[FixVerdict]) -> dict[str, object]:
    """verify --mutants: fix id -> its mutants (a fix in several profiles: as the first one ran them)."""
    out: dict[str, object] = {}
    for v in verdicts:
        if v.mutants is not None:
            out.setdefault(v.fix, v.mutants.to_json())
    return out


def _rate(caught: int, total: int) -> str:
    return f"{caught}/{total}" + (f" ({100 * caught / total:.0f}%)" if total else "")


def mutants_human(verdicts: list[FixVerdict], per_fix: int | None) -> None:
    reports = [v.mutants for v in verdicts if v.mutants is not None]
    which = "every mutant" if per_fix is None else f"up to {per_fix} mutants"
    print(f"mutants: each fix's proof on {which} of its patch, the rest of the pack applied")
    width = max((len(m.fix) for m in reports), default=0)
    for m in reports:
        if m.skipped:
            print(f"  {m.fix:<{width}}  skipped: {m.skipped}")
            continue
        harmless = f", {len(m.explained)} harmless" if m.explained else ""
        print(f"  {m.fix:<{width}}  caught {m.caught}/{len(m.runs)}{harmless}")
        if m.unmatched:
            print(f"      recorded harmless, but no such survivor (caught now, or not run): {', '.join(m.unmatched)}")
        for run in m.survivors:
            print(f"      survives {run.id}: {run.description}")
            lines = run.diff.splitlines()
            start = next((i for i, line in enumerate(lines) if line.startswith("@@")), 0)
            print("\n".join(f"      | {line}" for line in lines[start:]))
    caught, total = sum(m.caught for m in reports), sum(len(m.runs) for m in reports)
    explained, survive = sum(len(m.explained) for m in reports), sum(len(m.survivors) for m in reports)
    print(
        f"fixpack verify --mutants: {_rate(caught, total)} caught, {explained} harmless (fix.toml), "
        f"{survive} survive unexplained"
    )


# port's proof columns: is the bug still on the new tree, is the ported fix proven
_CANNOT = {ProofOutcome.CANNOT_RUN: "cannot run", ProofOutcome.ERROR: "FAILS"}
_STILL = {ProofOutcome.BUG_PRESENT: "bug present", ProofOutcome.PASSES: "BUG GONE", **_CANNOT}
_PROVEN = {ProofOutcome.PASSES: "proven", ProofOutcome.BUG_PRESENT: "NOT PROVEN", **_CANNOT}
_PORT_AS_EXPECTED = (ProofOutcome.PASSES, ProofOutcome.NOT_RUN)  # a line of detail only for the others


def port_proofs_human(result: PortReport) -> None:
    """port's proofs, a line per fix: is the bug still on the new tree, is the ported fix proven."""
    if not result.proofs:
        return
    print("proofs: bug on the new tree as it is / ported fix proven")
    width = max(len(f) for f in result.proofs)
    for fix_id, proof in result.proofs.items():
        still = _STILL.get(proof.pristine, "not run")
        proven = _PROVEN.get(proof.ported, "not run")
        print(f"  {fix_id:<{width}}  {still:<11}  {proven:<10}  {result.fix_outcome(fix_id)}")
        if proof.pristine is not ProofOutcome.BUG_PRESENT or proof.ported not in _PORT_AS_EXPECTED:
            print(f"      {proof.detail}")
