"""Tools for a fix's proof: run the real upstream code on a CPU, without Gaudi.

A proof is ``fixes/<id>/proof.py`` defining ``check(trees: Trees) -> None``. It raises
``AssertionError`` while the bug is present and returns when it is gone; any other exception is an
error in the proof itself. ``trees.vllm_gaudi`` and ``trees.vllm`` are roots in repository layout
(``trees.vllm_gaudi / "vllm_gaudi/..."``), or ``None`` when a tree was not given.

vLLM's own dependencies are not installed where proofs run, and vllm_gaudi imports
``habana_frameworks`` at module level, so a proof usually pulls the function it needs out of the
file with :func:`load_function` and calls it with stand-ins. That runs the tree's real code: on the
pristine tree the bug shows, on the patched tree it does not.

Every proof runs in a process of its own (:mod:`fixpack.proofrun`) so that module stubs and
imports of one proof never leak into another, or into fixpack.
"""

from __future__ import annotations
import __future__

import argparse
import ast
import copy
import functools
import importlib.util
import json
import os
import sys
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

PASSED, BUG_PRESENT, ERROR = 0, 1, 2
T = TypeVar("T", bound=ast.AST)


@dataclass(frozen=True, slots=True)
class Trees:
    vllm_gaudi: Path | None = None
    vllm: Path | None = None


Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _find_node(tree: ast.Module, qualname: str) -> Definition:
    parent: ast.AST = tree
    for part in qualname.split("."):
        found = [
            child
            for child in ast.iter_child_nodes(parent)
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and child.name == part
        ]
        if not found:
            raise LookupError(f"{qualname}: {part!r} not found")
        if len(found) > 1:
            raise LookupError(f"{qualname}: {part!r} is defined {len(found)} times")
        parent = found[0]
    return found[0]


@functools.cache
def _parsed(path: str, stamp: tuple[int, int]) -> tuple[str, ast.Module]:
    text = Path(path).read_text(encoding="utf-8")
    return text, ast.parse(text, filename=path)


def _read_parsed(path: Path | str) -> tuple[str, ast.Module]:
    # Keyed by the file's stamp too, so that a rewritten file is parsed again.
    st = os.stat(path)
    return _parsed(os.path.abspath(path), (st.st_mtime_ns, st.st_size))


def parse_file(path: Path | str) -> ast.Module:
    """The syntax tree of a source file, parsed once per process: a proof calls this for the same
    large module many times (hpu_model_runner.py takes about 0.1 s to parse). The tree is shared:
    copy a node (``copy.deepcopy``) before changing it."""
    return _read_parsed(path)[1]


def load_source(path: Path | str, qualname: str) -> str:
    """The source of a module-level function, class or method, dedented, decorators included."""
    text, tree = _read_parsed(path)
    node = _find_node(tree, qualname)
    lines = text.splitlines(keepends=True)
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return textwrap.dedent("".join(lines[first - 1 : node.end_lineno]))


def load_node(path: Path | str, qualname: str) -> Any:
    """A copy of the node of a module-level function, class or method, from the parse of the whole
    file: its line and column numbers are the file's, so code compiled from it (with
    :func:`compile_nodes`) reports the file's own lines to tracebacks and coverage."""
    return copy.deepcopy(_find_node(_read_parsed(path)[1], qualname))


def beyond_end(path: Path | str) -> int:
    """A line number past the file's last line, for nodes fixpack adds around the file's own."""
    text, _ = _read_parsed(path)
    return len(text.splitlines()) + 1


def added_at(node: T, path: Path | str) -> T:
    """Place every node of ``node`` (a wrapper a proof builds, before any of the file's own nodes go
    into it) past the end of ``path``: compiled under the file's name, a wrapper on a real line
    would make coverage count that line as run, or a traceback point at an unrelated line."""
    line = beyond_end(path)
    for sub in ast.walk(node):
        if "lineno" in sub._attributes:
            sub.lineno = sub.end_lineno = line  # type: ignore[attr-defined]
            sub.col_offset = sub.end_col_offset = 0  # type: ignore[attr-defined]
    return node


def compile_nodes(path: Path | str, nodes: list[ast.stmt]) -> types.CodeType:
    """Compile statements taken from ``path`` (see :func:`load_node`) under the file's real name.

    Every node must carry a position already (the file's, or one from :func:`added_at`): filling in
    missing ones would copy a neighbour's real line onto code the file does not have.
    """
    # Annotations stay unevaluated (as under ``from __future__ import annotations``): they name
    # types from modules a proof cannot import, and a proof runs the code, not its signatures.
    return compile(
        ast.Module(body=nodes, type_ignores=[]),
        str(path),
        "exec",
        flags=__future__.annotations.compiler_flag,
        dont_inherit=True,
    )


