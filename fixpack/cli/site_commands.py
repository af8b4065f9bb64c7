"""The commands on an installed site: apply, status, revert, and the catalog's list and show."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import EnvironmentProblem, FixpackError, UsageError
from . import render, render_install
from .environment import help_block
from .options import JSON, SITE, catalog, chosen, guard

if TYPE_CHECKING:
    from ..cookbook.catalog import Catalog


def overlay_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option("--overlay", type=click.Path(path_type=Path), metavar="DIR", help=help)


OVERLAY = overlay_option(
    "Write nothing under site-packages: build the patched modules and a start-up import hook into DIR; "
    "a process with DIR on PYTHONPATH imports the patched code (read-only and non-root images)."
)
STATUS_OVERLAY = overlay_option("The fixes of the overlay in DIR (over the installed files), not the site's own.")
REVERT_OVERLAY = overlay_option("Revert in the overlay DIR, not in the site (every fix reverted: DIR is removed).")


class ExecCommand(click.Command):
    """A command whose ``--exec CMD [ARGS...]`` takes the rest of the line, unparsed; its raw
    arguments are kept for the warm stamp's key."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["fixpack.argv"] = tuple(args)
        if "--exec" in args:
            at = args.index("--exec")
            ctx.meta["fixpack.exec"] = args[at + 1 :]
            args = args[:at]
            if not ctx.meta["fixpack.exec"]:
                raise click.UsageError("--exec needs a command: --exec CMD [ARGS...]", ctx=ctx)
        return super().parse_args(ctx, args)


def result_error(exc: FixpackError, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"ok": False, "profile": kwargs.get("profile"), "fixes": [], "error": exc.said, "notes": []}


def _status_error(exc: FixpackError, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"profile": kwargs.get("profile"), "distributions": [], "fixes": [], "notes": [], "error": exc.said}


def _list_error(exc: FixpackError, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"profile": kwargs.get("profile"), "fixes": [], "error": exc.said}


APPLY_ENVIRONMENT = (
    "FIXPACK_SITE",
    "FIXPACK_COOKBOOK",
    "FIXPACK_LOCK_TIMEOUT",
    "FIXPACK_NO_FAST_PATH",
    "FIXPACK_EXPECT_FIX_SET",
    "FIXPACK_RUNTIME_CHECK",
    "FIXPACK_AGREE_TIMEOUT",
)
APPLY_EPILOG = (
    help_block(APPLY_ENVIRONMENT)
    + """\b
--exec CMD [ARGS...]   last on the line: once applied (exit 0), replace this
                       process with CMD, with DIR on PYTHONPATH for --overlay DIR;
                       with --recipe, the recipe's rules are checked on CMD's
                       vllm serve arguments and this environment first
--recipe SLUG --launch the same with the recipe's own vllm serve command, its
                       environment exported over this one
\b
Exit codes: 0 done; 1 refused (nothing changed); 2 usage; 3 environment.
"""
)


