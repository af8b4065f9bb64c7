"""``apply --overlay DIR``: the same plan built into a folder, nothing written under the site; a
process with DIR on PYTHONPATH imports the patched modules (and only those) from it, in spawned
and forked children too; the image's own sitecustomize still runs; the overlay is swapped in whole
(a crash at any write leaves the old one or the new one) and concurrent applies serialise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from builders import BATCH, REPO, RUNNER, make_site, run_cli
from cookbooks import three_fixes
from runs import SCRIPT, apply_overlay, py
from trees import snapshot


@pytest.fixture
def built(cookbook, site, tmp_path):
    three_fixes(cookbook)
    before = snapshot(site.path)
    overlay = tmp_path / "overlay"
    r = apply_overlay(cookbook, site, overlay)
    assert r.returncode == 0, r.stderr
    assert snapshot(site.path) == before  # nothing written under the site
    return cookbook, site, overlay, r


def test_a_process_with_the_overlay_imports_exactly_the_patched_modules(built):
    book, site, overlay, r = built
    assert f"export PYTHONPATH={overlay}${{PYTHONPATH:+:$PYTHONPATH}}" in r.stderr
    code = """
        import vllm_gaudi, vllm_gaudi.runner as runner, vllm_gaudi.new_module as new, vllm.sampler as sampler
        import vllm.executor as executor
        print(runner.f2(), runner.f7(), new.VALUE, sampler.sample(1))
        print(vllm_gaudi.__file__); print(runner.__file__); print(executor.__file__)
    """
    out = py(code, overlay, site.path)
    assert out.returncode == 0, out.stderr
    values, package, patched, untouched = out.stdout.splitlines()
    assert values == "20 70 3 -1"
    assert package == str(site.path / "vllm_gaudi" / "__init__.py")  # the installed package
    assert patched == str(overlay / ".fixpack" / "modules" / "vllm_gaudi" / "runner.py")
    assert untouched == str(site.path / "vllm" / "executor.py")
    plain = py("import vllm_gaudi.runner as r; print(r.f2(), r.__file__)", site.path)
    assert plain.stdout.split() == ["2", str(site.file("vllm_gaudi/runner.py"))]


def test_tracebacks_show_the_overlay_lines(built):
    book, site, overlay, _ = built
    code = """
        import linecache, vllm_gaudi.runner as r
        code = r.f7.__code__
        print(code.co_filename); print(linecache.getline(code.co_filename, code.co_firstlineno + 1).strip())
    """
    out = py(code, overlay, site.path)
    assert out.returncode == 0, out.stderr
    filename, line = out.stdout.splitlines()
    assert filename == str(overlay / ".fixpack" / "modules" / "vllm_gaudi" / "runner.py") and line == "return 70"


def test_spawned_children_see_the_overlay_forked_ones_inherit_it_and_others_do_not(built):
    book, site, overlay, _ = built
    code = """
        import multiprocessing as mp, os, subprocess, sys

        def where(q):
            import vllm_gaudi.runner as r
            q.put((r.f2(), r.__file__))

        if __name__ == "__main__":
            for method in ("spawn", "fork"):
                ctx = mp.get_context(method)
                q = ctx.Queue()
                p = ctx.Process(target=where, args=(q,))
                p.start(); print(method, *q.get()); p.join()
            env = dict(os.environ, PYTHONPATH=os.environ["PYTHONPATH"].split(os.pathsep, 1)[1])
            code = "import vllm_gaudi.runner as r; print('plain', r.f2(), r.__file__)"
            print(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip())
    """
    script = overlay.parent / "children.py"
    script.write_text(textwrap.dedent(code))
    full = {k: v for k, v in os.environ.items() if not k.startswith("FIXPACK_")}
    full["PYTHONPATH"] = f"{overlay}{os.pathsep}{site.path}"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=full, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = {ln.split()[0]: ln.split()[1:] for ln in out.stdout.splitlines()}
    patched = str(overlay / ".fixpack" / "modules" / "vllm_gaudi" / "runner.py")
    assert lines["spawn"] == ["20", patched]
    assert lines["fork"] == ["20", patched]
    assert lines["plain"] == ["2", str(site.file("vllm_gaudi/runner.py"))]


def test_an_existing_sitecustomize_still_runs(built, tmp_path):
    book, site, overlay, _ = built
    image = tmp_path / "image-lib"
    image.mkdir()
    (image / "sitecustomize.py").write_text("import os\nos.environ['IMAGE_HOOK'] = 'ran'\n")
    code = "import os, vllm_gaudi.runner as r; print(os.environ.get('IMAGE_HOOK'), r.f2())"
    out = py(code, overlay, image, site.path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ran", "20"]


def test_a_module_a_fix_removes_is_gone(cookbook, site, tmp_path):
    cookbook.fix("drop", {"vllm_gaudi/batch.py": (BATCH, None)})
    cookbook.profile(["drop"])
    cookbook.lock()
    overlay = tmp_path / "overlay"
    assert apply_overlay(cookbook, site, overlay).returncode == 0
    out = py("import vllm_gaudi.batch", overlay, site.path)
    assert out.returncode == 1 and "ModuleNotFoundError" in out.stderr and "removed by fixpack" in out.stderr
    assert site.file("vllm_gaudi/batch.py").exists()


def test_the_overlay_carries_hash_based_bytecode(cookbook, site, tmp_path):
    three_fixes(cookbook)
    overlay = tmp_path / "overlay"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    r = subprocess.run(
        [sys.executable, "-m", "fixpack", "apply", "--profile", "v0.26.0", "--site", str(site.path),
         "--overlay", str(overlay)],
        capture_output=True, text=True, env={**env, "PYTHONPATH": str(REPO), "FIXPACK_COOKBOOK": str(cookbook.root)},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (pyc,) = (overlay / ".fixpack" / "modules" / "vllm_gaudi" / "__pycache__").glob("runner.*.pyc")
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b11  # PEP 552, checked
    before = snapshot(overlay)
    out = py("import vllm_gaudi.runner as r; print(r.f2())", overlay, site.path, flags=("-v",))
    assert out.returncode == 0 and "20" in out.stdout
    assert f"code object from '{pyc}'" in out.stderr  # the overlay's .pyc is what loads
    assert snapshot(overlay) == before


def test_status_and_revert_understand_the_overlay(built, cli):
    book, site, overlay, _ = built
    st = json.loads(cli("status", "--site", str(site.path), "--overlay", str(overlay), "--json").stdout)
    assert {f["id"]: f["state"] for f in st["fixes"]} == {"one": "applied", "two": "applied", "three": "applied"}
    in_place = json.loads(cli("status", "--site", str(site.path), "--json").stdout)
    assert in_place["fixes"] == []
    r = cli("revert", "two", "--site", str(site.path), "--overlay", str(overlay), "--json")
    assert r.exit_code == 0, r.output
    assert [f["id"] for f in json.loads(r.stdout)["fixes"]] == ["two"]
    assert py("import vllm_gaudi.runner as r; print(r.f2(), r.f7())", overlay, site.path).stdout.split() == ["20", "7"]
    st = json.loads(cli("status", "--site", str(site.path), "--overlay", str(overlay), "--json").stdout)
    assert {f["id"]: f["state"] for f in st["fixes"]} == {"one": "applied", "three": "applied"}
    assert cli("revert", "--site", str(site.path), "--overlay", str(overlay)).exit_code == 0
    assert not overlay.exists() and not list(overlay.parent.glob(".overlay.fixpack-*"))


def test_a_rerun_changes_nothing_and_a_changed_image_is_refused(built):
    book, site, overlay, _ = built
    before = {p: p.stat().st_mtime_ns for p in overlay.rglob("*")}
    r = apply_overlay(book, site, overlay, "--json")
    assert r.returncode == 0 and {f["action"] for f in json.loads(r.stdout)["fixes"]} == {"already-applied"}
    assert {p: p.stat().st_mtime_ns for p in overlay.rglob("*")} == before
    target = site.file("vllm_gaudi/batch.py")
    target.write_text(target.read_text() + "# another build\n")
    r = apply_overlay(book, site, overlay)
    assert r.returncode == 1 and "drifted" in r.stderr


def test_a_folder_that_is_not_an_overlay_is_never_replaced(cookbook, site, tmp_path):
    three_fixes(cookbook)
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    r = apply_overlay(cookbook, site, folder)
    assert r.returncode == 3 and "not a fixpack overlay" in r.stderr
    assert snapshot(folder) == {"keep.txt": b"mine"}


def test_an_overlay_over_fixes_applied_in_place_is_refused(cookbook, site, tmp_path):
    three_fixes(cookbook)
    env = {"FIXPACK_COOKBOOK": str(cookbook.root)}
    assert run_cli("apply", "--profile", "v0.26.0", "--site", str(site.path), env=env).returncode == 0
    r = apply_overlay(cookbook, site, tmp_path / "overlay")
    assert r.returncode == 1 and "applied in place" in r.stderr and not (tmp_path / "overlay").exists()


def test_crash_at_every_write_point_leaves_the_old_overlay_or_the_new_one(cookbook, tmp_path):
    three_fixes(cookbook)
    site = make_site(tmp_path / "s")
    overlay = tmp_path / "overlay"
    env = {"FIXPACK_COOKBOOK": str(cookbook.root)}
    assert apply_overlay(cookbook, site, overlay).returncode == 0
    old = snapshot(overlay)
    assert run_cli("revert", "two", "--site", str(site.path), "--overlay", str(overlay), env=env).returncode == 0
    new = snapshot(overlay)
    assert apply_overlay(cookbook, site, overlay).returncode == 0
    assert snapshot(overlay).keys() == old.keys()
    for n in range(1, 100):  # revert two: every file of the build, the renames and the removal
        r = run_cli(
            "revert", "two", "--site", str(site.path), "--overlay", str(overlay),
            env={**env, "FIXPACK_CRASH_AFTER": str(n)},
        )  # fmt: skip
        if r.returncode == 0:
            assert n > 10
            break
        assert r.returncode == 99, r.stderr
        st = run_cli("status", "--site", str(site.path), "--overlay", str(overlay), "--json", env=env)
        assert st.returncode == 0, st.stderr
        now = snapshot(overlay)
        assert _same(now, old) or _same(now, new), f"crash after write {n}"
        assert not list(tmp_path.glob(".overlay.fixpack-*"))
        assert apply_overlay(cookbook, site, overlay).returncode == 0
    else:
        pytest.fail("never completed")
    assert _same(snapshot(overlay), new)


def _same(a: dict[str, bytes], b: dict[str, bytes]) -> bool:
    """The same overlay: every file equal but the manifest's time and warm stamp."""
    strip = lambda m: {k: v for k, v in json.loads(m).items() if k not in ("time", "warm")}  # noqa: E731
    key = ".fixpack/manifest.json"
    return a.keys() == b.keys() and all(a[k] == b[k] for k in a if k != key) and strip(a[key]) == strip(b[key])


