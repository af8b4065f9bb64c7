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

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ...cookbook.catalog import Catalog
from ...cookbook.fix_module import release_table, rendered_patch_name, transforms_file
from ...cookbook.profiles import draft_profile
from ...core import patch as diff
from ...core import rebuild
from ...core.fingerprint import of
from ...core.plan import chains as pack_chains
from ...errors import UsageError
from ...models import Change, Fingerprint, Fix, PortOutcome, Profile, ProofOutcome
from ...site.commits import from_version_py
from ...transforms import load_transforms  # the authors' API; libcst itself loads only when an edit runs
from . import lock
from .proofs import ProofPair, ProofPool, warm_up
from .trees import Scratch

if TYPE_CHECKING:
    from ...transforms import Transform

__all__ = ["ChangeReport", "FixProof", "PortReport", "port"]


@dataclass
class ChangeReport:
    fix: str
    path: str
    outcome: PortOutcome
    detail: str = ""
    hunk: str = ""  # the failing hunk, for a conflict
    nearest: str = ""  # where the file comes closest to it, as a small diff
    patch: str = ""  # the change re-rendered against the new tree, when it applies
    fingerprint: Fingerprint | None = None

    def to_json(self) -> dict[str, str]:
        return {
            "fix": self.fix,
            "path": self.path,
            "outcome": self.outcome,
            "detail": self.detail,
            "hunk": self.hunk,
            "nearest": self.nearest,
        }


@dataclass(frozen=True, slots=True)
class FixProof:
    """A fix's proof on the new tree as it is (``pristine``) and with the ported pack (``ported``)."""

    pristine: ProofOutcome
    ported: ProofOutcome
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"pristine": self.pristine, "ported": self.ported, "detail": self.detail}


@dataclass
class PortReport:
    from_release: str
    to_release: str | None
    changes: list[ChangeReport]
    fix_ids: tuple[str, ...]
    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    proofs: dict[str, FixProof] = field(default_factory=dict)  # empty when proofs were not run

    def counts(self) -> dict[str, int]:
        return {o.value: sum(1 for c in self.changes if c.outcome == o) for o in PortOutcome}

    def applies(self, fix_id: str) -> str:
        """From the changes alone: conflict if any change conflicts, upstream if all are upstream, else ported."""
        outcomes = {c.outcome for c in self.changes if c.fix == fix_id}
        if "conflict" in outcomes:
            return "conflict"
        return "upstream" if outcomes == {"upstream"} else "ported"

    def fix_outcome(self, fix_id: str) -> str:
        """``applies``, except fixed-upstream when the proof passes on the new tree without the fix."""
        outcome = self.applies(fix_id)
        proof = self.proofs.get(fix_id)
        if outcome != "upstream" and proof is not None and proof.pristine is ProofOutcome.PASSES:
            return "fixed-upstream"
        return outcome

    def to_json(self) -> dict[str, object]:
        fixes: list[dict[str, object]] = []
        for f in self.fix_ids:
            fixes.append({"id": f, "outcome": self.fix_outcome(f)})
            if f in self.proofs:
                fixes[-1]["proof"] = self.proofs[f].to_json()
        return {
            "from": self.from_release,
            "to": self.to_release,
            "counts": self.counts(),
            "fixes": fixes,
            "changes": [c.to_json() for c in self.changes],
            "written": [str(p) for p in self.written],
            "notes": self.notes,
        }


def _hunk_text(fd: diff.FileDiff, index: int) -> str:
    hunk = fd.hunks[index - 1]
    body = "".join(tag + (text if text.endswith("\n") else text + "\n") for tag, text in hunk.lines)
    return f"@@ -{hunk.old_start} @@ (hunk #{index})\n{body}".rstrip("\n")


def _contains(lines: list[str], want: tuple[str, ...]) -> bool:
    bodies = [w.rstrip("\r\n") for w in want]
    have = [line.rstrip("\r\n") for line in lines]
    return any(have[i : i + len(bodies)] == bodies for i in range(len(have) - len(bodies) + 1))


def _upstream(fd: diff.FileDiff, content: bytes | None) -> bool:
    """The tree already holds the change's result: the reversed diff applies, or every hunk's new side is there."""
    if content is None:
        return fd.deletes
    try:
        diff.apply(fd.reversed(), content)
        return True
    except diff.HunkFailed:
        pass
    lines = content.decode(diff.ENC, diff.ERRORS).splitlines(keepends=True)
    return all(_contains(lines, h.new) for h in fd.hunks)


