"""Reading commits without importing, and the list/show/status outputs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from builders import BATCH, SAMPLER, make_site
from click.testing import CliRunner

from fixpack.cli import main
from fixpack.installation import commits


def test_version_py_and_local_label_and_direct_url(tmp_path: Path):
    vp = tmp_path / "_version.py"
    vp.write_text("__version__ = version = '0.26.0'\n__commit_id__ = commit_id = 'gb059f9c95'\n")
    assert commits.from_version_py(vp) == "b059f9c95"
    vp.write_text("__version__ = version = '0.26.0'\n")  # setuptools-scm 8 writes no commit
    assert commits.from_version_py(vp) is None
    assert commits.from_local_version("0.26.1.dev0+gf2654939e.d20260726") == "f2654939e"
    assert commits.from_local_version("0.26.0+empty") is None
    assert commits.from_direct_url('{"url": "git+x", "vcs_info": {"vcs": "git", "commit_id": "ABC1234"}}') == "abc1234"
    assert commits.from_direct_url('{"url": "file:///w", "dir_info": {}}') is None
    assert commits.matches("b059f9c95", "b059f9c95d6a07f19eb00aa06d1ec8b87b296437")
    assert not commits.matches("b059f9c96", "b059f9c95d6a07f19eb00aa06d1ec8b87b296437")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_checkout_head_read_from_files(tmp_path: Path):
    repo = tmp_path / "checkout"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def git(*args: str, cwd: Path = repo) -> str:
        return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    (repo / "f").write_text("x")
    git("add", "f")
    git("commit", "-qm", "one")
    head = git("rev-parse", "HEAD").strip()
    assert commits.from_git_checkout(repo / "sub" / "dir") == head
    git("pack-refs", "--all")
    assert commits.from_git_checkout(repo) == head
    git("worktree", "add", "-q", str(tmp_path / "wt"), "HEAD")
    assert commits.from_git_checkout(tmp_path / "wt") == head


def test_editable_commit_from_git_checkout(cookbook, tmp_path: Path):
    cookbook.fix("a", {"vllm/sampler.py": (SAMPLER, SAMPLER + "# a\n")})
    cookbook.profile(["a"])
    site = make_site(tmp_path, commits={"vllm": None, "vllm-gaudi": None}, editable=True)
    checkout = site.roots["vllm-gaudi"]
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    (checkout / ".git" / "HEAD").write_text("0123456789abcdef0123456789abcdef01234567\n")  # a detached HEAD
    r = CliRunner().invoke(main, ["status", "--site", str(site.path), "--json"])
    gaudi = next(d for d in json.loads(r.stdout)["distributions"] if d["name"] == "vllm-gaudi")
    assert gaudi["commit"] == "0123456789abcdef0123456789abcdef01234567"
    assert gaudi["commit_source"].startswith("git checkout")


def test_list_show_and_status_pending(cookbook, site):
    cookbook.fix("a", {"vllm/sampler.py": (SAMPLER, SAMPLER + "# a\n")}, title="Add a comment")
    cookbook.fix("b", {"vllm/sampler.py": (SAMPLER + "# a\n", SAMPLER + "# a\n# b\n")}, opt_in=True, requires=("a",))
    cookbook.profile(["a", "b"], opt_ins=["b"])
    cookbook.lock()
    r = CliRunner().invoke(main, ["list", "--profile", "v0.26.0", "--json"])
    assert json.loads(r.stdout) == {
        "profile": "v0.26.0",
        "fixes": [
            {"id": "a", "title": "Add a comment", "opt_in": False, "requires": [], "releases": ["v0.26.0"]},
            {"id": "b", "title": "Fix b", "opt_in": True, "requires": ["a"], "releases": ["v0.26.0"]},
        ],
    }
    r = CliRunner().invoke(main, ["show", "b"])
    assert r.exit_code == 0 and "requires: a" in r.stdout and "vllm/sampler.py (locked)" in r.stdout
    r = CliRunner().invoke(main, ["status", "--profile", "v0.26.0", "--site", str(site.path), "--json"])
    assert json.loads(r.stdout)["fixes"] == [{"id": "a", "state": "pending"}, {"id": "b", "state": "pending"}]
    CliRunner().invoke(main, ["apply", "--profile", "v0.26.0", "--site", str(site.path)])
    r = CliRunner().invoke(main, ["status", "--profile", "v0.26.0", "--site", str(site.path), "--json"])
    assert json.loads(r.stdout)["fixes"] == [{"id": "a", "state": "applied"}, {"id": "b", "state": "pending"}]
    site.file("vllm/sampler.py").write_text("changed by hand\n")
    r = CliRunner().invoke(main, ["status", "--profile", "v0.26.0", "--site", str(site.path), "--json"])
    assert json.loads(r.stdout)["fixes"] == [{"id": "a", "state": "drifted"}, {"id": "b", "state": "drifted"}]


def test_profiles_lists_each_profile_with_its_pins(cli, cookbook):
    cookbook.fix("b", {"vllm/sampler.py": (SAMPLER, SAMPLER + "# b\n")}, opt_in=True)
    cookbook.profile(["b"], opt_ins=["b"])
    r = cli("profiles", "--json")
    assert r.exit_code == 0
    (prof,) = json.loads(r.stdout)["profiles"]
    assert prof["name"] == "v0.26.0" and prof["pack"] == ["b"] and prof["opt_ins"] == ["b"]
    assert {p["dist"] for p in prof["pins"]} == {"vllm", "vllm-gaudi"}
    assert "v0.26.0  release v0.26.0: 1 fixes; opt-ins: b" in cli("profiles").stdout


def test_list_and_show_with_a_site_say_each_fixs_state_there(cli, cookbook, site):
    cookbook.fix("a", {"vllm/sampler.py": (SAMPLER, SAMPLER + "# a\n")})
    cookbook.fix("b", {"vllm_gaudi/batch.py": (BATCH, BATCH + "# b\n")}, opt_in=True)
    cookbook.profile(["a", "b"], opt_ins=["b"])
    cookbook.lock()
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    r = cli("list", "--profile", "v0.26.0", "--site", str(site.path), "--json")
    assert {f["id"]: f["state"] for f in json.loads(r.stdout)["fixes"]} == {"a": "applied", "b": "pending"}
    assert "state" not in json.loads(cli("list", "--json").stdout)["fixes"][0]
    assert cli("show", "b", "--site", str(site.path)).stdout.rstrip().endswith(f"in {site.path}: pending")
