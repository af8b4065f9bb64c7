"""The slips of a mutant: one small change to one line a fix adds. Pure: text in, slips out.

Each slip is the line as it becomes and the detail of its id (``<=``, ``[k]+1``, ``call:drop2``,
``list:drop2``), by kind (``cmp``, ``index``, ``const``, ``arg``, ``elem``; see ``core.mutants``).
Tokens come from the whole file, so a string is one token (its text is never changed), and comments
and annotations are left out: they run nothing. Displays come from the file's syntax tree.
"""

from __future__ import annotations

import ast
import io
import keyword
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass

from . import patch

__all__ = ["KINDS", "Slip", "line_slips"]

KINDS = ("cmp", "index", "const", "arg", "elem")
_CMP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
_BOOL = {"True": "False", "False": "True", "None": "True"}
_DISPLAYS: dict[type[ast.expr], str] = {ast.List: "list", ast.Tuple: "tuple", ast.Set: "set", ast.Dict: "dict"}
# Subscripts of these are types, not indexing: mutating them says nothing about the fix.
_GENERIC = {"list", "dict", "tuple", "set", "frozenset", "type", "Optional", "Union", "Callable"}


@dataclass(frozen=True, slots=True)
class Slip:
    """One change to one line: the id's detail, and the line as it becomes."""

    detail: str
    text: str


def _annotations(tree: ast.AST) -> Iterator[ast.expr]:
    """Every annotation in ``tree``: of an argument, a return, an annotated assignment."""
    for node in ast.walk(tree):
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            yield node.annotation
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            yield node.returns


def _annotated(tree: ast.AST, lines: list[str]) -> dict[int, list[tuple[int, int]]]:
    """The character columns ``[start, end)`` that annotations take on each line (1-based) of the
    file ``tree`` was parsed from. An annotation only tells a type checker something: its tokens
    are not code to mutate."""

    def column(row: int, byte: int) -> int:  # ast counts UTF-8 bytes, tokenize characters
        return len(lines[row - 1].encode(patch.ENC, patch.ERRORS)[:byte].decode(patch.ENC, patch.ERRORS))

    spans: dict[int, list[tuple[int, int]]] = {}
    for node in _annotations(tree):
        end_row = node.end_lineno or node.lineno
        for row in range(node.lineno, end_row + 1):
            lo = column(row, node.col_offset) if row == node.lineno else 0
            hi = column(row, node.end_col_offset or 0) if row == end_row else len(lines[row - 1])
            spans.setdefault(row, []).append((lo, hi))
    return spans


def _tokens(source: str, annotated: dict[int, list[tuple[int, int]]]) -> dict[int, list[tokenize.TokenInfo]]:
    """The tokens of each line (1-based) that slips look at: a string is one token, so its text is
    never mutated, and comments and ``annotated`` columns are left out; {} if the file does not
    tokenize."""
    by_line: dict[int, list[tokenize.TokenInfo]] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type not in (tokenize.OP, tokenize.NAME, tokenize.NUMBER, tokenize.STRING):
                continue
            row, col = tok.start
            if not any(lo <= col < hi for lo, hi in annotated.get(row, ())):
                by_line.setdefault(row, []).append(tok)
    except (tokenize.TokenError, SyntaxError):
        return {}
    return by_line


def _closing(toks: list[tokenize.TokenInfo], at: int) -> int | None:
    """Index of the bracket closing ``toks[at]`` on the same line, or None."""
    depth = 0
    for i in range(at, len(toks)):
        if toks[i].type != tokenize.OP:
            continue
        if toks[i].string in "([{":
            depth += 1
        elif toks[i].string in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _split(toks: list[tokenize.TokenInfo], sep: str) -> list[list[tokenize.TokenInfo]]:
    """``toks`` split at ``sep`` tokens outside brackets; a trailing empty part is dropped."""
    parts: list[list[tokenize.TokenInfo]] = [[]]
    depth = 0
    for tok in toks:
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        if depth == 0 and tok.type == tokenize.OP and tok.string == sep:
            parts.append([])
        else:
            parts[-1].append(tok)
    return parts[:-1] if len(parts) > 1 and not parts[-1] else parts


def _span(text: str, part: list[tokenize.TokenInfo]) -> str:
    return text[part[0].start[1] : part[-1].end[1]]


