"""The runtime check: the ``vllm.general_plugins`` entry point ``apply`` installs (in place, as a
distribution of its own beside the others; in an overlay, inside it), loaded and called the way
vLLM's ``load_plugins_by_group`` does in each process: it stops the process when the code it would
run is not what fixpack applied, only warns with FIXPACK_RUNTIME_CHECK=warn, and logs one line."""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import sys

from builders import RUNNER, run_cli
from cookbooks import three_fixes
from runs import LOAD, apply_overlay, py


def test_in_place_the_check_is_its_own_distribution_and_logs_one_line(cookbook, site, cli):
    three_fixes(cookbook)
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    (dist_info,) = site.path.glob("fixpack_runtime_check-*.dist-info")
    listed = {f.as_posix() for f in md.Distribution.at(dist_info).files or []}
    files = site.path.glob("fixpack_runtime_check*/**/*")
    on_disk = {p.relative_to(site.path).as_posix() for p in files if p.is_file()}
    assert on_disk == listed
    out = py(LOAD, site.path)
    assert out.returncode == 0, out.stderr
    assert "plugins ['fixpack_runtime_check']" in out.stdout and "vllm imported: False" in out.stdout
    line = re.search(r"INFO vllm.fixpack (fixpack: .*)", out.stdout)
    assert line, out.stdout
    logged = re.fullmatch(
        r"fixpack: profile v0\.26\.0, fix set ([0-9a-f]{16}), 3 fixes \(one, two, three\), mode in-place, pid \d+, "
        r"4 files checked in [\d.]+ ms",
        line.group(1),
    )
    assert logged, line.group(1)
    status = json.loads(cli("status", "--site", str(site.path), "--json").stdout)
    assert logged.group(1) == status["fix_set"]["digest"]  # the digest status shows, recorded at apply time


def test_in_place_a_changed_file_stops_the_process_or_warns(cookbook, site, cli):
    three_fixes(cookbook)
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    site.file("vllm_gaudi/runner.py").write_text(RUNNER)  # reinstalled: the fixes are gone
    out = py(LOAD, site.path)
    assert out.returncode == 1 and "RuntimeError: fixpack:" in out.stderr
    assert f"{site.file('vllm_gaudi/runner.py')} is not the file fixpack patched" in out.stderr
    warned = py(LOAD, site.path, FIXPACK_RUNTIME_CHECK="warn")
    assert warned.returncode == 0 and "WARNING vllm.fixpack fixpack: this process would not run" in warned.stdout
    assert "(FAILED, warn only)" in warned.stdout
    off = py(LOAD, site.path, FIXPACK_RUNTIME_CHECK="off")
    assert off.returncode == 0 and "vllm.fixpack" not in off.stdout


def test_under_warn_a_changed_file_logs_no_digest(cookbook, site, cli):
    three_fixes(cookbook)
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    digest = json.loads(cli("status", "--site", str(site.path), "--json").stdout)["fix_set"]["digest"]
    runner = site.file("vllm_gaudi/runner.py")
    runner.write_text(runner.read_text() + "# edited\n")
    warned = py(LOAD, site.path, FIXPACK_RUNTIME_CHECK="warn")
    assert warned.returncode == 0, warned.stderr
    line = re.search(r"INFO vllm.fixpack (fixpack: .*)", warned.stdout)
    assert line and "fix set none (drifted), 3 fixes (one, two, three)" in line.group(1), warned.stdout
    assert digest not in warned.stdout


def test_revert_removes_the_check_and_pip_would_too(cookbook, site, cli):
    three_fixes(cookbook)
    before = sorted(p.relative_to(site.path).as_posix() for p in site.path.rglob("*"))
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    owner = {f.as_posix() for f in md.Distribution.at(next(site.path.glob("vllm-*.dist-info"))).files or []}
    assert "fixpack_runtime_check/__init__.py" in owner  # pip uninstall of the state's owner removes it too
    assert cli("revert", "one", "--site", str(site.path)).exit_code == 0
    index = json.loads((site.path / "fixpack_runtime_check" / "index.json").read_text())
    manifest = json.loads((site.path / ".fixpack" / "manifest.json").read_text())
    assert index["fixes"] == manifest["fixes"] and "one" not in index["fixes"]  # the index follows the manifest
    assert cli("revert", "--site", str(site.path)).exit_code == 0
    assert sorted(p.relative_to(site.path).as_posix() for p in site.path.rglob("*")) == before
    assert "plugins []" in py(LOAD, site.path).stdout


