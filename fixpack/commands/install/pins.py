"""The distributions a profile pins, as this environment holds them: each one found (or gone
since the fixes were applied, and what to say of it), the profile's ``[instead]`` refusal, and the
commit each was built from against the pins."""

from __future__ import annotations

from pathlib import Path

from ...cookbook.catalog import Catalog
from ...core.names import canonical
from ...errors import EnvironmentProblem, Refused
from ...installation import commits
from ...installation.destination import Where
from ...installation.distributions import Distribution, Environment
from ...installation.layout import MANIFEST
from ...models import Pin, Profile

__all__ = [
    "installed",
    "all_pins",
    "remaining",
    "fitting",
    "gone_notes",
    "dist_of",
    "refuse_beside",
    "check_commits",
    "mismatches",
]


def installed(
    profile: Profile, where: Where, catalog: Catalog | None = None
) -> tuple[Environment, dict[str, Distribution]]:
    """The environment of ``where``'s site and each pinned distribution in it. EnvironmentProblem
    when one is missing, saying the way on: where fixes are applied (in ``where``'s destination) to
    what remains, reinstall or revert; else, given the ``catalog``, the profile that fits what is installed."""
    env, dists, gone = remaining(profile, where.site)
    if not gone:
        return env, dists
    try:
        env.get(gone[0])  # the refusal, as every command words a distribution that is not installed
    except EnvironmentProblem as missing:
        way_on = _way_on(env, where, profile, catalog)
        if not way_on:
            raise
        raise EnvironmentProblem(f"{missing}; {way_on}", path=missing.path) from None
    raise AssertionError(f"{gone[0]} is both found and gone")


def _way_on(env: Environment, where: Where, profile: Profile, catalog: Catalog | None) -> str:
    target = where.open(env)
    if target is not None and (target.state_dir / MANIFEST).is_file():
        return "fixes are applied to what remains: reinstall it, or take them back with fixpack revert"
    fits = [p.name for p in fitting(catalog, env.site) if p.name != profile.name] if catalog else []
    return f"profile {fits[0]} pins what is installed here: --profile {fits[0]}" if fits else ""


def all_pins(catalog: Catalog) -> dict[str, str]:
    """Every distribution any profile pins: canonical name -> import package."""
    return {p.dist: p.package for prof in catalog.profiles.values() for p in prof.pins}


def fitting(catalog: Catalog, site: Path | None) -> list[Profile]:
    """The usable profiles whose pinned distributions are all installed and none they name in
    ``[instead]`` is: the ones that fit this site, the one that pins the most first."""
    found = set(Environment.read(all_pins(catalog), site).found)
    fits = [
        p
        for p in catalog.usable
        if {canonical(pin.dist) for pin in p.pins} <= found and not any(canonical(d) in found for d, _ in p.instead)
    ]
    return sorted(fits, key=lambda p: -len(p.pins))


def remaining(profile: Profile, site: Path | None) -> tuple[Environment, dict[str, Distribution], tuple[str, ...]]:
    """The environment, each pinned distribution in it, and the pinned ones it no longer holds."""
    env = Environment.read({p.dist: p.package for p in profile.pins}, site)
    found = {p.dist: env.found[canonical(p.dist)] for p in profile.pins if canonical(p.dist) in env.found}
    return env, found, tuple(p.dist for p in profile.pins if p.dist not in found)


def gone_notes(profile: Profile, gone: tuple[str, ...], paths: list[str], site: Path | None) -> list[str]:
    """What to say of the files of distributions removed since the fixes were applied."""
    where = f"in {site}" if site is not None else "in this interpreter's path"
    notes = []
    for dist in gone:
        n = sum(1 for p in paths if dist_of(profile, p) == dist)
        if n:
            notes.append(
                f"{dist}, which profile {profile.name} pins, is no longer installed {where}: the fixes' "
                f"changes to its {n} file{'s' if n != 1 else ''} went with it"
            )
    return notes


def dist_of(profile: Profile, path: str) -> str:
    """The pinned distribution a repository path belongs to."""
    pin = profile.pin_for_path(path)
    assert pin is not None  # the catalog checked every change's path against the pins
    return pin.dist


def refuse_beside(catalog: Catalog, profile: Profile, env: Environment) -> None:
    """Refuse a site where a distribution the profile names in ``[instead]`` is installed: the
    profile that covers it is the one to apply."""
    for dist, other in profile.instead:
        package = next(p.package for p in catalog.profiles[other].pins if p.dist == dist)
        found = Environment.read({dist: package}, env.site).found.get(dist)
        if found is not None:
            raise Refused(
                f"{dist} {found.version} is installed in {found.site}: profile {profile.name} would leave its "
                f"code unfixed; apply profile {other}, which patches both"
            )


def check_commits(profile: Profile, dists: dict[str, Distribution], allow_unpinned: bool) -> list[str]:
    """Refuse a known commit the profile does not accept; say where each commit came from."""
    notes = []
    for pin in profile.pins:
        note, mismatch = _judge(profile, pin, dists[pin.dist])
        notes.append(note)
        if mismatch is not None:
            if not allow_unpinned:
                raise Refused(mismatch + " (--allow-unpinned applies anyway if every fingerprint holds)")
            notes.append(mismatch + "; going on (--allow-unpinned): every fingerprint must hold")
    return notes


def mismatches(profile: Profile, dists: dict[str, Distribution]) -> list[str]:
    """How the installed builds differ from the profile's pins, as the apply's refusal says it."""
    return [m for pin in profile.pins if (m := _judge(profile, pin, dists[pin.dist])[1]) is not None]


def _judge(profile: Profile, pin: Pin, dist: Distribution) -> tuple[str, str | None]:
    """Where the commit came from, and why the build is not the pin's (None when it is)."""
    if dist.version == pin.version:
        version_ok = True  # the usual case, without importing packaging (start-up time)
    else:
        from packaging.version import InvalidVersion, Version

        try:
            version_ok = Version(dist.version).public == Version(pin.version).public
        except InvalidVersion:
            version_ok = False
    commit = dist.commit
    if commit.id is None:
        note = f"{pin.dist} {dist.version}: commit could not be read ({commit.source}); file fingerprints decide"
        ok = version_ok
    else:
        listed = any(commits.matches(commit.id, c) for c in pin.commits)
        ok = version_ok and (listed or pin.match == "fingerprints")
        note = f"{pin.dist} {dist.version}: commit {commit.id} (from {commit.source})" + (
            "" if listed or not ok else "; a build the profile does not list: file fingerprints decide"
        )
    if ok:
        return note, None
    what = f"version {dist.version}" + (f", commit {commit.id}" if commit.id else "")
    if commit.id and len(commit.id) < commits.SHORTEST and version_ok:
        what += f" (too short to match: at least {commits.SHORTEST} hex digits are needed)"
    builds = f" at {', '.join(c[:12] for c in pin.commits)}" if pin.match == "commit" else " (any build)"
    return note, (
        f"the image does not match profile {profile.name}: {pin.dist} is {what}; the profile pins {pin.version}{builds}"
    )
