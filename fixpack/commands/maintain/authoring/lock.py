"""``fixpack lock``: fingerprint every change of a profile against pristine source trees.

Walks the pack in order over each file, from the release's pristine bytes, and records for every
change the pristine hash of its file and the hashes before and after it. Refuses, naming the hunk,
when a change no longer applies.
"""

from __future__ import annotations

from pathlib import Path

from ....cookbook import tomlfile
from ....cookbook.catalog import Catalog
from ....cookbook.fix_module import load_fix, rendered_patch_name, transforms_file
from ....cookbook.lockfile import lock_path, lock_text
from ....cookbook.profiles import load_profile
from ....core import patch
from ....core.fingerprint import of
from ....core.plan import applied_orders, chains, orders_of
from ....core.rebuild import build, compile_error, failed
from ....errors import Refused, UsageError
from ....installation.files import write_changed
from ....models import Change, Fingerprint, Profile

__all__ = ["read_source", "fingerprints", "write", "render_cst", "lockable", "lock"]


def read_source(sources: dict[str, Path], profile: Profile, path: str) -> bytes | None:
    pin = profile.pin_for_path(path)
    if pin is None or pin.dist not in sources:
        raise UsageError(f"{path}: no --source given for the distribution that holds it", path=path)
    target = sources[pin.dist] / path
    return target.read_bytes() if target.is_file() else None


def fingerprints(catalog: Catalog, profile: Profile, sources: dict[str, Path]) -> dict[str, dict[str, Fingerprint]]:
    """fix id -> path -> Fingerprint: each change on the bytes it meets when applied, in pack
    order with every opt-in (a fix an opt-in supersedes: without that opt-in)."""
    out: dict[str, dict[str, Fingerprint]] = {fid: {} for fid in profile.pack}
    locked: set[str] = set()
    for order in applied_orders(catalog.fixes, profile):
        for path, chain in chains((catalog.fixes[f] for f in order), profile.release).items():
            pristine = read_source(sources, profile, path)
            content = pristine
            for change in chain:
                before = content
                try:
                    content = build(before, [_unlocked(change)])
                except Refused as exc:
                    raise failed(change, f"{change.fix_id}: {exc.message}", exc.details) from None
                problem = compile_error(path, content)
                if problem:
                    raise failed(change, f"{change.fix_id}: the result does not compile: {problem}")
                if change.fix_id not in locked:
                    out[change.fix_id][path] = Fingerprint(of(pristine), of(before), of(content))
        locked.update(order)
    return out


def _unlocked(change: Change) -> Change:
    return Change(change.fix_id, change.release, change.path, change.patch, None, change.creates, change.deletes)


def write(catalog: Catalog, profile: Profile, prints: dict[str, dict[str, Fingerprint]]) -> list[Path]:
    """Write ``<release>.lock.json`` beside each fix; returns the files that changed."""
    written = []
    for fid, files in prints.items():
        target = lock_path(Path(catalog.fixes[fid].source), profile.release)
        if write_changed(target, lock_text(profile.release, files).encode()):
            written.append(target)
    return written


def render_cst(root: Path, profile: Profile, sources: dict[str, Path]) -> list[Path]:
    """Render each cst fix of the pack into ``<release>.rendered.patch``, against the bytes it meets
    when applied: the pristine file with the changes of the fixes before it in pack order (as
    ``fingerprints`` chains them, a superseded fix in its own order).

    Reads fix directories, not the catalog: the catalog needs the rendered patch to load a cst fix.
    Returns the files that changed.
    """
    from ....transforms import CstFailed, load_transforms, render_transforms

    dirs = {fid: root / "fixes" / fid for fid in profile.pack}
    specs = {fid: transforms_file(d, profile.release) for fid, d in dirs.items()}
    todo = {fid for fid, spec in specs.items() if spec is not None}
    supersedes = {fid: tuple(tomlfile.read(d / "fix.toml").get("supersedes", [])) for fid, d in dirs.items()}
    changed: list[Path] = []
    before: dict[str, list[Change]] = {}  # path -> the changes of the fixes met so far in this order

    def read(path: str) -> bytes | None:
        try:
            return build(read_source(sources, profile, path), [_unlocked(c) for c in before.get(path, [])])
        except Refused as exc:
            raise Refused(f"{path}: a fix before a transform does not apply: {exc.message}", path=path) from None

    for order in orders_of(supersedes, profile.pack):
        before.clear()
        for fid in order:
            if not todo:
                return changed
            spec = specs[fid]
            if spec is not None and fid in todo:
                todo.discard(fid)
                try:
                    text = render_transforms(load_transforms(spec), read)
                except (CstFailed, ValueError) as exc:
                    raise Refused(f"{fid}: {exc}", fix_id=fid) from None
                target = dirs[fid] / rendered_patch_name(profile.release)
                content = text.encode(patch.ENC, patch.ERRORS)
                if write_changed(target, content):
                    changed.append(target)
            for change in load_fix(dirs[fid]).changes.get(profile.release, ()):
                before.setdefault(change.path, []).append(change)
    return changed


def lockable(root: Path, sources: dict[str, Path]) -> list[str]:
    """The profiles ``lock`` without --profile fingerprints: every profile but a draft whose pinned
    distributions all have a --source tree (profiles of one release share each fix's lock)."""
    profiles = [load_profile(p) for p in sorted((root / "profiles").glob("*.toml"))]
    if len(profiles) == 1:
        return [profiles[0].name]
    names = [p.name for p in profiles if not p.draft and {pin.dist for pin in p.pins} <= set(sources)]
    if not names:
        known = ", ".join(p.name for p in profiles) or "none"
        raise UsageError(f"give --profile NAME, or --source trees for all its pins (this cookbook has: {known})")
    return names


def lock(root: Path, profile_name: str, sources: dict[str, Path]) -> tuple[Profile, list[Path]]:
    """Render the profile's transforms, then fingerprint its pack; the profile and the files changed.
    The catalog is loaded only once the transforms are rendered: it needs their rendered patches."""
    prof_file = root / "profiles" / f"{profile_name}.toml"
    changed = render_cst(root, load_profile(prof_file), sources) if prof_file.exists() else []
    catalog = Catalog.load(root)
    profile = catalog.profile(profile_name, drafts=True)
    changed += write(catalog, profile, fingerprints(catalog, profile, sources))
    return profile, changed
