"""Mutants of a fix's patch: the fix with one hunk left out, or with one small slip in a line it adds.

A proof that catches a bug should also catch a fix that is nearly right. Each mutant is the fix's
diff of one file, changed: a hunk left out (``h2:revert``), or one token of an added line
changed (``h1:+3:cmp:<=``: the third added line of hunk 1, its comparison made ``<=``):

- ``const``: an int literal +1 or -1, ``True`` <-> ``False``, ``None`` -> ``True``;
- ``index``: a subscript ``[k]`` -> ``[k + 1]`` / ``[k - 1]``, a slice bound likewise;
- ``cmp``: ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``;
- ``arg``: one argument of a call dropped, or two positional arguments swapped;
- ``elem``: one element of a list, tuple, set or dict display dropped (``h1:+3:elem:list:drop2``:
  the second element of a list on that line). The element must sit on the added line; a
  subscript (an index or a type's arguments), an annotation and an assignment target are not
  displays.

The slips of a line are ``core.slips``'s. Ids are made from the patch alone (hunks counted across
the fix's files in patch order), so a maintainer can record one in fix.toml as harmless. Only code
is mutated (never strings, comments or annotations); a hunk that changes only comments and
docstrings is not left out; a mutant is kept only if its file still compiles and differs from
the fix's result. Pure: bytes in, mutants out.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import zip_longest

from . import patch
from .fingerprint import of
from .patch import FileDiff, Hunk
from .rebuild import compile_error
from .slips import KINDS, line_slips

__all__ = ["Mutant", "Target", "added_lines", "mutants"]


@dataclass(frozen=True, slots=True)
class Target:
    """One file diff of a fix and the bytes it applies to (in pack order: after the fixes before it)."""

    diff: FileDiff
    before: bytes | None


@dataclass(frozen=True, slots=True)
class Mutant:
    id: str  # stable, from the patch's content: "h2:revert", "h1:+3:cmp:<="
    description: str
    path: str
    diff: FileDiff | None  # the mutated diff of ``path``; None: the fix leaves this file alone
    after: bytes | None  # ``diff`` applied to the target's ``before``


def _added_rows(fd: FileDiff, before: bytes | None) -> list[list[int]]:
    """For each hunk, the 1-based line numbers its added lines have in the patched file.

    Found by applying the diff with each added line replaced by a numbered marker: the engine
    places it exactly as it places the real diff."""
    marked = []
    for k, hunk in enumerate(fd.hunks):
        lines = tuple((tag, f"\x00{k}:{j}\x00\n" if tag == "+" else text) for j, (tag, text) in enumerate(hunk.lines))
        marked.append(replace(hunk, lines=lines))
    out = patch.apply(replace(fd, hunks=tuple(marked)), before)
    rows: list[list[int]] = [[] for _ in fd.hunks]
    for row, line in enumerate(patch.split_lines((out or b"").decode(patch.ENC, patch.ERRORS)), 1):
        if line.startswith("\x00"):
            rows[int(line[1:].split(":", 1)[0])].append(row)
    return rows


def added_lines(targets: Sequence[Target]) -> list[tuple[str, str, int]]:
    """Every line the fix adds, as ``(id, path, row)``: the hunk-relative id its mutants use
    (``h2:+4``, hunks counted across the fix's files as for mutants) and its 1-based row in
    ``path`` as the fix leaves it (applied to ``before``)."""
    out, number = [], 0
    for target in targets:
        for rows in _added_rows(target.diff, target.before):
            number += 1
            out += [(f"h{number}:+{j + 1}", target.diff.path, row) for j, row in enumerate(rows)]
    return out


def _code(content: bytes | None) -> str | None:
    """What of a Python file runs: its syntax tree less docstrings (comments are not in it)."""
    try:
        tree = ast.parse(content or b"")
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                node.body = body[1:]  # type: ignore[attr-defined]
    return ast.dump(tree)


def _with_line(hunk: Hunk, added: int, text: str) -> Hunk:
    """``hunk`` with its ``added``-th added line (0-based) replaced by ``text``."""
    plus = [i for i, (tag, _) in enumerate(hunk.lines) if tag == "+"]
    lines = list(hunk.lines)
    lines[plus[added]] = ("+", text)
    return replace(hunk, lines=tuple(lines))


def _interleave(*queues: Sequence[Mutant]) -> Iterator[Mutant]:
    for group in zip_longest(*queues):
        yield from (m for m in group if m is not None)


def _candidates(targets: Sequence[Target]) -> Iterator[Mutant]:
    """Every mutant, in the order a bounded run takes them: hunk reversions and line slips
    alternate; slips go round the hunks, and within a hunk round the kinds."""
    reverts: list[Mutant] = []
    per_hunk: list[list[Mutant]] = []
    number = 0
    for target in targets:
        fd, path = target.diff, target.diff.path
        after = patch.apply(fd, target.before)
        text = (after or b"").decode(patch.ENC, patch.ERRORS)
        lines = patch.split_lines(text)
        rows = _added_rows(fd, target.before)
        code = _code(after) if path.endswith(".py") else None
        slips = line_slips(text, {row for hunk_rows in rows for row in hunk_rows}) if path.endswith(".py") else {}
        for k, hunk in enumerate(fd.hunks):
            number += 1
            rest = fd.hunks[:k] + fd.hunks[k + 1 :]
            left = replace(fd, hunks=rest) if rest else None
            reverted = target.before if left is None else patch.apply(left, target.before)
            if code is None or _code(reverted) != code:  # a hunk of comments and docstrings runs nothing
                what = f"{path}: hunk {number} (@@ -{hunk.old_start}) left out"
                reverts.append(Mutant(f"h{number}:revert", what, path, left, reverted))
            by_kind: dict[str, list[Mutant]] = {kind: [] for kind in KINDS}
            seen: dict[str, int] = {}
            for j, row in enumerate(rows[k]):
                line = lines[row - 1]
                body = line.rstrip("\r\n")
                for kind, found in slips.get(row, {}).items():
                    for slip in found:
                        base = f"h{number}:+{j + 1}:{kind}:{slip.detail}"
                        seen[base] = seen.get(base, 0) + 1
                        mid = base if seen[base] == 1 else f"{base}#{seen[base]}"
                        new = slip.text + line[len(body) :]
                        hunks = (*fd.hunks[:k], _with_line(hunk, j, new), *fd.hunks[k + 1 :])
                        mutated = replace(fd, hunks=hunks)
                        mutated_after = "".join(lines[: row - 1] + [new] + lines[row:]).encode(patch.ENC, patch.ERRORS)
                        what = f"{path}:{row}: {body.strip()}  ->  {slip.text.strip()}"
                        by_kind[kind].append(Mutant(mid, what, path, mutated, mutated_after))
            per_hunk.append(list(_interleave(*by_kind.values())))
    yield from _interleave(reverts, list(_interleave(*per_hunk)))


def mutants(targets: Sequence[Target]) -> Iterator[Mutant]:
    """The mutants of a fix (its file diffs, each with the bytes it applies to), best spread first.

    Lazy: a bounded run compiles only the mutants it takes. A mutant whose file does not compile,
    or that gives the fix's own result, is skipped."""
    results = {t.diff.path: patch.apply(t.diff, t.before) for t in targets}
    seen: set[tuple[str, str]] = set()
    for mutant in _candidates(targets):
        same = (mutant.path, of(mutant.after))
        if mutant.after == results[mutant.path] or same in seen or compile_error(mutant.path, mutant.after):
            continue
        seen.add(same)
        yield mutant