def load_function(path: Path | str, qualname: str, namespace: dict[str, Any] | None = None) -> Any:
    """Compile one function (or class) from ``path`` into ``namespace`` and return it.

    ``namespace`` stands in for the module's globals: put there the names the function uses. A
    method comes back as a plain function taking ``self`` first. Decorators are dropped, since
    they usually come from modules that cannot be imported here. The code keeps the file's name
    and line numbers.
    """
    node = load_node(path, qualname)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        node.decorator_list = []
    glb: dict[str, Any] = {"__name__": f"proof:{qualname}", "__builtins__": __builtins__}
    glb.update(namespace or {})
    exec(compile_nodes(path, [node]), glb)
    return glb[qualname.rsplit(".", 1)[-1]]


def load_module(name: str, path: Path | str) -> types.ModuleType:
    """Import the whole file ``path`` as module ``name`` (registered in ``sys.modules``, so that the
    modules loaded after it import it by that name); its own imports must resolve, or be stubbed
    first. No bytecode is written beside the file: the trees a proof runs on stay as given."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.dont_write_bytecode = True
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def stub_modules(*names: str) -> dict[str, types.ModuleType]:
    """Put a MagicMock in ``sys.modules`` for each name (and its parents) that is not importable."""
    stubs: dict[str, types.ModuleType] = {}
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            sub = ".".join(parts[:i])
            if sub not in sys.modules:
                sys.modules[sub] = stubs[sub] = mock.MagicMock(name=sub)
    return stubs


HABANA_MODULES = (
    "habana_frameworks",
    "habana_frameworks.torch",
    "habana_frameworks.torch.core",
    "habana_frameworks.torch.hpu",
    "habana_frameworks.torch.internal",
    "habana_frameworks.torch.internal.bridge_config",
    "habana_frameworks.torch.utils",
    "habana_frameworks.torch.utils.experimental",
)


def _load_check(proof_file: Path) -> Any:
    spec_ns: dict[str, Any] = {"__name__": "fixpack_proof", "__file__": str(proof_file)}
    code = compile(proof_file.read_text(encoding="utf-8"), str(proof_file), "exec", dont_inherit=True)
    exec(code, spec_ns)
    return spec_ns["check"]


def _child(proof_file: Path, trees: Trees) -> int:
    import traceback

    try:
        _load_check(proof_file)(trees)
    except AssertionError as exc:
        print(f"bug present: {exc}", file=sys.stderr)
        return BUG_PRESENT
    except BaseException:  # noqa: BLE001 - any other failure is the proof's own error
        traceback.print_exc()
        return ERROR
    return PASSED


def run_request(request: dict[str, Any]) -> int:
    """Run a proof as ``_request`` describes it, in this (forked) process."""
    os.chdir(request["cwd"])
    sys.path[:0] = request["path"]
    sys.dont_write_bytecode = True  # proofs must not leave __pycache__ in the trees
    torch = sys.modules.get("torch")  # the proof server's: forked, so this child's own settings
    if request.get("threads") and torch is not None:
        torch.set_num_threads(int(request["threads"]))
    trees = Trees(*(None if request[k] is None else Path(request[k]) for k in ("vllm_gaudi", "vllm")))
    return _measured(request.get("coverage"), Path(request["proof"]), trees)


def _measured(coverage_rc: str | None, proof_file: Path, trees: Trees) -> int:
    """Run the proof, under coverage.py when ``coverage_rc`` names its configuration (written by
    ``verify --coverage``: where to write, what to measure, and to measure the worker processes a
    proof starts too). Saved here, not at exit: a forked proof child leaves with ``os._exit``,
    which skips coverage's exit hook."""
    if not coverage_rc:
        return _child(proof_file, trees)
    import coverage

    cov = coverage.Coverage(config_file=coverage_rc, data_suffix=True)
    cov.start()
    try:
        return _child(proof_file, trees)
    finally:
        cov.stop()
        cov.save()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fixpack.proofkit")
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run one proof here: exit 0 fixed, 1 bug present, 2 error")
    run.add_argument("proof", type=Path)
    run.add_argument("--vllm-gaudi", type=Path)
    run.add_argument("--vllm", type=Path)
    run.add_argument("--json", action="store_true")
    run.add_argument("--coverage", metavar="RCFILE", help="measure the proof with this coverage.py configuration")
    ns = parser.parse_args(argv)
    trees = Trees(ns.vllm_gaudi, ns.vllm)
    code = _measured(ns.coverage, ns.proof.resolve(), trees)
    if ns.json:
        print(json.dumps({"code": code}))
    return code


if __name__ == "__main__":
    sys.exit(main())
