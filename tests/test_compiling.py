"""The compile check of several modules at once: the largest compiled in a forked child."""

from __future__ import annotations

import marshal
import os

import pytest

from fixpack.core import compiling

BIG = b"".join(b"def f%d(x):\n    return [x * %d for _ in range(3)]\n\n\n" % (i, i) for i in range(3000))
SOURCES = {"pkg/big.py": BIG, "pkg/small.py": b"X = 1\n", "pkg/data.txt": b"(", "pkg/gone.py": None}


def serial(sources: dict) -> dict:
    return {p: compiling._compile(p, c, True) for p, c in sources.items()}


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(compiling, "_cores", lambda: 2)


def test_a_large_module_goes_to_a_child_at_once_and_the_results_are_the_same(two_cores):
    compiler = compiling.Compiler()
    compiler.add("pkg/small.py", SOURCES["pkg/small.py"])
    assert compiler.child is None  # compiled here, when the results are asked for
    compiler.add("pkg/big.py", BIG)
    assert compiler.child is not None and compiler.child[2] == "pkg/big.py"  # forked at once
    order = ["pkg/small.py", "pkg/big.py"]
    assert compiler.results() == {p: serial(SOURCES)[p] for p in order} and compiler.child is None
    results = compiling.compile_all(SOURCES)
    assert list(results) == list(SOURCES) and results == serial(SOURCES)
    code = marshal.loads(results["pkg/big.py"][0])
    namespace: dict = {}
    exec(code, namespace)
    assert namespace["f7"](2) == [14, 14, 14]
    assert results["pkg/data.txt"] == (None, None) and results["pkg/gone.py"] == (None, None)
    assert compiling.compile_all(SOURCES, keep=False)["pkg/big.py"] == (None, None)


def test_an_error_in_the_child_s_share_names_its_line(two_cores):
    broken = BIG + b"def g(:\n"
    code, problem = compiling.compile_all({"pkg/big.py": broken, "pkg/small.py": b"X = 1\n"})["pkg/big.py"]
    line = BIG.count(b"\n") + 1
    assert code is None and problem is not None and problem.startswith(f"pkg/big.py:{line}: SyntaxError")


def test_a_child_that_dies_is_made_up_for_here(two_cores, monkeypatch):
    parent = os.getpid()
    real = compiling._compile

    def dying(path, content, keep):
        if os.getpid() != parent:
            os._exit(3)
        return real(path, content, keep)

    monkeypatch.setattr(compiling, "_compile", dying)
    assert compiling.compile_all(SOURCES) == serial(SOURCES)


def test_a_check_whose_results_are_not_wanted_leaves_no_child(two_cores):
    compiler = compiling.Compiler()
    compiler.add("pkg/big.py", BIG)
    pid = compiler.child[0]
    compiler.close()
    assert compiler.child is None
    with pytest.raises(ChildProcessError):  # reaped already
        os.waitpid(pid, os.WNOHANG)
