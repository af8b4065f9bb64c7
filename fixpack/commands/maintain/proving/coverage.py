"""``fixpack verify --coverage``: which of the lines a fix adds does its proof run?

Each fix's proof runs on the patched tree under coverage.py (``proofkit`` starts it in every
process the proof runs in and saves it there, one data file per process; they are combined here).
A fix's lines are those its hunks add that hold code of a statement coverage.py counts in the
whole-pack file (a line inside a statement spread over lines counts as that statement), each named
by the hunk-relative id its mutants use (``h1:+3``). An added line the proof does not run fails
verify, unless fix.toml declares it ``[[proof.unreachable]]`` with the reason (an
HPU-only branch a CPU proof cannot take); a declaration that matches no unrun line is reported.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ....cookbook.catalog import Catalog
from ....core import patch
from ....core.mutants import added_lines
from ....models import Profile
from ..trees import Pack, Scratch

__all__ = ["FixCoverage", "Line", "fix_lines", "measured", "rcfile"]


@dataclass(frozen=True, slots=True)
class Line:
    id: str  # "h1:+3"
    path: str  # as the fix names it
    row: int  # in the file with the whole pack applied
    file: str  # that file, in the patched scratch tree

    @property
    def where(self) -> str:
        return f"{self.path}:{self.row}"


@dataclass
class FixCoverage:
    fix: str
    lines: list[Line]  # the added lines coverage.py counts as statements
    ran: set[str] = field(default_factory=set)
    unreachable: dict[str, str] = field(default_factory=dict)  # id -> why, from fix.toml

    @property
    def unrun(self) -> list[Line]:
        return [ln for ln in self.lines if ln.id not in self.ran and ln.id not in self.unreachable]

    @property
    def excluded(self) -> list[Line]:
        return [ln for ln in self.lines if ln.id not in self.ran and ln.id in self.unreachable]

    @property
    def unmatched(self) -> list[str]:
        """Ids declared unreachable that are no unrun statement here: run now, or no such line."""
        left = {ln.id for ln in self.lines if ln.id not in self.ran}
        return [i for i in self.unreachable if i not in left]

    def failures(self) -> list[str]:
        return [f"coverage: added line {ln.id} ({ln.where}) is not run by the proof" for ln in self.unrun]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "covered": len(self.lines) - len(self.unrun) - len(self.excluded),
            "total": len(self.lines),
            "unrun": [{"id": ln.id, "where": ln.where} for ln in self.unrun],
            "excluded": [{"id": ln.id, "where": ln.where, "why": self.unreachable[ln.id]} for ln in self.excluded],
        }
        if self.unmatched:
            out["unmatched_unreachable"] = self.unmatched
        return out


def _final_rows(after: bytes | None, final: bytes | None) -> dict[int, int]:
    """Rows of the file as one fix leaves it -> the same lines once the later fixes are applied
    (a line a later fix changes has no row there)."""

    def split(content: bytes | None) -> list[str]:
        return patch.split_lines((content or b"").decode(patch.ENC, patch.ERRORS))

    matcher = difflib.SequenceMatcher(None, split(after), split(final), autojunk=False)
    return {a + k + 1: b + k + 1 for a, b, size in matcher.get_matching_blocks() for k in range(size)}


def fix_lines(catalog: Catalog, profile: Profile, pack: Pack, scratch: Scratch) -> dict[str, list[Line]]:
    """Every line each fix of the pack adds to a Python file, placed in the whole-pack file (in
    ``scratch``'s patched tree)."""
    out: dict[str, list[Line]] = {}
    for fid in profile.pack:
        steps = pack.steps(catalog.fixes[fid])
        if steps is None:  # the pack does not apply there: verify says so already
            continue
        rows = {s.change.path: _final_rows(s.after, s.final) for s in steps}
        out[fid] = []
        for lid, path, row in added_lines([s.target for s in steps]):
            if path.endswith(".py") and row in rows[path]:
                file = os.path.realpath(scratch.file(scratch.changed, path))
                out[fid].append(Line(lid, path, rows[path][row], file))
    return out


def rcfile(data_dir: Path, include: list[str]) -> str:
    """Write the coverage.py configuration the proof's processes run under: one data file each in
    ``data_dir``, only the patched files measured (tracing torch would cost more than the proof),
    and every Python subprocess the proof starts measured as well."""
    data_dir.mkdir(parents=True, exist_ok=True)
    rc = data_dir / "coveragerc"
    listed = "".join(f"\n    {f}" for f in include)
    # concurrency: the proofs' fork-context worker processes (multiprocessing), whose exit
    # coverage.py hooks; patch: Python subprocesses they start.
    rc.write_text(
        f"[run]\ndata_file = {data_dir / '.coverage'}\nparallel = true\npatch = subprocess\n"
        "concurrency = multiprocessing, thread\n"
        f"include ={listed}\n",
        encoding="utf-8",
    )
    return str(rc)


def measured(fix: str, lines: list[Line], data_dir: Path, unreachable: dict[str, str]) -> FixCoverage:
    """What the proof run writing into ``data_dir`` ran of ``lines`` (a fix without a proof: none)."""
    import coverage
    from coverage.parser import PythonParser

    cov = coverage.Coverage(data_file=str(data_dir / ".coverage"), config_file=False)
    executed: dict[str, set[int]] = {}
    if any(data_dir.glob(".coverage.*")):
        cov.combine([str(data_dir)], keep=False)
        data = cov.get_data()
        executed = {os.path.realpath(f): set(data.lines(f) or ()) for f in data.measured_files()}
    first: dict[str, dict[int, int]] = {}  # file -> added row -> the statement coverage.py counts it in
    for file in {ln.file for ln in lines}:
        statements = set(cov.analysis2(file)[1])
        parser = PythonParser(filename=file)
        parser.parse_source()
        text = Path(file).read_text(encoding="utf-8").splitlines()
        first[file] = {}
        for ln in lines:
            code = text[ln.row - 1].strip() if ln.row <= len(text) else ""
            # A comment or blank line runs nothing, even inside a statement spread over lines.
            if ln.file == file and code and not code.startswith("#") and parser.first_line(ln.row) in statements:
                first[file][ln.row] = parser.first_line(ln.row)
    report = FixCoverage(fix, [ln for ln in lines if ln.row in first[ln.file]], unreachable=unreachable)
    report.ran = {ln.id for ln in report.lines if first[ln.file][ln.row] in executed.get(ln.file, set())}
    return report
