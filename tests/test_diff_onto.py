"""fixpack diff --onto: each fix as port carries it onto another tree, a series git am takes there;
a fix that does not port is named with the reason and left out. The real-tree case needs the
vllm-gaudi's history (VLLM_GAUDI_GIT) and the v0.26.0 trees, else skips."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from builders import BATCH, RUNNER
from trees import git, git_tree

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
AUTHOR = "Fix Author <fix@example.com>"
# The new tree: a function more at the top of runner.py, and f7 rewritten where one fix edits it.
NEW_RUNNER = "def g0():\n    return 0\n\n\n" + RUNNER.replace("    return 7\n", "    return 7.0\n")


def _am(tree: Path, mbox: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "am"
    subprocess.run(["git", "clone", "-q", str(tree), str(work)], check=True)
    (tmp_path / "series.mbox").write_text(mbox)
    return subprocess.run(
        ["git", "-C", str(work), "am", str(tmp_path / "series.mbox")],
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
    )


def test_diff_onto_exports_what_ports_and_names_what_does_not(cli, cookbook, tmp_path):
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 33\n"))})
    cookbook.fix("f7-fix", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 7\n", "return 77\n"))})
    cookbook.fix("late-fix", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 20\n", "return 200\n"))})
    cookbook.fix("batch-fix", {"vllm_gaudi/batch.py": (BATCH, BATCH.replace("def swap", "def swap_rows"))})
    cookbook.profile(["runner-fix", "f7-fix", "late-fix", "batch-fix"])
    cookbook.lock()
    tree = git_tree(
        tmp_path / "new",
        {"vllm_gaudi/__init__.py": "", "vllm_gaudi/runner.py": NEW_RUNNER, "vllm_gaudi/batch.py": BATCH},
    )
    r = cli("diff", "--profile", "v0.26.0", "--format", "mbox", "--author", AUTHOR, "--onto", f"vllm-gaudi={tree}")
    assert r.exit_code == 0, r.output
    assert "[PATCH 1/3]" in r.stdout and "f7-fix" not in r.stdout.split("Fixpack-Fix")[0]
    assert f"base-commit: {git(tree, 'rev-parse', 'HEAD')}" in r.stdout
    assert "f7-fix: not exported onto main-" in r.stderr and "does not match the file" in r.stderr
    done = _am(tree, r.stdout, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    runner = (tmp_path / "am" / "vllm_gaudi" / "runner.py").read_text()
    assert "return 33\n" in runner and "return 200\n" in runner and "return 7.0\n" in runner
    assert "def swap_rows" in (tmp_path / "am" / "vllm_gaudi" / "batch.py").read_text()
    # Plain diff as well; --dist must be a distribution --onto names.
    r = cli("diff", "--profile", "v0.26.0", "--onto", f"vllm-gaudi={tree}")
    assert r.exit_code == 0 and r.stdout.count("diff --git") == 3
    r = cli("diff", "--profile", "v0.26.0", "--onto", f"vllm-gaudi={tree}", "--dist", "vllm")
    assert r.exit_code == 2 and "export only what is rebased" in r.stderr
    r = cli("diff", "--profile", "v0.26.0", "--onto", f"vllm-gaudi={tmp_path / 'nowhere'}")
    assert r.exit_code == 2 and "--onto" in r.stderr


MAIN = "091bbadda10bee4fd3f6d0efc1844d2610dd2707"


@pytest.mark.realtree
@pytest.mark.skipif(not os.environ.get("FIXPACK_SRC_VLLM"), reason="FIXPACK_SRC_VLLM is not set (real trees)")
def test_the_real_pack_onto_main_is_a_series_git_am_takes(cli, tmp_path, gaudi_git):
    main = tmp_path / "main"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(gaudi_git), str(main)], check=True)
    if subprocess.run(["git", "-C", str(main), "checkout", "-q", MAIN], capture_output=True).returncode:
        pytest.skip(f"VLLM_GAUDI_GIT lacks main's {MAIN[:8]}")
    opt_ins = ["gdn-prefix-cache", "fp8-moe-gather"]
    r = cli(
        "diff", "--profile", "v0.26.0", *opt_ins, "--format", "mbox", "--author", AUTHOR, "--onto", f"vllm-gaudi={main}"
    )
    assert r.exit_code == 0, r.output
    # every vllm-gaudi fix ports onto main but hybrid-prefill-batch, the backport of main's c8d89091
    left_out = [line for line in r.stderr.splitlines() if "not exported" in line]
    assert left_out == ["fixpack: hybrid-prefill-batch: not exported onto main-091bbadd: the tree already has it"]
    done = _am(main, r.stdout, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    count = r.stdout.count("\nSubject: [PATCH ")
    log = subprocess.run(
        ["git", "-C", str(tmp_path / "am"), "rev-list", "--count", f"{MAIN}..HEAD"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(log.stdout) == count > 10
