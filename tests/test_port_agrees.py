"""port agrees with lock and apply (issue 42): a superseded fix ported in its own order, a fix's own
port of the target used, the target always named, a proof that cannot import kept apart from one
that fails, a three-way merge for a change whose context moved, and a draft profile refused."""

from __future__ import annotations

import json
from pathlib import Path

from builders import RUNNER, render
from trees import git, git_tree, port_args, write_tree

from fixpack.cookbook.catalog import Catalog

GUARDED = RUNNER.replace("def f3():\n    return 3\n", "def f3():\n    return 3 if ready() else 0\n")
REPLACED = RUNNER.replace("def f3():\n    return 3\n", "def f3():\n    return 300\n")
# The new release: a function more at the top of runner.py.
NEW_RUNNER = "def g0():\n    return 0\n\n\n" + RUNNER


def _supersedes(cookbook, fix_id: str, old: str) -> None:
    toml = cookbook.root / "fixes" / fix_id / "fix.toml"
    toml.write_text(toml.read_text().replace("opt_in = ", f'supersedes = ["{old}"]\nopt_in = ', 1))


def test_a_superseded_fix_is_ported_in_its_own_order_and_lock_agrees(cli, cookbook, tmp_path):
    # guard and replace both edit f3; replace (an opt-in) supersedes guard, so apply never chains them.
    cookbook.fix("guard", {"vllm_gaudi/runner.py": (RUNNER, GUARDED)})
    cookbook.fix("replace", {"vllm_gaudi/runner.py": (RUNNER, REPLACED)}, opt_in=True)
    _supersedes(cookbook, "replace", "guard")
    cookbook.profile(["guard", "replace"], opt_ins=["replace"])
    cookbook.lock()
    files = {"vllm_gaudi/__init__.py": "", "vllm_gaudi/runner.py": NEW_RUNNER}
    new = write_tree(tmp_path / "new", {"vllm-gaudi": files})
    r = cli(
        "port",
        "--profile",
        "v0.26.0",
        "--from",
        "v0.26.0",
        *port_args(new),
        "--write",
        "v0.27.0",
        "--json",
        "--no-proofs",
    )
    assert r.exit_code == 0, r.output
    assert {c["fix"]: c["outcome"] for c in json.loads(r.stdout)["changes"]} == {"guard": "offset", "replace": "offset"}
    assert "TODO" in (cookbook.root / "profiles" / "v0.27.0.toml").read_text()  # a draft: lock takes it
    r = cli("lock", "--profile", "v0.27.0", *port_args(new))
    assert r.exit_code == 0, r.output
    assert "0 fingerprint file(s) changed" in r.output  # port fingerprinted each change as lock does


def test_a_fix_s_own_port_of_the_target_is_used_and_the_target_is_named(cli, cookbook, tmp_path):
    cookbook.fix("moved", {"vllm_gaudi/runner.py": (RUNNER, REPLACED)})
    # The target renamed f3, so the v0.26.0 change conflicts; the fix carries a port by hand.
    renamed = NEW_RUNNER.replace("def f3():", "def f3_new():")
    fix_dir = cookbook.root / "fixes" / "moved"
    (fix_dir / "v0.27.0.patch").write_text(
        render("vllm_gaudi/runner.py", renamed.encode(), renamed.replace("    return 3\n", "    return 300\n").encode())
    )
    with open(fix_dir / "fix.toml", "a") as fh:
        fh.write('\n[release."v0.27.0"]\npatch = "v0.27.0.patch"\n')
    cookbook.profile(["moved"])
    cookbook.lock()
    tree = git_tree(tmp_path / "new", {"vllm_gaudi/__init__.py": "", "vllm_gaudi/runner.py": renamed}, tag="v0.27.0")
    r = cli(
        "port", "--profile", "v0.26.0", "--from", "v0.26.0", "--source", f"vllm-gaudi={tree}", "--json", "--no-proofs"
    )
    out = json.loads(r.stdout)
    assert out["to"] == "v0.27.0"  # named without --write: the tree's tag
    assert [(c["fix"], c["outcome"]) for c in out["changes"]] == [("moved", "hand")]
    assert out["fixes"] == [{"id": "moved", "outcome": "ported"}]


