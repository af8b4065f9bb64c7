"""The maintainer's commands: verify, diff, lock, build-site, record and port."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import EnvironmentProblem, FixpackError, UsageError
from . import render, render_maintain
from .options import JSON, SITE, SOURCE, catalog, chosen, guard
from .options import sources as parse_sources


def _verify_error(exc: FixpackError, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"ok": False, "results": [], "error": exc.said}


def _ok_error(exc: FixpackError, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"ok": False, "error": exc.said}


JOBS = click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=os.cpu_count() or 2,
    show_default="the cores",
    help="Proofs run at once.",
)


class _PerFix(click.ParamType):
    """A count of at least 1, or ``all`` (None)."""

    name = "N|all"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        if value is None or value == "all":
            return None
        if isinstance(value, int) and value >= 1:
            return value
        if isinstance(value, str) and value.isdigit() and int(value) >= 1:
            return int(value)
        self.fail(f"{value!r} is not a count of at least 1, nor 'all'", param, ctx)


PER_FIX = _PerFix()
# default_profile's rule: the only usable profile, else the one that pins exactly the distributions given
PROFILE_HELP = "(default: the profile that pins exactly the distributions of the --source trees)"


@click.command()
@click.option("--profile", "profiles", multiple=True, metavar="NAME", help="Profiles to verify (default: all).")
@click.option(
    "--fix",
    "fix_ids",
    multiple=True,
    metavar="ID",
    help="Run the proofs (and --coverage, --mutants) of these fixes only; the whole pack is still locked, "
    "applied, compiled and reverted, and a fix left out is still reported if one of those checks fails on it.",
)
@SOURCE
@JSON
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write a JUnit XML report.")
@JOBS
@click.option(
    "--mutants",
    "with_mutants",
    is_flag=True,
    help="Also run each fix's proof on mutants of its patch (a hunk left out, one token of an added line "
    "changed), on the tree with the whole pack applied: every mutant must be caught or recorded in fix.toml "
    "as harmless ([[proof.harmless]] mutant = ID, why = ...).",
)
@click.option(
    "--mutants-per-fix",
    type=PER_FIX,
    default="8",
    show_default=True,
    metavar="N|all",
    help="With --mutants: at most N mutants of each fix, spread over its hunks; 'all': every one.",
)
@click.option(
    "--coverage",
    "with_coverage",
    is_flag=True,
    help="Also run each fix's proof on the patched tree under coverage.py and report the lines its hunks add "
    "that the proof runs: every added statement must run or be declared in fix.toml "
    "([[proof.unreachable]] line = ID, why = ...). Needs coverage.py.",
)
@SITE
@guard(_verify_error)
def verify(
    profiles: tuple[str, ...],
    fix_ids: tuple[str, ...],
    sources: tuple[str, ...],
    as_json: bool,
    junit: Path | None,
    jobs: int,
    with_mutants: bool,
    mutants_per_fix: int | None,
    with_coverage: bool,
    site: Path | None,
) -> int:
    """For CI: every fix of each profile applies to the pinned sources, compiles, reverts exactly,
    and its proof fails on the pristine tree and passes on the patched one.

    The --source trees are copied to a scratch folder and never touched. Exits 1 listing every failure
    (with --mutants, every surviving mutant not recorded as harmless).
    """
    from ..commands.install.outputs import write_named
    from ..commands.maintain.proving.verify import junit as junit_xml
    from ..commands.maintain.proving.verify import verify_profiles

    book = catalog()
    chosen = [book.profile(p) for p in profiles] if profiles else book.usable
    roots = parse_sources(sources)
    _proofs_can_run()
    if with_coverage:
        _coverage_can_run()
    for prof in chosen:
        missing = [p.dist for p in prof.pins if p.dist not in roots]
        if missing:
            hint = " ".join(f"--source {d}=DIR" for d in missing)
            raise UsageError(f"verify --profile {prof.name} needs the pristine trees: give {hint}")
    unknown = [f for f in fix_ids if not any(f in prof.pack for prof in chosen)]
    if unknown:
        packs = ", ".join(prof.name for prof in chosen)
        raise UsageError(f"--fix {unknown[0]}: not a fix of the pack of {packs}")
    only = frozenset(fix_ids) or None
    chosen = [prof for prof in chosen if only is None or only & set(prof.pack)]
    verdicts = verify_profiles(
        book, chosen, roots, jobs=jobs, mutants=with_mutants, per_fix=mutants_per_fix, coverage=with_coverage, only=only
    )
    if junit:
        write_named("--junit", junit, junit_xml(verdicts))
    if as_json:
        data = render_maintain.verify_json(verdicts)
        if with_mutants:
            data["mutants"] = render_maintain.mutants_json(verdicts)
        render.dump(data)
    else:
        render_maintain.verify_human(verdicts)
        if with_mutants:
            render_maintain.mutants_human(verdicts, mutants_per_fix)
        if with_coverage:
            render_maintain.coverage_human(verdicts)
    return 0 if all(v.ok for v in verdicts) else 1


def _resolutions(given: tuple[str, ...], fixes: tuple[str, ...]) -> dict[str, Path]:
    if given and len(fixes) != 1:
        raise UsageError("--resolved needs exactly one FIX: the fix whose merge it resolves")
    out = {}
    for item in given:
        path, sep, file = item.partition("=")
        if not sep or not path or not file:
            raise UsageError(f"--resolved {item!r}: give PATH=FILE (vllm_gaudi/...=the resolved file)")
        if not Path(file).is_file():
            raise UsageError(f"--resolved {item!r}: {file} is not a file")
        out[path] = Path(file)
    return out


def _proofs_can_run() -> None:
    """Proofs run the trees' code on what fixpack's ``proofs`` extra lists (CPU torch, numpy,
    FastAPI's test client): without one, say so once, not per proof."""
    from ..extras import install_line, missing

    lacking = missing("proofs")
    if lacking:
        line = " ".join(f"'{r.name}{r.specifier}'" if r.specifier else r.name for r in lacking)
        raise EnvironmentProblem(
            f"the proofs need {' and '.join(r.name for r in lacking)}, which this Python lacks: "
            f"{Path(sys.executable).name} -m pip install {line} (or the proofs extra: {install_line('proofs')}; "
            "port runs without them given --no-proofs)"
        )


def _coverage_can_run() -> None:
    from ..extras import install_line, missing

    if missing("coverage"):
        raise EnvironmentProblem(
            f"verify --coverage needs coverage.py, which this Python lacks: {install_line('coverage')}"
        )


@click.command()
@click.option("--profile", "profile", metavar="NAME", help="The profile whose fixes to lock " + PROFILE_HELP + ".")
@SOURCE
@guard(_ok_error)
def lock(profile: str | None, sources: tuple[str, ...]) -> int:
    """Refresh the fingerprints of a profile's fixes (without --profile: of every profile whose
    pinned distributions have a --source tree) against pristine --source trees.

    Refuses, naming the hunk, when a change no longer applies.
    """
    from ..commands.maintain.authoring.lock import lock as run
    from ..commands.maintain.authoring.lock import lockable
    from ..cookbook import default_root

    root = default_root()
    roots = parse_sources(sources)
    for name in [profile] if profile else lockable(root, roots):
        prof, changed = run(root, name, roots)
        for path in changed:
            print(f"locked {path.relative_to(root)}")
        print(f"fixpack lock: profile {prof.name}: {len(changed)} fingerprint file(s) changed")
    return 0


@click.command("build-site")
@click.argument("site", type=click.Path(path_type=Path))
@click.option(
    "--profile",
    metavar="NAME",
    help="The profile whose release to lay out (default: the one that pins vllm-gaudi and vllm).",
)
@click.option(
    "--vllm-gaudi",
    "vllm_gaudi",
    required=True,
    metavar="CHECKOUT|BUNDLE|URL",
    help="A vllm-gaudi git repository to clone: a URL, a git bundle, or a local checkout or clone (never written).",
)
@click.option(
    "--vllm-wheel",
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="The vLLM wheel of the pinned version to install (default: pip download vllm==<pinned version>, ~300 MB).",
)
@click.option("--ref", metavar="REF", help="The vllm-gaudi ref to check out (default: the pinned commit).")
@guard(_ok_error)
def build_site(site: Path, profile: str | None, vllm_gaudi: str, vllm_wheel: Path | None, ref: str | None) -> int:
    """Lay out SITE as the Gaudi image installs the release, to patch with --site SITE.

    \b
    1. Checks first, before any download: SITE is absent or an empty folder,
       git and pip are there, --vllm-gaudi is a git repository that can be
       reached and has the ref, --vllm-wheel is a wheel of the pinned vLLM.
    2. Clones vllm-gaudi (a URL, or a local checkout: cloned, never written)
       and checks out the pinned commit (or --ref).
    3. Installs the build requirements that vllm-gaudi itself declares (its
       pyproject.toml [build-system] requires, e.g. setuptools>=77,<80,
       setuptools-scm) with pip into a private temporary folder, not into this
       environment, unless this Python already satisfies all of them; pip needs
       the package index (or --find-links) for that.
    4. Builds vllm-gaudi with pip install --no-deps --no-build-isolation
       --target, as the image does.
    5. Downloads the vLLM wheel of the pinned version from the package index
       (about 300 MB) unless --vllm-wheel FILE, and installs it the same way.

    It builds in a temporary folder beside SITE and renames it into place at
    the end: a failure or Ctrl-C leaves nothing behind, and a retry works.

    \b
    Next:
      python3 fixes/apply_all.py --profile v0.26.0 --site SITE [OPT-IN ...]
    """
    from ..commands.maintain.build_site import build, next_step, unpinned

    book = catalog()
    prof = book.default_profile(profile, ("vllm-gaudi", "vllm"))  # the Gaudi image holds both
    for line in build(prof, site, vllm_gaudi, vllm_wheel, ref):
        click.echo(f"fixpack: {line}", err=True)
    mismatch = unpinned(prof, site)
    if mismatch is not None:
        click.echo(
            f"fixpack: {mismatch}: the apply goes on only with --allow-unpinned, and only if every fix's "
            "fingerprints hold on this build (a port makes a profile for it: docs/maintainers/port.md)",
            err=True,
        )
    if prof.opt_ins:
        click.echo(
            f"fixpack: opt-in fixes of {prof.name}, added by name after the command: {' '.join(prof.opt_ins)}", err=True
        )
    click.echo(f"next: {next_step(prof, site, book.root, allow_unpinned=mismatch is not None)}")
    return 0


NEW_SOURCE = click.option(
    "--source",
    "sources",
    multiple=True,
    required=True,
    metavar="DIST=DIR",
    help="A tree of the new release in repository layout: vllm-gaudi=DIR (DIR/vllm_gaudi/...), vllm=DIR.",
)


@click.command()
@click.argument("fix_id", metavar="NEW-ID")
@click.option("--profile", "profile", metavar="NAME", help="The profile the edits are on " + PROFILE_HELP + ".")
@SOURCE
@JSON
@SITE
@click.option(
    "--from-commit",
    "from_commit",
    nargs=2,
    type=(click.Path(exists=True, file_okay=False, path_type=Path), str),
    metavar="DIR REV",
    help="Make the fix from an upstream commit (REV, or BASE..TIP) of the git repository DIR instead: its files "
    "under the pinned packages, ported to the --source tree of the release; origin is the commit.",
)
@guard(_ok_error)
def record(
    fix_id: str,
    profile: str | None,
    sources: tuple[str, ...],
    as_json: bool,
    site: Path | None,
    from_commit: tuple[Path, str] | None,
) -> int:
    """Write fixes/NEW-ID/ from the hand edits of the installed files (or, with --from-commit, from
    an upstream commit).

    Edits are found through RECORD hashes (pip installs) or the checkout (editable installs); the
    pristine bytes come from --source or the editable install's git HEAD. What fixpack applied
    itself is left out: the new fix holds only the edits on top.
    """
    from ..commands.maintain.authoring.record import record as run

    book = catalog()
    roots = parse_sources(sources)
    if from_commit:  # issue 41: a fix from an upstream commit
        from ..commands.maintain.authoring.from_commit import record_commit

        done = record_commit(book, fix_id, book.default_profile(profile, roots).name, *from_commit, roots)
    else:
        from ..commands.install.status import site_profile

        name = profile or (site_profile(book, chosen(site)) if len(book.usable) > 1 else None)
        done = run(book, fix_id, book.default_profile(name, roots).name, site, roots)
    if as_json:
        render.dump(
            {
                "ok": True,
                "fix": fix_id,
                "dir": str(done.fix_dir),
                "files": [list(f) for f in done.files],
                "on_top_of": done.on_top_of,
                "requires": done.requires,
                "notes": done.notes,
            }
        )
        return 0
    render.notes(done.notes)
    for path, plus, minus in done.files:
        print(f"  recorded  {path} +{plus} -{minus}")
    print(f"fixpack record: wrote {done.fix_dir} (fill in the TODOs of fix.toml and write proof.py)")
    return 0


@click.command()
@click.argument("fixes", nargs=-1, metavar="[FIX ...]")
@click.option("--profile", metavar="NAME", help="Port every fix of this profile (opt-ins included), in pack order.")
@click.option("--from", "from_release", required=True, metavar="RELEASE", help="The release the fixes are on.")
@NEW_SOURCE
@click.option(
    "--write",
    "write",
    metavar="NEW-RELEASE",
    help="Write the ported changes of the fixes still needed and a draft profile.",
)
@click.option(
    "--resolved",
    "resolved",
    multiple=True,
    metavar="PATH=FILE",
    help="With one FIX: its change of PATH is FILE, a three-way merge's conflicts resolved by hand "
    "(port --write leaves the merge next to the fix).",
)
@click.option("--no-proofs", is_flag=True, help="Do not run the proofs: only say whether each change applies.")
@JOBS
@JSON
@guard(_ok_error)
def port(
    fixes: tuple[str, ...],
    profile: str | None,
    from_release: str,
    sources: tuple[str, ...],
    write: str | None,
    resolved: tuple[str, ...],
    no_proofs: bool,
    jobs: int,
    as_json: bool,
) -> int:
    """Try FIXes (or a profile's) on the --source trees of another release and report each change:
    unchanged, offset, cst, upstream or conflict. Then run each fix's proof on the new trees as they
    are (still failing: the bug is still there; passing: fixed-upstream, the fix is no longer
    needed) and with the ported changes applied (passing: the ported fix is proven). Give
    --source vllm=DIR too: the proofs run vLLM's code. Exits 0 once the report is made, conflicts or not.
    """
    from ..commands.maintain.porting.port import port as run

    if not fixes and not profile:
        raise UsageError("give FIX ... or --profile NAME")
    resolutions = _resolutions(resolved, fixes)
    if not no_proofs:
        _proofs_can_run()
    result = run(
        catalog(), fixes, profile, from_release, parse_sources(sources), write, not no_proofs, jobs, resolutions
    )
    if as_json:
        render.dump(result.to_json())
        render.notes(result.notes)
    else:
        render_maintain.port_human(result)
        render_maintain.port_proofs_human(result)
    return 0
