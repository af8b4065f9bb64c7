"""The tiny recipe (``tests/recipes/tiny-qwen3.yaml``) on a real server: its own ``vllm serve``
arguments, and its checks run against a server, through the CLI as a team runs them or one at a
time in this process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import build_env
from server import PORT

from fixpack.commands.recipes.accept import CheckResult, accept
from fixpack.cookbook.recipes import load_recipe

REPO = build_env.REPO
TINY = REPO / "tests" / "recipes" / "tiny-qwen3.yaml"


def recipe_args(model: Path) -> list[str]:
    """``serve DIR ARGS --host --port``: the tiny recipe's own serve arguments, on the server's own port."""
    recipe = load_recipe(TINY, REPO)
    return ["serve", str(model), *recipe.argv[1:], "--host", "127.0.0.1", "--port", PORT]


def run_cli(url: str, model: Path, *extra: str) -> subprocess.CompletedProcess:
    """``fixpack recipe accept`` of the tiny recipe against ``url``."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "fixpack", "recipe", "accept", str(TINY), "--url", url, "--model", str(model)]
    return subprocess.run([*argv, *extra], capture_output=True, text=True, env=env, timeout=600)


def one(url: str, model: Path, check: str) -> CheckResult:
    """One check of the tiny recipe, in this process; its result."""
    result = accept(load_recipe(TINY, REPO), url, only=(check,), model=str(model))
    (done,) = result.checks
    return done
