"""fixpack's optional extras (``pyproject.toml``'s ``optional-dependencies``): what one lists, which
of its modules this Python lacks, and the command that installs it. Read from fixpack's metadata
(an install, editable or not) or, in a checkout used without installing, from its pyproject.toml:
declared once, there. fixpack is not on a package index: an extra is installed from the checkout."""

from __future__ import annotations

import importlib.util
import sys
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .cookbook.tomlfile import tomllib

__all__ = ["CHECKOUT", "declared", "missing", "install_line"]

CHECKOUT = Path(__file__).resolve().parent.parent  # where pyproject.toml is, for a checkout


def declared(extra: str) -> list[Requirement]:
    """The requirements ``extra`` lists; none when neither place says."""
    try:
        listed = requires("fixpack") or []
        return [r for r in map(Requirement, listed) if r.marker is not None and r.marker.evaluate({"extra": extra})]
    except PackageNotFoundError:
        pass
    try:
        extras = tomllib.loads((CHECKOUT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        return [Requirement(r) for r in extras["optional-dependencies"].get(extra, [])]
    except (OSError, KeyError, ValueError):
        return []


def missing(extra: str) -> list[Requirement]:
    """Those of ``extra`` whose module this Python cannot import (a distribution's module is its name)."""
    return [r for r in declared(extra) if importlib.util.find_spec(canonicalize_name(r.name).replace("-", "_")) is None]


def install_line(extra: str) -> str:
    """The command that installs ``extra`` for this Python, from this checkout."""
    return f"{Path(sys.executable).name} -m pip install -e '{CHECKOUT}[{extra}]'"
