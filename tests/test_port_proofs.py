"""port runs the proofs: a bug fixed upstream in another way (left out by --write), a fix that
ports and is proven on the new tree, and a proof that cannot run there."""

from __future__ import annotations

import json

from builders import BATCH, RUNNER, SAMPLER
from cookbooks import DOUBLING_PROOF, F5_PROOF, SWAP_PROOF
from trees import port_args, write_tree

from fixpack.cookbook.catalog import Catalog

COUNTED = BATCH + "        self.swaps += 1\n"
# The new release: sample() doubles in its own way, five functions more at the top of runner.py,
# Batch.swap renamed; vLLM's tree is still the old release's pin.
NEW_TREE = {
    "vllm": {
        "vllm/__init__.py": "",
        "vllm/_version.py": "__version__ = version = '0.26.0'\n__commit_id__ = commit_id = 'gffd46bfab'\n",
        "vllm/sampler.py": SAMPLER.replace("return x\n", "return x + x\n"),
    },
    "vllm-gaudi": {
        "vllm_gaudi/__init__.py": "",
        "vllm_gaudi/runner.py": "".join(f"def g{i}():\n    return {i}\n\n\n" for i in range(5)) + RUNNER,
        "vllm_gaudi/batch.py": BATCH.replace("def swap", "def exchange"),
    },
}


def _pack(cookbook) -> None:
    doubled = SAMPLER.replace("return x\n", "return x * 2\n")
    cookbook.fix("doubling", {"vllm/sampler.py": (SAMPLER, doubled)}, proof=DOUBLING_PROOF)
    runner = RUNNER.replace("return 5\n", "return 55\n")
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, runner)}, proof=F5_PROOF)
    cookbook.fix("swap-count", {"vllm_gaudi/batch.py": (BATCH, COUNTED)}, proof=SWAP_PROOF)
    cookbook.profile(["doubling", "runner-fix", "swap-count"])
    cookbook.lock()


def _port(cli, tmp_path, *extra: str) -> dict:
    new = write_tree(tmp_path / "new", NEW_TREE)
    r = cli("port", "--profile", "v0.26.0", "--from", "v0.26.0", *port_args(new), "--json", *extra)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_port_runs_each_proof_on_the_new_tree_and_with_the_ported_pack(cli, cookbook, tmp_path):
    _pack(cookbook)
    out = _port(cli, tmp_path)
    fixes = {f["id"]: f for f in out["fixes"]}
    assert {f: (x["outcome"], x["proof"]["pristine"], x["proof"]["ported"]) for f, x in fixes.items()} == {
        "doubling": ("fixed-upstream", "passes", "not-run"),
        "runner-fix": ("ported", "bug-present", "passes"),
        "swap-count": ("conflict", "error", "not-run"),
    }
    assert "the bug is gone there" in fixes["doubling"]["proof"]["detail"]
    assert "f5() returned 5" in fixes["runner-fix"]["proof"]["detail"]
    assert "'swap' not found" in fixes["swap-count"]["proof"]["detail"]
    # The changes' outcomes are what they were without proofs.
    assert [c["outcome"] for c in out["changes"]] == ["conflict", "offset", "conflict"]
    assert any("the vllm tree is v0.26.0's pin (0.26.0, commit ffd46bfab)" in n for n in out["notes"])


def test_port_without_proofs(cli, cookbook, tmp_path):
    _pack(cookbook)
    out = _port(cli, tmp_path, "--no-proofs")
    assert [(f["id"], f["outcome"]) for f in out["fixes"]] == [
        ("doubling", "conflict"),
        ("runner-fix", "ported"),
        ("swap-count", "conflict"),
    ]
    assert all("proof" not in f for f in out["fixes"])


def test_port_human_report_says_what_the_proofs_found(cli, cookbook, tmp_path):
    _pack(cookbook)
    new = write_tree(tmp_path / "new", NEW_TREE)
    r = cli("port", "--profile", "v0.26.0", "--from", "v0.26.0", *port_args(new))
    assert r.exit_code == 0, r.output
    assert "  doubling    BUG GONE     not run     fixed-upstream" in r.stdout
    assert "  runner-fix  bug present  proven      ported" in r.stdout
    assert "  swap-count  FAILS        not run     conflict" in r.stdout


def test_port_write_leaves_out_a_fix_whose_bug_is_gone(cli, cookbook, tmp_path):
    _pack(cookbook)
    out = _port(cli, tmp_path, "--write", "v0.27.0")
    fixes = cookbook.root / "fixes"
    assert (fixes / "runner-fix" / "v0.27.0.patch").exists()
    assert not (fixes / "doubling" / "v0.27.0.patch").exists()
    draft = (cookbook.root / "profiles" / "v0.27.0.toml").read_text()
    assert '    # "doubling",  # fixed-upstream: its proof passes on the new tree without it' in draft
    assert '    # "swap-count",  # conflict: vllm_gaudi/batch.py: ' in draft
    assert Catalog.load(cookbook.root).profile("v0.27.0", drafts=True).pack == ("runner-fix",)
    assert str(fixes / "runner-fix" / "v0.27.0.patch") in out["written"]


def test_port_says_when_a_tree_the_proofs_may_need_is_missing(cli, cookbook, tmp_path):
    _pack(cookbook)
    new = write_tree(tmp_path / "new", NEW_TREE)
    r = cli("port", "runner-fix", "--from", "v0.26.0", "--source", f"vllm-gaudi={new['vllm-gaudi']}", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["notes"] == ["no --source vllm=DIR: a proof that does not pass is cannot-run (it may need vllm)"]
    assert out["fixes"][0]["proof"]["ported"] == "passes"


NEEDS_VLLM = """
def check(trees) -> None:
    assert trees.vllm is not None, "needs the vllm-gaudi and vllm trees"
"""


def test_port_without_a_tree_a_proof_that_needs_it_cannot_run(cli, cookbook, tmp_path):
    _pack(cookbook)
    runner9 = RUNNER.replace("return 9\n", "return 99\n")
    cookbook.fix("needs-vllm", {"vllm_gaudi/runner.py": (RUNNER, runner9)}, proof=NEEDS_VLLM)
    cookbook.profile(["doubling", "runner-fix", "swap-count", "needs-vllm"])
    cookbook.lock()
    new = write_tree(tmp_path / "new", NEW_TREE)
    r = cli(
        "port", "runner-fix", "needs-vllm", "--from", "v0.26.0", "--source", f"vllm-gaudi={new['vllm-gaudi']}", "--json"
    )
    fixes = {f["id"]: f["proof"] for f in json.loads(r.stdout)["fixes"]}
    assert (fixes["runner-fix"]["pristine"], fixes["runner-fix"]["ported"]) == ("bug-present", "passes")
    assert (fixes["needs-vllm"]["pristine"], fixes["needs-vllm"]["ported"]) == ("cannot-run", "cannot-run")
    assert "cannot run without --source vllm=DIR: bug present: needs the vllm-gaudi" in fixes["needs-vllm"]["detail"]