@click.command(cls=ExecCommand, context_settings={"help_option_names": ["-h", "--help"]}, epilog=APPLY_EPILOG)
@click.option("--profile", "profile", metavar="NAME", help="The release profile, e.g. v0.26.0.")
@click.argument("fixes", nargs=-1, metavar="[FIX ...]")
@click.option(
    "--recipe",
    metavar="SLUG",
    help="Instead of --profile and FIXes: a recipe's fix set (fixpack recipe list), its rules checked first.",
)
@click.option(
    "--launch",
    is_flag=True,
    help="With --recipe: once applied, run the recipe's own vllm serve command in its environment.",
)
@click.option("--dry-run", is_flag=True, help="Check and report; write nothing.")
@JSON
@click.option(
    "--allow-unpinned",
    is_flag=True,
    help="Apply to a build whose commit the profile does not pin, if every fingerprint holds.",
)
@SITE
@OVERLAY
@click.option(
    "--expect-fix-set",
    metavar="DIGEST",
    envvar="FIXPACK_EXPECT_FIX_SET",
    help="Refuse (exit 1, nothing written) unless the fix set this apply leaves has this digest, as "
    "fixpack status prints it: every node of a deployment runs the same fixes. Default: $FIXPACK_EXPECT_FIX_SET.",
)
@guard(result_error)
def apply(
    profile: str | None,
    fixes: tuple[str, ...],
    recipe: str | None,
    launch: bool,
    dry_run: bool,
    as_json: bool,
    allow_unpinned: bool,
    site: Path | None,
    overlay: Path | None,
    expect_fix_set: str | None,
) -> int:
    """Apply a profile's fixes and the named opt-in FIXes (or a recipe's), all or nothing.

    Run again on a patched environment, it changes nothing and exits 0.
    """
    from ..commands.install.apply import ApplyRequest
    from ..commands.install.apply import apply as run_apply
    from ..commands.install.stamping import Invocation

    meta = click.get_current_context().meta
    command = meta.get("fixpack.exec")
    if (command or launch) and dry_run:
        raise UsageError(
            f"{'--exec' if command else '--launch'} runs a command once the fixes are applied; not with --dry-run"
        )
    book = catalog()
    gate, notes, env = None, [], None
    if recipe is not None:
        if profile is not None or fixes:
            raise UsageError("--recipe SLUG names the fix set: not with --profile or fix names")
        profile, fixes, gate, notes, command, env = _recipe_start(book, recipe, launch, command)
    elif profile is None:
        raise UsageError(f"give --profile NAME (and opt-in FIXes) or --recipe SLUG; {_profiles_for(book, site)}")
    elif launch:
        raise UsageError("--launch runs a recipe's own command: give --recipe SLUG")
    # A recipe's rules read variables that no warm stamp's key holds: a --recipe start records
    # none, and always takes the full path.
    printer = functools.partial(render_install.printed, as_json=as_json)
    asked = Invocation(meta["fixpack.argv"], printer, tuple(command or ())) if gate is None else None
    request = ApplyRequest(
        profile,
        fixes,
        where=chosen(site, overlay),
        dry_run=dry_run,
        allow_unpinned=allow_unpinned,
        expect_fix_set=expect_fix_set,
        gate=gate,
        invocation=asked,
    )
    result = run_apply(book, request)
    result.notes[:0] = notes
    render_install.result(result, as_json)
    if command and result.exit_code == 0:
        from ..commands.install.apply import exec_command

        if env is not None:
            os.environ.update(env)
        try:
            exec_command(command, str(overlay) if overlay is not None else None)
        except OSError as exc:
            raise EnvironmentProblem(f"--exec {command[0]}: {exc.strerror}") from None
    return result.exit_code


def _recipe_start(book: Any, slug: str, launch: bool, command: list[str] | None) -> tuple:
    """``--recipe SLUG``: (profile, opt-ins, gate, notes, command, environment of the command)."""
    from ..commands.recipes import launch as starts
    from ..commands.recipes.recipe import pick, recipes

    chosen = pick(recipes(book), slug)
    env: dict[str, str] | None = None
    notes: list[str] = []
    if launch:
        if command:
            raise UsageError("--launch runs the recipe's own vllm serve command: not with --exec")
        gate, command, env = starts.for_launch(chosen)
    elif command:
        gate, notes = starts.for_exec(chosen, command)
    else:
        gate = starts.for_apply(chosen)
    return chosen.profile, chosen.opt_ins, gate, notes, command, env


@click.command()
@click.option("--profile", metavar="NAME", help="Report every fix of this profile (default: what is applied).")
@JSON
@SITE
@STATUS_OVERLAY
@guard(_status_error)
def status(profile: str | None, as_json: bool, site: Path | None, overlay: Path | None) -> int:
    """Show the installed distributions, their commits, and the state of each fix."""
    from ..commands.install.status import status as run

    st = run(catalog(), profile, chosen(site, overlay))
    if as_json:
        render.dump(render_install.status_json(st))
    else:
        render_install.status_human(st)
    return 0


@click.command()
@click.argument("fixes", nargs=-1, metavar="[FIX ...]")
@click.option("--dry-run", is_flag=True, help="Report what would be reverted; write nothing.")
@JSON
@SITE
@REVERT_OVERLAY
@guard(result_error)
def revert(fixes: tuple[str, ...], dry_run: bool, as_json: bool, site: Path | None, overlay: Path | None) -> int:
    """Revert the named FIXes and the fixes that require them (default: all), to the exact bytes.

    With --overlay DIR: in that overlay (all of them: DIR is removed)."""
    from ..commands.install.revert import revert as run

    result = run(catalog(), fixes, chosen(site, overlay), dry_run=dry_run)
    render_install.result(result, as_json)
    return result.exit_code


