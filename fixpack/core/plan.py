"""Plans: a profile and the opt-ins asked for resolved into an ordered plan, the pack's chain of
changes per file, and the fixes that depend on others. Pure: no I/O."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence

from ..errors import UsageError
from ..models import Change, Fix, Plan, PlannedChange, Profile
from .names import suggest

__all__ = ["resolve", "restrict", "pack_chain", "applied_orders", "orders_of", "chains", "with_dependents"]


def resolve(
    fixes: Mapping[str, Fix], profile: Profile, asked: tuple[str, ...] = (), keep: tuple[str, ...] = ()
) -> Plan:
    """The profile's default fixes, the opt-ins ``asked`` for, and (``keep``) fixes already applied.

    Fixes come in pack order, except that a fix's requirements come before it; requirements not
    asked for are pulled in and reported in ``Plan.pulled_in``.
    """
    for name in asked:
        if name not in fixes:
            raise UsageError(f"unknown fix {name!r}{suggest(name, list(profile.pack))}")
        if name not in profile.pack:
            raise UsageError(f"fix {name!r} is not part of profile {profile.name!r}")
    selected: dict[str, str | None] = {f: None for f in profile.default_fixes}
    for name in (*asked, *keep):
        selected.setdefault(name, None)
    pulled_in: dict[str, str] = {}
    todo = list(selected)
    while todo:
        fid = todo.pop()
        for req in fixes[fid].requires:
            if req not in profile.pack:
                raise UsageError(f"fix {fid!r} requires {req!r}, which profile {profile.name!r} does not have")
            if req not in selected:
                selected[req] = fid
                pulled_in[req] = fid
                todo.append(req)
    superseded = _superseded(fixes, selected, asked)
    for fid in superseded:
        del selected[fid]
        pulled_in.pop(fid, None)
    chosen = [fixes[f] for f in selected]
    _refuse_conflicts(chosen)
    ordered = _order(chosen, profile)
    changes = tuple(
        PlannedChange(change, profile.pin_for_path(change.path).dist)  # type: ignore[union-attr]
        for fix in ordered
        for change in fix.changes[profile.release]
    )
    return Plan(profile, tuple(ordered), pulled_in, changes, superseded)


def _superseded(fixes: Mapping[str, Fix], selected: dict[str, str | None], asked: tuple[str, ...]) -> dict[str, str]:
    """Fixes an opt-in in the plan replaces: fix id -> the opt-in. Asking for both is refused."""
    out: dict[str, str] = {}
    for fid in selected:
        for old in fixes[fid].supersedes:
            if old in asked:
                raise UsageError(f"fix {fid!r} supersedes {old!r}; ask for one of them", fix_id=fid)
            if old in selected:
                out[old] = fid
    needing = [(fid, req) for fid in selected if fid not in out for req in fixes[fid].requires if req in out]
    if needing:
        fid, req = needing[0]
        raise UsageError(f"fix {fid!r} requires {req!r}, which {out[req]!r} supersedes", fix_id=fid)
    return out


def _refuse_conflicts(fixes: list[Fix]) -> None:
    ids = {f.id for f in fixes}
    for fix in fixes:
        clash = sorted(ids & set(fix.conflicts))
        if clash:
            raise UsageError(f"fix {fix.id!r} conflicts with {', '.join(repr(c) for c in clash)}; ask for one of them")


def _order(fixes: list[Fix], profile: Profile) -> list[Fix]:
    """Topological order of ``requires``, ties broken by pack order; a cycle is refused."""
    rank = {fid: i for i, fid in enumerate(profile.pack)}
    by_id = {f.id: f for f in fixes}
    waiting = {f.id: set(f.requires) & set(by_id) for f in fixes}
    ready = [(rank[fid], fid) for fid, reqs in waiting.items() if not reqs]
    heapq.heapify(ready)
    out: list[Fix] = []
    while ready:
        _, fid = heapq.heappop(ready)
        out.append(by_id[fid])
        for other, reqs in waiting.items():
            if fid in reqs:
                reqs.discard(fid)
                if not reqs:
                    heapq.heappush(ready, (rank[other], other))
    if len(out) < len(fixes):
        stuck = sorted(fid for fid, reqs in waiting.items() if reqs)
        raise UsageError(f"fixes {', '.join(stuck)} require each other in a cycle")
    return out


def restrict(plan: Plan, fix_ids: set[str]) -> Plan:
    """The same plan with only ``fix_ids`` (and what they require) in it, in the same order."""
    keep = set(fix_ids)
    for fix in reversed(plan.fixes):
        if fix.id in keep:
            keep.update(fix.requires)
    fixes = tuple(f for f in plan.fixes if f.id in keep)
    changes = tuple(pc for pc in plan.changes if pc.change.fix_id in keep)
    return Plan(plan.profile, fixes, {k: v for k, v in plan.pulled_in.items() if k in keep}, changes)


def pack_chain(fixes: Mapping[str, Fix], profile: Profile, path: str) -> list[Change]:
    """Every change the profile's pack makes to ``path``, in pack order."""
    return [c for fid in profile.pack for c in fixes[fid].changes[profile.release] if c.path == path]


def applied_orders(fixes: Mapping[str, Fix], profile: Profile) -> list[tuple[str, ...]]:
    """The orders the pack's fixes are applied in, for locking each change on the bytes it really
    meets: first the pack less every fix an opt-in of it supersedes (all opt-ins asked for), then
    for each superseded fix the pack less the fixes that supersede it. A fix is locked in the
    first order it is in."""
    return orders_of({fid: fixes[fid].supersedes for fid in profile.pack}, profile.pack)


def orders_of(supersedes: Mapping[str, Sequence[str]], pack: Sequence[str]) -> list[tuple[str, ...]]:
    """``applied_orders`` from each fix's ``supersedes`` alone (lock renders transforms before the
    catalog can load)."""
    superseded = {old for fid in pack for old in supersedes[fid] if old in pack}
    orders = [tuple(f for f in pack if f not in superseded)]
    for old in (f for f in pack if f in superseded):
        orders.append(tuple(f for f in pack if f == old or (f not in superseded and old not in supersedes[f])))
    return orders


def chains(fixes: Iterable[Fix], release: str) -> dict[str, list[Change]]:
    """Each file's changes by the ``fixes`` (in the order given), by path in first-seen order."""
    out: dict[str, list[Change]] = {}
    for fix in fixes:
        for change in fix.changes[release]:
            out.setdefault(change.path, []).append(change)
    return out


def with_dependents(fixes: Mapping[str, Fix], removing: set[str], applied: tuple[str, ...]) -> dict[str, str | None]:
    """``removing`` and every applied fix that requires one of them, directly or not: fix id -> the
    fix being removed that it depends on (None for those asked for)."""
    out: dict[str, str | None] = {fid: None for fid in removing}
    changed = True
    while changed:
        changed = False
        for fid in applied:
            if fid in out:
                continue
            fix = fixes.get(fid)  # None: applied by another cookbook, so nothing here requires it
            needs = [r for r in fix.requires if r in out] if fix is not None else []
            if needs:
                out[fid] = needs[0]
                changed = True
    return out
