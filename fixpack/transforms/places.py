"""Edits that append at the end of a named place: a block or body, a dict or list literal, a
docstring. Upstream adds its own lines at those ends too, which breaks a diff's context but not
these anchors."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from .anchors import EditError, _anchored, _Definitions, _lines, _replace, _statements

if TYPE_CHECKING:  # pragma: no cover - for the type checker only
    import libcst as cst


def _verbatim(code: str) -> str:
    """An author's text as given in a triple-quoted string: dedented, less the newline after the quotes."""
    text = textwrap.dedent(code)
    text = text[1:] if text.startswith("\n") else text
    return text.rstrip(" \t\n") + "\n"


def _append_to(module: cst.Module, name: str, code: str, block: str) -> cst.Module:
    import libcst as cst

    target: cst.CSTNode
    if block:
        holder, i = _anchored(module, name, block)
        stmt = holder.body[i]  # type: ignore[attr-defined]
        if not isinstance(stmt, cst.BaseCompoundStatement) or not isinstance(stmt.body, cst.IndentedBlock):
            raise EditError(f"{block!r} is not a compound statement with an indented block")
        target = stmt.body
    else:
        node = _Definitions(module).one(name)
        if node is not module and not isinstance(getattr(node, "body", None), cst.IndentedBlock):
            raise EditError(f"{name!r} has no indented body")
        target = node if node is module else node.body  # type: ignore[attr-defined]
    body = [*target.body, *_statements(code, module)]  # type: ignore[attr-defined]
    return _replace(module, target, target.with_changes(body=body))


def _assigned_literal(module: cst.Module, name: str) -> cst.Dict | cst.List:
    """The dict or list literal assigned to ``name`` ("VAR", "Class.VAR"): exactly one assignment."""
    import libcst as cst

    scope_name, _, var = name.rpartition(".")
    scope = _Definitions(module).one(scope_name)
    hits: list[cst.BaseExpression] = []

    class Visitor(cst.CSTVisitor):
        def _nested(self, node: cst.CSTNode) -> bool:
            return node is scope  # definitions inside the scope are scopes of their own

        visit_FunctionDef = visit_ClassDef = _nested  # noqa: N815 - libcst's visitor names

        def visit_Assign(self, node: cst.Assign) -> None:  # noqa: N802
            if any(isinstance(t.target, cst.Name) and t.target.value == var for t in node.targets):
                hits.append(node.value)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:  # noqa: N802
            if isinstance(node.target, cst.Name) and node.target.value == var and node.value is not None:
                hits.append(node.value)

    if scope is module:
        module.visit(Visitor())
    else:
        scope.visit(Visitor())
    where = f"in {scope_name!r}" if scope_name else "in the module"
    if not hits:
        raise EditError(f"nothing is assigned to {var!r} {where}")
    if len(hits) > 1:
        raise EditError(f"{var!r} is assigned {len(hits)} times {where} (lines {_lines(module, hits)}): ambiguous")
    if not isinstance(hits[0], (cst.Dict, cst.List)):
        raise EditError(f"{name!r} is assigned a {type(hits[0]).__name__}, not a dict or list literal")
    return hits[0]


def _add_entries(module: cst.Module, name: str, code: str) -> cst.Module:
    import libcst as cst

    literal = _assigned_literal(module, name)
    is_dict = isinstance(literal, cst.Dict)
    opening = literal.lbrace if isinstance(literal, cst.Dict) else literal.lbracket
    old = list(literal.elements)
    if not old:
        raise EditError(f"{name!r} is empty: there is no entry to add after (use replace_expr)")
    first_ws = opening.whitespace_after
    if isinstance(first_ws, cst.ParenthesizedWhitespace):  # one entry a line: the entries as given
        text = "\n" + textwrap.indent(_verbatim(code), first_ws.last_line.value)
    else:  # all on one line: so are the new entries
        text = " ".join(_verbatim(code).split())
    braces = "{}" if is_dict else "[]"
    try:
        snippet = cst.parse_module(f"_ = {braces[0]}{text}{braces[1]}\n", config=module.config_for_parsing)
        assignment: Any = snippet.body[0]  # `_ = [...]`: libcst's union types know no more
        new_literal = assignment.body[0].value
    except (cst.ParserSyntaxError, AttributeError, IndexError):
        raise EditError(f"its code is not {'dict' if is_dict else 'list'} entries") from None
    if type(new_literal) is not type(literal) or not new_literal.elements:
        raise EditError(f"its code is not {'dict' if is_dict else 'list'} entries")
    new = list(new_literal.elements)
    new_opening = new_literal.lbrace if isinstance(new_literal, cst.Dict) else new_literal.lbracket
    last = old[-1]
    trailing = isinstance(last.comma, cst.Comma)
    before = last.comma.whitespace_before if isinstance(last.comma, cst.Comma) else cst.SimpleWhitespace("")
    between = new_opening.whitespace_after if "\n" in text else cst.SimpleWhitespace(" ")
    old[-1] = last.with_changes(comma=cst.Comma(whitespace_before=before, whitespace_after=between))
    if trailing and not isinstance(new[-1].comma, cst.Comma):  # keep the literal's trailing comma
        new[-1] = new[-1].with_changes(comma=last.comma)
    return _replace(module, literal, literal.with_changes(elements=[*old, *new]))


def _extend_docstring(module: cst.Module, name: str, text: str) -> cst.Module:
    import libcst as cst

    node = _Definitions(module).one(name)
    body = module.body if node is module else getattr(getattr(node, "body", None), "body", ())
    first = body[0] if body else None
    statement = first.body[0] if isinstance(first, cst.SimpleStatementLine) else None
    doc = statement.value if isinstance(statement, cst.Expr) else None
    if not isinstance(doc, cst.SimpleString) or doc.value[-3:] not in ('"""', "'''"):
        raise EditError(f"{name or 'the module'!r} has no triple-quoted docstring")
    inner, quotes = doc.value[:-3], doc.value[-3:]
    cut = inner.rfind("\n")
    tail = inner[cut + 1 :]
    if cut < 0 or tail.strip():
        raise EditError("its docstring's closing quotes are not on a line of their own")
    added = textwrap.indent(_verbatim(text), tail)
    return _replace(module, doc, doc.with_changes(value=inner[: cut + 1] + added + tail + quotes))
