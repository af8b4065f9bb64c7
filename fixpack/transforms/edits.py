"""The edits a transform makes, each a function of a libcst module: anchors by qualified name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .anchors import (
    CstFailed,
    EditError,
    _anchored,
    _code,
    _Definitions,
    _expr_key,
    _lines,
    _norm,
    _replace,
    _statements,
)
from .places import _add_entries, _append_to, _extend_docstring

if TYPE_CHECKING:  # pragma: no cover - for the type checker only
    import libcst as cst

__all__ = ["CstFailed", "EditError", "Edit"]


@dataclass(frozen=True, slots=True)
class Edit:
    """One edit of a file; made by the functions below, which are the authors' API."""

    kind: str
    name: str  # the qualified name it is anchored to ("" for the module)
    args: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.kind}({', '.join(repr(a) for a in (self.name, *self.args))})"

    def run(self, module: cst.Module) -> cst.Module:
        return _KINDS[self.kind](module, self.name, *self.args)


def replace_body(name: str, body: str) -> Edit:
    """Replace the whole body (docstring included) of function or method ``name`` with ``body``."""
    return Edit("replace_body", name, (body,))


def insert_before(name: str, anchor: str, code: str) -> Edit:
    """Insert ``code`` before the one statement in ``name`` whose text (or first line) is ``anchor``."""
    return Edit("insert_before", name, (anchor, code))


def insert_after(name: str, anchor: str, code: str) -> Edit:
    """Insert ``code`` after the one statement in ``name`` whose text (or first line) is ``anchor``."""
    return Edit("insert_after", name, (anchor, code))


def replace_statement(name: str, anchor: str, code: str) -> Edit:
    """Replace the one statement in ``name`` whose text (or first line) is ``anchor``, its block included."""
    return Edit("replace_statement", name, (anchor, code))


def replace_expr(name: str, old: str, new: str) -> Edit:
    """Replace the one expression in ``name`` written ``old`` (layout aside) with ``new``."""
    return Edit("replace_expr", name, (old, new))


def add_import(statement: str) -> Edit:
    """Add an import statement after the module's last top-level import; nothing if it is there."""
    return Edit("add_import", "", (statement,))


def append_to(name: str, code: str, block: str = "") -> Edit:
    """Append ``code`` at the end of the body of ``name`` (a def or class; ``""``: the module) or,
    given ``block``, of the one compound statement in ``name`` whose first line is ``block``
    (``"if TYPE_CHECKING:"``). Upstream lines added at that end stay before it."""
    return Edit("append_to", name, (code, block))


def add_entries(name: str, code: str) -> Edit:
    """Append entries to the dict or list literal assigned to ``name`` (``"VAR"``, ``"Class.VAR"``,
    ``"func.VAR"``), after its last entry. ``code`` is the entries as written inside the literal,
    comments and blank lines included (a leading newline after the opening quotes is dropped)."""
    return Edit("add_entries", name, (code,))


def extend_docstring(name: str, text: str) -> Edit:
    """Append ``text`` to the docstring of ``name`` (``""``: the module's), before its closing quotes,
    indented as those quotes are (a leading newline after the opening quotes is dropped)."""
    return Edit("extend_docstring", name, (text,))


def add_function(code: str, after: str = "") -> Edit:
    """Add a module-level ``def`` (or ``class``) after the top-level definition ``after``, or at the end.

    Nothing happens if the module already defines it exactly so; defined otherwise, it fails.
    """
    return Edit("add_function", after, (code,))


def _replace_body(module: cst.Module, name: str, body: str) -> cst.Module:
    import libcst as cst

    node = _Definitions(module).one(name)
    if not isinstance(node, cst.FunctionDef):
        raise EditError(f"{name!r} is a class, not a function")
    statements = _statements(body, module)
    if isinstance(node.body, cst.IndentedBlock):
        block = node.body.with_changes(body=statements)
    else:  # "def f(): return x" on one line becomes an indented block
        block = cst.IndentedBlock(body=statements)
    return _replace(module, node, node.with_changes(body=block))


def _splice(module: cst.Module, name: str, anchor: str, code: str, start: int, stop: int) -> cst.Module:
    """Put ``code`` in place of ``body[i + start : i + stop]`` of the anchor's block (i: the anchor)."""
    block, i = _anchored(module, name, anchor)
    body = list(block.body)  # type: ignore[attr-defined]
    new = _statements(code, module)
    if stop > start and not new[0].leading_lines:  # a replaced statement's comments stay unless code has its own
        new[0] = new[0].with_changes(leading_lines=body[i].leading_lines)
    body[i + start : i + stop] = new
    return _replace(module, block, block.with_changes(body=body))


