"""Issue 56: fixpack's state is acted on with the rights of the process that reads it (often
root's): the manifest and the journal name files to write, a kept RECORD goes back into a
dist-info. A state another user could have written is refused before anything in it is read, by
every command that reads it, in one line with exit 3 and nothing changed; group 0 (OpenShift's
images) and the pristine copies, believed only by their recorded hash, are not refused."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from builders import RUNNER, run_cli
from cookbooks import three_fixes
from runs import APPLY, NEXT_STEP, env_of, interrupted, one_line_error

STATE = ".fixpack"
# making a file another user's (chown) needs root
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason=f"the tests run as uid {os.geteuid()}: chown needs root")


def _record_copy(state: Path) -> Path:
    return sorted(state.glob("pristine/*.dist-info/RECORD"))[0]


# what another user could write: each a way to make one state file or folder theirs
OPENINGS: dict[str, Callable[[Path], Path]] = {
    "state folder, every user": lambda s: _chmod(s, 0o777),
    "manifest, every user": lambda s: _chmod(s / "manifest.json", 0o666),
    "manifest, another owner": lambda s: _chown(s / "manifest.json", 65534),
    "pristine folder, another group": lambda s: _chgrp_writable(s / "pristine", 1234),
    "kept RECORD, every user": lambda s: _chmod(_record_copy(s), 0o666),
}


def _chmod(path: Path, mode: int) -> Path:
    os.chmod(path, mode)
    return path


def _chown(path: Path, uid: int) -> Path:
    os.chown(path, uid, -1)
    return path


def _chgrp_writable(path: Path, gid: int) -> Path:
    os.chown(path, -1, gid)
    return _chmod(path, 0o775)


def _commands(site) -> list[tuple[str, ...]]:
    where = ("--site", str(site.path))
    reverts = [("revert", *where), ("revert", "--dry-run", *where)]
    return [(*APPLY, *where), ("status", *where), *reverts, ("recover", *where)]


@pytest.fixture
def applied(cookbook, site):
    three_fixes(cookbook)
    r = run_cli(*APPLY, "--site", str(site.path), env=env_of(cookbook))
    assert r.returncode == 0, r.stderr
    return cookbook, site


@AS_ROOT
@pytest.mark.parametrize("opening", sorted(OPENINGS))
def test_a_state_another_user_could_write_is_refused_by_every_command(applied, opening):
    cookbook, site = applied
    opened = OPENINGS[opening](site.path / STATE)
    before = site.snapshot()
    for args in _commands(site):
        r = run_cli(*args, env=env_of(cookbook))
        line = one_line_error(r.stderr)
        assert r.returncode == 3, (args, r.stderr)
        assert f"{opened} can be written by" in line and "which fixpack does not trust" in line
        assert "chown and chmod go-w it" in line and NEXT_STEP.search(line)
        assert site.snapshot() == before, args


def test_an_interrupted_journal_another_user_could_write_is_not_rolled_back(cookbook, site):
    three_fixes(cookbook)
    interrupted(cookbook, site)
    index = site.path / STATE / "journal" / "journal.json"
    os.chmod(index, 0o666)
    before = site.snapshot()
    for args in _commands(site):
        r = run_cli(*args, env=env_of(cookbook))
        assert r.returncode == 3 and f"{index} can be written by every user" in one_line_error(r.stderr)
    assert site.snapshot() == before
    os.chmod(index, 0o644)  # made the operator's again: recovered, then the apply goes on
    assert run_cli(*APPLY, "--site", str(site.path), env=env_of(cookbook)).returncode == 0


@AS_ROOT
def test_group_zero_and_the_pristine_copies_owner_are_not_refused(applied):
    """OpenShift's images (``chgrp 0; chmod g=u``), and a pristine copy that is the installed file's
    own inode, of whoever installed it: believed only when its hash is the manifest's."""
    cookbook, site = applied
    state = site.path / STATE
    for folder, names, files in os.walk(state):
        for name in [*names, *files]:
            path = os.path.join(folder, name)
            os.chown(path, -1, 0)
            os.chmod(path, os.stat(path).st_mode | 0o020)
    (copy,) = state.glob("pristine/vllm_gaudi/runner.py")
    os.chown(copy, 65534, -1)
    r = run_cli("status", "--site", str(site.path), env=env_of(cookbook))
    assert r.returncode == 0, r.stderr
    copy.write_bytes(RUNNER.encode().replace(b"return 3", b"return 4"))  # no longer the release's bytes
    r = run_cli("revert", "--site", str(site.path), env=env_of(cookbook))
    assert r.returncode == 0, r.stderr
    assert site.read("vllm_gaudi/runner.py") == RUNNER.encode()  # rebuilt from the chain, not the copy


@AS_ROOT
def test_an_overlays_state_is_judged_the_same(cookbook, site, tmp_path):
    three_fixes(cookbook)
    overlay = tmp_path / "overlay"
    where = ("--site", str(site.path), "--overlay", str(overlay))
    assert run_cli(*APPLY, *where, env=env_of(cookbook)).returncode == 0
    os.chown(overlay / STATE / "manifest.json", 65534, -1)
    before = {p: p.read_bytes() for p in overlay.rglob("*") if p.is_file()}
    for args in ((*APPLY, *where), ("status", *where), ("revert", *where)):
        r = run_cli(*args, env=env_of(cookbook))
        assert r.returncode == 3 and "can be written by uid 65534, its owner" in one_line_error(r.stderr)
    assert {p: p.read_bytes() for p in overlay.rglob("*") if p.is_file()} == before
    shutil.rmtree(overlay)


def test_a_journal_nested_thousands_deep_is_one_line(cookbook, site):
    three_fixes(cookbook)
    interrupted(cookbook, site)
    index = site.path / STATE / "journal" / "journal.json"
    index.write_text('{"format": 2, "entries": ' + "[" * 100_000 + "]" * 100_000 + "}")
    before = site.snapshot()
    r = run_cli("recover", "--site", str(site.path), env=env_of(cookbook))
    assert r.returncode == 3 and "nested too deep or too large to read" in one_line_error(r.stderr)
    assert site.snapshot() == before


def test_a_journal_index_that_is_a_fifo_is_refused_without_hanging(cookbook, site):
    three_fixes(cookbook)
    interrupted(cookbook, site)
    index = site.path / STATE / "journal" / "journal.json"
    index.unlink()
    os.mkfifo(index)
    r = run_cli("status", "--site", str(site.path), env=env_of(cookbook), timeout=60)
    assert r.returncode == 3 and "is not a regular file" in one_line_error(r.stderr)


@AS_ROOT
def test_an_overlay_over_an_in_place_state_another_user_could_write_is_refused(applied, tmp_path):
    """apply --overlay reads the in-place manifest to refuse an overlay over fixes applied in place:
    that read too is only of a state no other user could write."""
    cookbook, site = applied
    _chown(site.path / STATE / "manifest.json", 65534)
    r = run_cli(*APPLY, "--site", str(site.path), "--overlay", str(tmp_path / "ov"), env=env_of(cookbook))
    assert r.returncode == 3 and "can be written by uid 65534, its owner" in one_line_error(r.stderr)
    assert not (tmp_path / "ov").exists()
