"""Confinement: a path from a patch, a lock or the site never leads fixpack out of its roots, and
a target that is a symlink or a folder is refused, before any write, in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from builders import BATCH, RUNNER, SAMPLER, make_site, run_cli
from cookbooks import two_fixes
from runs import APPLY, env_of, interrupted, one_line_error

from fixpack.core.paths import UnsafePath, relative


@pytest.mark.parametrize("path", ["vllm/x.py", "vllm_gaudi/v1/worker/hpu_model_runner.py", "a"])
def test_plain_relative_paths_pass(path):
    assert relative(path) == path


@pytest.mark.parametrize(
    "path,reason",
    [
        ("", "empty"),
        ("/etc/passwd", "absolute"),
        ("vllm/../../victim.py", "'..'"),
        ("..", "'..'"),
        ("./vllm/x.py", "'.'"),
        ("vllm//x.py", "empty component"),
        ("vllm/x.py/", "empty component"),
        ("vllm\\..\\x.py", "backslash"),
        ("vllm/x\0.py", "NUL"),
    ],
)
def test_unsafe_paths_are_named(path, reason):
    with pytest.raises(UnsafePath, match=reason):
        relative(path)


def patch_with_path(cookbook, fix_id: str, path: str, before: str | None, after: str) -> None:
    """A fix whose patch names ``path`` as it is, and a profile with a valid fix beside it."""
    cookbook.fix("good", {"vllm_gaudi/batch.py": (BATCH, BATCH + "# good\n")})
    cookbook.fix(fix_id, {path: (before, after)})
    cookbook.profile(["good", fix_id])


@pytest.mark.parametrize(
    "path,before",
    [
        ("vllm/../../victim.py", "victim\n"),  # an existing file outside the site
        ("vllm/../../pwned.py", None),  # a creation patch
        ("/tmp/fixpack-pwned-absolute.py", None),
        ("vllm/./sampler.py", SAMPLER),
    ],
)
def test_patch_path_outside_the_root_is_a_usage_error_before_any_write(cookbook, site, tmp_path, path, before):
    victim = tmp_path / "victim.py"
    victim.write_text("victim\n")
    patch_with_path(cookbook, "escape", path, before, "owned\n")
    snapshot = site.snapshot()
    for args in (APPLY, ("status",), ("revert",), ("list",)):
        r = run_cli(*args, "--site", str(site.path), env=env_of(cookbook))
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        line = one_line_error(r.stderr)
        assert "fix escape" in line and repr(path) in line and "escape/v0.26.0.patch" in line
    assert victim.read_text() == "victim\n"
    assert not (tmp_path / "pwned.py").exists() and not Path("/tmp/fixpack-pwned-absolute.py").exists()
    assert site.snapshot() == snapshot


def test_lock_path_outside_the_root_is_a_usage_error(cookbook, site):
    cookbook.fix("good", {"vllm_gaudi/batch.py": (BATCH, BATCH + "# good\n")})
    cookbook.profile(["good"])
    cookbook.lock()
    lock = cookbook.root / "fixes" / "good" / "v0.26.0.lock.json"
    data = json.loads(lock.read_text())
    data["files"]["vllm_gaudi/../../x.py"] = data["files"]["vllm_gaudi/batch.py"]
    lock.write_text(json.dumps(data))
    r = run_cli(*APPLY, "--site", str(site.path), env=env_of(cookbook))
    assert r.returncode == 2
    line = one_line_error(r.stderr)
    assert "fix good" in line and "good/v0.26.0.lock.json" in line and "'vllm_gaudi/../../x.py'" in line
    assert site.read("vllm_gaudi/batch.py") == BATCH.encode()


def test_symlinked_folder_leading_out_of_the_site_is_refused(cookbook, site, tmp_path):
    two_fixes(cookbook)
    outside = tmp_path / "elsewhere" / "vllm"
    shutil.move(str(site.path / "vllm"), str(outside))
    (site.path / "vllm").symlink_to(outside, target_is_directory=True)
    before_outside = {p.name: p.read_bytes() for p in outside.iterdir() if p.is_file()}
    snapshot = site.snapshot()
    for args in (APPLY, (*APPLY, "--dry-run"), ("status", "--profile", "v0.26.0")):
        r = run_cli(*args, "--site", str(site.path), env=env_of(cookbook))
        assert r.returncode == 3, (args, r.stderr)
        line = one_line_error(r.stderr)
        assert "symlinked folder" in line and "vllm/sampler.py" in line and str(outside) in line
    assert {p.name: p.read_bytes() for p in outside.iterdir() if p.is_file()} == before_outside
    assert site.snapshot() == snapshot
    assert not (site.path / ".fixpack").exists()


def test_symlinked_state_directory_is_refused(cookbook, site, tmp_path):
    two_fixes(cookbook)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (site.path / ".fixpack").symlink_to(outside, target_is_directory=True)
    r = run_cli(*APPLY, "--site", str(site.path), env=env_of(cookbook))
    assert r.returncode == 3
    assert "it is a symlink" in one_line_error(r.stderr)
    assert list(outside.iterdir()) == []
    assert site.read("vllm/sampler.py") == SAMPLER.encode()


def test_symlinked_target_is_refused_and_left_a_link(cookbook, site):
    """A target that is a symlink is refused (exit 3): replacing it would turn the link into a
    regular file, and revert could not bring the link back."""
    two_fixes(cookbook)
    link = site.file("vllm/sampler.py")
    real = link.with_name("sampler_impl.py")
    link.rename(real)
    link.symlink_to(real.name)
    snapshot = site.snapshot()
    for args in (APPLY, (*APPLY, "--dry-run"), ("status", "--profile", "v0.26.0")):
        r = run_cli(*args, "--site", str(site.path), env=env_of(cookbook))
        assert r.returncode == 3, (args, r.stderr)
        line = one_line_error(r.stderr)
        assert f"refusing {link}: it is a symlink" in line
    assert link.is_symlink() and real.read_text() == SAMPLER
    assert site.snapshot() == snapshot


def test_directory_where_a_target_should_be_is_one_line(cookbook, site):
    two_fixes(cookbook)
    target = site.file("vllm/sampler.py")
    target.unlink()
    target.mkdir()
    for args in (APPLY, ("status", "--profile", "v0.26.0")):
        r = run_cli(*args, "--site", str(site.path), env=env_of(cookbook))
        assert r.returncode == 3, (args, r.stderr)
        assert "it is a directory, where a source file was expected" in one_line_error(r.stderr)
    assert site.read("vllm_gaudi/runner.py") == RUNNER.encode()


@pytest.mark.parametrize(
    "entry_change",
    [
        {"path": "../victim.py"},
        {"path": "/etc/hostname"},
        {"root": "elsewhere"},
        {"root": "state", "path": "../vllm/sampler.py"},
    ],
)
def test_journal_naming_a_path_outside_its_root_is_refused(cookbook, tmp_path, entry_change):
    two_fixes(cookbook)
    site = make_site(tmp_path / "s")
    victim = tmp_path / "s" / "victim.py"
    victim.write_text("victim\n")
    journal = interrupted(cookbook, site)
    journal["entries"][0].update(entry_change)
    (site.path / ".fixpack" / "journal" / "journal.json").write_text(json.dumps(journal))
    snapshot = site.snapshot()
    r = run_cli("status", "--site", str(site.path), env=env_of(cookbook))
    assert r.returncode == 3
    line = one_line_error(r.stderr)
    assert "cannot recover the interrupted transaction" in line and "--discard" in line
    assert victim.read_text() == "victim\n"
    assert site.snapshot() == snapshot
