"""``apply``, ``status`` and ``revert`` with ``--overlay DIR``: the same plan, the same
fingerprints, and nothing written under site-packages. The installed files are read, the patched
ones built from them, and DIR built whole and swapped in (``fixpack.site.overlay``)."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from ..cookbook.catalog import Catalog
from ..core.bytecode import hash_based_pyc
from ..core.fingerprint import patch_digest, sha256
from ..core.plan import resolve, with_dependents
from ..core.recognise import Base
from ..errors import Refused, UsageError
from ..models import Action, FileState, Plan, Profile
from ..runtime import fixset
from ..site import plugin
from ..site.distributions import Environment
from ..site.layout import MANIFEST, STATE_DIR_NAME
from ..site.manifest import Manifest
from ..site.overlay import MODULES, Overlay, activation, exec_command
from ..site.state import read_file, read_manifest
from .pin import pinned, refuse_unexpected
from .results import FixResult, Result, StatusResult
from .stamping import Invocation, warm_stamp
from .steps import (
    InstalledFile,
    Rebuilt,
    already_applied,
    check_commits,
    installed,
    nothing_changed,
    pulled_in_notes,
    rebuild_files,
    recognise_files,
    refuse_drift,
    refused_results,
)

if TYPE_CHECKING:
    from .recipes.launch import Gate

__all__ = ["apply_overlay", "status_overlay", "revert_overlay", "exec_command"]

HOOK = "sitecustomize.py"


def _index_entries(overlay: Overlay, manifest: Manifest) -> dict[str, dict]:
    """The overlay's index entries by repository path ({} when it has none or it is unreadable)."""
    import json

    try:
        data = json.loads(overlay.read(plugin.INDEX) or b"{}")
        return {e["path"]: e for e in data.get("files", [])}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


def _intact(overlay: Overlay, manifest: Manifest, plan: Plan, profile: Profile, recipe: tuple) -> bool:
    """The overlay holds exactly this plan (and ``recipe``: slug, rules), unchanged, over the
    installed files it was built from."""
    if manifest.profile != profile.name or set(plan.fix_ids) != set(manifest.fixes):
        return False
    if (manifest.recipe, manifest.rules) != recipe:
        return False
    if set(plan.paths()) != set(manifest.files):
        return False
    for path in plan.paths():
        wanted = tuple((pc.change.fix_id, patch_digest(pc.change.patch)) for pc in plan.changes_for(path))
        if wanted != manifest.steps(path):
            return False
    entries = _index_entries(overlay, manifest)
    for path, record in manifest.files.items():
        entry = entries.get(path)
        if entry is None or entry.get("sha256") != record.applied:
            return False
        if sha256(overlay.read(entry["file"]) if entry.get("file") else None) != record.applied:
            return False
        if sha256(Path(entry["original"]).read_bytes() if Path(entry["original"]).is_file() else None) != entry.get(
            "pristine"
        ):
            return False
    runtime = plugin.RUNTIME
    return overlay.read(HOOK) == (runtime / "hook.py").read_bytes() and all(
        overlay.read(rel) == (runtime / source).read_bytes() for rel, source in plugin.CODE.items()
    )


def overlay_files(
    overlay: Overlay, files: dict[str, InstalledFile], rebuilt: Rebuilt, manifest: Manifest
) -> tuple[dict[str, bytes], dict[str, str | None]]:
    """Every file of the overlay (path in DIR -> bytes) but the manifest, and the warm stamp's
    targets: each overlay module and each installed file it shadows, by absolute path -> hash."""
    out: dict[str, bytes] = {}
    entries, targets = [], {}
    for path, record in sorted(manifest.files.items()):
        if not path.endswith(".py") or plugin.module_name(path) is None:
            raise Refused(
                f"{path} is not a Python module: an overlay can only carry modules (apply in place instead)",
                fix_id=record.fixes[0],
                path=path,
            )
        content = rebuilt.new[path]
        rel = f"{MODULES}/{path}" if content is not None else None
        if content is not None and rel is not None:
            out[rel] = content
            code, pyc = rebuilt.code.get(path), plugin.pyc_path(rel)
            if code is not None and pyc is not None:
                out[pyc] = hash_based_pyc(code, content)
            targets[str(overlay.root / rel)] = record.applied
        f = files[path]
        original = f.dist.file(path)
        entries.append(
            {
                "path": path,
                "module": plugin.module_name(path),
                "file": rel,
                "sha256": record.applied,
                "original": str(original),
                "pristine": sha256(f.current),  # the installed bytes the overlay is built over
            }
        )
        targets[str(original)] = sha256(f.current)
    hook = (plugin.RUNTIME / "hook.py").read_bytes()
    out[HOOK] = hook
    compiled = plugin.pyc(HOOK, hook)
    if compiled is not None:
        out[compiled[0]] = compiled[1]
    index = plugin.index("overlay", manifest, entries)
    out.update(plugin.files(index))
    for rel in (HOOK, plugin.INDEX, *plugin.CODE):
        targets[str(overlay.root / rel)] = sha256(out[rel])
    return out, targets


