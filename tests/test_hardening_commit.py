"""Every step of the commit is checked before the first write or rolled back: unwritable folders
(as a real non-root user), bytecode that cannot be removed, a rollback that cannot finish; and
the lock's settings and its waiting notice."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest
from builders import Site, run_cli
from cookbooks import targets, three_fixes
from nonroot import NOBODY, as_nobody, needs_root, pycs, warm_imports
from runs import APPLY, env_of, one_line_error


def sources_of(site: Site) -> dict[str, bytes]:
    """Every file but bytecode, which a rollback may leave removed (the next import recompiles)."""
    return {k: v[0] for k, v in site.snapshot().items() if not k.endswith(".pyc")}


def bytecode_of(site: Site) -> dict[str, bytes]:
    return {k: v[0] for k, v in site.snapshot().items() if k.endswith(".pyc")}


@needs_root
def test_unwritable_pycache_is_refused_before_any_write_as_a_non_root_user(shared, monkeypatch):
    book, site = shared
    warm_imports(book, site, monkeypatch)
    for p in [site.path, *site.path.rglob("*")]:
        os.chown(p, NOBODY, NOBODY)
    cache = site.path / "vllm_gaudi" / "__pycache__"
    os.chown(cache, 0, 0)  # one folder of bytecode left to root, as an image build can
    before = site.snapshot()
    for args in (APPLY, (*APPLY, "--dry-run")):
        code, out = as_nobody(book, *args, "--site", str(site.path))
        assert code == 3, out
        assert f"{cache} is not writable by uid {NOBODY}" in one_line_error(out)
        assert "would-apply" not in out
    assert site.snapshot() == before
    assert not (site.path / ".fixpack").exists()


@needs_root
def test_dry_run_on_a_site_the_user_cannot_write_is_exit_3(shared, monkeypatch):
    book, site = shared
    warm_imports(book, site, monkeypatch)
    before = site.snapshot()
    code, out = as_nobody(book, *APPLY, "--dry-run", "--site", str(site.path))
    assert code == 3, out
    assert "is not writable by uid 65534" in one_line_error(out) and "would-apply" not in out
    code, out = as_nobody(book, *APPLY, "--site", str(site.path))
    assert code == 3, out
    assert "or apply with --overlay DIR, which leaves the installation as it is" in one_line_error(out)  # issue 57
    assert site.snapshot() == before


@needs_root
def test_a_state_directory_the_user_cannot_write_is_refused_before_any_write(shared, monkeypatch):
    book, site = shared
    warm_imports(book, site, monkeypatch)
    for p in [site.path, *site.path.rglob("*")]:
        os.chown(p, NOBODY, NOBODY)
    state = site.path / ".fixpack"
    state.mkdir(mode=0o755)  # left by root, empty
    before = site.snapshot()
    code, out = as_nobody(book, *APPLY, "--site", str(site.path))
    assert code == 3, out
    assert f"{state} is not writable" in one_line_error(out)
    assert site.snapshot() == before and list(state.iterdir()) == []


@needs_root
def test_an_immutable_pycache_is_refused_before_any_write_even_as_root(cookbook, site):
    three_fixes(cookbook)
    pycs(site)
    cache = site.path / "vllm" / "__pycache__"
    if subprocess.run(["chattr", "+i", str(cache)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported here")
    try:
        before = site.snapshot()
        r = run_cli(*APPLY, "--site", str(site.path), env=env_of(cookbook))
        assert r.returncode == 3
        assert f"{cache} is not writable" in one_line_error(r.stderr)
        assert site.snapshot() == before
    finally:
        subprocess.run(["chattr", "-i", str(cache)], check=True)


def test_bytecode_that_cannot_be_removed_mid_commit_is_rolled_back(cookbook, site, cli, monkeypatch):
    """The failure the check cannot see (here: unlink of one folder's .pyc raises PermissionError)
    rolls back every target at once: exit 3, sources byte-identical, no journal."""
    three_fixes(cookbook)
    pycs(site)
    before, bytecode = sources_of(site), bytecode_of(site)
    real_unlink = Path.unlink
    refused = []

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if self.suffix == ".pyc" and self.parent.parent.name == "vllm_gaudi":
            refused.append(self)
            raise PermissionError(13, "Permission denied", str(self))
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    r = cli(*APPLY, "--site", str(site.path))
    assert r.exit_code == 3, r.output
    assert refused, "the fault was never reached"
    assert "writing failed, everything was put back" in r.output and "Permission denied" in r.output
    monkeypatch.setattr(Path, "unlink", real_unlink)
    assert sources_of(site) == before
    assert set(bytecode_of(site).items()) <= set(bytecode.items())  # none changed, some may be gone
    assert not (site.path / ".fixpack").exists()
    r = cli("status", "--site", str(site.path), "--json")
    assert r.exit_code == 0 and '"fixes": []' in r.output


def test_a_rollback_that_cannot_finish_keeps_the_journal_for_the_next_run(cookbook, site, cli, monkeypatch):
    three_fixes(cookbook)
    pristine = targets(site)
    real_replace = os.replace
    calls = []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == 4:  # the fourth rename of the commit hits a full disk...
            raise OSError(28, "No space left on device")
        if len(calls) > 4 and str(dst).endswith("runner.py"):  # ...and so does putting runner.py back
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    r = cli(*APPLY, "--site", str(site.path))
    monkeypatch.setattr(os, "replace", real_replace)
    assert r.exit_code == 3
    assert "so did rolling back" in r.output and "runner.py" in r.output and "--discard" in r.output
    assert "Traceback" not in r.output
    assert (site.path / ".fixpack" / "journal" / "journal.json").exists()
    r = cli("status", "--site", str(site.path))
    assert r.exit_code == 0 and "recovered an interrupted transaction" in r.output
    assert targets(site) == pristine
    assert not (site.path / ".fixpack").exists()


@pytest.mark.parametrize("value", ["abc", "nan", "-1", ""])
def test_a_bad_lock_timeout_is_a_usage_error(cookbook, site, value):
    three_fixes(cookbook)
    r = run_cli(*APPLY, "--site", str(site.path), env={**env_of(cookbook), "FIXPACK_LOCK_TIMEOUT": value})
    assert r.returncode == 2
    assert f"FIXPACK_LOCK_TIMEOUT={value!r}: expected a number of seconds" in one_line_error(r.stderr)
    assert targets(site)["vllm_gaudi/new_module.py"] is None


def test_waiting_for_the_lock_is_said_once(cookbook, site):
    three_fixes(cookbook)
    fd = os.open(site.path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        r = run_cli(*APPLY, "--site", str(site.path), env={**env_of(cookbook), "FIXPACK_LOCK_TIMEOUT": "2"})
    finally:
        os.close(fd)
    assert r.returncode == 3
    waiting = [ln for ln in r.stderr.splitlines() if "waiting for another fixpack" in ln]
    assert len(waiting) == 1, r.stderr
    if os.path.exists("/proc/locks"):  # where Linux says who holds it
        assert f"(pid {os.getpid()})" in waiting[0]
    assert f"holding the lock on {site.path}, up to 2 s" in waiting[0]
