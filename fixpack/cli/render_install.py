"""What apply, status, revert, list, show and profiles print: lines for people and the JSON shapes
(docs/reference/json.md)."""

from __future__ import annotations

import json
import sys
from typing import TextIO

from ..commands.install.results import Result, StatusResult
from ..models import Fix, Profile
from .render import error, notes, paint

__all__ = [
    "human",
    "result",
    "result_json",
    "status_json",
    "status_human",
    "printed",
    "fix_json",
    "upstream_json",
    "profile_json",
    "profiles_human",
    "show",
]

_NOT_APPLIED = "not applied: the plan was refused"


def _files(files: list[tuple[str, int, int]]) -> str:
    return ", ".join(f"{path} +{plus} -{minus}" for path, plus, minus in files)


def human(result: Result, out: TextIO | None = None, err: TextIO | None = None) -> None:
    out, err = out or sys.stdout, err or sys.stderr
    notes(result.notes, err)
    shown = result.fixes
    if result.error is not None:  # the refusal is said once, with its reason; the rest only counted
        shown = [f for f in result.fixes if f.reason != _NOT_APPLIED]
    width = max((len(f.id) for f in shown), default=0)
    for fix in shown:
        action = paint(f"{fix.action:<16}", fix.action, out)
        tail = fix.reason or _files(fix.files)
        if fix.pulled_in_by:
            tail = f"{tail} (required by {fix.pulled_in_by})".strip()
        print(f"  {action} {fix.id:<{width}}  {tail}".rstrip(), file=out)
    if len(shown) < len(result.fixes):
        print(f"  ({len(result.fixes) - len(shown)} other fixes not applied: the plan was refused)", file=out)
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


def result(res: Result, as_json: bool, out: TextIO | None = None, err: TextIO | None = None) -> None:
    """An apply or revert result: JSON on stdout and messages on stderr, or lines for people."""
    out, err = out or sys.stdout, err or sys.stderr
    if as_json:
        print(json.dumps(result_json(res), indent=2), file=out)
        notes(res.notes, err)
        if res.error is not None:
            error(res.error, err)
    else:
        human(res, out, err)


def result_json(result: Result) -> dict[str, object]:
    return {
        "ok": result.ok,
        "profile": result.profile,
        "fixes": [
            {"id": f.id, "action": f.action, "reason": f.reason, "files": [list(x) for x in f.files]}
            for f in result.fixes
        ],
        "error": None if result.error is None else result.error.said,
        "notes": result.notes,
    }


def status_json(st: StatusResult) -> dict[str, object]:
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
        "fix_set": None if st.fix_set is None else st.fix_set.to_json(),
        "recipe": st.manifest.recipe if st.manifest is not None else None,
        "notes": [*st.notes, *([f"fix set: none ({st.no_fix_set})"] if st.no_fix_set else [])],
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
    recipe = st.manifest.recipe if st.manifest is not None else None
    print(f"profile {st.profile}" + (f" (recipe {recipe})" if recipe else "") + ":", file=out)
    for fid, state in st.fixes:
        print(f"  {fid:<{width}}  {paint(state, state, out)}", file=out)
    if st.fix_set is not None:
        print(f"fix set: {st.fix_set.summary()}", file=out)
    elif st.no_fix_set:
        print(f"fix set: none ({st.no_fix_set})", file=out)


def printed(res: Result, as_json: bool) -> tuple[str, str]:
    """What ``result`` prints for a result: (stdout, stderr), for the warm path to print again."""
    import io

    out, err = io.StringIO(), io.StringIO()
    result(res, as_json, out, err)
    return out.getvalue(), err.getvalue()


def profile_json(p: Profile) -> dict[str, object]:
    return {
        "name": p.name,
        "release": p.release,
        "pins": [{"dist": x.dist, "version": x.version, "commits": list(x.commits), "match": x.match} for x in p.pins],
        "pack": list(p.pack),
        "opt_ins": list(p.opt_ins),
        "draft": p.draft or None,
        "instead": dict(p.instead),
    }


def profiles_human(profiles: list[Profile]) -> None:
    for p in profiles:
        pins = ", ".join(
            f"{x.dist} {x.version} " + ("at " + x.commits[0][:12] if x.match == "commit" else "(any build)")
            for x in p.pins
        )
        print(f"{p.name}  release {p.release}: {len(p.pack)} fixes; opt-ins: {', '.join(p.opt_ins) or 'none'}")
        print(f"  pins {pins}")
        for dist, other in p.instead:
            print(f"  refused beside {dist}: use profile {other}")
        if p.draft:
            print(f"  draft ({p.draft}): only fixpack port and fixpack lock take it")


def fix_json(f: Fix, upstream: bool = False) -> dict[str, object]:
    """A fix as list --json shows it; ``upstream`` (list --upstream) adds its upstream subject and
    [upstream] facts."""
    row: dict[str, object] = {
        "id": f.id,
        "title": f.title,
        "opt_in": f.opt_in,
        "requires": list(f.requires),
        "releases": list(f.releases),
    }
    if upstream:
        row["subject"] = f.upstream_subject
        row["upstream"] = upstream_json(f)
    return row


def upstream_json(f: Fix) -> dict[str, object]:
    up = f.upstream
    return {
        "status": up.status,
        "forwarded": up.forwarded,
        "bug": list(up.bug),
        "applied_upstream": up.applied_upstream or None,
        "origin": up.origin or None,
        "regressed_in": up.regressed_in or None,
        "note": up.note,
    }


def show(f: Fix) -> None:
    print(f"{f.id}: {f.title}")
    requires, conflicts = ", ".join(f.requires) or "nothing", ", ".join(f.conflicts) or "nothing"
    print(f"opt-in: {'yes' if f.opt_in else 'no'}; requires: {requires}; conflicts: {conflicts}")
    import textwrap

    up = f.upstream
    print(f"upstream subject: {f.upstream_subject}")
    print(f"upstream: {up.status} (forwarded: {up.forwarded or 'no'})")
    for name, value in (
        ("bug", ", ".join(up.bug)), ("origin", up.origin), ("applied-upstream", up.applied_upstream),
        ("regressed-in", up.regressed_in), ("ref", up.ref),
    ):  # fmt: skip
        if value:
            print(f"  {name}: {value}")
    if up.note:
        print(textwrap.indent(up.note, "  "))
    print(f"proof: {f.proof.level}{' (' + f.proof.reason + ')' if f.proof.reason else ''}")
    if f.verified_on:
        print(f"verified on: {f.verified_on}")
    print()
    print(f.why)
    for release, changes in f.changes.items():
        print()
        for c in changes:
            locked = "locked" if c.fingerprint else "NOT LOCKED (run fixpack lock)"
            print(f"{release}: {c.path} ({locked})")