def test_the_target_of_an_untagged_tree_is_branch_and_commit(cli, cookbook, tmp_path):
    cookbook.fix("f", {"vllm_gaudi/runner.py": (RUNNER, REPLACED)})
    cookbook.profile(["f"])
    cookbook.lock()
    tree = git_tree(tmp_path / "new", {"vllm_gaudi/__init__.py": "", "vllm_gaudi/runner.py": NEW_RUNNER})
    r = cli("port", "f", "--from", "v0.26.0", "--source", f"vllm-gaudi={tree}", "--json", "--no-proofs")
    assert json.loads(r.stdout)["to"] == "main-" + git(tree, "rev-parse", "--short=8", "HEAD")


IMPORTING_PROOF = """
import importlib
import sys


def check(trees) -> None:
    sys.path.insert(0, str(trees.vllm_gaudi))
    runner = importlib.import_module("vllm_gaudi.runner")
    assert runner.f3() == 300, "f3 is wrong"
"""


def test_a_proof_that_cannot_import_is_cannot_run_not_failed(cli, cookbook, tmp_path):
    cookbook.fix("f", {"vllm_gaudi/runner.py": (RUNNER, REPLACED)}, proof=IMPORTING_PROOF)
    cookbook.profile(["f"])
    cookbook.lock()
    # The new tree's module imports something the old vLLM lacks, as main's do.
    broken = "from vllm.entrypoints.launchers import serve\n" + NEW_RUNNER
    new = write_tree(tmp_path / "new", {"vllm-gaudi": {"vllm_gaudi/__init__.py": "", "vllm_gaudi/runner.py": broken}})
    r = cli("port", "f", "--from", "v0.26.0", *port_args(new), "--json")
    assert r.exit_code == 0, r.output
    (fix,) = json.loads(r.stdout)["fixes"]
    assert (fix["proof"]["pristine"], fix["proof"]["ported"]) == ("cannot-run", "cannot-run")
    said = "cannot run on the new tree (import error): ModuleNotFoundError: No module named 'vllm"
    assert said in fix["proof"]["detail"]
    r = cli("port", "f", "--from", "v0.26.0", *port_args(new))
    assert "  f  cannot run   cannot run  ported" in r.stdout


def _merge_pack(cookbook, tmp_path, new_runner: str) -> Path:
    """A fix of f3 on v0.26.0, pinned to the tree's first commit; the tree's HEAD has ``new_runner``."""
    cookbook.fix("f", {"vllm_gaudi/runner.py": (RUNNER, REPLACED)})
    tree = git_tree(
        tmp_path / "new",
        {"vllm_gaudi/__init__.py": "", "vllm_gaudi/runner.py": RUNNER},
        {"vllm_gaudi/runner.py": new_runner},
    )
    old = git(tree, "rev-parse", "HEAD~1")
    cookbook.profile(["f"], commits={"vllm-gaudi": [old], "vllm": ["568afb3a"]})
    cookbook.lock()
    return tree


def test_a_change_whose_context_moved_is_merged_three_way(cli, cookbook, tmp_path):
    # Upstream edited the line right after the fix's: a fuzz-0 diff fails, git merge-file does not.
    new_runner = RUNNER.replace("def f4():\n", "def f4(x=None):\n")
    tree = _merge_pack(cookbook, tmp_path, new_runner)
    r = cli(
        "port",
        "f",
        "--from",
        "v0.26.0",
        "--source",
        f"vllm-gaudi={tree}",
        "--json",
        "--no-proofs",
        "--write",
        "v0.27.0",
    )
    assert r.exit_code == 0, r.output
    (change,) = json.loads(r.stdout)["changes"]
    assert change["outcome"] == "merged" and "git merge-file" in change["detail"]
    written = Catalog.load(cookbook.root).fixes["f"].changes["v0.27.0"][0].patch
    assert "+    return 300\n" in written and "\nindex " in written


