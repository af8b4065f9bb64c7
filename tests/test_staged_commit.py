"""The commit stages every new file while the largest module's compile check runs in a child,
and waits for it before the first target changes: a module that does not compile, found then,
leaves nothing behind; the bytecode that comes late is journalled like the rest, and a crash at
any write point is recovered to wholly before."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from builders import PRISTINE, REPO, SAMPLER, make_site, run_cli

from fixpack.core import compiling, rebuild
from fixpack.core.compiling import WORTH_A_CHILD
from fixpack.errors import EnvironmentProblem
from fixpack.site import transaction

BIG = "".join(f"def f{i}(x):\n    return [x * {i} for _ in range(3)]\n\n\n" for i in range(2500))
BIG_PATH = "vllm_gaudi/big.py"
GROWN = BIG + "def grown():\n    return 'patched'\n"

# The CLI in a fresh process, with the second core the child needs whatever this machine has.
TWO_CORES = (
    "import sys; sys.path.insert(0, sys.argv[1]); from fixpack.core import compiling; "
    "compiling._cores = lambda: 2; from fixpack.cli import main; main(sys.argv[2:], prog_name='fixpack')"
)


def big_site(tmp_path: Path):
    assert len(BIG) > WORTH_A_CHILD
    files = {**PRISTINE, "vllm-gaudi": {**PRISTINE["vllm-gaudi"], BIG_PATH: BIG}}
    return make_site(tmp_path, files)


def sources(site) -> dict[str, bytes]:
    """Every file's bytes but bytecode, which a rollback may leave removed (the next import compiles)."""
    return {p: c for p, (c, _) in site.snapshot().items() if not p.endswith(".pyc")}


@pytest.fixture
def two_cores(monkeypatch):
    """A child for the largest module, and bytecode written, whatever this machine and shell have."""
    monkeypatch.setattr(compiling, "_cores", lambda: 2)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


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


def test_the_child_s_bytecode_comes_late_and_is_written(cli, cookbook, tmp_path, two_cores, stages, monkeypatch):
    site = big_site(tmp_path)
    cookbook.fix("grow", {BIG_PATH: (BIG, GROWN)})
    cookbook.fix("sample", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return x + 1"))})
    cookbook.profile(["grow", "sample"])
    parent, here, real = os.getpid(), [], compiling._compile

    def counting(path, content, keep):
        if os.getpid() == parent:
            here.append(path)
        return real(path, content, keep)

    monkeypatch.setattr(compiling, "_compile", counting)
    built_here, real_build = [], rebuild.build

    def building(pristine, chain):
        built_here.append(pristine)
        return real_build(pristine, chain)

    monkeypatch.setattr(rebuild, "build", building)
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path))
    assert r.exit_code == 0, r.stderr
    assert BIG_PATH not in here and "vllm/sampler.py" in here  # the big one was compiled in the child
    assert SAMPLER.encode() in built_here and BIG.encode() not in built_here  # and built there only
    assert len(stages) == 2 and stages[1] == 1  # everything else first, then the child's bytecode alone
    pyc = Path(importlib.util.cache_from_source(str(site.file(BIG_PATH))))
    data = pyc.read_bytes()
    assert int.from_bytes(data[4:8], "little") == 0b11  # hash-based, checked (PEP 552)
    assert data[8:16] == importlib.util.source_hash(GROWN.encode())
    assert not list(site.path.rglob("*.fixpack-tmp")) and not (site.path / ".fixpack" / "journal").exists()


def test_a_module_that_does_not_compile_found_after_staging_leaves_nothing(cli, cookbook, tmp_path, two_cores, stages):
    site = big_site(tmp_path)
    cookbook.fix("sample", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return x + 1"))})
    cookbook.fix("new", {"vllm_gaudi/fresh/mod.py": (None, "X = 1\n")})  # a folder the staging makes
    cookbook.fix("break", {BIG_PATH: (BIG, BIG + "def broken(:\n")})
    cookbook.profile(["sample", "new", "break"])
    before = site.snapshot()
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site.path), "--json")
    assert r.exit_code == 1
    error = json.loads(r.stdout)["error"]
    assert error.startswith("break: ") and f"{BIG_PATH}:{BIG.count(chr(10)) + 1}: SyntaxError" in error
    assert error.endswith("nothing was changed")
    assert len(stages) == 1 and stages[0] > 3  # refused once everything else was staged
    assert site.snapshot() == before  # no temporary file, journal, state or new folder left
    assert not site.file("vllm_gaudi/fresh").exists()


def test_a_late_write_to_a_path_not_checked_is_refused(tmp_path):
    state, target = tmp_path / ".fixpack", tmp_path / "m.py"
    target.write_bytes(b"old\n")
    stray = tmp_path / "elsewhere.py"
    later = transaction.Later((tmp_path / "named.pyc",), lambda: [transaction.Write(stray, b"x")])
    writes = [transaction.Write(target, b"new\n")]
    transaction.check(state, writes, {"site": tmp_path}, later)
    with pytest.raises(EnvironmentProblem, match="not among the paths checked"):
        transaction.commit(state, writes, {"site": tmp_path}, later)
    assert target.read_bytes() == b"old\n" and not stray.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.py"]


def test_crash_at_every_write_point_with_late_bytecode(cookbook, tmp_path):
    cookbook.fix("grow", {BIG_PATH: (BIG, GROWN)})
    cookbook.fix("sample", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return x + 1"))})
    cookbook.profile(["grow", "sample"])
    env = dict(os.environ, PYTHONPATH=str(REPO), FIXPACK_COOKBOOK=str(cookbook.root))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    late_journalled = False
    for n in range(1, 100):
        site = big_site(tmp_path / f"crash{n}")
        before = sources(site)
        pyc = Path(importlib.util.cache_from_source(str(site.file(BIG_PATH))))
        args = ["apply", "--profile", "v0.26.0", "--site", str(site.path)]
        cmd = [sys.executable, "-c", TWO_CORES, str(REPO), *args]
        r = subprocess.run(cmd, capture_output=True, text=True, env={**env, "FIXPACK_CRASH_AFTER": str(n)})
        if r.returncode == 0:  # fewer than n writes: it ran to its end
            assert site.read(BIG_PATH) == GROWN.encode() and pyc.read_bytes()[8:16] == importlib.util.source_hash(
                GROWN.encode()
            )
            break
        assert r.returncode == 99, r.stderr
        index = site.path / ".fixpack" / "journal" / "journal.json"
        if index.exists():
            paths = {e["path"] for e in json.loads(index.read_text())["entries"]}
            late_journalled |= pyc.relative_to(site.path).as_posix() in paths
        st = run_cli("status", "--site", str(site.path), env={"FIXPACK_COOKBOOK": str(cookbook.root)})
        assert st.returncode == 0, st.stderr
        assert sources(site) == before, f"crash after write {n}"
        assert not list(site.path.rglob("*.fixpack-tmp"))
    else:
        pytest.fail("apply never completed")
    assert late_journalled  # some crash fell after the child's bytecode joined the journal