def _refuse_in_place(env: Environment, catalog: Catalog) -> None:
    if not env.state_dir.parent.is_dir():
        return
    in_place = read_manifest(env.state_dir, catalog.fixes, catalog.root)
    if not in_place.empty:
        raise Refused(
            f"{env.state_dir.parent} has fixes applied in place ({', '.join(in_place.fixes)}): an overlay is built "
            "over the installed release; use the in-place fixes, or fixpack revert them first"
        )


def apply_overlay(
    catalog: Catalog,
    profile: Profile,
    asked: tuple[str, ...],
    site: Path | None,
    root: Path,
    dry_run: bool,
    allow_unpinned: bool,
    invocation: Invocation | None,
    expected: str | None = None,
    gate: Gate | None = None,
) -> Result:
    """``expected``: the fix-set digest the overlay must hold (``fixpack.commands.pin``)."""
    result = Result("apply", profile.name, dry_run=dry_run)
    env, dists = installed(profile, site)
    commit_notes = check_commits(profile, dists, allow_unpinned)
    result.notes += commit_notes
    _refuse_in_place(env, catalog)
    overlay = Overlay(root)
    hint = f"the overlay is {overlay.root}; to use it: {activation(overlay.root)}"
    lock = overlay.locked(create=not dry_run) if not dry_run or overlay.root.parent.is_dir() else nullcontext()
    with lock:
        recovered = overlay.recover() if overlay.root.parent.is_dir() else None
        if recovered:
            result.notes.append(recovered)
        manifest = read_manifest(overlay.state_dir, catalog.fixes, catalog.root) if overlay.is_overlay() else Manifest()
        if manifest.release not in (None, profile.release):
            raise Refused(f"the overlay {overlay.root} has fixes of release {manifest.release}; revert it first")
        plan = resolve(catalog.fixes, profile, asked, keep=manifest.fixes)
        result.notes += pulled_in_notes(plan)
        if gate is not None:
            result.notes += gate.judge(plan)
        recipe, rules = gate.record() if gate is not None else (None, ())
        if _intact(overlay, manifest, plan, profile, (recipe, rules)):
            result.fixes = already_applied(plan)
            result.notes.append(hint)
            return pinned(result, plan, expected, manifest.fix_set)
        files = recognise_files(catalog.fixes, profile, dists, Manifest(), list(plan.paths()), overlay.state_dir)
        try:
            refuse_drift(files, plan, {})
            rebuilt = rebuild_files(plan, files, plan.fix_ids)
            new_manifest = Manifest(
                profile.name, profile.release, plan.fix_ids, rebuilt.records, recipe=recipe, rules=rules
            )
            refuse_unexpected(expected, new_manifest.fix_set, manifest.fix_set)
            content, targets = overlay_files(overlay, files, rebuilt, new_manifest)
        except Refused as refused:
            result.error = nothing_changed(refused)
            result.fixes = refused_results(plan, refused)
            return result
        kept = _intact_steps(overlay, manifest)
        for fix in plan.fixes:
            steps = {(fix.id, patch_digest(c.patch)) for c in fix.changes[profile.release]}
            done = fix.id in manifest.fixes and steps <= kept
            action = Action.ALREADY_APPLIED if done else (Action.WOULD_APPLY if dry_run else Action.APPLIED)
            result.fixes.append(
                FixResult(fix.id, action, None, rebuilt.counts.get(fix.id, []), plan.pulled_in.get(fix.id))
            )
        result.notes.append(hint)
        if invocation is not None and not dry_run:
            done_result = Result(
                "apply", profile.name, already_applied(plan), [*commit_notes, *pulled_in_notes(plan), hint]
            )
            stamp = warm_stamp(
                invocation, catalog, done_result, list(dists.values()), targets, overlay.state_dir, site, overlay.root
            )
            new_manifest = Manifest(
                profile.name, profile.release, plan.fix_ids, rebuilt.records, warm=stamp, recipe=recipe, rules=rules
            )
        content[f"{STATE_DIR_NAME}/{MANIFEST}"] = new_manifest.to_bytes()
        if dry_run:
            overlay.check()
            return result
        overlay.commit(content)
    return result


def _intact_steps(overlay: Overlay, manifest: Manifest) -> set[tuple[str, str]]:
    """(fix, patch digest) of every change the old overlay holds in a file still as it built it."""
    out: set[tuple[str, str]] = set()
    entries = _index_entries(overlay, manifest)
    for path, record in manifest.files.items():
        entry = entries.get(path, {})
        if sha256(overlay.read(entry["file"]) if entry.get("file") else None) == record.applied:
            out.update(manifest.steps(path))
    return out


