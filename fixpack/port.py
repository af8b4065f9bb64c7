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
the tree would be without it. ``write`` adds the new release to each fix that ported, re-rendered
against the new tree and fingerprinted, and a draft profile in which a maintainer only has to
resolve the fixes left commented out.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from . import compose, lock
from .applicators import cst, diff
from .catalog import Catalog, rendered_patch_name
from .errors import UsageError
from .fingerprint import of
from .model import Change, Fingerprint, Fix, Profile

OUTCOMES = ("unchanged", "offset", "cst", "upstream", "conflict")
APPLIED = ("unchanged", "offset", "cst")


@dataclass
class ChangeReport:
    fix: str
    path: str
    outcome: str  # one of OUTCOMES
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


@dataclass
class PortReport:
    from_release: str
    to_release: str | None
    changes: list[ChangeReport]
    fix_ids: tuple[str, ...]
    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {o: sum(1 for c in self.changes if c.outcome == o) for o in OUTCOMES}

    def fix_outcome(self, fix_id: str) -> str:
        """conflict if any change conflicts, upstream if all are upstream, else ported."""
        outcomes = {c.outcome for c in self.changes if c.fix == fix_id}
        if "conflict" in outcomes:
            return "conflict"
        return "upstream" if outcomes == {"upstream"} else "ported"

    def to_json(self) -> dict[str, object]:
        return {
            "from": self.from_release,
            "to": self.to_release,
            "counts": self.counts(),
            "fixes": [{"id": f, "outcome": self.fix_outcome(f)} for f in self.fix_ids],
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


def _try(change: Change, before: bytes | None, transform: cst.Transform | None) -> tuple[ChangeReport, bytes | None]:
    """One change on the bytes the chain has reached: its report and the bytes after it (``before`` if none)."""
    fix, path = change.fix_id, change.path
    locked = change.fingerprint is not None and of(before) == change.fingerprint.before
    if transform is not None:
        try:
            after = transform.apply(before)
        except cst.CstFailed as exc:
            return ChangeReport(fix, path, "conflict", f"{exc.edit}: {exc.reason}"), before
        if after == before:
            return ChangeReport(fix, path, "upstream", "the transform changes nothing: the tree already has it"), before
        report = ChangeReport(fix, path, "unchanged" if locked else "cst")
    else:
        fd = compose.parsed(change)
        try:
            after = diff.apply(fd, before)
        except diff.HunkFailed as exc:
            if _upstream(fd, before):
                return ChangeReport(fix, path, "upstream", "the new tree already has the patched lines"), before
            detail = str(exc)
            if _added_present(fd, before):
                detail += "; but every added line is in the new tree: upstream in another form? check"
            return ChangeReport(fix, path, "conflict", detail, _hunk_text(fd, exc.index), exc.nearest), before
        report = ChangeReport(fix, path, "unchanged" if locked else "offset")
        if not locked and change.fingerprint is None:
            report.detail = "no fingerprints to compare with (run fixpack lock on the old release)"
    problem = compose.compile_error(path, after)
    if problem and compose.compile_error(path, before) is None:
        return ChangeReport(fix, path, "conflict", f"applies, but the result does not compile: {problem}"), before
    report.patch = diff.render(path, before, after)
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
) -> PortReport:
    profile, fixes = _selection(catalog, fix_ids, profile_name, from_release)
    if write == from_release:
        raise UsageError(f"--write {write}: that is the release the fixes are on")
    chains: dict[str, list[Change]] = {}
    transforms: dict[tuple[str, str], cst.Transform] = {}
    for fix in fixes:
        for path, t in cst.release_transforms(Path(fix.source), from_release).items():
            transforms[(fix.id, path)] = t
        for change in fix.changes[from_release]:
            chains.setdefault(change.path, []).append(change)
    reports: list[ChangeReport] = []
    for path, chain in chains.items():
        pristine = lock.read_source(sources, profile, path)
        content = pristine
        for change in chain:
            report, after = _try(change, content, transforms.get((change.fix_id, path)))
            if report.outcome in APPLIED:
                report.fingerprint = Fingerprint(of(pristine), of(content), of(after))
            content = after
            reports.append(report)
    order = {f.id: i for i, f in enumerate(fixes)}
    reports.sort(key=lambda r: order[r.fix])  # by fix in pack order; each fix's files in its patch's order
    result = PortReport(from_release, write, reports, tuple(f.id for f in fixes))
    if write:
        _write(catalog, profile, fixes, result, sources, write)
    return result


