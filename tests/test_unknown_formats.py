"""A state file of a format this fixpack does not read: the manifest gets exit 2 and one line, the
journal exit 3 and one line, nothing changed; a warm stamp of another format is no answer, and the
re-run takes the full path to the same answer. (The runtime index's: tests/test_runtime.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import run_cli
from cookbooks import three_fixes, two_fixes
from runs import apply_all, env_of, interrupted, one_line_error, took_fast_path


def another_format(path: Path, *within: str) -> None:
    """Rewrite the ``format`` of the JSON file ``path`` (of the object under keys ``within``) to 99."""
    data = json.loads(path.read_text())
    part = data
    for key in within:
        part = part[key]
    assert part["format"] != 99
    part["format"] = 99
    path.write_text(json.dumps(data))


def refused_unchanged(cookbook, site, command: tuple[str, ...], code: int) -> str:
    """Run ``fixpack COMMAND --site``: it exits ``code`` with one error line, the site unchanged."""
    snapshot = site.snapshot()
    r = run_cli(*command, "--site", str(site.path), env=env_of(cookbook))
    assert r.returncode == code
    line = one_line_error(r.stderr)
    assert site.snapshot() == snapshot
    return line


@pytest.mark.parametrize("command", [("status",), ("apply", "--profile", "v0.26.0"), ("revert",)])
def test_a_manifest_of_another_format_is_one_line_exit_2(cookbook, site, command):
    two_fixes(cookbook)
    assert run_cli("apply", "--profile", "v0.26.0", "--site", str(site.path), env=env_of(cookbook)).returncode == 0
    another_format(site.path / ".fixpack" / "manifest.json")
    line = refused_unchanged(cookbook, site, command, 2)
    assert "unreadable manifest" in line and "format 99" in line


def test_a_journal_of_another_format_is_one_line_exit_3(cookbook, site):
    two_fixes(cookbook)
    interrupted(cookbook, site)
    another_format(site.path / ".fixpack" / "journal" / "journal.json")
    line = refused_unchanged(cookbook, site, ("status",), 3)
    assert "cannot recover the interrupted transaction" in line and "format 99" in line


def test_a_warm_stamp_of_another_format_sends_the_rerun_down_the_full_path(cookbook, site):
    three_fixes(cookbook)
    assert apply_all(cookbook, site).returncode == 0
    another_format(site.path / ".fixpack" / "manifest.json", "warm")
    r = apply_all(cookbook, site)
    assert r.returncode == 0 and not took_fast_path(r) and "3 already applied" in r.stdout
