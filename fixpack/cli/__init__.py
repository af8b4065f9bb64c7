"""The command line: click, a lazy command table, and rendering. Nothing outside this package
imports click, and this module does not either (``main`` loads on first use): the plain apply of
``apply_all.py`` runs without it. Exit codes and JSON shapes are the README's."""

from __future__ import annotations

from typing import Any

__all__ = ["main", "run_apply_all"]

# name -> "module:function": a command's module is imported only when that command runs.
COMMANDS = {
    "apply": "site_commands:apply",
    "status": "site_commands:status",
    "revert": "site_commands:revert",
    "recover": "recover_command:recover",
    "list": "site_commands:list_",
    "show": "site_commands:show",
    "profiles": "site_commands:profiles",
    "verify": "maintainer:verify",
    "diff": "maintainer:diff",
    "lock": "maintainer:lock",
    "build-site": "maintainer:build_site",
    "record": "maintainer:record",
    "port": "maintainer:port",
}

ENVIRONMENT_HELP = """\b
Environment:
  FIXPACK_SITE            default for --site
  FIXPACK_COOKBOOK        use the fixes/ and profiles/ of another checkout
  FIXPACK_SRC_VLLM_GAUDI  default --source vllm-gaudi=DIR (verify, lock)
  FIXPACK_SRC_VLLM        default --source vllm=DIR (verify, lock)
  FIXPACK_LOCK_TIMEOUT    seconds to wait for another fixpack's lock (default 300)
  FIXPACK_NO_FAST_PATH    1: apply_all.py always runs the full apply
"""


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
