"""The edits a transform makes, each a function of a libcst module: anchors by qualified name."""

from __future__ import annotations

import ast
import difflib
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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


def _statements(code: str, module: cst.Module) -> list[cst.BaseStatement]:
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

            def _leave(self, _node: cst.CSTNode) -> None:
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
    return new if old is module else module.deep_replace(old, new)  # type: ignore[return-value]


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
}


