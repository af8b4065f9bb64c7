"""The real v0.26.0 pack on the real upstream trees.

Needs FIXPACK_SRC_VLLM_GAUDI (a vllm-gaudi tree at v0.26.0, repository layout) and FIXPACK_SRC_VLLM
(vLLM 0.26.0's .py files, repository layout); skipped, saying so, without them. Nothing upstream is
stored here: the trees are read from those folders and copied to temporary ones.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from builders import GAUDI_COMMIT, REPO, write_dist
from realtree import PROFILE, REALTREE, SRC_GAUDI, SRC_VLLM, opt_ins_of, package_files, run_python, tree_hashes

from fixpack.cookbook.catalog import Catalog
from fixpack.core.plan import resolve

pytestmark = REALTREE
VLLM_PROFILE = "vllm-0.26.0"  # vLLM's own builds: vLLM alone


@pytest.fixture(scope="module")
def real_vllm_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vLLM alone, relabelled as vLLM names its CPU wheels (0.26.0+cpu), with a build commit no
    profile lists: the profile for vLLM's own builds takes any build whose files hold."""
    site = tmp_path_factory.mktemp("real-vllm") / "site"
    vllm = package_files(Path(SRC_VLLM), "vllm")  # type: ignore[arg-type]
    vllm["vllm/_version.py"] = b"__version__ = version = '0.26.0'\n__commit_id__ = commit_id = 'g1234567ab'\n"
    write_dist(site, "vllm", "0.26.0+cpu", vllm)
    return site


@pytest.mark.parametrize("profile", [PROFILE, VLLM_PROFILE])
def test_profile_applies_is_idempotent_and_reverts_exactly(profile: str, request: pytest.FixtureRequest):
    real_site = request.getfixturevalue("real_site" if profile == PROFILE else "real_vllm_site")
    pristine = tree_hashes(real_site)
    apply_all = str(REPO / "fixes" / "apply_all.py")
    first = run_python(apply_all, "--profile", profile, "--site", str(real_site), *opt_ins_of(profile))
    assert first.returncode == 0, first.stderr
    patched = tree_hashes(real_site)
    changed = sorted(p for p in patched if patched[p] != pristine.get(p))
    assert changed, "nothing was patched"
    mtimes = {p: (real_site / p).stat().st_mtime_ns for p in changed}
    again = run_python(apply_all, "--profile", profile, "--site", str(real_site), *opt_ins_of(profile), "--json")
    assert again.returncode == 0, again.stderr
    assert {f["action"] for f in json.loads(again.stdout)["fixes"]} == {"already-applied"}
    assert {p: (real_site / p).stat().st_mtime_ns for p in changed} == mtimes
    status = run_python("-m", "fixpack", "status", "--site", str(real_site), "--json")
    states = {f["id"]: f["state"] for f in json.loads(status.stdout)["fixes"]}
    catalog = Catalog.load(REPO)
    planned = resolve(catalog.fixes, catalog.profile(profile), tuple(opt_ins_of(profile))).fix_ids  # opt-ins supersede
    assert set(states.values()) == {"applied"} and set(states) == set(planned)
    reverted = run_python("-m", "fixpack", "revert", "--site", str(real_site))
    assert reverted.returncode == 0, reverted.stderr
    assert tree_hashes(real_site) == pristine


def _verify(*extra: str) -> dict:
    """``fixpack verify`` of every profile on the real trees, which must pass; its JSON (each fix's
    proof once, in the first profile that has it)."""
    r = run_python(
        "-m", "fixpack", "verify", "--json", *extra,
        f"--source=vllm-gaudi={SRC_GAUDI}", f"--source=vllm={SRC_VLLM}",
    )  # fmt: skip
    out = json.loads(r.stdout)
    failures = {x["fix"]: x["failures"] for x in out["results"] if x["failures"]}
    assert r.returncode == 0 and out["ok"], failures
    return out


def test_verify_profile_on_real_trees(tmp_path: Path):
    out = _verify("--junit", str(tmp_path / "verify.xml"))
    for result in out["results"]:
        assert result["applies"] and result["compiles"] and result["reverts"], result
        assert result["proof"] in ("demonstrated", "partial"), result
    catalog = Catalog.load(REPO)
    proven = [(r["fix"], r["profile"]) for r in out["results"]]
    first = {f: p.name for p in reversed(catalog.usable) for f in p.pack}  # the first profile to have it
    assert sorted(proven) == sorted(first.items())  # each fix once


def test_verify_coverage_on_real_trees():
    """Every line the pack adds is run by its fix's proof, or declared unreachable with a reason."""
    out = _verify("--coverage")
    for result in out["results"]:
        coverage = result["coverage"]
        assert coverage["unrun"] == [] and coverage["covered"] + len(coverage["excluded"]) == coverage["total"], result
        assert all(e["why"] for e in coverage["excluded"]) and "unmatched_unreachable" not in coverage, result
    assert sum(x["coverage"]["total"] for x in out["results"]) > 400  # the lines were found, not skipped


def _git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")  # fmt: skip
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _clean_checkout(src: Path, package: str, dest: Path, commit: str | None) -> Path:
    """A clean git checkout of ``src`` at ``commit``, or a fresh repository of its package."""
    if commit and (src / ".git").exists():
        subprocess.run(["git", "clone", "-q", "--no-checkout", str(src), str(dest)], check=True)
        _git(dest, "-c", "advice.detachedHead=false", "checkout", "-q", commit)
        return dest
    shutil.copytree(src / package, dest / package, ignore=shutil.ignore_patterns("__pycache__"))
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-qm", "vLLM 0.26.0")
    return dest


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_mbox_series_applies_with_git_am_and_matches_apply(real_site: Path, tmp_path: Path):
    assert (
        run_python(
            str(REPO / "fixes/apply_all.py"), "--profile", PROFILE, "--site", str(real_site), *opt_ins_of()
        ).returncode
        == 0
    )
    try:
        for dist, src, package, commit in (
            ("vllm-gaudi", SRC_GAUDI, "vllm_gaudi", GAUDI_COMMIT),
            ("vllm", SRC_VLLM, "vllm", None),
        ):
            mbox = run_python(
                "-m", "fixpack", "diff", "--profile", PROFILE, *opt_ins_of(), "--format", "mbox", "--dist", dist
            )
            assert mbox.returncode == 0, mbox.stderr
            (tmp_path / f"{dist}.mbox").write_text(mbox.stdout)
            repo = _clean_checkout(Path(src), package, tmp_path / dist, commit)  # type: ignore[arg-type]
            _git(repo, "am", "-q", str(tmp_path / f"{dist}.mbox"))
            patched = _git(repo, "diff", "--name-only", "HEAD~" + str(mbox.stdout.count("\nSubject: [PATCH")), "HEAD")
            for path in patched.split():
                assert (repo / path).read_bytes() == (real_site / path).read_bytes(), path
    finally:
        run_python("-m", "fixpack", "revert", "--site", str(real_site))
