"""The bench's goals, report rows, floors and peer: judged, printed and run as bench/README.md says."""

from __future__ import annotations

import importlib.util
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import workloads  # noqa: E402
from bench.beds import Bed  # noqa: E402
from bench.engine import Tools  # noqa: E402
from bench.goals import goals  # noqa: E402
from bench.measure import Run, Series  # noqa: E402
from bench.report import _main_rows  # noqa: E402


def _series(name: str, *seconds: float, peak_mib: float = 0) -> Series:
    s = Series(name)
    for x in seconds:
        s.add(Run(x, 0, 0, "", ""))
    s.peak_kib = int(peak_mib * 1024)
    return s


def _main(**medians: float) -> dict[str, Series]:
    """Every series of the main bed, not run unless given a median."""
    s = {name: Series(name) for name in workloads.MAIN}
    for name, seconds in medians.items():
        s[name] = _series(name, seconds)
    return s


def _goal(judged: list, start: str):
    (g,) = [g for g in judged if g.name.startswith(start)]
    return g


NO_LIBCST = {kind: {"loaded": {"libcst": False}} for kind in ("cold", "warm")}


def test_cold_apply_is_judged_against_the_compile_floor_and_the_peer():
    s = _main(cold=0.200, compile_floor=0.090, peer=0.175, warm=0.060, warm_floor=0.045)
    judged = goals(s, [], NO_LIBCST)
    compiled = _goal(judged, "cold apply, against the compile floor")
    assert compiled.limit == pytest.approx(0.225) and compiled.met is True
    peer = _goal(judged, "cold apply, against patch")
    assert peer.limit == pytest.approx(0.1925) and peer.met is False
    warm = _goal(judged, "warm re-run")
    assert warm.floor == pytest.approx(0.045) and warm.met is True
    assert not [g for g in judged if "against the floor" in g.name]  # the hash floor is no cold goal now


def test_a_peer_not_run_leaves_its_goal_unjudged():
    judged = goals(_main(cold=0.2, compile_floor=0.1, warm=0.05, warm_floor=0.04), [], NO_LIBCST)
    assert _goal(judged, "cold apply, against patch").met is None
    assert _goal(judged, "verify of").met is None
    assert _goal(judged, "verify --coverage").met is None


def test_verify_with_coverage_is_judged_against_verify_in_the_same_rounds():
    s = _main(verify=11.0, verify_coverage=21.0, torch_import=1.5)
    covered = _goal(goals(s, [], NO_LIBCST), "verify --coverage")
    assert covered.floor == pytest.approx(11.0) and covered.limit == pytest.approx(22.0) and covered.met is True
    s["verify_coverage"] = _series("verify_coverage", 23.0)
    assert _goal(goals(s, [], NO_LIBCST), "verify --coverage").met is False
    (row,) = [r for r in _main_rows(s) if r.startswith("| verify --coverage")]
    assert "| 23.0 s | 11.0 s (verify, same rounds) | 2.1x |" in row, row


def test_peak_memory_must_stay_below_the_budget():
    s = _main(cold=0.2, compile_floor=0.1, warm=0.05, warm_floor=0.04)
    s["cold"].peak_kib = 100 * 1024
    assert _goal(goals(s, [], NO_LIBCST), "peak memory").met is False
    s["cold"].peak_kib = 100 * 1024 - 1
    assert _goal(goals(s, [], NO_LIBCST), "peak memory").met is True


def test_rows_show_both_floors_and_say_which_peers_did_not_run():
    s = _main(cold=0.200, compile_floor=0.100, hash_floor=0.040, warm=0.050, warm_floor=0.040, revert=0.1)
    s["git_apply"] = _series("git_apply", 0.020)
    cold, hashed, warm, _ = _main_rows(s)
    assert "100 ms (compile floor) | 2.0x" in cold
    assert "patch -p1 of each fix + compileall: not run" in cold and "git apply 20 ms (10.0x)" in cold
    assert "40 ms (hash floor) | 5.0x" in hashed
    assert "patch -R --dry-run: not run" in warm


def test_a_missing_peer_tool_is_named_with_its_rows(monkeypatch):
    monkeypatch.setattr(workloads.shutil, "which", lambda tool: None if tool == "patch" else "/usr/bin/" + tool)
    assert workloads.missing_tools() == {"patch": "patch is not installed: peer, patch_check_r not run"}


