"""Issue 56: the cookbook is trusted, but its reader still answers bad input in one line (exit 2):
an [instead] cycle, two pins of one distribution, commits that are not commit ids, a patch or a lock
that is a FIFO (never read, so nothing hangs), a TOML file, a lock or a recipe nested thousands
deep."""

from __future__ import annotations

import os
import re

import pytest
from builders import RUNNER, SAMPLER, run_cli


def _profiles(cookbook) -> None:
    cookbook.fix("sampler-fix", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return x * 2"))})
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 33\n"))})
    cookbook.profile(["sampler-fix", "runner-fix"])


def one_line_exit_2(said: str) -> None:
    r = run_cli("profiles", timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and said in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_an_instead_cycle_is_refused(cookbook):
    _profiles(cookbook)
    cookbook.profile(["sampler-fix"], name="vllm-0.26.0", dists=("vllm",), instead={"vllm-gaudi": "v0.26.0"})
    cookbook.profile(["sampler-fix", "runner-fix"], instead={"vllm": "vllm-0.26.0"})
    one_line_exit_2("[instead] leads back to")


def test_two_pins_of_one_distribution_are_refused(cookbook):
    _profiles(cookbook)
    path = cookbook.root / "profiles" / "v0.26.0.toml"
    text = path.read_text()
    path.write_text(text + text[text.index('\n[[pin]]\ndist = "vllm"') :])
    one_line_exit_2("two [[pin]] tables have dist 'vllm'")


@pytest.mark.parametrize("commit", ["zz", "", "abc", "g" * 40, "a" * 41])
def test_a_commit_that_is_not_a_commit_id_is_refused(cookbook, commit):
    _profiles(cookbook)
    path = cookbook.root / "profiles" / "v0.26.0.toml"
    path.write_text(re.sub(r"commits = \[[^\]]*\]", f'commits = ["{commit}"]', path.read_text(), count=1))
    one_line_exit_2(f"commit {commit!r} is not a git commit id")


def test_a_patch_that_is_a_fifo_is_refused_without_hanging(cookbook):
    _profiles(cookbook)
    (patch,) = (cookbook.root / "fixes" / "sampler-fix").glob("*.patch")
    patch.unlink()
    os.mkfifo(patch)
    one_line_exit_2("is not a regular file")


def test_a_toml_file_nested_thousands_deep_is_one_line(cookbook):
    _profiles(cookbook)
    toml = cookbook.root / "fixes" / "runner-fix" / "fix.toml"
    toml.write_text(toml.read_text() + "deep = " + "[" * 5000 + "]" * 5000 + "\n")
    one_line_exit_2("nested too deep")


def test_a_lock_that_is_a_fifo_is_refused_without_hanging(cookbook):
    _profiles(cookbook)
    cookbook.lock()
    lock = cookbook.root / "fixes" / "sampler-fix" / "v0.26.0.lock.json"
    lock.unlink()
    os.mkfifo(lock)
    one_line_exit_2("is not a regular file")


def test_a_lock_nested_thousands_deep_is_one_line(cookbook):
    _profiles(cookbook)
    cookbook.lock()
    lock = cookbook.root / "fixes" / "sampler-fix" / "v0.26.0.lock.json"
    lock.write_text('{"files": ' + "[" * 100_000 + "]" * 100_000 + "}")
    one_line_exit_2("nested too deep")


@pytest.mark.parametrize("deep", ["[" * 3000 + "]" * 3000, "{a: " * 3000 + "1" + "}" * 3000])
def test_a_recipe_nested_thousands_deep_is_one_line(cookbook, deep):
    from shipped_recipe import with_recipe

    with_recipe(cookbook)
    recipe = cookbook.root / "recipes" / "Qwen" / "Qwen3.5-122B-A10B-FP8" / "recipe.yaml"
    recipe.write_text(recipe.read_text() + "deep: " + deep + "\n")
    r = run_cli("recipe", "check", timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and "recipe.yaml:1: nested too deep or too large to read" in r.stderr


def test_upstreams_yaml_nested_thousands_deep_is_one_line(tmp_path):
    """The other YAML fixpack reads: vLLM's recipe for --upstream, upstream's pre-commit config."""
    from fixpack.commands.maintain.proving.style import hooks
    from fixpack.commands.recipes.recipe_upstream import _load
    from fixpack.errors import UsageError

    deep = "repos: " + "[" * 3000 + "]" * 3000 + "\n"
    (tmp_path / ".pre-commit-config.yaml").write_text(deep)
    (tmp_path / "recipe.yaml").write_text(deep)
    for read in (lambda: hooks(tmp_path), lambda: _load(tmp_path / "recipe.yaml")):
        with pytest.raises(UsageError, match="nested too deep or too large"):
            read()