def _added_present(fd: diff.FileDiff, content: bytes | None) -> bool:
    """Every run of added lines is in the file: the fix may be upstream in another form."""
    if content is None:
        return False
    lines = content.decode(diff.ENC, diff.ERRORS).splitlines(keepends=True)
    runs: list[tuple[str, ...]] = []
    for hunk in fd.hunks:
        run: list[str] = []
        for tag, text in (*hunk.lines, (" ", "")):
            if tag == "+" and text.strip():
                run.append(text)
            elif tag != "+" and run:
                runs.append(tuple(run))
                run = []
    return bool(runs) and all(_contains(lines, r) for r in runs)


def _try(change: Change, before: bytes | None, transform: Transform | None) -> tuple[ChangeReport, bytes | None]:
    """One change on the bytes the chain has reached: its report and the bytes after it (``before`` if none)."""
    fix, path = change.fix_id, change.path
    locked = change.fingerprint is not None and of(before) == change.fingerprint.before
    after: bytes | None
    if transform is not None:
        from ...transforms import CstFailed

        try:
            after = transform.apply(before)
        except CstFailed as exc:
            return ChangeReport(fix, path, PortOutcome.CONFLICT, f"{exc.edit}: {exc.reason}"), before
        if after == before:
            nothing = "the transform changes nothing: the tree already has it"
            return ChangeReport(fix, path, PortOutcome.UPSTREAM, nothing), before
        report = ChangeReport(fix, path, PortOutcome.UNCHANGED if locked else PortOutcome.CST)
    else:
        fd = rebuild.parsed(change)
        try:
            after = diff.apply(fd, before)
        except diff.HunkFailed as exc:
            if _upstream(fd, before):
                there = "the new tree already has the patched lines"
                return ChangeReport(fix, path, PortOutcome.UPSTREAM, there), before
            detail = str(exc)
            if _added_present(fd, before):
                detail += "; but every added line is in the new tree: upstream in another form? check"
            return ChangeReport(fix, path, PortOutcome.CONFLICT, detail, _hunk_text(fd, exc.index), exc.nearest), before
        report = ChangeReport(fix, path, PortOutcome.UNCHANGED if locked else PortOutcome.OFFSET)
        if not locked and change.fingerprint is None:
            report.detail = "no fingerprints to compare with (run fixpack lock on the old release)"
    problem = rebuild.compile_error(path, after)
    if problem and rebuild.compile_error(path, before) is None:
        broken = f"applies, but the result does not compile: {problem}"
        return ChangeReport(fix, path, PortOutcome.CONFLICT, broken), before
    report.patch = diff.render(path, before, after, blobs=True)
    return report, after


def _selection(
    catalog: Catalog, fix_ids: tuple[str, ...], profile_name: str | None, from_release: str
) -> tuple[Profile, list[Fix]]:
    """The fixes to port in pack order, and the profile of the old release whose pins map paths."""
    if profile_name:
        profile = catalog.profile(profile_name)
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
) -> PortReport:
    profile, fixes = _selection(catalog, fix_ids, profile_name, from_release)
    if write == from_release:
        raise UsageError(f"--write {write}: that is the release the fixes are on")
    transforms: dict[tuple[str, str], Transform] = {}
    for fix in fixes:
        spec = transforms_file(Path(fix.source), from_release)
        if spec is not None:
            transforms.update({(fix.id, t.path): t for t in load_transforms(spec)})
    reports: list[ChangeReport] = []
    ported: dict[str, bytes | None] = {}  # path -> the new tree's file with every change that ported
    for path, chain in pack_chains(fixes, from_release).items():
        pristine = lock.read_source(sources, profile, path)
        content = pristine
        for change in chain:
            report, after = _try(change, content, transforms.get((change.fix_id, path)))
            if report.outcome.ported:
                report.fingerprint = Fingerprint(of(pristine), of(content), of(after))
            content = after
            reports.append(report)
        ported[path] = content
    order = {f.id: i for i, f in enumerate(fixes)}
    reports.sort(key=lambda r: order[r.fix])  # by fix in pack order; each fix's files in its patch's order
    result = PortReport(from_release, write, reports, tuple(f.id for f in fixes))
    if proofs:
        _prove(fixes, profile, sources, ported, result, jobs)
    if write:
        _write(catalog, profile, fixes, result, sources, write)
    return result


def _prove(
    fixes: list[Fix],
    profile: Profile,
    sources: dict[str, Path],
    ported: dict[str, bytes | None],
    result: PortReport,
    jobs: int,
) -> None:
    """Each fix's proof on copies of the new trees: as they are, and with ``ported`` written in."""
    if not any(f.proof.script for f in fixes):
        result.proofs = {f.id: _judge(None, result.applies(f.id)) for f in fixes}
        return
    result.notes += _tree_notes(profile, sources)
    warm_up(fixes)
    with Scratch(sources, profile, "fixpack-port-", changed="ported") as scratch:
        for path, content in ported.items():
            scratch.put(path, content)
        with ProofPool(jobs) as pool:
            unported = {f.id for f in fixes if result.applies(f.id) != "ported"}
            runs = pool.pairs(fixes, scratch.trees(scratch.pristine), scratch.trees(scratch.changed),
                              before_only=unported)
    result.proofs = {fix.id: _judge(runs.get(fix.id), result.applies(fix.id)) for fix in fixes}


