"""``fixpack status``: the installed distributions, their commits, the state of each fix in the
destination (the installed site, or an overlay folder), and the fix set it vouches for."""

from __future__ import annotations

from ...cookbook.catalog import Catalog
from ...errors import EnvironmentProblem
from ...installation.destination import Where
from ...installation.distributions import Environment
from ...models import FileState, Profile
from ...runtime import check, fixset
from .pins import all_pins, dist_of, fitting, gone_notes, installed, remaining
from .pipeline import as_run, fix_state, holding, recognise_files, rows, usage_notes
from .results import StatusResult

__all__ = ["status", "site_profile"]


def site_profile(catalog: Catalog, where: Where) -> str | None:
    """The profile a site is for: the one applied there (in ``where``'s destination); else the
    usable profile whose pinned distributions are all installed and none it names in ``[instead]``
    (the one that pins the most, when several hold); None when no profile fits."""
    applied = status(catalog, None, where).profile
    if applied is not None:
        return applied
    fits = fitting(catalog, where.site)
    return fits[0].name if fits else None


def status(catalog: Catalog, profile_name: str | None, where: Where) -> StatusResult:
    """Each fix's state in ``where``'s destination, over the distributions of its site."""
    site = where.site
    env = Environment.read(all_pins(catalog), site)
    target = where.open(env)
    if target is None:
        found_in = f"in {site}" if site is not None else "in this interpreter's path"
        raise EnvironmentProblem(
            f"neither of {', '.join(sorted(env.wanted))} is installed {found_in}: give --site DIR, the "
            "site-packages folder of the Python that runs vLLM"
        )
    notes: list[str] = []
    with holding(target, catalog, notes) as held:
        manifest = held.manifest
    name = profile_name or manifest.profile
    if name is None:
        return StatusResult(None, list(env.found.values()), [], usage_notes(target, manifest) + notes, manifest)
    profile = catalog.profile(name)
    fix_ids = list(profile.pack) if profile_name else list(manifest.fixes)
    paths = list(dict.fromkeys(c.path for fid in fix_ids for c in catalog.fixes[fid].changes[profile.release]))
    # what is applied is reported even where a distribution it patched was removed since
    _, dists, gone = remaining(profile, site)
    if gone and profile_name not in (None, manifest.profile):
        installed(profile, where)  # another profile's pending fixes: refused, naming what is missing
    went = {p for p in paths if dist_of(profile, p) in gone}
    went_notes = gone_notes(profile, gone, sorted(went), site)
    if went_notes and not manifest.empty:
        went_notes[-1] += "; fixpack revert takes back the fixes on what remains"
    notes += went_notes
    paths = [p for p in paths if p not in went]
    installed_files = recognise_files(catalog.fixes, profile, dists, held.installed, paths, target.state_dir)
    files = as_run(installed_files, held)
    drifted = fixset.drifted(rows(held))
    fixes = [
        (
            fid,
            FileState.MISSING
            if went & touched(catalog, profile, fid)
            else fix_state(catalog.fixes[fid], profile.release, files),
        )
        for fid in fix_ids
    ]
    # what every vLLM process would refuse, whatever the files hold (the runtime index is beside the state)
    refused = None if manifest.empty else check.refusal(str(target.state_dir.parent))
    broken = refused or (f"{len(drifted)} file{'s' if len(drifted) != 1 else ''} drifted" if drifted else None)
    notes[:0] = usage_notes(target, manifest, broken=broken)
    return StatusResult(profile.name, list(env.found.values()), fixes, notes, manifest, drifted, refused)


def touched(catalog: Catalog, profile: Profile, fix_id: str) -> set[str]:
    """The repository paths a fix changes in the profile's release."""
    return {c.path for c in catalog.fixes[fix_id].changes[profile.release]}
