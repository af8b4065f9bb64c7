"""Rebuilding a file: apply a chain of changes to the pristine bytes, checking the locked
fingerprints, or reverse one. Pure: no I/O."""

from __future__ import annotations

import functools
from types import CodeType

from ..errors import Refused, UsageError
from ..models import Change
from . import patch
from .bytecode import compile_module
from .fingerprint import of

__all__ = ["parsed", "reverse", "failed", "build", "compiled", "compile_error", "line_counts"]


@functools.lru_cache(maxsize=256)
def _parse_one(text: str) -> patch.FileDiff:
    (fd,) = patch.split_files(text)
    return fd


def parsed(change: Change) -> patch.FileDiff:
    """The change's diff, parsed; an invalid one is the cookbook's error (exit 2), named."""
    try:
        return _parse_one(change.patch)
    except ValueError as exc:
        raise UsageError(
            f"invalid patch of fix {change.fix_id} for {change.path}: {exc}", fix_id=change.fix_id, path=change.path
        ) from None


def reverse(current: bytes | None, changes: list[Change]) -> bytes | None:
    """Undo ``changes`` (applied in this order) from ``current``. Raises HunkFailed."""
    content = current
    for change in reversed(changes):
        content = patch.apply(parsed(change).reversed(), content)
    return content


def failed(change: Change, message: str, details: str = "") -> Refused:
    """The refusal for a change that does not apply or compile."""
    return Refused(message, fix_id=change.fix_id, path=change.path, details=details)


def _locked_run(changes: list[Change], start: int) -> int:
    """The end (exclusive) of the run of changes from ``start`` whose locked fingerprints chain:
    each one's before-hash is the after-hash of the one before it."""
    end = start
    while end < len(changes):
        fp = changes[end].fingerprint
        if fp is None or changes[end].creates or changes[end].deletes:
            break
        if end > start and changes[end - 1].fingerprint.after != fp.before:  # type: ignore[union-attr]
            break
        end += 1
    return end


def _one(change: Change, content: bytes | None) -> bytes | None:
    before = of(content)
    try:
        content = patch.apply(parsed(change), content)
    except patch.HunkFailed as exc:
        raise failed(change, str(exc), exc.nearest) from None
    fp = change.fingerprint
    if fp is not None and before == fp.before and of(content) != fp.after:
        raise failed(change, f"{change.path}: result does not match the locked after-hash (stale lock?)")
    return content


def build(pristine: bytes | None, changes: list[Change]) -> bytes | None:
    """Apply ``changes`` in order to the pristine bytes, checking locked fingerprints that apply.

    A run of changes whose locked hashes chain, starting from bytes with its first before-hash, is
    applied in one pass over the file's lines and checked once, at the end, against its last
    after-hash (the hashes in between follow: the same diffs on the same bytes). Anything else,
    and a run that fails, goes change by change, for the exact message."""
    content, i, checked_until = pristine, 0, 0
    while i < len(changes):
        end = _locked_run(changes, i)
        if i >= checked_until and end - i > 1 and of(content) == changes[i].fingerprint.before:  # type: ignore[union-attr]
            try:
                run = patch.apply_chain([parsed(c) for c in changes[i:end]], content)
            except patch.HunkFailed:
                run = None
            if run is not None and of(run) == changes[end - 1].fingerprint.after:  # type: ignore[union-attr]
                content, i = run, end
                continue
            checked_until = end  # one by one through this run
        content = _one(changes[i], content)
        i += 1
    return content


def compiled(path: str, content: bytes | None) -> tuple[CodeType | None, str | None]:
    """A Python file's code object, or why its new content does not compile. Always compiled,
    even when locked: the image's Python may be another version than the one that ran the lock."""
    if content is None or not path.endswith(".py"):
        return None, None
    try:
        return compile_module(path, content), None
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        return None, f"{path}{f':{line}' if line else ''}: {exc.__class__.__name__}: {getattr(exc, 'msg', exc)}"


def compile_error(path: str, content: bytes | None) -> str | None:
    """Why the new content of a Python file would not compile, or None."""
    return compiled(path, content)[1]


def line_counts(change: Change) -> tuple[int, int]:
    """Lines a change adds and removes."""
    tags = [tag for hunk in parsed(change).hunks for tag, _ in hunk.lines]
    return tags.count("+"), tags.count("-")
