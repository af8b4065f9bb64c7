"""The command line: click, a lazy command table, and rendering. Nothing outside this package
imports click, and this module does not either (``main`` loads on first use): the plain apply of
``apply_all.py`` runs without it. Exit codes and JSON shapes are the README's."""

from __future__ import annotations

from typing import Any

__all__ = ["main", "run_apply_all"]


def run_apply_all(argv: list[str]) -> None:
    """``fixes/apply_all.py ARGS``: the same as ``fixpack apply ARGS``."""
    from .quick import run

    run(argv)  # exits, unless the line needs click
    from .site_commands import apply

    apply.main(args=argv, prog_name="apply_all.py")


def __getattr__(name: str) -> Any:
    if name == "main":  # the click group, imported on first use
        from .group import main

        return main
    raise AttributeError(name)
