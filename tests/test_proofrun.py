"""Proofs run each in a process of their own: forked from the proof server, or (FIXPACK_PROOF_FORK=0)
in a fresh interpreter; the verdicts, the output and the isolation are the same."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fixpack.proofkit import BUG_PRESENT, ERROR, PASSED, Trees
from fixpack.proofrun import run_proof

PROOFS = {
    "passes": "def check(trees):\n    print('looked at', trees.vllm_gaudi)\n",
    "bug": "def check(trees):\n    assert False, 'the bug is here'\n",
    "error": "def check(trees):\n    raise RuntimeError('the proof itself is broken')\n",
    "stubs": """\
        import sys, types
        def check(trees):
            assert 'fixpack_test_stub' not in sys.modules, 'a stub leaked in from another proof'
            sys.modules['fixpack_test_stub'] = types.ModuleType('fixpack_test_stub')
        """,
    "slow": "import time\ndef check(trees):\n    time.sleep(30)\n",
    "threads": """\
        import torch
        def check(trees):
            assert torch.get_num_threads() == 1, f'{torch.get_num_threads()} torch threads'
        """,
    "parse": """\
        import os
        from fixpack.proofkit import load_source, parse_file
        def check(trees):
            path = trees.vllm_gaudi / 'mod.py'
            assert parse_file(path) is parse_file(path), 'parsed twice'
            assert 'return 1' in load_source(path, 'f')
            path.write_text('def f():\\n    return 22\\n')
            os.utime(path, ns=(1, 1))  # a rewritten file is read again, whatever its stamp was
            assert 'return 22' in load_source(path, 'f')
        """,
}


def proof(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "cookbook" / "fixes" / name / "proof.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(PROOFS[name]))
    return path


@pytest.mark.parametrize("fork", ["1", "0"])
def test_verdicts_output_and_isolation(tmp_path, monkeypatch, fork):
    monkeypatch.setenv("FIXPACK_PROOF_FORK", fork)
    trees = Trees(vllm_gaudi=tmp_path)
    passed = run_proof(proof(tmp_path, "passes"), trees)
    assert passed.code == PASSED and f"looked at {tmp_path}" in passed.output
    bug = run_proof(proof(tmp_path, "bug"), trees)
    assert bug.code == BUG_PRESENT and "bug present: the bug is here" in bug.output
    error = run_proof(proof(tmp_path, "error"), trees)
    assert error.code == ERROR and "RuntimeError: the proof itself is broken" in error.output
    stubs = proof(tmp_path, "stubs")
    assert [run_proof(stubs, trees).code for _ in range(2)] == [PASSED, PASSED]
    assert not list((tmp_path / "cookbook").rglob("__pycache__"))


def test_a_proof_past_its_time_is_an_error(tmp_path):
    slow = run_proof(proof(tmp_path, "slow"), Trees(), timeout=1)
    assert slow.code == ERROR and "timed out" in slow.output


@pytest.mark.parametrize("fork", ["1", "0"])
def test_a_proof_runs_with_the_torch_threads_it_is_given(tmp_path, monkeypatch, fork):
    pytest.importorskip("torch")
    monkeypatch.setenv("FIXPACK_PROOF_FORK", fork)
    assert run_proof(proof(tmp_path, "threads"), Trees(), threads=1).code == PASSED


def test_parse_file_parses_once_and_again_after_a_change(tmp_path):
    (tmp_path / "mod.py").write_text("def f():\n    return 1\n")
    done = run_proof(proof(tmp_path, "parse"), Trees(vllm_gaudi=tmp_path))
    assert done.code == PASSED, done.output
