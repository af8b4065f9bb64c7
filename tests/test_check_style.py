"""fixpack diff --check-style on a small cookbook whose vllm-gaudi tree declares upstream's hooks:
a clean patch passes (also in a file that failed before it), a patch that yapf would reformat or
that brings a ruff problem fails with the problem named, and the pinned tools come from the index
into a cache venv (exit 3, saying so, when they cannot be had)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from builders import BATCH, RUNNER, SAMPLER

PRE_COMMIT = """\
exclude: 'vllm_gaudi/third_party/.*'
repos:
- repo: https://github.com/google/yapf
  rev: v0.43.0
  hooks:
  - id: yapf
    args: [--in-place, --verbose]
- repo: https://github.com/astral-sh/ruff-pre-commit
  rev: v0.11.7
  hooks:
  - id: ruff
    args: [--output-format, github, --fix]
  - id: ruff-format
    files: ^(examples)/.*
"""
PYPROJECT = """\
[tool.yapf]
column_limit = 120

[tool.ruff]
line-length = 120

[tool.ruff.lint]
select = ["E", "F", "UP"]
"""
# batch.py has a problem of its own before any fix: not a fix's
OLD_BATCH = BATCH + '\n    def name(self):\n        return "batch %s" % self\n'


@pytest.fixture(scope="session")
def tools_dir(tmp_path_factory) -> str:
    return os.environ.get("FIXPACK_TOOLS") or str(tmp_path_factory.getbasetemp() / "style-tools")


@pytest.fixture
def styled(cookbook, tools_dir, monkeypatch):
    gaudi = cookbook.sources["vllm-gaudi"]
    (gaudi / ".pre-commit-config.yaml").write_text(PRE_COMMIT)
    (gaudi / "pyproject.toml").write_text(PYPROJECT)
    (gaudi / "vllm_gaudi/batch.py").write_text(OLD_BATCH)
    (gaudi / "vllm_gaudi/third_party").mkdir()
    (gaudi / "vllm_gaudi/third_party/vendored.py").write_text("X=1\n")
    monkeypatch.setenv("FIXPACK_TOOLS", tools_dir)
    cookbook.fix("clean", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 5\n", "return 55\n"))})
    cookbook.fix("batch-clean", {"vllm_gaudi/batch.py": (OLD_BATCH, OLD_BATCH.replace("a, b):", "a: int, b: int):"))})
    cookbook.fix("unformatted", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 9\n", "return  [9,8]\n"))})
    cookbook.fix("unused-import", {"vllm_gaudi/runner.py": (RUNNER, "import os\n\n\n" + RUNNER)})
    cookbook.fix("vendored", {"vllm_gaudi/third_party/vendored.py": ("X=1\n", "X=2\n")})
    cookbook.fix("doubling", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x\n", "return x * 2\n"))})
    cookbook.profile(["clean", "batch-clean", "unformatted", "unused-import", "vendored", "doubling"])
    cookbook.lock()
    return cookbook


def _sources(cookbook) -> list[str]:
    return [f"--source={d}={p}" for d, p in cookbook.sources.items()]


def _can_install(tools_dir: str) -> None:
    if not any(Path(tools_dir).glob("*/bin/python")) and os.environ.get("PIP_NO_INDEX"):
        pytest.skip("PIP_NO_INDEX is set and no cached style tools: yapf 0.43.0 and ruff 0.11.7 cannot be had")


def test_each_fix_judged_on_its_own_lines(cli, styled, tools_dir):
    _can_install(tools_dir)
    r = cli("diff", "--profile", "v0.26.0", "--check-style", "--json", *_sources(styled))
    if r.exit_code == 3:
        pytest.skip(f"the pinned style tools cannot be had here: {r.output.strip()}")
    out = json.loads(r.stdout)
    assert r.exit_code == 1 and out["ok"] is False
    assert out["tools"] == {"yapf": "0.43.0", "ruff": "0.11.7"}
    got = {f["id"]: f for f in out["fixes"]}
    checks = {f: [x["checks"] for x in v["files"]] for f, v in got.items()}
    assert checks == {
        # runner.py ends in blank lines yapf would remove, batch.py lacks a blank line yapf would add
        # and has a printf-style format: not the fixes'
        "clean": [{"yapf": "passes", "ruff": "passes"}],
        "batch-clean": [{"yapf": "passes", "ruff": "passes"}],
        "unformatted": [{"yapf": "fails", "ruff": "passes"}],
        "unused-import": [{"yapf": "passes", "ruff": "fails"}],
        "vendored": [{"yapf": "not-run", "ruff": "not-run"}],  # the config's top-level exclude
        "doubling": [],
    }
    assert got["unformatted"]["files"][0]["problems"] == ["yapf 0.43.0 would reformat vllm_gaudi/runner.py at lines 38"]
    assert got["unused-import"]["files"][0]["problems"] == [
        "ruff 0.11.7: vllm_gaudi/runner.py:1: F401 `os` imported but unused"
    ]
    assert got["doubling"]["note"].endswith("has no .pre-commit-config.yaml (upstream's checks)")
    assert not got["doubling"]["ok"]  # not checked is not said to pass

    assert got["vendored"]["note"].startswith("not checked: the tree's hooks leave its files out")
    r = cli("diff", "clean", "batch-clean", "--check-style", *_sources(styled))
    assert r.exit_code == 0, r.output
    assert "  clean        passes  vllm-gaudi: ruff passes, yapf passes\n" in r.stdout
    assert r.stdout.endswith("fixpack diff --check-style: 2 pass, 0 fail\n")


def test_tools_that_cannot_be_had_exit_3(cli, styled, tmp_path, monkeypatch):
    monkeypatch.setenv("FIXPACK_TOOLS", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    r = cli("diff", "clean", "--check-style", *_sources(styled))
    assert r.exit_code == 3, r.output
    assert "cannot install ruff==0.11.7 yapf==0.43.0 from the package index" in r.output
    assert [p.name for p in (tmp_path / "empty-cache").iterdir()] == []  # nothing half-made left


def test_check_style_needs_a_tree_with_upstreams_hooks(cli, styled):
    (styled.sources["vllm-gaudi"] / ".pre-commit-config.yaml").unlink()
    r = cli("diff", "clean", "--check-style", *_sources(styled))
    assert r.exit_code == 2 and "no tree to check the patches on" in r.output
    r = cli("diff", "clean", "--json")
    assert r.exit_code == 2 and "--json and --source go with --check-style" in r.output


def test_ruff_check_is_ruffs_lint_hook_under_its_new_id(tmp_path):
    """ruff-pre-commit 0.12 renamed its lint hook ``ruff-check`` (vLLM's config names it so); the
    formatter's hook is not a check of the lint kind and is left out."""
    from fixpack.commands.maintain.proving.style import hooks

    (tmp_path / ".pre-commit-config.yaml").write_text(
        "repos:\n- repo: https://github.com/astral-sh/ruff-pre-commit\n  rev: v0.14.0\n  hooks:\n"
        "  - id: ruff-check\n    args: [--output-format, github, --fix]\n  - id: ruff-format\n"
    )
    found, exclude = hooks(tmp_path)
    assert [(h.tool, h.version) for h in found] == [("ruff", "0.14.0")] and exclude == ""
