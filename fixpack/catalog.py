"""Loads fix modules (``fixes/<id>/``) and profiles (``profiles/<name>.toml``), and validates them.

A fix module is data: ``fix.toml`` (what, why, where, against which release), one patch per release,
the fingerprints ``fixpack lock`` wrote for it (``<release>.lock.json``) and its ``proof.py``.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .applicators.diff import index
from .errors import UsageError
from .model import PROOF_LEVELS, UPSTREAM_STATUSES, Change, Fingerprint, Fix, Pin, Profile, Proof, Upstream

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO_ROOT = Path(__file__).resolve().parent.parent
FIX_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


def suggest(name: str, known: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _invalid(where: Path, reason: str) -> UsageError:
    return UsageError(f"invalid {where}: {reason}")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise _invalid(path, str(exc)) from None


def _get(data: dict[str, Any], key: str, kind: type, where: Path, default: Any = ...) -> Any:
    if key not in data:
        if default is ...:
            raise _invalid(where, f"missing {key!r}")
        return default
    value = data[key]
    if not isinstance(value, kind) or (kind is list and not all(isinstance(v, str) for v in value)):
        raise _invalid(where, f"{key!r} must be a {kind.__name__}" + (" of strings" if kind is list else ""))
    return value


def rendered_patch_name(release: str) -> str:
    """Where ``fixpack lock`` writes the diff it renders from a release's cst transforms."""
    return f"{release}.rendered.patch"


def lock_path(fix_dir: Path, release: str) -> Path:
    return fix_dir / f"{release}.lock.json"


def _read_lock(path: Path) -> dict[str, Fingerprint]:
    if not path.exists():
        return {}
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        prints = {p: Fingerprint(v["pristine"], v["before"], v["after"]) for p, v in files.items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _invalid(path, f"unreadable fingerprints ({exc})") from None
    for p, fp in prints.items():
        if not all(SHA256.match(h) for h in (fp.pristine, fp.before, fp.after)):
            raise _invalid(path, f"{p}: fingerprints must be sha256 hex digests")
    return prints


def load_fix(fix_dir: Path) -> Fix:
    where = fix_dir / "fix.toml"
    data = _read_toml(where)
    fix_id = _get(data, "id", str, where)
    if fix_id != fix_dir.name or not FIX_ID.match(fix_id):
        raise _invalid(where, f"id {fix_id!r} must be lower-case-with-dashes and equal the directory name")
    upstream = _get(data, "upstream", dict, where)
    status = _get(upstream, "status", str, where)
    if status not in UPSTREAM_STATUSES:
        raise _invalid(where, f"upstream.status {status!r} is not one of {', '.join(UPSTREAM_STATUSES)}")
    proof = _get(data, "proof", dict, where)
    level = _get(proof, "level", str, where)
    if level not in PROOF_LEVELS:
        raise _invalid(where, f"proof.level {level!r} is not one of {', '.join(PROOF_LEVELS)}")
    reason = _get(proof, "reason", str, where, "")
    if level != "demonstrated" and not reason.strip():
        raise _invalid(where, f"proof.level {level!r} needs a proof.reason")
    script = fix_dir / "proof.py"
    if level != "none" and not script.exists():
        raise _invalid(where, f"proof.level {level!r} but {script.name} is missing")

    changes: dict[str, tuple[Change, ...]] = {}
    for release, spec in _get(data, "release", dict, where).items():
        if not isinstance(spec, dict):
            raise _invalid(where, f"release {release!r} must be a table")
        transforms = _get(spec, "transforms", str, where, "")
        if transforms and not (fix_dir / transforms).is_file():
            raise _invalid(where, f"release {release!r}: {transforms} is missing")
        patch_file = fix_dir / _get(spec, "patch", str, where, rendered_patch_name(release) if transforms else ...)
        if transforms and not patch_file.exists():
            raise _invalid(where, f"release {release!r}: fixpack lock renders {transforms} into {patch_file.name}")
        try:
            text = patch_file.read_bytes().decode("utf-8", "surrogateescape")
        except OSError as exc:
            raise _invalid(where, f"release {release!r}: cannot read {patch_file.name} ({exc.strerror})") from None
        try:
            per_file = index(text)
        except ValueError as exc:
            raise _invalid(patch_file, str(exc)) from None
        if not per_file:
            raise _invalid(patch_file, "no file diffs in it")
        prints = _read_lock(lock_path(fix_dir, release))
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
        title=_get(data, "title", str, where).strip(),
        why=_get(data, "why", str, where).strip(),
        requires=tuple(_get(data, "requires", list, where, [])),
        conflicts=tuple(_get(data, "conflicts", list, where, [])),
        opt_in=_get(data, "opt_in", bool, where, False),
        upstream=Upstream(status, _get(upstream, "ref", str, where, ""), _get(upstream, "note", str, where, "")),
        proof=Proof(level, reason, str(script) if script.exists() else None),
        verified_on=_get(data, "verified_on", str, where, ""),
        changes=changes,
        source=str(fix_dir),
    )


