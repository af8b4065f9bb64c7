"""Code loaded by proofkit keeps the patched file's real name and line numbers, so that
tracebacks and coverage point at the file's own lines, and wrappers fixpack adds never land on one."""

from __future__ import annotations

import ast
import traceback
from pathlib import Path

import pytest

from fixpack.proofkit import added_at, beyond_end, compile_nodes, load_function, load_node

SOURCE = '''\
"""A module."""

import os


class Runner:

    @staticmethod
    def step(x):
        y = x + 1
        if y > 2:
            raise ValueError("too big")
        return y
'''


@pytest.fixture
def module(tmp_path: Path) -> Path:
    path = tmp_path / "mod.py"
    path.write_text(SOURCE, encoding="utf-8")
    return path


def test_load_function_keeps_the_file_name_and_lines(module: Path) -> None:
    fn = load_function(module, "Runner.step")
    assert fn.__code__.co_filename == str(module)
    assert fn.__code__.co_firstlineno == 9  # the def line (the decorator is dropped)
    assert fn(0) == 1
    with pytest.raises(ValueError) as info:
        fn(5)
    frame = traceback.extract_tb(info.tb)[-1]
    assert (frame.filename, frame.lineno) == (str(module), 12)
    assert frame.line == 'raise ValueError("too big")'


def test_a_wrapper_lands_past_the_files_end(module: Path) -> None:
    assert beyond_end(module) == len(SOURCE.splitlines()) + 1
    method = load_node(module, "Runner.step")
    wrapper = added_at(ast.parse("def wrapped(x):\n    pass\n").body[0], module)
    assert isinstance(wrapper, ast.FunctionDef)
    wrapper.body = method.body
    ns: dict = {}
    exec(compile_nodes(module, [wrapper]), ns)
    code = ns["wrapped"].__code__
    assert code.co_firstlineno == beyond_end(module)
    lines = {line for _, _, line in code.co_lines() if line is not None}
    # The body's own lines, and nothing else of the file: the wrapper's line is past its end.
    assert lines - {beyond_end(module)} == {10, 11, 12, 13}
