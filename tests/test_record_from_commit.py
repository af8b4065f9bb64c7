"""fixpack record --from-commit: a fix made from an upstream commit of a clone, on a small cookbook
and history the test commits, and on the real vllm-gaudi clone (PR #1731's first commit, the one
fp8-moe-gather backports)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from builders import PRISTINE, REPO, RUNNER, has_commit, run_cli
from trees import commit, git

from fixpack.cookbook.catalog import Catalog
from fixpack.core import patch


@pytest.fixture
def upstream_commit(tmp_path, cookbook):
    """The release in a clone, and one commit on it that fixes f5 and touches a test and the docs."""
    cookbook.fix("runner-f20", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 20\n", "return 2020\n"))})
    cookbook.profile(["runner-f20"])
    cookbook.lock()
    repo = tmp_path / "clone"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, PRISTINE["vllm-gaudi"], "Release")
    top = "".join(f"def g{i}():\n    return {i}\n\n\n" for i in range(3))
    commit(repo, {"vllm_gaudi/runner.py": top + RUNNER}, "Three helpers first")
    fixed = commit(
        repo,
        {
            "vllm_gaudi/runner.py": top + RUNNER.replace("return 5\n", "return 55\n"),
            "tests/test_f5.py": "def test_f5():\n    pass\n",
            "README.md": "f5 returns 55\n",
        },
        "Return 55 from f5\n\nf5 returned 5, which callers misread.\n\nSigned-off-by: A <a@example.org>",
    )
    return repo, fixed


def test_a_fix_from_an_upstream_commit(cli, cookbook, upstream_commit):
    repo, fixed = upstream_commit
    r = cli(
        "record",
        "f5-backport",
        "--from-commit",
        str(repo),
        "HEAD",
        "--source",
        f"vllm-gaudi={cookbook.sources['vllm-gaudi']}",
        "--json",
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [f[0] for f in out["files"]] == ["vllm_gaudi/runner.py"]  # the test and the docs are left out
    assert "left out (not under a pinned package): README.md, tests/test_f5.py" in out["notes"]
    fix = Catalog.load(cookbook.root).fixes["f5-backport"]
    assert fix.title == "Return 55 from f5"
    assert fix.why.startswith("f5 returned 5, which callers misread.")
    assert "Signed-off-by" not in fix.why and fixed in fix.why
    assert (fix.upstream.origin, fix.upstream.forwarded, fix.upstream.status) == (fixed, "not-needed", "backport")
    (change,) = fix.changes["v0.26.0"]
    # rendered against the release's file (3 lines higher than upstream's), and locked at the end of the pack
    pristine = (cookbook.sources["vllm-gaudi"] / "vllm_gaudi/runner.py").read_bytes()
    (fd,) = patch.split_files(change.patch)
    assert patch.apply(fd, pristine) == RUNNER.replace("return 5\n", "return 55\n").encode()
    assert change.fingerprint is not None
    # a fix like any other: verify applies it, and asks for what record cannot know (a proof, verified_on)
    prof = cookbook.root / "profiles/v0.26.0.toml"
    prof.write_text(prof.read_text().replace('pack = ["runner-f20"]', 'pack = ["runner-f20", "f5-backport"]'))
    r = cli("verify", "--json", *(f"--source={d}={p}" for d, p in cookbook.sources.items()))
    results = {x["fix"]: x for x in json.loads(r.stdout)["results"]}
    assert results["f5-backport"]["applies"] and results["f5-backport"]["compiles"]


def test_from_commit_refusals(cli, cookbook, upstream_commit, tmp_path):
    repo, fixed = upstream_commit
    src = f"vllm-gaudi={cookbook.sources['vllm-gaudi']}"
    r = cli("record", "x-fix", "--from-commit", str(repo), "nosuchref", "--source", src)
    assert r.exit_code == 2 and "not a commit (or a range BASE..TIP)" in r.output
    r = cli("record", "x-fix", "--from-commit", str(tmp_path), "HEAD", "--source", src)
    assert r.exit_code == 2 and "not a git repository" in r.output
    docs = commit(repo, {"README.md": "docs only\n"}, "Docs")
    r = cli("record", "x-fix", "--from-commit", str(repo), docs, "--source", src)
    assert r.exit_code == 1 and "changes no file under" in r.output
    # f5 changed again upstream in a way the release's file cannot take
    runner = (repo / "vllm_gaudi/runner.py").read_text()
    commit(repo, {"vllm_gaudi/runner.py": runner.replace("return 55\n", "return 555\n")}, "555")
    r = cli("record", "x-fix", "--from-commit", str(repo), "HEAD", "--source", src)
    assert r.exit_code == 1 and "does not apply to release v0.26.0's file" in r.output
    r = cli("record", "x-fix", "--from-commit", str(repo), f"{fixed}^..{fixed}")
    assert r.exit_code == 2 and "give --source vllm-gaudi=DIR" in r.output
    assert not (cookbook.root / "fixes/x-fix").exists()


@pytest.mark.realtree
def test_from_pr_1731_on_the_real_clone(tmp_path, gaudi_git):
    gaudi = os.environ.get("FIXPACK_SRC_VLLM_GAUDI")
    if not gaudi:
        pytest.skip("FIXPACK_SRC_VLLM_GAUDI is unset: the commit is ported to vllm-gaudi v0.26.0's tree")
    first = "65e753940517cd192cb139b1f4d5db12188663f8"  # PR #1731's first commit
    if not has_commit(gaudi_git, first):
        pytest.skip("VLLM_GAUDI_GIT lacks PR #1731's commits (refs/pull/1731/head)")
    clone = str(gaudi_git)
    book = tmp_path / "cookbook"  # a copy: record writes into the cookbook
    shutil.copytree(REPO / "fixes", book / "fixes", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "profiles", book / "profiles")
    # made again from upstream, the backport would replace fp8-moe-gather: the pack without it
    prof = book / "profiles/v0.26.0.toml"
    prof.write_text(prof.read_text().replace('    "fp8-moe-gather",\n', "").replace(', "fp8-moe-gather"', ""))
    r = run_cli(
        "record",
        "moe-gather-1731",
        "--profile",
        "v0.26.0",
        "--from-commit",
        clone,
        first,
        "--source",
        f"vllm-gaudi={gaudi}",
        "--json",
        env={"FIXPACK_COOKBOOK": str(book)},
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert sorted(f[0] for f in out["files"]) == ["vllm_gaudi/ops/hpu_fp8.py", "vllm_gaudi/ops/hpu_moe_combine.py"]
    fix = Catalog.load(book).fixes["moe-gather-1731"]
    assert fix.upstream.origin == first
    assert fix.title == "feat: custom gathered-expert MoE combine for silu/FP8"
    # the same files as fp8-moe-gather, which backports this PR (and its later commits)
    backport = {c.path for c in fix.changes["v0.26.0"]}
    assert backport <= {c.path for c in Catalog.load(book).fixes["fp8-moe-gather"].changes["v0.26.0"]}
