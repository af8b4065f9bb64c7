"""The compile check of several modules at once: the largest built and compiled in a forked child."""

from __future__ import annotations

import marshal
import os

import pytest

from fixpack.core import compiling

BIG = b"".join(b"def f%d(x):\n    return [x * %d for _ in range(3)]\n\n\n" % (i, i) for i in range(3000))
SOURCES = {"pkg/big.py": BIG, "pkg/small.py": b"X = 1\n", "pkg/data.txt": b"(", "pkg/gone.py": None}


def serial(sources: dict) -> dict:
    return {p: compiling._compile(p, c, True) for p, c in sources.items()}


def compile_all(sources: dict, keep: bool = True) -> dict:
    """As apply uses the compiler: the largest module ahead in a child, every module added."""
    compiler = compiling.Compiler(keep)
    largest = max(sources, key=lambda p: len(sources[p] or b""))
    compiler.ahead(largest, lambda: sources[largest])
    for path, content in sources.items():
        compiler.add(path, content)
    return compiler.results()


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(compiling, "_cores", lambda: 2)


def compiled_here(monkeypatch) -> list[str]:
    """The modules this process compiles itself (not the child)."""
    parent, real, here = os.getpid(), compiling._compile, []

    def counting(path, content, keep):
        if os.getpid() == parent:
            here.append(path)
        return real(path, content, keep)

    monkeypatch.setattr(compiling, "_compile", counting)
    return here


def test_the_largest_is_built_and_compiled_in_a_child_and_the_results_are_the_same(two_cores, monkeypatch):
    expected = serial(SOURCES)
    here = compiled_here(monkeypatch)
    compiler = compiling.Compiler()
    compiler.ahead("pkg/big.py", lambda: BIG)
    assert compiler.pending == "pkg/big.py"  # started before anything is added
    compiler.add("pkg/small.py", SOURCES["pkg/small.py"])
    compiler.add("pkg/big.py", BIG)
    order = ["pkg/small.py", "pkg/big.py"]
    assert compiler.results() == {p: expected[p] for p in order} and compiler.child is None
    assert here == ["pkg/small.py"]  # the child's code was used
    here.clear()
    results = compile_all(SOURCES)
    assert list(results) == list(SOURCES) and results == expected
    assert "pkg/big.py" not in here
    code = marshal.loads(results["pkg/big.py"][0])
    namespace: dict = {}
    exec(code, namespace)
    assert namespace["f7"](2) == [14, 14, 14]
    assert results["pkg/data.txt"] == (None, None) and results["pkg/gone.py"] == (None, None)
    assert compile_all(SOURCES, keep=False)["pkg/big.py"] == (None, None)


def test_the_child_s_code_is_used_only_for_the_bytes_built_here(two_cores, monkeypatch):
    here = compiled_here(monkeypatch)
    compiler = compiling.Compiler()
    compiler.ahead("pkg/big.py", lambda: BIG + b"EXTRA = 1\n")  # the child made other bytes
    compiler.add("pkg/big.py", BIG)
    code, problem = compiler.results()["pkg/big.py"]
    assert here == ["pkg/big.py"] and problem is None  # compiled again, here
    namespace: dict = {}
    exec(marshal.loads(code), namespace)
    assert "EXTRA" not in namespace


def test_a_child_that_cannot_build_is_made_up_for_here(two_cores, monkeypatch):
    expected = serial(SOURCES)["pkg/big.py"]
    here = compiled_here(monkeypatch)

    def broken() -> bytes:
        raise ValueError("a change does not apply")

    compiler = compiling.Compiler()
    compiler.ahead("pkg/big.py", broken)
    compiler.add("pkg/big.py", BIG)
    assert compiler.results() == {"pkg/big.py": expected} and here == ["pkg/big.py"]


def test_one_core_starts_no_child(monkeypatch):
    monkeypatch.setattr(compiling, "_cores", lambda: 1)
    compiler = compiling.Compiler()
    compiler.ahead("pkg/big.py", lambda: BIG)
    assert compiler.child is None


def test_an_error_in_the_child_s_share_names_its_line(two_cores):
    broken = BIG + b"def g(:\n"
    code, problem = compile_all({"pkg/big.py": broken, "pkg/small.py": b"X = 1\n"})["pkg/big.py"]
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
    assert compile_all(SOURCES) == serial(SOURCES)


def test_a_check_whose_results_are_not_wanted_leaves_no_child(two_cores):
    compiler = compiling.Compiler()
    compiler.ahead("pkg/big.py", lambda: BIG)
    assert compiler.child is not None
    pid = compiler.child.pid
    compiler.close()
    assert compiler.child is None
    with pytest.raises(ChildProcessError):  # reaped already
        os.waitpid(pid, os.WNOHANG)


def test_the_child_s_content_is_taken_instead_of_building_it_again(two_cores):
    built_here = []

    def make() -> bytes:
        built_here.append(os.getpid())
        return BIG

    compiler = compiling.Compiler()
    compiler.ahead("pkg/big.py", make)
    assert compiler.built("pkg/big.py", make) == BIG and built_here == []  # the child's bytes
    assert compiler.built("pkg/small.py", lambda: b"X = 1\n") == b"X = 1\n"  # not the child's: made here
    compiler.add("pkg/big.py", BIG)
    assert compiler.results() == {"pkg/big.py": serial(SOURCES)["pkg/big.py"]}


def test_a_child_that_cannot_build_leaves_the_building_here(two_cores):
    def broken() -> bytes:
        raise ValueError("a change does not apply")

    compiler = compiling.Compiler()
    compiler.ahead("pkg/big.py", broken)
    with pytest.raises(ValueError, match="does not apply"):  # made here: the same error, raised here
        compiler.built("pkg/big.py", broken)
    compiler.close()
    assert compiler.child is None
