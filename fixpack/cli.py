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
from .catalog import REPO_ROOT, Catalog
from .errors import FixpackError, UsageError
from .plan import restrict

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


def _cookbook() -> Path:
    """The checkout whose fixes/ and profiles/ are used: FIXPACK_COOKBOOK, or the one fixpack is in."""
    return Path(os.environ.get("FIXPACK_COOKBOOK") or REPO_ROOT)


def _catalog() -> Catalog:
    return Catalog.load(_cookbook())


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
@click.option(
    "--allow-unpinned",
    is_flag=True,
    help="Apply to a build whose commit the profile does not pin, if every fingerprint holds.",
)
@SITE
@_guard
def apply(
    profile: str, fixes: tuple[str, ...], dry_run: bool, as_json: bool, allow_unpinned: bool, site: Path | None
) -> int:
    """Apply a profile's fixes and the named opt-in FIXes, all or nothing.

    Run again on a patched environment, it changes nothing and exits 0.
    """
    from .operations import apply as run

    result = run(_catalog(), profile, fixes, site, dry_run=dry_run, allow_unpinned=allow_unpinned)
    report.result(result, as_json)
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
    report.result(result, as_json)
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
                    {
                        "id": f.id,
                        "title": f.title,
                        "opt_in": f.opt_in,
                        "requires": list(f.requires),
                        "releases": list(f.releases),
                    }
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
    requires, conflicts = ", ".join(f.requires) or "nothing", ", ".join(f.conflicts) or "nothing"
    print(f"opt-in: {'yes' if f.opt_in else 'no'}; requires: {requires}; conflicts: {conflicts}")
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


SOURCE_ENV = {"vllm-gaudi": "FIXPACK_SRC_VLLM_GAUDI", "vllm": "FIXPACK_SRC_VLLM"}


def _sources(values: tuple[str, ...]) -> dict[str, Path]:
    """``--source DIST=DIR`` options; without any, the FIXPACK_SRC_* variables the tests use."""
    if not values:
        values = tuple(f"{dist}={os.environ[var]}" for dist, var in SOURCE_ENV.items() if os.environ.get(var))
    out = {}
    for value in values:
        dist, sep, folder = value.partition("=")
        if not sep or not dist or not folder:
            raise UsageError(f"--source {value!r}: expected DIST=DIR, e.g. vllm-gaudi=/src/vllm-gaudi")
        path = Path(folder)
        if not path.is_dir():
            raise UsageError(f"--source {value!r}: {folder} is not a directory")
        out[dist] = path
    return out


SOURCE = click.option(
    "--source",
    "sources",
    multiple=True,
    metavar="DIST=DIR",
    help="An upstream tree in repository layout: vllm-gaudi=DIR (DIR/vllm_gaudi/...), vllm=DIR (DIR/vllm/...). "
    "Default: $FIXPACK_SRC_VLLM_GAUDI and $FIXPACK_SRC_VLLM.",
)


@main.command()
@click.option("--profile", "profiles", multiple=True, metavar="NAME", help="Profiles to verify (default: all).")
@SOURCE
@JSON
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write a JUnit XML report.")
@click.option("--jobs", type=int, default=2, show_default=True, help="Proofs run at once.")
@SITE
@_guard
def verify(
    profiles: tuple[str, ...], sources: tuple[str, ...], as_json: bool, junit: Path | None, jobs: int, site: Path | None
) -> int:
    """For CI: every fix of each profile applies to the pinned sources, compiles, reverts exactly,
    and its proof fails on the pristine tree and passes on the patched one.

    The --source trees are copied to a scratch folder and never touched. Exits 1 listing every failure.
    """
    from .verify import junit as junit_xml
    from .verify import verify_profile

    catalog = _catalog()
    chosen = [catalog.profile(p) for p in profiles] if profiles else list(catalog.profiles.values())
    roots = _sources(sources)
    for prof in chosen:
        missing = [p.dist for p in prof.pins if p.dist not in roots]
        if missing:
            hint = " ".join(f"--source {d}=DIR" for d in missing)
            raise UsageError(f"verify --profile {prof.name} needs the pristine trees: give {hint}")
    verdicts = [v for prof in chosen for v in verify_profile(catalog, prof, roots, jobs=jobs)]
    ok = all(v.ok for v in verdicts)
    if junit:
        junit.write_text(junit_xml(verdicts), encoding="utf-8")
    if as_json:
        report.dump(
            {
                "ok": ok,
                "results": [
                    {
                        "fix": v.fix,
                        "release": v.release,
                        "profile": v.profile,
                        "applies": v.applies,
                        "compiles": v.compiles,
                        "reverts": v.reverts,
                        "proof": v.proof,
                        "failures": v.failures,
                    }
                    for v in verdicts
                ],
            }
        )
    else:
        for v in verdicts:
            mark = report.paint("ok  " if v.ok else "FAIL", "applied" if v.ok else "refused", sys.stdout)
            checks = f"applies={_yn(v.applies)} compiles={_yn(v.compiles)} reverts={_yn(v.reverts)} proof={v.proof}"
            print(f"{mark} {v.profile:<10} {v.fix:<24} {checks}")
            for failure in v.failures:
                print(f"       {failure}")
        failed = sum(1 for v in verdicts if not v.ok)
        print(f"fixpack verify: {len(verdicts) - failed} passed, {failed} failed")
    return 0 if ok else 1


