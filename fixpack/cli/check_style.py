"""``diff --check-style``'s report (issue 41): upstream's style checks on each patched tree, a line
per fix and its problems, or JSON."""

from __future__ import annotations

from pathlib import Path

from . import render
from .options import catalog


def style_check(
    fixes: tuple[str, ...], profile: str | None, dist: str | None, sources: dict[str, Path], as_json: bool
) -> int:
    """``diff --check-style``: the report of each fix, exit 1 when one fails."""
    from ..commands.maintain.proving.style import check_style

    report = check_style(catalog(), fixes, profile, dist, sources)
    if as_json:
        render.dump(report.to_json())
        return 0 if report.ok else 1
    tools = ", ".join(f"{tool} {version}" for tool, version in sorted(report.tools.items()))
    print(f"upstream's style checks ({tools}) on each patched tree, profile {report.profile}:")
    width = max((len(f.fix) for f in report.fixes), default=0)
    for f in report.fixes:
        words = {tool: {fs.checks.get(tool) for fs in f.files} for tool in sorted(report.tools)}
        checks = [
            f"{tool} {next(w for w in ('fails', 'passes', 'not-run') if w in said)}"
            for tool, said in words.items()
            if said - {None}
        ]
        word = "FAILS " if f.failed else "passes" if f.ok else "-     "
        print(f"  {f.fix:<{width}}  {word}  {f.dist}: {f.note or ', '.join(checks)}")
        for fs in f.files:
            for problem in fs.problems:
                print(f"      {problem}")
    failed = [f.fix for f in report.fixes if f.failed]
    passed = sum(1 for f in report.fixes if f.ok)
    unchecked = len(report.fixes) - passed - len(failed)
    which = f" ({', '.join(failed)})" if failed else ""
    print(
        f"fixpack diff --check-style: {passed} pass, {len(failed)} fail{which}"
        + (f", {unchecked} not checked" if unchecked else "")
    )
    return 1 if failed else 0