@click.command("list")
@click.option("--profile", metavar="NAME", help="Only this profile's fixes, in pack order.")
@click.option("--upstream", is_flag=True, help="Also each fix's upstream status (--json: subject and [upstream]).")
@JSON
@SITE
@guard(_list_error)
def list_(profile: str | None, upstream: bool, as_json: bool, site: Path | None) -> int:
    """List the fixes (of one profile, in pack order); with --site, each one's state there; with
    --upstream, where each stands upstream."""
    book = catalog()
    if profile:
        fixes = [book.fixes[f] for f in book.profile(profile).pack]
    else:
        fixes = list(book.fixes.values())
    states = _states(book, profile, site)
    if as_json:
        rows = [
            {**render_install.fix_json(f, upstream), **({"state": states.get(f.id, "-")} if site else {})}
            for f in fixes
        ]
        render.dump({"profile": profile, "fixes": rows})
        return 0
    width = max((len(f.id) for f in fixes), default=0)
    state_width = max((len(str(s)) for s in states.values()), default=0)
    for f in fixes:
        flag = "opt-in " if f.opt_in else "       "
        state = f"{str(states.get(f.id, '-')):<{state_width}}  " if site else ""
        status = f"{f.upstream.status:<13}  " if upstream else ""
        print(f"{f.id:<{width}}  {state}{flag}{status}{f.title}")
    return 0


def _states(book: Any, profile: str | None, site: Path | None) -> dict[str, str]:
    """Each fix's state in ``site`` (for the profile asked, or the one applied there); {} without one."""
    if site is None:
        return {}
    from ..commands.install.status import status

    return {fid: str(state) for fid, state in status(book, profile, chosen(site)).fixes}


@click.command()
@click.argument("fix")
@SITE
@guard(_list_error)
def show(fix: str, site: Path | None) -> int:
    """Show one fix: what, why, requirements, upstream status, proof, and its changes; with
    --site, its state there."""
    book = catalog()
    render_install.show(book.fix(fix))
    if site is not None:
        from ..commands.install.status import site_profile

        profile = site_profile(book, chosen(site))
        if profile is None:
            state = "no profile of this cookbook fits the distributions installed there"
        else:
            state = _states(book, profile, site).get(fix, f"not in profile {profile}, the site's")
        print(f"\nin {site}: {state}")
    return 0


@click.command()
@JSON
@guard(_list_error)
def profiles(as_json: bool) -> int:
    """List the cookbook's profiles: release, pinned builds, fixes and opt-ins."""
    book = catalog()
    if as_json:
        render.dump({"profiles": [render_install.profile_json(p) for p in book.profiles.values()]})
    else:
        render_install.profiles_human(list(book.profiles.values()))
    return 0


SBOM_EPILOG = """\b
Exit codes: 0 written; 1 refused (nothing applied, the fix set does not hold,
the --merge document lacks a distribution); 2 usage (a --merge file that cannot
be read, is not JSON or not CycloneDX 1.5, 1.6 or 1.7); 3 environment (not
installed, the output cannot be written, cyclonedx-python-lib missing).
Nothing is written unless the whole document is.
"""


@click.command(context_settings={"help_option_names": ["-h", "--help"]}, epilog=SBOM_EPILOG)
@SITE
@click.option(
    "--overlay",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Record the fixes applied into this overlay (fixpack apply --overlay DIR) over the site's files.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="Write the document to FILE (default: stdout), whole or not at all.",
)
@click.option(
    "--merge",
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="Add the pedigree to FILE, a CycloneDX JSON document of this environment (cyclonedx-py environment's): "
    "each pinned distribution's component, found by purl (qualifiers ignored) or by name and version, gets its "
    "patches; the rest is kept as it is, the serial number too, and version goes up by one.",
)
@guard(result_error)  # no --json: the error is one line on stderr
def sbom(site: Path | None, overlay: Path | None, output: Path | None, merge: Path | None) -> int:
    """Write what is applied as a CycloneDX 1.6 SBOM (JSON).

    Each pinned distribution is a component whose pedigree holds the build as installed and one
    patch per fix that changed it (the diff fixpack diff prints, its type from the fix's
    [upstream] fields, the issues it resolves), with its patched files and their hashes; the
    runtime check is a component of its own; the fix-set digest, profile, opt-ins and fixes are
    properties. No fix resolves a CVE. The same site gives the same bytes; the timestamp is
    SOURCE_DATE_EPOCH's, or there is none. Needs fixpack's sbom extra (cyclonedx-python-lib).
    """
    from ..commands.provenance.sbom import sbom as run
    from ..commands.provenance.sbom import write

    done = run(catalog(), chosen(site, overlay), merge, os.environ.get("SOURCE_DATE_EPOCH"))
    said = f"sbom: CycloneDX {done.spec}, {done.fixes} patches"
    if output is None or str(output) == "-":
        sys.stdout.write(done.text)
    else:
        write(done.text, output)
        said += f", written to {output}"
    render.notes([said])
    return 0


def _profiles_for(book: Catalog, site: Path | None) -> str:
    """The profiles to choose from, and the one that fits the site, when one does."""
    from ..commands.install.pins import fitting

    try:
        fits = fitting(book, site)
    except FixpackError:
        fits = []
    return f"profiles: {book.usable_listed()}" + (f"; {fits[0].name} fits what is installed here" if fits else "")