def test_concurrent_applies_to_one_overlay_serialise(cookbook, site, tmp_path):
    three_fixes(cookbook)
    overlay = tmp_path / "overlay"
    cmd = [sys.executable, "-m", "fixpack", "apply", "--profile", "v0.26.0", "--site", str(site.path)]
    env = dict(os.environ, PYTHONPATH=str(REPO), FIXPACK_COOKBOOK=str(cookbook.root), FIXPACK_NO_FAST_PATH="1")
    procs = [
        subprocess.Popen([*cmd, "--overlay", str(overlay), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
        for _ in range(4)
    ]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    actions = sorted(tuple(f["action"] for f in json.loads(o)["fixes"]) for o, _ in outs)
    assert actions[0] == ("already-applied",) * 3 and actions[-1] == ("applied",) * 3
    assert sum(a == ("applied",) * 3 for a in actions) == 1  # one built it, the others found it built
    assert not list(tmp_path.glob(".overlay.fixpack-*"))
    assert py("import vllm_gaudi.runner as r; print(r.f2())", overlay, site.path).stdout.split() == ["20"]


def test_a_changed_original_stops_the_import_or_warns(built):
    book, site, overlay, _ = built
    target = site.file("vllm_gaudi/runner.py")
    target.write_text(RUNNER.replace("return 5\n", "return 555\n"))  # another build of the image
    out = py("import vllm_gaudi.runner", overlay, site.path)
    assert out.returncode == 1 and "OverlayDrift" in out.stderr and str(target) in out.stderr
    code = "import vllm_gaudi.runner as r; print(r.f5(), r.f2())"
    warned = py(code, overlay, site.path, FIXPACK_RUNTIME_CHECK="warn")
    assert warned.returncode == 0 and warned.stdout.split() == ["555", "2"]  # the installed file, said so
    assert "the image changed under the overlay" in warned.stderr
    untouched = py("import vllm.sampler as s; print(s.sample(1))", overlay, site.path)
    assert untouched.stdout.split() == ["-1"]


def test_exec_applies_then_runs_the_command_with_the_overlay(cookbook, site, tmp_path):
    three_fixes(cookbook)
    overlay = tmp_path / "overlay"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FIXPACK_SITE")}
    env.update(FIXPACK_COOKBOOK=str(cookbook.root), PYTHONPATH=str(site.path))
    command = [sys.executable, "-c", "import vllm_gaudi.runner as r, os; print('ran', r.f2(), os.getpid())"]
    args = [sys.executable, "-X", "importtime", str(SCRIPT), "--profile", "v0.26.0", "--site", str(site.path)]
    first = subprocess.run([*args, "--overlay", str(overlay), "--exec", *command], capture_output=True, text=True,
                           env=env)  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "3 applied" in first.stdout and "ran 20" in first.stdout
    again = subprocess.run([*args, "--overlay", str(overlay), "--exec", *command], capture_output=True, text=True,
                           env=env)  # fmt: skip
    assert again.returncode == 0 and "ran 20" in again.stdout and "3 already applied" in again.stdout
    assert " click" not in again.stderr  # the warm path, then the command
    site.file("vllm_gaudi/batch.py").write_text(BATCH + "# drift\n")
    refused = subprocess.run([*args, "--overlay", str(overlay), "--exec", *command], capture_output=True, text=True,
                             env=env)  # fmt: skip
    assert refused.returncode == 1 and "ran" not in refused.stdout  # || exit 1 holds: no exec


def test_a_dry_run_writes_nothing_and_a_new_folder_is_made(cookbook, site, tmp_path):
    three_fixes(cookbook)
    overlay = tmp_path / "not" / "yet" / "overlay"
    r = apply_overlay(cookbook, site, overlay, "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    assert {f["action"] for f in json.loads(r.stdout)["fixes"]} == {"would-apply"}
    assert not (tmp_path / "not").exists()
    assert apply_overlay(cookbook, site, overlay).returncode == 0 and (overlay / "sitecustomize.py").is_file()


def test_status_and_revert_say_what_became_of_the_overlay(cli, cookbook, site, tmp_path):
    """Issue 57: status of an overlay whose copy drifted said how to use it; revert of every fix
    ended "no overlay at DIR"."""
    three_fixes(cookbook)
    overlay = tmp_path / "ov"
    where = ("--site", str(site.path), "--overlay", str(overlay))
    assert cli("apply", "--profile", "v0.26.0", *where).exit_code == 0
    copy = overlay / ".fixpack" / "modules" / "vllm" / "sampler.py"
    copy.write_bytes(copy.read_bytes() + b"# edited\n")
    r = cli("status", *where)
    assert r.exit_code == 0 and "to use it" not in r.stderr
    assert f"the overlay {overlay} would not run its fixes (1 file drifted): build it again" in r.stderr
    copy.write_bytes(copy.read_bytes().replace(b"# edited\n", b""))
    assert "to use it: export PYTHONPATH=" in cli("status", *where).stderr
    r = cli("revert", *where)
    assert r.exit_code == 0 and f"removed the overlay {overlay}" in r.stderr and not overlay.exists()
    assert f"no overlay at {overlay}" in cli("status", *where).stderr
