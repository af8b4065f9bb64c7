"""``fixpack port``: carry a release's fixes to the source tree of another release, and say how each fared.

Every change is tried on the new tree in pack order, several fixes of one file chained as apply
chains them, and gets one outcome:

- ``unchanged``: it applies and starts from exactly the bytes it was locked against;
- ``offset``: its hunks apply to a changed file (new fingerprints);
- ``cst``: its libcst transform still applies to a changed file;
- ``upstream``: the new tree already has its result (the reversed diff applies, or the new side
  of every hunk is there; for a transform, it changes nothing);
- ``conflict``: it does not apply (the failing hunk and the nearest match), or its result does
  not compile.

A change that does not apply is left out of the chain, so the fixes after it are tried on what
the tree would be without it.

Whether a change applies says nothing of the bug, so each fix's proof also runs twice (unless
``proofs`` is off): on the new tree as it is, where it should still fail (if it passes, the bug
is gone upstream, fixed in another way or its code path removed: the fix is ``fixed-upstream``
and should be dropped), and on the new tree with every change that ported applied, in pack order,
where it should pass (the ported fix is proven). ``write`` adds the new release to each fix that
ported and is still needed, re-rendered against the new tree and fingerprinted, and a draft
profile in which a maintainer only has to resolve the fixes left commented out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from ....cookbook.catalog import Catalog
from ....cookbook.fix_module import release_table, rendered_patch_name, transforms_file
from ....cookbook.profiles import draft_profile
from ....core import patch, rebuild
from ....core.fingerprint import of
from ....core.plan import orders_of
from ....errors import UsageError
from ....installation.commits import from_version_py
from ....installation.files import write_output
from ....models import Change, Fingerprint, Fix, Profile, ProofOutcome
from ....transforms import load_transforms  # the authors' API; libcst itself loads only when an edit runs
from .. import history
from ..authoring import lock
from ..proving.proofs import ProofPair, ProofPool, Run, warm_up
from ..trees import Scratch
from .change import Attempt, try_change
from .report import ChangeReport, FixProof, PortReport

if TYPE_CHECKING:
    from ....transforms import Transform

__all__ = ["ChangeReport", "FixProof", "PortReport", "port"]


def _selection(
    catalog: Catalog, fix_ids: tuple[str, ...], profile_name: str | None, from_release: str
) -> tuple[Profile, list[Fix]]:
    """The fixes to port in pack order, and the profile of the old release whose pins map paths."""
    if profile_name:
        profile = catalog.profile(profile_name, drafts=True)
        if profile.release != from_release:
            raise UsageError(f"profile {profile.name} is on release {profile.release}, not --from {from_release}")
    else:
        profile = next((p for p in catalog.profiles.values() if p.release == from_release), None)  # type: ignore[assignment]
        if profile is None:
            raise UsageError(f"no profile is on release {from_release}: give --profile NAME")
    fixes = [catalog.fix(f) for f in fix_ids] if fix_ids else [catalog.fixes[f] for f in profile.pack]
    for fix in fixes:
        if from_release not in fix.changes:
            raise UsageError(
                f"fix {fix.id!r} has no changes for release {from_release} (it has {', '.join(fix.releases)})"
            )
    rank = {fid: i for i, fid in enumerate(profile.pack)}
    return profile, sorted(fixes, key=lambda f: rank.get(f.id, len(rank)))


def port(
    catalog: Catalog,
    fix_ids: tuple[str, ...],
    profile_name: str | None,
    from_release: str,
    sources: dict[str, Path],
    write: str | None = None,
    proofs: bool = True,
    jobs: int = 2,
    resolved: dict[str, Path] | None = None,
) -> PortReport:
    """Try the fixes on the new trees in the orders apply applies them (a fix an opt-in supersedes:
    in its own order, without that opt-in); a fix's own port to the target release is tried instead
    of its old release's changes. ``resolved``: path -> a maintainer's resolution of a merge."""
    profile, fixes = _selection(catalog, fix_ids, profile_name, from_release)
    if write == from_release:
        raise UsageError(f"--write {write}: that is the release the fixes are on")
    target = write or _target(sources, profile)
    skipped = _skipped(fixes, profile, from_release, sources)
    fixes = [f for f in fixes if f.id not in skipped]
    release_of = {f.id: target if target in f.changes else from_release for f in fixes}
    transforms: dict[tuple[str, str], Transform] = {}
    for fix in fixes:
        spec = transforms_file(Path(fix.source), release_of[fix.id])
        if spec is not None:
            transforms.update({(fix.id, t.path): t for t in load_transforms(spec)})
    reports: list[ChangeReport] = []
    ported: dict[str, dict[str, bytes | None]] = {}  # "" (the pack's order) or a superseded fix -> its files
    by_id = {f.id: f for f in fixes}
    for order in orders_of({f.id: f.supersedes for f in fixes}, [f.id for f in fixes]):
        own = next((fid for fid in order if any(fid in by_id[o].supersedes for o in by_id)), "")
        files = ported.setdefault(own, {})
        chain_of: dict[str, list[Change]] = {}
        for fid in order:
            for change in by_id[fid].changes[release_of[fid]]:
                chain_of.setdefault(change.path, []).append(change)
        for path, chain in chain_of.items():
            pristine = lock.read_source(sources, profile, path)
            content = pristine
            base = _bases(chain, sources, profile, path)
            for change in chain:
                hand = release_of[change.fix_id] if release_of[change.fix_id] != from_release else ""
                mine = (resolved or {}).get(path) if change.fix_id in fix_ids else None
                how = Attempt(transforms.get((change.fix_id, path)), hand, partial(base, change.fix_id), mine)
                report, after = try_change(change, content, how, from_release)
                if report.outcome.ported:
                    report.fingerprint = Fingerprint(of(pristine), of(content), of(after))
                content = after
                if not own or change.fix_id == own:
                    reports.append(report)
            files[path] = content
    order_of = {f.id: i for i, f in enumerate(fixes)}
    reports.sort(key=lambda r: order_of[r.fix])  # by fix in pack order; each fix's files in its patch's order
    result = PortReport(from_release, target, reports, tuple(f.id for f in fixes), skipped=skipped)
    if proofs:
        _prove(fixes, profile, sources, ported, result, jobs)
    if write:
        _write(catalog, profile, fixes, result, sources, write, release_of)
    return result


def _target(sources: dict[str, Path], profile: Profile) -> str:
    """The name of the release the new trees are at, from the first one that is a git tree."""
    names = (history.release_name(sources[p.dist]) for p in profile.pins if p.dist in sources)
    return next((n for n in names if n), "the --source trees")


def _skipped(fixes: list[Fix], profile: Profile, release: str, sources: dict[str, Path]) -> dict[str, str]:
    """The fixes with a change in a distribution no --source names: fix id -> why it is left out."""
    out = {}
    for fix in fixes:
        missing = sorted(
            {
                pin.dist
                for c in fix.changes[release]
                if (pin := profile.pin_for_path(c.path)) and pin.dist not in sources
            }
        )
        if missing:
            out[fix.id] = f"no --source {missing[0]}=DIR: it changes {missing[0]}'s files"
    return out


def _bases(chain: list[Change], sources: dict[str, Path], profile: Profile, path: str) -> Callable[[str], bytes | None]:
    """fix id -> the bytes its change met on the old release (the pinned file, read from the new
    tree's git history, with the changes before it), for a three-way merge; None where unknown.
    Read only when a change does not apply."""
    known: dict[str, bytes | None] = {}

    def base(fix_id: str) -> bytes | None:
        if not known:
            pin = profile.pin_for_path(path)
            content = history.pinned_file(sources[pin.dist], pin, path) if pin and pin.dist in sources else None
            for change in chain:
                if content is None or change.release != profile.release:  # a hand port ends the old chain
                    break
                if change.fingerprint is not None and of(content) != change.fingerprint.before:
                    break
                known[change.fix_id] = content
                try:
                    content = patch.apply(rebuild.parsed(change), content)
                except patch.HunkFailed:
                    break
            known.setdefault("", None)  # looked once
        return known.get(fix_id)

    return base


def _prove(
    fixes: list[Fix],
    profile: Profile,
    sources: dict[str, Path],
    ported: dict[str, dict[str, bytes | None]],
    result: PortReport,
    jobs: int,
) -> None:
    """Each fix's proof on copies of the new trees: as they are, and with the ported changes of the
    order apply applies it in written in (a superseded fix: its own order's files, proven last)."""
    if not any(f.proof.script for f in fixes):
        result.proofs = {f.id: _judge(None, result.applies(f.id)) for f in fixes}
        return
    result.notes += _tree_notes(profile, sources)
    warm_up(fixes)
    unported = {f.id for f in fixes if result.applies(f.id) != "ported"}
    runs: dict[str, ProofPair] = {}
    with Scratch(sources, profile, "fixpack-port-", changed="ported") as scratch, ProofPool(jobs) as pool:
        for own, files in sorted(ported.items(), key=lambda kv: kv[0] != ""):
            for path, content in files.items():
                scratch.put(path, content)
            mine = [f for f in fixes if (f.id == own if own else f.id not in ported)]
            runs.update(
                pool.pairs(mine, scratch.trees(scratch.pristine), scratch.trees(scratch.changed), before_only=unported)
            )
    missing = [f"--source {p.dist}=DIR" for p in profile.pins if p.dist not in sources]
    result.proofs = {fix.id: _judge(runs.get(fix.id), result.applies(fix.id), missing) for fix in fixes}


# The last line of a traceback that ends in a failed import: the proof cannot run on this tree.
_IMPORT_ERROR = re.compile(r"^(?:ModuleNotFoundError|ImportError): .*$", re.MULTILINE)


def _cannot_run(run: Run) -> Run:
    """``run``, as cannot-run when it errored on an import."""
    if run.outcome is ProofOutcome.ERROR and _IMPORT_ERROR.search(run.output):
        return Run(ProofOutcome.CANNOT_RUN, run.output)
    return run


def _import_error(run: Run) -> str:
    return _IMPORT_ERROR.findall(run.output)[-1]


def _judge(runs: ProofPair | None, applies: str, missing: list[str] | None = None) -> FixProof:
    if runs is None:
        return FixProof(ProofOutcome.NOT_RUN, ProofOutcome.NOT_RUN, "no proof")
    before, after = _cannot_run(runs.before), _cannot_run(runs.after)
    failed = (ProofOutcome.BUG_PRESENT, ProofOutcome.ERROR)  # an import error keeps its own words
    if missing and before.outcome in failed and after.outcome in (*failed, ProofOutcome.NOT_RUN):
        # It may be failing for the tree not given rather than for the bug: it says nothing here.
        said = f"cannot run without {', '.join(missing)}: {before.tail(1)}"
        return FixProof(ProofOutcome.CANNOT_RUN, ProofOutcome.CANNOT_RUN, said)
    detail = []
    if before.outcome is ProofOutcome.PASSES:
        detail.append("on the new tree without the fix the proof passes: the bug is gone there")
    elif before.outcome is ProofOutcome.BUG_PRESENT:
        detail.append(f"on the new tree: {before.tail(1)}")
    elif before.outcome is ProofOutcome.CANNOT_RUN:
        detail.append(f"cannot run on the new tree (import error): {_import_error(before)}")
    else:
        detail.append(f"on the new tree the proof fails: {before.tail(3)}")
    if after.outcome is ProofOutcome.NOT_RUN:
        detail.append(f"not run with the fix: it does not port ({applies})")
    elif after.outcome is ProofOutcome.BUG_PRESENT:
        detail.append(f"with the ported pack the proof still fails: {after.tail(1)}")
    elif after.outcome is ProofOutcome.CANNOT_RUN:
        detail.append(f"cannot run with the ported pack (import error): {_import_error(after)}")
    elif after.outcome is ProofOutcome.ERROR:
        detail.append(f"with the ported pack the proof fails: {after.tail(3)}")
    return FixProof(before.outcome, after.outcome, "; ".join(detail))


def _tree_notes(profile: Profile, sources: dict[str, Path]) -> list[str]:
    """What the proofs ran against: a distribution whose tree is still the old release's pin, or none."""
    notes = []
    for pin in profile.pins:
        if pin.dist not in sources:
            notes.append(
                f"no --source {pin.dist}=DIR: a proof that does not pass is cannot-run (it may need {pin.package})"
            )
            continue
        try:
            commit = from_version_py(sources[pin.dist] / pin.package / "_version.py")
        except ValueError:
            continue
        if commit and any(c.startswith(commit) or commit.startswith(c) for c in pin.commits):
            notes.append(
                f"the {pin.dist} tree is {profile.release}'s pin ({pin.version}, commit {commit}): the proofs ran "
                f"the new trees against {pin.dist} {pin.version}; the new release may pin another {pin.dist}"
            )
    return notes


def _write(
    catalog: Catalog,
    profile: Profile,
    fixes: list[Fix],
    result: PortReport,
    sources: dict[str, Path],
    release: str,
    release_of: dict[str, str],
) -> None:
    prints: dict[str, dict[str, Fingerprint]] = {}
    for fix in fixes:
        mine = [r for r in result.changes if r.fix == fix.id]
        fix_dir = Path(fix.source)
        _write_conflicts(fix_dir, [r for r in mine if r.merge is not None and r.outcome == "conflict"], result)
        if result.fix_outcome(fix.id) != "ported":
            continue
        if release_of[fix.id] == release:  # its own port: used as written, only fingerprinted
            result.notes.append(f'{fix.id}: its own [release."{release}"] port is used as it is')
            prints[fix.id] = {r.path: r.fingerprint for r in mine if r.fingerprint is not None}
            continue
        cst_file = transforms_file(fix_dir, result.from_release)
        cst_paths = {t.path for t in load_transforms(cst_file)} if cst_file else set()
        parts: dict[Path, str] = {}  # a transform's file to the rendered patch, the others to the diff
        for r in mine:
            if r.outcome.ported:
                name = rendered_patch_name(release) if r.path in cst_paths else f"{release}.patch"
                parts[fix_dir / name] = parts.get(fix_dir / name, "") + r.patch
        for patch_file, text in parts.items():
            write_output(patch_file, text.encode(patch.ENC, patch.ERRORS))
            result.written.append(patch_file)
        names = sorted(p.name for p in parts)
        if release in fix.changes:
            result.notes.append(f"{fix.id}: fix.toml already has release {release}; only {', '.join(names)} rewritten")
        else:
            rendered = cst_file if rendered_patch_name(release) in names else None
            toml = fix_dir / "fix.toml"
            write_output(
                toml, toml.read_bytes() + release_table(release, rendered, f"{release}.patch" in names).encode()
            )
            result.written.append(fix_dir / "fix.toml")
        if any(r.outcome == "upstream" for r in mine):
            result.notes.append(f"{fix.id}: some of its files are upstream already; {', '.join(names)} leave them out")
        prints[fix.id] = {r.path: r.fingerprint for r in mine if r.fingerprint is not None}
    draft = Profile(
        name=release,
        release=release,
        description=profile.description,
        pins=profile.pins,
        pack=profile.pack,
        opt_ins=profile.opt_ins,
    )
    result.written += lock.write(catalog, draft, prints)
    target = catalog.root / "profiles" / f"{release}.toml"
    if target.exists():
        result.notes.append(f"{target} exists: no draft profile written")
        return
    kept = [f.id for f in fixes if result.fix_outcome(f.id) == "ported"]
    left_out = {f.id: _why_not(result, f.id) for f in fixes if f.id not in kept} | result.skipped
    heads = {dist: history.tree_head(tree) for dist, tree in sources.items()}
    commits = {pin.dist: heads.get(pin.dist) or "TODO" for pin in profile.pins}
    text = draft_profile(profile, release, result.from_release, kept, left_out, commits)
    write_output(target, text.encode())
    result.written.append(target)


def _write_conflicts(fix_dir: Path, conflicts: list[ChangeReport], result: PortReport) -> None:
    """Each merge left with conflict markers, next to the fix, and the command that records its resolution."""
    for r in conflicts:
        target = fix_dir / f"{result.to_release}.{Path(r.path).name}.conflict"
        write_output(target, r.merge or b"")
        result.written.append(target)
        result.notes.append(
            f"{r.fix}: {r.path}: resolve the conflicts in {target}, then record it: fixpack port {r.fix} "
            f"--from {result.from_release} --source ... --write {result.to_release} --resolved {r.path}={target}"
        )


def _why_not(result: PortReport, fix_id: str) -> str:
    """The outcome that kept a fix out of the new release, and its first reason."""
    outcome = result.fix_outcome(fix_id)
    if outcome == "fixed-upstream":
        return f"{outcome}: its proof passes on the new tree without it, so the bug is gone there"
    first = next(r for r in result.changes if r.fix == fix_id and r.outcome == outcome)
    why = first.detail if first.detail.startswith(first.path) else f"{first.path}: {first.detail}"
    return f"{outcome}: {why.splitlines()[0]}"
