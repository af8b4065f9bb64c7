"""The command line: parse, call, print. Exit codes and JSON follow DESIGN.md's contract."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import __version__, report
from .catalog import Catalog
from .errors import FixpackError

SITE = click.option(
    "--site",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="FIXPACK_SITE",
    help="Look for vllm and vllm-gaudi only in DIR (a site-packages-like folder), not this interpreter's path.",
)
JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout (messages go to stderr).")


def _guard(fn: Callable[..., int | None]) -> Callable[..., None]:
    """Turn fixpack errors into one line on stderr (or JSON) and the contract's exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            code = fn(*args, **kwargs) or 0
        except FixpackError as exc:
            if kwargs.get("as_json"):
                report.dump({"ok": False, "profile": kwargs.get("profile"), "fixes": [], "error": exc.message})
            report.error(exc)
            code = exc.exit_code
        sys.exit(code)

    return wrapper


def _catalog() -> Catalog:
    root = os.environ.get("FIXPACK_COOKBOOK")
    return Catalog.load(Path(root)) if root else Catalog.load()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fixpack")
def main() -> None:
    """Apply verified source fixes to an installed vLLM and vllm-gaudi, all or nothing.

    Exit codes: 0 done; 1 refused or failed (nothing changed); 2 usage (unknown fix or profile,
    bad arguments, invalid fix module or profile); 3 environment (not installed, not writable,
    lock not obtained, unrecoverable interrupted transaction).
    """


@main.command()
@click.option("--profile", "profile", required=True, metavar="NAME", help="The release profile, e.g. v0.26.0.")
@click.argument("fixes", nargs=-1, metavar="[FIX ...]")
@click.option("--dry-run", is_flag=True, help="Check and report; write nothing.")
@JSON
@click.option("--allow-unpinned", is_flag=True, help="Apply to a build whose commit the profile does not pin, if every fingerprint holds.")
@SITE
@_guard
def apply(profile: str, fixes: tuple[str, ...], dry_run: bool, as_json: bool, allow_unpinned: bool, site: Path | None) -> int:
    """Apply a profile's fixes and the named opt-in FIXes, all or nothing.

    Run again on a patched environment, it changes nothing and exits 0.
    """
    from .operations import apply as run

    result = run(_catalog(), profile, fixes, site, dry_run=dry_run, allow_unpinned=allow_unpinned)
    if as_json:
        report.dump(report.result_json(result))
        report.notes(result.notes)
        if result.error is not None:
            report.error(result.error)
    else:
        report.human(result)
    return result.exit_code


@main.command()
@click.option("--profile", metavar="NAME", help="Report every fix of this profile (default: what is applied).")
@JSON
@SITE
@_guard
def status(profile: str | None, as_json: bool, site: Path | None) -> int:
    """Show the installed distributions, their commits, and the state of each fix."""
    from .operations import status as run

    st = run(_catalog(), profile, site)
    if as_json:
        report.dump(report.status_json(st))
    else:
        report.status_human(st)
    return 0


@main.command()
@click.argument("fixes", nargs=-1, metavar="[FIX ...]")
@click.option("--dry-run", is_flag=True, help="Report what would be reverted; write nothing.")
@JSON
@SITE
@_guard
def revert(fixes: tuple[str, ...], dry_run: bool, as_json: bool, site: Path | None) -> int:
    """Revert the named FIXes and the fixes that require them (default: all), to the exact bytes."""
    from .operations import revert as run

    result = run(_catalog(), fixes, site, dry_run=dry_run)
    if as_json:
        report.dump(report.result_json(result))
        report.notes(result.notes)
        if result.error is not None:
            report.error(result.error)
    else:
        report.human(result)
    return result.exit_code


@main.command("list")
@click.option("--profile", metavar="NAME", help="Only this profile's fixes, in pack order.")
@JSON
@SITE
@_guard
def list_(profile: str | None, as_json: bool, site: Path | None) -> int:
    """List the fixes (of one profile, in pack order)."""
    catalog = _catalog()
    if profile:
        prof = catalog.profile(profile)
        fixes = [catalog.fixes[f] for f in prof.pack]
    else:
        fixes = list(catalog.fixes.values())
    if as_json:
        report.dump(
            {
                "profile": profile,
                "fixes": [
                    {"id": f.id, "title": f.title, "opt_in": f.opt_in, "requires": list(f.requires), "releases": list(f.releases)}
                    for f in fixes
                ],
            }
        )
        return 0
    width = max((len(f.id) for f in fixes), default=0)
    for f in fixes:
        flag = "opt-in " if f.opt_in else "       "
        print(f"{f.id:<{width}}  {flag}{f.title}")
    return 0


@main.command()
@click.argument("fix")
@SITE
@_guard
def show(fix: str, site: Path | None) -> int:
    """Show one fix: what, why, requirements, upstream status, proof, and its changes."""
    f = _catalog().fix(fix)
    print(f"{f.id}: {f.title}")
    print(f"opt-in: {'yes' if f.opt_in else 'no'}; requires: {', '.join(f.requires) or 'nothing'}; conflicts: {', '.join(f.conflicts) or 'nothing'}")
    print(f"upstream: {f.upstream.status}{' ' + f.upstream.ref if f.upstream.ref else ''}")
    if f.upstream.note:
        print(f"  {f.upstream.note}")
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
    return 0


def run_apply_all(argv: list[str]) -> None:
    """``fixes/apply_all.py ARGS``: the same as ``fixpack apply ARGS``."""
    main.main(args=["apply", *argv], prog_name="apply_all.py")

