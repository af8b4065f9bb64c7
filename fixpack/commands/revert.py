"""``fixpack revert``: the named fixes, and those that require them, taken back to the exact
pristine bytes (default: all)."""

from __future__ import annotations

from pathlib import Path

from ..cookbook.catalog import Catalog
from ..core.names import suggest
from ..core.plan import resolve, with_dependents
from ..errors import Refused, UsageError
from ..models import Action
from ..site import plugin
from ..site.destination import InPlace
from ..site.distributions import Environment
from ..site.manifest import Manifest
from .overlay import revert_overlay
from .results import FixResult, Result
from .status import all_pins
from .steps import installed, nothing_changed, open_state, rebuild_files, recognise_files, refuse_drift, write_set

__all__ = ["revert"]


def revert(
    catalog: Catalog, names: tuple[str, ...], site: Path | None, dry_run: bool = False, overlay: Path | None = None
) -> Result:
    """``overlay``: revert in that overlay folder (all of it: the folder is removed)."""
    if overlay is not None:
        return revert_overlay(catalog, names, site, overlay, dry_run)
    env = Environment.read(all_pins(catalog), site)
    result = Result("revert", None, dry_run=dry_run)
    if not env.found:
        result.notes.append("nothing is applied here")
        return result
    destination = InPlace.of(env)
    with destination.locked():
        manifest = open_state(destination, catalog, result.notes)
        if manifest.empty:
            result.notes.append("nothing is applied here")
            return result
        profile = catalog.profile(manifest.profile or "")
        result.profile = profile.name
        _, dists = installed(profile, site)
        for name in names:
            if name not in manifest.fixes:
                raise UsageError(f"fix {name!r} is not applied here{suggest(name, list(manifest.fixes))}", fix_id=name)
        removing = with_dependents(catalog.fixes, set(names or manifest.fixes), manifest.fixes)
        keep = tuple(f for f in manifest.fixes if f not in removing)
        plan = resolve(catalog.fixes, profile, (), keep=manifest.fixes)
        files = recognise_files(catalog.fixes, profile, dists, manifest, list(manifest.files), env.state_dir)
        try:
            refuse_drift(files, plan, manifest.files)
            rebuilt = rebuild_files(plan, files, keep)
        except Refused as refused:
            result.error = nothing_changed(refused)
            return result
        for fid in manifest.fixes:
            if fid in removing:
                needs = removing[fid]
                why = None if needs is None or not names else f"depends on {needs}, which is being reverted"
                result.fixes.append(FixResult(fid, Action.WOULD_REVERT if dry_run else Action.REVERTED, why))
        new_manifest = Manifest(profile.name, profile.release, keep, rebuilt.records) if keep else Manifest()
        runtime = plugin.in_place(destination.state_dir.parent, new_manifest, list(dists.values()))
        state_dir = destination.state_dir
        dist_list = list(dists.values())
        writes = write_set(files, rebuilt, new_manifest, manifest, state_dir, dist_list, None, runtime)
        if dry_run:
            destination.check(writes)
        else:
            destination.commit(writes)
    return result
