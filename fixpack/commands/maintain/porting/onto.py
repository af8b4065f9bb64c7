"""``fixpack diff --onto DIST=DIR``: each fix as port carries it onto another tree (upstream's main,
a newer tag), so that ``git am`` there takes every patch that ports; a fix that does not port is
named with the reason and left out, never exported broken."""

from __future__ import annotations

from pathlib import Path

from ....cookbook.catalog import Catalog
from ....errors import UsageError
from ....models import Fix, Plan, Profile
from .. import history
from .port import port

__all__ = ["rebased"]


def rebased(
    catalog: Catalog, plan: Plan, profile: Profile, onto: dict[str, Path]
) -> tuple[list[tuple[Fix, str, str]], list[str], dict[str, str]]:
    """The plan's (fix, distribution, patch) for the ``onto`` distributions, rebased there by port (no proofs); notes
    on the fixes left out; each tree's HEAD commit, the series' base."""
    pinned = {p.dist for p in profile.pins}
    for dist, tree in onto.items():
        if dist not in pinned:
            raise UsageError(f"--onto {dist}=...: profile {profile.name} pins {', '.join(sorted(pinned))}")
        if not tree.is_dir():
            raise UsageError(f"--onto {dist}={tree}: not a folder")
    wanted = [f for f in plan.fixes if any(_dist(profile, c.path) in onto for c in f.changes[profile.release])]
    result = port(catalog, tuple(f.id for f in wanted), profile.name, profile.release, dict(onto), proofs=False)
    notes: list[str] = []
    msgs: list[tuple[Fix, str, str]] = []
    for fix in wanted:
        if fix.id in result.skipped:
            notes.append(f"{fix.id}: not exported onto {result.to_release}: {result.skipped[fix.id]}")
            continue
        for dist in onto:
            mine = [r for r in result.changes if r.fix == fix.id and _dist(profile, r.path) == dist]
            if not mine:
                continue
            conflict = next((r for r in mine if r.outcome == "conflict"), None)
            if conflict is not None:
                why = conflict.detail.splitlines()[0] if conflict.detail else "it does not apply"
                notes.append(f"{fix.id}: not exported onto {result.to_release}: {conflict.path}: {why}")
                continue
            patch = "".join(r.patch for r in mine if r.outcome.ported)
            if not patch:
                notes.append(f"{fix.id}: not exported onto {result.to_release}: the tree already has it")
                continue
            msgs.append((fix, dist, patch))
    bases = {dist: history.tree_head(tree) or "unknown" for dist, tree in onto.items()}
    return msgs, notes, bases


def _dist(profile: Profile, path: str) -> str:
    pin = profile.pin_for_path(path)
    return pin.dist if pin is not None else ""
