"""The ``fixpack`` command group: a lazy command table, so that a command's module (and what it
imports) loads only when that command runs."""

from __future__ import annotations

import importlib

import click

from .. import __version__
from . import COMMANDS, ENVIRONMENT_HELP

__all__ = ["main"]


class LazyGroup(click.Group):
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
    epilog=ENVIRONMENT_HELP,
)
@click.version_option(__version__, prog_name="fixpack")
def main() -> None:
    """Apply verified source fixes to an installed vLLM and vllm-gaudi, all or nothing.

    Exit codes: 0 done; 1 refused or failed (nothing changed); 2 usage (unknown fix or profile,
    bad arguments, invalid fix module or profile); 3 environment (not installed, not writable,
    lock not obtained, unrecoverable interrupted transaction).
    """
