"""fixpack record: hand edits of an installed tree become a fix module that applies, exports and locks."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from builders import BATCH, PRISTINE, RUNNER, SAMPLER, make_site

from fixpack.cookbook.catalog import Catalog


def sources_args(cookbook) -> list[str]:
    return [a for dist, root in cookbook.sources.items() for a in ("--source", f"{dist}={root}")]


def edit(site, rel: str, old: str, new: str) -> bytes:
    text = site.read(rel).decode()
    assert old in text
    site.file(rel).write_text(text.replace(old, new, 1))
    return site.read(rel)


def test_record_then_apply_on_a_fresh_site_gives_the_same_bytes(cli, cookbook, site, tmp_path):
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 33\n"))})
    cookbook.profile(["runner-fix"])
    cookbook.lock()
    edited_sampler = edit(site, "vllm/sampler.py", "return 1.0", "return 0.7")
    edited_batch = edit(site, "vllm_gaudi/batch.py", "self.rows[a], self.rows[b]", "self.rows[b], self.rows[a]")
    edited_batch = edit(site, "vllm_gaudi/batch.py", "= self.rows[b], self.rows[a]\n", "= self.rows[a], self.rows[b]\n")
    site.file("vllm_gaudi/extra.py").write_text("NEW = 1\n")
    r = cli("record", "hand-fix", "--profile", "v0.26.0", "--site", str(site.path), *sources_args(cookbook), "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert sorted(f[0] for f in out["files"]) == ["vllm/sampler.py", "vllm_gaudi/batch.py", "vllm_gaudi/extra.py"]
    fix_dir = cookbook.root / "fixes" / "hand-fix"
    toml = (fix_dir / "fix.toml").read_text()
    assert 'title = "TODO' in toml and 'status = "pending"' in toml
    lock = json.loads((fix_dir / "v0.26.0.lock.json").read_text())
    assert set(lock["files"]) == {"vllm/sampler.py", "vllm_gaudi/batch.py", "vllm_gaudi/extra.py"}

    cookbook.profile(["runner-fix", "hand-fix"])
    fresh = make_site(tmp_path / "fresh")
    r = cli("apply", "--profile", "v0.26.0", "--site", str(fresh.path), "--json")
    assert r.exit_code == 0, r.output
    assert fresh.read("vllm/sampler.py") == edited_sampler
    assert fresh.read("vllm_gaudi/batch.py") == edited_batch
    assert fresh.read("vllm_gaudi/extra.py") == b"NEW = 1\n"
    assert b"return 33\n" in fresh.read("vllm_gaudi/runner.py")


def test_record_leaves_out_what_fixpack_applied(cli, cookbook, site):
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 33\n"))})
    cookbook.fix("sampler-fix", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x\n", "return x * 2\n"))})
    cookbook.profile(["runner-fix", "sampler-fix"])
    cookbook.lock()
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    edited = edit(site, "vllm_gaudi/runner.py", "return 20\n", "return 200\n")
    r = cli("record", "on-top", "--profile", "v0.26.0", "--site", str(site.path), *sources_args(cookbook))
    assert r.exit_code == 0, r.output
    fix_dir = cookbook.root / "fixes" / "on-top"
    patch = (fix_dir / "v0.26.0.patch").read_text()
    assert "+    return 200\n" in patch and "-    return 20\n" in patch
    assert "33" not in patch and "vllm/sampler.py" not in patch  # fixpack's own changes stay out
    toml = (fix_dir / "fix.toml").read_text()
    assert "requires = []" in toml and "taken on top of" not in toml  # the edit is not on runner-fix's lines
    # Its fingerprints start where the pack's chain ends, so a locked pack applies it on top.
    cookbook.profile(["runner-fix", "sampler-fix", "on-top"])
    catalog = Catalog.load(cookbook.root)
    (change,) = catalog.fixes["on-top"].changes["v0.26.0"]
    runner_fix = catalog.fixes["runner-fix"].changes["v0.26.0"][0]
    assert change.fingerprint.before == runner_fix.fingerprint.after
    # With the new fix in the pack, the hand-edited file reads as runner-fix + on-top applied.
    assert cli("revert", "--site", str(site.path)).exit_code == 0
    assert site.read("vllm_gaudi/runner.py") == RUNNER.encode()
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    assert site.read("vllm_gaudi/runner.py") == edited


def test_record_without_source_needs_the_pristine_bytes(cli, cookbook, site):
    cookbook.profile([])
    edit(site, "vllm/sampler.py", "return 1.0", "return 0.7")
    r = cli("record", "no-source", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 1
    assert "pristine bytes of edited files are unknown" in r.stderr and "vllm/sampler.py (vllm)" in r.stderr
    assert not (cookbook.root / "fixes" / "no-source").exists()


def test_record_from_an_editable_git_checkout(cli, cookbook, tmp_path):
    cookbook.profile([])
    site = make_site(tmp_path, editable=True)
    checkout = site.roots["vllm-gaudi"]
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "v0.26.0"],
    ):
        subprocess.run(["git", "-C", str(checkout), *args], check=True, capture_output=True)
    edited = edit(site, "vllm_gaudi/batch.py", "def swap(self, a, b):", "def swap(self, a: int, b: int):")
    r = cli("record", "from-git", "--profile", "v0.26.0", "--site", str(site.path), "--json")
    assert r.exit_code == 0, r.output
    assert [f[0] for f in json.loads(r.stdout)["files"]] == ["vllm_gaudi/batch.py"]
    cookbook.profile(["from-git"])
    fresh = make_site(tmp_path / "fresh")
    assert cli("apply", "--profile", "v0.26.0", "--site", str(fresh.path)).exit_code == 0
    assert fresh.read("vllm_gaudi/batch.py") == edited


def test_record_refuses_a_source_that_is_not_the_installed_build(cli, cookbook, site, tmp_path):
    cookbook.profile([])
    edit(site, "vllm_gaudi/batch.py", "swap", "swap_rows")
    other = tmp_path / "other"
    shutil.copytree(cookbook.sources["vllm-gaudi"], other)
    (other / "vllm_gaudi/batch.py").write_text(BATCH + "# a later build\n")
    r = cli("record", "bad-source", "--profile", "v0.26.0", "--site", str(site.path), "--source", f"vllm-gaudi={other}")
    assert r.exit_code == 1 and "is not the one installed" in r.stderr


@pytest.mark.parametrize("name", ["Bad_Id", "runner-fix"])
def test_record_refuses_bad_or_taken_ids(cli, cookbook, site, name):
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 33\n"))})
    cookbook.profile(["runner-fix"])
    r = cli("record", name, "--profile", "v0.26.0", "--site", str(site.path), *sources_args(cookbook))
    assert r.exit_code == 2


def test_record_with_nothing_edited(cli, cookbook, site):
    cookbook.profile([])
    r = cli("record", "nothing", "--profile", "v0.26.0", "--site", str(site.path), *sources_args(cookbook))
    assert r.exit_code == 1 and "no edits found" in r.stderr


def test_recorded_fix_exports_for_git_am(cli, cookbook, site, tmp_path):
    cookbook.profile([])
    edited = edit(site, "vllm_gaudi/runner.py", "return 7\n", "return 77\n")
    assert (
        cli("record", "am-fix", "--profile", "v0.26.0", "--site", str(site.path), *sources_args(cookbook)).exit_code
        == 0
    )
    cookbook.profile(["am-fix"])
    r = cli("diff", "am-fix", "--format", "mbox")
    assert r.exit_code == 0, r.output
    repo = tmp_path / "upstream"
    for rel, text in PRISTINE["vllm-gaudi"].items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "v0.26.0"], check=True)
    subprocess.run([*git, "am", "-q"], input=r.stdout, text=True, check=True)
    assert (repo / "vllm_gaudi/runner.py").read_bytes() == edited


def test_record_editable_against_a_source_skips_build_outputs(cli, cookbook, tmp_path):
    cookbook.profile([])
    site = make_site(tmp_path, editable=True)  # its checkout has a generated _version.py the source lacks
    site.file("vllm_gaudi/_C.abi3.so").write_bytes(b"\x7fELF")
    edit(site, "vllm_gaudi/runner.py", "return 5\n", "return 55\n")
    r = cli("record", "editable", "--profile", "v0.26.0", "--site", str(site.path), *sources_args(cookbook), "--json")
    assert r.exit_code == 0, r.output
    assert [f[0] for f in json.loads(r.stdout)["files"]] == ["vllm_gaudi/runner.py"]


def test_record_without_source_uses_the_copy_apply_kept(cli, cookbook, site):
    """A file fixpack patched has its pristine bytes in the state directory: no --source needed."""
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 33\n"))})
    cookbook.profile(["runner-fix"])
    cookbook.lock()
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    edit(site, "vllm_gaudi/runner.py", "return 8\n", "return 88\n")
    r = cli("record", "on-top", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 0, r.output
    patch = (cookbook.root / "fixes" / "on-top" / "v0.26.0.patch").read_text()
    assert "+    return 88" in patch and "return 33" not in patch  # only the hand edit, on top of runner-fix


TOP = "import os\nimport sys\nimport re\n\n\n"


def _record_on_top_of(cli, cookbook, site, old: str, new: str, *args: str) -> tuple[dict, str, str]:
    """An opt-in that adds lines at the top of runner.py and a fix of f3, applied; then ``old`` edited
    to ``new`` by hand and recorded. Returns record's JSON, the patch and fix.toml."""
    cookbook.fix("header", {"vllm_gaudi/runner.py": (RUNNER, TOP + RUNNER)}, opt_in=True)
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 33\n"))})
    cookbook.profile(["header", "runner-fix"], opt_ins=["header"])
    cookbook.lock()
    assert cli("apply", "--profile", "v0.26.0", "header", "--site", str(site.path)).exit_code == 0
    edit(site, "vllm_gaudi/runner.py", old, new)
    r = cli("record", "by-hand", "--profile", "v0.26.0", "--site", str(site.path), "--json", *args)
    assert r.exit_code == 0, r.output
    fix_dir = cookbook.root / "fixes" / "by-hand"
    return json.loads(r.stdout), (fix_dir / "v0.26.0.patch").read_text(), (fix_dir / "fix.toml").read_text()


