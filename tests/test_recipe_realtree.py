"""The shipped recipe on the real v0.26.0 trees: ``apply_all.py --recipe`` refuses lazy mode
before writing anything and launches the recipe's own arguments once applied, and in a process
started by hand, vLLM's own general-plugin loader (``vllm.plugins.load_general_plugins``) runs
fixpack's runtime check, which refuses lazy mode with the entry point's line.

Needs FIXPACK_SRC_VLLM_GAUDI and FIXPACK_SRC_VLLM (skipped, saying so, without them) and, for the
plugin loader, vLLM's Python dependencies (`.ci/run` installs them, as the README's set-up says)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from realtree import REALTREE, tree_hashes
from runs import SCRIPT
from shipped_recipe import RECIPE, RULES, SLUG, STAND_IN

pytestmark = REALTREE
LINE = f'recipe {SLUG}, rule no-lazy-mode: "{RULES["no-lazy-mode"]}"'


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FIXPACK_", "PT_HPU", "VLLM_", "PYTHONPATH"))}
    return {**env, **RECIPE.env_dict(), **extra}


def test_the_entry_point_refuses_lazy_mode_then_launches_the_recipe(real_site: Path, tmp_path: Path):
    record = tmp_path / "started.json"
    (tmp_path / "vllm").write_text(STAND_IN.format(python=sys.executable, record=str(record)))
    (tmp_path / "vllm").chmod(0o755)
    path = f"{tmp_path}{os.pathsep}{os.environ['PATH']}"
    cmd = [sys.executable, str(SCRIPT), "--recipe", SLUG, "--site", str(real_site), "--exec", "vllm", "serve"]
    before = tree_hashes(real_site)
    lazy = subprocess.run(
        [*cmd, *RECIPE.argv], capture_output=True, text=True, env=_env(PATH=path, PT_HPU_LAZY_MODE="1")
    )
    assert lazy.returncode == 1 and lazy.stderr.splitlines() == [
        f"fixpack: error: {LINE}; nothing was applied, nothing launched"
    ]
    assert tree_hashes(real_site) == before and not (real_site / ".fixpack").exists() and not record.exists()
    r = subprocess.run([*cmd, *RECIPE.argv], capture_output=True, text=True, env=_env(PATH=path))
    assert r.returncode == 0, r.stderr
    assert json.loads(record.read_text())["argv"] == ["serve", *RECIPE.argv]
    assert tree_hashes(real_site) != before


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="vLLM's dependencies are not installed")
def test_vllms_plugin_loader_refuses_lazy_mode_in_a_process_started_by_hand(real_site: Path):
    applied = subprocess.run(
        [sys.executable, str(SCRIPT), "--recipe", SLUG, "--site", str(real_site)], capture_output=True, text=True,
        env=_env(),
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    code = "import vllm.plugins; vllm.plugins.load_general_plugins(); print('loaded')"

    def by_hand(**env: str) -> subprocess.CompletedProcess[str]:
        # fixpack's entry point only: vllm-gaudi's plugins import habana_frameworks
        full = _env(PYTHONPATH=str(real_site), VLLM_PLUGINS="fixpack_runtime_check", **env)
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=300)

    eager = by_hand()
    assert eager.returncode == 0 and "loaded" in eager.stdout, eager.stderr
    assert "fixpack: profile v0.26.0" in eager.stdout + eager.stderr
    lazy = by_hand(PT_HPU_LAZY_MODE="1")
    assert lazy.returncode == 1 and "loaded" not in lazy.stdout
    assert f"RuntimeError: fixpack: {LINE}; FIXPACK_RUNTIME_CHECK=warn only warns" in lazy.stderr
    warned = by_hand(PT_HPU_LAZY_MODE="1", FIXPACK_RUNTIME_CHECK="warn")
    assert warned.returncode == 0 and "loaded" in warned.stdout, warned.stderr
    assert f"fixpack: {LINE} (a refusal; FIXPACK_RUNTIME_CHECK=warn: going on)" in warned.stdout + warned.stderr
