"""Issue 56: the warm path of fixes/apply_all.py takes only what a full apply would take. A manifest
edited after the apply (another format, files of another shape, too deep), one another user could
write, and a stamp that names a command or an overlay the command line does not give: each sends
the re-run down the full path, whose answer (exit code, output) the warm path would have had to
give, and no recorded command runs that the command line does not ask for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cookbooks import three_fixes
from runs import SCRIPT, apply_all, took_fast_path


def manifest(site) -> Path:
    return site.path / ".fixpack" / "manifest.json"


def edit(site, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(manifest(site).read_text())
    change(data)
    manifest(site).write_text(json.dumps(data, indent=2))


def same_as_the_full_path(cookbook, site, *args: str) -> None:
    """The re-run's answer is the full path's on the same state (each may repair it: put back between)."""
    edited = manifest(site).read_bytes()
    warm = apply_all(cookbook, site, *args)
    manifest(site).write_bytes(edited)
    full = apply_all(cookbook, site, *args, FIXPACK_NO_FAST_PATH="1")
    assert not took_fast_path(warm), warm.stdout
    assert (warm.returncode, warm.stdout) == (full.returncode, full.stdout)


def with_exec(cookbook, site, *command: str) -> subprocess.CompletedProcess[str]:
    """``apply_all.py --profile v0.26.0 --site SITE --exec COMMAND`` (``--exec`` takes the rest)."""
    env = dict(os.environ, FIXPACK_COOKBOOK=str(cookbook.root))
    env.pop("PYTHONPATH", None)
    argv = [sys.executable, "-X", "importtime", str(SCRIPT), "--profile", "v0.26.0", "--site", str(site.path)]
    return subprocess.run([*argv, "--exec", *command], capture_output=True, text=True, env=env)


def _runs(mark: Path) -> list[str]:
    return [sys.executable, "-c", f"open({str(mark)!r}, 'w').close()"]


EDITS = {
    "format 99": lambda d: d.update(format=99),
    "format true": lambda d: d.update(format=True),
    "files a list": lambda d: d.update(files=[]),
    "a file's hash changed": lambda d: next(iter(d["files"].values())).update(applied="0" * 64),
    "the fixes reordered": lambda d: d.update(fixes=d["fixes"][::-1]),
}


@pytest.mark.parametrize("case", list(EDITS))
def test_a_manifest_edited_after_the_apply_takes_the_full_path(cookbook, site, case):
    three_fixes(cookbook)
    assert apply_all(cookbook, site).returncode == 0
    edit(site, EDITS[case])
    same_as_the_full_path(cookbook, site)


@pytest.mark.parametrize("raw", ["[" * 100_000, '{"format": 2, "warm": {', ""], ids=["deep", "cut short", "empty"])
def test_a_manifest_that_cannot_be_parsed_takes_the_full_path(cookbook, site, raw):
    three_fixes(cookbook)
    assert apply_all(cookbook, site).returncode == 0
    manifest(site).write_text(raw)
    warm = apply_all(cookbook, site)
    assert not took_fast_path(warm) and "Traceback" not in warm.stderr


def test_a_manifest_every_user_can_write_takes_the_full_path(cookbook, site):
    three_fixes(cookbook)
    assert apply_all(cookbook, site).returncode == 0
    os.chmod(manifest(site), 0o666)
    same_as_the_full_path(cookbook, site)


def test_a_stamp_never_runs_a_command_the_command_line_does_not_give(cookbook, site, tmp_path):
    three_fixes(cookbook)
    assert apply_all(cookbook, site).returncode == 0
    mark = tmp_path / "ran"
    edit(site, lambda d: d["warm"].update(exec=_runs(mark)))
    again = apply_all(cookbook, site)
    assert again.returncode == 0 and "3 already applied" in again.stdout
    assert not mark.exists()


def test_a_stamp_runs_only_the_command_given_after_exec(cookbook, site, tmp_path):
    three_fixes(cookbook)
    given, planted = tmp_path / "given", tmp_path / "planted"
    assert with_exec(cookbook, site, *_runs(given)).returncode == 0 and given.exists()
    given.unlink()
    assert took_fast_path(with_exec(cookbook, site, *_runs(given))) and given.exists()
    given.unlink()
    edit(site, lambda d: d["warm"].update(exec=_runs(planted)))
    again = with_exec(cookbook, site, *_runs(given))
    assert again.returncode == 0 and given.exists() and not planted.exists()


def test_a_stamp_never_puts_another_folder_on_the_commands_path(cookbook, site, tmp_path):
    three_fixes(cookbook)
    seen = tmp_path / "seen"
    command = [sys.executable, "-c", f"import os; open({str(seen)!r}, 'w').write(os.environ.get('PYTHONPATH', ''))"]
    assert with_exec(cookbook, site, *command).returncode == 0
    edit(site, lambda d: d["warm"].update(exec_overlay=str(tmp_path / "evil")))
    again = with_exec(cookbook, site, *command)
    assert again.returncode == 0 and not took_fast_path(again)
    assert str(tmp_path / "evil") not in seen.read_text()