def _judge(runs: ProofPair | None, applies: str) -> FixProof:
    if runs is None:
        return FixProof(ProofOutcome.NOT_RUN, ProofOutcome.NOT_RUN, "no proof")
    before, after = runs.before, runs.after
    said = {
        ProofOutcome.PASSES: "on the new tree without the fix the proof passes: the bug is gone there",
        ProofOutcome.BUG_PRESENT: f"on the new tree: {before.tail(1)}",
        ProofOutcome.ERROR: f"on the new tree the proof errors: {before.tail(3)}",
    }
    detail = [said[before.outcome]]
    if after.outcome is ProofOutcome.NOT_RUN:
        detail.append(f"not run with the fix: it does not port ({applies})")
    elif after.outcome is ProofOutcome.BUG_PRESENT:
        detail.append(f"with the ported pack the proof still fails: {after.tail(1)}")
    elif after.outcome is ProofOutcome.ERROR:
        detail.append(f"with the ported pack the proof errors: {after.tail(3)}")
    return FixProof(before.outcome, after.outcome, "; ".join(detail))


def _tree_notes(profile: Profile, sources: dict[str, Path]) -> list[str]:
    """What the proofs ran against: a distribution whose tree is still the old release's pin, or none."""
    notes = []
    for pin in profile.pins:
        if pin.dist not in sources:
            notes.append(f"no --source {pin.dist}=DIR: proofs that need {pin.package} error")
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
    catalog: Catalog, profile: Profile, fixes: list[Fix], result: PortReport, sources: dict[str, Path], release: str
) -> None:
    prints: dict[str, dict[str, Fingerprint]] = {}
    for fix in fixes:
        mine = [r for r in result.changes if r.fix == fix.id]
        if result.fix_outcome(fix.id) != "ported":
            continue
        fix_dir = Path(fix.source)
        cst_file = transforms_file(fix_dir, result.from_release)
        cst_paths = {t.path for t in load_transforms(cst_file)} if cst_file else set()
        parts: dict[Path, str] = {}  # a transform's file to the rendered patch, the others to the diff
        for r in mine:
            if r.outcome.ported:
                name = rendered_patch_name(release) if r.path in cst_paths else f"{release}.patch"
                parts[fix_dir / name] = parts.get(fix_dir / name, "") + r.patch
        for patch_file, text in parts.items():
            patch_file.write_bytes(text.encode(diff.ENC, diff.ERRORS))
            result.written.append(patch_file)
        names = sorted(p.name for p in parts)
        if release in fix.changes:
            result.notes.append(f"{fix.id}: fix.toml already has release {release}; only {', '.join(names)} rewritten")
        else:
            with open(fix_dir / "fix.toml", "a", encoding="utf-8") as fh:
                rendered = cst_file if rendered_patch_name(release) in names else None
                fh.write(release_table(release, rendered, f"{release}.patch" in names))
            result.written.append(fix_dir / "fix.toml")
        if any(r.outcome == "upstream" for r in mine):
            result.notes.append(f"{fix.id}: some of its files are upstream already; {', '.join(names)} leave them out")
        prints[fix.id] = {r.path: r.fingerprint for r in mine if r.fingerprint is not None}
    draft = Profile(release, release, profile.description, profile.pins, profile.pack, profile.opt_ins)
    result.written += lock.write(catalog, draft, prints)
    target = catalog.root / "profiles" / f"{release}.toml"
    if target.exists():
        result.notes.append(f"{target} exists: no draft profile written")
        return
    kept = [f.id for f in fixes if result.fix_outcome(f.id) == "ported"]
    left_out = {f.id: _why_not(result, f.id) for f in fixes if f.id not in kept}
    commits = {pin.dist: _commit_of(sources.get(pin.dist)) for pin in profile.pins}
    text = draft_profile(profile, release, result.from_release, kept, left_out, commits)
    target.write_text(text, encoding="utf-8")
    result.written.append(target)


def _commit_of(tree: Path | None) -> str:
    if tree is None:
        return "TODO"
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else "TODO"


def _why_not(result: PortReport, fix_id: str) -> str:
    """The outcome that kept a fix out of the new release, and its first reason."""
    outcome = result.fix_outcome(fix_id)
    if outcome == "fixed-upstream":
        return f"{outcome}: its proof passes on the new tree without it, so the bug is gone there"
    first = next(r for r in result.changes if r.fix == fix_id and r.outcome == outcome)
    why = first.detail if first.detail.startswith(first.path) else f"{first.path}: {first.detail}"
    return f"{outcome}: {why.splitlines()[0]}"
