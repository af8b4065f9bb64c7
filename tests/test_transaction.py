"""Crashes at every write point (apply, revert, a commit that fails and its rollback), kill -9 at
random moments, concurrent applies, read-only targets, revert, stale bytecode."""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from builders import BATCH, REPO, SAMPLER, Site, make_site, run_cli
from cookbooks import targets, three_fixes

from fixpack.commands.install import apply as operations
from fixpack.cookbook.catalog import Catalog
from fixpack.errors import EnvironmentProblem
from fixpack.installation.inplace import InPlaceAt


def test_crash_after_every_write_point_leaves_before_or_after(cookbook, tmp_path):
    three_fixes(cookbook)
    env = {"FIXPACK_COOKBOOK": str(cookbook.root)}
    reference = make_site(tmp_path / "reference")
    pristine = targets(reference)
    assert run_cli("apply", "--profile", "v0.26.0", "--site", str(reference.path), env=env).returncode == 0
    patched = targets(reference)
    for n in range(1, 100):
        site = make_site(tmp_path / f"crash{n}")
        r = run_cli(
            "apply", "--profile", "v0.26.0", "--site", str(site.path), env={**env, "FIXPACK_CRASH_AFTER": str(n)}
        )
        if r.returncode == 0:  # the run had fewer than n writes: it completed
            assert targets(site) == patched
            assert n > 5  # journal, 3 backups, 5 targets, manifest: at least this many points were crashed
            break
        assert r.returncode == 99, r.stderr
        # The next command recovers first, and finds the environment wholly before.
        st = run_cli("status", "--site", str(site.path), "--json", env=env)
        assert st.returncode == 0, st.stderr
        assert targets(site) == pristine, f"crash after write {n}"
        assert not (site.path / ".fixpack" / "journal").exists()
        assert json.loads(st.stdout)["fixes"] == []
        # And apply then completes normally.
        assert run_cli("apply", "--profile", "v0.26.0", "--site", str(site.path), env=env).returncode == 0
        assert targets(site) == patched
    else:
        pytest.fail("apply never completed")


def test_crash_during_revert_recovered_by_apply(cookbook, site):
    three_fixes(cookbook)
    env = {"FIXPACK_COOKBOOK": str(cookbook.root)}
    assert run_cli("apply", "--profile", "v0.26.0", "--site", str(site.path), env=env).returncode == 0
    patched = targets(site)
    r = run_cli("revert", "--site", str(site.path), env={**env, "FIXPACK_CRASH_AFTER": "4"})
    assert r.returncode == 99
    r = run_cli("apply", "--profile", "v0.26.0", "--site", str(site.path), "--json", env=env)
    assert r.returncode == 0 and "recovered an interrupted transaction" in r.stderr
    assert targets(site) == patched


def test_two_concurrent_applies(cookbook, site):
    three_fixes(cookbook)
    env = dict(os.environ, PYTHONPATH=str(REPO), FIXPACK_COOKBOOK=str(cookbook.root))
    cmd = [sys.executable, "-m", "fixpack", "apply", "--profile", "v0.26.0", "--site", str(site.path), "--json"]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    actions = sorted(tuple(f["action"] for f in json.loads(o)["fixes"]) for o, _ in outs)
    assert actions == [("already-applied",) * 3, ("applied",) * 3]


