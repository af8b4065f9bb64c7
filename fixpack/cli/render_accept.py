"""How ``fixpack recipe accept`` is printed: a progress line per check on a terminal (stderr), the
table at the end (check, result, the figure measured beside the page's, the fixes a failing check
points at), and JUnit XML (the standard library's ElementTree)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from .render import paint

if TYPE_CHECKING:  # the command's types, imported where it runs
    from ..commands.recipes.accept import AcceptResult, CheckResult
    from ..cookbook.checks import Check

__all__ = ["progress", "table", "junit"]


def progress(err: TextIO) -> Callable[[Check, CheckResult | None], None]:
    """The callback ``accept`` calls before and after each check: lines only on a terminal."""

    def show(check: Check, done: CheckResult | None) -> None:
        if not err.isatty():
            return
        if done is None:
            print(
                f"  ... {check.id} ({check.predicate}, {len(check.requests) * check.repeat} requests)",
                file=err,
                flush=True,
            )
        else:
            mark = "held" if done.ok else "FAILED"
            print(f"  {mark} {check.id} in {done.seconds:.1f} s ({done.requests} requests)", file=err, flush=True)

    return show


def table(result: AcceptResult, out: TextIO) -> None:
    rows = [("check", "result", "measured", "page", "fixes it points at")]
    for c in result.checks:
        rows.append(
            (
                c.id,
                "held" if c.ok else "FAILED",
                c.measured or "-",
                c.page or "(not on the page)",
                "" if c.ok else ", ".join(c.fixes) or "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for i, row in enumerate(rows):
        cells = [f"{cell:<{w}}" for cell, w in zip(row[:4], widths)]
        if i:
            key = "applied" if row[1] == "held" else "refused"
            cells[1] = paint(cells[1], key, out)
        print("  ".join([*cells, row[4]]).rstrip(), file=out)
    for c in result.checks:
        if not c.ok:
            print(f"{c.id}: {c.detail}", file=out)
    failed = sum(1 for c in result.checks if not c.ok)
    print(
        f"fixpack recipe accept {result.slug} at {result.url} ({result.model}): "
        f"{len(result.checks) - failed} held, {failed} failed",
        file=out,
    )


def junit(result: AcceptResult) -> str:
    """The JUnit XML of an accept run."""
    failed = sum(1 for c in result.checks if not c.ok)
    suite = ET.Element(
        "testsuite",
        name=f"fixpack recipe accept {result.slug}",
        tests=str(len(result.checks)),
        failures=str(failed),
        errors="0",
        time=f"{sum(c.seconds for c in result.checks):.3f}",
    )
    for c in result.checks:
        case = ET.SubElement(suite, "testcase", classname=result.slug, name=c.id, time=f"{c.seconds:.3f}")
        props = ET.SubElement(case, "properties")
        for name, value in (("measured", c.measured), ("page", c.page), ("row", c.row), ("fixes", ", ".join(c.fixes))):
            if value:
                ET.SubElement(props, "property", name=name, value=value)
        if not c.ok:
            failure = ET.SubElement(case, "failure", message=c.detail or "failed")
            fixes = ", ".join(c.fixes) or "-"
            failure.text = f"{c.id}: {c.detail}\nmeasured {c.measured or '-'}, page {c.page or '-'}; fixes: {fixes}"
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True).decode("utf-8")
