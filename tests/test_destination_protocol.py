"""The destination protocol (fixpack/installation/destination.py) read from the source: a destination
reads what it holds and places what the pipeline decided. No member is a constant, an identity or
a no-op in either implementation; no callable crosses into one; the two import nothing of the
recogniser and build no file state; the records the pipeline builds are frozen."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from pathlib import Path

import pytest

from fixpack.commands.install.results import FixResult
from fixpack.installation import destination
from fixpack.installation.inplace import InPlace
from fixpack.installation.overlay import Overlay

SITE = Path(destination.__file__).resolve().parent
IMPLEMENTATIONS = {"inplace.py": "InPlace", "overlay.py": "Overlay"}


def _members() -> set[str]:
    cls = destination.Destination
    return {n for n in vars(cls) if not n.startswith("_")} | set(typing.get_type_hints(cls))


def _methods(filename: str) -> dict[str, ast.FunctionDef]:
    tree = ast.parse((SITE / filename).read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == IMPLEMENTATIONS[filename])
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


DECLARED = {"state_dir", "where", "mode", "pythonpath", "own_files"}  # what it is, as data: no decision


def test_the_protocol_is_what_only_a_destination_can_do():
    assert _members() == DECLARED | {"locked", "recover", "read", "place", "preflight", "commit"}


def _trivial(fn: ast.FunctionDef) -> str | None:
    """Why a method's body is a constant, an identity or a no-op (None: it is none of those)."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not body or all(isinstance(s, ast.Pass) for s in body):
        return "a no-op"
    if len(body) == 1 and isinstance(body[0], ast.Return):
        value = body[0].value
        params = {a.arg for a in fn.args.args}
        if value is None or isinstance(value, ast.Constant):
            return "a constant"
        if isinstance(value, ast.Name) and value.id in params:
            return "an identity"
        if isinstance(value, ast.Call) and not value.args and not value.keywords:
            return "a constant (an empty value)"
    return None


@pytest.mark.parametrize("filename", sorted(IMPLEMENTATIONS))
def test_no_member_is_a_constant_an_identity_or_a_no_op(filename):
    methods = _methods(filename)
    members = _members() - DECLARED
    assert members <= set(methods), members - set(methods)
    trivial = {name: why for name in members if (why := _trivial(methods[name]))}
    assert not trivial, trivial


def test_the_checker_sees_what_it_must():
    # the shapes the old members had: a constant, an empty value, an identity
    src = "def a(self, m):\n    return None\ndef b(self, m):\n    return Manifest()\ndef c(self, m):\n    return m\n"
    fns = [n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)]
    assert [_trivial(f) for f in fns] == ["a constant", "a constant (an empty value)", "an identity"]


def test_no_callable_crosses_into_a_destination():
    for name in ("read", "place", "preflight", "commit", "locked", "recover"):
        hints = typing.get_type_hints(getattr(destination.Destination, name))
        for param, hint in hints.items():
            if param != "return":
                assert "Callable" not in str(hint), (name, param, hint)
    for cls in (InPlace, Overlay):
        for name in ("read", "place"):
            params = inspect.signature(getattr(cls, name)).parameters
            assert not any("Callable" in str(p.annotation) or "Stamp" in str(p.annotation) for p in params.values())


@pytest.mark.parametrize("filename", sorted(IMPLEMENTATIONS))
def test_a_destination_neither_recognises_nor_builds_file_state(filename):
    tree = ast.parse((SITE / filename).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
            imported |= {f"{node.module}.{a.name}" for a in node.names}
    assert not any("recognise" in m for m in imported), imported
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & {"Base", "FileState", "base_of", "through_copy"}, names & {"Base", "FileState"}


@pytest.mark.parametrize(
    "record",
    [
        destination.InstalledFile,
        destination.Rebuilt,
        destination.Placement,
        destination.Held,
        destination.Shadow,
        FixResult,
    ],
)
def test_the_records_the_pipeline_builds_are_frozen(record):
    assert dataclasses.is_dataclass(record)
    assert record.__dataclass_params__.frozen  # type: ignore[attr-defined]
