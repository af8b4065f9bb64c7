"""``recipe check --upstream DIR``: a recipe against the vLLM recipe it names (``DIR/<file>``, and
``DIR/strategies/<strategy>.yaml``), read with PyYAML's safe loader and never changed. The variant's
model id must be the served model; the args (and env) of the named features, the variant's
``extra_args`` and the strategy's ``vllm_args`` must be in the recipe's serve arguments (and env).
The upstream ``base_args`` are not required (the page leaves out ``--trust-remote-code``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ...cookbook.recipes import Recipe
from ...errors import UsageError
from ...runtime.rules import options

__all__ = ["cross_check", "Problem"]

Problem = tuple[int, str]  # (line in the recipe, what is wrong)


def _load(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UsageError(f"upstream recipe {path} cannot be read: {exc}".splitlines()[0], path=str(path)) from None
    except (RecursionError, MemoryError):
        raise UsageError(
            f"upstream recipe {path} cannot be read: nested too deep or too large", path=str(path)
        ) from None


def _pairs(args: list[Any]) -> list[tuple[str, str | None]]:
    return options([str(a) for a in args])


def cross_check(recipe: Recipe, upstream_dir: Path) -> list[Problem]:
    up = recipe.upstream
    assert up is not None
    path = upstream_dir / up.file
    if not path.is_file():
        return [(recipe.line("upstream", "file"), f"upstream recipe {up.file} is not in {upstream_dir}")]
    data = _load(path)
    if not isinstance(data, dict):
        raise UsageError(f"upstream recipe {path} is not a recipe (not a mapping)", path=str(path))
    problems: list[Problem] = []
    serve = {option: value for option, value in options(recipe.argv[1:])}

    def need(args: list[Any], what: str, line: int) -> None:
        for option, value in _pairs(args):
            if option not in serve:
                given = option if value is None else f"{option} {value}"
                problems.append((line, f"{what} passes {given}, not in serve.args"))
            elif value is not None and serve[option] != value:
                problems.append((line, f"{what} passes {option} {value}, serve.args has {option} {serve[option]}"))

    model = data.get("model") or {}
    variants = data.get("variants") or {}
    if up.variant not in variants:
        message = f"upstream has no variant {up.variant!r} (it has: {', '.join(variants)})"
        problems.append((recipe.line("upstream", "variant"), message))
    else:
        variant = variants[up.variant] or {}
        model_id = variant.get("model_id") or model.get("model_id")
        if model_id != recipe.serve_model:
            message = f"serves {recipe.serve_model}, upstream variant {up.variant!r} is {model_id}"
            problems.append((recipe.line("serve", "model"), message))
        need(variant.get("extra_args") or [], f"upstream variant {up.variant!r}", recipe.line("upstream", "variant"))

    features = data.get("features") or {}
    env = recipe.env_dict()
    for i, name in enumerate(up.features):
        line = recipe.line("upstream", "features", i)
        if name not in features:
            problems.append((line, f"upstream has no feature {name!r} (it has: {', '.join(features)})"))
            continue
        feature = features[name] or {}
        need(feature.get("args") or [], f"upstream feature {name!r}", line)
        for var, value in (feature.get("env") or {}).items():
            if env.get(var) != str(value):
                has = env.get(var, "nothing")
                problems.append((line, f"upstream feature {name!r} sets {var}={value}, env has {has}"))

    if up.strategy is not None:
        line = recipe.line("upstream", "strategy")
        if up.strategy not in (data.get("compatible_strategies") or []):
            problems.append((line, f"strategy {up.strategy!r} is not in the upstream recipe's compatible_strategies"))
        strategy_path = upstream_dir / "strategies" / f"{up.strategy}.yaml"
        if not strategy_path.is_file():
            problems.append((line, f"strategy {up.strategy!r}: no strategies/{up.strategy}.yaml in {upstream_dir}"))
        else:
            strategy = _load(strategy_path) or {}
            need(strategy.get("vllm_args") or [], f"strategy {up.strategy!r}", line)
    return problems
