"""``fixes/<id>/``: a fix module. ``fix.toml`` (what, why, where, against which release), one patch
per release (or libcst transforms rendered into one), read into a :class:`Fix`; and the fix.toml
text that ``record`` and ``port`` write."""

from __future__ import annotations

import re
from pathlib import Path

from ..core.patch import FileEntry, index
from ..core.paths import check_all
from ..errors import UsageError
from ..models import PROOF_LEVELS, SUBJECT_MAX, UPSTREAM_STATUSES, Change, Fix, Proof, Upstream, upstream_status
from . import schema, tomlfile
from .lockfile import lock_path, read_lock
from .tomlfile import field, invalid, quote

__all__ = [
    "FIX_ID",
    "load_fix",
    "rendered_patch_name",
    "transforms_file",
    "skeleton",
    "backport_skeleton",
    "release_table",
]

FIX_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
# The keys of each table of fix.toml (schema.toml_keys refuses any other)
KEYS = {
    "id", "title", "subject", "why", "requires", "conflicts", "supersedes", "opt_in", "verified_on",  # values
    "upstream", "proof", "release",  # tables
}  # fmt: skip
# [upstream]: DEP-3's fields, regressed-in, and note; status (a summary, checked against them) and
# ref (free text) are the old form's, read as before when none of the DEP-3 fields is there.
DEP3_KEYS = ("forwarded", "bug", "applied-upstream", "origin", "regressed-in")
UPSTREAM_KEYS = {"status", "ref", "note", *DEP3_KEYS}
_URL = re.compile(r"https?://[^\s/]+/\S*\Z")
_ISSUE = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+#[0-9]+\Z")  # owner/repo#N: an issue or PR
_COMMIT = re.compile(r"(?:[A-Za-z0-9][\w.-]*/[\w.-]+@)?[0-9a-f]{7,40}\Z")  # [owner/repo@]commit
_OLD_FORWARDED = {"pending": "no", "backport": "not-needed", "inappropriate": "not-needed"}  # else the ref
_RELEASE = re.compile(r"[A-Za-z0-9][\w.+-]*\Z")
PROOF_KEYS = {"level", "reason", "harmless", "unreachable"}
HARMLESS_KEYS = {"mutant", "why"}
UNREACHABLE_KEYS = {"line", "why"}
RELEASE_KEYS = {"patch", "transforms"}


def rendered_patch_name(release: str) -> str:
    """Where ``fixpack lock`` writes the diff it renders from a release's cst transforms."""
    return f"{release}.rendered.patch"


