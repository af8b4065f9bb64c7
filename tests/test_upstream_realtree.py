"""fixpack upstream on the real vllm-gaudi history: v0.26.0, v0.27.0rc0 and main at 091bbadd, each
with vLLM 0.26.0 (FIXPACK_SRC_VLLM). Every fix of the pack is reported; on each tree, every fix's
proof runs and shows its bug, but on main hybrid-prefill-batch's, whose upstream commit main has.
About 30 s a tree on 2 cores (23 proofs, 2 at a time)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from builders import has_commit, run_cli

from fixpack.cookbook.catalog import Catalog

pytestmark = pytest.mark.realtree

MAIN = "091bbadda10bee4fd3f6d0efc1844d2610dd2707"


@pytest.fixture(scope="module")
def clone(tmp_path_factory, gaudi_git) -> Path:
    if not has_commit(gaudi_git, MAIN):
        pytest.skip(f"VLLM_GAUDI_GIT lacks main's {MAIN[:8]}")
    if not os.environ.get("FIXPACK_SRC_VLLM"):
        pytest.skip("FIXPACK_SRC_VLLM is unset: the proofs run vLLM 0.26.0's code")
    dest = tmp_path_factory.mktemp("upstream") / "vllm-gaudi"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(gaudi_git), str(dest)], check=True)
    return dest


@pytest.mark.parametrize("ref", ["v0.26.0", "v0.27.0rc0", MAIN])
def test_upstream_on_the_real_history(clone, ref):
    subprocess.run(["git", "-C", str(clone), "-c", "advice.detachedHead=false", "checkout", "-q", ref], check=True)
    r = run_cli(
        "upstream",
        "--profile",
        "v0.26.0",
        "--json",
        "--jobs",
        "2",
        "--source",
        f"vllm-gaudi={clone}",
        "--source",
        f"vllm={os.environ['FIXPACK_SRC_VLLM']}",
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    profile = Catalog.load().profile("v0.26.0")
    assert [f["id"] for f in out["fixes"]] == list(profile.pack)
    gaudi = {t["dist"]: t for t in out["trees"]}["vllm-gaudi"]
    assert gaudi["base"] == (
        "b059f9c95d6a07f19eb00aa06d1ec8b87b296437" if ref == "v0.26.0" else "b8b78dabbae6bc0641dbebfe5b2c747b98a52c0e"
    )  # where main left the release
    # Every proof runs on each tree with vLLM 0.26.0 and shows its bug, but hybrid-prefill-batch's on
    # main: it is the backport of c8d89091 (#1725), which main has and no release does.
    standing = {f["id"]: (f["standing"], f["proof"], f["commit"]) for f in out["fixes"]}
    expected = dict.fromkeys(profile.pack, ("still-needed", "bug-present", None))
    if ref == MAIN:
        expected["hybrid-prefill-batch"] = ("applied-upstream", "passes", "c8d890911774c6d88f70a6b5be253e091f93057f")
    assert standing == expected, out


def test_upstream_finds_the_commit_that_fixed_a_regression_first(clone):
    """structured-output-rows is a regression: fixed on v0.21.0 by 1e9ce8b6 (#1466), lost from
    v0.24.0rc0 on (its fix.toml says so). On v0.21.0 its proof passes, and bisection finds that
    commit; prompt-order's proof cannot run on that older runner, and says why."""
    subprocess.run(
        ["git", "-C", str(clone), "-c", "advice.detachedHead=false", "checkout", "-q", "v0.21.0"], check=True
    )
    r = run_cli(
        "upstream",
        "structured-output-rows",
        "prompt-order",
        "--profile",
        "v0.26.0",
        "--json",
        "--jobs",
        "2",
        "--source",
        f"vllm-gaudi={clone}",
        "--source",
        f"vllm={os.environ['FIXPACK_SRC_VLLM']}",
    )
    assert r.returncode == 0, r.stderr
    rows, order = json.loads(r.stdout)["fixes"]
    assert (rows["standing"], rows["commit"]) == ("fixed-upstream", "1e9ce8b6385d7dfc83b7b47cf4c7375b971d8d27")
    assert (order["standing"], order["proof"]) == ("cannot-tell", "error")
    assert "MultiGroupBlockTable.__init__() missing 1 required positional argument" in order["detail"]


def test_the_packs_recorded_upstream_fields_agree_with_the_pinned_clone():
    """What verify checks of [upstream] on the real pack: regressed-in (structured-output-rows'
    v0.24.0rc0) in v0.26.0's history; origin (fp8-moe-gather's PR #1731, structured-output-rows'
    #1466) not in it, where the clone has the PR refs (refs/pull/*: a plain clone has not)."""
    from fixpack.commands.maintain.history import Repo
    from fixpack.commands.maintain.upstream.status import recorded_contradictions

    gaudi = os.environ.get("FIXPACK_SRC_VLLM_GAUDI")
    if not gaudi or Repo.of(Path(gaudi)) is None:
        pytest.skip("FIXPACK_SRC_VLLM_GAUDI is not a vllm-gaudi git work tree")
    book = Catalog.load()
    profile = book.profile("v0.26.0")
    repo = Repo.of(Path(gaudi))
    assert repo is not None
    if repo.commit("v0.24.0rc0") is None:
        pytest.skip(f"{gaudi} has no tag v0.24.0rc0 (a clone without tags)")
    sources = {"vllm-gaudi": Path(gaudi)}
    assert {f: recorded_contradictions(book.fixes[f], profile, sources) for f in profile.pack} == {
        f: [] for f in profile.pack
    }
    # and the check has teeth on this history: a regressed-in after the pinned release is refused
    from dataclasses import replace

    fix = book.fixes["structured-output-rows"]
    later = replace(fix, upstream=replace(fix.upstream, regressed_in="v0.27.0rc0"))
    assert recorded_contradictions(later, profile, sources) == [
        "upstream: regressed-in v0.27.0rc0 is not in the pinned vllm-gaudi b059f9c95d6a's history: "
        "the release pinned did not lose the fix there"
    ]
