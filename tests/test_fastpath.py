"""The already-applied fast path of fixes/apply_all.py: the same answer as the full apply, or none."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from builders import REPO
from test_transaction import three_fixes

SCRIPT = REPO / "fixes" / "apply_all.py"


def apply_all(cookbook, site, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, FIXPACK_COOKBOOK=str(cookbook.root), **env)
    full.pop("PYTHONPATH", None)
    cmd = [sys.executable, "-X", "importtime", str(SCRIPT), "--profile", "v0.26.0", *args, "--site", str(site.path)]
    return subprocess.run(cmd, capture_output=True, text=True, env=full)


def output(r: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    return r.stdout, "".join(ln + "\n" for ln in r.stderr.splitlines() if not ln.startswith("import time:"))


def took_fast_path(r: subprocess.CompletedProcess[str]) -> bool:
    return "fixpack.commands.apply" not in r.stderr  # -X importtime: only the full apply imports the recipe


def test_warm_rerun_takes_the_fast_path_with_the_same_output(cookbook, site):
    three_fixes(cookbook)
    assert apply_all(cookbook, site).returncode == 0
    fast = apply_all(cookbook, site)
    full = apply_all(cookbook, site, FIXPACK_NO_FAST_PATH="1")
    assert fast.returncode == full.returncode == 0
    assert took_fast_path(fast) and not took_fast_path(full)
    assert output(fast) == output(full)
    assert "3 already applied" in fast.stdout


def test_any_change_sends_the_rerun_down_the_full_path(cookbook, site):
    three_fixes(cookbook)
    assert apply_all(cookbook, site).returncode == 0
    # another request
    assert not took_fast_path(apply_all(cookbook, site, "--dry-run"))
    # a cookbook file changed (same fixes: still all applied, by the full path)
    toml = cookbook.root / "fixes" / "two" / "fix.toml"
    toml.write_text(toml.read_text().replace("Because two", "Since two"))
    r = apply_all(cookbook, site)
    assert r.returncode == 0 and not took_fast_path(r) and "3 already applied" in r.stdout
    toml.write_text(toml.read_text().replace("Since two", "Because two"))
    assert took_fast_path(apply_all(cookbook, site))
    # a target edited by hand: the full path refuses it as drifted
    target = site.file("vllm_gaudi/batch.py")
    target.write_text(target.read_text() + "# local edit\n")
    r = apply_all(cookbook, site)
    assert r.returncode == 1 and not took_fast_path(r) and "drifted" in r.stderr


def test_a_journal_left_behind_is_recovered_by_the_full_path(cookbook, site):
    three_fixes(cookbook)
    assert apply_all(cookbook, site).returncode == 0
    (site.path / ".fixpack" / "journal").mkdir()
    r = apply_all(cookbook, site)
    assert r.returncode == 0 and not took_fast_path(r) and "recovered" in r.stderr


def test_interpreter_path_install_without_site(cookbook, site):
    """No --site: the distributions are found on the interpreter's path, fast path included."""
    three_fixes(cookbook)
    env = dict(os.environ, FIXPACK_COOKBOOK=str(cookbook.root), PYTHONPATH=str(site.path))
    env.pop("FIXPACK_SITE", None)
    cmd = [sys.executable, "-X", "importtime", str(SCRIPT), "--profile", "v0.26.0"]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr
    assert (site.path / ".fixpack" / "manifest.json").exists()
    assert b"return 20\n" in site.read("vllm_gaudi/runner.py")
    again = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert again.returncode == 0 and "3 already applied" in again.stdout
    assert took_fast_path(again)


def test_a_cold_plain_apply_does_not_import_click(cookbook, site):
    three_fixes(cookbook)
    r = apply_all(cookbook, site)
    assert r.returncode == 0 and not took_fast_path(r) and " click" not in r.stderr
    helped = apply_all(cookbook, site, "--help")  # anything but a plain apply line goes to click
    assert helped.returncode == 0 and " click" in helped.stderr and "Usage: apply_all.py" in helped.stdout


def test_apply_all_exits_without_teardown_but_says_everything_with_the_contract_s_codes(cookbook, site):
    three_fixes(cookbook)
    env = dict(os.environ, FIXPACK_COOKBOOK=str(cookbook.root))
    env.pop("PYTHONPATH", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, str(SCRIPT), *args, "--site", str(site.path)]
        return subprocess.run(cmd, capture_output=True, text=True, env=env)

    # An atexit handler stands in for the teardown: it does not run, yet the piped output is whole.
    hook = "import atexit, sys; atexit.register(lambda: sys.stderr.write('TEARDOWN\\n'))"
    cmd = [sys.executable, "-c", f"{hook}; import runpy, sys; sys.argv = sys.argv[1:]; "
           f"runpy.run_path(sys.argv[0], run_name='__main__')", str(SCRIPT),
           "--profile", "v0.26.0", "--json", "--site", str(site.path)]
    cold = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert cold.returncode == 0 and "TEARDOWN" not in cold.stderr
    assert json.loads(cold.stdout)["ok"] is True
    warm = run("--profile", "v0.26.0", "--json")
    assert warm.returncode == 0 and json.loads(warm.stdout)["ok"] is True
    unknown = run("--profile", "v0.26.0", "no-such-fix")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "no-such-fix" in unknown.stderr
    helped = run("--help")
    assert helped.returncode == 0 and "Usage: apply_all.py" in helped.stdout
