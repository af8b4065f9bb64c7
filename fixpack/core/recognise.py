"""Recognising an installed file: from its bytes, what the manifest recorded and the pack's chain
of changes to it, work out its pristine bytes and which fixes are applied on top. Pure: no I/O.

An installed file is recognised by its hash: the release's pristine hash, the hash the manifest
recorded after the last apply, or (when the manifest is gone) a locked after-hash of a prefix of
the pack's chain. The applied changes are then reversed to recover the pristine bytes exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models import Change, FileEntry, FileState
from . import patch
from .fingerprint import sha256
from .rebuild import parsed, reverse

__all__ = ["Base", "base_of", "through_copy", "pristine_hash", "explain_drift", "explain_edit"]


@dataclass(frozen=True, slots=True)
class Base:
    """What an installed file is: its pristine bytes and the fixes applied on top, or a problem."""

    pristine: bytes | None
    applied: tuple[str, ...]
    state: FileState  # PRISTINE (nothing applied), APPLIED (some applied), DRIFTED or MISSING
    problem: str = ""


def pristine_hash(chain: list[Change]) -> str | None:
    for change in chain:
        if change.fingerprint is not None:
            return change.fingerprint.pristine
    return None


def base_of(
    path: str, current: bytes | None, record: FileEntry | None, chain: list[Change], stored: bytes | None = None
) -> Base:
    """Recognise an installed file. ``chain``: every change the pack makes to it, in pack order;
    ``stored``: the pristine copy fixpack kept when it first patched the file, if any."""
    by_fix = {c.fix_id: c for c in chain}
    have = sha256(current)
    expected = pristine_hash(chain)
    if record is not None and have == record.applied and record.pristine == sha256(stored):
        # The kept copy makes this independent of the patches: they may have changed since.
        return Base(stored, record.fixes, FileState.APPLIED if record.fixes else FileState.PRISTINE)
    if record is not None and have == record.applied and all(f in by_fix for f in record.fixes):
        try:
            pristine = reverse(current, [by_fix[f] for f in record.fixes])
        except patch.HunkFailed as exc:
            return Base(None, (), FileState.DRIFTED, f"recorded fixes do not reverse cleanly: {exc}")
        if sha256(pristine) != record.pristine:
            return Base(None, (), FileState.DRIFTED, "reversing the recorded fixes does not give the pristine file")
        return Base(pristine, record.fixes, FileState.APPLIED if record.fixes else FileState.PRISTINE)
    if current is None and chain and not chain[0].creates:
        return Base(None, (), FileState.MISSING, "the file is absent")
    if expected is None or have == expected or (current is None and chain and chain[0].creates):
        # Unlocked changes have no hash to hold the file to; their hunks decide.
        return Base(current, (), FileState.PRISTINE)
    for k in range(len(chain), 0, -1):  # the manifest is gone: is it a prefix of the pack's chain?
        fp = chain[k - 1].fingerprint
        if fp is not None and have == fp.after:
            try:
                pristine = reverse(current, chain[:k])
            except patch.HunkFailed:
                break
            if sha256(pristine) == expected:
                return Base(pristine, tuple(c.fix_id for c in chain[:k]), FileState.APPLIED)
    if record is not None and record.fixes:
        now, then = (have or "absent")[:12], (record.applied or "absent")[:12]
        what = f"changed after fixpack applied {', '.join(record.fixes)} (sha256 {now}, recorded {then})"
        return Base(None, (), FileState.DRIFTED, what)
    return Base(None, (), FileState.DRIFTED, "neither the pristine release file nor the patched one")


def through_copy(
    original: bytes | None, copy: str | None, applied: str | None, pristine: str | None, fixes: tuple[str, ...]
) -> Base:
    """An installed file a copy shadows (an overlay's), as a process that runs the copy sees it:
    drifted when the copy (sha256 ``copy``, recorded as ``applied``) or the installed ``original``
    it was built over (sha256 ``pristine``) changed since; else the original with ``fixes`` applied."""
    if copy != applied:
        return Base(None, (), FileState.DRIFTED, "the overlay's copy changed")
    if sha256(original) != pristine:
        return Base(None, (), FileState.DRIFTED, "the image changed under the overlay")
    return Base(original, fixes, FileState.APPLIED if fixes else FileState.PRISTINE)


def explain_drift(current: bytes | None, chain: list[Change]) -> str:
    """How a drifted file differs, seen through the chain's hunks: the first that does not match
    and the nearest place; when they all match, what is known of the file instead."""
    content = current
    for change in chain:
        try:
            content = patch.apply(parsed(change), content)
        except patch.HunkFailed as exc:
            return f"{change.fix_id}: {exc}\n{exc.nearest}".rstrip()
    expected = pristine_hash(chain)
    lines = 0 if current is None else current.count(b"\n")
    return (
        f"every hunk of {', '.join(dict.fromkeys(c.fix_id for c in chain))} matches, so the difference is in lines "
        f"no fix touches: the file has {lines} lines and sha256 {(sha256(current) or 'absent')[:12]}, the release's "
        f"is {(expected or 'unknown')[:12]}; compare it with the release's file (e.g. git diff --no-index)"
    )


def explain_edit(path: str, expected: bytes | None, current: bytes | None, limit: int = 40) -> str:
    """How a patched file was edited since: the diff from what fixpack left to what is there."""
    import difflib

    a = [] if expected is None else expected.decode(patch.ENC, patch.ERRORS).splitlines()
    b = [] if current is None else current.decode(patch.ENC, patch.ERRORS).splitlines()
    lines = list(difflib.unified_diff(a, b, f"{path} as fixpack left it", f"{path} now", lineterm="", n=2))
    more = f"\n... ({len(lines) - limit} more lines)" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more
