"""``apply`` without click: the plain container start-up line (``--profile``, ``--site``,
``--overlay``, ``--json``, ``--dry-run``, ``--allow-unpinned`` and fix names) is parsed here, so a
cold ``apply_all.py`` does not import click; anything else (``--help``, ``--exec``, a mistake) goes
to the click command, which says what is wrong."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import EnvironmentProblem, FixpackError, UsageError
from . import render
from .guarded import catalog, guard

__all__ = ["apply_command", "result_error", "run"]

_FLAGS = {"--dry-run": "dry_run", "--json": "as_json", "--allow-unpinned": "allow_unpinned"}
_VALUES = {"--profile": "profile", "--site": "site", "--overlay": "overlay"}


def result_error(exc: FixpackError, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"ok": False, "profile": kwargs.get("profile"), "fixes": [], "error": exc.message, "notes": []}


def apply_command(
    profile: str,
    fixes: tuple[str, ...],
    dry_run: bool,
    as_json: bool,
    allow_unpinned: bool,
    site: Path | None,
    overlay: Path | None,
    command: list[str] | None = None,
) -> int:
    """Apply, print the result, and (``command``) replace this process with it once applied."""
    from ..commands.apply import apply as run_apply

    if command and dry_run:
        raise UsageError("--exec runs a command once the fixes are applied; not with --dry-run")
    result = run_apply(catalog(), profile, fixes, site, dry_run, allow_unpinned, render=render.printed, overlay=overlay)
    render.result(result, as_json)
    if command and result.exit_code == 0:
        from ..commands.overlay import exec_command

        try:
            exec_command(command, str(overlay) if overlay is not None else None)
        except OSError as exc:
            raise EnvironmentProblem(f"--exec {command[0]}: {exc.strerror}") from None
    return result.exit_code


def _parse(argv: list[str]) -> dict[str, Any] | None:
    """The options of a plain apply line; None for anything else."""
    opts: dict[str, Any] = {"profile": None, "site": os.environ.get("FIXPACK_SITE") or None, "overlay": None}
    opts.update(dict.fromkeys(_FLAGS.values(), False))
    fixes: list[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        key, eq, value = arg.partition("=")
        if arg in _FLAGS:
            opts[_FLAGS[arg]] = True
        elif key in _VALUES and (eq or args):
            opts[_VALUES[key]] = value if eq else args.pop(0)
            if not opts[_VALUES[key]]:
                return None
        elif arg.startswith("-") or not arg:
            return None
        else:
            fixes.append(arg)
    if not opts["profile"]:
        return None
    for key in ("site", "overlay"):
        opts[key] = Path(opts[key]) if opts[key] else None
    opts["fixes"] = tuple(fixes)
    return opts


def run(argv: list[str]) -> None:
    """Run a plain apply line and exit; return when the line needs the click command."""
    opts = _parse(argv)
    if opts is not None:
        guard(result_error)(apply_command)(**opts)
