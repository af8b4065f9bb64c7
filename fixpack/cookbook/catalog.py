"""The catalog: every fix and profile of one cookbook checkout, loaded and validated against each
other."""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from ..core.names import suggest
from ..core.plan import pack_chain
from ..errors import UsageError
from ..models import Fix, Profile
from . import default_root
from .fix_module import load_fix
from .profiles import load_profile
from .tomlfile import invalid

__all__ = ["Catalog"]


@dataclass
class Catalog:
    """Every fix and profile of one cookbook checkout, validated against each other."""

    fixes: dict[str, Fix]
    profiles: dict[str, Profile]
    root: Path

    @classmethod
    def load(cls, root: Path | None = None) -> Catalog:
        root = default_root() if root is None else root
        fixes_dir, profiles_dir = root / "fixes", root / "profiles"
        if not fixes_dir.is_dir() and not profiles_dir.is_dir():
            named = " (FIXPACK_COOKBOOK)" if os.environ.get("FIXPACK_COOKBOOK") else ""
            raise UsageError(
                f"{root}{named} is not a cookbook: it has no fixes/ or profiles/ folder; point "
                f"{'FIXPACK_COOKBOOK' if named else 'fixpack'} at a checkout of the cookbook"
                + (", or unset it" if named else " (FIXPACK_COOKBOOK=DIR)"),
                path=str(root),
            )
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
            for ref in fix.requires + fix.conflicts + fix.supersedes:
                if ref not in self.fixes:
                    raise invalid(where, f"names unknown fix {ref!r}{suggest(ref, list(self.fixes))}")
        for profile in self.profiles.values():
            where = self.root / "profiles" / f"{profile.name}.toml"
            for fid in profile.pack:
                if fid not in self.fixes:
                    raise invalid(where, f"pack names unknown fix {fid!r}{suggest(fid, list(self.fixes))}")
                fix = self.fixes[fid]
                if profile.release not in fix.changes:
                    raise invalid(where, f"fix {fid!r} has no changes for release {profile.release!r}")
                if fix.supersedes and not fix.opt_in:
                    raise invalid(where, f"fix {fid!r} supersedes others, so it must be opt-in")
                if fix.opt_in and fid not in profile.opt_ins:
                    raise invalid(where, f"fix {fid!r} is opt-in but not listed in opt_ins")
                for change in fix.changes[profile.release]:
                    if profile.pin_for_path(change.path) is None:
                        raise invalid(where, f"fix {fid!r} edits {change.path}, which no pin's package holds")
            for dist, other in profile.instead:
                if other not in self.profiles or other == profile.name:
                    raise invalid(where, f"[instead] {dist} names {other!r}, which is not another profile here")
                if not any(p.dist == dist for p in self.profiles[other].pins):
                    raise invalid(where, f"[instead] {dist} names profile {other!r}, which does not pin {dist}")
        self._no_instead_cycle()
        self._same_chains()

    def _no_instead_cycle(self) -> None:
        """Following ``[instead]`` from any profile never comes back to it: each refusal names a way out."""
        for start in self.profiles.values():
            todo = [other for _, other in start.instead]
            seen: set[str] = set()
            while todo:
                name = todo.pop()
                if name == start.name:
                    raise invalid(
                        self.root / "profiles" / f"{start.name}.toml",
                        f"[instead] leads back to {start.name} through {', '.join(sorted(seen))}: "
                        "each profile's [instead] must name one that does not send its users back",
                    )
                if name not in seen:
                    seen.add(name)
                    todo += [other for _, other in self.profiles[name].instead]

    def _same_chains(self) -> None:
        """Profiles of one release share each fix's lock (``<release>.lock.json``), which holds the
        bytes every change meets: a fix in both must meet, in each file, the same changes before it."""
        profiles = list(self.profiles.values())
        for i, one in enumerate(profiles):
            for other in profiles[i + 1 :]:
                if one.release != other.release:
                    continue
                for fid in (f for f in one.pack if f in other.pack):
                    for change in self.fixes[fid].changes[one.release]:
                        first, second = (_before(self.fixes, p, fid, change.path) for p in (one, other))
                        if first != second:
                            raise invalid(
                                self.root / "profiles" / f"{other.name}.toml",
                                f"fix {fid!r} shares release {one.release}'s lock with profile {one.name}, but "
                                f"{change.path} meets other changes before it ({', '.join(second) or 'none'}; "
                                f"in {one.name}: {', '.join(first) or 'none'}): give both packs the same fixes "
                                "on that file, in the same order",
                            )

    def sources(self) -> tuple[list[Path], list[Path]]:
        """What ``load`` read: the files (every file of each fix folder and of profiles/; for
        another folder in fixes/, the fix.toml it does not have) and the folders whose listing
        decides which files it reads (fixes/, profiles/, each fix folder)."""
        files, folders = [], []
        for top in (self.root / "fixes", self.root / "profiles"):
            if top.is_dir():
                folders.append(top)
        fix_dirs = {Path(fix.source) for fix in self.fixes.values()}
        if (self.root / "fixes").is_dir():
            for d in sorted((self.root / "fixes").iterdir()):
                if d in fix_dirs:
                    folders.append(d)
                    files += sorted(f for f in d.iterdir() if f.is_file())
                elif d.is_dir():
                    files.append(d / "fix.toml")
        if (self.root / "profiles").is_dir():
            files += sorted(p for p in (self.root / "profiles").iterdir() if p.is_file())
        return files, folders

    def fix(self, fix_id: str) -> Fix:
        if fix_id not in self.fixes:
            raise UsageError(f"unknown fix {fix_id!r}{suggest(fix_id, list(self.fixes))}")
        return self.fixes[fix_id]

    @property
    def usable(self) -> list[Profile]:
        """The profiles whose pins are real: a draft (``port --write``'s, pins still TODO) is never a default."""
        return [p for p in self.profiles.values() if not p.draft]

    def default_profile(self, name: str | None, dists: Collection[str] = ()) -> Profile:
        """``name``'s profile; without a name, the cookbook's only usable profile, else the one that
        pins exactly ``dists`` (the distributions the command was given: its --source trees, the
        ones a site has); a usage error when none or several fit."""
        if name:
            return self.profile(name)
        if len(self.usable) == 1:
            return self.usable[0]
        fits = [p for p in self.usable if {pin.dist for pin in p.pins} == set(dists)]
        if len(fits) == 1:
            return fits[0]
        given = f" for {' and '.join(sorted(dists))}" if dists else ""
        raise UsageError(f"give --profile NAME{given} (this cookbook has: {self.usable_listed()})")

    def usable_listed(self) -> str:
        """The usable profiles, each with the distributions it pins, for a message."""
        return ", ".join(f"{p.name} ({' and '.join(pin.dist for pin in p.pins)})" for p in self.usable) or "none"

    def profile(self, name: str, drafts: bool = False) -> Profile:
        """``name``'s profile; a draft only with ``drafts`` (port and lock, which finish one)."""
        if name not in self.profiles:
            known = ", ".join(self.profiles) or "none"
            raise UsageError(f"unknown profile {name!r}{suggest(name, list(self.profiles))}; known: {known}")
        profile = self.profiles[name]
        if profile.draft and not drafts:
            raise UsageError(
                f"profile {name!r} is a draft ({profile.draft}): set its pins' versions and commits in "
                f"profiles/{name}.toml, then fixpack lock; until then only fixpack port and fixpack lock take it"
            )
        return profile


def _before(fixes: dict[str, Fix], profile: Profile, fix_id: str, path: str) -> list[str]:
    """The fixes of ``profile``'s pack that change ``path`` before ``fix_id`` does."""
    chain = [c.fix_id for c in pack_chain(fixes, profile, path)]
    return chain[: chain.index(fix_id)]
