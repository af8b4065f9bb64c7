"""The commands that face upstream: ``diff`` (the fixes as patches upstream takes, or with
``--check-style`` upstream's style checks on them: check_style.py renders that report) and
``upstream`` (where each fix stands on another tree)."""

from __future__ import annotations

import sys

import click

from ..errors import UsageError
from . import render
from .maintainer import JOBS, _ok_error, _proofs_can_run
from .options import JSON, SOURCE, catalog, guard
from .options import sources as parse_sources


@click.command()
@click.argument("fixes", nargs=-1, metavar="[FIX ...]")
@click.option("--profile", metavar="NAME", help="Export the plan that apply --profile NAME [FIX ...] resolves.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["unified", "mbox", "pr"]),
    default="unified",
    show_default=True,
    help="unified: a diff for git apply; mbox: one commit per fix for git am; pr: each fix's PR title and body.",
)
@click.option("--dist", metavar="NAME", help="Only the changes to this distribution (e.g. vllm-gaudi).")
@click.option(
    "--author",
    default="",
    metavar="'NAME <EMAIL>'",
    help="From: of mbox messages (default: git's author identity, GIT_AUTHOR_NAME/EMAIL or user.name/email).",
)
@click.option(
    "--signoff",
    is_flag=True,
    help="End each mbox message with Signed-off-by: the author (--author, else git's identity; it must be one).",
)
@click.option(
    "--onto",
    "onto",
    multiple=True,
    metavar="DIST=DIR",
    help="Export each fix as fixpack port carries it onto DIR, another tree of DIST (upstream main, a newer "
    "tag): git am takes the series there; a fix that does not port is named and left out.",
)
@click.option(
    "--check-style",
    is_flag=True,
    help="Instead of printing the patches: apply each to its --source tree and run upstream's yapf and ruff "
    "(the versions and configuration of the tree's .pre-commit-config.yaml) on the files it touches; "
    "exits 1 when a fix fails.",
)
@SOURCE
@JSON
@guard(_ok_error)
def diff(
    fixes: tuple[str, ...],
    profile: str | None,
    fmt: str,
    dist: str | None,
    author: str,
    signoff: bool,
    onto: tuple[str, ...],
    check_style: bool,
    sources: tuple[str, ...],
    as_json: bool,
) -> int:
    """Fixes as patches for upstream: a unified diff, an mbox that git am takes at the pinned commit
    (the cookbook's facts below each message's --- line), or the title and body of each fix's PR."""
    from ..commands.maintain.upstream.diff import export

    if check_style:  # issue 41: upstream's style checks on each patched tree
        from .check_style import style_check

        if onto:
            raise UsageError("--onto exports patches; --check-style checks the --source trees")
        return style_check(fixes, profile, dist, parse_sources(sources), as_json)
    if as_json or sources:
        raise UsageError("--json and --source go with --check-style")

    trees = parse_sources(onto, "--onto") if onto else None
    done = export(catalog(), fixes, profile, fmt, dist, author, signoff, onto=trees)
    notes = list(done.notes)
    if not profile:
        notes.insert(0, f"the fixes as profile {done.profile} has them (give --profile to choose another)")
    render.notes(notes)
    sys.stdout.write(done.text)
    return 0


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
@guard(_ok_error)
def upstream(fixes: tuple[str, ...], profile: str | None, sources: tuple[str, ...], jobs: int, as_json: bool) -> int:
    """Where each fix (default: the profile's pack) stands on the --source trees: still-needed (its
    proof fails there), fixed-upstream (its proof passes there; in a git tree, with the first commit
    where it does), applied-upstream (a commit since the pinned release has the fix's own diff, by
    git patch-id --stable) or cannot-tell (its proof cannot run there, with the error).

    The trees are copied to a scratch folder and never written. Exits 0 once the report is made.
    """
    from ..commands.maintain.upstream.status import upstream as run

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
