"""Recovery trusts nothing it reads: bad backups, journals of the wrong shape, journals from
another site, a site moved while interrupted; and the operator's way out, ``recover --discard``."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from builders import Site, make_site, run_cli
from cookbooks import two_fixes
from runs import APPLY, env_of, interrupted, one_line_error

TARGETS = ("vllm_gaudi/runner.py", "vllm/sampler.py")


def journal_dir(site) -> Path:
    return site.path / ".fixpack" / "journal"


def replaced_entry(site, journal: dict) -> dict:
    """An entry whose target the interrupted apply already replaced (so recovery needs its backup)."""
    for entry in journal["entries"]:
        path = site.path / entry["path"]
        replaced = hashlib.sha256(path.read_bytes()).hexdigest() == entry["new"]
        if entry["root"] == "site" and entry["backup"] and replaced:
            return entry
    raise AssertionError(f"no replaced target in {journal}")


def test_journal_names_files_relative_to_their_root(cookbook, site):
    two_fixes(cookbook)
    journal = interrupted(cookbook, site)
    assert journal["format"] == 2
    runtime = {(e["root"], e["path"]) for e in journal["entries"] if e["path"].startswith("fixpack_runtime_check")}
    assert ("site", "fixpack_runtime_check/index.json") in runtime  # the runtime check, in the same transaction
    assert {(e["root"], e["path"]) for e in journal["entries"]} - runtime == {
        ("site", "vllm_gaudi/runner.py"),
        ("site", "vllm/sampler.py"),
        ("state", "pristine/vllm_gaudi/runner.py"),
        ("state", "pristine/vllm/sampler.py"),
        ("state", "manifest.json"),
        # RECORD kept true to what is installed, and pip's own RECORD kept to restore it
        ("site", "vllm_gaudi-0.26.0.dist-info/RECORD"),
        ("site", "vllm-0.26.0.dist-info/RECORD"),
        ("state", "pristine/vllm_gaudi-0.26.0.dist-info/RECORD"),
        ("state", "pristine/vllm-0.26.0.dist-info/RECORD"),
    } | {(e["root"], e["path"]) for e in journal["entries"] if e["path"].endswith(".pyc")}
    assert str(site.path) not in json.dumps(journal)


@pytest.mark.parametrize("damage", ["truncated", "other bytes", "missing", "a symlink"])
def test_a_backup_that_does_not_match_the_journal_is_not_restored(cookbook, site, tmp_path, damage):
    two_fixes(cookbook)
    entry = replaced_entry(site, interrupted(cookbook, site))
    backup = journal_dir(site) / entry["backup"]
    good = backup.read_bytes()
    backup.unlink()
    if damage == "truncated":
        backup.write_bytes(good[:40])
    elif damage == "other bytes":
        backup.write_bytes(bytes(reversed(good)))
    elif damage == "a symlink":
        (tmp_path / "outside.bak").write_bytes(good)  # the right bytes, but outside the journal
        backup.symlink_to(tmp_path / "outside.bak")
    snapshot = site.snapshot()
    for args in (("status",), APPLY, ("revert",), ("recover",)):
        r = run_cli(*args, "--site", str(site.path), env=env_of(cookbook))
        assert r.returncode == 3, (args, r.stderr)
        line = one_line_error(r.stderr)
        assert f"cannot recover the interrupted transaction in {journal_dir(site)}" in line
        assert str(backup) in line and "Nothing was changed" in line
        assert f"fixpack recover --site {site.path} --discard" in line
    assert site.snapshot() == snapshot


def test_a_backup_name_leading_out_of_the_journal_is_refused(cookbook, site):
    two_fixes(cookbook)
    journal = interrupted(cookbook, site)
    entry = replaced_entry(site, journal)
    stolen = site.path / ".fixpack" / "stolen.bak"  # the right bytes, one folder up
    shutil.copy(journal_dir(site) / entry["backup"], stolen)
    entry["backup"] = "../stolen.bak"
    (journal_dir(site) / "journal.json").write_text(json.dumps(journal))
    snapshot = site.snapshot()
    r = run_cli("status", "--site", str(site.path), env=env_of(cookbook))
    assert r.returncode == 3
    assert "backup '../stolen.bak' is not a name in the journal folder" in one_line_error(r.stderr)
    assert site.snapshot() == snapshot


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"entries": 5}',
        '{"format": 2, "entries": [{"root": "site"}]}',
        '{"format": 2, "entries": [7]}',
        '{"format": 2, "entries": [{"root": "site", "path": 3, "old": null, "new": null, "backup": null}]}',
        '{"format": 2, "entries": [{"root": "site", "path": "vllm/x.py", "old": "zz", "new": null, "backup": null}]}',
        '{"entries": [{"path": "/abs/vllm/sampler.py", "old": null, "new": null, "backup": "0.bak"}]}',  # format 1
        "{not json",
        "[" * 100_000,
        "\udcff",
    ],
)
def test_a_journal_of_the_wrong_shape_is_one_line_exit_3(cookbook, site, text):
    two_fixes(cookbook)
    interrupted(cookbook, site)
    (journal_dir(site) / "journal.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    snapshot = site.snapshot()
    r = run_cli("status", "--site", str(site.path), env=env_of(cookbook))
    assert r.returncode == 3
    assert "cannot recover the interrupted transaction" in one_line_error(r.stderr)
    assert site.snapshot() == snapshot


def test_a_state_directory_copied_from_another_site_only_touches_this_site(cookbook, tmp_path):
    two_fixes(cookbook)
    first = make_site(tmp_path / "first")
    interrupted(cookbook, first)
    half_patched = first.snapshot()
    second = make_site(tmp_path / "second")
    pristine = {p: second.read(p) for p in TARGETS}
    shutil.copytree(first.path / ".fixpack", second.path / ".fixpack", symlinks=True)
    r = run_cli("status", "--site", str(second.path), env=env_of(cookbook))
    assert r.returncode == 0, r.stderr
    assert "recovered an interrupted transaction" in r.stderr
    assert {p: second.read(p) for p in TARGETS} == pristine
    assert not (second.path / ".fixpack").exists()
    assert first.snapshot() == half_patched  # the first site is never written by the second's commands
    r = run_cli("status", "--site", str(first.path), env=env_of(cookbook))
    assert r.returncode == 0 and {p: first.read(p) for p in TARGETS} == pristine


def test_a_copied_journal_that_does_not_fit_this_site_is_refused_and_discarded(cookbook, tmp_path):
    two_fixes(cookbook)
    first = make_site(tmp_path / "first")
    interrupted(cookbook, first)
    second = make_site(tmp_path / "second")
    assert run_cli(*APPLY, "--site", str(second.path), env=env_of(cookbook)).returncode == 0
    applied = second.snapshot()
    shutil.rmtree(second.path / ".fixpack" / "journal", ignore_errors=True)
    shutil.copytree(first.path / ".fixpack" / "journal", second.path / ".fixpack" / "journal", symlinks=True)
    r = run_cli("status", "--site", str(second.path), env=env_of(cookbook))
    assert r.returncode == 3  # this site's manifest is not the one the first site was writing
    assert "changed outside fixpack" in one_line_error(r.stderr)
    r = run_cli("recover", "--site", str(second.path), "--discard", env=env_of(cookbook))
    assert r.returncode == 0, r.stderr
    assert "set the journal aside in" in r.stdout
    aside = [p for p in (second.path / ".fixpack").iterdir() if p.name.startswith("journal.discarded-")]
    assert len(aside) == 1 and (aside[0] / "journal.json").exists()
    st = run_cli("status", "--site", str(second.path), "--json", env=env_of(cookbook))
    assert st.returncode == 0
    assert {f["state"] for f in json.loads(st.stdout)["fixes"]} == {"applied"}
    shutil.rmtree(aside[0])
    assert second.snapshot() == applied


def test_a_site_moved_while_interrupted_recovers(cookbook, tmp_path):
    two_fixes(cookbook)
    site = make_site(tmp_path / "old")
    pristine = {p: site.read(p) for p in TARGETS}
    interrupted(cookbook, site)
    (tmp_path / "old").rename(tmp_path / "new")
    moved = Site(tmp_path / "new" / "site", {d: tmp_path / "new" / "site" for d in site.roots})
    r = run_cli("status", "--site", str(moved.path), env=env_of(cookbook))
    assert r.returncode == 0, r.stderr
    assert {p: moved.read(p) for p in TARGETS} == pristine
    assert run_cli(*APPLY, "--site", str(moved.path), env=env_of(cookbook)).returncode == 0


def test_a_file_changed_during_the_interruption_offers_the_way_out(cookbook, site):
    two_fixes(cookbook)
    journal = interrupted(cookbook, site)
    edited = site.path / replaced_entry(site, journal)["path"]
    edited.write_text("# edited by hand\n")
    snapshot = site.snapshot()
    r = run_cli(*APPLY, "--site", str(site.path), env=env_of(cookbook))
    assert r.returncode == 3
    line = one_line_error(r.stderr)
    assert f"{edited} changed outside fixpack" in line and "--discard" in line
    assert site.snapshot() == snapshot
    r = run_cli("recover", "--site", str(site.path), env=env_of(cookbook))  # without --discard: the same refusal
    assert r.returncode == 3 and site.snapshot() == snapshot
    r = run_cli("recover", "--site", str(site.path), "--discard", env=env_of(cookbook))
    assert r.returncode == 0
    assert not journal_dir(site).exists() and edited.read_text() == "# edited by hand\n"
    r = run_cli(*APPLY, "--site", str(site.path), env=env_of(cookbook))
    assert r.returncode == 1 and "drifted" in r.stderr  # the hand edit is now an ordinary drift
    r = run_cli("recover", "--site", str(site.path), env=env_of(cookbook))
    assert r.returncode == 0 and "no interrupted transaction" in r.stdout


def test_a_crash_during_recovery_is_recovered_by_the_next_run(cookbook, site):
    two_fixes(cookbook)
    pristine = {p: site.read(p) for p in TARGETS}
    interrupted(cookbook, site)
    r = run_cli("status", "--site", str(site.path), env={**env_of(cookbook), "FIXPACK_CRASH_AFTER": "1"})
    assert r.returncode == 99
    assert journal_dir(site).exists()
    r = run_cli("status", "--site", str(site.path), env=env_of(cookbook))
    assert r.returncode == 0 and "recovered" in r.stderr
    assert {p: site.read(p) for p in TARGETS} == pristine
    assert not (site.path / ".fixpack").exists()


def test_an_editable_install_is_journalled_under_its_checkout_and_recovers(cookbook, tmp_path):
    two_fixes(cookbook)
    site = make_site(tmp_path, editable=True)  # vllm-gaudi's files live in a checkout outside the site
    pristine = {p: site.read(p) for p in TARGETS}
    journal = interrupted(cookbook, site)
    assert ("dist:vllm-gaudi", "vllm_gaudi/runner.py") in {(e["root"], e["path"]) for e in journal["entries"]}
    r = run_cli("status", "--site", str(site.path), env=env_of(cookbook))
    assert r.returncode == 0 and "recovered" in r.stderr
    assert {p: site.read(p) for p in TARGETS} == pristine
