"""The real pack ported onto vllm-gaudi main (091bbadd) and v0.27.0rc0 with vLLM 0.26.0: no conflict
(the transforms and the fix's own port of main carry what a diff does not), and lock agrees with
what port --write wrote. Needs vllm-gaudi's history (VLLM_GAUDI_GIT)
and FIXPACK_SRC_VLLM; skipped, saying so, without them. Proofs are left to `fixpack port` itself
(about a minute per target): these runs take --no-proofs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from builders import REPO

SRC_VLLM = os.environ.get("FIXPACK_SRC_VLLM")
TARGETS = {"main-091bbadd": "091bbadda10bee4fd3f6d0efc1844d2610dd2707", "v0.27.0rc0": "v0.27.0rc0"}
pytestmark = [
    pytest.mark.realtree,
    pytest.mark.skipif(not SRC_VLLM, reason="FIXPACK_SRC_VLLM is not set (real trees)"),
]


def _checkout(tmp_path: Path, gaudi_git: Path, ref: str) -> Path:
    tree = tmp_path / "tree"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(gaudi_git), str(tree)], check=True)
    if subprocess.run(["git", "-C", str(tree), "checkout", "-q", ref], capture_output=True).returncode:
        pytest.skip(f"VLLM_GAUDI_GIT lacks {ref}")
    return tree


@pytest.fixture
def book(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the cookbook's fixes and profiles, for port --write to write in."""
    root = tmp_path / "cookbook"
    for part in ("fixes", "profiles"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("FIXPACK_COOKBOOK", str(root))
    return root


@pytest.mark.parametrize("target", list(TARGETS))
def test_the_pack_ports_without_conflict_and_lock_agrees(cli, book, tmp_path, target, gaudi_git):
    tree = _checkout(tmp_path, gaudi_git, TARGETS[target])
    sources = ["--source", f"vllm-gaudi={tree}", "--source", f"vllm={SRC_VLLM}"]
    r = cli("port", "--profile", "v0.26.0", "--from", "v0.26.0", *sources, "--no-proofs", "--json", "--write", target)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["to"] == target and out["counts"]["conflict"] == 0, out["counts"]
    outcomes = {(c["fix"], c["path"]): c["outcome"] for c in out["changes"]}
    assert outcomes["seeded-sampling", "vllm_gaudi/patches.py"] == "cst"
    if target == "main-091bbadd":
        assert outcomes["fp8-moe-gather", "vllm_gaudi/envs.py"] == "cst"
        assert outcomes["async-discard-counter", "vllm_gaudi/v1/core/sched/hpu_async_scheduler.py"] == "hand"
    before = {p: p.read_bytes() for p in book.rglob("*") if p.is_file()}
    r = cli("lock", "--profile", target, *sources)
    assert r.exit_code == 0, r.output
    assert "0 fingerprint file(s) changed" in r.output
    assert before == {p: p.read_bytes() for p in book.rglob("*") if p.is_file()}
