"""The command line: click, a lazy command table, and rendering. Nothing outside this package
imports click. Exit codes and JSON shapes are docs/reference's."""

from __future__ import annotations

from .group import main

__all__ = ["main", "run_apply_all"]


def run_apply_all(argv: list[str]) -> None:
    """``fixes/apply_all.py ARGS``: the same as ``fixpack apply ARGS``."""
    from .group import one_line
    from .site_commands import apply

    one_line(apply.main, args=argv, prog_name="apply_all.py")
