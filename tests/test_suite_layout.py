"""The suite's own layout: no module of it imports a test module. What tests share lives in helper
modules (builders.py and those beside it) and fixtures in conftest.py, so that a test module can
be run, moved or deleted alone, and pytest never sees a test module's fixtures by import. The
serve tier starts its servers only through its harness (tests/serve/server.py, vllm_serve.py),
which picks their ports."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(path: Path) -> list[str]:
    """The test modules (``test_*``) ``path`` imports, anywhere in it, with the line of each."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        else:
            continue
        found += [f"{path.name}:{node.lineno} imports {name}" for name in names if name.startswith("test_")]
    return found


def calls(path: Path, names: set[str]) -> list[str]:
    """The calls in ``path`` of a function or class named one of ``names``, with the line of each."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            callee = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if callee in names:
                found.append(f"{path.relative_to(TESTS.parent)}:{node.lineno} calls {callee}")
    return found


def test_no_module_of_the_suite_imports_a_test_module():
    modules = sorted([*TESTS.glob("*.py"), *TESTS.glob("serve/*.py")])
    assert len(modules) > 50  # the suite was found
    assert [found for path in modules for found in imported_test_modules(path)] == []


def test_servers_and_their_ports_come_from_the_serve_harness():
    # the harness's own test builds stand-in servers (not vllm serve) to test the class itself
    harness = {TESTS / "serve" / name for name in ("server.py", "vllm_serve.py", "test_server_harness.py")}
    users = sorted({*TESTS.rglob("*.py"), *(TESTS.parent / "bench").glob("*.py")} - harness)
    assert [found for path in users for found in calls(path, {"Server", "free_port"})] == []
