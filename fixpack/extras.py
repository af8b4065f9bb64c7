"""fixpack's optional extras (``pyproject.toml``'s ``optional-dependencies``): what one lists, which
of its modules this Python lacks, and the command that installs it. Read from fixpack's metadata
(an install, editable or not) or, in a checkout used without installing, from its pyproject.toml:
declared once, there. fixpack is not on a package index: an extra is installed from the checkout."""

from __future__ import annotations

import importlib.util
import sys
from importlib.metadata import PackageNotFoundError, metadata, requires
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .cookbook.tomlfile import tomllib

__all__ = ["CHECKOUT", "names", "declared", "missing", "providing", "install_line"]

CHECKOUT = Path(__file__).resolve().parent.parent  # where pyproject.toml is, for a checkout


def names() -> list[str]:
    """Every extra, in the order pyproject.toml lists them."""
    try:
        return list(metadata("fixpack").get_all("Provides-Extra") or [])
    except PackageNotFoundError:
        pass
    try:
        project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        return list(project["optional-dependencies"])
    except (OSError, KeyError, ValueError):
        return []


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
    return [r for r in declared(extra) if importlib.util.find_spec(_module_of(r)) is None]


def providing(module: str) -> str | None:
    """The first extra that installs the top-level ``module`` (``libcst``: authoring)."""
    top = module.partition(".")[0]
    for extra in names():
        if any(_module_of(r) == top for r in declared(extra)):
            return extra
    return None


def _module_of(requirement: Requirement) -> str:
    return canonicalize_name(requirement.name).replace("-", "_")


def install_line(extra: str) -> str:
    """The command that installs ``extra`` for this Python, from this checkout."""
    return f"{Path(sys.executable).name} -m pip install -e '{CHECKOUT}[{extra}]'"
