"""``recipes/<org>/<model>/*.yaml``: the cookbook's recipes, one YAML file each (the first, the page's
layout, is ``recipe.yaml``; another layout of the same model goes beside it). The one reader of the
format: YAML loaded safely (PyYAML's safe loader), every key and type checked, and every part's
line kept, so that a reader's error and a check's finding both name the file and the line.

The rules are validated by :mod:`fixpack.runtime.rules`, the stdlib-only module that evaluates
them (in fixpack and, carried out of it, in every vLLM process)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import UsageError
from ..runtime import rules as rulebook
from . import default_root, schema
from .checks import Verify, read_verify

__all__ = ["Recipe", "Upstream", "load_recipe", "load_recipes", "RECIPES_DIR"]

RECIPES_DIR = "recipes"
SLUG = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
HEX = re.compile(r"[0-9a-f]{7,40}\Z")

Where = tuple[str | int, ...]  # keys and indexes from the document's root to a part of it


@dataclass(frozen=True)
class Upstream:
    """The vLLM recipe a recipe derives from: its file, variant, strategy and features."""

    file: str
    variant: str
    strategy: str | None
    features: tuple[str, ...]


@dataclass(frozen=True)
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
    return UsageError(f"invalid recipe {shown}:{line}: {reason}", path=shown, line=line)


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

    def mapping(self, value: Any, where: Where, required: set[str], optional: set[str] | None = None) -> dict:
        known = required | (optional or set())
        name = ".".join(str(w) for w in where) or "the document"
        if not isinstance(value, dict):
            raise self.fail(where, f"{name} must be a mapping")
        self.keys(value, where, known)
        for key in sorted(required):
            if key not in value:
                raise self.fail(where, f"{name} has no {key!r}")
        return value

    def keys(self, value: dict, where: Where, known: set[str]) -> None:
        """The schema's check of one mapping's keys, an unknown one failing at its own line."""
        name = ".".join(str(w) for w in where) or "the document"
        schema.check(value, known, name, lambda key, message: self.fail((*where, key), message))

    def string(self, value: Any, where: Where, pattern: re.Pattern[str] | None = None, what: str = "") -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(where, f"{'.'.join(map(str, where))} must be a non-empty string (quote it)")
        if pattern is not None and not pattern.match(value):
            raise self.fail(where, f"{'.'.join(map(str, where))} {value!r} is not {what}")
        return value

    def strings(self, value: Any, where: Where) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise self.fail(where, f"{'.'.join(map(str, where))} must be a list of strings")
        return tuple(self.string(v, (*where, i)) for i, v in enumerate(value))

    def positive(self, value: Any, where: Where) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(where, f"{'.'.join(map(str, where))} must be a positive integer")
        return value

    def items(self, value: Any, where: Where, empty: bool = False) -> Iterator[tuple[Where, Any]]:
        if not isinstance(value, list) or not (value or empty):
            raise self.fail(where, f"{'.'.join(map(str, where))} must be a {'' if empty else 'non-empty '}list")
        for i, item in enumerate(value):
            yield (*where, i), item


def load_recipe(path: Path, root: Path | None = None) -> Recipe:
    """Read one recipe file; a file that is not a valid recipe is a usage error naming its line."""
    root = default_root() if root is None else root
    shown = _display(path, root)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _error(shown, 1, f"cannot be read ({exc})") from None
    data, lines = _compose(text, shown)
    r = _Reader(shown, lines)
    top = r.mapping(
        data, (), {"meta", "model", "hardware", "image", "fixes", "env", "serve", "rules"}, {"upstream", "verify"}
    )

    meta = r.mapping(top["meta"], ("meta",), {"title", "slug", "page"}, {"description"})
    model = r.mapping(top["model"], ("model",), {"id", "variant"}, {"description"})
    hardware = r.mapping(top["hardware"], ("hardware",), {"device", "cards", "layout"})
    layout = r.mapping(
        hardware["layout"],
        ("hardware", "layout"),
        {"tensor_parallel"},
        {"pipeline_parallel", "data_parallel", "expert_parallel"},
    )
    sizes = {
        k: r.positive(layout.get(k, 1), ("hardware", "layout", k))
        for k in ("tensor_parallel", "pipeline_parallel", "data_parallel")
    }
    expert = layout.get("expert_parallel", False)
    if not isinstance(expert, bool):
        raise r.fail(("hardware", "layout", "expert_parallel"), "hardware.layout.expert_parallel must be true or false")

    image = r.mapping(top["image"], ("image",), {"release", "commits"}, {"gaudi_sw"})
    commits = image["commits"]
    if not isinstance(commits, dict) or not commits:
        raise r.fail(("image", "commits"), "image.commits must map each distribution to the commit the page names")
    for dist, commit in commits.items():
        r.string(commit, ("image", "commits", dist), HEX, "a commit id (7 to 40 lower-case hex digits)")

    fixes = r.mapping(top["fixes"], ("fixes",), {"profile", "depends_on"}, {"opt_ins"})
    depends_on = []
    for where, item in r.items(fixes["depends_on"], ("fixes", "depends_on")):
        entry = r.mapping(item, where, {"fix", "why"})
        depends_on.append((r.string(entry["fix"], (*where, "fix")), r.string(entry["why"], (*where, "why")).strip()))
    _unique([f for f, _ in depends_on], ("fixes", "depends_on"), "fix", r)

    env = []
    for where, item in r.items(top["env"], ("env",)):
        entry = r.mapping(item, where, {"name", "value"})
        name = r.string(entry["name"], (*where, "name"), ENV_NAME, "a variable name")
        if not isinstance(entry["value"], str):
            raise r.fail((*where, "value"), f"the value of {name} must be a string (quote it: {str(entry['value'])!r})")
        env.append((name, entry["value"]))
    _unique([n for n, _ in env], ("env",), "name", r)

    serve = r.mapping(top["serve"], ("serve",), {"model", "args"})
    args: list[tuple[str, str | None]] = []
    for where, item in r.items(serve["args"], ("serve", "args")):
        if isinstance(item, dict) and len(item) == 1:
            option, value = next(iter(item.items()))
            if not isinstance(value, str):
                raise r.fail(where, f"the value of {option} must be a string (quote it: {str(value)!r})")
        else:
            option, value = item, None
        if not isinstance(option, str) or not option.startswith("-") or " " in option:
            raise r.fail(where, "a serve argument is an option (--opt) or a one-key mapping {--opt: value}")
        args.append((option, value))

    rules = []
    for where, item in r.items(top["rules"], ("rules",), empty=True):
        if isinstance(item, dict):  # the rule's own keys here; its conditions are the rulebook's vocabulary
            r.keys(item, where, rulebook.RULE_KEYS)
        try:
            rulebook.validate(item)
        except rulebook.RuleError as exc:
            raise r.fail((*where, *exc.where), f"rule: {exc.message}") from None
        rules.append(item)
    _unique([rule["id"] for rule in rules], ("rules",), "id", r)

    upstream = None
    if top.get("upstream") is not None:
        up = r.mapping(top["upstream"], ("upstream",), {"file", "variant"}, {"strategy", "features"})
        upstream = Upstream(
            file=r.string(up["file"], ("upstream", "file")),
            variant=r.string(up["variant"], ("upstream", "variant")),
            strategy=r.string(up["strategy"], ("upstream", "strategy")) if "strategy" in up else None,
            features=r.strings(up.get("features", []), ("upstream", "features")),
        )

    verify = read_verify(top["verify"], r.fail) if top.get("verify") is not None else None

    return Recipe(
        path=path,
        shown=shown,
        title=r.string(meta["title"], ("meta", "title")),
        slug=r.string(meta["slug"], ("meta", "slug"), SLUG, "a slug (lower-case letters, digits, '.', '-', '_')"),
        page=r.string(meta["page"], ("meta", "page")),
        description=" ".join(str(meta.get("description") or "").split()),
        model=r.string(model["id"], ("model", "id")),
        variant=r.string(model["variant"], ("model", "variant")),
        model_description=" ".join(str(model.get("description") or "").split()),
        device=r.string(hardware["device"], ("hardware", "device")),
        cards=r.positive(hardware["cards"], ("hardware", "cards")),
        layout={**sizes, "expert_parallel": expert},
        release=r.string(image["release"], ("image", "release")),
        commits=dict(commits),
        gaudi_sw=r.string(image["gaudi_sw"], ("image", "gaudi_sw")) if "gaudi_sw" in image else None,
        profile=r.string(fixes["profile"], ("fixes", "profile")),
        opt_ins=r.strings(fixes.get("opt_ins", []), ("fixes", "opt_ins")),
        depends_on=tuple(depends_on),
        env=tuple(env),
        serve_model=r.string(serve["model"], ("serve", "model")),
        serve_args=tuple(args),
        rules=tuple(rules),
        upstream=upstream,
        verify=verify,
        lines=lines,
    )


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
