"""What the commands print: lines for people (colour only on a terminal) and the JSON shapes."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from ..commands.install.results import Result, StatusResult
from ..errors import INTERRUPTED_LINE, FixpackError
from ..models import Fix, Profile, ProofOutcome

__all__ = [
    "paint",
    "human",
    "notes",
    "result",
    "error",
    "result_json",
    "status_json",
    "status_human",
    "dump",
    "printed",
    "fix_json",
    "profile_json",
    "show",
    "verify_json",
    "verify_human",
    "port_human",
    "mutants_json",
    "mutants_human",
    "port_proofs_human",
]

_NOT_APPLIED = "not applied: the plan was refused"
_COLOURS = {
    "applied": "32",
    "would-apply": "36",
    "already-applied": "2",
    "refused": "31",
    "reverted": "33",
    "would-revert": "36",
    "pending": "33",
    "drifted": "31",
    "missing": "31",
    "partial": "35",
}


def paint(text: str, key: str, stream: TextIO) -> str:
    code = _COLOURS.get(key)
    return f"\x1b[{code}m{text}\x1b[0m" if code and stream.isatty() else text


def _files(files: list[tuple[str, int, int]]) -> str:
    return ", ".join(f"{path} +{plus} -{minus}" for path, plus, minus in files)


def human(result: Result, out: TextIO | None = None, err: TextIO | None = None) -> None:
    out, err = out or sys.stdout, err or sys.stderr
    notes(result.notes, err)
    shown = result.fixes
    if result.error is not None:  # the refusal is said once, with its reason; the rest only counted
        shown = [f for f in result.fixes if f.reason != _NOT_APPLIED]
    width = max((len(f.id) for f in shown), default=0)
    for fix in shown:
        action = paint(f"{fix.action:<16}", fix.action, out)
        tail = fix.reason or _files(fix.files)
        if fix.pulled_in_by:
            tail = f"{tail} (required by {fix.pulled_in_by})".strip()
        print(f"  {action} {fix.id:<{width}}  {tail}".rstrip(), file=out)
    if len(shown) < len(result.fixes):
        print(f"  ({len(result.fixes) - len(shown)} other fixes not applied: the plan was refused)", file=out)
    counts: dict[str, int] = {}
    for fix in result.fixes:
        counts[fix.action] = counts.get(fix.action, 0) + 1
    summary = ", ".join(f"{n} {action.replace('-', ' ')}" for action, n in counts.items()) or "nothing to do"
    profile = f"profile {result.profile}: " if result.profile else ""
    if result.error is None:
        dry = " (dry run: nothing written)" if result.dry_run else ""
        print(f"fixpack {result.command}: {profile}{summary}{dry}", file=out)
    else:
        error(result.error, err)


def notes(lines: list[str], err: TextIO | None = None) -> None:
    for line in lines:
        print(f"fixpack: {line}", file=err or sys.stderr)


def result(res: Result, as_json: bool, out: TextIO | None = None, err: TextIO | None = None) -> None:
    """An apply or revert result: JSON on stdout and messages on stderr, or lines for people."""
    out, err = out or sys.stdout, err or sys.stderr
    if as_json:
        print(json.dumps(result_json(res), indent=2), file=out)
        notes(res.notes, err)
        if res.error is not None:
            error(res.error, err)
    else:
        human(res, out, err)


def interrupted() -> None:
    print(INTERRUPTED_LINE, file=sys.stderr)


def error(exc: FixpackError, err: TextIO | None = None) -> None:
    err = err or sys.stderr
    print(f"fixpack: error: {exc.said}", file=err)
    if exc.details:
        print(exc.details, file=err)


def result_json(result: Result) -> dict[str, Any]:
    return {
        "ok": result.ok,
        "profile": result.profile,
        "fixes": [
            {"id": f.id, "action": f.action, "reason": f.reason, "files": [list(x) for x in f.files]}
            for f in result.fixes
        ],
        "error": None if result.error is None else result.error.said,
        "notes": result.notes,
    }


def status_json(st: StatusResult) -> dict[str, Any]:
    return {
        "profile": st.profile,
        "distributions": [
            {
                "name": d.name,
                "version": d.version,
                "commit": d.commit.id,
                "commit_source": d.commit.source,
                "location": str(d.files_root),
                "editable": d.editable,
            }
            for d in st.distributions
        ],
        "fixes": [{"id": fid, "state": state} for fid, state in st.fixes],
        "fix_set": None if st.fix_set is None else st.fix_set.to_json(),
        "recipe": st.manifest.recipe if st.manifest is not None else None,
        "notes": [*st.notes, *([f"fix set: none ({st.no_fix_set})"] if st.no_fix_set else [])],
    }


def status_human(st: StatusResult, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    for note in st.notes:
        print(f"fixpack: {note}", file=sys.stderr)
    for d in st.distributions:
        commit = d.commit.id or "unknown"
        editable = " (editable)" if d.editable else ""
        print(f"{d.name} {d.version} at {d.files_root}{editable}: commit {commit} ({d.commit.source})", file=out)
    if st.profile is None:
        print("no fixes applied (give --profile NAME to see what a profile would do)", file=out)
        return
    width = max((len(fid) for fid, _ in st.fixes), default=0)
    recipe = st.manifest.recipe if st.manifest is not None else None
    print(f"profile {st.profile}" + (f" (recipe {recipe})" if recipe else "") + ":", file=out)
    for fid, state in st.fixes:
        print(f"  {fid:<{width}}  {paint(state, state, out)}", file=out)
    if st.fix_set is not None:
        print(f"fix set: {st.fix_set.summary()}", file=out)
    elif st.no_fix_set:
        print(f"fix set: none ({st.no_fix_set})", file=out)


def dump(data: Any) -> None:
    print(json.dumps(data, indent=2), file=sys.stdout)


def printed(res: Result, as_json: bool) -> tuple[str, str]:
    """What ``result`` prints for a result: (stdout, stderr), for the warm path to print again."""
    import io

    out, err = io.StringIO(), io.StringIO()
    result(res, as_json, out, err)
    return out.getvalue(), err.getvalue()


def profile_json(p: Profile) -> dict[str, Any]:
    return {
        "name": p.name,
        "release": p.release,
        "pins": [{"dist": x.dist, "version": x.version, "commits": list(x.commits), "match": x.match} for x in p.pins],
        "pack": list(p.pack),
        "opt_ins": list(p.opt_ins),
        "draft": p.draft or None,
        "instead": dict(p.instead),
    }


def fix_json(f: Fix, upstream: bool = False) -> dict[str, Any]:
    """A fix as list --json shows it; ``upstream`` (list --upstream) adds its upstream subject and
    [upstream] facts."""
    row: dict[str, Any] = {
        "id": f.id,
        "title": f.title,
        "opt_in": f.opt_in,
        "requires": list(f.requires),
        "releases": list(f.releases),
    }
    if upstream:
        row["subject"] = f.upstream_subject
        row["upstream"] = upstream_json(f)
    return row


def upstream_json(f: Fix) -> dict[str, Any]:
    up = f.upstream
    return {
        "status": up.status,
        "forwarded": up.forwarded,
        "bug": list(up.bug),
        "applied_upstream": up.applied_upstream or None,
        "origin": up.origin or None,
        "regressed_in": up.regressed_in or None,
        "note": up.note,
    }


def show(f: Fix) -> None:
    print(f"{f.id}: {f.title}")
    requires, conflicts = ", ".join(f.requires) or "nothing", ", ".join(f.conflicts) or "nothing"
    print(f"opt-in: {'yes' if f.opt_in else 'no'}; requires: {requires}; conflicts: {conflicts}")
    import textwrap

    up = f.upstream
    print(f"upstream subject: {f.upstream_subject}")
    print(f"upstream: {up.status} (forwarded: {up.forwarded or 'no'})")
    for name, value in (
        ("bug", ", ".join(up.bug)), ("origin", up.origin), ("applied-upstream", up.applied_upstream),
        ("regressed-in", up.regressed_in), ("ref", up.ref),
    ):  # fmt: skip
        if value:
            print(f"  {name}: {value}")
    if up.note:
        print(textwrap.indent(up.note, "  "))
    print(f"proof: {f.proof.level}{' (' + f.proof.reason + ')' if f.proof.reason else ''}")
    if f.verified_on:
        print(f"verified on: {f.verified_on}")
    print()
    print(f.why)
    for release, changes in f.changes.items():
        print()
        for c in changes:
            locked = "locked" if c.fingerprint else "NOT LOCKED (run fixpack lock)"
            print(f"{release}: {c.path} ({locked})")


def verify_json(verdicts: list[Any]) -> dict[str, Any]:
    keys = ("fix", "release", "profile", "applies", "compiles", "reverts", "proof", "failures")
    results = []
    for v in verdicts:
        result = {k: getattr(v, k) for k in keys}
        if v.coverage is not None:  # with --coverage
            result["coverage"] = v.coverage.to_json()
        results.append(result)
    return {"ok": all(v.ok for v in verdicts), "results": results}


def coverage_human(verdicts: list[Any]) -> None:
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


def verify_human(verdicts: list[Any]) -> None:
    for v in verdicts:
        mark = paint("ok  " if v.ok else "FAIL", "applied" if v.ok else "refused", sys.stdout)
        checks = f"applies={_yn(v.applies)} compiles={_yn(v.compiles)} reverts={_yn(v.reverts)} proof={v.proof}"
        print(f"{mark} {v.profile:<10} {v.fix:<24} {checks}")
        for failure in v.failures:
            print(f"       {failure}")
    failed = sum(1 for v in verdicts if not v.ok)
    print(f"fixpack verify: {len(verdicts) - failed} passed, {failed} failed")


def port_human(result: Any) -> None:
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


def mutants_json(verdicts: list[Any]) -> dict[str, Any]:
    """verify --mutants: fix id -> its mutants (a fix in several profiles: as the first one ran them)."""
    out: dict[str, Any] = {}
    for v in verdicts:
        if v.mutants is not None:
            out.setdefault(v.fix, v.mutants.to_json())
    return out


def _rate(caught: int, total: int) -> str:
    return f"{caught}/{total}" + (f" ({100 * caught / total:.0f}%)" if total else "")


def mutants_human(verdicts: list[Any], per_fix: int | None) -> None:
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


def port_proofs_human(result: Any) -> None:
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
