"""Every patched module is built and compiled in the apply's own process before the first write;
its hash-based bytecode, the code object ``compile`` gives for the new source, is staged with
everything else in the one transaction. A module that does not compile refuses the plan with
nothing written, and a crash at any write point is recovered to wholly before."""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import sys
from pathlib import Path

import pytest
from builders import PRISTINE, SAMPLER, make_site, run_cli

from fixpack.core import rebuild
from fixpack.installation import transaction

BIG = "".join(f"def f{i}(x):\n    return [x * {i} for _ in range(3)]\n\n\n" for i in range(2500))
BIG_PATH = "vllm_gaudi/big.py"
GROWN = BIG + "def grown():\n    return 'patched'\n"
SAMPLED = SAMPLER.replace("return x", "return x + 1")


def big_site(tmp_path: Path):
    files = {**PRISTINE, "vllm-gaudi": {**PRISTINE["vllm-gaudi"], BIG_PATH: BIG}}
    return make_site(tmp_path, files)


def sources(site) -> dict[str, bytes]:
    """Every file's bytes but bytecode, which a rollback may leave removed (the next import compiles)."""
    return {p: c for p, (c, _) in site.snapshot().items() if not p.endswith(".pyc")}


def pyc_of(site, path: str) -> Path:
    return Path(importlib.util.cache_from_source(str(site.file(path))))


@pytest.fixture
def bytecode(monkeypatch):
    """Bytecode written, whatever the suite's default and the caller's shell."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(sys, "pycache_prefix", None)


@pytest.fixture
def stages(monkeypatch) -> list[int]:
    """How many writes each call of the commit's staging staged."""
    calls: list[int] = []
    real = transaction._stage

    def counting(writes, *args):
        calls.append(len(writes))
        return real(writes, *args)

    monkeypatch.setattr(transaction, "_stage", counting)
    return calls


@pytest.fixture
def compiled_here(monkeypatch) -> list[tuple[str, int]]:
    """Each module the rebuild compiles, with the process that compiled it."""
    calls: list[tuple[str, int]] = []
    real = rebuild.compiled

    def counting(path, content):
        calls.append((path, os.getpid()))
        return real(path, content)

    monkeypatch.setattr(rebuild, "compiled", counting)
    return calls


def test_every_module_is_compiled_here_and_its_bytecode_staged_with_the_rest(
    cli, cookbook, tmp_path, bytecode, stages, compiled_here
):
    site = big_site(tmp_path)
    cookbook.fix("grow", {BIG_PATH: (BIG, GROWN)})
    cookbook.fix("sample", {"vllm/sampler.py": (SAMPLER, SAMPLED)})
    cookbook.profile(["grow", "sample"])
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 0, r.stderr
    assert sorted(compiled_here) == sorted([(BIG_PATH, os.getpid()), ("vllm/sampler.py", os.getpid())])
    assert len(stages) == 1  # one staging: sources, bytecode and state together
    for path, source in ((BIG_PATH, GROWN), ("vllm/sampler.py", SAMPLED)):
        data = pyc_of(site, path).read_bytes()
        assert data[:4] == importlib.util.MAGIC_NUMBER
        assert int.from_bytes(data[4:8], "little") == 0b11  # hash-based, checked (PEP 552)
        assert data[8:16] == importlib.util.source_hash(source.encode())
        assert marshal.loads(data[16:]) == compile(source.encode(), path, "exec", dont_inherit=True)
    namespace: dict = {}
    exec(marshal.loads(pyc_of(site, BIG_PATH).read_bytes()[16:]), namespace)
    assert namespace["grown"]() == "patched" and namespace["f7"](2) == [14, 14, 14]
    assert not list(site.path.rglob("*.fixpack-tmp")) and not (site.path / ".fixpack" / "journal").exists()


def test_no_bytecode_is_written_where_python_writes_none(cli, cookbook, tmp_path, compiled_here):
    site = big_site(tmp_path)  # the suite's default: sys.dont_write_bytecode
    cookbook.fix("grow", {BIG_PATH: (BIG, GROWN)})
    cookbook.profile(["grow"])
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 0, r.stderr
    assert [p for p, _ in compiled_here] == [BIG_PATH]  # checked all the same
    assert site.read(BIG_PATH) == GROWN.encode() and not pyc_of(site, BIG_PATH).exists()


def test_a_module_that_does_not_compile_refuses_before_anything_is_staged(cli, cookbook, tmp_path, bytecode, stages):
    site = big_site(tmp_path)
    cookbook.fix("sample", {"vllm/sampler.py": (SAMPLER, SAMPLED)})
    cookbook.fix("new", {"vllm_gaudi/fresh/mod.py": (None, "X = 1\n")})  # a folder the staging would make
    cookbook.fix("break", {BIG_PATH: (BIG, BIG + "def broken(:\n")})
    cookbook.profile(["sample", "new", "break"])
    before = site.snapshot()
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path), "--json")
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    error = out["error"]
    assert error.startswith("break: ") and f"{BIG_PATH}:{BIG.count(chr(10)) + 1}: SyntaxError" in error
    assert error.endswith("nothing was changed")
    assert out["fixes"][0]["id"] == "break" and {f["action"] for f in out["fixes"]} == {"refused"}
    assert stages == []  # refused before the transaction began
    assert site.snapshot() == before  # no temporary file, journal, state, bytecode or new folder
    assert not site.file("vllm_gaudi/fresh").exists()


def test_crash_at_every_write_point_with_bytecode(cookbook, tmp_path):
    cookbook.fix("grow", {BIG_PATH: (BIG, GROWN)})
    cookbook.fix("sample", {"vllm/sampler.py": (SAMPLER, SAMPLED)})
    cookbook.profile(["grow", "sample"])
    env = {"FIXPACK_COOKBOOK": str(cookbook.root), "PYTHONDONTWRITEBYTECODE": ""}  # empty: bytecode written
    journalled = False
    for n in range(1, 100):
        site = big_site(tmp_path / f"crash{n}")
        before = sources(site)
        pyc = pyc_of(site, BIG_PATH)
        args = ["apply", "--profile", "v0.26.0", "--site", str(site.path)]
        r = run_cli(*args, env={**env, "FIXPACK_CRASH_AFTER": str(n)})
        if r.returncode == 0:  # fewer than n writes: it ran to its end
            assert site.read(BIG_PATH) == GROWN.encode()
            assert pyc.read_bytes()[8:16] == importlib.util.source_hash(GROWN.encode())
            break
        assert r.returncode == 99, r.stderr
        index = site.path / ".fixpack" / "journal" / "journal.json"
        if index.exists():
            paths = {e["path"] for e in json.loads(index.read_text())["entries"]}
            journalled |= pyc.relative_to(site.path).as_posix() in paths
        st = run_cli("status", "--site", str(site.path), env=env)
        assert st.returncode == 0, st.stderr
        assert sources(site) == before, f"crash after write {n}"
        assert not list(site.path.rglob("*.fixpack-tmp"))
    else:
        pytest.fail("apply never completed")
    assert journalled  # the bytecode is in the one journal with everything else