def test_record_writes_hunks_against_the_pristine_bytes_with_index_lines(cli, cookbook, site):
    out, patch, toml = _record_on_top_of(cli, cookbook, site, "return 20\n", "return 200\n", *sources_args(cookbook))
    line = RUNNER.splitlines().index("    return 20") + 1  # in the release's file, not after the opt-in
    assert f"@@ -{line - 3},7 +{line - 3},7 @@" in patch
    blob = subprocess.run(["git", "hash-object", "--stdin"], input=RUNNER.encode(), capture_output=True, check=True)
    assert f"index {blob.stdout.decode()[:7]}.." in patch  # git am -3 can fall back on the release's blob
    assert out["requires"] == [] and "requires = []" in toml


def test_record_requires_the_fix_whose_lines_the_edit_sits_on(cli, cookbook, site):
    out, patch, toml = _record_on_top_of(cli, cookbook, site, "return 33\n", "return 333\n", *sources_args(cookbook))
    assert "-    return 33\n+    return 333\n" in patch  # on top of runner-fix: it cannot be said on the release
    assert out["requires"] == ["runner-fix"] and 'requires = ["runner-fix"]' in toml
    assert "taken on top of header, runner-fix" in toml


def test_record_on_a_copied_site_names_the_edit_not_the_missing_binaries(cli, cookbook, tmp_path):
    files = {dist: dict(fs) for dist, fs in PRISTINE.items()}
    files["vllm"]["vllm/_C.abi3.so"] = b"\x7fELF binary"
    copied = make_site(tmp_path / "copied", files)
    copied.file("vllm/_C.abi3.so").unlink()  # a copy that left the extension behind
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 33\n"))})
    cookbook.profile(["runner-fix"])
    cookbook.lock()
    assert cli("apply", "--profile", "v0.26.0", "--site", str(copied.path)).exit_code == 0
    edit(copied, "vllm_gaudi/runner.py", "return 8\n", "return 88\n")
    r = cli("record", "on-copy", "--profile", "v0.26.0", "--site", str(copied.path), "--json")
    assert r.exit_code == 0, r.output
    assert [f[0] for f in json.loads(r.stdout)["files"]] == ["vllm_gaudi/runner.py"]