def _state(fix_id: str, changes: list, files: dict[str, InstalledFile], manifest: Manifest, entries: dict) -> str:
    per_file = []
    for change in changes:
        f, record, entry = files[change.path], manifest.files.get(change.path), entries.get(change.path)
        if record is not None and entry is not None:
            if sha256(f.current) != entry.get("pristine"):
                return FileState.DRIFTED  # the image changed under the overlay
            per_file.append(fix_id in record.fixes)
        elif f.base.state in (FileState.DRIFTED, FileState.MISSING):
            return f.base.state
        else:
            per_file.append(False)
    if per_file and all(per_file):
        return FileState.APPLIED
    return "partial" if any(per_file) else "pending"


def status_overlay(
    catalog: Catalog, env: Environment, profile_name: str | None, site: Path | None, root: Path
) -> StatusResult:
    overlay, notes = Overlay(root), []
    if overlay.root.parent.is_dir():
        with overlay.locked():
            recovered = overlay.recover()
            if recovered:
                notes.append(recovered)
    manifest = read_manifest(overlay.state_dir, catalog.fixes, catalog.root) if overlay.is_overlay() else Manifest()
    notes.append(f"overlay {overlay.root}" + ("" if overlay.is_overlay() else ": none there"))
    name = profile_name or manifest.profile
    if name is None:
        return StatusResult(None, list(env.found.values()), [], notes, manifest)
    profile = catalog.profile(name)
    _, dists = installed(profile, site)
    fix_ids = list(profile.pack) if profile_name else list(manifest.fixes)
    changes = {fid: catalog.fixes[fid].changes[profile.release] for fid in fix_ids}
    paths = list(dict.fromkeys(c.path for cs in changes.values() for c in cs))
    files = recognise_files(catalog.fixes, profile, dists, Manifest(), paths, overlay.state_dir)
    entries = _index_entries(overlay, manifest)
    rows = []  # the overlay's copy of each patched file, and the installed file it shadows
    for path, record in manifest.files.items():
        entry = entries.get(path, {})
        copy = sha256(overlay.read(entry["file"]) if entry.get("file") else None)
        if path in files:
            original = files[path].current
        else:
            original = read_file(Path(entry["original"])) if entry.get("original") else None
        rows += [(path, record.applied, copy), (path, entry.get("pristine"), sha256(original))]
        if path in files and copy != record.applied:  # an overlay file changed since it was built
            entries.pop(path, None)
            files[path].base = Base(None, (), FileState.DRIFTED, "the overlay's copy changed")
    fixes = [(fid, _state(fid, list(changes[fid]), files, manifest, entries)) for fid in fix_ids]
    drifted = fixset.drifted(rows)
    return StatusResult(profile.name, list(env.found.values()), fixes, notes, manifest, drifted)


def revert_overlay(
    catalog: Catalog, names: tuple[str, ...], site: Path | None, root: Path, dry_run: bool = False
) -> Result:
    overlay = Overlay(root)
    result = Result("revert", None, dry_run=dry_run)
    if not overlay.root.parent.is_dir():
        result.notes.append(f"no overlay at {overlay.root}")
        return result
    with overlay.locked():
        recovered = overlay.recover()
        if recovered:
            result.notes.append(recovered)
        if not overlay.is_overlay():
            result.notes.append(f"no overlay at {overlay.root}")
            return result
        manifest = read_manifest(overlay.state_dir, catalog.fixes, catalog.root)
        profile = catalog.profile(manifest.profile or "")
        result.profile = profile.name
        for name in names:
            if name not in manifest.fixes:
                raise UsageError(f"fix {name!r} is not in the overlay {overlay.root}", fix_id=name)
        removing = with_dependents(catalog.fixes, set(names or manifest.fixes), manifest.fixes)
        keep = tuple(f for f in manifest.fixes if f not in removing)
        for fid in manifest.fixes:
            if fid in removing:
                needs = removing[fid]
                why = None if needs is None or not names else f"depends on {needs}, which is being reverted"
                result.fixes.append(FixResult(fid, Action.WOULD_REVERT if dry_run else Action.REVERTED, why))
        if not keep:
            if dry_run:
                overlay.check()
            else:
                overlay.remove()
                result.notes.append(f"removed the overlay {overlay.root}")
            return result
        _, dists = installed(profile, site)
        plan = resolve(catalog.fixes, profile, (), keep=keep)
        paths = [p for p in plan.paths() if any(pc.change.fix_id in keep for pc in plan.changes_for(p))]
        files = recognise_files(catalog.fixes, profile, dists, Manifest(), paths, overlay.state_dir)
        try:
            refuse_drift(files, plan, {})
            rebuilt = rebuild_files(plan, files, keep)
        except Refused as refused:
            result.error = nothing_changed(refused)
            return result
        new_manifest = Manifest(profile.name, profile.release, keep, rebuilt.records)
        content, _ = overlay_files(overlay, files, rebuilt, new_manifest)
        content[f"{STATE_DIR_NAME}/{MANIFEST}"] = new_manifest.to_bytes()
        if dry_run:
            overlay.check()
        else:
            overlay.commit(content)
    return result
