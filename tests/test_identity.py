"""The fix-set identity: one digest for the code a site runs, however it was applied, shown by
status, logged by the runtime check, and pinned with ``apply --expect-fix-set`` (or
FIXPACK_EXPECT_FIX_SET), which refuses, before anything is written, a plan that leaves another."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from builders import BATCH, GAUDI_COMMIT, PRISTINE, RUNNER, SAMPLER, make_site
from runs import apply_overlay
from trees import snapshot

from fixpack.core.identity import FixSet, fix_set, mismatch
from fixpack.installation.manifest import Manifest
from fixpack.models import FileEntry

EXECUTOR = "vllm/executor.py"


def pack(cookbook, value: int = 20, deletes: bool = False, name: str = "v0.26.0") -> None:
    """``one`` by default; opt-ins ``alpha`` (an edit) and ``beta`` (a new module); ``value``: what
    ``one`` makes f2 return (another value: other bytes after the same fixes)."""
    cookbook.fix(
        "one",
        {
            "vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 2\n", f"return {value}\n")),
            "vllm/sampler.py": (SAMPLER, SAMPLER.replace("x\n", "-x\n")),
        },
    )
    cookbook.fix("alpha", {"vllm_gaudi/batch.py": (BATCH, BATCH + "# alpha\n")}, opt_in=True)
    edits = {"vllm_gaudi/new_module.py": (None, "VALUE = 3\n")}
    if deletes:
        edits[EXECUTOR] = (PRISTINE["vllm"][EXECUTOR], None)
    cookbook.fix("beta", edits, opt_in=True)
    cookbook.profile(["one", "alpha", "beta"], ["alpha", "beta"], name=name)
    cookbook.lock(name)


def status(cli, site, *extra: str) -> dict:
    r = cli("status", "--site", str(site.path), "--json", *extra)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def digest(cli, site, *extra: str) -> str:
    return status(cli, site, *extra)["fix_set"]["digest"]


def apply(cli, site, *args: str):
    return cli("apply", "--profile", "v0.26.0", "--site", str(site.path), *args)


# -- the pure function --------------------------------------------------------------------------


def test_the_canonical_form_is_the_documented_json_and_holds_no_profile_name_path_or_mode():
    files = {
        "vllm_gaudi/runner.py": FileEntry("vllm-gaudi", "p" * 64, "a" * 64, ("one",)),
        "vllm/executor.py": FileEntry("vllm", "q" * 64, None, ("beta",)),
        "vllm/sampler.py": FileEntry("vllm", "r" * 64, "b" * 64, ("one",)),
    }
    fs = fix_set("v0.26.0", ["one", "beta"], files)
    documented = (
        '["fixpack-fix-set",1,"v0.26.0",["one","beta"],'
        f'[["vllm","vllm/executor.py",null],["vllm","vllm/sampler.py","{"b" * 64}"],'
        f'["vllm-gaudi","vllm_gaudi/runner.py","{"a" * 64}"]]]'
    ).encode()
    assert fs.canonical == documented  # sorted by (dist, path); a deleted file is null
    assert fs.digest == hashlib.sha256(documented).hexdigest()[:16]
    assert fs.to_json() == {"digest": fs.digest, "fixes": ["one", "beta"]}
    # the pristine hash and the patch digests are not the code run: another one, the same digest
    other = {p: FileEntry(r.dist, None, r.applied, r.fixes, ("x",)) for p, r in files.items()}
    assert fix_set("v0.26.0", ["one", "beta"], other).digest == fs.digest
    # two profiles of one release, the same fixes and bytes: the same digest
    a = Manifest("v0.26.0", "v0.26.0", ("one", "beta"), files)
    b = Manifest("v0.26.0-hpu", "v0.26.0", ("one", "beta"), files)
    assert a.fix_set == b.fix_set and a.fix_set is not None and a.fix_set.digest == fs.digest
    # what does change it: the release, the fixes or their order, any after-hash
    assert fix_set("v0.27.0", ["one", "beta"], files).digest != fs.digest
    assert fix_set("v0.26.0", ["beta", "one"], files).digest != fs.digest
    assert fix_set("v0.26.0", ["one"], files).digest != fs.digest
    changed = dict(files, **{"vllm/executor.py": FileEntry("vllm", "q" * 64, "c" * 64, ("beta",))})
    assert fix_set("v0.26.0", ["one", "beta"], changed).digest != fs.digest
    assert Manifest().fix_set is None


def test_a_mismatch_names_the_plan_s_fixes_and_what_differs_from_a_known_set():
    one = FileEntry("vllm-gaudi", None, "a" * 64, ("one",))
    known = fix_set("v0.26.0", ["one"], {"vllm_gaudi/runner.py": one})
    more = fix_set("v0.26.0", ["one", "alpha"], {"vllm_gaudi/runner.py": one, "vllm_gaudi/batch.py": one})
    assert mismatch(known.digest, known) is None
    alone = mismatch(known.digest, more)
    assert alone == (
        f"--expect-fix-set {known.digest}: this apply would leave fix set {more.digest} "
        "(release v0.26.0; 2 fixes: one, alpha)"
    )
    named = mismatch(known.digest, more, [known])
    assert named is not None and named.endswith("against the expected set (the one applied here now): adds alpha")
    rebytes = fix_set("v0.26.0", ["one"], {"vllm_gaudi/runner.py": FileEntry("vllm-gaudi", None, "b" * 64, ())})
    assert mismatch(known.digest, rebytes, [known]).endswith("other bytes in vllm-gaudi:vllm_gaudi/runner.py")
    assert "no fix set" in mismatch(known.digest, None)
    assert isinstance(known, FixSet)


# -- the same code, however applied --------------------------------------------------------------


def test_the_same_fixes_give_the_same_digest_however_they_were_applied(cookbook, cli, tmp_path):
    pack(cookbook)
    # one apply, the opt-ins in one order
    a = make_site(tmp_path / "a")
    assert apply(cli, a, "alpha", "beta").exit_code == 0
    # the opt-ins in the other order, on a site of another (unpinned, content-identical) build
    b = make_site(tmp_path / "b", commits={"vllm": "0" * 40, "vllm-gaudi": GAUDI_COMMIT})
    assert apply(cli, b, "beta", "alpha", "--allow-unpinned").exit_code == 0
    # in three applies: the default, then one opt-in at a time
    c = make_site(tmp_path / "c")
    for extra in ((), ("beta",), ("alpha",)):
        assert apply(cli, c, *extra).exit_code == 0
    # into an overlay, nothing under the site
    d = make_site(tmp_path / "d")
    overlay = tmp_path / "overlay"
    assert apply_overlay(cookbook, d, overlay, "alpha", "beta").returncode == 0
    digests = {digest(cli, a), digest(cli, b), digest(cli, c), digest(cli, d, "--overlay", str(overlay))}
    assert len(digests) == 1, digests
    assert status(cli, a)["fix_set"]["fixes"] == ["one", "alpha", "beta"] == status(cli, c)["fix_set"]["fixes"]
    # one opt-in fewer: another digest
    e = make_site(tmp_path / "e")
    assert apply(cli, e, "alpha").exit_code == 0
    assert digest(cli, e) not in digests


def test_another_profile_of_the_release_gives_the_same_digest(cookbook, cli, tmp_path):
    pack(cookbook)
    pack(cookbook, name="v0.26.0-hpu")
    a, b = make_site(tmp_path / "a"), make_site(tmp_path / "b")
    assert apply(cli, a, "alpha").exit_code == 0
    assert cli("apply", "--profile", "v0.26.0-hpu", "--site", str(b.path), "alpha").exit_code == 0
    assert status(cli, b)["profile"] == "v0.26.0-hpu"
    assert digest(cli, a) == digest(cli, b)


def test_other_bytes_after_the_same_fixes_give_another_digest(cookbook, cli, tmp_path):
    pack(cookbook)
    a = make_site(tmp_path / "a")
    assert apply(cli, a).exit_code == 0
    pack(cookbook, value=21)  # the same fix ids, another patch and lock
    b = make_site(tmp_path / "b")
    assert apply(cli, b).exit_code == 0
    assert status(cli, a)["fix_set"]["fixes"] == status(cli, b)["fix_set"]["fixes"] == ["one"]
    assert digest(cli, a) != digest(cli, b)


def test_a_deleted_file_counts_as_deleted(cookbook, cli, site):
    pack(cookbook, deletes=True)
    assert apply(cli, site, "beta").exit_code == 0
    manifest = Manifest.from_bytes((site.path / ".fixpack" / "manifest.json").read_bytes())
    assert manifest.fix_set is not None and ("vllm", EXECUTOR, None) in manifest.fix_set.files
    assert digest(cli, site) == manifest.fix_set.digest


def test_status_shows_the_fix_set_and_json_carries_it(cookbook, cli, site, tmp_path):
    pack(cookbook)
    before = status(cli, site, "--profile", "v0.26.0")
    assert before["fix_set"] is None  # nothing applied
    assert apply(cli, site, "alpha").exit_code == 0
    st = status(cli, site)
    assert set(st) == {"profile", "distributions", "fixes", "fix_set", "recipe", "notes"}
    assert re.fullmatch(r"[0-9a-f]{16}", st["fix_set"]["digest"]) and st["fix_set"]["fixes"] == ["one", "alpha"]
    human = cli("status", "--site", str(site.path))
    assert f"\nfix set: {st['fix_set']['digest']} (2 fixes)\n" in human.stdout
    assert cli("revert", "--site", str(site.path)).exit_code == 0
    assert status(cli, site)["fix_set"] is None
    assert "fix set:" not in cli("status", "--site", str(site.path)).stdout
    # an overlay: the same line and shape; none where there is no overlay
    overlay = tmp_path / "overlay"
    assert status(cli, site, "--overlay", str(overlay))["fix_set"] is None
    assert apply_overlay(cookbook, site, overlay, "alpha").returncode == 0
    assert status(cli, site, "--overlay", str(overlay))["fix_set"] == st["fix_set"]
    shown = cli("status", "--site", str(site.path), "--overlay", str(overlay)).stdout
    assert f"fix set: {st['fix_set']['digest']} (2 fixes)" in shown


def test_a_site_with_an_edited_patched_file_has_no_digest_and_says_why(cookbook, cli, site):
    pack(cookbook)
    assert apply(cli, site, "alpha", "beta").exit_code == 0
    clean = status(cli, site)["fix_set"]
    assert clean is not None
    batch = site.file("vllm_gaudi/batch.py")
    batch.write_text(batch.read_text() + "# edited after the apply\n")
    st = status(cli, site)
    assert {f["id"]: f["state"] for f in st["fixes"]} == {"one": "applied", "alpha": "drifted", "beta": "applied"}
    assert st["fix_set"] is None
    assert "fix set: none (1 file drifted: vllm_gaudi/batch.py)" in st["notes"]
    human = cli("status", "--site", str(site.path)).stdout
    assert human.splitlines()[-1] == "fix set: none (1 file drifted: vllm_gaudi/batch.py)"
    assert clean["digest"] not in human
    # a missing file counts as drifted; the files are named in order
    site.file("vllm_gaudi/new_module.py").unlink()
    line = cli("status", "--site", str(site.path)).stdout.splitlines()[-1]
    assert line == "fix set: none (2 files drifted: vllm_gaudi/batch.py, vllm_gaudi/new_module.py)"
    # put back as the apply left them: the same digest again
    batch.write_text(BATCH + "# alpha\n")
    site.file("vllm_gaudi/new_module.py").write_text("VALUE = 3\n")
    assert status(cli, site)["fix_set"] == clean


def test_an_overlay_with_an_edited_copy_or_a_changed_original_has_no_digest(cookbook, cli, site, tmp_path):
    pack(cookbook)
    overlay = tmp_path / "overlay"
    assert apply_overlay(cookbook, site, overlay, "alpha").returncode == 0
    clean = status(cli, site, "--overlay", str(overlay))["fix_set"]
    assert clean is not None
    copy = overlay / ".fixpack" / "modules" / "vllm_gaudi" / "runner.py"
    copy.write_text(copy.read_text() + "# edited in the overlay\n")
    st = status(cli, site, "--overlay", str(overlay))
    assert st["fix_set"] is None and "fix set: none (1 file drifted: vllm_gaudi/runner.py)" in st["notes"]
    shown = cli("status", "--site", str(site.path), "--overlay", str(overlay)).stdout
    assert shown.splitlines()[-1] == "fix set: none (1 file drifted: vllm_gaudi/runner.py)"
    copy.write_text(copy.read_text().replace("# edited in the overlay\n", ""))
    assert status(cli, site, "--overlay", str(overlay))["fix_set"] == clean
    # the image changed under the overlay: its import hook would run the installed file
    site.file("vllm/sampler.py").write_text(SAMPLER + "# new build\n")
    st = status(cli, site, "--overlay", str(overlay))
    assert st["fix_set"] is None and "fix set: none (1 file drifted: vllm/sampler.py)" in st["notes"]


def test_the_runtime_index_records_the_fix_set(cookbook, cli, site):
    pack(cookbook)
    assert apply(cli, site, "beta").exit_code == 0
    index = json.loads((site.path / "fixpack_runtime_check" / "index.json").read_text())
    assert index["fix_set"] == status(cli, site)["fix_set"]
    assert index["fix_set"]["fixes"] == index["fixes"] == ["one", "beta"]


# -- --expect-fix-set ----------------------------------------------------------------------------


def test_the_digest_of_one_site_pins_a_fresh_apply_of_the_same_request(cookbook, cli, tmp_path):
    pack(cookbook)
    first = make_site(tmp_path / "first")
    assert apply(cli, first, "alpha").exit_code == 0
    pinned = digest(cli, first)
    fresh = make_site(tmp_path / "fresh")
    before = fresh.snapshot()
    dry = apply(cli, fresh, "alpha", "--dry-run", "--expect-fix-set", pinned)
    assert dry.exit_code == 0, dry.output
    assert fresh.snapshot() == before
    r = apply(cli, fresh, "alpha", "--expect-fix-set", pinned.upper())  # as printed, in any case
    assert r.exit_code == 0, r.output
    assert digest(cli, fresh) == pinned
    again = apply(cli, fresh, "alpha", "--expect-fix-set", pinned, "--json")  # already applied
    assert again.exit_code == 0 and {f["action"] for f in json.loads(again.stdout)["fixes"]} == {"already-applied"}


def test_another_opt_in_set_is_refused_and_nothing_changes(cookbook, cli, tmp_path, monkeypatch):
    pack(cookbook)
    first = make_site(tmp_path / "first")
    assert apply(cli, first, "alpha").exit_code == 0
    pinned = digest(cli, first)
    other = make_site(tmp_path / "other")
    before = other.snapshot()
    r = apply(cli, other, "alpha", "beta", "--expect-fix-set", pinned)
    assert r.exit_code == 1
    assert other.snapshot() == before  # byte for byte, mtimes too
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("fixpack: error:")]
    assert f"--expect-fix-set {pinned}: this apply would leave fix set " in line
    assert "3 fixes: one, alpha, beta" in line and "nothing was changed" in line
    # a dry run is refused the same
    assert apply(cli, other, "beta", "--dry-run", "--expect-fix-set", pinned).exit_code == 1
    # the environment variable, as a deployment sets it
    monkeypatch.setenv("FIXPACK_EXPECT_FIX_SET", pinned)
    assert apply(cli, other, "beta").exit_code == 1
    assert other.snapshot() == before
    assert apply(cli, other, "alpha").exit_code == 0
    assert digest(cli, other) == pinned


def test_an_applied_site_pinned_to_another_set_is_refused_naming_what_differs(cookbook, cli, site):
    pack(cookbook)
    assert apply(cli, site, "alpha").exit_code == 0
    pinned = digest(cli, site)
    before = site.snapshot()
    r = apply(cli, site, "beta", "--expect-fix-set", pinned)  # keeps alpha, adds beta
    assert r.exit_code == 1 and "against the expected set (the one applied here now): adds beta" in r.stderr
    assert site.snapshot() == before
    assert apply(cli, site, "--expect-fix-set", "0" * 16).exit_code == 1  # already applied: still refused
    assert site.snapshot() == before


def test_an_overlay_is_pinned_too(cookbook, cli, site, tmp_path):
    pack(cookbook)
    overlay = tmp_path / "overlay"
    assert apply_overlay(cookbook, site, overlay, "alpha").returncode == 0
    pinned = digest(cli, site, "--overlay", str(overlay))
    built = snapshot(overlay)
    refused = apply_overlay(cookbook, site, overlay, "beta", "--expect-fix-set", pinned)
    assert refused.returncode == 1 and "adds beta" in refused.stderr
    assert snapshot(overlay) == built
    assert apply_overlay(cookbook, site, overlay, "alpha", FIXPACK_EXPECT_FIX_SET=pinned).returncode == 0
    fresh = tmp_path / "fresh-overlay"
    assert apply_overlay(cookbook, site, fresh, "beta", FIXPACK_EXPECT_FIX_SET=pinned).returncode == 1
    assert not fresh.exists()
    assert apply_overlay(cookbook, site, fresh, "alpha", "--expect-fix-set", pinned).returncode == 0


@pytest.mark.parametrize("value", ["xyz", "abc", "0" * 15, "0" * 17, "fix set: " + "0" * 16])
def test_a_value_that_is_no_digest_is_a_usage_error(cookbook, cli, site, value):
    pack(cookbook)
    r = apply(cli, site, "--expect-fix-set", value)
    assert r.exit_code == 2
    assert r.stderr.startswith("fixpack: error: --expect-fix-set") and len(r.stderr.splitlines()) == 1
    assert not (site.path / ".fixpack").exists()