def load_fix(fix_dir: Path) -> Fix:
    where = fix_dir / "fix.toml"
    data = tomlfile.read(where)
    schema.toml_keys(data, KEYS, where)
    fix_id = field(data, "id", str, where)
    if fix_id != fix_dir.name or not FIX_ID.match(fix_id):
        raise invalid(where, f"id {fix_id!r} must be lower-case-with-dashes and equal the directory name")
    upstream = load_upstream(field(data, "upstream", dict, where), where)
    title = field(data, "title", str, where).strip()
    subject = field(data, "subject", str, where, "").strip()
    if subject and ("\n" in subject or len(subject) > SUBJECT_MAX):
        raise invalid(where, f"subject must be one line of at most {SUBJECT_MAX} characters ({len(subject)})")
    proof = field(data, "proof", dict, where)
    schema.toml_keys(proof, PROOF_KEYS, where, "proof")
    level = field(proof, "level", str, where)
    if level not in PROOF_LEVELS:
        raise invalid(where, f"proof.level {level!r} is not one of {', '.join(PROOF_LEVELS)}")
    reason = field(proof, "reason", str, where, "")
    if level != "demonstrated" and not reason.strip():
        raise invalid(where, f"proof.level {level!r} needs a proof.reason")
    entries = proof.get("harmless", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise invalid(where, "proof.harmless must be [[proof.harmless]] tables (mutant = ID, why = ...)")
    for i, entry in enumerate(entries):
        schema.toml_keys(entry, HARMLESS_KEYS, where, "proof", "harmless", i)
    harmless = tuple((field(e, "mutant", str, where), field(e, "why", str, where).strip()) for e in entries)
    if any(not why for _, why in harmless):
        raise invalid(where, "each [[proof.harmless]] needs a why: the reason that mutant is harmless")
    lines = proof.get("unreachable", [])
    if not isinstance(lines, list) or not all(isinstance(e, dict) for e in lines):
        raise invalid(where, "proof.unreachable must be [[proof.unreachable]] tables (line = ID, why = ...)")
    for i, entry in enumerate(lines):
        schema.toml_keys(entry, UNREACHABLE_KEYS, where, "proof", "unreachable", i)
    unreachable = tuple((field(e, "line", str, where), field(e, "why", str, where, "").strip()) for e in lines)
    if any(not why for _, why in unreachable):
        raise invalid(where, "each [[proof.unreachable]] needs a why: the reason a proof on CPU cannot run that line")
    script = fix_dir / "proof.py"
    if level != "none" and not script.exists():
        raise invalid(where, f"proof.level {level!r} but {script.name} is missing")

    changes: dict[str, tuple[Change, ...]] = {}
    for release, spec in field(data, "release", dict, where).items():
        if not isinstance(spec, dict):
            raise invalid(where, f"release {release!r} must be a table")
        schema.toml_keys(spec, RELEASE_KEYS, where, "release", release)
        transforms = field(spec, "transforms", str, where, "")
        if transforms and not (fix_dir / transforms).is_file():
            raise invalid(where, f"release {release!r}: {transforms} is missing")
        rendered = rendered_patch_name(release)
        hand = field(spec, "patch", str, where, rendered if transforms else ...)
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
        changes[release] = tuple(
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
    return Fix(
        id=fix_id,
        title=title,
        why=field(data, "why", str, where).strip(),
        requires=tuple(field(data, "requires", list, where, [])),
        conflicts=tuple(field(data, "conflicts", list, where, [])),
        supersedes=tuple(field(data, "supersedes", list, where, [])),
        opt_in=field(data, "opt_in", bool, where, False),
        upstream=upstream,
        proof=Proof(level, reason, str(script) if script.exists() else None, harmless, unreachable),
        verified_on=field(data, "verified_on", str, where, ""),
        changes=changes,
        source=str(fix_dir),
        subject=subject,
    )


def _file_diffs(patch_file: Path, release: str, fix_id: str, where: Path) -> list[FileEntry]:
    try:
        text = patch_file.read_bytes().decode("utf-8", "surrogateescape")
    except OSError as exc:
        raise invalid(where, f"release {release!r}: cannot read {patch_file.name} ({exc.strerror})") from None
    try:
        per_file = index(text)
    except ValueError as exc:  # in the words an invalid patch met while applying had before
        raise UsageError(
            f"invalid patch of fix {fix_id} ({patch_file}): {exc}", fix_id=fix_id, path=str(patch_file)
        ) from None
    if not per_file:
        raise invalid(patch_file, "no file diffs in it")
    return list(per_file)


def load_upstream(table: dict, where: Path) -> Upstream:
    """``[upstream]``: DEP-3's fields (``forwarded``, ``bug``, ``applied-upstream``, ``origin``) and
    ``regressed-in``, each checked; or, when none of them is there, the old form (``status``, one of
    UPSTREAM_STATUSES, and a free-text ``ref``), read into the same fields."""
    schema.toml_keys(table, UPSTREAM_KEYS, where, "upstream")
    note = field(table, "note", str, where, "").strip()
    status = table.get("status")
    if status is not None and status not in UPSTREAM_STATUSES:
        raise invalid(where, f"upstream.status {status!r} is not one of {', '.join(UPSTREAM_STATUSES)}")
    if not any(k in table for k in DEP3_KEYS):
        if status is None:
            raise invalid(where, '[upstream] needs forwarded: a URL or owner/repo#N, "no", or "not-needed"')
        ref = _text(table, "ref", where).strip()
        return Upstream(
            status,
            ref,
            note,
            forwarded=_OLD_FORWARDED.get(status, ref or "yes"),
            applied_upstream=ref if status == "upstream" else "",
            origin=ref if status == "backport" else "",
        )
    if "ref" in table:
        raise invalid(where, "upstream.ref is the old form's: give forwarded, bug, origin or applied-upstream")
    origin = _ref(table, "origin", where, _URL, _ISSUE, _COMMIT)
    applied = _ref(table, "applied-upstream", where, _URL, _ISSUE, _COMMIT)
    if "forwarded" not in table and not origin:  # a backport's is "not-needed", as DEP-3 implies
        raise invalid(where, '[upstream] needs forwarded: a URL or owner/repo#N, "no", or "not-needed"')
    forwarded = _text(table, "forwarded", where, "not-needed").strip()
    if forwarded not in ("no", "not-needed") and not (_URL.match(forwarded) or _ISSUE.match(forwarded)):
        raise invalid(where, f'upstream.forwarded {forwarded!r} is not a URL, owner/repo#N, "no" or "not-needed"')
    if forwarded == "not-needed" and not (origin or applied or note):
        raise invalid(where, 'upstream.forwarded = "not-needed" needs a note giving the reason')
    bugs = table.get("bug", [])
    if isinstance(bugs, str):
        bugs = [bugs]
    if not isinstance(bugs, list) or not all(isinstance(b, str) for b in bugs):
        raise invalid(where, "upstream.bug must be a list of URLs or owner/repo#N")
    for b in bugs:
        if not (_URL.match(b) or _ISSUE.match(b)):
            raise invalid(where, f"upstream.bug {b!r} is not a URL or owner/repo#N")
    regressed = _text(table, "regressed-in", where).strip()
    if regressed and not _RELEASE.match(regressed):
        raise invalid(where, f"upstream.regressed-in {regressed!r} is not a release (a tag such as v0.24.0)")
    derived = upstream_status(forwarded, applied, origin)
    if status is not None and status != derived:
        raise invalid(where, f"upstream.status {status!r} does not match the fields below it, which say {derived!r}")
    return Upstream(derived, "", note, forwarded, tuple(bugs), applied, origin, regressed)


def _text(table: dict, key: str, where: Path, default: str = "") -> str:
    value = table.get(key, default)
    if not isinstance(value, str):
        raise invalid(where, f"upstream.{key} must be a string")
    return value


def _ref(table: dict, key: str, where: Path, *forms: re.Pattern[str]) -> str:
    value = _text(table, key, where).strip()
    if value and not any(f.match(value) for f in forms):
        raise invalid(where, f"upstream.{key} {value!r} is not a URL, owner/repo#N or [owner/repo@]commit")
    return value


def transforms_file(fix_dir: Path, release: str) -> Path | None:
    """The transforms file fix.toml names for ``release``, or None when that release is a plain patch."""
    name = tomlfile.read(fix_dir / "fix.toml").get("release", {}).get(release, {}).get("transforms")
    return None if name is None else fix_dir / name


def skeleton(fix_id: str, release: str, on_top_of: list[str], requires: list[str] | None = None) -> str:
    import textwrap  # record only; the catalog, on every apply, does not need it

    text = textwrap.dedent(
        f"""\
        id = "{fix_id}"
        title = "TODO: one line, as the upstream commit's subject"
        # subject = "..."  (the upstream subject, at most 72 characters, when the title does not fit)
        why = '''
        TODO: what breaks and where (file, function), the mechanism, and what the change does.
        '''
        requires = []
        conflicts = []
        opt_in = false
        verified_on = "TODO"

        [upstream]
        status = "pending"
        forwarded = "no"
        bug = []
        note = ""

        [proof]
        level = "none"
        reason = "TODO: write proof.py and set level = \\"demonstrated\\", or say why there is none"

        [release."{release}"]
        patch = "{release}.patch"
        """
    )
    if requires:
        text = text.replace("requires = []", f"requires = {quote(list(requires))}", 1)
    if not on_top_of:
        return text
    hint = (
        f"# The diff was taken on top of {', '.join(on_top_of)} (fixpack had applied them): the edit sits "
        "on their lines.\n"
    )
    return text.replace("requires = ", hint + "requires = ", 1)


def backport_skeleton(fix_id: str, release: str, title: str, why: str, origin: str) -> str:
    """``skeleton`` for a fix made from an upstream commit: its subject and message, and ``origin``
    the commit (a backport is not forwarded: DEP-3's ``not-needed``)."""
    text = skeleton(fix_id, release, [])
    text = text.replace('title = "TODO: one line, as the upstream commit\'s subject"', f"title = {quote(title)}", 1)
    start, end = text.index("why = '''"), text.index("requires = []")
    body = f"why = '''\n{why.strip()}\n'''\n" if "'''" not in why else f"why = {quote(why.strip())}\n"
    text = text[:start] + body + text[end:]
    upstream = f'forwarded = "not-needed"\norigin = {quote(origin)}\nbug = []\nnote = ""\n'
    return text.replace('status = "pending"\nforwarded = "no"\nbug = []\nnote = ""\n', upstream, 1)


def release_table(release: str, cst_file: Path | None, diff: bool = True) -> str:
    """The table fix.toml gains for ``release``; the file is appended to, never rewritten. With
    ``cst_file`` and ``diff``, a mixed release: the transforms' files rendered, the rest a diff."""
    patch = f"{release}.patch" if diff or not cst_file else rendered_patch_name(release)
    lines = [f'\n[release."{release}"]\n']
    if cst_file:  # the same transforms carried it; lock re-renders them for the new release
        lines.append(f"transforms = {quote(cst_file.name)}\n")
    lines.append(f"patch = {quote(patch)}\n")
    return "".join(lines)