def _checked_hash_pyc(source: Path, name: str, tmp: Path) -> bytes:
    """What py_compile writes for ``source`` as checked hash-based bytecode, compiled under ``name``."""
    out = tmp / "expected.pyc"
    py_compile.compile(str(source), str(out), dfile=name, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    return out.read_bytes()


def test_the_compile_floor_writes_the_bytecode_py_compile_would(tmp_path):
    module, data = tmp_path / "m.py", tmp_path / "data.txt"
    module.write_text("def f(x):\n    return x + 1\n")
    data.write_text("not python\n")
    tools = Tools(sys.executable, tmp_path, tmp_path)
    for cmd in (tools.floor([module, data]), tools.compile_floor([module, data])):
        assert subprocess.run(cmd, capture_output=True).returncode == 0
    pyc = Path(importlib.util.cache_from_source(str(module)))
    assert pyc.read_bytes() == _checked_hash_pyc(module, str(module), tmp_path)


def test_the_compile_floor_only_compiles_where_no_bytecode_is_written(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("x = 1\n")
    tools = Tools(sys.executable, tmp_path, tmp_path, write_bytecode=False)
    assert subprocess.run(tools.compile_floor([module]), capture_output=True).returncode == 0
    assert not (tmp_path / "__pycache__").exists()
    module.write_text("x = (\n")
    assert subprocess.run(tools.compile_floor([module]), capture_output=True).returncode != 0


@pytest.mark.skipif(shutil.which("patch") is None, reason="patch is not installed")
def test_the_peer_patches_in_order_and_compiles_hash_based(tmp_path):
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "a.py").write_text("x = 1\ny = 2\n")
    first, second = tmp_path / "1.patch", tmp_path / "2.patch"
    first.write_text("--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1,2 +1,2 @@\n-x = 1\n+x = 10\n y = 2\n")
    second.write_text("--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1,2 +1,2 @@\n x = 10\n-y = 2\n+y = 20\n")
    tools = Tools(sys.executable, tmp_path, tmp_path)
    env = tools.base_env
    r = subprocess.run(tools.peer([first, second], ["pkg/a.py"]), cwd=site, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (site / "pkg" / "a.py").read_text() == "x = 10\ny = 20\n"
    pyc = Path(importlib.util.cache_from_source(str(site / "pkg" / "a.py")))
    assert pyc.read_bytes() == _checked_hash_pyc(site / "pkg" / "a.py", "pkg/a.py", tmp_path)
    r = subprocess.run(tools.peer([second], ["pkg/a.py"]), cwd=site, env=env, capture_output=True)
    assert r.returncode != 0  # a patch that does not apply stops the loop


def test_reset_removes_the_bytecode_of_created_modules_and_restores_the_release_s(tmp_path):
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "a.py").write_text("x = 1\n")
    py_compile.compile(str(site / "pkg" / "a.py"))
    release = Path(importlib.util.cache_from_source(str(site / "pkg" / "a.py")))
    stock = release.read_bytes()
    bed = Bed(site, tmp_path / "cookbook", {}, [], ["pkg/a.py", "pkg/new.py"])
    bed.snapshot()
    (site / "pkg" / "a.py").write_text("x = 2\n")
    (site / "pkg" / "new.py").write_text("y = 1\n")
    py_compile.compile(str(site / "pkg" / "a.py"))
    py_compile.compile(str(site / "pkg" / "new.py"))
    bed.reset()
    assert release.read_bytes() == stock
    assert not (site / "pkg" / "new.py").exists()
    assert not Path(importlib.util.cache_from_source(str(site / "pkg" / "new.py"))).exists()


def test_a_recipe_start_is_shown_beside_the_profile_apply_only_when_it_ran():
    base = dict(cold=0.200, compile_floor=0.100, hash_floor=0.040, warm=0.050, warm_floor=0.040, revert=0.1)
    assert not [r for r in _main_rows(_main(**base)) if "--recipe" in r]  # an engine without recipes
    rows = [r for r in _main_rows(_main(**base, recipe_cold=0.250, recipe_rerun=0.150)) if "--recipe" in r]
    assert len(rows) == 2
    assert "250 ms" in rows[0] and "200 ms (cold `--profile` apply)" in rows[0] and "1.2x" in rows[0]
    assert "150 ms" in rows[1] and "50 ms (warm re-run)" in rows[1] and "3.0x" in rows[1]


def test_the_recipe_row_finds_the_recipe_of_the_bed_s_fix_set(tmp_path):
    from bench.beds import recipe_for

    folder = tmp_path / "recipes" / "org" / "model"
    folder.mkdir(parents=True)
    (folder / "recipe.yaml").write_text(
        "meta: {slug: one}\nfixes: {profile: v0.26.0, opt_ins: [b, a]}\n", encoding="utf-8"
    )
    assert recipe_for(tmp_path, ["a", "b"]) == "one"
    assert recipe_for(tmp_path, ["a"]) is None
    assert recipe_for(tmp_path / "elsewhere", ["a", "b"]) is None