def _append_release(release: str, cst_file: Path | None) -> str:
    """The table fix.toml gains for ``release``; the file is appended to, never rewritten."""
    patch = rendered_patch_name(release) if cst_file else f"{release}.patch"
    lines = [f'\n[release."{release}"]\n']
    if cst_file:  # the same transforms carried it; lock re-renders them for the new release
        lines.append(f"transforms = {json.dumps(cst_file.name)}\n")
    lines.append(f"patch = {json.dumps(patch)}\n")
    return "".join(lines)


def _write(
    catalog: Catalog, profile: Profile, fixes: list[Fix], result: PortReport, sources: dict[str, Path], release: str
) -> None:
    prints: dict[str, dict[str, Fingerprint]] = {}
    for fix in fixes:
        mine = [r for r in result.changes if r.fix == fix.id]
        if result.fix_outcome(fix.id) != "ported":
            continue
        fix_dir = Path(fix.source)
        cst_file = cst.transforms_file(fix_dir, result.from_release)
        patch_file = fix_dir / (rendered_patch_name(release) if cst_file else f"{release}.patch")
        patch_file.write_bytes("".join(r.patch for r in mine if r.outcome in APPLIED).encode(diff.ENC, diff.ERRORS))
        result.written.append(patch_file)
        if release in fix.changes:
            result.notes.append(f"{fix.id}: fix.toml already has release {release}; only {patch_file.name} rewritten")
        else:
            with open(fix_dir / "fix.toml", "a", encoding="utf-8") as fh:
                fh.write(_append_release(release, cst_file))
            result.written.append(fix_dir / "fix.toml")
        if any(r.outcome == "upstream" for r in mine):
            result.notes.append(f"{fix.id}: some of its files are upstream already; {patch_file.name} leaves them out")
        prints[fix.id] = {r.path: r.fingerprint for r in mine if r.fingerprint is not None}
    draft = Profile(release, release, profile.description, profile.pins, profile.pack, profile.opt_ins)
    result.written += lock.write(catalog, draft, prints)
    target = catalog.root / "profiles" / f"{release}.toml"
    if target.exists():
        result.notes.append(f"{target} exists: no draft profile written")
        return
    target.write_text(_draft_profile(profile, fixes, result, sources, release), encoding="utf-8")
    result.written.append(target)


def _commit_of(tree: Path | None) -> str:
    if tree is None:
        return "TODO"
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else "TODO"


def _draft_profile(
    profile: Profile, fixes: list[Fix], result: PortReport, sources: dict[str, Path], release: str
) -> str:
    lines = [
        f"# Draft written by `fixpack port --from {result.from_release} --write {release}`: set the pins'",
        "# versions and commits, resolve the fixes commented out below (write their",
        f'# [release."{release}"] changes), then run fixpack lock and fixpack verify on this profile.',
        f'release = "{release}"',
        f'description = """\nTODO. Ported from profile {profile.name}: {profile.description}\n"""',
        "",
        "pack = [",
    ]
    ported = []
    for fix in fixes:
        outcome = result.fix_outcome(fix.id)
        if outcome == "ported":
            ported.append(fix.id)
            lines.append(f"    {json.dumps(fix.id)},")
            continue
        first = next(r for r in result.changes if r.fix == fix.id and r.outcome == outcome)
        why = first.detail if first.detail.startswith(first.path) else f"{first.path}: {first.detail}"
        lines.append(f"    # {json.dumps(fix.id)},  # {outcome}: {why.splitlines()[0]}")
    lines.append("]")
    lines.append(f"opt_ins = {json.dumps([f for f in profile.opt_ins if f in ported])}")
    for pin in profile.pins:
        commit = _commit_of(sources.get(pin.dist))
        lines += [
            "",
            "[[pin]]",
            f"dist = {json.dumps(pin.dist)}",
            f"package = {json.dumps(pin.package)}",
            'version = "TODO"',
            f"commits = [{json.dumps(commit)}]"
            + ("" if commit != "TODO" else f"  # {result.from_release} pinned {', '.join(pin.commits)}"),
        ]
    return "\n".join(lines) + "\n"
