"""``fixes/<id>/``: a fix module. ``fix.toml`` (what, why, where, against which release), one patch
per release (or libcst transforms rendered into one), read into a :class:`Fix`; and the fix.toml
text that ``record`` and ``port`` write."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..core.patch import FileEntry, index
from ..core.paths import check_all
from ..errors import UsageError
from ..models import PROOF_LEVELS, SUBJECT_MAX, UPSTREAM_STATUSES, Change, Fix, Proof, Upstream, upstream_status
from ..runtime.index import read_regular
from . import schema, tomlfile
from .lockfile import lock_path, read_lock
from .schema import BOOL, DICT, STR, STRINGS, TABLES, Field, Kind, Table
from .tomlfile import invalid, quote

__all__ = [
    "FIX_ID",
    "FIX_TABLE",
    "load_fix",
    "rendered_patch_name",
    "transforms_file",
    "skeleton",
    "backport_skeleton",
    "release_table",
]

PATCH_LIMIT = 64 << 20  # a fix's patch is a few kB

FIX_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_URL = re.compile(r"https?://[^\s/]+/\S*\Z")
_ISSUE = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+#[0-9]+\Z")  # owner/repo#N: an issue or PR
_COMMIT = re.compile(r"(?:[A-Za-z0-9][\w.-]*/[\w.-]+@)?[0-9a-f]{7,40}\Z")  # [owner/repo@]commit
_OLD_FORWARDED = {"pending": "no", "backport": "not-needed", "inappropriate": "not-needed"}  # else the ref
_RELEASE = re.compile(r"[A-Za-z0-9][\w.+-]*\Z")


def _upstream_text(key: str) -> Field:
    return Field(key, STR, None, wrong=f"upstream.{key} must be a string")


# [upstream]: DEP-3's fields and regressed-in, each checked. status (a summary, checked against
# them) and ref (free text) are the old form's, read as before when none of DEP3 is there.
DEP3 = (
    _upstream_text("forwarded"),
    Field(
        "bug",
        Kind("a URL, an owner/repo#N, or a list of them", lambda v: isinstance(v, str) or STRINGS.test(v)),
        None,
        wrong="upstream.bug must be a list of URLs or owner/repo#N",
    ),
    _upstream_text("applied-upstream"),
    _upstream_text("origin"),
    _upstream_text("regressed-in"),
)
UPSTREAM = Table(Field("status", default=None), _upstream_text("ref"), Field("note", STR, ""), *DEP3)
PROOF = Table(
    Field("level", STR),
    Field("reason", STR, ""),
    Field(
        "harmless",
        TABLES,
        [],
        entries=Table(Field("mutant", STR), Field("why", STR)),
        wrong="proof.harmless must be [[proof.harmless]] tables (mutant = ID, why = ...)",
    ),
    Field(
        "unreachable",
        TABLES,
        [],
        entries=Table(Field("line", STR), Field("why", STR, "")),
        wrong="proof.unreachable must be [[proof.unreachable]] tables (line = ID, why = ...)",
    ),
)
# [release."NAME"]: a diff, or libcst transforms that fixpack lock renders (patch defaults to that
# rendering, and names a diff of the other files when both are given)
RELEASE = Table(Field("patch", STR, None), Field("transforms", STR, ""), wrong="release {key!r} must be a table")
FIX_TABLE = Table(
    Field("id", STR),
    Field("title", STR),
    Field("subject", STR, ""),
    Field("why", STR),
    Field("requires", STRINGS, []),
    Field("conflicts", STRINGS, []),
    Field("supersedes", STRINGS, []),
    Field("opt_in", BOOL, False),
    Field("verified_on", STR, ""),
    Field("upstream", table=UPSTREAM),
    Field("proof", table=PROOF),
    Field("release", DICT, entries=RELEASE, attr="changes"),
)


def rendered_patch_name(release: str) -> str:
    """Where ``fixpack lock`` writes the diff it renders from a release's cst transforms."""
    return f"{release}.rendered.patch"


