"""``recipes/<org>/<model>/*.yaml``: the cookbook's recipes, one YAML file each (the first, the page's
layout, is ``recipe.yaml``; another layout of the same model goes beside it). The one reader of the
format: YAML loaded safely (PyYAML's safe loader), every key, kind and default declared in
RECIPE_TABLE and checked by :mod:`.schema`, and every part's line kept, so that a reader's error and
a check's finding both name the file and the line.

The rules are validated by :mod:`fixpack.runtime.rules`, the stdlib-only module that evaluates
them (in fixpack and, carried out of it, in every vLLM process)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import UsageError
from ..runtime import rules as rulebook
from ..runtime.index import read_regular
from . import default_root, schema
from .checks import Verify, read_verify
from .schema import FLAG, ITEMS, LIST, POSITIVE, TEXT, TEXTS, Field, Kind, Table

__all__ = ["Recipe", "Upstream", "RECIPE_TABLE", "load_recipe", "load_recipes", "RECIPES_DIR"]

RECIPES_DIR = "recipes"
RECIPE_LIMIT = 4 << 20  # a recipe is a few kB
SLUG = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
HEX = re.compile(r"[0-9a-f]{7,40}\Z")

Where = tuple[str | int, ...]  # keys and indexes from the document's root to a part of it

# A rule's own keys, for a misspelt one's did-you-mean at its line; a rule's values, and every
# condition's keys, are the rulebook's to check (rulebook.validate).
RULE_TABLE = Table(Field("id"), Field("verdict"), Field("message"), Field("when"))
UPSTREAM_TABLE = Table(
    Field("file", TEXT),
    Field("variant", TEXT),
    Field("strategy", TEXT, None),
    Field("features", TEXTS, [], entries=TEXT),
)
RECIPE_TABLE = Table(
    Field(
        "meta",
        table=Table(Field("title", TEXT), Field("slug", TEXT), Field("page", TEXT), Field("description", default="")),
        attr=None,
    ),
    Field(
        "model",
        table=Table(
            Field("id", TEXT, attr="model"),
            Field("variant", TEXT),
            Field("description", default="", attr="model_description"),
        ),
        attr=None,
    ),
    Field(
        "hardware",
        attr=None,
        table=Table(
            Field("device", TEXT),
            Field("cards", POSITIVE),
            Field(
                "layout",
                table=Table(
                    Field("tensor_parallel", POSITIVE),
                    Field("pipeline_parallel", POSITIVE, 1),
                    Field("data_parallel", POSITIVE, 1),
                    Field("expert_parallel", FLAG, False),
                ),
            ),
        ),
    ),
    Field(
        "image",
        attr=None,
        table=Table(
            Field("release", TEXT),
            Field(
                "commits",
                Kind("a mapping of distributions", lambda v: isinstance(v, dict) and bool(v)),
                entries=TEXT,
                wrong="image.commits must map each distribution to the commit the page names",
            ),
            Field("gaudi_sw", TEXT, None),
        ),
    ),
    Field(
        "fixes",
        attr=None,
        table=Table(
            Field("profile", TEXT),
            Field("depends_on", ITEMS, entries=Table(Field("fix", TEXT), Field("why", TEXT))),
            Field("opt_ins", TEXTS, [], entries=TEXT),
        ),
    ),
    Field("env", ITEMS, entries=Table(Field("name", TEXT), Field("value"))),
    Field(
        "serve",
        table=Table(Field("model", TEXT, attr="serve_model"), Field("args", ITEMS, attr="serve_args")),
        attr=None,
    ),
    Field("rules", LIST),
    Field("upstream", default=None, table=UPSTREAM_TABLE),
    Field("verify", default=None),  # checks.read_verify's, against its own table
)


@dataclass(frozen=True, kw_only=True)
class Upstream:
    """The vLLM recipe a recipe derives from: its file, variant, strategy and features."""

    file: str
    variant: str
    strategy: str | None
    features: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """One recipe file, read and validated (each part's line kept in ``lines``)."""

    path: Path
    shown: str  # the path to print: relative to the cookbook when inside it
    title: str
    slug: str
    page: str
    description: str
    model: str
    variant: str
    model_description: str
    device: str
    cards: int
    layout: dict[str, Any]  # tensor_parallel, pipeline_parallel, data_parallel (ints), expert_parallel (bool)
    release: str
    commits: dict[str, str]  # distribution -> the commit the page names (a prefix)
    gaudi_sw: str | None
    profile: str
    opt_ins: tuple[str, ...]
    depends_on: tuple[tuple[str, str], ...]  # (fix id, why), in the page's order
    env: tuple[tuple[str, str], ...]  # (name, value), in export order
    serve_model: str
    serve_args: tuple[tuple[str, str | None], ...]  # (option, value or None for a flag), in order
    rules: tuple[dict[str, Any], ...]  # as fixpack.runtime.rules reads them (JSON-able)
    upstream: Upstream | None
    verify: Verify | None = None  # the page's "Verified" and "Performance" tables as checks
    lines: dict[Where, int] = field(default_factory=dict, repr=False, compare=False)

    def line(self, *where: str | int) -> int:
        """The line of a part (its nearest enclosing part that has one; 1 for the document)."""
        parts = tuple(where)
        while parts and parts not in self.lines:
            parts = parts[:-1]
        return self.lines.get(parts, 1)

    def at(self, *where: str | int) -> str:
        """``recipes/.../recipe.yaml:LINE`` of a part, for messages."""
        return f"{self.shown}:{self.line(*where)}"

    @property
    def argv(self) -> list[str]:
        """The words after ``vllm serve``: the model, then each option and its value."""
        out = [self.serve_model]
        for option, value in self.serve_args:
            out += [option] if value is None else [option, value]
        return out

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _error(shown: str, line: int, reason: str) -> UsageError:
    return UsageError(
        f"invalid recipe {shown}:{line}: {reason}",
        path=shown,
        line=line,
        way_out="To go on: correct it as docs/reference/formats.md#a-recipe-recipesorgmodelyaml says; "
        "fixpack recipe check reads every recipe again",
    )


def _compose(text: str, shown: str) -> tuple[Any, dict[Where, int]]:
    """The document and each part's line; a YAML error, or a key given twice, names its line."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise _error(shown, 1, "the file is empty")
        lines: dict[Where, int] = {}
        _walk(node, (), lines, shown)
        return loader.construct_document(node), lines
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise _error(shown, line, f"not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise _error(shown, 1, f"not valid YAML: {exc}") from None
    except (RecursionError, MemoryError):
        raise _error(shown, 1, "nested too deep or too large to read") from None
    finally:
        loader.dispose()


def _walk(node: yaml.Node, where: Where, lines: dict[Where, int], shown: str) -> None:
    lines.setdefault(where, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else str(key.value)
            if name in seen:
                raise _error(shown, key.start_mark.line + 1, f"key {name!r} is given twice")
            seen.add(name)
            lines[where + (name,)] = key.start_mark.line + 1
            _walk(value, where + (name,), lines, shown)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*where, i), lines, shown)


class _Reader:
    """Checks the parts of one document, raising an error at the line of the part that is wrong."""

    def __init__(self, shown: str, lines: dict[Where, int]) -> None:
        self.shown, self.lines = shown, lines

    def fail(self, where: Where, reason: str) -> UsageError:
        parts = where
        while parts and parts not in self.lines:
            parts = parts[:-1]
        return _error(self.shown, self.lines.get(parts, 1), reason)

    def match(self, value: str, where: Where, pattern: re.Pattern[str], what: str) -> str:
        if not pattern.match(value):
            raise self.fail(where, f"{'.'.join(map(str, where))} {value!r} is not {what}")
        return value


def load_recipe(path: Path, root: Path | None = None) -> Recipe:
    """Read one recipe file: its YAML checked against RECIPE_TABLE, then each part read into the
    :class:`Recipe`; a file that is not a valid recipe is a usage error naming its line."""
    root = default_root() if root is None else root
    shown = _display(path, root)
    data, lines = _compose(_read(path, shown), shown)
    r = _Reader(shown, lines)
    top = schema.check(data, RECIPE_TABLE, (), schema.YAML, r.fail)
    return _recipe(path, top, r)


def _recipe(path: Path, top: dict[str, Any], r: _Reader) -> Recipe:
    """The checked document's parts, each read: its patterns, its lists' duplicates, its rules."""
    meta, model, image, fixes = top["meta"], top["model"], top["image"], top["fixes"]
    return schema.build(
        Recipe,
        RECIPE_TABLE,
        top,
        path=path,
        shown=r.shown,
        slug=r.match(meta["slug"], ("meta", "slug"), SLUG, "a slug (lower-case letters, digits, '.', '-', '_')"),
        description=_words(meta["description"]),
        model_description=_words(model["description"]),
        commits=_commits(image["commits"], r),
        depends_on=_depends_on(fixes["depends_on"], r),
        env=_env(top["env"], r),
        serve_args=_serve_args(top["serve"]["args"], r),
        rules=_rules(top["rules"], r),
        upstream=_upstream(top["upstream"]),
        verify=None if top["verify"] is None else read_verify(top["verify"], r.fail),
        lines=r.lines,
    )


def _read(path: Path, shown: str) -> str:
    try:
        return read_regular(str(path), RECIPE_LIMIT).decode("utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _error(shown, 1, f"cannot be read ({exc})") from None


def _words(value: Any) -> str:
    """A description: any scalar, its blanks collapsed (a YAML block keeps its line breaks)."""
    return " ".join(str(value or "").split())


def _upstream(up: dict[str, Any] | None) -> Upstream | None:
    if up is None:
        return None
    return schema.build(Upstream, UPSTREAM_TABLE, up)


def _commits(commits: dict[str, str], r: _Reader) -> dict[str, str]:
    for dist, commit in commits.items():
        r.match(commit, ("image", "commits", dist), HEX, "a commit id (7 to 40 lower-case hex digits)")
    return dict(commits)


def _depends_on(entries: list[dict[str, Any]], r: _Reader) -> tuple[tuple[str, str], ...]:
    depends_on = tuple((e["fix"], e["why"].strip()) for e in entries)
    _unique([f for f, _ in depends_on], ("fixes", "depends_on"), "fix", r)
    return depends_on


def _env(entries: list[dict[str, Any]], r: _Reader) -> tuple[tuple[str, str], ...]:
    env = []
    for i, e in enumerate(entries):
        name = r.match(e["name"], ("env", i, "name"), ENV_NAME, "a variable name")
        if not isinstance(e["value"], str):
            raise r.fail(("env", i, "value"), f"the value of {name} must be a string (quote it: {str(e['value'])!r})")
        env.append((name, e["value"]))
    _unique([n for n, _ in env], ("env",), "name", r)
    return tuple(env)


def _serve_args(items: list[Any], r: _Reader) -> tuple[tuple[str, str | None], ...]:
    args: list[tuple[str, str | None]] = []
    for i, item in enumerate(items):
        if isinstance(item, dict) and len(item) == 1:
            option, value = next(iter(item.items()))
            if not isinstance(value, str):
                raise r.fail(("serve", "args", i), f"the value of {option} must be a string (quote it: {str(value)!r})")
        else:
            option, value = item, None
        if not isinstance(option, str) or not option.startswith("-") or " " in option:
            raise r.fail(
                ("serve", "args", i), "a serve argument is an option (--opt) or a one-key mapping {--opt: value}"
            )
        args.append((option, value))
    return tuple(args)


def _rules(items: list[Any], r: _Reader) -> tuple[dict[str, Any], ...]:
    for i, item in enumerate(items):
        if isinstance(item, dict):  # the rule's own keys here; its conditions are the rulebook's vocabulary
            schema.check_keys(item, RULE_TABLE, ("rules", i), schema.YAML, r.fail)
        try:
            rulebook.validate(item)
        except rulebook.RuleError as exc:
            raise r.fail(("rules", i, *exc.where), f"rule: {exc.message}") from None
    _unique([rule["id"] for rule in items], ("rules",), "id", r)
    return tuple(items)


def _unique(values: list[str], where: Where, key: str, r: _Reader) -> None:
    seen: set[str] = set()
    for i, value in enumerate(values):
        if value in seen:
            raise r.fail((*where, i, key), f"{'.'.join(map(str, where))}: {value!r} is given twice")
        seen.add(value)


def recipe_files(root: Path) -> list[Path]:
    folder = root / RECIPES_DIR
    return sorted(p for p in folder.rglob("*.y*ml") if p.is_file()) if folder.is_dir() else []


def load_recipes(root: Path | None = None, files: list[Path] | None = None) -> dict[str, Recipe]:
    """The cookbook's recipes (or those ``files``) by slug; a slug used twice is a usage error."""
    root = default_root() if root is None else root
    out: dict[str, Recipe] = {}
    for path in recipe_files(root) if files is None else files:
        recipe = load_recipe(path, root)
        if recipe.slug in out:
            first = out[recipe.slug]
            raise _error(
                recipe.shown, recipe.line("meta", "slug"), f"slug {recipe.slug!r} is already the slug of {first.shown}"
            )
        out[recipe.slug] = recipe
    return out
