"""The already-applied fast path of fixes/apply_all.py: the same answer as the full apply, or none."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

from builders import REPO, make_site, run_cli
from cookbooks import three_fixes
from runs import SCRIPT, apply_all, took_fast_path


def output(r: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    return r.stdout, "".join(ln + "\n" for ln in r.stderr.splitlines() if not ln.startswith("import time:"))


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


def test_the_cold_apply_is_the_click_command(cookbook, site):
    three_fixes(cookbook)
    r = apply_all(cookbook, site)
    assert r.returncode == 0 and not took_fast_path(r) and "3 applied" in r.stdout
    helped = apply_all(cookbook, site, "--help")
    assert helped.returncode == 0 and "Usage: apply_all.py" in helped.stdout and "--exec CMD" in helped.stdout
    wrong = apply_all(cookbook, site, "--no-such-option")
    errors = [line for line in wrong.stderr.splitlines() if not line.startswith("import time:")]
    assert wrong.returncode == 2 and errors == [
        "fixpack: error: No such option '--no-such-option'. (see apply_all.py --help)"
    ]


def test_apply_all_exits_normally_and_says_everything_with_the_contract_s_codes(cookbook, site):
    three_fixes(cookbook)
    env = dict(os.environ, FIXPACK_COOKBOOK=str(cookbook.root))
    env.pop("PYTHONPATH", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, str(SCRIPT), *args, "--site", str(site.path)]
        return subprocess.run(cmd, capture_output=True, text=True, env=env)

    # An atexit handler stands in for the interpreter's teardown: it runs, cold and warm, after the output.
    hook = "import atexit, sys; atexit.register(lambda: sys.stderr.write('TEARDOWN\\n'))"
    cmd = [sys.executable, "-c", f"{hook}; import runpy, sys; sys.argv = sys.argv[1:]; "
           f"runpy.run_path(sys.argv[0], run_name='__main__')", str(SCRIPT),
           "--profile", "v0.26.0", "--json", "--site", str(site.path)]  # fmt: skip
    cold = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert cold.returncode == 0 and cold.stderr.endswith("TEARDOWN\n")
    assert json.loads(cold.stdout)["ok"] is True
    warm = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert warm.returncode == 0 and warm.stderr.endswith("TEARDOWN\n")
    assert json.loads(warm.stdout)["ok"] is True
    unknown = run("--profile", "v0.26.0", "no-such-fix")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "no-such-fix" in unknown.stderr
    helped = run("--help")
    assert helped.returncode == 0 and "Usage: apply_all.py" in helped.stdout


def script(argv: list[str], *, env: dict[str, str], cwd: object = None, path: object = SCRIPT):
    """``apply_all.py ARGV`` (with -X importtime, to tell the paths apart), as given."""
    cmd = [sys.executable, "-X", "importtime", str(path), *argv]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)


def plain_env(cookbook, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FIXPACK_SITE")}
    return dict(env, FIXPACK_COOKBOOK=str(cookbook.root), **extra)


def test_another_order_or_flag_is_another_request_for_the_full_path(cookbook, site):
    three_fixes(cookbook)
    env = plain_env(cookbook)
    line = ["--profile", "v0.26.0", "--site", str(site.path)]
    assert script(line, env=env).returncode == 0
    assert took_fast_path(script(line, env=env))
    for other in (
        ["--site", str(site.path), "--profile", "v0.26.0"],
        ["--profile=v0.26.0", "--site", str(site.path)],
        [*line, "--allow-unpinned"],
        [*line, "--json"],
    ):
        r = script(other, env=env)
        assert r.returncode == 0 and not took_fast_path(r), other
        assert ("3 already applied" in r.stdout) or json.loads(r.stdout)["ok"], other
    # the same line from another folder, or with FIXPACK_SITE set, is another request too
    assert not took_fast_path(script(line, env=env, cwd=site.path))
    assert not took_fast_path(script(line, env=plain_env(cookbook, FIXPACK_SITE=str(site.path))))
    assert took_fast_path(script(line, env=env))


def test_a_json_stamp_answers_with_the_json_of_the_full_path(cookbook, site):
    three_fixes(cookbook)
    env = plain_env(cookbook)
    line = ["--profile", "v0.26.0", "--json", "--site", str(site.path)]
    assert script(line, env=env).returncode == 0
    fast, full = script(line, env=env), script(line, env=plain_env(cookbook, FIXPACK_NO_FAST_PATH="1"))
    assert took_fast_path(fast) and not took_fast_path(full)
    assert output(fast) == output(full) and json.loads(fast.stdout)["ok"] is True


def test_a_distribution_appearing_on_the_path_sends_the_rerun_down_the_full_path(cookbook, site, tmp_path):
    three_fixes(cookbook)
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    env = plain_env(cookbook, PYTHONPATH=os.pathsep.join([str(earlier), str(site.path)]))
    line = ["--profile", "v0.26.0"]
    assert script(line, env=env).returncode == 0
    assert took_fast_path(script(line, env=env))
    (earlier / "unrelated-1.0.dist-info").mkdir()  # any distribution appearing on the path counts
    assert not took_fast_path(script(line, env=env))
    (earlier / "unrelated-1.0.dist-info").rmdir()
    assert took_fast_path(script(line, env=env))
    shadow = earlier / "vllm-0.26.0.dist-info"  # another vllm, earlier on the path: the full path finds it
    shadow.mkdir()
    (shadow / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.26.0\n")
    r = script(line, env=env)
    assert not took_fast_path(r) and "3 already applied" not in r.stdout


def test_each_file_the_answer_was_read_from_is_checked(cookbook, site):
    three_fixes(cookbook)
    env = plain_env(cookbook)
    line = ["--profile", "v0.26.0", "--site", str(site.path)]
    assert script(line, env=env).returncode == 0
    dist_info = next(site.path.glob("vllm_gaudi-*.dist-info"))
    for changed in (
        cookbook.root / "fixes" / "one" / "v0.26.0.lock.json",  # a cookbook file
        cookbook.root / "profiles" / "v0.26.0.toml",
        site.file("vllm_gaudi/runner.py"),  # a target
        dist_info / "METADATA",
        site.file("vllm_gaudi/_version.py"),
    ):
        before = changed.read_bytes()
        assert took_fast_path(script(line, env=env)), changed
        changed.write_bytes(before + b"\n")
        assert not took_fast_path(script(line, env=env)), changed
        changed.write_bytes(before)
    for appearing in (
        cookbook.root / "fixes" / "four",  # a new fix folder: the catalog loads every one
        cookbook.root / "profiles" / "other.toml",
        cookbook.root / "fixes" / "one" / "v0.27.0.lock.json",
        dist_info / "direct_url.json",
    ):
        assert took_fast_path(script(line, env=env)), appearing
        appearing.mkdir() if not appearing.suffix else appearing.write_text("{}")
        assert not took_fast_path(script(line, env=env)), appearing
        appearing.rmdir() if not appearing.suffix else appearing.unlink()
    assert took_fast_path(script(line, env=env))


def test_a_changed_engine_file_sends_the_rerun_down_the_full_path(cookbook, site, tmp_path):
    three_fixes(cookbook)
    engine = tmp_path / "engine"  # a copy of the engine, to change one of its files
    shutil.copytree(REPO / "fixpack", engine / "fixpack", ignore=shutil.ignore_patterns("__pycache__"))
    (engine / "fixes").mkdir()
    shutil.copy(SCRIPT, engine / "fixes" / "apply_all.py")
    env = plain_env(cookbook)
    line = ["--profile", "v0.26.0", "--site", str(site.path)]
    copy = engine / "fixes" / "apply_all.py"
    assert script(line, env=env, path=copy).returncode == 0
    assert took_fast_path(script(line, env=env, path=copy))
    assert not took_fast_path(script(line, env=env))  # another engine: its own answer
    for changed in (engine / "fixpack" / "commands" / "install" / "pipeline.py", copy):
        changed.write_text(changed.read_text() + "# changed\n")
        r = script(line, env=env, path=copy)
        assert r.returncode == 0 and not took_fast_path(r) and "3 already applied" in r.stdout


def test_an_interrupted_overlay_build_is_recovered_by_the_full_path(cookbook, site, tmp_path):
    three_fixes(cookbook)
    env = plain_env(cookbook)
    line = ["--profile", "v0.26.0", "--site", str(site.path), "--overlay", str(tmp_path / "overlay")]
    assert script(line, env=env).returncode == 0
    assert took_fast_path(script(line, env=env))
    (tmp_path / ".overlay.fixpack-new-x1").mkdir()  # a build killed before its swap
    r = script(line, env=env)
    assert r.returncode == 0 and not took_fast_path(r) and "recovered" in r.stderr
    assert not (tmp_path / ".overlay.fixpack-new-x1").exists()


def test_exec_on_the_warm_path_runs_the_recorded_command(cookbook, site, tmp_path):
    three_fixes(cookbook)
    env = plain_env(cookbook)
    command = [sys.executable, "-c", "import sys; print('ran', sys.argv[1:])", "two words", "--profile"]
    line = ["--profile", "v0.26.0", "--site", str(site.path), "--exec", *command]
    first = script(line, env=env)
    assert first.returncode == 0 and "3 applied" in first.stdout
    assert first.stdout.endswith("ran ['two words', '--profile']\n")
    again = script(line, env=env)
    assert again.returncode == 0 and took_fast_path(again) and " click" not in again.stderr
    assert "3 already applied" in again.stdout and again.stdout.endswith("ran ['two words', '--profile']\n")
    stamp = json.loads((site.path / ".fixpack" / "manifest.json").read_text())["warm"]
    assert stamp["exec"] == command


def test_a_stamp_of_fixpack_apply_serves_apply_all_with_the_same_arguments(cookbook, site, tmp_path):
    three_fixes(cookbook)
    env = plain_env(cookbook)
    line = ["--profile", "v0.26.0", "--site", str(site.path)]
    cli = [sys.executable, "-m", "fixpack", "apply", *line]
    first = subprocess.run(cli, capture_output=True, text=True, env=dict(env, PYTHONPATH=str(REPO)), cwd=tmp_path)
    assert first.returncode == 0 and "3 applied" in first.stdout, first.stderr
    fast = script(line, env=env, cwd=tmp_path)
    full = script(line, env=plain_env(cookbook, FIXPACK_NO_FAST_PATH="1"), cwd=tmp_path)
    assert took_fast_path(fast) and output(fast) == output(full)


def test_a_zip_on_the_path_is_not_vouched_for_so_every_rerun_takes_the_full_path(cookbook, site, tmp_path):
    three_fixes(cookbook)
    archive = tmp_path / "lib.zip"  # importlib.metadata would search it; the warm path cannot list it
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("other.py", "")
    env = plain_env(cookbook, PYTHONPATH=os.pathsep.join([str(archive), str(site.path)]))
    assert script(["--profile", "v0.26.0"], env=env).returncode == 0
    assert "warm" not in json.loads((site.path / ".fixpack" / "manifest.json").read_text())
    again = script(["--profile", "v0.26.0"], env=env)
    assert again.returncode == 0 and not took_fast_path(again) and "3 already applied" in again.stdout


def test_a_pinned_fix_set_is_part_of_the_request(cookbook, site, tmp_path):
    """FIXPACK_EXPECT_FIX_SET changes the request: a stamp made without it (or with another value)
    does not answer it; one made with it answers it warm."""
    three_fixes(cookbook)
    line = ["--profile", "v0.26.0", "--site", str(site.path)]
    assert script(line, env=plain_env(cookbook)).returncode == 0  # the stamp, made without a pin
    assert took_fast_path(script(line, env=plain_env(cookbook)))
    st = run_cli("status", "--site", str(site.path), "--json", env={"FIXPACK_COOKBOOK": str(cookbook.root)})
    pinned = json.loads(st.stdout)["fix_set"]["digest"]
    wrong = script(line, env=plain_env(cookbook, FIXPACK_EXPECT_FIX_SET="0" * 16))
    assert wrong.returncode == 1 and not took_fast_path(wrong)
    assert f"this apply would leave fix set {pinned}" in wrong.stderr
    right = script(line, env=plain_env(cookbook, FIXPACK_EXPECT_FIX_SET=pinned))
    assert right.returncode == 0 and not took_fast_path(right) and "3 already applied" in right.stdout
    # a fresh site applied under the pin: its stamp answers the pinned request warm, and only it
    fresh = make_site(tmp_path / "fresh")
    line = ["--profile", "v0.26.0", "--site", str(fresh.path)]
    env = plain_env(cookbook, FIXPACK_EXPECT_FIX_SET=pinned)
    assert script(line, env=env).returncode == 0
    warm = script(line, env=env)
    assert warm.returncode == 0 and took_fast_path(warm)
    assert output(warm) == output(script(line, env={**env, "FIXPACK_NO_FAST_PATH": "1"}))
    other = script(line, env=plain_env(cookbook, FIXPACK_EXPECT_FIX_SET="f" * 16))
    assert other.returncode == 1 and not took_fast_path(other)
    unpinned = script(line, env=plain_env(cookbook))
    assert unpinned.returncode == 0 and not took_fast_path(unpinned)
