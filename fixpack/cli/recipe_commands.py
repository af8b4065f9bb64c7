"""``fixpack recipe list | show | check``: the cookbook's recipes (``recipes/<org>/<model>/*.yaml``),
their launch script and fix table, and the checks CI runs on them; and how each is printed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ..errors import FixpackError, UsageError
from . import render, render_accept
from .options import JSON, catalog, guard


def _error(exc: FixpackError, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"ok": False, "error": exc.said, "file": exc.path, "line": exc.line}


@click.group("recipe")
def recipe() -> None:
    """The cookbook's recipes: a page's model, layout, image, fix set, environment, serve command
    and rules, one YAML file each under recipes/<org>/<model>/, named by meta.slug.

    Exit codes: 0 done; 1 a recipe breaks a check (check), a check failed (accept); 2 a recipe
    cannot be read or is not a recipe, or an unknown recipe; 3 the server cannot be reached or does
    not serve the recipe's model (accept).
    """


@recipe.command("list")
@JSON
@guard(_error)
def list_(as_json: bool) -> int:
    """List the recipes: slug, model, cards, fix set and file."""
    from ..commands.recipes.recipe import recipes

    rows = [_summary(r) for r in recipes(catalog()).values()]
    if as_json:
        render.dump({"recipes": rows})
        return 0
    width = max((len(r["slug"]) for r in rows), default=0)
    for row in rows:
        fix_set = " ".join([row["profile"], *row["opt_ins"]])
        hardware = f"{row['cards']} {row['device']}"
        print(f"{row['slug']:<{width}}  {row['model']} on {hardware}, fixes {fix_set}  ({row['file']})")
    return 0


def _summary(r: Any) -> dict[str, Any]:
    return {
        "slug": r.slug,
        "title": r.title,
        "file": r.shown,
        "page": r.page,
        "model": r.model,
        "device": r.device,
        "cards": r.cards,
        "profile": r.profile,
        "opt_ins": list(r.opt_ins),
    }


def recipe_json(r: Any) -> dict[str, Any]:
    """The whole recipe as data (rules as fixpack.runtime.rules reads them)."""
    return {
        **_summary(r),
        "description": r.description,
        "variant": r.variant,
        "layout": r.layout,
        "image": {"release": r.release, "commits": r.commits, "gaudi_sw": r.gaudi_sw},
        "depends_on": [{"fix": f, "why": why} for f, why in r.depends_on],
        "env": [{"name": n, "value": v} for n, v in r.env],
        "serve": {"model": r.serve_model, "args": r.argv[1:]},
        "rules": list(r.rules),
        "upstream": None
        if r.upstream is None
        else {
            "file": r.upstream.file,
            "variant": r.upstream.variant,
            "strategy": r.upstream.strategy,
            "features": list(r.upstream.features),
        },
    }


@recipe.command()
@click.argument("slug")
@click.option("--launch", is_flag=True, help="Print the launch script: the exports, the apply line, vllm serve.")
@click.option("--fixes", is_flag=True, help="Print the fix table: each fix the recipe depends on, opt-in, why.")
@click.option("--verified", is_flag=True, help="Print the page's Verified and Performance tables from its checks.")
@click.option("--markdown", is_flag=True, help="With --fixes or --verified: the table in Markdown, as on the page.")
@JSON
@guard(_error)
def show(slug: str, launch: bool, fixes: bool, verified: bool, markdown: bool, as_json: bool) -> int:
    """Show one recipe (SLUG: its meta.slug, or a recipe file's path), its launch script, its fix
    table or its verified tables."""
    from ..commands.recipes.recipe import apply_args, find, fix_table, launch_script

    if launch + fixes + verified > 1:
        raise click.UsageError("give one of --launch, --fixes, --verified")
    if markdown and not (fixes or verified):
        raise click.UsageError("--markdown goes with --fixes or --verified")
    r = find(catalog(), slug)
    if verified:
        return _show_verified(r, markdown, as_json)
    if launch:
        script = launch_script(r)
        if as_json:
            env = [{"name": n, "value": v} for n, v in r.env]
            render.dump({"slug": r.slug, "env": env, "apply": apply_args(r), "serve": r.argv, "script": script})
        else:
            sys.stdout.write(script)
        return 0
    if fixes:
        table = fix_table(r)
        if as_json:
            rows = [{"fix": f, "opt_in": opt_in, "why": why} for f, opt_in, why in table]
            render.dump({"slug": r.slug, "profile": r.profile, "fixes": rows})
        elif markdown:
            print("| Fix | Why this model needs it |\n|---|---|")
            for f, opt_in, why in table:
                print(f"| `{f}`{' (opt-in)' if opt_in else ''} | {why.replace('|', '&#124;')} |")
        else:
            width = max((len(f) for f, _, _ in table), default=0)
            for f, opt_in, why in table:
                print(f"{f:<{width}}  {'opt-in' if opt_in else '      '}  {why}")
        return 0
    if as_json:
        render.dump(recipe_json(r))
        return 0
    _show_human(r)
    return 0


def _show_verified(r: Any, markdown: bool, as_json: bool) -> int:
    from ..commands.recipes.recipe import verified_table

    if r.verify is None:
        raise UsageError(f"recipe {r.slug} has no verify section: no checks to show ({r.shown})")
    tables = verified_table(r)
    if as_json:
        out = {
            name: [{"check": row, "result": res, "id": cid} for row, res, cid in rows] for name, rows in tables.items()
        }
        render.dump({"slug": r.slug, **out})
        return 0
    for name, heading in (("verified", "Verified"), ("performance", "Performance")):
        rows = tables[name]
        if not rows:
            continue
        first = "Check" if name == "verified" else "Test"
        if markdown:
            print(f"### {heading}\n\n| {first} | Result |\n|---|---|")
            for row, res, _ in rows:
                print(f"| {row.replace('|', '&#124;')} | {res.replace('|', '&#124;')} |")
            print()
        else:
            width = max(len(row) for row, _, _ in rows)
            print(f"{heading}\n{first:<{width}}  Result")
            for row, res, _ in rows:
                print(f"{row:<{width}}  {res}")
            print()
    return 0


def _show_human(r: Any) -> None:
    layout = r.layout
    parts = [f"TP {layout['tensor_parallel']}"]
    parts += [f"{k[:2].upper()} {layout[k + '_parallel']}" for k in ("pipeline", "data") if layout[k + "_parallel"] > 1]
    parts += ["EP"] if layout["expert_parallel"] else []
    commits = ", ".join(f"{d} @ {c}" for d, c in r.commits.items())
    print(f"{r.slug}: {r.title}  ({r.shown})")
    if r.description:
        print(f"  {r.description}")
    print(f"model     {r.model} (variant {r.variant})")
    print(f"hardware  {r.cards} x {r.device} ({' + '.join(parts)})")
    print(f"image     {r.release}: {commits}" + (f", Gaudi SW {r.gaudi_sw}" if r.gaudi_sw else ""))
    print(f"fixes     --profile {r.profile} {' '.join(r.opt_ins)}; depends on {len(r.depends_on)} (--fixes)")
    print(f"launch    {len(r.env)} exports, vllm serve {r.serve_model} with {len(r.serve_args)} options (--launch)")
    print("rules")
    for rule in r.rules:
        print(f"  {rule['verdict']:<6}  {rule['id']}: {rule['message']}")
    if r.upstream is not None:
        up = r.upstream
        features = ", ".join(up.features) or "none"
        print(f"upstream  {up.file}, variant {up.variant}, strategy {up.strategy or '-'}, features {features}")


def _check_error(exc: FixpackError, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"ok": False, "recipes": [], "notes": [], "error": exc.said, "file": exc.path, "line": exc.line}


@recipe.command()
@click.argument("slugs", nargs=-1, metavar="[SLUG ...]")
@click.option(
    "--upstream",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Cross-check each recipe against the vLLM recipe it names: DIR holds that YAML and a strategies/ folder.",
)
@JSON
@guard(_check_error)
def check(slugs: tuple[str, ...], upstream: Path | None, as_json: bool) -> int:
    """For CI: every recipe (or those named) resolves (profile, opt-ins, requires, image commits,
    the fixes it depends on in the plan), its launch passes its own rules, each rule names a real
    variable, option and fix, and the serve arguments parse with vLLM's own parser when vLLM is
    importable (here, or the tree of FIXPACK_SRC_VLLM). Exits 1 naming each problem's file and line."""
    from ..commands.recipes.recipe import check as run_check

    result = run_check(catalog(), slugs, upstream)
    if as_json:
        rows = [
            {
                "slug": c.recipe.slug,
                "file": c.recipe.shown,
                "ok": c.ok,
                "problems": [{"line": line, "message": m} for line, m in c.problems],
                "notes": c.notes,
            }
            for c in result.checked
        ]
        render.dump({"ok": result.ok, "recipes": rows, "notes": result.notes, "error": None})
    render.notes(result.notes)
    for c in result.checked:
        render.notes([f"{c.recipe.slug}: {n}" for n in c.notes])
        if not as_json:
            mark = render.paint("ok  " if c.ok else "FAIL", "applied" if c.ok else "refused", sys.stdout)
            print(f"{mark}  {c.recipe.slug}  ({c.recipe.shown})")
            for line, message in c.problems:
                print(f"      {c.recipe.shown}:{line}: {message}")
    if not as_json:
        failed = sum(1 for c in result.checked if not c.ok)
        print(f"fixpack recipe check: {len(result.checked) - failed} passed, {failed} failed")
    return 0 if result.ok else 1


def _accept_error(exc: FixpackError, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"ok": False, "checks": [], "error": exc.said, "file": exc.path, "line": exc.line}


@recipe.command()
@click.argument("slug")
@click.option(
    "--url", required=True, help="The server to check, e.g. http://127.0.0.1:8000: no other address is sent to."
)
@click.option("--only", multiple=True, metavar="ID", help="Run only this check (repeatable).")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE", help="Write JUnit XML.")
@click.option("--api-key", default="EMPTY", envvar="OPENAI_API_KEY", show_envvar=True, help="The server's API key.")
@click.option("--model", help="The model name the server lists (default: the recipe's, or its --served-model-name).")
@JSON
@guard(_accept_error)
def accept(
    slug: str, url: str, only: tuple[str, ...], junit: Path | None, api_key: str, model: str | None, as_json: bool
) -> int:
    """Run a recipe's checks (its verify section: the page's Verified and Performance tables)
    against a live server, with the official openai client (fixpack's accept extra).
    SLUG: the recipe's meta.slug, or a recipe file's path. Exit 0 every check held, 1 some
    failed, 3 the server cannot be reached or does not list the recipe's model."""
    from ..commands.install.outputs import write_named
    from ..commands.recipes.accept import accept as run_accept
    from ..commands.recipes.accept import as_json as result_json
    from ..commands.recipes.recipe import find

    r = find(catalog(), slug)
    result = run_accept(r, url, only=only, api_key=api_key, model=model, progress=render_accept.progress(sys.stderr))
    if junit is not None:
        junit.parent.mkdir(parents=True, exist_ok=True)
        write_named("--junit", junit, render_accept.junit(result))
    if as_json:
        render.dump(result_json(result))
    else:
        render_accept.table(result, sys.stdout)
    return 0 if result.ok else 1
