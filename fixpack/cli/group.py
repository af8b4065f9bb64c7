"""The ``fixpack`` command group: a lazy command table, so that a command's module (and what it
imports) loads only when that command runs."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from .. import __version__
from ..errors import INTERRUPTED, INTERRUPTED_LINE
from .environment import help_block

__all__ = ["COMMANDS", "main", "one_line"]

# name -> "module:function": a command's module is imported only when that command runs.
COMMANDS = {
    "apply": "site_commands:apply",
    "status": "site_commands:status",
    "revert": "site_commands:revert",
    "recover": "recover_command:recover",
    "list": "site_commands:list_",
    "show": "site_commands:show",
    "profiles": "site_commands:profiles",
    "sbom": "site_commands:sbom",
    "verify": "maintainer:verify",
    "diff": "upstream_commands:diff",
    "lock": "maintainer:lock",
    "build-site": "maintainer:build_site",
    "record": "maintainer:record",
    "port": "maintainer:port",
    "recipe": "recipe_commands:recipe",
    "upstream": "upstream_commands:upstream",
}


# click 8.2 on raises this for a group run bare; earlier clicks print the help themselves
NO_ARGS_IS_HELP: tuple[type[Exception], ...] = tuple(
    c for c in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if c is not None
)


def one_line(run: Callable[..., Any], *args: Any, **kwargs: Any) -> NoReturn:
    """Run a click entry point (``Command.main``) so that its own errors are one line, as fixpack's
    are: a bad option or value exits 2 saying what and where its help is, Ctrl-C while click parses
    exits 130; never click's usage block or a bare "Aborted!"."""
    try:
        code = run(*args, standalone_mode=False, **kwargs)
    except click.exceptions.Abort:
        print(INTERRUPTED_LINE, file=sys.stderr)
        sys.exit(INTERRUPTED)
    except click.exceptions.ClickException as exc:
        if isinstance(exc, NO_ARGS_IS_HELP):  # a group run bare: its help, as click shows it
            exc.show()
            sys.exit(exc.exit_code)
        ctx = getattr(exc, "ctx", None)
        helped = f" (see {ctx.command_path} --help)" if ctx is not None else ""
        print(f"fixpack: error: {' '.join(exc.format_message().split())}{helped}", file=sys.stderr)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


class LazyGroup(click.Group):
    def main(self, *args: Any, **kwargs: Any) -> NoReturn:
        one_line(super().main, *args, **kwargs)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, _, attr = COMMANDS[name].partition(":")
        return getattr(importlib.import_module(f"{__package__}.{module}"), attr)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=help_block(),
)
@click.version_option(__version__, prog_name="fixpack")
def main() -> None:
    """Apply verified source fixes to an installed vLLM and vllm-gaudi, all or nothing.

    Exit codes: 0 done; 1 refused or failed (nothing changed); 2 usage (unknown fix or profile,
    bad arguments, invalid fix module or profile); 3 environment (not installed, not writable,
    lock not obtained, unrecoverable interrupted transaction).
    """
