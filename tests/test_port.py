"""fixpack port: each outcome on trees the tests write, chaining on one file, and --write."""

from __future__ import annotations

import json
import textwrap

import pytest
from builders import BATCH, PRISTINE, RUNNER, SAMPLER, make_site
from trees import port_args, write_tree

from fixpack.cookbook.catalog import Catalog
from fixpack.transforms import load_transforms, render_transforms

EXECUTOR = PRISTINE["vllm"]["vllm/executor.py"]
BATCH_FIXED = BATCH.replace("self.rows[a], self.rows[b] = self.rows[b], self.rows[a]", "self.rows.swap(a, b)")
# The new release: five functions more at the top of runner.py, batch.py already fixed upstream,
# executor.py rewritten where its fix applies, sampler.py as it was.
NEW_TREE = {
    "vllm": {
        "vllm/__init__.py": "",
        "vllm/sampler.py": SAMPLER,
        "vllm/executor.py": EXECUTOR.replace("            log()\n", "            report_failure()\n"),
    },
    "vllm-gaudi": {
        "vllm_gaudi/__init__.py": "",
        "vllm_gaudi/runner.py": "".join(f"def g{i}():\n    return {i}\n\n\n" for i in range(5)) + RUNNER,
        "vllm_gaudi/batch.py": BATCH_FIXED,
    },
}


def cst_fix(cookbook, fix_id: str, body: str) -> None:
    """A fix whose v0.26.0 change is a transforms file, rendered against the pristine tree."""
    d = cookbook.root / "fixes" / fix_id
    d.mkdir(parents=True)
    (d / "fix.toml").write_text(
        textwrap.dedent(
            f"""\
            id = "{fix_id}"
            title = "Fix {fix_id}"
            why = "Because."
            [upstream]
            status = "pending"
            [proof]
            level = "none"
            reason = "test fix"
            [release."v0.26.0"]
            transforms = "v0.26.0_cst.py"
            patch = "v0.26.0.rendered.patch"
            """
        )
    )
    (d / "v0.26.0_cst.py").write_text(textwrap.dedent(body))
    read = lambda path: (cookbook.sources["vllm-gaudi"] / path).read_bytes()  # noqa: E731
    (d / "v0.26.0.rendered.patch").write_text(render_transforms(load_transforms(d / "v0.26.0_cst.py"), read))


CST_F25 = """\
    from fixpack.transforms import Transform, replace_body
    TRANSFORMS = [Transform("vllm_gaudi/runner.py", [replace_body("f25", "return 2500")])]
    """


