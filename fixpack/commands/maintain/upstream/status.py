"""``fixpack upstream``: where each fix stands on another upstream tree, and verify's check that a
fix's recorded ``[upstream]`` fields agree with its pinned tree.

Per fix, on the ``--source`` trees (copied to a scratch folder, never written):

- ``applied-upstream``: a commit of the tree's history since the pinned release has the fix's own
  diff (``git patch-id --stable`` of the fix's diff equals that of the commit restricted to the
  fix's files);
- ``fixed-upstream``: the fix's proof passes on the tree as it is: the bug is gone there. In a git
  tree the first commit where it passes is searched for by bisection along the main line from
  where the tree left the pinned release, first over the commits that change the fix's files;
- ``still-needed``: its proof fails there (the bug is there);
- ``cannot-tell``: its proof cannot run on that tree (an import or a function it needs is gone,
  with the error), it has no proof, or a tree its files are in was not given. Never a failure.

Whether the fix's patch still applies says nothing here (``port`` tells that): a patch that no
longer applies is not a fixed bug.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ....cookbook.catalog import Catalog
from ....core.patch import as_git_diff
from ....errors import UsageError
from ....models import Fix, Profile, ProofOutcome, Word
from ..history import Repo, patch_id
from ..proving.proofs import ProofPool, Run, warm_up
from ..trees import Scratch

__all__ = ["Standing", "FixStanding", "TreeInfo", "UpstreamReport", "upstream", "recorded_contradictions"]


class Standing(Word):
    STILL_NEEDED = "still-needed"
    FIXED_UPSTREAM = "fixed-upstream"
    APPLIED_UPSTREAM = "applied-upstream"
    CANNOT_TELL = "cannot-tell"


@dataclass
class FixStanding:
    fix: str
    standing: Standing
    detail: str
    commit: str | None = None  # applied: the commit with its patch id; fixed: the first where the proof passes
    proof: ProofOutcome = ProofOutcome.NOT_RUN

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.fix,
            "standing": self.standing,
            "commit": self.commit,
            "proof": self.proof,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class TreeInfo:
    dist: str
    path: Path
    head: str | None  # its HEAD, when it is a git work tree
    base: str | None  # where its history left the pinned release (the merge base with the pinned commit)

    def to_json(self) -> dict[str, object]:
        return {"dist": self.dist, "path": str(self.path), "head": self.head, "base": self.base}


@dataclass
class UpstreamReport:
    profile: str
    release: str
    trees: list[TreeInfo]
    fixes: list[FixStanding]
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {s.value: sum(1 for f in self.fixes if f.standing is s) for s in Standing}

    def to_json(self) -> dict[str, object]:
        return {
            "profile": self.profile,
            "release": self.release,
            "trees": [t.to_json() for t in self.trees],
            "counts": self.counts(),
            "fixes": [f.to_json() for f in self.fixes],
            "notes": self.notes,
        }


def _dists(fix: Fix, profile: Profile) -> dict[str, list[str]]:
    """The distributions a fix edits on the profile's release, each with the paths it edits."""
    out: dict[str, list[str]] = {}
    for change in fix.changes[profile.release]:
        pin = profile.pin_for_path(change.path)
        assert pin is not None, change.path  # the catalog only takes changes under a pinned package
        out.setdefault(pin.dist, []).append(change.path)
    return out


def _fix_diff(fix: Fix, profile: Profile, paths: list[str]) -> str:
    return "".join(as_git_diff(c.path, c.patch) for c in fix.changes[profile.release] if c.path in paths)