def load_fix(fix_dir: Path) -> Fix:
    """``fixes/<id>/``: its fix.toml checked against FIX_TABLE, then each part read into the :class:`Fix`."""
    where = fix_dir / "fix.toml"
    data = schema.read_toml(where, FIX_TABLE)
    fix_id = _fix_id(data["id"], fix_dir, where)
    upstream = load_upstream(data["upstream"], where)
    subject = _subject(data["subject"], where)
    proof = _proof(data["proof"], fix_dir, where)
    changes = {release: _changes(fix_dir, fix_id, release, spec, where) for release, spec in data["release"].items()}
    return schema.build(
        Fix,
        FIX_TABLE,
        data,
        id=fix_id,
        title=data["title"].strip(),
        why=data["why"].strip(),
        upstream=upstream,
        proof=proof,
        changes=changes,
        source=str(fix_dir),
        subject=subject,
    )


def _fix_id(fix_id: str, fix_dir: Path, where: Path) -> str:
    if fix_id != fix_dir.name or not FIX_ID.match(fix_id):
        raise invalid(where, f"id {fix_id!r} must be lower-case-with-dashes and equal the directory name")
    return fix_id


def _subject(text: str, where: Path) -> str:
    subject = text.strip()
    if "\n" in subject or len(subject) > SUBJECT_MAX:
        raise invalid(where, f"subject must be one line of at most {SUBJECT_MAX} characters ({len(subject)})")
    return subject


def _proof(proof: dict[str, Any], fix_dir: Path, where: Path) -> Proof:
    level, reason = proof["level"], proof["reason"]
    if level not in PROOF_LEVELS:
        raise invalid(where, f"proof.level {level!r} is not one of {', '.join(PROOF_LEVELS)}")
    if level != "demonstrated" and not reason.strip():
        raise invalid(where, f"proof.level {level!r} needs a proof.reason")
    harmless = tuple((e["mutant"], e["why"].strip()) for e in proof["harmless"])
    if any(not why for _, why in harmless):
        raise invalid(where, "each [[proof.harmless]] needs a why: the reason that mutant is harmless")
    unreachable = tuple((e["line"], e["why"].strip()) for e in proof["unreachable"])
    if any(not why for _, why in unreachable):
        raise invalid(where, "each [[proof.unreachable]] needs a why: the reason a proof on CPU cannot run that line")
    script = fix_dir / "proof.py"
    if level != "none" and not script.exists():
        raise invalid(where, f"proof.level {level!r} but {script.name} is missing")
    script_file = str(script) if script.exists() else None
    return schema.build(Proof, PROOF, proof, script=script_file, harmless=harmless, unreachable=unreachable)


def _changes(fix_dir: Path, fix_id: str, release: str, spec: dict[str, Any], where: Path) -> tuple[Change, ...]:
    """A release's changes: its diff, its transforms' rendering, or both (each file from one of them)."""
    transforms = spec["transforms"]
    if transforms and not (fix_dir / transforms).is_file():
        raise invalid(where, f"release {release!r}: {transforms} is missing")
    rendered = rendered_patch_name(release)
    hand = spec["patch"]
    if hand is None:
        if not transforms:
            raise invalid(where, "missing 'patch'")
        hand = rendered
    # A release may mix both: its transforms' files from the rendered patch, the rest from a diff.
    patch_files = [fix_dir / hand] if hand == rendered or not transforms else [fix_dir / hand, fix_dir / rendered]
    if transforms and not patch_files[-1].exists():
        raise invalid(where, f"release {release!r}: fixpack lock renders {transforms} into {rendered}")
    per_file: list[FileEntry] = []
    for patch_file in patch_files:
        per_file += _file_diffs(patch_file, release, fix_id, where)
    paths = [fd.path for fd in per_file]
    twice = sorted({p for p in paths if paths.count(p) > 1})
    if twice:
        raise invalid(
            where,
            f"release {release!r}: {', '.join(twice)} is in both {hand} and {transforms}: "
            "a file is a transform or a diff, not both",
        )
    if len(patch_files) > 1:  # git's order, the order a diff of the whole fix has
        per_file.sort(key=lambda fd: fd.path)
    check_all(paths, fix_id=fix_id, where=patch_files[0])
    prints = read_lock(lock_path(fix_dir, release))
    check_all(prints, fix_id=fix_id, where=lock_path(fix_dir, release))
    return tuple(
        Change(
            fix_id=fix_id,
            release=release,
            path=fd.path,
            patch=fd.text,
            fingerprint=prints.get(fd.path),
            creates=fd.creates,
            deletes=fd.deletes,
        )
        for fd in per_file
    )


