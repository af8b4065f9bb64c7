"""``fixpack lock``: fingerprint every change of a profile against pristine source trees.

Walks the pack in order over each file, from the release's pristine bytes, and records for every
change the pristine hash of its file and the hashes before and after it. Refuses, naming the hunk,
when a change no longer applies.
"""

from __future__ import annotations

import json
from pathlib import Path

from .catalog import Catalog, lock_path, rendered_patch_name
from .compose import ChangeFailed, build, compile_error
from .errors import Refused, UsageError
from .fingerprint import of
from .model import Change, Fingerprint, Profile


def read_source(sources: dict[str, Path], profile: Profile, path: str) -> bytes | None:
    pin = profile.pin_for_path(path)
    if pin is None or pin.dist not in sources:
        raise UsageError(f"{path}: no --source given for the distribution that holds it")
    target = sources[pin.dist] / path
    return target.read_bytes() if target.exists() else None


def fingerprints(catalog: Catalog, profile: Profile, sources: dict[str, Path]) -> dict[str, dict[str, Fingerprint]]:
    """fix id -> path -> Fingerprint, over the whole pack (opt-ins included) in pack order."""
    chains: dict[str, list[Change]] = {}
    for fid in profile.pack:
        for change in catalog.fixes[fid].changes[profile.release]:
            chains.setdefault(change.path, []).append(change)
    out: dict[str, dict[str, Fingerprint]] = {fid: {} for fid in profile.pack}
    for path, chain in chains.items():
        pristine = read_source(sources, profile, path)
        content = pristine
        for change in chain:
            before = content
            try:
                content = build(before, [_unlocked(change)])
            except ChangeFailed as exc:
                raise Refused(f"{change.fix_id}: {exc.message}", details=exc.details) from None
            problem = compile_error(path, content)
            if problem:
                raise Refused(f"{change.fix_id}: the result does not compile: {problem}")
            out[change.fix_id][path] = Fingerprint(of(pristine), of(before), of(content))
    return out


def _unlocked(change: Change) -> Change:
    return Change(change.fix_id, change.release, change.path, change.patch, None, change.creates, change.deletes)


def write(catalog: Catalog, profile: Profile, prints: dict[str, dict[str, Fingerprint]]) -> list[Path]:
    """Write ``<release>.lock.json`` beside each fix; returns the files that changed."""
    changed = []
    for fid, files in prints.items():
        target = lock_path(Path(catalog.fixes[fid].source), profile.release)
        data = {
            "release": profile.release,
            "files": {p: {"pristine": fp.pristine, "before": fp.before, "after": fp.after} for p, fp in files.items()},
        }
        text = json.dumps(data, indent=2) + "\n"
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            changed.append(target)
    return changed


def render_cst(root: Path, profile: Profile, sources: dict[str, Path]) -> list[Path]:
    """Render each cst fix of the pack against the pristine trees into ``<release>.rendered.patch``.

    Reads fix directories, not the catalog: the catalog needs the rendered patch to load a cst fix.
    Returns the files that changed.
    """
    from .applicators import diff
    from .applicators.cst import CstFailed, render_transforms, transforms_file

    changed = []
    for fid in profile.pack:
        fix_dir = root / "fixes" / fid
        if transforms_file(fix_dir, profile.release) is None:
            continue
        try:
            text = render_transforms(fix_dir, profile.release, lambda path: read_source(sources, profile, path))
        except (CstFailed, ValueError) as exc:
            raise Refused(f"{fid}: {exc}") from None
        target = fix_dir / rendered_patch_name(profile.release)
        content = text.encode(diff.ENC, diff.ERRORS)
        if not target.exists() or target.read_bytes() != content:
            target.write_bytes(content)
            changed.append(target)
    return changed
