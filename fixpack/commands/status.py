"""``fixpack status``: the installed distributions, their commits, and the state of each fix."""

from __future__ import annotations

from pathlib import Path

from ..cookbook.catalog import Catalog
from ..core.fingerprint import sha256
from ..errors import EnvironmentProblem
from ..models import FileState, Fix
from ..runtime import fixset
from ..site.destination import InPlace
from ..site.distributions import Environment
from ..site.manifest import Manifest
from ..site.state import read_file
from .overlay import status_overlay
from .results import StatusResult
from .steps import InstalledFile, installed, open_state, recognise_files

__all__ = ["status", "all_pins"]


def all_pins(catalog: Catalog) -> dict[str, str]:
    """Every distribution any profile pins: canonical name -> import package."""
    return {p.dist: p.package for prof in catalog.profiles.values() for p in prof.pins}


def _fix_state(fix: Fix, release: str, files: dict[str, InstalledFile]) -> FileState | str:
    per_file = []
    for change in fix.changes[release]:
        base = files[change.path].base
        if base.state in (FileState.DRIFTED, FileState.MISSING):
            return base.state
        per_file.append(fix.id in base.applied)
    if all(per_file):
        return FileState.APPLIED
    return "partial" if any(per_file) else "pending"


def status(catalog: Catalog, profile_name: str | None, site: Path | None, overlay: Path | None = None) -> StatusResult:
    """``overlay``: each fix's state in that overlay folder, over the installed files."""
    env = Environment.read(all_pins(catalog), site)
    if overlay is not None:
        return status_overlay(catalog, env, profile_name, site, overlay)
    notes: list[str] = []
    if not env.found:
        where = f"in {site}" if site is not None else "in this interpreter's path (use --site DIR?)"
        raise EnvironmentProblem(f"neither of {', '.join(sorted(env.wanted))} is installed {where}")
    destination = InPlace.of(env)
    with destination.locked():
        manifest = open_state(destination, catalog, notes)
    name = profile_name or manifest.profile
    if name is None:
        return StatusResult(None, list(env.found.values()), [], notes, manifest)
    profile = catalog.profile(name)
    _, dists = installed(profile, site)
    fix_ids = list(profile.pack) if profile_name else list(manifest.fixes)
    paths = list(dict.fromkeys(c.path for fid in fix_ids for c in catalog.fixes[fid].changes[profile.release]))
    files = recognise_files(catalog.fixes, profile, dists, manifest, paths, env.state_dir)
    fixes = [(fid, _fix_state(catalog.fixes[fid], profile.release, files)) for fid in fix_ids]
    return StatusResult(profile.name, list(env.found.values()), fixes, notes, manifest, _drifted(manifest, files, env))


def _drifted(manifest: Manifest, files: dict[str, InstalledFile], env: Environment) -> list[str]:
    """The patched files that do not hold their recorded after-hashes now (the bytes recognise read)."""
    rows = []
    for path, record in manifest.files.items():
        if path in files:
            current = files[path].current
        else:
            dist = env.found.get(record.dist)
            current = read_file(dist.file(path)) if dist is not None else None
        rows.append((path, record.applied, sha256(current)))
    return fixset.drifted(rows)
