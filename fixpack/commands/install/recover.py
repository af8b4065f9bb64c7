"""``fixpack recover``: deal with an interrupted transaction now. Without ``discard`` it rolls the
journal back, as every apply, status and revert does first; with ``discard`` it sets the journal
aside and leaves the files as they are: the operator's way out when recovery refuses (a file changed
since, a backup that does not match), after checking the files it named."""

from __future__ import annotations

from pathlib import Path

from ...cookbook.catalog import Catalog
from ...installation.distributions import Environment
from ...installation.inplace import InPlace
from ...installation.state import refuse_untrusted
from .pins import all_pins

__all__ = ["recover"]


def recover(catalog: Catalog, site: Path | None, discard: bool = False) -> str:
    """One line saying what was done."""
    env = Environment.read(all_pins(catalog), site)
    if not env.found:
        return "nothing is installed here: no interrupted transaction"
    destination = InPlace.of(env)
    with destination.locked():
        refuse_untrusted(destination.state_dir)
        if discard:
            aside = destination.discard()
            if aside is None:
                return "no interrupted transaction"
            return (
                f"set the journal aside in {aside}, files left as they are (delete it when done); "
                "run fixpack status to see where each fix stands"
            )
        return destination.recover() or "no interrupted transaction"
