"""RECORD stays true to what is installed, so that pip uninstall removes what fixes created and
fixpack's own state, and a reinstall starts clean."""

from __future__ import annotations

import base64
import csv
import importlib.metadata as md
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from builders import BATCH, PRISTINE, RUNNER, SAMPLER, make_site, write_dist
from hypothesis import given, settings
from hypothesis import strategies as st

from fixpack.installation.pip_record import render_record, rewrite_record, row_for

EDITS = {
    "vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 33\n")),
    "vllm_gaudi/hpu_new.py": (None, "X = 1\n"),
    "vllm_gaudi/batch.py": (BATCH, None),
}


def pack(cookbook) -> None:
    cookbook.fix("gaudi-fix", EDITS)
    cookbook.fix("sampler-fix", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return x * 2"))})
    cookbook.profile(["gaudi-fix", "sampler-fix"])
    cookbook.lock()


def records(site: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in site.glob("*.dist-info/RECORD")}


def rows(site: Path, dist_info_glob: str) -> dict[str, str | None]:
    """path -> sha256 (hex) of RECORD's rows, as importlib.metadata (and so pip) reads them."""
    (dist_info,) = site.glob(dist_info_glob)
    return {
        f.as_posix(): base64.urlsafe_b64decode(f.hash.value + "=" * (-len(f.hash.value) % 4)).hex() if f.hash else None
        for f in md.Distribution.at(dist_info).files or []
    }


def test_record_lists_what_apply_wrote_and_revert_restores_it_byte_for_byte(cli, cookbook, site):
    pack(cookbook)
    before = records(site.path)
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    import hashlib

    gaudi = rows(site.path, "vllm_gaudi-*.dist-info")
    for path in ("vllm_gaudi/runner.py", "vllm_gaudi/hpu_new.py"):
        assert gaudi[path] == hashlib.sha256(site.read(path)).hexdigest(), path
    assert "vllm_gaudi/batch.py" not in gaudi  # the fix deleted it
    state = rows(site.path, "vllm-0.26.0.dist-info")  # the first distribution by name holds the state
    assert ".fixpack/manifest.json" in state
    assert any(p.startswith(".fixpack/pristine/vllm_gaudi/") for p in state)
    listed = set(gaudi) | set(state)
    on_disk = {p.relative_to(site.path).as_posix() for p in (site.path / ".fixpack").rglob("*") if p.is_file()}
    assert on_disk <= listed, on_disk - listed
    # A partial revert keeps it true; a full one gives pip's bytes back.
    assert cli("revert", "sampler-fix", "--site", str(site.path)).exit_code == 0
    assert rows(site.path, "vllm-0.26.0.dist-info")["vllm/sampler.py"] == hashlib.sha256(SAMPLER.encode()).hexdigest()
    assert cli("revert", "--site", str(site.path)).exit_code == 0
    assert records(site.path) == before


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_pip_uninstall_leaves_nothing_of_fixpack_and_a_reinstall_applies_cleanly(cli, cookbook, tmp_path):
    """A real pip uninstall, of distributions installed in a venv's site-packages."""
    pack(cookbook)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (purelib,) = venv.glob("lib/python*/site-packages")

    def install() -> None:
        for name, files in PRISTINE.items():
            write_dist(purelib, name, "0.26.0", files, commit=None)

    install()
    pristine = sorted(p.relative_to(purelib).as_posix() for p in purelib.rglob("*"))
    assert cli("apply", "--profile", "v0.26.0", "--site", str(purelib)).exit_code == 0
    (purelib / "vllm_gaudi" / "__pycache__").mkdir()  # as a first import leaves it
    (purelib / "vllm_gaudi" / "__pycache__" / "hpu_new.cpython-311.pyc").write_bytes(b"\0")
    python = venv / "bin" / "python"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "uninstall", "-y", "vllm", "vllm-gaudi"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    left = sorted(p.relative_to(purelib).as_posix() for p in purelib.rglob("*"))
    assert not [p for p in left if p.startswith((".fixpack", "vllm"))], left
    install()
    assert sorted(p.relative_to(purelib).as_posix() for p in purelib.rglob("*")) == pristine
    r = cli("apply", "--profile", "v0.26.0", "--site", str(purelib), "--json")
    assert r.exit_code == 0 and {f["action"] for f in json.loads(r.stdout)["fixes"]} == {"applied"}
    st = json.loads(cli("status", "--profile", "v0.26.0", "--site", str(purelib), "--json").stdout)
    assert {f["state"] for f in st["fixes"]} == {"applied"}


def test_an_editable_install_keeps_its_record(cli, cookbook, tmp_path):
    pack(cookbook)
    site = make_site(tmp_path, editable=True)
    before = records(site.path)
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    after = records(site.path)
    gaudi = next(k for k in after if k.startswith("vllm_gaudi"))
    assert after[gaudi] == before[gaudi]  # its files live in the checkout, which RECORD does not list
    assert cli("revert", "--site", str(site.path)).exit_code == 0
    assert records(site.path) == before


PATHS = st.sampled_from(["a/x.py", "a/y.py", "b,c/z.py", 'q"uote.py', "a/x.pyc", "a/x.py.bak"])


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.tuples(PATHS, st.booleans()), max_size=8),
    files=st.dictionaries(PATHS, st.one_of(st.none(), st.binary(max_size=20)), max_size=4),
    crlf=st.booleans(),
    last_newline=st.booleans(),
)
def test_rewrite_record_changes_only_the_rows_of_the_files_written(rows, files, crlf, last_newline):
    """Against csv itself: every row of a file written is rewritten (or dropped when it is
    removed), every other row kept byte for byte, and new files are listed at the end."""
    newline = "\r\n" if crlf else "\n"
    lines = []
    for path, quote_all in rows:
        out = io.StringIO()
        csv.writer(out, lineterminator=newline, quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL).writerow(
            [path, "sha256=old", "3"]
        )
        lines.append(out.getvalue())
    if lines and not last_newline:
        lines[-1] = lines[-1][: -len(newline)]
    text = "".join(lines)
    written = "\r\n" if "\r\n" in text or not text else "\n"  # as the RECORD has it
    got = rewrite_record(text.encode(), files, []).decode()
    expected = []
    for line, (path, _) in zip(lines, rows):
        if path not in files:
            expected.append(line)
        elif files[path] is not None:
            expected.append(render_record([row_for(path, files[path])], written).decode())
    kept = "".join(expected)
    if kept and not kept.endswith("\n"):
        kept += written
    listed = {path for path, _ in rows}
    new = [row_for(p, c) for p, c in files.items() if p not in listed and c is not None]
    assert got == kept + render_record(new, written).decode()
