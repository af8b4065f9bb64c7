"""What an edit is anchored on: definitions by qualified name, statements by their text, and
the errors an edit raises when its anchor is missing or ambiguous."""

from __future__ import annotations

import ast
import difflib
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - for the type checker only
    import libcst as cst


class CstFailed(ValueError):
    """An edit could not be made: its anchor is missing or ambiguous, or its code does not parse."""

    def __init__(self, path: str, edit: str, reason: str) -> None:
        super().__init__(f"{path}: {edit}: {reason}")
        self.path, self.edit, self.reason = path, edit, reason


class EditError(Exception):
    """Raised inside an edit; the transform adds the path and the edit's description."""


def _norm(code: str) -> str:
    # Anchors compare by tokens, not layout: an author copies a line without its indentation.
    return " ".join(code.split())


def _expr_key(code: str) -> str | None:
    """An expression's syntax tree as text, so that ``a+1`` finds ``a + 1`` and ``(a + 1)``."""
    try:
        return ast.dump(ast.parse(f"({code})", mode="eval"))
    except SyntaxError:
        return None


def _snippet(code: str, module: cst.Module) -> cst.Module:
    import libcst as cst

    text = textwrap.dedent(code).strip("\n") + "\n"
    try:
        return cst.parse_module(text, config=module.config_for_parsing)
    except cst.ParserSyntaxError as exc:
        raise EditError(f"its code does not parse: {exc.message} (line {exc.raw_line})") from None


def _statements(code: str, module: cst.Module) -> list[cst.SimpleStatementLine | cst.BaseCompoundStatement]:
    """The statements of ``code``, keeping its leading comments (which libcst puts in the header)."""
    snippet = _snippet(code, module)
    if snippet.footer and any(line.comment for line in snippet.footer):
        raise EditError("its code ends with comments, which would be lost: put them before a statement")
    body = list(snippet.body)
    if not body:
        raise EditError("its code has no statements")
    if snippet.header:
        body[0] = body[0].with_changes(leading_lines=(*snippet.header, *body[0].leading_lines))
    return body


class _Definitions:
    """Every class and function of a module by qualified name (nested ones under their parent's name)."""

    def __init__(self, module: cst.Module) -> None:
        import libcst as cst

        found: dict[str, list[cst.CSTNode]] = {}
        stack: list[str] = []

        class Visitor(cst.CSTVisitor):
            def _enter(self, node: cst.FunctionDef | cst.ClassDef) -> None:
                stack.append(node.name.value)
                found.setdefault(".".join(stack), []).append(node)

            def _leave(self, original_node: cst.FunctionDef | cst.ClassDef) -> None:
                stack.pop()

            visit_FunctionDef = visit_ClassDef = _enter  # noqa: N815 - libcst's visitor names
            leave_FunctionDef = leave_ClassDef = _leave  # noqa: N815

        module.visit(Visitor())
        self.module, self.found = module, found

    def one(self, name: str) -> cst.CSTNode:
        """The one node ``name`` defines ("" is the module); fails when there are none or several."""
        if name == "":
            return self.module
        nodes = self.found.get(name, [])
        if not nodes:
            close = difflib.get_close_matches(name, list(self.found), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise EditError(f"{name!r} is not defined in this file{hint}")
        if len(nodes) > 1:
            raise EditError(f"{name!r} is defined {len(nodes)} times (lines {_lines(self.module, nodes)}): ambiguous")
        return nodes[0]


def _lines(module: cst.Module, nodes: Sequence[cst.CSTNode]) -> str:
    """Start lines of ``nodes``, for a message; positions are worked out only when one is needed."""
    from libcst.metadata import MetadataWrapper, PositionProvider

    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return ", ".join(str(positions[n].start.line) for n in nodes if n in positions)


def _code(module: cst.Module, node: cst.CSTNode) -> str:
    if hasattr(node, "leading_lines"):
        node = node.with_changes(leading_lines=())
    return module.code_for_node(node)


def _blocks_in(scope: cst.CSTNode) -> list[tuple[cst.CSTNode, int]]:
    """(block, index) of every statement in ``scope``, at any depth; a block is a Module or IndentedBlock."""
    import libcst as cst

    out: list[tuple[cst.CSTNode, int]] = []

    class Visitor(cst.CSTVisitor):
        def visit_Module(self, node: cst.Module) -> None:  # noqa: N802 - libcst's visitor names
            out.extend((node, i) for i in range(len(node.body)))

        def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:  # noqa: N802
            out.extend((node, i) for i in range(len(node.body)))

    scope.visit(Visitor())
    return out


def _replace(module: cst.Module, old: cst.CSTNode, new: cst.CSTNode) -> cst.Module:
    # libcst types deep_replace's new node as the module's own type, though any node may go in
    return new if old is module else module.deep_replace(old, new)  # type: ignore[return-value,arg-type]


def _anchored(module: cst.Module, name: str, anchor: str) -> tuple[cst.CSTNode, int]:
    scope = _Definitions(module).one(name)
    want = _norm(anchor)
    hits = []
    for block, i in _blocks_in(scope):
        code = _code(module, block.body[i]).strip()  # type: ignore[attr-defined]
        if want in (_norm(code), _norm(code.splitlines()[0] if code else "")):
            hits.append((block, i))
    where = f"in {name!r}" if name else "in the module"
    if not hits:
        raise EditError(f"no statement {anchor!r} {where}")
    if len(hits) > 1:
        lines = _lines(module, [b.body[i] for b, i in hits])  # type: ignore[attr-defined]
        raise EditError(f"statement {anchor!r} occurs {len(hits)} times {where} (lines {lines}): ambiguous")
    return hits[0]