def test_a_merge_left_with_conflicts_is_written_with_the_command_that_records_it(cli, cookbook, tmp_path):
    new_runner = RUNNER.replace("def f3():\n    return 3\n", "def f3():\n    return 3 + 0\n")
    tree = _merge_pack(cookbook, tmp_path, new_runner)
    args = ["--from", "v0.26.0", "--source", f"vllm-gaudi={tree}", "--json", "--no-proofs", "--write", "v0.27.0"]
    out = json.loads(cli("port", "f", *args).stdout)
    assert out["changes"][0]["outcome"] == "conflict" and "leaves 1 conflict(s)" in out["changes"][0]["detail"]
    left = cookbook.root / "fixes" / "f" / "v0.27.0.runner.py.conflict"
    text = left.read_text()
    assert "<<<<<<< the new tree\n    return 3 + 0\n=======\n    return 300\n>>>>>>> f\n" in text
    (note,) = [n for n in out["notes"] if "resolve the conflicts" in n]
    assert f"--resolved vllm_gaudi/runner.py={left}" in note
    # Still marked: refused. Resolved: recorded as merged, and the release written.
    r = cli("port", "f", *args, "--resolved", f"vllm_gaudi/runner.py={left}")
    assert json.loads(r.stdout)["changes"][0]["outcome"] == "conflict"
    left.write_text(
        text.replace(
            "<<<<<<< the new tree\n    return 3 + 0\n=======\n    return 300\n>>>>>>> f\n", "    return 300 + 0\n"
        )
    )
    r = cli("port", "f", *args, "--resolved", f"vllm_gaudi/runner.py={left}")
    assert json.loads(r.stdout)["changes"][0]["outcome"] == "merged"
    assert "+    return 300 + 0\n" in (cookbook.root / "fixes" / "f" / "v0.27.0.patch").read_text()


DRAFT = """release = "main-091bbadd"
pack = ["f"]
opt_ins = []

[[pin]]
dist = "vllm-gaudi"
package = "vllm_gaudi"
version = "TODO"
commits = ["TODO"]

[[pin]]
dist = "vllm"
package = "vllm"
version = "0.26.0"
commits = ["568afb3a13806beb53bb2e6bd518269357b237c0"]
"""


def test_a_draft_profile_is_refused_until_its_pins_are_real_and_never_a_default(cli, cookbook, site):
    cookbook.fix("f", {"vllm_gaudi/runner.py": (RUNNER, REPLACED)})
    cookbook.profile(["f"])
    cookbook.lock()
    # The draft's name sorts before the real profile's, as port's main-091bbadd does.
    fix_dir = cookbook.root / "fixes" / "f"
    (fix_dir / "main-091bbadd.patch").write_bytes((fix_dir / "v0.26.0.patch").read_bytes())
    with open(fix_dir / "fix.toml", "a") as fh:
        fh.write('\n[release."main-091bbadd"]\npatch = "main-091bbadd.patch"\n')
    (cookbook.root / "profiles" / "main-091bbadd.toml").write_text(DRAFT)
    site_args = ["--site", str(site.path)]
    for args in (
        ["apply", "--profile", "main-091bbadd", *site_args],
        ["diff", "--profile", "main-091bbadd"],
        ["status", "--profile", "main-091bbadd", *site_args],
        ["verify", "--profile", "main-091bbadd"],
    ):
        r = cli(*args)
        assert r.exit_code == 2, (args, r.output)
        assert "is a draft (pin vllm-gaudi: version TODO and commits TODO)" in r.stderr
    listed = {row["name"]: row["draft"] for row in json.loads(cli("profiles", "--json").stdout)["profiles"]}
    assert listed == {"main-091bbadd": "pin vllm-gaudi: version TODO and commits TODO", "v0.26.0": None}
    # Not a default: diff FIX takes the real profile that has the fix.
    r = cli("diff", "f")
    assert r.exit_code == 0, r.output
    assert "the fixes as profile v0.26.0 has them" in r.stderr


def test_resolved_needs_one_fix_and_a_file(cli, cookbook, tmp_path):
    cookbook.fix("f", {"vllm_gaudi/runner.py": (RUNNER, REPLACED)})
    cookbook.profile(["f"])
    base = ["port", "--from", "v0.26.0", *port_args(cookbook.sources), "--no-proofs"]
    for args, said in (
        (["--profile", "v0.26.0", "--resolved", "vllm_gaudi/runner.py=x"], "needs exactly one FIX"),
        (["f", "--resolved", "vllm_gaudi/runner.py"], "give PATH=FILE"),
        (["f", "--resolved", f"vllm_gaudi/runner.py={tmp_path / 'absent'}"], "is not a file"),
    ):
        r = cli(*base, *args)
        assert r.exit_code == 2 and said in r.stderr, r.output