def test_an_applied_image_without_the_check_gets_it(cookbook, site, cli):
    three_fixes(cookbook)
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    import shutil

    for folder in site.path.glob("fixpack_runtime_check*"):  # as an older fixpack left it
        shutil.rmtree(folder)
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path), "--json")
    assert r.exit_code == 0 and {f["action"] for f in json.loads(r.stdout)["fixes"]} == {"already-applied"}
    assert (site.path / "fixpack_runtime_check" / "index.json").exists()


def test_overlay_the_check_needs_the_hook_and_the_originals_it_was_built_from(cookbook, site, tmp_path):
    three_fixes(cookbook)
    overlay = tmp_path / "overlay"
    assert apply_overlay(cookbook, site, overlay).returncode == 0
    out = py(LOAD, overlay, site.path)
    assert out.returncode == 0, out.stderr
    line = r"fixpack: profile v0\.26\.0, fix set ([0-9a-f]{16}), 3 fixes \(one, two, three\), "
    line += rf"mode overlay {overlay}, pid \d+"
    logged = re.search(line, out.stdout)
    assert logged, out.stdout
    env = {"FIXPACK_COOKBOOK": str(cookbook.root)}
    status = run_cli("status", "--site", str(site.path), "--overlay", str(overlay), "--json", env=env)
    assert logged.group(1) == json.loads(status.stdout)["fix_set"]["digest"]
    no_hook = py(LOAD, overlay, site.path, flags=("-S",))  # no site module: no sitecustomize
    assert no_hook.returncode == 1 and "is not active in this process" in no_hook.stderr
    assert "plugins []" in py(LOAD, site.path).stdout  # without the overlay on the path: no check, no fixes
    site.file("vllm/sampler.py").write_text(site.file("vllm/sampler.py").read_text() + "# new build\n")
    drift = py(LOAD, overlay, site.path)
    assert drift.returncode == 1 and "the image changed under the overlay" in drift.stderr
    assert str(site.file("vllm/sampler.py")) in drift.stderr


def test_the_check_is_cheap(cookbook, site, cli):
    three_fixes(cookbook)
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    code = LOAD + "\nprint(sorted(m for m in sys.modules if m.startswith(('vllm', 'fixpack_runtime'))))"
    out = py(code, site.path)
    assert out.returncode == 0, out.stderr
    # the check, the rule for reporting a digest (fixset.py, which the agreement shares) and the
    # index's reader (index.py): no vLLM
    modules = "['fixpack_runtime_check', 'fixpack_runtime_check.fixset', 'fixpack_runtime_check.index']"
    assert out.stdout.strip().splitlines()[-1] == modules
    ms = float(re.search(r"checked in ([\d.]+) ms", out.stdout).group(1))
    assert ms < 50, out.stdout
    assert sys.version_info >= (3, 9)


def _with_format(path, value) -> None:
    index = json.loads(path.read_text())
    index["format"] = value
    path.write_text(json.dumps(index))


def test_an_index_of_another_format_is_the_checks_problem_line(cookbook, site, cli):
    three_fixes(cookbook)
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    _with_format(site.path / "fixpack_runtime_check" / "index.json", 3)
    out = py(LOAD, site.path)
    assert out.returncode == 1 and "RuntimeError: fixpack:" in out.stderr, out.stderr
    assert "index format 3; this fixpack reads format 2" in out.stderr


def test_an_index_of_another_format_leaves_the_overlay_inactive_saying_why(cookbook, site, tmp_path):
    three_fixes(cookbook)
    overlay = tmp_path / "overlay"
    assert apply_overlay(cookbook, site, overlay).returncode == 0
    _with_format(overlay / "fixpack_runtime_check" / "index.json", 3)
    out = py("import vllm_gaudi.runner as r; print(r.f2())", overlay, site.path)
    assert out.stdout.split() == ["2"]  # the installed module: the finder is not there
    assert "fixpack overlay: the index in" in out.stderr and "index format 3; this fixpack reads format 2" in out.stderr