def load_profile(path: Path) -> Profile:
    data = _read_toml(path)
    pins = []
    raw_pins = data.get("pin", [])
    if not isinstance(raw_pins, list):
        raise _invalid(path, "pins must be [[pin]] tables")
    for raw in raw_pins:
        if not isinstance(raw, dict):
            raise _invalid(path, "each [[pin]] must be a table")
        pins.append(
            Pin(
                dist=_get(raw, "dist", str, path),
                package=_get(raw, "package", str, path),
                version=_get(raw, "version", str, path),
                commits=tuple(c.lower() for c in _get(raw, "commits", list, path, [])),
            )
        )
    if not pins:
        raise _invalid(path, "no [[pin]] tables")
    pack = tuple(_get(data, "pack", list, path))
    opt_ins = tuple(_get(data, "opt_ins", list, path, []))
    if len(set(pack)) != len(pack):
        raise _invalid(path, "a fix is listed twice in 'pack'")
    stray = [f for f in opt_ins if f not in pack]
    if stray:
        raise _invalid(path, f"opt_ins {stray} are not in 'pack' (give them their slot in pack order)")
    return Profile(
        name=path.stem,
        release=_get(data, "release", str, path),
        description=_get(data, "description", str, path, "").strip(),
        pins=tuple(pins),
        pack=pack,
        opt_ins=opt_ins,
    )


@dataclass
class Catalog:
    """Every fix and profile of one cookbook checkout, validated against each other."""

    fixes: dict[str, Fix]
    profiles: dict[str, Profile]
    root: Path

    @classmethod
    def load(cls, root: Path = REPO_ROOT) -> Catalog:
        fixes_dir, profiles_dir = root / "fixes", root / "profiles"
        fixes = {}
        if fixes_dir.is_dir():
            for d in sorted(fixes_dir.iterdir()):
                if (d / "fix.toml").exists():
                    fix = load_fix(d)
                    fixes[fix.id] = fix
        profiles = {}
        if profiles_dir.is_dir():
            for p in sorted(profiles_dir.glob("*.toml")):
                profiles[p.stem] = load_profile(p)
        catalog = cls(fixes, profiles, root)
        catalog._validate()
        return catalog

    def _validate(self) -> None:
        for fix in self.fixes.values():
            where = Path(fix.source) / "fix.toml"
            for ref in fix.requires + fix.conflicts:
                if ref not in self.fixes:
                    raise _invalid(where, f"names unknown fix {ref!r}{suggest(ref, list(self.fixes))}")
        for profile in self.profiles.values():
            where = self.root / "profiles" / f"{profile.name}.toml"
            for fid in profile.pack:
                if fid not in self.fixes:
                    raise _invalid(where, f"pack names unknown fix {fid!r}{suggest(fid, list(self.fixes))}")
                fix = self.fixes[fid]
                if profile.release not in fix.changes:
                    raise _invalid(where, f"fix {fid!r} has no changes for release {profile.release!r}")
                if fix.opt_in and fid not in profile.opt_ins:
                    raise _invalid(where, f"fix {fid!r} is opt-in but not listed in opt_ins")
                for change in fix.changes[profile.release]:
                    if profile.pin_for_path(change.path) is None:
                        raise _invalid(where, f"fix {fid!r} edits {change.path}, which no pin's package holds")

    def fix(self, fix_id: str) -> Fix:
        if fix_id not in self.fixes:
            raise UsageError(f"unknown fix {fix_id!r}{suggest(fix_id, list(self.fixes))}")
        return self.fixes[fix_id]

    def profile(self, name: str) -> Profile:
        if name not in self.profiles:
            known = ", ".join(self.profiles) or "none"
            raise UsageError(f"unknown profile {name!r}{suggest(name, list(self.profiles))}; known: {known}")
        return self.profiles[name]