def _file_diffs(patch_file: Path, release: str, fix_id: str, where: Path) -> list[FileEntry]:
    try:
        text = read_regular(str(patch_file), PATCH_LIMIT).decode("utf-8", "surrogateescape")
    except OSError as exc:
        raise invalid(where, f"release {release!r}: cannot read {patch_file.name} ({exc.strerror})") from None
    except ValueError as exc:  # a FIFO or a device is never read
        raise invalid(where, f"release {release!r}: {exc}") from None
    try:
        per_file = index(text)
    except ValueError as exc:  # in the words an invalid patch met while applying had before
        raise UsageError(
            f"invalid patch of fix {fix_id} ({patch_file}): {exc}: see what changed it (git status, git diff in "
            "the cookbook), or write it again (fixpack record, or lock for a transform's)",
            fix_id=fix_id,
            path=str(patch_file),
        ) from None
    if not per_file:
        raise invalid(patch_file, "no file diffs in it")
    return list(per_file)


def load_upstream(table: dict[str, Any], where: Path) -> Upstream:
    """``[upstream]``, checked against UPSTREAM: DEP-3's fields (``forwarded``, ``bug``,
    ``applied-upstream``, ``origin``) and ``regressed-in``, each checked; or, when none of them is
    there, the old form (``status``, one of UPSTREAM_STATUSES, and a free-text ``ref``), read into
    the same fields."""
    note = table["note"].strip()
    status = table["status"]
    if status is not None and status not in UPSTREAM_STATUSES:
        raise invalid(where, f"upstream.status {status!r} is not one of {', '.join(UPSTREAM_STATUSES)}")
    if all(table[f.key] is None for f in DEP3):
        if status is None:
            raise invalid(where, '[upstream] needs forwarded: a URL or owner/repo#N, "no", or "not-needed"')
        ref = (table["ref"] or "").strip()
        return schema.build(
            Upstream,
            UPSTREAM,
            table,
            status=status,
            ref=ref,
            note=note,
            forwarded=_OLD_FORWARDED.get(status, ref or "yes"),
            bug=(),
            applied_upstream=ref if status == "upstream" else "",
            origin=ref if status == "backport" else "",
            regressed_in="",
        )
    if table["ref"] is not None:
        raise invalid(where, "upstream.ref is the old form's: give forwarded, bug, origin or applied-upstream")
    origin = _ref(table, "origin", where)
    applied = _ref(table, "applied-upstream", where)
    if table["forwarded"] is None and not origin:  # a backport's is "not-needed", as DEP-3 implies
        raise invalid(where, '[upstream] needs forwarded: a URL or owner/repo#N, "no", or "not-needed"')
    forwarded = ("not-needed" if table["forwarded"] is None else table["forwarded"]).strip()
    if forwarded not in ("no", "not-needed") and not (_URL.match(forwarded) or _ISSUE.match(forwarded)):
        raise invalid(where, f'upstream.forwarded {forwarded!r} is not a URL, owner/repo#N, "no" or "not-needed"')
    if forwarded == "not-needed" and not (origin or applied or note):
        raise invalid(where, 'upstream.forwarded = "not-needed" needs a note giving the reason')
    bugs = [table["bug"]] if isinstance(table["bug"], str) else table["bug"] or []
    for b in bugs:
        if not (_URL.match(b) or _ISSUE.match(b)):
            raise invalid(where, f"upstream.bug {b!r} is not a URL or owner/repo#N")
    regressed = (table["regressed-in"] or "").strip()
    if regressed and not _RELEASE.match(regressed):
        raise invalid(where, f"upstream.regressed-in {regressed!r} is not a release (a tag such as v0.24.0)")
    derived = upstream_status(forwarded, applied, origin)
    if status is not None and status != derived:
        raise invalid(where, f"upstream.status {status!r} does not match the fields below it, which say {derived!r}")
    return schema.build(
        Upstream,
        UPSTREAM,
        table,
        status=derived,
        ref="",
        note=note,
        forwarded=forwarded,
        bug=tuple(bugs),
        applied_upstream=applied,
        origin=origin,
        regressed_in=regressed,
    )


