"""``fixes/<id>/``: a fix module. ``fix.toml`` (what, why, where, against which release), one patch
per release (or libcst transforms rendered into one), read into a :class:`Fix`; and the fix.toml
text that ``record`` and ``port`` write."""

from __future__ import annotations

import re
from pathlib import Path

from ..core.patch import index
from ..core.paths import check_all
from ..errors import UsageError
from ..models import PROOF_LEVELS, UPSTREAM_STATUSES, Change, Fix, Proof, Upstream
from . import schema, tomlfile
from .lockfile import lock_path, read_lock
from .tomlfile import field, invalid, quote

__all__ = [
    "FIX_ID",
    "load_fix",
    "rendered_patch_name",
    "transforms_file",
    "skeleton",
    "release_table",
]

FIX_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
# The keys of each table of fix.toml (schema.toml_keys refuses any other)
KEYS = {
    "id", "title", "why", "requires", "conflicts", "supersedes", "opt_in", "verified_on",  # values
    "upstream", "proof", "release",  # tables
}  # fmt: skip
UPSTREAM_KEYS = {"status", "ref", "note"}
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
    upstream = field(data, "upstream", dict, where)
    schema.toml_keys(upstream, UPSTREAM_KEYS, where, "upstream")
    status = field(upstream, "status", str, where)
    if status not in UPSTREAM_STATUSES:
        raise invalid(where, f"upstream.status {status!r} is not one of {', '.join(UPSTREAM_STATUSES)}")
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
        patch_file = fix_dir / field(spec, "patch", str, where, rendered_patch_name(release) if transforms else ...)
        if transforms and not patch_file.exists():
            raise invalid(where, f"release {release!r}: fixpack lock renders {transforms} into {patch_file.name}")
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
        check_all((fd.path for fd in per_file), fix_id=fix_id, where=patch_file)
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
        title=field(data, "title", str, where).strip(),
        why=field(data, "why", str, where).strip(),
        requires=tuple(field(data, "requires", list, where, [])),
        conflicts=tuple(field(data, "conflicts", list, where, [])),
        supersedes=tuple(field(data, "supersedes", list, where, [])),
        opt_in=field(data, "opt_in", bool, where, False),
        upstream=Upstream(status, field(upstream, "ref", str, where, ""), field(upstream, "note", str, where, "")),
        proof=Proof(level, reason, str(script) if script.exists() else None, harmless, unreachable),
        verified_on=field(data, "verified_on", str, where, ""),
        changes=changes,
        source=str(fix_dir),
    )



def transforms_file(fix_dir: Path, release: str) -> Path | None:
    """The transforms file fix.toml names for ``release``, or None when that release is a plain patch."""
    name = tomlfile.read(fix_dir / "fix.toml").get("release", {}).get(release, {}).get("transforms")
    return None if name is None else fix_dir / name


def skeleton(fix_id: str, release: str, on_top_of: list[str]) -> str:
    import textwrap  # record only; the catalog, on every apply, does not need it

    text = textwrap.dedent(
        f"""\
        id = "{fix_id}"
        title = "TODO: one line, as the upstream commit's subject"
        why = '''
        TODO: what breaks and where (file, function), the mechanism, and what the change does.
        '''
        requires = []
        conflicts = []
        opt_in = false
        verified_on = "TODO"

        [upstream]
        status = "pending"
        ref = ""
        note = ""

        [proof]
        level = "none"
        reason = "TODO: write proof.py and set level = \\"demonstrated\\", or say why there is none"

        [release."{release}"]
        patch = "{release}.patch"
        """
    )
    if not on_top_of:
        return text
    hint = f"# The diff was taken on top of {', '.join(on_top_of)} (fixpack had applied them): require what it needs.\n"
    return text.replace("requires = []", hint + "requires = []", 1)


def release_table(release: str, cst_file: Path | None) -> str:
    """The table fix.toml gains for ``release``; the file is appended to, never rewritten."""
    patch = rendered_patch_name(release) if cst_file else f"{release}.patch"
    lines = [f'\n[release."{release}"]\n']
    if cst_file:  # the same transforms carried it; lock re-renders them for the new release
        lines.append(f"transforms = {quote(cst_file.name)}\n")
    lines.append(f"patch = {quote(patch)}\n")
    return "".join(lines)

