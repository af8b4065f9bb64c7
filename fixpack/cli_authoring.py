"""The maintainer's commands ``record`` and ``port``, registered on fixpack's command group.

Importing this module adds them to ``fixpack.cli.main``; either module may be imported first.
"""

from __future__ import annotations

from pathlib import Path

import click

from . import report
from .cli import JSON, SITE, SOURCE, _catalog, _guard, _sources, main
from .errors import UsageError

NEW_SOURCE = click.option(
    "--source",
    "sources",
    multiple=True,
    required=True,
    metavar="DIST=DIR",
    help="A tree of the new release in repository layout: vllm-gaudi=DIR (DIR/vllm_gaudi/...), vllm=DIR.",
)


@main.command()
@click.argument("fix_id", metavar="NEW-ID")
@click.option("--profile", "profile", required=True, metavar="NAME", help="The release profile the edits are on.")
@SOURCE
@JSON
@SITE
@_guard
def record(fix_id: str, profile: str, sources: tuple[str, ...], as_json: bool, site: Path | None) -> int:
    """Write fixes/NEW-ID/ from the hand edits of the installed files.

    Edits are found through RECORD hashes (pip installs) or the checkout (editable installs); the
    pristine bytes come from --source or the editable install's git HEAD. What fixpack applied
    itself is left out: the new fix holds only the edits on top.
    """
    from .record import record as run

    done = run(_catalog(), fix_id, profile, site, _sources(sources))
    if as_json:
        report.dump(
            {
                "ok": True,
                "fix": fix_id,
                "dir": str(done.fix_dir),
                "files": [list(f) for f in done.files],
                "on_top_of": done.on_top_of,
                "notes": done.notes,
            }
        )
        return 0
    report.notes(done.notes)
    for path, plus, minus in done.files:
        print(f"  recorded  {path} +{plus} -{minus}")
    print(f"fixpack record: wrote {done.fix_dir} (fill in the TODOs of fix.toml and write proof.py)")
    return 0


@main.command()
@click.argument("fixes", nargs=-1, metavar="[FIX ...]")
@click.option("--profile", metavar="NAME", help="Port every fix of this profile (opt-ins included), in pack order.")
@click.option("--from", "from_release", required=True, metavar="RELEASE", help="The release the fixes are on.")
@NEW_SOURCE
@click.option("--write", "write", metavar="NEW-RELEASE", help="Write the ported changes and a draft profile.")
@JSON
@_guard
def port(
    fixes: tuple[str, ...],
    profile: str | None,
    from_release: str,
    sources: tuple[str, ...],
    write: str | None,
    as_json: bool,
) -> int:
    """Try FIXes (or a profile's) on the --source trees of another release and report each change:
    unchanged, offset, cst, upstream or conflict. Exits 0 once the report is made, conflicts or not.
    """
    from .port import port as run

    if not fixes and not profile:
        raise UsageError("give FIX ... or --profile NAME")
    result = run(_catalog(), fixes, profile, from_release, _sources(sources), write)
    if as_json:
        report.dump(result.to_json())
        report.notes(result.notes)
        return 0
    width = max((len(c.fix) for c in result.changes), default=0)
    for c in result.changes:
        print(f"  {c.outcome:<9}  {c.fix:<{width}}  {c.path}")
        if c.detail:
            print(f"      {c.detail}")
        for block in (c.hunk, c.nearest):
            if block:
                print("\n".join(f"      | {line}" for line in block.splitlines()))
    report.notes(result.notes)
    for path in result.written:
        print(f"  wrote {path}")
    counts = ", ".join(f"{n} {o}" for o, n in result.counts().items())
    print(f"fixpack port: {from_release} -> {write or 'the --source trees'}: {counts}")
    return 0
