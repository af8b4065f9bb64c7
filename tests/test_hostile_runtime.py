"""Issue 56: the overlay's import hook, the runtime check and ``status`` read a state that is not
trusted. An index, a copy or a ``.pyc`` another user could write, an entry that points outside the
overlay or names a module outside the pinned packages, an index of the wrong shape, too deep or
cut short, an installed file that is a FIFO: each is refused in one line (the overlay stays
inactive, vLLM's process stops or, under ``warn``, goes on), nothing outside the overlay is
imported, nothing hangs, and ``status`` does not vouch for what every process would refuse."""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cookbooks import three_fixes
from runs import LOAD, apply_overlay, py

RUN = "import vllm_gaudi.runner as r; print(r.f2())"  # 20 patched, 2 installed
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="making a file another uid owns needs root")


@pytest.fixture
def overlay(cookbook, site, tmp_path: Path) -> Path:
    three_fixes(cookbook)
    folder = tmp_path / "overlay"
    assert apply_overlay(cookbook, site, folder).returncode == 0
    return folder


def index_at(folder: Path) -> Path:
    return folder / "fixpack_runtime_check" / "index.json"


def edit(folder: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(index_at(folder).read_text())
    change(data)
    index_at(folder).write_text(json.dumps(data))


def runner_entry(data: dict[str, Any]) -> dict[str, Any]:
    return next(e for e in data["files"] if e["path"] == "vllm_gaudi/runner.py")


def evil(tmp_path: Path) -> Path:
    """A module that leaves a mark when it is imported."""
    mark = tmp_path / "imported"
    module = tmp_path / "evil" / "evilmod.py"
    module.parent.mkdir(exist_ok=True)
    module.write_text(f"open({str(mark)!r}, 'w').close()\ndef f2():\n    return 666\n")
    return module


def assert_inactive(out, said: str) -> None:
    """The installed module ran, and the hook said why in one line."""
    assert out.returncode == 0 and out.stdout.split() == ["2"], (out.stdout, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fixpack overlay: the index in "), out.stderr
    assert "the overlay is not active" in lines[0] and said in lines[0], lines[0]


def _outside(tmp_path: Path, folder: Path) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        runner_entry(data)["file"] = os.path.relpath(evil(tmp_path), folder)

    return change


def _absolute(tmp_path: Path, folder: Path) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        runner_entry(data)["file"] = str(evil(tmp_path))

    return change


def _stdlib_module(tmp_path: Path, folder: Path) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        entry = runner_entry(data)
        entry.update(path="csv.py", module="csv", file=".fixpack/modules/csv.py")

    return change


def _stdlib_package(tmp_path: Path, folder: Path) -> Callable[[dict[str, Any]], None]:
    return lambda data: data["packages"].append("csv")


def _other_module(tmp_path: Path, folder: Path) -> Callable[[dict[str, Any]], None]:
    return lambda data: runner_entry(data).update(module="vllm_gaudi.batch")


CHANGES = {
    "a file outside the overlay": (_outside, "is not its own place"),
    "an absolute file": (_absolute, "is not its own place"),
    "a module of the standard library": (_stdlib_module, "is not a file of the pinned packages"),
    "a package of the standard library": (_stdlib_package, "name a module that is not a pinned distribution's"),
    "another module than the path's": (_other_module, "is not the module the path names"),
    "files a dict": (lambda t, f: lambda d: d.update(files={"x": 1}), "files is not a list of objects"),
    "files a list of names": (lambda t, f: lambda d: d.update(files=["x"]), "files is not a list of objects"),
    "format true": (lambda t, f: lambda d: d.update(format=True), "index format True"),
    "a sha256 that is not one": (lambda t, f: lambda d: runner_entry(d).update(sha256="zz"), "is not a sha256"),
}


@pytest.mark.parametrize("case", list(CHANGES))
def test_an_index_of_another_shape_leaves_the_overlay_inactive(overlay, site, tmp_path, case):
    make, said = CHANGES[case]
    edit(overlay, make(tmp_path, overlay))
    assert_inactive(py(RUN, overlay, site.path), said)
    assert not (tmp_path / "imported").exists()
    checked = py(LOAD, overlay, site.path)
    assert checked.returncode == 1 and "RuntimeError: fixpack: this process would not run" in checked.stderr
    warned = py(LOAD, overlay, site.path, FIXPACK_RUNTIME_CHECK="warn")
    assert warned.returncode == 0 and "(FAILED, warn only)" in warned.stdout, warned.stderr
    assert not (tmp_path / "imported").exists()


@pytest.mark.parametrize(
    ("raw", "said"),
    [("[" * 100_000, "nested too deep"), ('{"format": 2, "files": [', "Expecting value"), ("", "Expecting value")],
    ids=["100k deep", "cut short", "empty"],
)
def test_an_index_that_cannot_be_parsed_is_one_line_and_warn_goes_on(overlay, site, raw, said):
    index_at(overlay).write_text(raw)
    assert_inactive(py(RUN, overlay, site.path), said)
    warned = py(LOAD, overlay, site.path, FIXPACK_RUNTIME_CHECK="warn")
    assert warned.returncode == 0 and "Traceback" not in warned.stderr, warned.stderr
    assert "(FAILED, warn only)" in warned.stdout
    stopped = py(LOAD, overlay, site.path)
    assert stopped.returncode == 1 and "RecursionError" not in stopped.stderr


def test_an_index_every_user_can_write_is_refused(overlay, site):
    os.chmod(index_at(overlay), 0o666)
    assert_inactive(py(RUN, overlay, site.path), "can be written by every user, which fixpack does not trust")


def test_an_overlay_folder_every_user_can_write_is_refused(overlay, site):
    os.chmod(overlay, 0o777)
    assert_inactive(py(RUN, overlay, site.path), f"{overlay} can be written by every user")


def test_a_folder_writable_by_group_0_is_taken(overlay, site):
    """OpenShift's images: ``chgrp -R 0 DIR && chmod -R g=u DIR`` for an arbitrary uid in group 0."""
    for path in [overlay, *overlay.rglob("*")]:
        os.chown(path, -1, 0) if os.geteuid() == 0 else None
        os.chmod(path, stat.S_IMODE(path.stat().st_mode) | stat.S_IWGRP)
    if any(p.stat().st_gid != 0 for p in [overlay, *overlay.rglob("*")]):
        pytest.skip("the files could not be given to group 0 (not root)")
    out = py(RUN, overlay, site.path)
    assert out.returncode == 0 and out.stdout.split() == ["20"] and out.stderr == "", out.stderr


@root_only
def test_an_index_another_uid_owns_is_refused(overlay, site):
    os.chown(index_at(overlay), 65534, 65534)
    assert_inactive(py(RUN, overlay, site.path), "can be written by uid 65534, its owner")


@root_only
def test_a_copy_writable_by_another_group_is_refused(overlay, site):
    copy = overlay / ".fixpack" / "modules" / "vllm_gaudi" / "runner.py"
    os.chown(copy, 0, 65534)
    os.chmod(copy, 0o664)
    out = py(RUN, overlay, site.path)
    assert out.returncode == 1 and "OverlayDrift: fixpack overlay: " in out.stderr, out.stderr
    assert "can be written by the members of group 65534" in out.stderr
    checked = py(LOAD, overlay, site.path)
    assert checked.returncode == 1 and "can be written by the members of group 65534" in checked.stderr


def test_a_pyc_every_user_can_write_is_refused_or_under_warn_compiled_again(overlay, site):
    copy = overlay / ".fixpack" / "modules" / "vllm_gaudi" / "runner.py"
    pyc = Path(importlib.util.cache_from_source(str(copy)))
    if not pyc.exists():  # this Python writes no bytecode: the one a user planted
        py_compile.compile(str(copy), str(pyc), invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    os.chmod(pyc, 0o666)
    out = py(RUN, overlay, site.path)
    assert out.returncode == 1 and "OverlayDrift: fixpack overlay: " in out.stderr
    assert f"{pyc} can be written by every user" in out.stderr
    warned = py(RUN, overlay, site.path, FIXPACK_RUNTIME_CHECK="warn")
    assert warned.returncode == 0 and warned.stdout.split() == ["20"], warned.stderr


def test_an_installed_file_that_is_a_fifo_does_not_hang(overlay, site):
    installed = site.file("vllm_gaudi/runner.py")
    installed.unlink()
    os.mkfifo(installed)
    out = py(RUN, overlay, site.path)  # py() gives up after 60 s
    assert out.returncode == 1 and "is not the file the overlay" in out.stderr and "absent" in out.stderr
    checked = py(LOAD, overlay, site.path)
    assert checked.returncode == 1 and "the image changed under the overlay" in checked.stderr


def test_a_recorded_fix_set_that_is_not_what_the_index_lists_is_refused(overlay, site, cli):
    edit(overlay, lambda d: d["fix_set"].update(digest="0" * 16))
    checked = py(LOAD, overlay, site.path)
    assert checked.returncode == 1 and "the index records fix set 0000000000000000" in checked.stderr
    status = json.loads(cli("status", "--site", str(site.path), "--overlay", str(overlay), "--json").stdout)
    assert status["fix_set"] is None
    assert any("every vLLM process would refuse to start" in n for n in status["notes"]), status["notes"]


@pytest.mark.parametrize("raw", ['{"format": 99}', '{"format": 2, "mode"', "[" * 100_000])
def test_in_place_status_does_not_vouch_for_an_index_the_check_refuses(cookbook, site, cli, raw):
    three_fixes(cookbook)
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    index_at(site.path).write_text(raw)
    r = cli("status", "--site", str(site.path))
    assert r.exit_code == 0 and "fix set: none (every vLLM process would refuse to start: " in r.stdout, r.stdout
    assert "the runtime index cannot be read" in r.stdout and "Traceback" not in r.output


def test_the_hooks_copy_of_the_rule_on_who_may_write_is_the_index_readers():
    """The hook checks the few files it must trust before it can load index.py with a copy of
    index.py's ``writer``: the two agree on every owner, group and mode."""
    from types import SimpleNamespace

    from fixpack.proofkit import load_function
    from fixpack.runtime import index

    hook = Path(index.__file__).with_name("hook.py")
    copy = load_function(hook, "_writer", {"os": os, "stat": stat})
    for uid in (0, os.geteuid(), 65534):
        for gid in (0, 65534):
            for mode in (0o644, 0o664, 0o666, 0o755, 0o775, 0o777, 0o1777, 0o600):
                st = SimpleNamespace(st_uid=uid, st_gid=gid, st_mode=stat.S_IFREG | mode)
                assert copy(st) == index.writer(st), (uid, gid, oct(mode))