@pytest.fixture
def pack(cookbook):
    cookbook.fix("sampler-fix", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x\n", "return x * 2\n"))})
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 33\n"))})
    cookbook.fix("batch-fix", {"vllm_gaudi/batch.py": (BATCH, BATCH_FIXED)})
    cookbook.fix("executor-fix", {"vllm/executor.py": (EXECUTOR, EXECUTOR.replace("log()", "log(exc_info=True)"))})
    cookbook.fix("runner-late", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 20\n", "return 200\n"))})
    cst_fix(cookbook, "runner-cst", CST_F25)
    cookbook.profile(["sampler-fix", "runner-fix", "batch-fix", "executor-fix", "runner-late", "runner-cst"])
    cookbook.lock()
    return cookbook


def test_port_reports_each_outcome(cli, pack, tmp_path):
    new = write_tree(tmp_path / "new", NEW_TREE)
    r = cli("port", "--profile", "v0.26.0", "--from", "v0.26.0", *port_args(new), "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    outcomes = {c["fix"]: c["outcome"] for c in out["changes"]}
    assert outcomes == {
        "sampler-fix": "unchanged",
        "runner-fix": "offset",
        "batch-fix": "upstream",
        "executor-fix": "conflict",
        "runner-late": "offset",
        "runner-cst": "cst",
    }
    counts = {"unchanged": 1, "offset": 2, "cst": 1, "merged": 0, "hand": 0, "upstream": 1, "conflict": 1}
    assert out["counts"] == counts
    (conflict,) = [c for c in out["changes"] if c["outcome"] == "conflict"]
    assert "hunk #1" in conflict["detail"] and "-            log()" in conflict["hunk"]
    assert "+            report_failure()" in conflict["nearest"]
    assert [f["id"] for f in out["fixes"] if f["outcome"] == "ported"] == [
        "sampler-fix",
        "runner-fix",
        "runner-late",
        "runner-cst",
    ]


def test_port_human_report(cli, pack, tmp_path):
    new = write_tree(tmp_path / "new", NEW_TREE)
    r = cli("port", "--profile", "v0.26.0", "--from", "v0.26.0", *port_args(new))
    assert r.exit_code == 0
    assert "  conflict   executor-fix  vllm/executor.py" in r.stdout
    assert "1 unchanged, 2 offset, 1 cst, 0 merged, 0 hand, 1 upstream, 1 conflict" in r.stdout


def test_port_write_makes_a_release_that_applies(cli, pack, tmp_path):
    new = write_tree(tmp_path / "new", NEW_TREE)
    r = cli("port", "--profile", "v0.26.0", "--from", "v0.26.0", *port_args(new), "--write", "v0.27.0", "--json")
    assert r.exit_code == 0, r.output
    fixes = pack.root / "fixes"
    assert (fixes / "runner-fix" / "v0.27.0.patch").exists()
    assert (fixes / "runner-cst" / "v0.27.0.rendered.patch").exists()
    assert not (fixes / "executor-fix" / "v0.27.0.patch").exists()
    assert not (fixes / "batch-fix" / "v0.27.0.patch").exists()
    appended = (fixes / "runner-cst" / "fix.toml").read_text().split('[release."v0.27.0"]')[1]
    assert appended == '\ntransforms = "v0.26.0_cst.py"\npatch = "v0.27.0.rendered.patch"\n'
    draft = (pack.root / "profiles" / "v0.27.0.toml").read_text()
    assert '    # "executor-fix",  # conflict: vllm/executor.py: ' in draft
    assert '    # "batch-fix",  # upstream: ' in draft
    assert 'commits = ["TODO"]' in draft
    # A draft is refused until a maintainer sets its pins.
    r = cli("apply", "--profile", "v0.27.0", "--site", str(tmp_path), "--allow-unpinned", "--json")
    assert r.exit_code == 2 and "is a draft" in r.stderr
    real = draft.replace('version = "TODO"', 'version = "0.26.0"')
    real = real.replace('commits = ["TODO"]', 'commits = ["abc1234"]')
    (pack.root / "profiles" / "v0.27.0.toml").write_text(real)
    catalog = Catalog.load(pack.root)  # the fixes and the profile load and validate
    assert catalog.profile("v0.27.0").pack == ("sampler-fix", "runner-fix", "runner-late", "runner-cst")
    assert all(c.fingerprint for f in catalog.profile("v0.27.0").pack for c in catalog.fixes[f].changes["v0.27.0"])

    site = make_site(tmp_path / "new-site", NEW_TREE, commits={})
    r = cli("apply", "--profile", "v0.27.0", "--site", str(site.path), "--allow-unpinned", "--json")
    assert r.exit_code == 0, r.output
    runner = site.read("vllm_gaudi/runner.py").decode()
    assert "return 33\n" in runner and "return 200\n" in runner and "return 2500\n" in runner
    assert site.read("vllm/sampler.py") == SAMPLER.replace("return x\n", "return x * 2\n").encode()

    # A second --write leaves the fix.toml files and the profile alone.
    before = (fixes / "runner-fix" / "fix.toml").read_text()
    r = cli("port", "--profile", "v0.26.0", "--from", "v0.26.0", *port_args(new), "--write", "v0.27.0", "--json")
    assert r.exit_code == 0, r.output
    assert (fixes / "runner-fix" / "fix.toml").read_text() == before
    assert any("exists: no draft profile written" in n for n in json.loads(r.stdout)["notes"])


def test_port_named_fixes_need_only_their_trees(cli, pack, tmp_path):
    new = write_tree(tmp_path / "new", NEW_TREE)
    r = cli(
        "port",
        "runner-late",
        "runner-fix",
        "--from",
        "v0.26.0",
        "--source",
        f"vllm-gaudi={new['vllm-gaudi']}",
        "--json",
    )
    assert r.exit_code == 0, r.output
    assert [(c["fix"], c["outcome"]) for c in json.loads(r.stdout)["changes"]] == [
        ("runner-fix", "offset"),
        ("runner-late", "offset"),
    ]
    # A fix of a tree not given is skipped, and listed, rather than failing the whole port.
    r = cli(
        "port",
        "sampler-fix",
        "runner-fix",
        "--from",
        "v0.26.0",
        "--source",
        f"vllm-gaudi={new['vllm-gaudi']}",
        "--json",
        "--no-proofs",
    )
    out = json.loads(r.stdout)
    assert r.exit_code == 0, r.output
    assert out["skipped"] == [{"id": "sampler-fix", "reason": "no --source vllm=DIR: it changes vllm's files"}]
    assert [c["fix"] for c in out["changes"]] == ["runner-fix"]


def test_port_cst_conflict_and_upstream(cli, pack, tmp_path):
    gone = {"vllm-gaudi": {"vllm_gaudi/runner.py": RUNNER.replace("def f25", "def f25_renamed")}}
    new = write_tree(tmp_path / "gone", gone)
    r = cli("port", "runner-cst", "--from", "v0.26.0", "--source", f"vllm-gaudi={new['vllm-gaudi']}", "--json")
    (change,) = json.loads(r.stdout)["changes"]
    assert change["outcome"] == "conflict" and "'f25' is not defined in this file" in change["detail"]
    there = {"vllm-gaudi": {"vllm_gaudi/runner.py": RUNNER.replace("return 25\n", "return 2500\n")}}
    new = write_tree(tmp_path / "there", there)
    r = cli("port", "runner-cst", "--from", "v0.26.0", "--source", f"vllm-gaudi={new['vllm-gaudi']}", "--json")
    assert [c["outcome"] for c in json.loads(r.stdout)["changes"]] == ["upstream"]


def test_port_upstream_in_another_context_and_a_hint(cli, pack, tmp_path):
    # The fix's new lines are there but the lines around them moved on: still upstream.
    moved = RUNNER.replace("return 3\n", "return 33\n").replace(
        "def f4():\n    return 4\n", "def f4():\n    return 44\n"
    )
    new = write_tree(tmp_path / "moved", {"vllm-gaudi": {"vllm_gaudi/runner.py": moved}})
    r = cli("port", "runner-fix", "--from", "v0.26.0", "--source", f"vllm-gaudi={new['vllm-gaudi']}", "--json")
    assert [c["outcome"] for c in json.loads(r.stdout)["changes"]] == ["upstream"]
    # The added line is there, but not with the fix's context: a conflict that says so.
    elsewhere = RUNNER.replace("return 3\n", "return 3  # kept\n") + "def extra():\n    return 33\n"
    new = write_tree(tmp_path / "elsewhere", {"vllm-gaudi": {"vllm_gaudi/runner.py": elsewhere}})
    r = cli("port", "runner-fix", "--from", "v0.26.0", "--source", f"vllm-gaudi={new['vllm-gaudi']}", "--json")
    (change,) = json.loads(r.stdout)["changes"]
    assert change["outcome"] == "conflict" and "every added line is in the new tree" in change["detail"]


def test_port_refuses_a_result_that_does_not_compile(cli, cookbook, tmp_path):
    aio = "async def sample(x):\n    a = 1\n    b = 2\n    c = 3\n    return x\n"
    (cookbook.sources["vllm"] / "vllm/aio.py").write_text(aio)
    cookbook.fix("await-fix", {"vllm/aio.py": (aio, aio.replace("    c = 3\n", "    c = 3\n    await x\n"))})
    cookbook.profile(["await-fix"])
    cookbook.lock()
    new = write_tree(tmp_path / "new", {"vllm": {"vllm/aio.py": aio.replace("async def", "def")}})
    r = cli("port", "await-fix", "--from", "v0.26.0", "--source", f"vllm={new['vllm']}", "--json")
    (change,) = json.loads(r.stdout)["changes"]
    assert change["outcome"] == "conflict" and "applies, but the result does not compile" in change["detail"]


def test_port_usage_errors(cli, pack, tmp_path):
    new = write_tree(tmp_path / "new", NEW_TREE)
    assert cli("port", "--from", "v0.26.0", *port_args(new)).exit_code == 2
    assert cli("port", "--profile", "v0.26.0", "--from", "v0.25.0", *port_args(new)).exit_code == 2
    assert (
        cli("port", "--profile", "v0.26.0", "--from", "v0.26.0", *port_args(new), "--write", "v0.26.0").exit_code == 2
    )
