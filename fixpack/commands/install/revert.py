"""``fixpack revert``: the named fixes, and those that require them, taken back to the exact
pristine bytes (default: all), in place or in an overlay folder (an overlay left with no fix is
removed)."""

from __future__ import annotations

from ...cookbook.catalog import Catalog
from ...core.names import suggest
from ...core.plan import resolve, with_dependents
from ...errors import Refused, UsageError
from ...installation.destination import Where
from ...installation.distributions import Environment
from ...installation.manifest import Manifest
from ...models import Action, Profile
from .pins import all_pins, dist_of, gone_notes, remaining
from .pipeline import decide, holding, manifest_last, nothing_changed, usage_notes
from .results import FixResult, Result

__all__ = ["revert"]


def revert(catalog: Catalog, names: tuple[str, ...], where: Where, dry_run: bool = False) -> Result:
    site = where.site
    env = Environment.read(all_pins(catalog), site)
    result = Result("revert", None, dry_run=dry_run)
    target = where.open(env)
    if target is None:
        result.notes.append("nothing is applied here")
        return result
    with holding(target, catalog, result.notes, foreign_ok=True) as held:
        manifest = held.manifest
        if manifest.empty:
            result.notes.append(f"nothing is applied {target.where}")
            return result
        profile = catalog.profile(manifest.profile or "")
        result.profile = profile.name
        for name in names:
            if name not in manifest.fixes:
                raise UsageError(
                    f"fix {name!r} is not applied {target.where}{suggest(name, list(manifest.fixes))}", fix_id=name
                )
        removing = with_dependents(catalog.fixes, set(names or manifest.fixes), manifest.fixes)
        keep = tuple(f for f in manifest.fixes if f not in removing)
        plan = resolve(catalog.fixes, profile, (), keep=tuple(f for f in manifest.fixes if f in profile.pack))
        # The files to rebuild: every file the fixes patched where they patch in place (each goes
        # back to its release bytes or to what the kept fixes make of it); in an overlay, only the
        # files a kept fix changes (the rest of the overlay goes, whatever the image holds now).
        paths = [p for p in plan.paths() if any(pc.change.fix_id in keep for pc in plan.changes_for(p))]
        paths = list(dict.fromkeys([*held.installed.files, *paths]))
        # a pinned distribution removed since (pip uninstall) took its patched files with it: there
        # is nothing of them to take back, and the rest is reverted as usual
        _, dists, gone = remaining(profile, site)
        went = [p for p in dict.fromkeys([*manifest.files, *paths]) if dist_of(profile, p) in gone]
        paths = [p for p in paths if p not in went]
        try:
            refuse_keeping(catalog, profile, keep, went, gone)
            decided = decide(catalog, profile, plan, dists, held, target, paths, keep)
            new = Manifest(profile.name, profile.release, keep, decided.rebuilt.entries) if keep else Manifest()
            writes = manifest_last(target.place(decided.files, decided.rebuilt, new, manifest, dists), manifest)
        except Refused as refused:
            result.error = nothing_changed(refused)
            return result
        result.notes += gone_notes(profile, gone, went, site)
        for fid in manifest.fixes:
            if fid in removing:
                needs = removing[fid]
                why = None if needs is None or not names else f"depends on {needs}, which is being reverted"
                result.fixes.append(FixResult(fid, Action.WOULD_REVERT if dry_run else Action.REVERTED, why))
        if dry_run:
            target.preflight(writes)
        else:
            target.commit(writes)
            result.notes += usage_notes(target, new, removed=not manifest.empty)
    return result


def refuse_keeping(
    catalog: Catalog, profile: Profile, keep: tuple[str, ...], went: list[str], gone: tuple[str, ...]
) -> None:
    """Refuse to keep a fix applied that could no longer be rebuilt: one the profile's pack no
    longer has (the files it shares with the rest could be rebuilt neither with it nor without it),
    or one whose files went with a removed distribution. Reverted too, each goes back with the rest."""
    foreign = [f for f in keep if f not in profile.pack]
    if foreign:
        where = "this cookbook" if any(f not in catalog.fixes for f in foreign) else f"profile {profile.name}'s pack"
        it = "it" if len(foreign) == 1 else "them"
        raise Refused(
            f"{', '.join(foreign)}, which would stay applied, {'is' if it == 'it' else 'are'} not in {where}: revert "
            f"{it} too (fixpack revert {' '.join(foreign)}), or every fix (fixpack revert)",
            fix_id=foreign[0],
        )
    stranded = [f for f in keep if any(c.path in went for c in catalog.fixes[f].changes[profile.release])]
    if stranded:
        raise Refused(
            f"{', '.join(gone)} is no longer installed, and {', '.join(stranded)}, which would stay applied, "
            f"patched it: revert {'them' if len(stranded) > 1 else 'it'} too, or every fix (fixpack revert)",
            fix_id=stranded[0],
        )
