"""The upstreaming commands (issue 41) and their rendering: ``upstream`` (where each fix stands on
another tree) and ``diff --check-style`` (upstream's style checks on each patched tree)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..errors import FixpackError
from . import render
from .maintainer import JOBS, _proofs_can_run
from .options import JSON, catalog, guard
from .options import sources as parse_sources


def _error(exc: FixpackError, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"ok": False, "error": exc.message}


@click.command()
@click.argument("fixes", nargs=-1, metavar="[FIX ...]")
@click.option("--profile", metavar="NAME", help="The release profile whose fixes to look at (default: the only one).")
@click.option(
    "--source",
    "sources",
    multiple=True,
    required=True,
    metavar="DIST=DIR",
    help="The upstream tree to look at, in repository layout: vllm-gaudi=DIR (a git clone or work tree for the "
    "history searches); vllm=DIR for the proofs that run vLLM's code.",
)
@JOBS
@JSON
@guard(_error)
def upstream(fixes: tuple[str, ...], profile: str | None, sources: tuple[str, ...], jobs: int, as_json: bool) -> int:
    """Where each fix (default: the profile's pack) stands on the --source trees: still-needed (its
    proof fails there), fixed-upstream (its proof passes there; in a git tree, with the first commit
    where it does), applied-upstream (a commit since the pinned release has the fix's own diff, by
    git patch-id --stable) or cannot-tell (its proof cannot run there, with the error).

    The trees are copied to a scratch folder and never written. Exits 0 once the report is made.
    """
    from ..commands.maintain.upstream import upstream as run
    _proofs_can_run()
    report = run(catalog(), fixes, profile, parse_sources(sources), jobs)
    if as_json:
        render.dump(report.to_json())
        render.notes(report.notes)
        return 0
    render.notes(report.notes)
    for tree in report.trees:
        where = f"HEAD {tree.head[:12]}" if tree.head else "not a git work tree"
        left = f", left release {report.release} at {tree.base[:12]}" if tree.base else ""
        print(f"{tree.dist}: {tree.path} ({where}{left})")
    width = max((len(f.fix) for f in report.fixes), default=0)
    for f in report.fixes:
        print(f"  {f.fix:<{width}}  {f.standing:<16}  {f.detail}")
    counts = ", ".join(f"{n} {word}" for word, n in report.counts().items() if n)
    print(f"fixpack upstream: profile {report.profile}: {counts}")
    return 0


def style_check(fixes: tuple[str, ...], profile: str | None, dist: str | None, sources: dict[str, Path],
                as_json: bool) -> int:
    """``diff --check-style``: the report of each fix, exit 1 when one fails."""
    from ..commands.maintain.style import check_style

    report = check_style(catalog(), fixes, profile, dist, sources)
    if as_json:
        render.dump(report.to_json())
        return 0 if report.ok else 1
    tools = ", ".join(f"{tool} {version}" for tool, version in sorted(report.tools.items()))
    print(f"upstream's style checks ({tools}) on each patched tree, profile {report.profile}:")
    width = max((len(f.fix) for f in report.fixes), default=0)
    for f in report.fixes:
        words = {tool: {fs.checks.get(tool) for fs in f.files} for tool in sorted(report.tools)}
        checks = [f"{tool} {next(w for w in ('fails', 'passes', 'not-run') if w in said)}"
                  for tool, said in words.items() if said - {None}]
        word = "FAILS " if f.failed else "passes" if f.ok else "-     "
        print(f"  {f.fix:<{width}}  {word}  {f.dist}: {f.note or ', '.join(checks)}")
        for fs in f.files:
            for problem in fs.problems:
                print(f"      {problem}")
    failed = [f.fix for f in report.fixes if f.failed]
    passed = sum(1 for f in report.fixes if f.ok)
    unchecked = len(report.fixes) - passed - len(failed)
    which = f" ({', '.join(failed)})" if failed else ""
    print(f"fixpack diff --check-style: {passed} pass, {len(failed)} fail{which}"
          + (f", {unchecked} not checked" if unchecked else ""))
    return 1 if failed else 0