def _error_line(run: Run) -> str:
    """What stopped a proof: the last line of its traceback (``ModuleNotFoundError: ...``)."""
    lines = [line for line in run.output.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def _tree_info(profile: Profile, dist: str, tree: Path, notes: list[str]) -> tuple[TreeInfo, Repo | None]:
    repo = Repo.of(tree)
    if repo is None:
        return TreeInfo(dist, tree, None, None), None
    head = repo.head()
    pin = next(p for p in profile.pins if p.dist == dist)
    pinned = next((c for c in (repo.commit(c) for c in pin.commits) if c), None)
    base = repo.merge_base(pinned, head) if pinned and head else None
    if pinned is None:
        notes.append(f"{dist}: the pinned commit is not in {tree}: no history searched")
    if repo.dirty([pin.package]):
        notes.append(f"{dist}: {tree} differs from its HEAD: the proofs ran on its files as they are")
    return TreeInfo(dist, tree, head, base), repo


def upstream(
    catalog: Catalog,
    fix_ids: tuple[str, ...],
    profile_name: str | None,
    sources: dict[str, Path],
    jobs: int = 2,
) -> UpstreamReport:
    profile = catalog.default_profile(profile_name, sources)
    pinned = {p.dist for p in profile.pins}
    stray = sorted(set(sources) - pinned)
    if stray:
        raise UsageError(f"--source {stray[0]}: profile {profile.name} pins {', '.join(sorted(pinned))}")
    if not sources:
        raise UsageError("give the tree to look at: --source vllm-gaudi=DIR (and --source vllm=DIR)")
    for pin in profile.pins:
        if pin.dist in sources and not (sources[pin.dist] / pin.package).is_dir():
            raise UsageError(
                f"--source {pin.dist}={sources[pin.dist]}: it has no {pin.package}/ "
                "(a tree in repository layout, such as a clone's work tree)"
            )
    fixes = [catalog.fix(f) for f in fix_ids] if fix_ids else [catalog.fixes[f] for f in profile.pack]
    for fix in fixes:
        if profile.release not in fix.changes:
            raise UsageError(f"fix {fix.id!r} has no changes for release {profile.release} (profile {profile.name})")
    notes: list[str] = []
    trees, repos = [], {}
    for pin in profile.pins:
        if pin.dist in sources:
            info, repo = _tree_info(profile, pin.dist, sources[pin.dist], notes)
            trees.append(info)
            if repo is not None and info.base is not None:
                repos[pin.dist] = (repo, info.base)
        else:
            notes.append(f"no --source {pin.dist}=DIR: a proof that needs {pin.package} cannot run")
    found: dict[str, FixStanding] = {}
    runnable = []
    for fix in fixes:
        edits = _dists(fix, profile)
        missing = [d for d in edits if d not in sources]
        if missing:
            found[fix.id] = FixStanding(
                fix.id, Standing.CANNOT_TELL, f"its files are in {missing[0]}: give --source {missing[0]}=DIR"
            )
            continue
        applied = _applied(fix, profile, edits, repos)
        if applied is not None:
            found[fix.id] = applied
        if fix.proof.script:
            runnable.append(fix)
        elif fix.id not in found:
            found[fix.id] = FixStanding(fix.id, Standing.CANNOT_TELL, "it has no proof")
    if runnable:
        warm_up(runnable)
        with Scratch(sources, profile, "fixpack-upstream-") as scratch, ProofPool(jobs) as pool:
            here = scratch.trees(scratch.pristine)
            runs = pool.pairs(runnable, here, here, before_only={f.id for f in runnable})
            for fix in runnable:
                found[fix.id] = _judge(fix, profile, runs[fix.id].before, found.get(fix.id), repos, scratch, pool)
    return UpstreamReport(profile.name, profile.release, trees, [found[f.id] for f in fixes], notes)


def _applied(
    fix: Fix, profile: Profile, edits: dict[str, list[str]], repos: dict[str, tuple[Repo, str]]
) -> FixStanding | None:
    """The fix's diff as a commit of the tree's history since the pinned release (per
    distribution it edits; all of them must have it)."""
    commits = []
    for dist, paths in edits.items():
        if dist not in repos:
            return None
        repo, base = repos[dist]
        want = patch_id(_fix_diff(fix, profile, paths), repo.root)
        commit = repo.patch_ids(f"{base}..HEAD", paths).get(want or "")
        if commit is None:
            return None
        commits.append(commit)
    said = ", ".join(c[:12] for c in commits)
    return FixStanding(fix.id, Standing.APPLIED_UPSTREAM, f"{said} has the same patch id as its diff", commits[0])


def _judge(
    fix: Fix,
    profile: Profile,
    run: Run,
    applied: FixStanding | None,
    repos: dict[str, tuple[Repo, str]],
    scratch: Scratch,
    pool: ProofPool,
) -> FixStanding:
    outcome = run.outcome
    if applied is not None and outcome is ProofOutcome.BUG_PRESENT:
        return FixStanding(
            fix.id,
            Standing.STILL_NEEDED,
            f"{run.tail(1).strip()}; yet {applied.detail} (reverted since, or broken again?)",
            applied.commit,
            outcome,
        )
    if applied is not None:
        applied.proof = outcome
        applied.detail += (
            "; its proof passes there"
            if outcome is ProofOutcome.PASSES
            else f"; its proof cannot run there: {_error_line(run)}"
        )
        return applied
    if outcome is ProofOutcome.BUG_PRESENT:
        return FixStanding(fix.id, Standing.STILL_NEEDED, run.tail(1).strip(), proof=outcome)
    if outcome is not ProofOutcome.PASSES:
        return FixStanding(
            fix.id, Standing.CANNOT_TELL, f"its proof cannot run there: {_error_line(run)}", proof=outcome
        )
    edits = _dists(fix, profile)
    standing = FixStanding(fix.id, Standing.FIXED_UPSTREAM, "its proof passes there", proof=outcome)
    if len(edits) == 1 and next(iter(edits)) in repos:
        dist = next(iter(edits))
        _first_passing(fix, profile, dist, edits[dist], repos[dist], scratch, pool, standing)
    return standing


def _first_passing(
    fix: Fix,
    profile: Profile,
    dist: str,
    paths: list[str],
    found: tuple[Repo, str],
    scratch: Scratch,
    pool: ProofPool,
    standing: FixStanding,
) -> None:
    """Bisect the main line from the merge base to HEAD for the first commit where the proof
    passes: over the commits that change the fix's files, else over them all (a change elsewhere
    fixed it). A commit where the proof cannot run is skipped, as ``git bisect skip`` does."""
    repo, base = found
    package = next(p.package for p in profile.pins if p.dist == dist)
    assert fix.proof.script is not None
    script = fix.proof.script
    runs = 0

    def passes(commit: str) -> ProofOutcome:
        nonlocal runs
        runs += 1
        with tempfile.TemporaryDirectory(prefix="fixpack-bisect-", dir=scratch.root) as tmp:
            repo.export(commit, package, Path(tmp))
            return pool.run(script, scratch.trees({**scratch.pristine, dist: Path(tmp)})).outcome

    if passes(base) is ProofOutcome.PASSES:
        standing.detail += f"; it passes already at {base[:12]}, the tree's merge base with the pinned release"
        return
    searches = (
        (repo.first_parents(base, "HEAD", paths), "the main line's commits that change its files"),
        (repo.first_parents(base, "HEAD"), "every commit of the main line"),
    )
    for candidates, scope in searches:
        if not candidates or passes(candidates[-1]) is not ProofOutcome.PASSES:
            continue
        lo, hi, skipped = -1, len(candidates) - 1, 0
        while hi - lo > 1:
            mid = (lo + hi) // 2
            outcome = passes(candidates[mid])
            if outcome is ProofOutcome.PASSES:
                hi = mid
            elif outcome is ProofOutcome.BUG_PRESENT:
                lo = mid
            else:
                del candidates[mid]
                hi -= 1
                skipped += 1
        standing.commit = candidates[hi]
        subject, _ = repo.message(candidates[hi])
        standing.detail += (
            f"; it first passes at {candidates[hi][:12]} {subject} (bisected over {scope} "
            f"since {base[:12]}: {runs} proof runs"
        )
        standing.detail += f", {skipped} commits skipped where it cannot run)" if skipped else ")"
        return
    standing.detail += "; no commit of the main line since the pinned release was found where it passes"


# -- verify: the recorded fields against the pinned tree -----------------------------------------------


def recorded_contradictions(fix: Fix, profile: Profile, sources: dict[str, Path]) -> list[str]:
    """What the pinned tree's git history says against the fix's ``[upstream]`` fields: verify has
    already shown the bug is there (its proof fails on the pristine tree), so the fix cannot be in
    the pinned release's history, as ``applied-upstream`` or ``origin`` naming a commit of it; and
    a ``regressed-in`` release must be in that history. (A commit of it with the fix's own patch id
    is no contradiction: the bug is there, so it was reverted or broken again.) A tree that is not
    a git work tree with the pinned commit is not checked."""
    up = fix.upstream
    out = []
    for dist in _dists(fix, profile):
        tree = sources.get(dist)
        repo = Repo.of(tree) if tree is not None else None
        pin = next(p for p in profile.pins if p.dist == dist)
        pinned = next((c for c in (repo.commit(c) for c in pin.commits) if c), None) if repo else None
        if repo is None or pinned is None:
            continue
        for key, ref in (("applied-upstream", up.applied_upstream), ("origin", up.origin)):
            commit = repo.resolve(ref) if ref else None
            if commit and repo.is_ancestor(commit, pinned):
                out.append(
                    f"upstream: {key} {ref} ({commit[:12]}) is in the pinned {dist} {pinned[:12]}, "
                    "yet the fix is there to be applied on it"
                )
        if up.regressed_in:
            lost = repo.commit(up.regressed_in)
            if lost is None:
                out.append(f"upstream: regressed-in {up.regressed_in} is not a tag or commit of {tree}")
            elif not repo.is_ancestor(lost, pinned):
                out.append(
                    f"upstream: regressed-in {up.regressed_in} is not in the pinned {dist} {pinned[:12]}'s "
                    "history: the release pinned did not lose the fix there"
                )
    return out
