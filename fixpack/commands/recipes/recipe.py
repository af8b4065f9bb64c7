"""``fixpack recipe list | show | check``: the cookbook's recipes as data, their launch script and
fix table, and the checks CI runs on them. Data in, results out; nothing printed here.

``check`` finds, for each recipe, every problem with the line it is about: the fix set resolves
(profile, opt-ins allowed, requires met, each fix it depends on in the plan), the image commits are
among the profile's accepted ones, the layout agrees with the serve arguments, its own launch
passes its own rules, each rule names a real variable (one the recipe exports, or one of vLLM's
own when vLLM is importable), a real option (one vLLM's parser knows; without vLLM, one of the
recipe's own options, and a note for the others) and a real fix, and the serve arguments parse
with vLLM's own parser when vLLM is importable. With ``upstream``, the recipe is checked against
the vLLM recipe it names (:mod:`.recipe_upstream`)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ...cookbook.catalog import Catalog
from ...cookbook.recipes import Recipe, load_recipe, load_recipes
from ...core.names import suggest
from ...core.plan import resolve
from ...errors import FixpackError, UsageError
from ...models import Plan
from ...runtime import rules as rulebook
from .recipe_upstream import cross_check
from .vllm_parser import Probe, probe

__all__ = [
    "recipes",
    "pick",
    "find",
    "verified_table",
    "apply_args",
    "plan_for",
    "launch_script",
    "fix_table",
    "check",
    "Checked",
    "CheckResult",
]

APPLY_ALL = '"$COOKBOOK/fixes/apply_all.py"'


def recipes(book: Catalog) -> dict[str, Recipe]:
    return load_recipes(book.root)


def pick(all_recipes: dict[str, Recipe], slug: str) -> Recipe:
    if slug not in all_recipes:
        known = ", ".join(all_recipes) or "none"
        raise UsageError(f"unknown recipe {slug!r}{suggest(slug, list(all_recipes))}; known: {known}")
    return all_recipes[slug]


def find(book: Catalog, slug: str) -> Recipe:
    """A recipe of the cookbook by slug, or a recipe file outside it (``tests/``' own recipes) by path."""
    path = Path(slug)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return load_recipe(path, book.root)
    return pick(recipes(book), slug)


def verified_table(recipe: Recipe) -> dict[str, list[tuple[str, str, str]]]:
    """The page's tables from the checks: for "verified" and "performance", (row, result, check id)
    for each check that is a row of the page, in the recipe's order."""
    tables: dict[str, list[tuple[str, str, str]]] = {"verified": [], "performance": []}
    for c in recipe.verify.checks if recipe.verify is not None else ():
        if c.row is not None and c.result is not None:
            tables[c.table].append((c.row, c.result, c.id))
    return tables


def apply_args(recipe: Recipe) -> list[str]:
    """The apply arguments of a recipe's fix set: ``--profile P OPT-IN ...``."""
    return ["--profile", recipe.profile, *recipe.opt_ins]


def plan_for(book: Catalog, recipe: Recipe) -> Plan:
    """The plan ``apply`` resolves for the recipe's fix set (usage errors as ``apply`` raises them)."""
    return resolve(book.fixes, book.profile(recipe.profile), recipe.opt_ins)


def launch_script(recipe: Recipe) -> str:
    """The page's launch: the exports in order, the apply line, the ``vllm serve`` command."""
    lines = [f"# {recipe.title} (recipe {recipe.slug}). Run inside a vllm-gaudi container;"]
    lines.append("# $COOKBOOK is a checkout of the cookbook there.")
    lines += [f"export {name}={shlex.quote(value)}" for name, value in recipe.env]
    opt_ins = " plus this recipe's opt-in fixes, in the pack's order" if recipe.opt_ins else ""
    lines += [
        "",
        f"# Fixes: the {recipe.profile} profile{opt_ins}.",
        "# Stops with a non-zero exit code if the image does not match.",
        f"python3 {APPLY_ALL} {shlex.join(apply_args(recipe))} || exit 1",
        "",
    ]
    serve = [f"vllm serve {shlex.quote(recipe.serve_model)}"]
    serve += [f"  {opt}" + ("" if value is None else f" {shlex.quote(value)}") for opt, value in recipe.serve_args]
    lines.append(" \\\n".join(serve))
    return "\n".join(lines) + "\n"


def fix_table(recipe: Recipe) -> list[tuple[str, bool, str]]:
    """(fix, opt-in, why) for each fix the recipe depends on, in its order."""
    return [(fix, fix in recipe.opt_ins, why) for fix, why in recipe.depends_on]


@dataclass
class Checked:
    recipe: Recipe
    problems: list[tuple[int, str]] = field(default_factory=list)  # (line, what is wrong)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class CheckResult:
    checked: list[Checked]
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checked)


