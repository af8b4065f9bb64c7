"""verify --coverage: the lines a fix adds that its proof does not run are named by their
hunk-relative ids and fail verify, until fix.toml declares them unreachable with a reason."""

from __future__ import annotations

import importlib.util
import json

from builders import REPO, RUNNER
from trees import sources_args

# f5 must return 55; the proof never passes flag=True, so the branch's two lines never run.
PARTIAL = RUNNER.replace(
    "def f5():\n    return 5\n",
    "def f5(flag=False):\n    if flag:\n        x = 1\n        return x + 99\n    return 55\n",
)
PROOF = """
from fixpack.proofkit import load_function


def check(trees) -> None:
    f5 = load_function(trees.vllm_gaudi / "vllm_gaudi/runner.py", "f5")
    assert f5() == 55, f"f5() returned {f5()}"
"""


def _pack(cookbook) -> None:
    cookbook.fix("partial", {"vllm_gaudi/runner.py": (RUNNER, PARTIAL)}, proof=PROOF)
    cookbook.profile(["partial"])
    cookbook.lock()


def _declare(cookbook, line: str, why: str) -> None:
    toml = cookbook.root / "fixes/partial/fix.toml"
    toml.write_text(toml.read_text() + f'\n[[proof.unreachable]]\nline = "{line}"\nwhy = "{why}"\n')


def test_unrun_added_lines_fail_verify_by_id(cli, cookbook, tmp_path):
    _pack(cookbook)
    junit = tmp_path / "verify.xml"
    r = cli("verify", "--json", "--coverage", "--junit", str(junit), *sources_args(cookbook))
    assert r.exit_code == 1, r.output
    out = json.loads(r.stdout)
    (result,) = out["results"]
    assert result["proof"] == "demonstrated"
    assert result["coverage"] == {
        "covered": 3,
        "total": 5,
        "unrun": [
            {"id": "h1:+3", "where": "vllm_gaudi/runner.py:23"},
            {"id": "h1:+4", "where": "vllm_gaudi/runner.py:24"},
        ],
        "excluded": [],
    }
    assert result["failures"] == [
        "coverage: added line h1:+3 (vllm_gaudi/runner.py:23) is not run by the proof",
        "coverage: added line h1:+4 (vllm_gaudi/runner.py:24) is not run by the proof",
    ]
    assert 'message="coverage: added line h1:+3 (vllm_gaudi/runner.py:23) is not run by the proof"' in junit.read_text()

    human = cli("verify", "--coverage", *sources_args(cookbook))
    assert human.exit_code == 1
    assert "  partial  3/5 run" in human.stdout
    assert "      not run h1:+4: vllm_gaudi/runner.py:24" in human.stdout
    assert "fixpack verify --coverage: 3/5 added statements run, 0 unreachable, 2 not run" in human.stdout


def test_declared_unreachable_lines_pass_and_are_shown(cli, cookbook):
    _pack(cookbook)
    why = "only a Gaudi run takes the flag"
    _declare(cookbook, "h1:+3", why)
    _declare(cookbook, "h1:+4", why)
    _declare(cookbook, "h1:+5", "recorded before the proof ran it")
    r = cli("verify", "--json", "--coverage", *sources_args(cookbook))
    assert r.exit_code == 0, r.output
    coverage = json.loads(r.stdout)["results"][0]["coverage"]
    assert coverage["covered"] == 3 and coverage["unrun"] == []
    assert coverage["excluded"] == [
        {"id": "h1:+3", "where": "vllm_gaudi/runner.py:23", "why": why},
        {"id": "h1:+4", "where": "vllm_gaudi/runner.py:24", "why": why},
    ]
    assert coverage["unmatched_unreachable"] == ["h1:+5"]
    human = cli("verify", "--coverage", *sources_args(cookbook))
    assert human.exit_code == 0
    assert f"      unreachable h1:+3: vllm_gaudi/runner.py:23: {why}" in human.stdout
    assert "declared unreachable, but no such unrun line (run now, or no such line): h1:+5" in human.stdout


def test_an_unreachable_line_without_a_reason_is_refused(cli, cookbook):
    _pack(cookbook)
    _declare(cookbook, "h1:+3", " ")
    r = cli("verify", "--coverage", *sources_args(cookbook))
    assert r.exit_code == 2, r.output
    assert "each [[proof.unreachable]] needs a why" in r.output


def test_verify_coverage_without_coverage_py_says_how_to_install_it(cli, cookbook, monkeypatch):
    _pack(cookbook)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "coverage" else real(name, *a))
    r = cli("verify", "--coverage", *sources_args(cookbook))
    assert r.exit_code == 3, r.output
    assert f"-m pip install -e '{REPO}[coverage]'" in r.output


def test_verify_without_coverage_keeps_its_json(cli, cookbook):
    _pack(cookbook)
    r = cli("verify", "--json", *sources_args(cookbook))
    assert r.exit_code == 0, r.output
    assert "coverage" not in json.loads(r.stdout)["results"][0]
