"""The pure core: from a file's installed bytes, what is applied to it, and the plan's changes,
work out its pristine bytes and the bytes the plan wants. No I/O here.

An installed file is recognised by its hash: the release's pristine hash, the hash the manifest
recorded after the last apply, or (when the manifest is gone) a locked after-hash of a prefix of
the pack's chain. The applied changes are then reversed to recover the pristine bytes exactly, and
the plan's changes applied to them in plan order, each on the result of the one before.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from . import fingerprint
from .applicators import diff
from .fingerprint import State, sha256
from .manifest import FileRecord
from .model import Change


@dataclass(frozen=True)
class Base:
    """What an installed file is: its pristine bytes and the fixes applied on top, or a problem."""

    pristine: bytes | None
    applied: tuple[str, ...]
    state: State  # PRISTINE (nothing applied), APPLIED (some applied), DRIFTED or MISSING
    problem: str = ""


class ChangeFailed(Exception):
    def __init__(self, change: Change, message: str, details: str = "") -> None:
        super().__init__(message)
        self.change, self.message, self.details = change, message, details


@functools.lru_cache(maxsize=256)
def _parse_one(patch: str) -> diff.FileDiff:
    (fd,) = diff.split_files(patch)
    return fd


def parsed(change: Change) -> diff.FileDiff:
    return _parse_one(change.patch)


def _reverse(current: bytes | None, changes: list[Change]) -> bytes | None:
    content = current
    for change in reversed(changes):
        content = diff.apply(parsed(change).reversed(), content)
    return content


def pristine_hash(chain: list[Change]) -> str | None:
    for change in chain:
        if change.fingerprint is not None:
            return change.fingerprint.pristine
    return None


def base_of(
    path: str, current: bytes | None, record: FileRecord | None, chain: list[Change], stored: bytes | None = None
) -> Base:
    """Recognise an installed file. ``chain``: every change the pack makes to it, in pack order;
    ``stored``: the pristine copy fixpack kept when it first patched the file, if any."""
    by_fix = {c.fix_id: c for c in chain}
    have = sha256(current)
    expected = pristine_hash(chain)
    if record is not None and have == record.applied and record.pristine == sha256(stored):
        # The kept copy makes this independent of the patches: they may have changed since.
        return Base(stored, record.fixes, State.APPLIED if record.fixes else State.PRISTINE)
    if record is not None and have == record.applied and all(f in by_fix for f in record.fixes):
        try:
            pristine = _reverse(current, [by_fix[f] for f in record.fixes])
        except diff.HunkFailed as exc:
            return Base(None, (), State.DRIFTED, f"recorded fixes do not reverse cleanly: {exc}")
        if sha256(pristine) != record.pristine:
            return Base(None, (), State.DRIFTED, "reversing the recorded fixes does not give the pristine file")
        return Base(pristine, record.fixes, State.APPLIED if record.fixes else State.PRISTINE)
    if current is None and chain and not chain[0].creates:
        return Base(None, (), State.MISSING, "the file is absent")
    if expected is None or have == expected or (current is None and chain and chain[0].creates):
        # Unlocked changes have no hash to hold the file to; their hunks decide.
        return Base(current, (), State.PRISTINE)
    for k in range(len(chain), 0, -1):  # the manifest is gone: is it a prefix of the pack's chain?
        fp = chain[k - 1].fingerprint
        if fp is not None and have == fp.after:
            try:
                pristine = _reverse(current, chain[:k])
            except diff.HunkFailed:
                break
            if sha256(pristine) == expected:
                return Base(pristine, tuple(c.fix_id for c in chain[:k]), State.APPLIED)
    if record is not None and record.fixes:
        now, then = (have or "absent")[:12], (record.applied or "absent")[:12]
        what = f"changed after fixpack applied {', '.join(record.fixes)} (sha256 {now}, recorded {then})"
        return Base(None, (), State.DRIFTED, what)
    return Base(None, (), State.DRIFTED, "neither the pristine release file nor the patched one")


def explain_drift(current: bytes | None, chain: list[Change]) -> str:
    """How a drifted file differs, seen through the first change's hunks."""
    if not chain:
        return ""
    try:
        diff.apply(parsed(chain[0]), current)
    except diff.HunkFailed as exc:
        return f"{exc}\n{exc.nearest}".rstrip()
    return "every hunk of the first change still matches; the difference is elsewhere in the file"


def explain_edit(path: str, expected: bytes | None, current: bytes | None, limit: int = 40) -> str:
    """How a patched file was edited since: the diff from what fixpack left to what is there."""
    import difflib

    a = [] if expected is None else expected.decode(diff.ENC, diff.ERRORS).splitlines()
    b = [] if current is None else current.decode(diff.ENC, diff.ERRORS).splitlines()
    lines = list(difflib.unified_diff(a, b, f"{path} as fixpack left it", f"{path} now", lineterm="", n=2))
    more = f"\n... ({len(lines) - limit} more lines)" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more


def locked_chain(pristine: bytes | None, changes: list[Change]) -> bool:
    """Whether ``changes`` are a run of the locked chain starting at ``pristine``: each change's
    locked before-hash is the after-hash of the one before it, the first's is ``pristine``'s."""
    if not changes or pristine is None or any(c.fingerprint is None or c.creates or c.deletes for c in changes):
        return False
    if fingerprint.of(pristine) != changes[0].fingerprint.before:  # type: ignore[union-attr]
        return False
    return all(a.fingerprint.after == b.fingerprint.before for a, b in zip(changes, changes[1:]))  # type: ignore[union-attr]


def build(pristine: bytes | None, changes: list[Change]) -> bytes | None:
    """Apply ``changes`` in order to the pristine bytes, checking locked fingerprints that apply.

    A run of the locked chain is applied in one pass over the file's lines and checked once, at
    the end, against the last locked after-hash (the hashes in between follow: the same diffs on
    the same bytes); on any mismatch the changes are applied one by one, for the exact message."""
    if locked_chain(pristine, changes):
        try:
            content = diff.apply_chain([parsed(c) for c in changes], pristine)  # type: ignore[arg-type]
        except diff.HunkFailed:
            content = None
        if content is not None and fingerprint.of(content) == changes[-1].fingerprint.after:  # type: ignore[union-attr]
            return content
    content = pristine
    for change in changes:
        before = fingerprint.of(content)
        try:
            content = diff.apply(parsed(change), content)
        except diff.HunkFailed as exc:
            raise ChangeFailed(change, str(exc), exc.nearest) from None
        fp = change.fingerprint
        if fp is not None and before == fp.before and fingerprint.of(content) != fp.after:
            raise ChangeFailed(change, f"{change.path}: result does not match the locked after-hash (stale lock?)")
    return content


def compile_error(path: str, content: bytes | None) -> str | None:
    """Why the new content of a Python file would not compile, or None. Always compiled, even
    when locked: the image's Python may be another version than the one that ran the lock."""
    if content is None or not path.endswith(".py"):
        return None
    try:
        compile(content, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        return f"{path}{f':{line}' if line else ''}: {exc.__class__.__name__}: {getattr(exc, 'msg', exc)}"
    return None


def line_counts(change: Change) -> tuple[int, int]:
    """Lines a change adds and removes."""
    tags = [tag for hunk in parsed(change).hunks for tag, _ in hunk.lines]
    return tags.count("+"), tags.count("-")
