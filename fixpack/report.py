"""What the commands print: lines for people (colour only on a terminal) and the JSON shapes."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from .errors import FixpackError
from .operations import Result, StatusResult

_COLOURS = {
    "applied": "32",
    "would-apply": "36",
    "already-applied": "2",
    "refused": "31",
    "reverted": "33",
    "would-revert": "36",
    "pending": "33",
    "drifted": "31",
    "missing": "31",
    "partial": "35",
}


def paint(text: str, key: str, stream: TextIO) -> str:
    code = _COLOURS.get(key)
    return f"\x1b[{code}m{text}\x1b[0m" if code and stream.isatty() else text


def _files(files: list[tuple[str, int, int]]) -> str:
    return ", ".join(f"{path.rsplit('/', 1)[-1]} +{plus} -{minus}" for path, plus, minus in files)


def human(result: Result, out: TextIO | None = None, err: TextIO | None = None) -> None:
    out, err = out or sys.stdout, err or sys.stderr
    notes(result.notes, err)
    width = max((len(f.id) for f in result.fixes), default=0)
    for fix in result.fixes:
        action = paint(f"{fix.action:<16}", fix.action, out)
        tail = fix.reason or _files(fix.files)
        if fix.pulled_in_by:
            tail = f"{tail} (required by {fix.pulled_in_by})".strip()
        print(f"  {action} {fix.id:<{width}}  {tail}".rstrip(), file=out)
    counts: dict[str, int] = {}
    for fix in result.fixes:
        counts[fix.action] = counts.get(fix.action, 0) + 1
    summary = ", ".join(f"{n} {action.replace('-', ' ')}" for action, n in counts.items()) or "nothing to do"
    profile = f"profile {result.profile}: " if result.profile else ""
    if result.error is None:
        dry = " (dry run: nothing written)" if result.dry_run else ""
        print(f"fixpack {result.command}: {profile}{summary}{dry}", file=out)
    else:
        error(result.error, err)


def notes(lines: list[str], err: TextIO | None = None) -> None:
    for line in lines:
        print(f"fixpack: {line}", file=err or sys.stderr)


def result(res: Result, as_json: bool) -> None:
    """An apply or revert result: JSON on stdout and messages on stderr, or lines for people."""
    if as_json:
        dump(result_json(res))
        notes(res.notes)
        if res.error is not None:
            error(res.error)
    else:
        human(res)


def error(exc: FixpackError, err: TextIO | None = None) -> None:
    err = err or sys.stderr
    print(f"fixpack: error: {exc.message}", file=err)
    if exc.details:
        print(exc.details, file=err)


def result_json(result: Result) -> dict[str, Any]:
    return {
        "ok": result.ok,
        "profile": result.profile,
        "fixes": [
            {"id": f.id, "action": f.action, "reason": f.reason, "files": [list(x) for x in f.files]}
            for f in result.fixes
        ],
        "error": None if result.error is None else result.error.message,
        "notes": result.notes,
    }


def status_json(st: StatusResult) -> dict[str, Any]:
    return {
        "profile": st.profile,
        "distributions": [
            {
                "name": d.name,
                "version": d.version,
                "commit": d.commit.id,
                "commit_source": d.commit.source,
                "location": str(d.files_root),
                "editable": d.editable,
            }
            for d in st.distributions
        ],
        "fixes": [{"id": fid, "state": state} for fid, state in st.fixes],
        "notes": st.notes,
    }


def status_human(st: StatusResult, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    for note in st.notes:
        print(f"fixpack: {note}", file=sys.stderr)
    for d in st.distributions:
        commit = d.commit.id or "unknown"
        editable = " (editable)" if d.editable else ""
        print(f"{d.name} {d.version} at {d.files_root}{editable}: commit {commit} ({d.commit.source})", file=out)
    if st.profile is None:
        print("no fixes applied (give --profile NAME to see what a profile would do)", file=out)
        return
    width = max((len(fid) for fid, _ in st.fixes), default=0)
    print(f"profile {st.profile}:", file=out)
    for fid, state in st.fixes:
        print(f"  {fid:<{width}}  {paint(state, state, out)}", file=out)


def dump(data: Any) -> None:
    print(json.dumps(data, indent=2), file=sys.stdout)
