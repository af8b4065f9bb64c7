"""apply, re-apply, dry run, drift, commits, plan errors, chained files, CRLF, compile checks."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from builders import BATCH, GAUDI_COMMIT, RUNNER, SAMPLER, make_site
from cookbooks import three_fixes

from fixpack.cli.environment import TESTS_ONLY, VARIABLES
from fixpack.cli.site_commands import APPLY_ENVIRONMENT


def two_fixes(cookbook) -> None:
    cookbook.fix("sampler-fix", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return x * 2"))})
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 33\n"))})
    cookbook.profile(["sampler-fix", "runner-fix"])
    cookbook.lock()


def test_cold_apply_then_no_op(cli, cookbook, site):
    two_fixes(cookbook)
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path), "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] and [f["action"] for f in out["fixes"]] == ["applied", "applied"]
    assert b"return x * 2" in site.read("vllm/sampler.py")
    assert b"return 33\n" in site.read("vllm_gaudi/runner.py")
    before = site.snapshot()
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path), "--json")
    assert r.exit_code == 0
    assert [f["action"] for f in json.loads(r.stdout)["fixes"]] == ["already-applied"] * 2
    assert site.snapshot() == before  # no file rewritten, not even touched


def test_dry_run_writes_nothing(cli, cookbook, site):
    two_fixes(cookbook)
    before = site.snapshot()
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path), "--dry-run", "--json")
    assert r.exit_code == 0
    assert [f["action"] for f in json.loads(r.stdout)["fixes"]] == ["would-apply"] * 2
    assert site.snapshot() == before
    assert not (site.path / ".fixpack").exists()


def test_drift_refuses_whole_plan(cli, cookbook, site):
    two_fixes(cookbook)
    site.file("vllm_gaudi/runner.py").write_text(RUNNER.replace("return 3\n", "return 4\n"))
    before = site.snapshot()
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path), "--json")
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    assert not out["ok"] and "drifted" in out["error"] and "runner-fix" in out["error"]
    assert "runner.py" in out["error"]
    assert "return 4" in r.stderr  # shows how the file differs
    assert site.snapshot() == before  # the sampler fix was not applied either


def test_commit_mismatch_refused_unless_allowed(cli, cookbook, tmp_path):
    two_fixes(cookbook)
    site = make_site(tmp_path, commits={"vllm": "1234567890abcdef", "vllm-gaudi": GAUDI_COMMIT})
    before = site.snapshot()
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 1 and "the image does not match" in r.stderr
    assert site.snapshot() == before
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path), "--allow-unpinned")
    assert r.exit_code == 0, r.stderr


def test_unknown_commit_decided_by_fingerprints(cli, cookbook, tmp_path):
    two_fixes(cookbook)
    site = make_site(tmp_path, commits={"vllm": None, "vllm-gaudi": GAUDI_COMMIT})
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 0, r.stderr
    assert "commit could not be read" in r.stderr


def test_abbreviated_commit_from_version_py_matches(cli, cookbook, site):
    two_fixes(cookbook)
    r = cli("status", "--site", str(site.path), "--json")
    dists = {d["name"]: d for d in json.loads(r.stdout)["distributions"]}
    assert dists["vllm-gaudi"]["commit"] == GAUDI_COMMIT[:9]
    assert "_version.py" in dists["vllm-gaudi"]["commit_source"]


def test_unknown_fix_and_profile_suggest(cli, cookbook, site):
    cookbook.fix("gdn-prefix-cache", {"vllm/sampler.py": (SAMPLER, SAMPLER + "# x\n")}, opt_in=True)
    cookbook.profile(["gdn-prefix-cache"], opt_ins=["gdn-prefix-cache"])
    cookbook.lock()
    r = cli("apply", "--profile", "v0.26.0", "gdn-prefix-cahce", "--site", str(site.path))
    assert r.exit_code == 2 and "did you mean 'gdn-prefix-cache'" in r.stderr
    r = cli("apply", "--profile", "v0.26.1", "--site", str(site.path))
    assert r.exit_code == 2 and "did you mean 'v0.26.0'" in r.stderr


def test_requirement_pulled_in_ahead(cli, cookbook, site):
    cookbook.fix("base", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return 1.0", "return 0.5"))}, opt_in=True)
    cookbook.fix("extra", {"vllm_gaudi/batch.py": (BATCH, BATCH + "    # extra\n")}, opt_in=True, requires=("base",))
    cookbook.profile(["extra", "base"], opt_ins=["extra", "base"])
    cookbook.lock()
    r = cli("apply", "--profile", "v0.26.0", "extra", "--site", str(site.path), "--json")
    assert r.exit_code == 0, r.stderr
    assert [f["id"] for f in json.loads(r.stdout)["fixes"]] == ["base", "extra"]
    assert "base is pulled in: extra requires it" in r.stderr


def test_cycle_and_conflict_refused(cli, cookbook, site):
    cookbook.fix("a", {"vllm/sampler.py": (SAMPLER, SAMPLER + "# a\n")}, requires=("b",))
    cookbook.fix("b", {"vllm_gaudi/batch.py": (BATCH, BATCH + "# b\n")}, requires=("a",))
    cookbook.profile(["a", "b"])
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 2 and "cycle" in r.stderr
    cookbook.fix("a", {"vllm/sampler.py": (SAMPLER, SAMPLER + "# a\n")})
    cookbook.fix("c", {"vllm_gaudi/batch.py": (BATCH, BATCH + "# c\n")}, opt_in=True, conflicts=("a",))
    cookbook.profile(["a", "c"], opt_ins=["c"])
    before = site.snapshot()
    r = cli("apply", "--profile", "v0.26.0", "c", "--site", str(site.path))
    assert r.exit_code == 2 and "conflicts" in r.stderr
    assert site.snapshot() == before


def test_opt_in_not_allowed_by_profile(cli, cookbook, site):
    cookbook.fix("a", {"vllm/sampler.py": (SAMPLER, SAMPLER + "# a\n")})
    cookbook.fix("other", {"vllm_gaudi/batch.py": (BATCH, BATCH + "# b\n")}, opt_in=True)
    cookbook.profile(["a"])
    r = cli("apply", "--profile", "v0.26.0", "other", "--site", str(site.path))
    assert r.exit_code == 2 and "not part of profile" in r.stderr


def test_two_fixes_chain_in_one_file(cli, cookbook, site):
    first = RUNNER.replace("return 2\n", "return 20\n")
    second = first.replace("return 25\n", "return 250\n")
    cookbook.fix("one", {"vllm_gaudi/runner.py": (RUNNER, first)})
    cookbook.fix("two", {"vllm_gaudi/runner.py": (first, second)}, opt_in=True)
    cookbook.profile(["one", "two"], opt_ins=["two"])
    cookbook.lock()
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 0 and site.read("vllm_gaudi/runner.py") == first.encode()
    # Adding the opt-in later chains it onto the applied file.
    r = cli("apply", "--profile", "v0.26.0", "two", "--site", str(site.path), "--json")
    assert r.exit_code == 0, r.stderr
    actions = {f["id"]: f["action"] for f in json.loads(r.stdout)["fixes"]}
    assert actions == {"one": "already-applied", "two": "applied"}
    assert site.read("vllm_gaudi/runner.py") == second.encode()
    r = cli("revert", "--site", str(site.path))
    assert r.exit_code == 0 and site.read("vllm_gaudi/runner.py") == RUNNER.encode()


def test_second_fix_applies_without_the_first_at_an_offset(cli, cookbook, site):
    """A later fix locked on top of an opt-in still applies when the opt-in is not asked for."""
    first = RUNNER.replace("def f0():\n", "def f_new():\n    pass\n\n\ndef f0():\n")
    second = first.replace("return 25\n", "return 250\n")
    cookbook.fix("opt", {"vllm_gaudi/runner.py": (RUNNER, first)}, opt_in=True)
    cookbook.fix("later", {"vllm_gaudi/runner.py": (first, second)})
    cookbook.profile(["opt", "later"], opt_ins=["opt"])
    cookbook.lock()
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 0, r.stderr
    assert site.read("vllm_gaudi/runner.py") == RUNNER.replace("return 25\n", "return 250\n").encode()


def test_non_compiling_change_refused_before_any_write(cli, cookbook, site):
    cookbook.fix("good", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return x + 1"))})
    bad = {"vllm_gaudi/batch.py": (BATCH, BATCH + "    def broken(:\n")}
    cookbook.fix("bad", bad)
    cookbook.profile(["good", "bad"])
    before = site.snapshot()
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path), "--json")
    assert r.exit_code == 1
    assert "does not compile" in json.loads(r.stdout)["error"]
    assert site.snapshot() == before


def test_crlf_target_keeps_its_endings(cli, cookbook, tmp_path):
    crlf = BATCH.replace("\n", "\r\n").encode()
    files = {
        "vllm": {"vllm/__init__.py": ""},
        "vllm-gaudi": {"vllm_gaudi/__init__.py": "", "vllm_gaudi/batch.py": crlf},
    }
    site = make_site(tmp_path, files=files)
    # The patch is made with LF endings, as most are; the file stays CRLF throughout.
    cookbook.fix(
        "swap",
        {
            "vllm_gaudi/batch.py": (
                BATCH,
                BATCH.replace("self.rows[b], self.rows[a]", "tuple(reversed((self.rows[a], self.rows[b])))"),
            )
        },
    )
    cookbook.profile(["swap"])
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 0, r.stderr
    patched = site.read("vllm_gaudi/batch.py")
    assert b"reversed" in patched and patched.count(b"\r\n") == patched.count(b"\n") == 3
    assert cli("revert", "--site", str(site.path)).exit_code == 0
    assert site.read("vllm_gaudi/batch.py") == crlf


def test_creates_and_deletes_files(cli, cookbook, site):
    cookbook.fix("newmod", {"vllm_gaudi/extra.py": (None, "X = 1\n"), "vllm_gaudi/batch.py": (BATCH, None)})
    cookbook.profile(["newmod"])
    cookbook.lock()
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 0, r.stderr
    assert site.read("vllm_gaudi/extra.py") == b"X = 1\n" and not site.file("vllm_gaudi/batch.py").exists()
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    assert cli("revert", "--site", str(site.path)).exit_code == 0
    assert not site.file("vllm_gaudi/extra.py").exists() and site.read("vllm_gaudi/batch.py") == BATCH.encode()


def test_missing_distribution_and_missing_file(cli, cookbook, tmp_path):
    two_fixes(cookbook)
    site = make_site(tmp_path, files={"vllm": {"vllm/sampler.py": SAMPLER}})
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 3 and "vllm-gaudi is not installed" in r.stderr
    site2 = make_site(
        tmp_path / "two", files={"vllm": {"vllm/sampler.py": SAMPLER}, "vllm-gaudi": {"vllm_gaudi/__init__.py": ""}}
    )
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site2.path), "--json")
    assert r.exit_code == 1 and "missing" in json.loads(r.stdout)["error"]


def test_editable_install_patches_the_checkout(cli, cookbook, tmp_path):
    two_fixes(cookbook)
    site = make_site(tmp_path, editable=True)
    assert site.roots["vllm-gaudi"] != site.path
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 0, r.stderr
    assert b"return 33\n" in site.read("vllm_gaudi/runner.py")
    r = cli("status", "--site", str(site.path), "--json")
    gaudi = next(d for d in json.loads(r.stdout)["distributions"] if d["name"] == "vllm-gaudi")
    assert gaudi["location"] == str(site.roots["vllm-gaudi"]) and gaudi["editable"]


def test_invalid_fix_module_names_file_and_reason(cli, cookbook, site):
    d = cookbook.fix("a", {"vllm/sampler.py": (SAMPLER, SAMPLER + "# a\n")})
    cookbook.profile(["a"])
    (d / "fix.toml").write_text((d / "fix.toml").read_text().replace('status = "pending"', 'status = "maybe"'))
    r = cli("list")
    assert r.exit_code == 2 and "fix.toml" in r.stderr and "upstream.status" in r.stderr


def test_manifest_naming_a_fix_the_cookbook_lacks_is_refused(cli, cookbook, site):
    two_fixes(cookbook)
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    cookbook.profile(["sampler-fix"])
    import shutil

    shutil.rmtree(cookbook.root / "fixes" / "runner-fix")
    before = site.snapshot()
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 1 and "runner-fix is applied in this environment, which this cookbook" in r.stderr
    assert "fixpack revert takes back every fix" in r.stderr
    assert site.snapshot() == before
    # the way it names: revert takes it back from the pristine copies, without its changes
    r = cli("revert", "--site", str(site.path))
    assert r.exit_code == 0, r.output
    assert site.read("vllm_gaudi/runner.py") == RUNNER.encode() and site.read("vllm/sampler.py") == SAMPLER.encode()
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0


def test_a_fix_taken_out_of_the_pack_after_it_was_applied_is_one_line_with_a_way_back(cli, cookbook, site):
    """Issue 57: a KeyError in the plan before; now apply names the revert, and revert takes it back
    (alone or with the rest), refusing to keep it applied while another fix goes."""
    three_fixes(cookbook)
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    cookbook.profile(["one", "two"])
    cookbook.lock()
    before = site.snapshot()
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 1, r.output
    assert "three is applied in this environment, and profile v0.26.0's pack no longer has it: " in r.stderr
    assert "fixpack revert three takes it back, then apply" in r.stderr
    r = cli("revert", "two", "--site", str(site.path))
    assert r.exit_code == 1 and "three, which would stay applied, is not in profile v0.26.0's pack" in r.stderr
    assert site.snapshot() == before
    r = cli("revert", "three", "--site", str(site.path))
    assert r.exit_code == 0, r.output
    assert site.read("vllm_gaudi/batch.py") == BATCH.encode() and not site.file("vllm_gaudi/new_module.py").exists()
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0


def test_partial_when_one_file_of_a_fix_is_put_back_by_hand(cli, cookbook, site):
    cookbook.fix(
        "two-files",
        {
            "vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return -x")),
            "vllm_gaudi/batch.py": (BATCH, BATCH + "# two\n"),
        },
    )
    cookbook.profile(["two-files"])
    cookbook.lock()
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    site.file("vllm_gaudi/batch.py").write_text(BATCH)
    r = cli("status", "--site", str(site.path), "--json")
    assert json.loads(r.stdout)["fixes"] == [{"id": "two-files", "state": "partial"}]
    # apply puts the missing half back.
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    assert site.read("vllm_gaudi/batch.py") == (BATCH + "# two\n").encode()


def test_a_changed_cookbook_is_applied_over_the_old_fix(cli, cookbook, site):
    """An image patched with an older cookbook: the fix's new patch replaces its old one."""
    old = RUNNER.replace("return 3\n", "return 33\n")
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, old)})
    cookbook.profile(["runner-fix"])
    cookbook.lock()
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    new = RUNNER.replace("return 3\n", "return 333\n")
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, new)})
    cookbook.lock()
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path), "--json")
    assert r.exit_code == 0, r.stderr
    assert [f["action"] for f in json.loads(r.stdout)["fixes"]] == ["applied"]
    assert site.read("vllm_gaudi/runner.py") == new.encode()
    assert cli("revert", "--site", str(site.path)).exit_code == 0
    assert site.read("vllm_gaudi/runner.py") == RUNNER.encode()
    assert not (site.path / ".fixpack").exists()


