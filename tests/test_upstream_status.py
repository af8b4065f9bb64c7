"""fixpack upstream on a small cookbook and a vllm-gaudi history the test commits: each of the four
standings (the first commit where a fix's proof passes found by bisection, a commit with the fix's
own diff found by patch id), and verify failing on recorded [upstream] fields that the pinned
tree's history contradicts."""

from __future__ import annotations

import json
import shutil

import pytest
from builders import BATCH, PRISTINE, RUNNER, SAMPLER, VLLM_COMMIT
from cookbooks import DOUBLING_PROOF, F5_PROOF, SWAP_PROOF
from trees import commit, git

F9_PROOF = F5_PROOF.replace("f5", "f9").replace("55", "99")
F20_PROOF = F5_PROOF.replace("f5", "f20").replace("55", "2020")


def set_pin(cookbook, gaudi: str, *more: str) -> None:
    cookbook.profile(
        ["doubling", "runner-f5", "runner-f9", "runner-f20", "swap-count", *more],
        commits={"vllm-gaudi": [gaudi], "vllm": [VLLM_COMMIT]},
    )


@pytest.fixture
def history(tmp_path, cookbook):
    """A vllm-gaudi clone: the pinned release, then five commits on its main line. Returns the
    repository and its commits by name."""
    repo = tmp_path / "upstream-gaudi"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    c = {"release": commit(repo, PRISTINE["vllm-gaudi"], "Release")}
    git(repo, "tag", "v0.26.0")
    f9 = RUNNER.replace("return 9\n", "return 99\n")
    cookbook.fix(
        "doubling",
        {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x\n", "return x * 2\n"))},
        proof=DOUBLING_PROOF,
    )
    cookbook.fix(
        "runner-f5", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 5\n", "return 55\n"))}, proof=F5_PROOF
    )
    cookbook.fix("runner-f9", {"vllm_gaudi/runner.py": (RUNNER, f9)}, proof=F9_PROOF)
    cookbook.fix(
        "runner-f20",
        {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 20\n", "return 2020\n"))},
        proof=F20_PROOF,
    )
    cookbook.fix("swap-count", {"vllm_gaudi/batch.py": (BATCH, BATCH + "        self.swaps += 1\n")}, proof=SWAP_PROOF)
    set_pin(cookbook, c["release"])
    cookbook.lock()
    top = "".join(f"def g{i}():\n    return {i}\n\n\n" for i in range(5))
    c["moved"] = commit(repo, {"vllm_gaudi/runner.py": top + RUNNER}, "Five helpers first")
    # runner-f9's own diff, at an offset: the same patch id
    c["f9"] = commit(repo, {"vllm_gaudi/runner.py": top + f9}, "Return 99 from f9")
    c["docs"] = commit(repo, {"README.md": "docs\n"}, "Docs")
    # f5 fixed in another way than runner-f5 does it
    c["f5"] = commit(repo, {"vllm_gaudi/runner.py": top + f9.replace("return 5\n", "return 50 + 5\n")}, "Fix f5")
    c["renamed"] = commit(repo, {"vllm_gaudi/batch.py": BATCH.replace("def swap", "def exchange")}, "Rename swap")
    c["later"] = commit(
        repo, {"vllm_gaudi/runner.py": (repo / "vllm_gaudi/runner.py").read_text() + "X = 1\n"}, "Later"
    )
    return repo, c


def upstream_json(cli, *args: str) -> dict:
    r = cli("upstream", "--json", "--jobs", "2", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_each_standing_on_a_clone(cli, cookbook, history):
    repo, c = history
    out = upstream_json(cli, "--source", f"vllm-gaudi={repo}", "--source", f"vllm={cookbook.sources['vllm']}")
    got = {f["id"]: f for f in out["fixes"]}
    assert {f: (x["standing"], x["commit"]) for f, x in got.items()} == {
        "doubling": ("still-needed", None),  # vLLM's tree is the release's
        "runner-f5": ("fixed-upstream", c["f5"]),  # bisected over the commits that change runner.py
        "runner-f9": ("applied-upstream", c["f9"]),  # the same diff, 20 lines further down
        "runner-f20": ("still-needed", None),
        "swap-count": ("cannot-tell", None),
    }
    assert "sample(2) returned 2" in got["doubling"]["detail"]
    assert (
        f"it first passes at {c['f5'][:12]} Fix f5 (bisected over the main line's commits that change its files"
        in got["runner-f5"]["detail"]
    )
    assert "its proof passes there" in got["runner-f9"]["detail"]
    assert "'swap' not found" in got["swap-count"]["detail"]  # the error that kept it from running
    assert got["swap-count"]["proof"] == "error"
    assert out["counts"] == {"still-needed": 2, "fixed-upstream": 1, "applied-upstream": 1, "cannot-tell": 1}
    trees = {t["dist"]: t for t in out["trees"]}
    assert trees["vllm-gaudi"] == {"dist": "vllm-gaudi", "path": str(repo), "head": c["later"], "base": c["release"]}
    assert trees["vllm"]["head"] is None  # not a git work tree


HELPER_PROOF = """
def check(trees) -> None:
    runner = (trees.vllm_gaudi / "vllm_gaudi/runner.py").read_text()
    assert "HELPER" in runner or (trees.vllm_gaudi / "vllm_gaudi/helper.py").exists(), "no helper"
"""


def test_fixed_by_a_commit_outside_the_fixs_files(cli, cookbook, history):
    """When no commit that changes the fix's files makes its proof pass, the whole main line is bisected."""
    repo, c = history
    cookbook.fix("helper", {"vllm_gaudi/runner.py": (RUNNER, RUNNER + "HELPER = True\n")}, proof=HELPER_PROOF)
    set_pin(cookbook, c["release"], "helper")
    cookbook.lock()
    c["helper"] = commit(repo, {"vllm_gaudi/helper.py": "HELPER = True\n"}, "Add the helper")
    c["last"] = commit(repo, {"README.md": "more docs\n"}, "More docs")
    out = upstream_json(cli, "helper", "--source", f"vllm-gaudi={repo}")
    (helper,) = out["fixes"]
    assert (helper["standing"], helper["commit"]) == ("fixed-upstream", c["helper"])
    assert "it first passes at" in helper["detail"]
    assert "(bisected over every commit of the main line since" in helper["detail"]


def test_on_the_pinned_tree_and_without_history(cli, cookbook, history, tmp_path):
    repo, c = history
    git(repo, "-c", "advice.detachedHead=false", "checkout", "-q", "v0.26.0")
    out = upstream_json(cli, "--source", f"vllm-gaudi={repo}")
    got = {f["id"]: f for f in out["fixes"]}
    assert {f: x["standing"] for f, x in got.items()} == {
        "doubling": "cannot-tell",
        "runner-f5": "still-needed",
        "runner-f9": "still-needed",
        "runner-f20": "still-needed",
        "swap-count": "still-needed",
    }
    assert got["doubling"]["detail"] == "its files are in vllm: give --source vllm=DIR"
    assert "no --source vllm=DIR: a proof that needs vllm cannot run" in out["notes"]
    # a plain copy of main (no .git): fixed-upstream, with no commit to name
    git(repo, "-c", "advice.detachedHead=false", "checkout", "-q", "main")
    plain = tmp_path / "plain"
    shutil.copytree(repo / "vllm_gaudi", plain / "vllm_gaudi")
    out = upstream_json(cli, "runner-f5", "runner-f9", "--source", f"vllm-gaudi={plain}")
    assert [(f["standing"], f["commit"]) for f in out["fixes"]] == [("fixed-upstream", None), ("fixed-upstream", None)]
    assert out["trees"][0]["head"] is None


def test_upstream_human_report_and_bad_input(cli, cookbook, history):
    repo, c = history
    r = cli("upstream", "runner-f9", "--jobs", "1", "--source", f"vllm-gaudi={repo}")
    assert r.exit_code == 0, r.output
    assert "runner-f9  applied-upstream" in r.stdout
    assert "fixpack upstream: profile v0.26.0: 1 applied-upstream" in r.stdout
    r = cli("upstream", "runner-f99", "--source", f"vllm-gaudi={repo}")
    assert r.exit_code == 2 and "unknown fix 'runner-f99'" in r.output
    r = cli("upstream", "--source", f"vllm-gaudi={repo / '.git'}")  # a git dir, not a work tree
    assert r.exit_code == 2 and "it has no vllm_gaudi/ (a tree in repository layout" in r.output
    r = cli("upstream", "--source", f"vllm-hpu={repo}")
    assert r.exit_code == 2 and "--source vllm-hpu: profile v0.26.0 pins" in r.output


# -- verify: the recorded [upstream] fields against the pinned tree's history ---------------------------------


def _record(cookbook, fix_id: str, fields: str) -> None:
    toml = cookbook.root / "fixes" / fix_id / "fix.toml"
    text = toml.read_text().replace('[upstream]\nstatus = "pending"\n', f"[upstream]\n{fields}\n")
    toml.write_text(text)


@pytest.fixture
def pinned_clone(tmp_path, cookbook):
    """The pinned vllm-gaudi tree as a clone: an old commit that had runner-f9's change and lost
    it, a tag v0.24.0 before the release, and v0.27.0 on a later commit."""
    repo = tmp_path / "pinned-gaudi"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    old = commit(
        repo,
        {**PRISTINE["vllm-gaudi"], "vllm_gaudi/runner.py": RUNNER.replace("return 9\n", "return 99\n")},
        "Return 99 from f9",
    )
    git(repo, "tag", "v0.24.0")
    release = commit(repo, PRISTINE["vllm-gaudi"], "Release (f9 lost)")
    later = commit(repo, {"README.md": "later\n"}, "Later")
    git(repo, "tag", "v0.27.0")
    git(repo, "-c", "advice.detachedHead=false", "checkout", "-q", release)
    cookbook.fix(
        "runner-f9", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 9\n", "return 99\n"))}, proof=F9_PROOF
    )
    cookbook.fix(
        "runner-f20",
        {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 20\n", "return 2020\n"))},
        proof=F20_PROOF,
    )
    cookbook.profile(["runner-f9", "runner-f20"], commits={"vllm-gaudi": [release], "vllm": [VLLM_COMMIT]})
    cookbook.sources = {**cookbook.sources, "vllm-gaudi": repo}
    cookbook.lock()
    return repo, {"old": old, "release": release, "later": later}


def _verify(cli, cookbook) -> dict:
    r = cli("verify", "--json", "--jobs", "2", *(f"--source={d}={p}" for d, p in cookbook.sources.items()))
    out = json.loads(r.stdout)
    assert r.exit_code == (0 if out["ok"] else 1)
    return {x["fix"]: x.get("failures", []) for x in out["results"]} | {"ok": out["ok"]}


def test_verify_accepts_recorded_fields_the_history_agrees_with(cli, cookbook, pinned_clone):
    repo, c = pinned_clone
    # lost in v0.24.0 (an earlier fix had it), applied later, and its diff was in an old commit
    _record(cookbook, "runner-f9", f'forwarded = "no"\nregressed-in = "v0.24.0"\napplied-upstream = "{c["later"]}"')
    _record(cookbook, "runner-f20", 'forwarded = "no"\norigin = "vllm-project/vllm-gaudi#7"')  # no such PR here
    assert _verify(cli, cookbook)["ok"]


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ('forwarded = "no"\napplied-upstream = "{old}"', "applied-upstream {old} ({old12}) is in the pinned"),
        ('origin = "owner/repo@{old12}"', "origin owner/repo@{old12} ({old12}) is in the pinned"),
        ('forwarded = "no"\nregressed-in = "v0.27.0"', "regressed-in v0.27.0 is not in the pinned"),
        ('forwarded = "no"\nregressed-in = "v0.25.0"', "regressed-in v0.25.0 is not a tag or commit of"),
    ],
)
def test_verify_fails_on_recorded_fields_the_history_contradicts(cli, cookbook, pinned_clone, fields, said):
    repo, c = pinned_clone
    names = {"old": c["old"], "old12": c["old"][:12]}
    _record(cookbook, "runner-f9", fields.format(**names))
    out = _verify(cli, cookbook)
    assert not out["ok"]
    assert any(said.format(**names) in f for f in out["runner-f9"]), out["runner-f9"]
    assert "runner-f20" not in out or out["runner-f20"] == []
