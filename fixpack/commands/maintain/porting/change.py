"""One change of a fix tried on the new tree, as ``fixpack port`` tries it: the diff (or the
transform, or the fix's own port), then a three-way merge against the old release's file."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ....core import patch, rebuild
from ....core.fingerprint import of
from ....models import Change, PortOutcome
from .. import history
from .report import ChangeReport

if TYPE_CHECKING:  # libcst loads only when a transform runs
    from ....transforms import Transform

__all__ = ["Attempt", "try_change"]


def _hunk_text(fd: patch.FileDiff, index: int) -> str:
    hunk = fd.hunks[index - 1]
    body = "".join(tag + (text if text.endswith("\n") else text + "\n") for tag, text in hunk.lines)
    return f"@@ -{hunk.old_start} @@ (hunk #{index})\n{body}".rstrip("\n")


def _contains(lines: list[str], want: tuple[str, ...]) -> bool:
    bodies = [w.rstrip("\r\n") for w in want]
    have = [line.rstrip("\r\n") for line in lines]
    return any(have[i : i + len(bodies)] == bodies for i in range(len(have) - len(bodies) + 1))


def _upstream(fd: patch.FileDiff, content: bytes | None) -> bool:
    """The tree already holds the change's result: the reversed diff applies, or every hunk's new side is there."""
    if content is None:
        return fd.deletes
    try:
        patch.apply(fd.reversed(), content)
        return True
    except patch.HunkFailed:
        pass
    lines = content.decode(patch.ENC, patch.ERRORS).splitlines(keepends=True)
    return all(_contains(lines, h.new) for h in fd.hunks)


def _added_present(fd: patch.FileDiff, content: bytes | None) -> bool:
    """Every run of added lines is in the file: the fix may be upstream in another form."""
    if content is None:
        return False
    lines = content.decode(patch.ENC, patch.ERRORS).splitlines(keepends=True)
    runs: list[tuple[str, ...]] = []
    for hunk in fd.hunks:
        run: list[str] = []
        for tag, text in (*hunk.lines, (" ", "")):
            if tag == "+" and text.strip():
                run.append(text)
            elif tag != "+" and run:
                runs.append(tuple(run))
                run = []
    return bool(runs) and all(_contains(lines, r) for r in runs)


@dataclass(frozen=True, slots=True)
class Attempt:
    """What a change is tried with besides the bytes the chain has reached."""

    transform: Transform | None = None
    hand: str = ""  # the release of the fix's own port, when the change is that
    base: Callable[[], bytes | None] = lambda: None  # the bytes the change met on the old release
    resolved: Path | None = None  # a maintainer's resolution of the change's merge


def try_change(change: Change, before: bytes | None, how: Attempt, release: str) -> tuple[ChangeReport, bytes | None]:
    """One change on the bytes the chain has reached: its report and the bytes after it (``before`` if none)."""
    fix, path = change.fix_id, change.path
    locked = change.fingerprint is not None and of(before) == change.fingerprint.before
    after: bytes | None
    if how.resolved is not None:
        after = how.resolved.read_bytes()
        if any(line.startswith(b"<<<<<<< ") for line in after.splitlines()):
            return ChangeReport(fix, path, PortOutcome.CONFLICT, f"{how.resolved} still has conflict markers"), before
        report = ChangeReport(fix, path, PortOutcome.MERGED, f"resolved by hand in {how.resolved}")
    elif how.transform is not None:
        from ....transforms import CstFailed

        try:
            after = how.transform.apply(before)
        except CstFailed as exc:
            return ChangeReport(fix, path, PortOutcome.CONFLICT, f"{exc.edit}: {exc.reason}"), before
        if after == before:
            nothing = "the transform changes nothing: the tree already has it"
            return ChangeReport(fix, path, PortOutcome.UPSTREAM, nothing), before
        report = ChangeReport(fix, path, PortOutcome.UNCHANGED if locked else PortOutcome.CST)
    else:
        fd = rebuild.parsed(change)
        try:
            after = patch.apply(fd, before)
        except patch.HunkFailed as exc:
            if _upstream(fd, before):
                there = "the new tree already has the patched lines"
                return ChangeReport(fix, path, PortOutcome.UPSTREAM, there), before
            merged = _merge(change, before, how.base(), release)
            if merged is not None and merged.outcome is PortOutcome.MERGED:
                report, after = merged, merged.merge
            else:
                detail = str(exc) + (f"; {merged.detail}" if merged is not None else "")
                if _added_present(fd, before):
                    detail += "; but every added line is in the new tree: upstream in another form? check"
                failed = ChangeReport(fix, path, PortOutcome.CONFLICT, detail, _hunk_text(fd, exc.index), exc.nearest)
                failed.merge = merged.merge if merged is not None else None
                return failed, before
        else:
            outcome = PortOutcome.HAND if how.hand else PortOutcome.UNCHANGED if locked else PortOutcome.OFFSET
            report = ChangeReport(fix, path, outcome, f"the fix's own port to {how.hand}" if how.hand else "")
            if outcome is PortOutcome.OFFSET and change.fingerprint is None:
                report.detail = "no fingerprints to compare with (run fixpack lock on the old release)"
    problem = rebuild.compile_error(path, after)
    if problem and rebuild.compile_error(path, before) is None:
        broken = f"applies, but the result does not compile: {problem}"
        return ChangeReport(fix, path, PortOutcome.CONFLICT, broken), before
    report.patch = patch.render(path, before, after, blobs=True)
    return report, after


def _merge(change: Change, current: bytes | None, base: bytes | None, release: str) -> ChangeReport | None:
    """A three-way merge of ``change`` onto ``current``, against ``base`` (the bytes it met on
    ``release``); None when there is no base to merge against."""
    if current is None or base is None:
        return None
    try:
        fixed = patch.apply(rebuild.parsed(change), base)
    except patch.HunkFailed:
        return None
    if fixed is None:
        return None
    done = history.merge(current, base, fixed, release, change.fix_id)
    if done is None:
        return None
    if done.conflicts:
        report = ChangeReport(
            change.fix_id,
            change.path,
            PortOutcome.CONFLICT,
            f"a three-way merge against {release}'s file leaves {done.conflicts} conflict(s)",
        )
        report.merge = done.content
        return report
    report = ChangeReport(
        change.fix_id, change.path, PortOutcome.MERGED, f"merged three-way against {release}'s file (git merge-file)"
    )
    report.merge = done.content
    return report