def test_lock_timeout_is_an_environment_error(cookbook, site):
    import fcntl

    three_fixes(cookbook)
    fd = os.open(site.path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        r = run_cli(
            "apply",
            "--profile",
            "v0.26.0",
            "--site",
            str(site.path),
            env={"FIXPACK_COOKBOOK": str(cookbook.root), "FIXPACK_LOCK_TIMEOUT": "0.5"},
        )
    finally:
        os.close(fd)
    assert r.returncode == 3 and "another fixpack holds the lock" in r.stderr


def test_revert_restores_exact_bytes_and_named_dependents(cookbook, site):
    base = SAMPLER.replace("return 1.0", "return 0.5")
    cookbook.fix("base", {"vllm/sampler.py": (SAMPLER, base)})
    cookbook.fix("dependent", {"vllm/sampler.py": (base, base + "# needs base\n")}, requires=("base",))
    cookbook.fix("other", {"vllm_gaudi/batch.py": (BATCH, BATCH + "# other\n")})
    cookbook.profile(["base", "dependent", "other"])
    cookbook.lock()
    env = {"FIXPACK_COOKBOOK": str(cookbook.root)}
    pristine = site.snapshot()
    assert run_cli("apply", "--profile", "v0.26.0", "--site", str(site.path), env=env).returncode == 0
    r = run_cli("revert", "base", "--site", str(site.path), "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert {f["id"] for f in json.loads(r.stdout)["fixes"]} == {"base", "dependent"}
    assert site.read("vllm/sampler.py") == SAMPLER.encode()
    assert site.read("vllm_gaudi/batch.py") == (BATCH + "# other\n").encode()
    st = json.loads(run_cli("status", "--site", str(site.path), "--json", env=env).stdout)
    assert st["fixes"] == [{"id": "other", "state": "applied"}]
    assert run_cli("revert", "--site", str(site.path), env=env).returncode == 0
    after = site.snapshot()
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in pristine.items()}


def test_stale_bytecode_removed_after_apply_and_revert(cookbook, site):
    three_fixes(cookbook)
    env = {"FIXPACK_COOKBOOK": str(cookbook.root)}
    source = site.file("vllm_gaudi/runner.py")
    pyc = Path(py_compile.compile(str(source), cfile=None, doraise=True))
    assert pyc.exists()
    assert run_cli("apply", "--profile", "v0.26.0", "--site", str(site.path), env=env).returncode == 0
    assert not pyc.exists()
    py_compile.compile(str(source), doraise=True)
    assert pyc.exists()
    assert run_cli("revert", "--site", str(site.path), env=env).returncode == 0
    assert not pyc.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the apply as another user")
def test_read_only_target_refused_before_any_write(cookbook, tmp_path):
    three_fixes(cookbook)
    shared = Path("/tmp") / f"fixpack-ro-{os.getpid()}"
    site = make_site(shared)
    os.chmod(shared, 0o755)
    for p in shared.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    before = site.snapshot()
    catalog = Catalog.load(cookbook.root)
    # The child cannot read this interpreter's library: a dry run as root imports all it needs.
    assert operations.apply(catalog, operations.ApplyRequest("v0.26.0", (), InPlaceAt(site.path), dry_run=True)).ok
    pid = os.fork()
    if pid == 0:  # the child is the image's non-root user
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            try:
                operations.apply(catalog, operations.ApplyRequest("v0.26.0", (), InPlaceAt(site.path)))
            except EnvironmentProblem as exc:
                code = 3 if "is not writable by uid 65534" in exc.message else 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 3
    assert site.snapshot() == before
    subprocess.run(["rm", "-rf", str(shared)], check=True)


def test_apply_all_runs_apply_and_reports_missing_dependencies(cookbook, site, tmp_path):
    three_fixes(cookbook)
    script = REPO / "fixes" / "apply_all.py"
    env = dict(os.environ, FIXPACK_COOKBOOK=str(cookbook.root))
    env.pop("PYTHONPATH", None)
    r = subprocess.run(
        [sys.executable, str(script), "--profile", "v0.26.0", "--site", str(site.path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "3 applied" in r.stdout
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "sitecustomize.py").write_text(  # an interpreter without click
        "import sys\n"
        "class Absent:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name == 'click':\n"
        "            raise ModuleNotFoundError(\"No module named 'click'\", name=name)\n"
        "sys.meta_path.insert(0, Absent)\n"
    )
    fresh = make_site(tmp_path / "fresh")  # the applied site above takes the fast path, which needs none
    r = subprocess.run(
        [sys.executable, str(script), "--profile", "v0.26.0", "--site", str(fresh.path)],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(shadow)},
        cwd=tmp_path,
    )
    assert r.returncode == 3 and r.stderr.count("\n") == 1
    assert "'click' is missing" in r.stderr and f"-m pip install -r {REPO / 'requirements.txt'}" in r.stderr


def test_a_write_that_fails_midway_is_rolled_back_at_once(cookbook, site, monkeypatch):
    three_fixes(cookbook)
    before = targets(site)
    real_replace = os.replace
    calls = []

    def failing_replace(src, dst):  # the third target replace hits a full disk
        calls.append(dst)
        if len(calls) == 6:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(EnvironmentProblem, match="everything was put back"):
        operations.apply(Catalog.load(cookbook.root), operations.ApplyRequest("v0.26.0", (), InPlaceAt(site.path)))
    monkeypatch.setattr(os, "replace", real_replace)
    assert targets(site) == before
    assert not (site.path / ".fixpack").exists()


def test_crash_after_every_write_point_of_revert_leaves_before_or_after(cookbook, tmp_path):
    three_fixes(cookbook)
    env = {"FIXPACK_COOKBOOK": str(cookbook.root)}
    reference = make_site(tmp_path / "reference")
    pristine = targets(reference)
    assert run_cli("apply", "--profile", "v0.26.0", "--site", str(reference.path), env=env).returncode == 0
    patched = targets(reference)
    for n in range(1, 100):  # the runtime check's files (fixpack.installation.plugin) go with the rest
        site = Site(tmp_path / f"crash{n}" / "site", {d: tmp_path / f"crash{n}" / "site" for d in reference.roots})
        shutil.copytree(reference.path, site.path, symlinks=True)
        r = run_cli("revert", "--site", str(site.path), env={**env, "FIXPACK_CRASH_AFTER": str(n)})
        if r.returncode == 0:  # the run had fewer than n writes: it completed
            assert targets(site) == pristine and not (site.path / ".fixpack").exists()
            assert n > 8  # journal, 4 backups of targets, 3 of pristine copies and the manifest's: all crashed
            break
        assert r.returncode == 99, r.stderr
        st = run_cli("status", "--site", str(site.path), "--json", env=env)
        assert st.returncode == 0, st.stderr
        assert targets(site) == patched, f"crash after write {n}"
        assert not (site.path / ".fixpack" / "journal").exists()
        assert {f["state"] for f in json.loads(st.stdout)["fixes"]} == {"applied"}
        assert run_cli("revert", "--site", str(site.path), env=env).returncode == 0
        assert targets(site) == pristine
    else:
        pytest.fail("revert never completed")


def test_crash_at_every_write_point_of_a_failed_commit_and_its_rollback(cookbook, tmp_path):
    """A commit that fails part way (a stale .pyc that cannot be removed: here a folder in its
    place, which defeats root too) rolls back; a crash at any write of the commit or of the
    rollback is recovered by the next command to wholly before."""
    three_fixes(cookbook)
    env = {"FIXPACK_COOKBOOK": str(cookbook.root)}
    for n in range(1, 100):
        site = make_site(tmp_path / f"crash{n}")
        pristine = targets(site)
        stuck = Path(importlib.util.cache_from_source(str(site.file("vllm_gaudi/batch.py"))))
        (stuck / "inside").mkdir(parents=True)
        r = run_cli(
            "apply", "--profile", "v0.26.0", "--site", str(site.path), env={**env, "FIXPACK_CRASH_AFTER": str(n)}
        )
        if r.returncode == 3:  # fewer than n writes: the commit failed and rolled back by itself
            assert "writing failed, everything was put back" in r.stderr and str(stuck) in r.stderr
            assert targets(site) == pristine and not (site.path / ".fixpack").exists()
            assert n > 10  # the commit's journal, backups and targets, and the rollback's restores: all crashed
            break
        assert r.returncode == 99, r.stderr
        st = run_cli("status", "--site", str(site.path), "--json", env=env)
        assert st.returncode == 0, st.stderr
        assert targets(site) == pristine, f"crash after write {n}"
        assert not (site.path / ".fixpack").exists() and json.loads(st.stdout)["fixes"] == []
    else:
        pytest.fail("the failing apply never ran to its end")


def test_kill_9_at_random_moments_leaves_before_or_after(cookbook, site):
    """SIGKILL at random moments of apply and revert (15 runs, alternating; every other kill aimed
    at the transaction): once the next command (status) has run, the site is wholly before or
    wholly after, and the manifest says which."""
    three_fixes(cookbook)
    env = dict(os.environ, PYTHONPATH=str(REPO), FIXPACK_COOKBOOK=str(cookbook.root))
    pristine = targets(site)
    started = time.monotonic()
    assert run_cli("apply", "--profile", "v0.26.0", "--site", str(site.path), env=env).returncode == 0
    duration = time.monotonic() - started
    patched = targets(site)
    assert run_cli("revert", "--site", str(site.path), env=env).returncode == 0
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    applied, interrupted = False, 0
    for i in range(15):
        args = ["revert"] if applied else ["apply", "--profile", "v0.26.0"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "fixpack", *args, "--site", str(site.path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        if i % 2:  # anywhere in the run
            time.sleep(rnd.uniform(0, duration))
        else:  # inside the transaction, which lasts milliseconds: from the journal's appearance
            while proc.poll() is None and not (site.path / ".fixpack" / "journal").exists():
                time.sleep(0.0005)
            time.sleep(rnd.uniform(0, 0.01))
        proc.kill()
        code = proc.wait()
        interrupted += (site.path / ".fixpack" / "journal").exists()
        st = run_cli("status", "--site", str(site.path), "--json", env=env)
        assert st.returncode == 0, (seed, i, st.stderr)
        now = targets(site)
        assert now in (pristine, patched), f"seed {seed}, run {i} ({args[0]}, exit {code}): a mixed site"
        applied = now == patched
        states = {f["state"] for f in json.loads(st.stdout)["fixes"]}
        assert states == ({"applied"} if applied else set()), (seed, i, states)
        assert not (site.path / ".fixpack" / "journal").exists()
    print(f"kill -9 loop: seed {seed}, {interrupted} of 15 kills left a journal")


def test_a_copy_of_bytes_already_on_disk_is_a_link_to_them(tmp_path):
    from fixpack.installation import transaction

    state, target, other = tmp_path / ".fixpack", tmp_path / "m.py", tmp_path / "o.py"
    target.write_bytes(b"old\n")
    other.write_bytes(b"other\n")
    copy, second = state / "pristine" / "m.py", state / "pristine" / "o.py"
    writes = [
        transaction.Write(target, b"new\n"),
        transaction.Write(copy, b"old\n", same_as=target),  # the target's old bytes, though it changes first
        transaction.Write(second, b"not other\n", same_as=other),  # other bytes: written as a copy
    ]
    old_inode = target.stat().st_ino
    transaction.preflight(state, writes, {"site": tmp_path})
    transaction.commit(state, writes, {"site": tmp_path})
    assert (target.read_bytes(), copy.read_bytes(), second.read_bytes()) == (b"new\n", b"old\n", b"not other\n")
    assert copy.stat().st_ino == old_inode and copy.stat().st_nlink == 1  # the old file, and no journal left
    assert second.stat().st_ino != other.stat().st_ino