def _yn(flag: bool) -> str:
    return "yes" if flag else "NO"


@main.command()
@click.argument("fixes", nargs=-1, metavar="[FIX ...]")
@click.option("--profile", metavar="NAME", help="Export the plan that apply --profile NAME [FIX ...] resolves.")
@click.option("--format", "fmt", type=click.Choice(["unified", "mbox"]), default="unified", show_default=True)
@click.option("--dist", metavar="NAME", help="Only the changes to this distribution (e.g. vllm-gaudi).")
@click.option("--author", default="", help="From: of mbox messages (default: fixpack <fixpack@localhost>).")
@_guard
def diff(fixes: tuple[str, ...], profile: str | None, fmt: str, dist: str | None, author: str) -> int:
    """Fixes as patches for upstream: a unified diff, or an mbox that git am takes at the pinned commit."""
    from . import upstream
    from .plan import resolve

    catalog = _catalog()
    if not fixes and not profile:
        raise UsageError("name fixes, or a --profile")
    if profile:
        prof = catalog.profile(profile)
        plan = resolve(catalog, prof, fixes)
    else:
        for f in fixes:
            catalog.fix(f)
        holders = [p for p in catalog.profiles.values() if all(f in p.pack for f in fixes)]
        if not holders:
            raise UsageError("no profile has all of these fixes; give --profile")
        prof = holders[0]
        plan = resolve(catalog, prof, tuple(f for f in fixes if f in prof.opt_ins))
        plan = restrict(plan, set(fixes))
    if dist and dist not in {p.dist for p in prof.pins}:
        raise UsageError(f"--dist {dist!r}: profile {prof.name} pins {', '.join(p.dist for p in prof.pins)}")
    text = upstream.mbox(plan, prof, dist, author) if fmt == "mbox" else upstream.unified(plan, dist)
    sys.stdout.write(text)
    return 0


@main.command()
@click.option("--profile", "profile", default="v0.26.0", show_default=True, metavar="NAME")
@SOURCE
@_guard
def lock(profile: str, sources: tuple[str, ...]) -> int:
    """Refresh the fingerprints of a profile's fixes against pristine --source trees.

    Refuses, naming the hunk, when a change no longer applies.
    """
    from .catalog import load_profile
    from .lock import fingerprints, render_cst, write

    roots = _sources(sources)
    root = _cookbook()
    prof_file = root / "profiles" / f"{profile}.toml"
    changed = render_cst(root, load_profile(prof_file), roots) if prof_file.exists() else []
    catalog = _catalog()
    prof = catalog.profile(profile)
    changed += write(catalog, prof, fingerprints(catalog, prof, roots))
    for path in changed:
        print(f"locked {path.relative_to(catalog.root)}")
    print(f"fixpack lock: profile {prof.name}: {len(changed)} fingerprint file(s) changed")
    return 0


@main.command("build-site")
@click.argument("site", type=click.Path(file_okay=False, path_type=Path))
@click.option("--profile", default="v0.26.0", show_default=True, metavar="NAME")
@click.option(
    "--vllm-gaudi",
    "vllm_gaudi",
    required=True,
    metavar="CHECKOUT|URL",
    help="A vllm-gaudi git repository to clone: a URL or a local checkout (never written).",
)
@click.option(
    "--vllm-wheel",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="The vLLM wheel to install (default: pip download vllm==<pinned version>).",
)
@click.option("--ref", help="The vllm-gaudi ref to check out (default: the pinned commit).")
@_guard
def build_site(site: Path, profile: str, vllm_gaudi: str, vllm_wheel: Path | None, ref: str | None) -> int:
    """Lay out SITE as the Gaudi image installs the release: vLLM's wheel and vllm-gaudi at its tag,
    both pip-installed with --no-deps --target SITE. Then: fixpack apply --site SITE."""
    from .sitebuild import build

    for line in build(_catalog().profile(profile), site, vllm_gaudi, vllm_wheel, ref):
        print(f"fixpack: {line}")
    print(f"fixpack build-site: {site} is ready; next: python3 fixes/apply_all.py --profile {profile} --site {site}")
    return 0


def run_apply_all(argv: list[str]) -> None:
    """``fixes/apply_all.py ARGS``: the same as ``fixpack apply ARGS``."""
    main.main(args=["apply", *argv], prog_name="apply_all.py")


from . import cli_authoring  # noqa: E402,F401  (its @main.command()s add record and port)
