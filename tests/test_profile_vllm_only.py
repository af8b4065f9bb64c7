"""Two profiles of one release: one for the Gaudi image (vllm-gaudi and vLLM), one for vLLM's own
builds (vLLM alone, any build of the version, refused beside vllm-gaudi). Their shared fixes keep
one lock; a site has one profile applied at a time; show, verify, lock and the maintainer commands
pick the profile a site or the given trees are for."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from builders import PRISTINE, SAMPLER, Cookbook, make_site, run_cli

from fixpack.cookbook.catalog import Catalog
from fixpack.errors import UsageError

EXECUTOR = PRISTINE["vllm"]["vllm/executor.py"]
RUNNER = PRISTINE["vllm-gaudi"]["vllm_gaudi/runner.py"]
VLLM_ONLY = {"vllm": PRISTINE["vllm"]}
CPU_BUILD = "1234567abcdef"  # a build commit neither profile lists (vLLM's CPU wheel, say)


def two_profiles(cookbook: Cookbook) -> None:
    """``v0.26.0``: both distributions; ``vllm-0.26.0``: vLLM alone (one fix of its own), refused
    beside vllm-gaudi."""
    cookbook.fix("sampler-fix", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return x * 2"))})
    cookbook.fix("executor-fix", {"vllm/executor.py": (EXECUTOR, EXECUTOR.replace("log()", "raise"))})
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 33\n"))})
    cookbook.profile(["sampler-fix", "runner-fix"])
    cookbook.profile(
        ["sampler-fix", "executor-fix"],
        name="vllm-0.26.0",
        dists=("vllm",),
        match="fingerprints",
        instead={"vllm-gaudi": "v0.26.0"},
    )
    cookbook.lock("v0.26.0")
    cookbook.lock("vllm-0.26.0")


def vllm_site(tmp: Path, version: str = "0.26.0+cpu", commit: str | None = CPU_BUILD):
    return make_site(tmp, VLLM_ONLY, commits={"vllm": commit}, versions={"vllm": version})


def test_any_build_of_the_version_applies_where_its_files_hold(cli, cookbook, tmp_path):
    two_profiles(cookbook)
    site = vllm_site(tmp_path)
    r = cli("apply", "--profile", "vllm-0.26.0", "--site", str(site.path), "--json")
    assert r.exit_code == 0, r.output
    assert [(f["id"], f["action"]) for f in json.loads(r.stdout)["fixes"]] == [
        ("sampler-fix", "applied"),
        ("executor-fix", "applied"),
    ]
    assert f"commit {CPU_BUILD[:9]}" in r.stderr and "file fingerprints decide" in r.stderr
    assert b"return x * 2" in site.read("vllm/sampler.py") and b"raise" in site.read("vllm/executor.py")
    status = json.loads(cli("status", "--site", str(site.path), "--json").stdout)
    assert status["profile"] == "vllm-0.26.0"
    assert {f["id"]: f["state"] for f in status["fixes"]} == {"sampler-fix": "applied", "executor-fix": "applied"}


def test_a_build_whose_files_differ_is_refused_as_drifted(cli, cookbook, tmp_path):
    two_profiles(cookbook)
    files = {"vllm": {**PRISTINE["vllm"], "vllm/executor.py": EXECUTOR + "# this build's own line\n"}}
    site = make_site(tmp_path, files, commits={"vllm": CPU_BUILD}, versions={"vllm": "0.26.0+rocm"})
    before = site.snapshot()
    r = cli("apply", "--profile", "vllm-0.26.0", "--site", str(site.path))
    assert r.exit_code == 1
    assert "drifted: vllm/executor.py" in r.stderr
    assert site.snapshot() == before


def test_another_release_is_refused_with_nothing_written(cli, cookbook, tmp_path):
    two_profiles(cookbook)
    site = vllm_site(tmp_path, version="0.25.1")
    before = site.snapshot()
    r = cli("apply", "--profile", "vllm-0.26.0", "--site", str(site.path))
    assert r.exit_code == 1
    (line,) = [ln for ln in r.stderr.splitlines() if "error" in ln]
    assert "vllm is version 0.25.1" in line and "pins 0.26.0 (any build)" in line
    assert site.snapshot() == before


def test_a_commit_pin_still_refuses_a_build_it_does_not_list(cli, cookbook, tmp_path):
    cookbook.fix("sampler-fix", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return x * 2"))})
    cookbook.profile(["sampler-fix"], name="vllm-0.26.0", dists=("vllm",))
    cookbook.lock("vllm-0.26.0")
    site = vllm_site(tmp_path)
    r = cli("apply", "--profile", "vllm-0.26.0", "--site", str(site.path))
    assert r.exit_code == 1 and "the image does not match profile vllm-0.26.0" in r.stderr


@pytest.mark.parametrize("overlay", [False, True], ids=["in-place", "overlay"])
def test_refused_beside_vllm_gaudi_naming_the_profile_to_use(cli, cookbook, tmp_path, overlay):
    two_profiles(cookbook)
    site = make_site(tmp_path)
    before = site.snapshot()
    args = ["--overlay", str(tmp_path / "overlay")] if overlay else []
    r = cli("apply", "--profile", "vllm-0.26.0", "--site", str(site.path), *args)
    assert r.exit_code == 1
    errors = [ln for ln in r.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "vllm-gaudi 0.26.0 is installed" in errors[0]
    assert "apply profile v0.26.0" in errors[0]
    assert site.snapshot() == before and not (tmp_path / "overlay").exists()


def test_the_overlay_takes_the_vllm_only_profile(cli, cookbook, tmp_path):
    two_profiles(cookbook)
    site = vllm_site(tmp_path)
    before = site.snapshot()
    overlay = tmp_path / "overlay"
    r = cli("apply", "--profile", "vllm-0.26.0", "--site", str(site.path), "--overlay", str(overlay))
    assert r.exit_code == 0, r.output
    assert site.snapshot() == before
    status = json.loads(cli("status", "--site", str(site.path), "--overlay", str(overlay), "--json").stdout)
    assert status["profile"] == "vllm-0.26.0" and {f["state"] for f in status["fixes"]} == {"applied"}


def test_one_profile_at_a_time_on_a_site(cli, cookbook, tmp_path):
    """A site where one profile is applied refuses the other in one line naming it, in both
    directions, and takes it once reverted."""
    two_profiles(cookbook)
    site = vllm_site(tmp_path, version="0.26.0", commit=None)
    assert cli("apply", "--profile", "vllm-0.26.0", "--site", str(site.path)).exit_code == 0
    # vllm-gaudi installed afterwards: the Gaudi profile now fits the site, but another is applied
    make_site(tmp_path, {"vllm-gaudi": PRISTINE["vllm-gaudi"]})
    before = site.snapshot()
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 1
    errors = [ln for ln in r.stderr.splitlines() if "error" in ln]
    assert errors == [
        "fixpack: error: profile vllm-0.26.0 (release v0.26.0, 2 fixes) is applied in this environment: "
        "revert it first (fixpack revert), then apply profile v0.26.0"
    ]
    assert site.snapshot() == before
    assert cli("revert", "--site", str(site.path)).exit_code == 0
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    r = cli("apply", "--profile", "vllm-0.26.0", "--site", str(site.path))
    assert r.exit_code == 1 and "apply profile v0.26.0" in r.stderr  # refused beside vllm-gaudi first


def test_show_reports_against_the_sites_own_profile(cli, cookbook, tmp_path):
    two_profiles(cookbook)
    only = vllm_site(tmp_path / "a")
    gaudi = make_site(tmp_path / "b")
    assert cli("show", "sampler-fix", "--site", str(only.path)).stdout.rstrip().endswith(": pending")
    assert (
        cli("show", "runner-fix", "--site", str(only.path))
        .stdout.rstrip()
        .endswith("not in profile vllm-0.26.0, the site's")
    )
    assert cli("show", "runner-fix", "--site", str(gaudi.path)).stdout.rstrip().endswith(": pending")
    assert cli("apply", "--profile", "vllm-0.26.0", "--site", str(only.path)).exit_code == 0
    assert cli("show", "executor-fix", "--site", str(only.path)).stdout.rstrip().endswith(": applied")


def test_a_shared_fix_must_meet_the_same_changes_in_both_profiles(cookbook):
    """Profiles of one release share each fix's lock: a fix in both whose file meets another
    change before it in one of them is refused when the catalog loads."""
    two_profiles(cookbook)
    cookbook.fix("sampler-first", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return 1.0", "return 0.5"))})
    cookbook.profile(
        ["sampler-first", "sampler-fix", "executor-fix"], name="vllm-0.26.0", dists=("vllm",), match="fingerprints"
    )
    with pytest.raises(UsageError) as err:
        Catalog.load(cookbook.root)
    message = err.value.message
    assert "vllm-0.26.0.toml" in message and "fix 'sampler-fix' shares release v0.26.0's lock" in message
    assert "vllm/sampler.py meets other changes before it (sampler-first; in v0.26.0: none)" in message


def test_instead_must_name_a_profile_that_pins_it(cookbook):
    cookbook.fix("sampler-fix", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return x * 2"))})
    cookbook.profile(["sampler-fix"], name="vllm-0.26.0", dists=("vllm",), instead={"vllm-gaudi": "v9"})
    with pytest.raises(UsageError, match=r"\[instead\] vllm-gaudi names 'v9', which is not another profile"):
        Catalog.load(cookbook.root)


def test_commands_pick_the_profile_their_trees_are_for(cookbook):
    two_profiles(cookbook)
    catalog = Catalog.load(cookbook.root)
    assert catalog.default_profile(None, {"vllm", "vllm-gaudi"}).name == "v0.26.0"
    assert catalog.default_profile(None, {"vllm"}).name == "vllm-0.26.0"
    assert catalog.default_profile("v0.26.0", {"vllm"}).name == "v0.26.0"  # named: as named
    with pytest.raises(UsageError, match=r"give --profile NAME \(this cookbook has: v0.26.0 \(vllm and vllm-gaudi\)"):
        catalog.default_profile(None)


def test_lock_without_a_profile_locks_each_one_the_trees_cover(cli, cookbook):
    two_profiles(cookbook)
    lock = cookbook.root / "fixes" / "executor-fix" / "v0.26.0.lock.json"
    lock.unlink()
    sources = [f"--source={d}={p}" for d, p in cookbook.sources.items()]
    r = cli("lock", *sources)
    assert r.exit_code == 0, r.output
    assert "profile v0.26.0: 0 fingerprint file(s) changed" in r.stdout
    assert "profile vllm-0.26.0: 1 fingerprint file(s) changed" in r.stdout and lock.exists()
    r = cli("lock", f"--source=vllm={cookbook.sources['vllm']}")
    assert r.exit_code == 0 and "profile v0.26.0" not in r.stdout and "profile vllm-0.26.0" in r.stdout


PROOF = """
from pathlib import Path

