"""The statement of the tree's ``Scheduler.update_from_output`` that advances a request's grammar,
for proofs that run it at its own lines (``compile_nodes``), and a logger that keeps what it says.

Used by the proofs of min-tokens-grammar, grammar-end-stops and grammar-no-token. Proofs import it
as ``fixes._support.scheduler`` (the cookbook root is on ``sys.path``).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from fixpack.proofkit import load_node


def advance_block(path: Path) -> ast.stmt:
    """The statement of Scheduler.update_from_output that advances the grammar."""
    method = load_node(path, "Scheduler.update_from_output")
    found = [
        node for node in ast.walk(method) if isinstance(node, ast.If) and "should_advance" in ast.unparse(node.test)
    ]
    if len(found) != 1:
        raise RuntimeError(f"{path}: {len(found)} grammar advance blocks in update_from_output")
    return found[0]


class Logger:
    """vLLM's logger as the block calls it: each error and warning kept, formatted."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, msg: str, *args: Any) -> None:
        self.errors.append(msg % args)

    def warning(self, msg: str, *args: Any) -> None:
        self.errors.append(msg % args)