def test_drift_after_apply_shows_the_hand_edit(cli, cookbook, site):
    two_fixes(cookbook)
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    edited = site.read("vllm_gaudi/runner.py").replace(b"return 7\n", b"return 77\n")
    site.file("vllm_gaudi/runner.py").write_bytes(edited)
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 1 and "changed after fixpack applied runner-fix" in r.stderr
    assert "-    return 7\n+    return 77" in r.stderr
    assert site.read("vllm_gaudi/runner.py") == edited
    # the way out, on apply and on revert alike (issue 57): undo, reinstall, or keep it as a fix
    for args in (("apply", "--profile", "v0.26.0"), ("revert",)):
        (line,) = [ln for ln in cli(*args, "--site", str(site.path)).stderr.splitlines() if "error" in ln]
        assert "nothing was changed. To go on: undo the edit shown below, or reinstall vllm-gaudi" in line
        assert "pip install --force-reinstall --no-deps vllm-gaudi==0.26.0" in line
        assert "fixpack record: docs/fix-authors/hand-edit.md" in line
    site.file("vllm_gaudi/runner.py").write_bytes(edited.replace(b"return 77\n", b"return 7\n"))  # undone
    assert cli("revert", "--site", str(site.path)).exit_code == 0


def test_the_help_renders_the_one_table_of_environment_variables(cli):
    for args, names in ((["--help"], list(VARIABLES)), (["apply", "--help"], APPLY_ENVIRONMENT)):
        shown = re.findall(r"^ +(FIXPACK_\w+) +(.+)$", cli(*args).output, re.M)
        assert shown == [(n, VARIABLES[n]) for n in names]
    repo = Path(__file__).resolve().parent.parent
    # the user's documentation of the same variables (moved from the README to the docs' reference)
    page = repo.joinpath("docs", "reference", "environment.md").read_text()
    documented = page.split("## Each variable in more words\n", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"`(FIXPACK_\w+)`", documented)) == set(VARIABLES) | set(TESTS_ONLY)
    sources = [p.read_text() for p in repo.joinpath("fixpack").rglob("*.py")]
    read = {name for text in sources for name in re.findall(r"FIXPACK_\w*[A-Z]", text)}
    assert read - {"FIXPACK_SRC"} <= set(VARIABLES) | set(TESTS_ONLY)  # FIXPACK_SRC_*: the two of them


