"""Issue 57: Ctrl-C gives one line and exit 130, never a traceback or click's bare "Aborted!":
in the middle of a transaction (rolled back: the site as before), and while a command starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from builders import REPO
from cookbooks import three_fixes
from runs import SCRIPT, env_of

from fixpack.errors import INTERRUPTED, INTERRUPTED_LINE

# A sitecustomize that presses Ctrl-C when the process first imports MODULE: a start-up interrupted
# at a known point, whatever the machine's speed.
PRESS = """
import importlib.abc, os, sys

class Press(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["FIXPACK_TEST_PRESS_AT"]:
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, Press())
"""


def test_ctrl_c_in_a_transaction_rolls_back_and_says_so_in_one_line(cli, cookbook, site, monkeypatch):
    three_fixes(cookbook)
    before = site.snapshot()
    import fixpack.installation.transaction as transaction

    real, replaced = transaction.fsync_dir, []

    def pressed(folder):
        if site.read("vllm/sampler.py") != before[str(site.file("vllm/sampler.py"))][0]:
            replaced.append(folder)  # the targets are replaced: Ctrl-C before the journal goes
            raise KeyboardInterrupt
        return real(folder)

    monkeypatch.setattr(transaction, "fsync_dir", pressed)
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == INTERRUPTED and r.stderr.strip() == INTERRUPTED_LINE, r.output
    assert replaced
    # rolled back at once, byte for byte (restored files are new inodes): no journal left for the next run
    assert {path: content for path, (content, _) in site.snapshot().items()} == {
        path: content for path, (content, _) in before.items()
    }


def _pressed_at(module: str, tmp_path: Path, *command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "press").mkdir()
    (tmp_path / "press" / "sitecustomize.py").write_text(PRESS)
    full = {**os.environ, **env, "PYTHONPATH": f"{tmp_path / 'press'}{os.pathsep}{REPO}"}
    full["FIXPACK_TEST_PRESS_AT"] = module
    return subprocess.run([sys.executable, *command], capture_output=True, text=True, env=full, timeout=120)


def test_ctrl_c_while_the_entry_point_starts_is_one_line(cookbook, site, tmp_path):
    three_fixes(cookbook)
    before = site.snapshot()
    r = _pressed_at("fixpack.installation.warm", tmp_path, str(SCRIPT), "--profile", "v0.26.0",
                    "--site", str(site.path), env=env_of(cookbook))  # fmt: skip
    assert r.returncode == INTERRUPTED and r.stderr.strip() == INTERRUPTED_LINE, r.stderr
    assert site.snapshot() == before


def test_ctrl_c_while_fixpack_starts_is_one_line(cookbook, site, tmp_path):
    three_fixes(cookbook)
    r = _pressed_at("fixpack.cli.group", tmp_path, "-m", "fixpack", "status", "--site", str(site.path),
                    env=env_of(cookbook))  # fmt: skip
    assert r.returncode == INTERRUPTED and r.stderr.strip() == INTERRUPTED_LINE, r.stderr
