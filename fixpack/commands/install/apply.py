"""``fixpack apply``: a profile's fixes and the opt-ins asked for, applied all or nothing.

The steps (``pipeline``), the same for every destination (the installed site, an overlay folder):
the guards (the pinned builds found, the destination to build, held under its lock), the plan, the
judging (unchanged: nothing to do), the building (recognise, refuse drift, rebuild and compile),
the placing, and the recording (the manifest last, in one commit). Every
new file content is built and compiled in memory before the first write: a module that does not
compile refuses the plan, and the bytecode of each patched module is written in the same commit as
its source, with the runtime check (``fixpack.installation.plugin``). With a recipe's ``gate``
(``fixpack.commands.recipes.launch``), its rules are judged on the plan before anything else, and
the recipe is recorded with the fixes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ...cookbook.catalog import Catalog
from ...core.names import suggest
from ...core.plan import resolve
from ...errors import Refused, UsageError
from ...installation.destination import Where
from ...installation.inplace import InPlaceAt
from ...installation.manifest import Manifest
from ...installation.warm import exec_command
from ...models import Action, Plan, Profile
from .expect import as_expected, expectation, refuse_unexpected
from .pins import check_commits, installed, refuse_beside
from .pipeline import (
    already_applied,
    already_there,
    decide,
    holding,
    manifest_last,
    nothing_changed,
    pulled_in_notes,
    refused_results,
    to_build,
    unchanged,
    usage_notes,
)
from .results import FixResult, Result
from .stamping import Invocation, warm_stamp

__all__ = ["ApplyRequest", "Gate", "apply", "exec_command"]


class Gate(Protocol):
    """What an apply asks of a recipe (``fixpack.commands.recipes.launch.Gate``): its rules judged
    on the plan, and what the manifest keeps of it."""

    def judge(self, plan: Plan) -> list[str]:
        """The notes to print; Refused, before anything is written, for a refusing rule."""
        ...

    def kept(self) -> tuple[str, tuple[dict, ...]]:
        """The recipe's slug and its rules on the environment alone."""
        ...  # exec_command: what --exec runs once applied


@dataclass(frozen=True)
class ApplyRequest:
    """What an apply is asked to do, as the command line gave it."""

    profile: str
    opt_ins: tuple[str, ...] = ()
    where: Where = field(default_factory=InPlaceAt)  # the site (--site) and the destination (--overlay)
    dry_run: bool = False
    allow_unpinned: bool = False
    expect_fix_set: str | None = None  # refuse unless the fix set the apply leaves has this digest
    gate: Gate | None = None  # the recipe whose rules must hold for the plan
    invocation: Invocation | None = None  # given, a writing apply records the warm stamp for it


def apply(catalog: Catalog, request: ApplyRequest) -> Result:
    expected = expectation(request.expect_fix_set)
    profile = catalog.profile(request.profile)
    result = Result("apply", profile.name, dry_run=request.dry_run)
    for name in request.opt_ins:
        if name not in catalog.fixes:
            raise UsageError(f"unknown fix {name!r}{suggest(name, list(profile.pack))}", fix_id=name)
    env, dists = installed(profile, request.where, catalog)
    refuse_beside(catalog, profile, env)
    commit_notes = check_commits(profile, dists, request.allow_unpinned)
    result.notes += commit_notes
    target = to_build(request.where, env)
    with holding(target, catalog, result.notes, create=not request.dry_run) as held:
        manifest = held.manifest
        _refuse_another_pack(manifest, profile, target.where)
        plan = resolve(catalog.fixes, profile, request.opt_ins, keep=manifest.fixes)
        result.notes += pulled_in_notes(plan) + _default_fixes_named(profile, request.opt_ins)
        gate = request.gate
        if gate is not None:
            result.notes += gate.judge(plan)
        recipe, rules = gate.kept() if gate is not None else (None, ())
        if unchanged(held, plan, profile, (recipe, rules)):
            result.fixes = already_applied(plan)
            result.notes += usage_notes(target, manifest)
            return as_expected(result, plan, expected, manifest.fix_set)
        paths = list(dict.fromkeys([*plan.paths(), *held.installed.files]))
        try:
            decided = decide(catalog, profile, plan, dists, held, target, paths, plan.fix_ids)
            rebuilt, there = decided.rebuilt, already_there(plan, profile, decided, held)
            for fix in plan.fixes:
                done = fix.id in there
                action = Action.ALREADY_APPLIED if done else (Action.WOULD_APPLY if request.dry_run else Action.APPLIED)
                pulled_in_by = plan.pulled_in.get(fix.id)
                result.fixes.append(FixResult(fix.id, action, None, rebuilt.counts.get(fix.id, []), pulled_in_by))
            new = Manifest(profile.name, profile.release, plan.fix_ids, rebuilt.entries, recipe=recipe, rules=rules)
            refuse_unexpected(expected, new.fix_set, manifest.fix_set)
            result.notes += usage_notes(target, new)
            placement = target.place(decided.files, rebuilt, new, manifest, dists)
            warm = None
            if request.invocation is not None and not request.dry_run and placement.writes and not new.empty:
                # how the all-applied state this apply leaves is recognised next time
                notes = [*commit_notes, *pulled_in_notes(plan), *usage_notes(target, new)]
                done_result = Result("apply", profile.name, already_applied(plan), notes)
                warm = warm_stamp(
                    request.invocation, catalog, done_result, list(dists.values()), dict(placement.expected),
                    target, request.where.site,
                )  # fmt: skip
            writes = manifest_last(placement, manifest, warm)
            if request.dry_run:
                target.preflight(writes)
                return result
            target.commit(writes)
        except Refused as refused:
            result.error = nothing_changed(refused)
            result.fixes = refused_results(plan, refused)
            return result
    return result


def _refuse_another_pack(manifest: Manifest, profile: Profile, where: str) -> None:
    """Refuse to apply over another profile's fixes, or over a fix the profile's pack no longer has."""
    if manifest.profile not in (None, profile.name):
        raise Refused(
            f"profile {manifest.profile} (release {manifest.release}, {len(manifest.fixes)} fixes) is applied "
            f"{where}: revert it first (fixpack revert), then apply profile {profile.name}"
        )
    dropped = [f for f in manifest.fixes if f not in profile.pack]
    if dropped:
        it = "it" if len(dropped) == 1 else "them"
        raise Refused(
            f"{', '.join(dropped)} {'is' if it == 'it' else 'are'} applied {where}, and profile "
            f"{profile.name}'s pack no longer has {it}: fixpack revert {' '.join(dropped)} takes {it} back, "
            "then apply",
            fix_id=dropped[0],
        )


def _default_fixes_named(profile: Profile, opt_ins: tuple[str, ...]) -> list[str]:
    return [
        f"{name} is one of profile {profile.name}'s default fixes, applied whether named or not: "
        f"name only its opt-ins ({', '.join(profile.opt_ins) or 'it has none'})"
        for name in opt_ins
        if name in profile.default_fixes
    ]
