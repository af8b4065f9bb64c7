"""``fixpack status``: the installed distributions, their commits, the state of each fix in the
destination (the installed site, or an overlay folder), and the fix set it vouches for."""

from __future__ import annotations

from pathlib import Path

from ...cookbook.catalog import Catalog
from ...errors import EnvironmentProblem
from ...runtime import check, fixset
from ...site.distributions import Environment
from .pipeline import (
    destination,
    fix_state,
    installed,
    open_state,
    recognise_files,
    recognised_against,
    rows,
    through_overlay,
    usage_notes,
)
from .results import StatusResult

__all__ = ["status", "all_pins", "site_profile"]


def all_pins(catalog: Catalog) -> dict[str, str]:
    """Every distribution any profile pins: canonical name -> import package."""
    return {p.dist: p.package for prof in catalog.profiles.values() for p in prof.pins}


def site_profile(catalog: Catalog, site: Path | None, overlay: Path | None = None) -> str | None:
    """The profile a site is for: the one applied there; else the usable profile whose pinned
    distributions are all installed and none it names in ``[instead]`` (the one that pins the most,
    when several hold); None when no profile fits."""
    applied = status(catalog, None, site, overlay).profile
    if applied is not None:
        return applied
    found = set(Environment.read(all_pins(catalog), site).found)
    fits = [
        p
        for p in catalog.usable
        if {pin.dist for pin in p.pins} <= found and not any(dist in found for dist, _ in p.instead)
    ]
    return max(fits, key=lambda p: len(p.pins)).name if fits else None


def status(catalog: Catalog, profile_name: str | None, site: Path | None, overlay: Path | None = None) -> StatusResult:
    """``overlay``: each fix's state in that overlay folder, over the installed files."""
    env = Environment.read(all_pins(catalog), site)
    if overlay is None and not env.found:
        where = f"in {site}" if site is not None else "in this interpreter's path (use --site DIR?)"
        raise EnvironmentProblem(f"neither of {', '.join(sorted(env.wanted))} is installed {where}")
    notes: list[str] = []
    target = destination(env, overlay)
    with target.locked():
        held = open_state(target, catalog, notes)
    manifest = held.manifest
    notes += usage_notes(target, manifest)
    name = profile_name or manifest.profile
    if name is None:
        return StatusResult(None, list(env.found.values()), [], notes, manifest)
    profile = catalog.profile(name)
    _, dists = installed(profile, site)
    fix_ids = list(profile.pack) if profile_name else list(manifest.fixes)
    paths = list(dict.fromkeys(c.path for fid in fix_ids for c in catalog.fixes[fid].changes[profile.release]))
    installed_files = recognise_files(catalog.fixes, profile, dists, recognised_against(held), paths, target.state_dir)
    files = through_overlay(installed_files, held)
    drifted = fixset.drifted(rows(held, files, dists))
    fixes = [(fid, fix_state(catalog.fixes[fid], profile.release, files)) for fid in fix_ids]
    # what every vLLM process would refuse, whatever the files hold (the runtime index is beside the state)
    refused = None if manifest.empty else check.refusal(str(target.state_dir.parent))
    return StatusResult(profile.name, list(env.found.values()), fixes, notes, manifest, drifted, refused)
