"""The upstreaming commands (issue 41) and their rendering: ``upstream`` (where each fix stands on
another tree); ``diff --check-style``'s report is check_style.py's."""

from __future__ import annotations

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
        left = f", merge base with release {report.release}'s pin {tree.base[:12]}" if tree.base else ""
        print(f"{tree.dist}: {tree.path} ({where}{left})")
    width = max((len(f.fix) for f in report.fixes), default=0)
    for f in report.fixes:
        print(f"  {f.fix:<{width}}  {f.standing:<16}  {f.detail}")
    counts = ", ".join(f"{n} {word}" for word, n in report.counts().items() if n)
    print(f"fixpack upstream: profile {report.profile}: {counts}")
    return 0