# Name nodes that bind or label rather than evaluate: def f, class C, (x=1), a.attr, f(k=v).
_LABELS = {"FunctionDef": "name", "ClassDef": "name", "Param": "name", "Attribute": "attr", "Arg": "keyword"}


def _replace_expr(module: cst.Module, name: str, old: str, new: str) -> cst.Module:
    import libcst as cst

    scope = _Definitions(module).one(name)
    try:
        old_expr, new_expr = cst.parse_expression(old), cst.parse_expression(new)
    except cst.ParserSyntaxError as exc:
        raise EditError(f"an expression does not parse: {exc.message}") from None
    want = _expr_key(old)
    hits: list[cst.BaseExpression] = []
    names: set[int] = set()  # the _LABELS children met so far

    class Visitor(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            label = getattr(node, _LABELS.get(type(node).__name__, ""), None)
            if label is not None:
                names.add(id(label))
            if id(node) in names:
                return False
            # Same node type first: rendering every expression of a large file would be slow.
            if type(node) is type(old_expr) and _expr_key(module.code_for_node(node)) == want:
                hits.append(node)  # type: ignore[arg-type]
            return True

    scope.visit(Visitor())
    where = f"in {name!r}" if name else "in the module"
    if not hits:
        raise EditError(f"no expression {old!r} {where}")
    if len(hits) > 1:
        raise EditError(
            f"expression {old!r} occurs {len(hits)} times {where} (lines {_lines(module, hits)}): ambiguous"
        )
    target = hits[0]
    if not new_expr.lpar:  # keep the parentheses the old expression had around it
        new_expr = new_expr.with_changes(lpar=target.lpar, rpar=target.rpar)
    return _replace(module, target, new_expr)


def _is_import(stmt: cst.CSTNode) -> bool:
    import libcst as cst

    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
    )


def _add_import(module: cst.Module, _name: str, statement: str) -> cst.Module:
    statements = _statements(statement, module)
    if len(statements) != 1 or not _is_import(statements[0]):
        raise EditError("give exactly one import statement")
    line = statements[0]
    want = _norm(_code(module, line))
    if any(_is_import(s) and _norm(_code(module, s)) == want for s in module.body):
        return module
    imports = [i for i, s in enumerate(module.body) if _is_import(s)]
    at = imports[-1] + 1 if imports else _after_docstring(module)
    body = list(module.body)
    body.insert(at, line)
    return module.with_changes(body=body)


def _after_docstring(module: cst.Module) -> int:
    import libcst as cst

    first = module.body[0] if module.body else None
    is_doc = (
        isinstance(first, cst.SimpleStatementLine)
        and isinstance(first.body[0], cst.Expr)
        and isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )
    return 1 if is_doc else 0


def _add_function(module: cst.Module, after: str, code: str) -> cst.Module:
    import libcst as cst

    statements = _statements(code, module)
    if len(statements) != 1 or not isinstance(statements[0], (cst.FunctionDef, cst.ClassDef)):
        raise EditError("give exactly one def or class")
    new = statements[0]
    defined = new.name.value
    existing = [s for s in module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef)) and s.name.value == defined]
    if existing:
        if any(_norm(_code(module, s)) == _norm(_code(module, new)) for s in existing):
            return module
        raise EditError(f"{defined!r} is already defined in this file (line {_lines(module, existing)}), differently")
    if not new.leading_lines:  # PEP 8: two blank lines around a top-level definition
        new = new.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    body = list(module.body)
    if after:
        anchor = _Definitions(module).one(after)
        if anchor not in body:
            raise EditError(f"{after!r} is not a top-level definition")
        body.insert(body.index(anchor) + 1, new)  # type: ignore[arg-type]
    else:
        body.append(new)
    return module.with_changes(body=body)


_KINDS: dict[str, Callable[..., Any]] = {
    "replace_body": _replace_body,
    "insert_before": lambda m, n, a, c: _splice(m, n, a, c, 0, 0),
    "insert_after": lambda m, n, a, c: _splice(m, n, a, c, 1, 1),
    "replace_statement": lambda m, n, a, c: _splice(m, n, a, c, 0, 1),
    "replace_expr": _replace_expr,
    "add_import": _add_import,
    "add_function": _add_function,
    "append_to": _append_to,
    "add_entries": _add_entries,
    "extend_docstring": _extend_docstring,
}
