"""``fixpack apply``: a profile's fixes and the opt-ins asked for, applied all or nothing.

The steps, the same for every destination (the installed site, or an overlay folder):
recover -> plan -> recognise -> rebuild (build + compile) -> write set -> destination.commit. Every
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
from ...models import Action, Plan
from .expect import as_expected, expectation, refuse_unexpected
from .pins import check_commits, installed, refuse_beside
from .pipeline import (
    already_applied,
    as_run,
    holds,
    holds_plan,
    manifest_last,
    nothing_changed,
    open_state,
    opened,
    pulled_in_notes,
    rebuild_files,
    recognise_files,
    refuse_drift,
    refuse_over_in_place,
    refused_results,
    still_applied,
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
    target = opened(request.where, env)
    refuse_over_in_place(target, env)
    with target.locked(create=not request.dry_run):
        held = open_state(target, catalog, result.notes)
        manifest = held.manifest
        if manifest.profile not in (None, profile.name):
            raise Refused(
                f"profile {manifest.profile} (release {manifest.release}, {len(manifest.fixes)} fixes) is applied "
                f"{target.where}: revert it first (fixpack revert), then apply profile {profile.name}"
            )
        dropped = [f for f in manifest.fixes if f not in profile.pack]
        if dropped:
            it = "it" if len(dropped) == 1 else "them"
            raise Refused(
                f"{', '.join(dropped)} {'is' if it == 'it' else 'are'} applied {target.where}, and profile "
                f"{profile.name}'s pack no longer has {it}: fixpack revert {' '.join(dropped)} takes {it} back, "
                "then apply",
                fix_id=dropped[0],
            )
        plan = resolve(catalog.fixes, profile, request.opt_ins, keep=manifest.fixes)
        result.notes += pulled_in_notes(plan)
        result.notes += [
            f"{name} is one of profile {profile.name}'s default fixes, applied whether named or not: "
            f"name only its opt-ins ({', '.join(profile.opt_ins) or 'it has none'})"
            for name in request.opt_ins
            if name in profile.default_fixes
        ]
        gate = request.gate
        if gate is not None:
            result.notes += gate.judge(plan)
        recipe, rules = gate.kept() if gate is not None else (None, ())
        if holds_plan(manifest, plan, profile, (recipe, rules)) and holds(held):
            result.fixes = already_applied(plan)
            result.notes += usage_notes(target, manifest)
            return as_expected(result, plan, expected, manifest.fix_set)
        recorded = held.installed
        paths = list(dict.fromkeys([*plan.paths(), *recorded.files]))
        files = recognise_files(catalog.fixes, profile, dists, recorded, paths, target.state_dir)
        try:
            refuse_drift(files, plan, recorded.files)
            rebuilt = rebuild_files(plan, files, plan.fix_ids)
            running = as_run(files, held)
            for fix in plan.fixes:
                done = all(still_applied(c, running, held) for c in fix.changes[profile.release])
                action = Action.ALREADY_APPLIED if done else (Action.WOULD_APPLY if request.dry_run else Action.APPLIED)
                pulled_in_by = plan.pulled_in.get(fix.id)
                result.fixes.append(FixResult(fix.id, action, None, rebuilt.counts.get(fix.id, []), pulled_in_by))
            new = Manifest(profile.name, profile.release, plan.fix_ids, rebuilt.entries, recipe=recipe, rules=rules)
            refuse_unexpected(expected, new.fix_set, manifest.fix_set)
            result.notes += usage_notes(target, new)
            placement = target.place(files, rebuilt, new, manifest, dists)
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