def _ref(table: dict[str, Any], key: str, where: Path) -> str:
    value = (table[key] or "").strip()
    if value and not (_URL.match(value) or _ISSUE.match(value) or _COMMIT.match(value)):
        raise invalid(where, f"upstream.{key} {value!r} is not a URL, owner/repo#N or [owner/repo@]commit")
    return value


def transforms_file(fix_dir: Path, release: str) -> Path | None:
    """The transforms file fix.toml names for ``release``, or None when that release is a plain patch."""
    name = tomlfile.read(fix_dir / "fix.toml").get("release", {}).get(release, {}).get("transforms")
    return None if name is None else fix_dir / name


# What record and from-commit write, filled from values: a basic string is quote()'s, TOML's
# escapes being JSON's; why is a literal multi-line string a maintainer edits in place.
_SKELETON = """\
id = {id}
title = {title}
# subject = "..."  (the upstream subject, at most 72 characters, when the title does not fit)
why = {why}
{on_top_of}requires = {requires}
conflicts = []
opt_in = false
verified_on = "TODO"

[upstream]
{upstream}bug = []
note = ""

[proof]
level = "none"
reason = "TODO: write proof.py and set level = \\"demonstrated\\", or say why there is none"

[release.{release}]
patch = {patch}
"""
_TODO_TITLE = "TODO: one line, as the upstream commit's subject"
_TODO_WHY = "TODO: what breaks and where (file, function), the mechanism, and what the change does."


def skeleton(fix_id: str, release: str, on_top_of: list[str], requires: list[str] | None = None) -> str:
    """The fix.toml ``record`` writes: TODOs for the maintainer, a fix not sent upstream yet, and a
    note of the fixes fixpack had applied under the diff (``on_top_of``)."""
    return _fill(
        fix_id,
        release,
        title=_TODO_TITLE,
        why=_TODO_WHY,
        upstream={"status": "pending", "forwarded": "no"},
        on_top_of=on_top_of,
        requires=requires or [],
    )


def backport_skeleton(fix_id: str, release: str, title: str, why: str, origin: str) -> str:
    """``skeleton`` for a fix made from an upstream commit: its subject and message, and ``origin``
    the commit (a backport is not forwarded: DEP-3's ``not-needed``)."""
    upstream = {"forwarded": "not-needed", "origin": origin}
    return _fill(fix_id, release, title=title, why=why.strip(), upstream=upstream, on_top_of=[], requires=[])


def _fill(
    fix_id: str,
    release: str,
    *,
    title: str,
    why: str,
    upstream: dict[str, str],
    on_top_of: list[str],
    requires: list[str],
) -> str:
    hint = (
        f"# The diff was taken on top of {', '.join(on_top_of)} (fixpack had applied them): the edit sits "
        "on their lines.\n"
    )
    return _SKELETON.format(
        id=quote(fix_id),
        title=quote(title),
        why=quote(why) if "'''" in why else f"'''\n{why}\n'''",
        on_top_of=hint if on_top_of else "",
        requires=quote(list(requires)),
        upstream="".join(f"{key} = {quote(value)}\n" for key, value in upstream.items()),
        release=quote(release),
        patch=quote(f"{release}.patch"),
    )


def release_table(release: str, cst_file: Path | None, diff: bool = True) -> str:
    """The table fix.toml gains for ``release``; the file is appended to, never rewritten. With
    ``cst_file`` and ``diff``, a mixed release: the transforms' files rendered, the rest a diff."""
    patch = f"{release}.patch" if diff or not cst_file else rendered_patch_name(release)
    lines = [f'\n[release."{release}"]\n']
    if cst_file:  # the same transforms carried it; lock re-renders them for the new release
        lines.append(f"transforms = {quote(cst_file.name)}\n")
    lines.append(f"patch = {quote(patch)}\n")
    return "".join(lines)