def _int(tok: tokenize.TokenInfo) -> int | None:
    """The value of an int literal token; None for anything else (floats and complex numbers stay)."""
    if tok.type != tokenize.NUMBER:
        return None
    try:
        return int(tok.string, 0)
    except ValueError:
        return None


def _is_keyword_arg(part: list[tokenize.TokenInfo]) -> bool:
    return len(part) > 1 and part[1].string == "=" and part[0].type == tokenize.NAME


def _subscript(toks: list[tokenize.TokenInfo], at: int) -> bool:
    """Whether the ``[`` at ``toks[at]`` indexes something (rather than opening a list or a type)."""
    if at == 0:
        return False
    prev = toks[at - 1]
    if prev.type == tokenize.NAME:
        return not keyword.iskeyword(prev.string) and prev.string not in _GENERIC and not prev.string[:1].isupper()
    return prev.type == tokenize.STRING or prev.string in (")", "]")


def _index_slips(text: str, toks: list[tokenize.TokenInfo], handled: set[int]) -> Iterator[Slip]:
    for at, tok in enumerate(toks):
        if tok.string != "[" or not _subscript(toks, at):
            continue
        end = _closing(toks, at)
        inner = toks[at + 1 : end] if end is not None else []
        if not inner or any(t.type == tokenize.STRING for t in inner) or len(_split(inner, ",")) > 1:
            continue
        bounds = _split(inner, ":")
        names = ("lo", "hi") if len(bounds) > 1 else ("",)
        for name, bound in zip(names, bounds):
            if not bound:
                continue
            a, b = bound[0].start[1], bound[-1].end[1]
            literal = _int(bound[0]) if len(bound) == 1 else None
            if literal is not None:
                handled.add(id(bound[0]))
            for step in (1, -1):
                new = f"{literal + step}" if literal is not None else f"{text[a:b]} {'+' if step > 0 else '-'} 1"
                where = text[inner[0].start[1] : inner[-1].end[1]]
                yield Slip(f"[{where}]{name}{step:+d}", f"{text[:a]}{new}{text[b:]}")


def _const_slips(text: str, toks: list[tokenize.TokenInfo], handled: set[int]) -> Iterator[Slip]:
    for tok in toks:
        a, b = tok.start[1], tok.end[1]
        value = _int(tok)
        if value is not None and id(tok) not in handled:
            for step in (1, -1):
                yield Slip(f"{step:+d}", f"{text[:a]}{value + step}{text[b:]}")
        elif tok.type == tokenize.NAME and tok.string in _BOOL:
            new = _BOOL[tok.string]
            yield Slip(f"{tok.string}>{new}", f"{text[:a]}{new}{text[b:]}")


def _cmp_slips(text: str, toks: list[tokenize.TokenInfo]) -> Iterator[Slip]:
    for tok in toks:
        if tok.type == tokenize.OP and tok.string in _CMP:
            a, b = tok.start[1], tok.end[1]
            yield Slip(_CMP[tok.string], f"{text[:a]}{_CMP[tok.string]}{text[b:]}")


def _arg_slips(text: str, toks: list[tokenize.TokenInfo]) -> Iterator[Slip]:
    for at, tok in enumerate(toks):
        if tok.string != "(" or at == 0:
            continue
        prev = toks[at - 1]
        if prev.type == tokenize.NAME:
            if keyword.iskeyword(prev.string) or (at > 1 and toks[at - 2].string in ("def", "class")):
                continue
            callee = prev.string
        elif prev.string in (")", "]"):
            callee = "call"
        else:
            continue
        end = _closing(toks, at)
        if end is None or end == at + 1:
            continue
        args = _split(toks[at + 1 : end], ",")
        if any(not a for a in args):
            continue
        lo, hi = toks[at].end[1], toks[end].start[1]
        spans = [_span(text, a) for a in args]
        for i in range(len(args)):
            kept = spans[:i] + spans[i + 1 :]
            name = args[i][0].string if _is_keyword_arg(args[i]) else str(i + 1)
            yield Slip(f"{callee}:drop{name}", f"{text[:lo]}{', '.join(kept)}{text[hi:]}")
        for i in range(len(args) - 1):
            pair = args[i : i + 2]
            if any(_is_keyword_arg(a) or a[0].string in ("*", "**") for a in pair) or spans[i] == spans[i + 1]:
                continue
            swapped = spans[:i] + [spans[i + 1], spans[i]] + spans[i + 2 :]
            yield Slip(f"{callee}:swap{i + 1}-{i + 2}", f"{text[:lo]}{', '.join(swapped)}{text[hi:]}")