def check(book: Catalog, slugs: tuple[str, ...] = (), upstream: Path | None = None) -> CheckResult:
    all_recipes = recipes(book)
    chosen = [pick(all_recipes, s) for s in slugs] if slugs else list(all_recipes.values())
    if upstream is not None and not upstream.is_dir():
        raise UsageError(f"--upstream {upstream}: not a directory", path=str(upstream))
    parser = probe([r.argv[1:] for r in chosen]) if chosen else Probe(unavailable="no recipes")
    notes = []
    if parser.unavailable:
        notes.append(f"serve arguments not parsed with vLLM's parser: {parser.unavailable}")
    else:
        notes.append(f"serve arguments parsed with vLLM {parser.version}'s own parser")
    if upstream is None:
        notes.append("upstream cross-check skipped (give --upstream DIR: the folder of the vLLM recipes)")
    out = []
    for i, recipe in enumerate(chosen):
        checked = Checked(recipe)
        _check_one(book, checked, parser, i)
        if upstream is not None and recipe.upstream is not None:
            checked.problems += cross_check(recipe, upstream)
        elif upstream is not None:
            checked.notes.append("names no upstream recipe: nothing to cross-check")
        checked.problems.sort(key=lambda p: p[0])
        out.append(checked)
    if not out:
        notes.append(f"no recipes in {book.root / 'recipes'}")
    return CheckResult(out, notes)


def _check_one(book: Catalog, c: Checked, parser: Probe, index: int) -> None:
    r = c.recipe
    plan = _fix_set(book, c)
    if not parser.unavailable:
        parsed = parser.results[index]
        if not parsed.ok:
            c.problems.append((r.line("serve", "args"), f"vLLM's parser refuses the serve arguments: {parsed.error}"))
    _layout(c)
    _rule_names(book, c, parser)
    for i, chk in enumerate(r.verify.checks if r.verify is not None else ()):
        for j, fid in enumerate(chk.fixes):
            if fid not in book.fixes:
                line = r.line("verify", "checks", i, "fixes", j)
                c.problems.append((line, f"check {chk.id} names unknown fix {fid!r}{suggest(fid, list(book.fixes))}"))
    if plan is not None:
        for finding in rulebook.evaluate(r.rules, r.env_dict(), r.argv[1:], {f.id for f in plan.fixes}):
            message = f"its own launch breaks rule {finding.rule} ({finding.verdict}): {finding.message}"
            c.problems.append((r.line("rules", _rule_index(r, finding.rule)), message))


def _rule_index(r: Recipe, rule_id: str) -> int:
    return next(i for i, rule in enumerate(r.rules) if rule["id"] == rule_id)