def test_what_apply_writes_is_readable_by_other_users_whatever_the_umask(cli, cookbook, site, tmp_path):
    """Issue 56: the patched files, the runtime check and the state, in place and in an overlay, are
    0644 in 0755 folders under a umask of 077 (a vLLM of another uid reads what root wrote)."""
    two_fixes(cookbook)
    overlay, under = tmp_path / "overlay", make_site(tmp_path / "under")
    old = os.umask(0o077)
    try:
        for target, where in ((site, ()), (under, ("--overlay", str(overlay)))):
            r = cli("apply", "--profile", "v0.26.0", "--site", str(target.path), *where)
            assert r.exit_code == 0, r.stderr
    finally:
        os.umask(old)
    written = [site.path / "vllm/sampler.py", *site.path.glob("fixpack_runtime_check*/**/*"), *overlay.rglob("*")]
    written += [p for p in site.path.rglob("*") if ".fixpack" in p.parts]
    assert len(written) > 10
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in written}
    assert {p: m for p, m in modes.items() if m != (0o755 if p.is_dir() else 0o644)} == {}


def test_a_default_fix_named_as_an_opt_in_is_said_to_change_nothing(cli, cookbook, site):
    """Issue 57: accepted silently before."""
    three_fixes(cookbook)
    r = cli("apply", "--profile", "v0.26.0", "two", "--site", str(site.path))
    assert r.exit_code == 0, r.output
    assert "two is one of profile v0.26.0's default fixes, applied whether named or not: name only its opt-ins" in (
        r.stderr
    )