def check(trees):
    with open(RUNS, "a") as out:
        out.write("run\\n")
    if b"x * 2" not in (Path(trees.vllm) / "vllm/sampler.py").read_bytes():
        raise AssertionError("sample does not double")
"""


def test_verify_runs_a_shared_fixs_proof_once(cli, cookbook, tmp_path):
    two_profiles(cookbook)
    runs = tmp_path / "runs"
    proof = f"RUNS = {str(runs)!r}\n" + PROOF  # where each run of the proof leaves a line
    cookbook.fix(
        "sampler-fix", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return x * 2"))}, proof=proof
    )
    cookbook.lock("v0.26.0")
    sources = [f"--source={d}={p}" for d, p in cookbook.sources.items()]
    r = cli("verify", *sources, "--json", "--jobs", "1")
    out = json.loads(r.stdout)
    proven = [(v["fix"], v["proof"]) for v in out["results"] if v["proof"] != "none"]
    assert proven == [("sampler-fix", "demonstrated")]
    assert runs.read_text().count("run") == 2  # once on the pristine tree, once on the patched one


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('match = "fingerprints"', 'match = "sha"', "match must be one of commit, fingerprints, not 'sha'"),
        ('vllm-gaudi = "v0.26.0"', "vllm-gaudi = 1", "[instead] maps a distribution to the name of the profile"),
    ],
)
def test_a_malformed_pin_match_or_instead_is_one_line_exit_2(cookbook, old, new, message):
    two_profiles(cookbook)
    path = cookbook.root / "profiles" / "vllm-0.26.0.toml"
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new, 1))
    r = run_cli("profiles")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr


def test_lock_without_a_profile_or_trees_for_one_says_so(cli, cookbook, tmp_path):
    two_profiles(cookbook)
    r = run_cli("lock", f"--source=vllm-gaudi={cookbook.sources['vllm-gaudi']}")
    assert r.returncode == 2 and "give --profile NAME, or --source trees for all its pins" in r.stderr, r.stderr


def _remove_vllm_gaudi(site) -> None:
    """What ``pip uninstall vllm-gaudi`` leaves: its package and its dist-info gone."""
    shutil.rmtree(site.roots["vllm-gaudi"] / "vllm_gaudi")
    for info in site.path.glob("vllm_gaudi-*.dist-info"):
        shutil.rmtree(info)


@pytest.mark.parametrize("overlay", [False, True], ids=["in-place", "overlay"])
def test_a_way_back_after_a_pinned_distribution_is_removed(cli, cookbook, tmp_path, overlay):
    """The Gaudi profile applied, then vllm-gaudi uninstalled to switch to vLLM's own profile:
    status reports what is applied and how back; revert takes back what remains, leaving nothing
    of the fixes behind; the other profile then applies."""
    two_profiles(cookbook)
    site = make_site(tmp_path)
    where = ["--site", str(site.path), *(["--overlay", str(tmp_path / "overlay")] if overlay else [])]
    assert cli("apply", "--profile", "v0.26.0", *where).exit_code == 0
    _remove_vllm_gaudi(site)

    r = cli("apply", "--profile", "v0.26.0", *where)
    assert r.exit_code == 3 and "reinstall it, or take them back with fixpack revert" in r.stderr
    r = cli("status", *where, "--json")
    assert r.exit_code == 0, r.output
    status = json.loads(r.stdout)
    assert {f["id"]: f["state"] for f in status["fixes"]} == {"sampler-fix": "applied", "runner-fix": "missing"}
    (note,) = [n for n in status["notes"] if "vllm-gaudi" in n]
    assert "vllm-gaudi, which profile v0.26.0 pins, is no longer installed" in note
    assert note.endswith("fixpack revert takes back the fixes on what remains")

    before = site.snapshot()
    r = cli("revert", "sampler-fix", *where)  # runner-fix would stay applied to files that are gone
    assert r.exit_code == 1
    assert "runner-fix, which would stay applied, patched it: revert it too" in r.stderr
    assert cli("revert", "--dry-run", *where).exit_code == 0
    assert site.snapshot() == before

    r = cli("revert", *where)
    assert r.exit_code == 0, r.output
    assert "the fixes' changes to its 1 file went with it" in r.stderr
    assert site.read("vllm/sampler.py") == SAMPLER.encode()
    assert not (site.path / ".fixpack" / "manifest.json").exists()
    assert not [p for p in (site.path / ".fixpack").rglob("*") if p.is_file() and p.name != "lock"]
    assert not (tmp_path / "overlay").exists()
    assert cli("apply", "--profile", "vllm-0.26.0", *where).exit_code == 0


def test_reverting_only_the_fixes_of_a_removed_distribution_keeps_the_rest(cli, cookbook, tmp_path):
    two_profiles(cookbook)
    site = make_site(tmp_path)
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    _remove_vllm_gaudi(site)
    r = cli("revert", "runner-fix", "--site", str(site.path))
    assert r.exit_code == 0, r.output
    status = cli("status", "--site", str(site.path), "--json")
    assert {f["id"]: f["state"] for f in json.loads(status.stdout)["fixes"]} == {"sampler-fix": "applied"}
    assert "no longer installed" not in status.stderr
    assert not list((site.path / ".fixpack").rglob("runner.py"))


def test_the_wrong_profile_or_none_names_the_profile_that_fits(cli, cookbook, tmp_path):
    """Issue 57: the Gaudi profile on a vLLM-only site said only that vllm-gaudi is not installed;
    apply without --profile did not say which profiles there are."""
    two_profiles(cookbook)
    site = vllm_site(tmp_path)
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 3
    assert "distribution vllm-gaudi is not installed" in r.stderr
    assert r.stderr.rstrip().endswith("profile vllm-0.26.0 pins what is installed here: --profile vllm-0.26.0")
    r = cli("apply", "--site", str(site.path))
    assert r.exit_code == 2
    assert "profiles: v0.26.0 (vllm and vllm-gaudi), vllm-0.26.0 (vllm); vllm-0.26.0 fits what is installed here" in (
        r.stderr
    )