def _fix_set(book: Catalog, c: Checked) -> Plan | None:
    """Profile, image, opt-ins and the fixes depended on; the plan when it resolves."""
    r = c.recipe
    if r.profile not in book.profiles:
        message = f"unknown profile {r.profile!r}{suggest(r.profile, list(book.profiles))}"
        c.problems.append((r.line("fixes", "profile"), message))
        return None
    profile = book.profiles[r.profile]
    if profile.draft:
        c.problems.append((r.line("fixes", "profile"), f"profile {profile.name!r} is a draft ({profile.draft})"))
        return None
    if r.release != profile.release:
        message = f"image release {r.release} is not profile {profile.name}'s ({profile.release})"
        c.problems.append((r.line("image", "release"), message))
    pins = {p.dist: p for p in profile.pins}
    for dist, commit in r.commits.items():
        line = r.line("image", "commits", dist)
        if dist not in pins:
            c.problems.append((line, f"profile {profile.name} pins no {dist!r} (it pins: {', '.join(pins)})"))
        elif not any(a.startswith(commit) or commit.startswith(a) for a in pins[dist].commits):
            accepted = ", ".join(pins[dist].commits)
            c.problems.append(
                (line, f"{dist} @ {commit} is not among profile {profile.name}'s accepted commits ({accepted})")
            )
    broken = False
    for i, fid in enumerate(r.opt_ins):
        line = r.line("fixes", "opt_ins", i)
        if fid not in book.fixes:
            c.problems.append((line, f"unknown fix {fid!r}{suggest(fid, list(book.fixes))}"))
            broken = True
        elif fid not in profile.opt_ins:
            allowed = ", ".join(profile.opt_ins) or "none"
            c.problems.append((line, f"fix {fid!r} is not an opt-in of profile {profile.name} (opt-ins: {allowed})"))
            broken = True
    plan = None
    if not broken:
        try:
            plan = plan_for(book, r)
        except FixpackError as exc:
            c.problems.append((r.line("fixes", "opt_ins"), f"the fix set does not resolve: {exc.message}"))
    planned = {f.id for f in plan.fixes} if plan is not None else set()
    for i, (fid, _) in enumerate(r.depends_on):
        line = r.line("fixes", "depends_on", i, "fix")
        if fid not in book.fixes:
            c.problems.append((line, f"depends on unknown fix {fid!r}{suggest(fid, list(book.fixes))}"))
        elif plan is not None and fid not in planned:
            why = (
                f"it is an opt-in of profile {profile.name}: name it in fixes.opt_ins"
                if fid in profile.opt_ins
                else f"profile {profile.name} does not apply it"
            )
            c.problems.append((line, f"depends on {fid!r}, which is not in the plan: {why}"))
    return plan


def _layout(c: Checked) -> None:
    """hardware.layout against the serve arguments and the cards."""
    r = c.recipe
    given = dict(rulebook.options(r.argv[1:]))
    layout = r.layout
    for key, spelled in (
        ("tensor_parallel", ("--tensor-parallel-size", "-tp")),
        ("pipeline_parallel", ("--pipeline-parallel-size", "-pp")),
        ("data_parallel", ("--data-parallel-size", "-dp")),
    ):
        value = next((given[s] for s in spelled if s in given), None) or "1"
        if value != str(layout[key]):
            message = f"hardware.layout.{key} is {layout[key]}, the serve arguments give {value}"
            c.problems.append((r.line("hardware", "layout", key), message))
    ep = any(s in given for s in ("--enable-expert-parallel", "-ep"))
    if ep != layout["expert_parallel"]:
        said = "true" if layout["expert_parallel"] else "false"
        message = (
            f"hardware.layout.expert_parallel is {said}, the serve arguments {'turn it on' if ep else 'leave it off'}"
        )
        c.problems.append((r.line("hardware", "layout"), message))
    cards = layout["tensor_parallel"] * layout["pipeline_parallel"] * layout["data_parallel"]
    if cards != r.cards:
        c.problems.append((r.line("hardware", "cards"), f"hardware.cards is {r.cards}, the layout uses {cards}"))


def _rule_names(book: Catalog, c: Checked, parser: Probe) -> None:
    """Each rule's variables, options and fixes are real ones."""
    r = c.recipe
    exported = {name for name, _ in r.env}
    own = {option for option, _ in rulebook.options(r.argv[1:])}
    unchecked: list[str] = []
    for i, rule in enumerate(r.rules):
        for kind, name, where in rulebook.names(rule["when"]):
            line = r.line("rules", i, "when", *where)
            if kind == "env" and name not in exported and name not in parser.variables:
                known = " nor one vLLM reads" if not parser.unavailable else ""
                hint = suggest(name, sorted(exported | parser.variables))
                c.problems.append(
                    (line, f"rule {rule['id']} tests {name}, which the recipe does not export{known}{hint}")
                )
            elif kind == "arg" and not parser.unavailable and name not in parser.options:
                hint = suggest(name, sorted(parser.options))
                c.problems.append(
                    (line, f"rule {rule['id']} tests {name}, an option vLLM's parser does not know{hint}")
                )
            elif kind == "arg" and parser.unavailable and name not in own:
                unchecked.append(name)
            elif kind == "fix" and name not in book.fixes:
                hint = suggest(name, list(book.fixes))
                c.problems.append((line, f"rule {rule['id']} names unknown fix {name!r}{hint}"))
    if unchecked:
        spelled = ", ".join(unchecked)
        c.notes.append(f"rule options not checked without vLLM's parser (not in the recipe's own arguments): {spelled}")