def _not_displays(tree: ast.AST) -> set[int]:
    """The ids of the nodes whose brackets are not displays: everything in a subscript's brackets
    (an index, or a type's arguments) and in an annotation."""
    inside: list[ast.AST] = [node.slice for node in ast.walk(tree) if isinstance(node, ast.Subscript)]
    inside += _annotations(tree)
    return {id(sub) for part in inside for sub in ast.walk(part)}


_Span = tuple[int, int, int, int]  # line, byte column, end line, end byte column (as ast gives them)


def _elements(node: ast.AST) -> tuple[str, list[_Span]] | None:
    """The kind of display ``node`` is and where each of its elements lies; None if it is not a
    display (a store target is not), or one of its elements cannot be placed."""
    if not isinstance(node, ast.expr) or isinstance(getattr(node, "ctx", None), ast.Store | ast.Del):
        return None
    kind = _DISPLAYS.get(type(node))
    if kind is None:
        return None
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):  # a ** unpacking has no node for its stars
            return None
        pairs = [(key, value) for key, value in zip(node.keys, node.values) if key is not None]
    else:
        pairs = [(e, e) for e in getattr(node, "elts", [])]
    return kind, [(a.lineno, a.col_offset, b.end_lineno or b.lineno, b.end_col_offset or 0) for a, b in pairs]


def _drop(line: bytes, kind: str, spans: list[_Span], i: int) -> bytes:
    """``line`` with element ``i`` of the display dropped, with its comma."""
    row, lo, _, hi = spans[i]
    if len(spans) == 2 and kind == "tuple" and all(s[0] == s[2] == row for s in spans):
        (_, s0, _, e0), (_, s1, _, e1) = spans
        kept = line[s1:e1] if i == 0 else line[s0:e0]
        comma = b"" if line[e1:].lstrip().startswith(b",") else b","
        return line[:s0] + kept + comma + line[e1:]  # one element left: still a tuple
    if i + 1 < len(spans) and spans[i + 1][0] == row:
        return line[:lo] + line[spans[i + 1][1] :]
    if i and spans[i - 1][2] == row:
        return line[: spans[i - 1][3]] + line[hi:]
    rest = line[hi:]
    return line[:lo] + (rest.lstrip()[1:] if rest.lstrip().startswith(b",") else rest)


def _elem_slips(tree: ast.AST, lines: list[str], rows: set[int]) -> dict[int, list[Slip]]:
    """The dropped-element slips of the displays in ``tree`` (the whole patched file, as ``lines``)
    whose element sits on one of ``rows``, by row."""
    encoded = [line.rstrip("\r\n").encode(patch.ENC, patch.ERRORS) for line in lines]
    skip = _not_displays(tree)
    out: dict[int, list[Slip]] = {}
    for node in ast.walk(tree):
        display = None if id(node) in skip else _elements(node)
        if display is None:
            continue
        kind, spans = display
        for i, (row, _, end_row, _) in enumerate(spans):
            if row == end_row and row in rows:
                text = _drop(encoded[row - 1], kind, spans, i).decode(patch.ENC, patch.ERRORS)
                out.setdefault(row, []).append(Slip(f"{kind}:drop{i + 1}", text))
    return out


def _line_slips(text: str, toks: list[tokenize.TokenInfo], elems: list[Slip]) -> dict[str, list[Slip]]:
    """Every slip of one line (its text less the terminator, its tokens, its dropped elements), by kind."""
    handled: set[int] = set()
    index = list(_index_slips(text, toks, handled))
    return {
        "cmp": list(_cmp_slips(text, toks)),
        "index": index,
        "const": list(_const_slips(text, toks, handled)),
        "arg": list(_arg_slips(text, toks)),
        "elem": elems,
    }


def line_slips(source: str, rows: set[int]) -> dict[int, dict[str, list[Slip]]]:
    """Every slip of each of ``rows`` (1-based) of ``source``, a whole Python file, by kind."""
    lines = patch.split_lines(source)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # no slips then: only a mutant that compiles is kept anyway
        return {}
    tokens, elems = _tokens(source, _annotated(tree, lines)), _elem_slips(tree, lines, rows)
    return {row: _line_slips(lines[row - 1].rstrip("\r\n"), tokens.get(row, []), elems.get(row, [])) for row in rows}
