"""What the proofs need installed: fixpack's ``proofs`` extra, read from fixpack's own metadata
(an install, editable or not) or, in a checkout run without installing, from its pyproject.toml:
declared once, there."""

from __future__ import annotations

import importlib.util
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ....cookbook.tomlfile import tomllib

__all__ = ["EXTRA", "declared", "missing"]

EXTRA = "proofs"
PYPROJECT = Path(__file__).resolve().parents[4] / "pyproject.toml"


def declared() -> list[Requirement]:
    """The requirements of the ``proofs`` extra; none when neither place says."""
    try:
        listed = requires("fixpack") or []
        return [r for r in map(Requirement, listed) if r.marker is not None and r.marker.evaluate({"extra": EXTRA})]
    except PackageNotFoundError:
        pass
    try:
        extras = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    except (OSError, KeyError, ValueError):
        return []
    return [Requirement(r) for r in extras.get(EXTRA, [])]


def missing() -> list[Requirement]:
    """Those whose module this Python cannot import (a distribution's module is its name)."""
    return [r for r in declared() if importlib.util.find_spec(canonicalize_name(r.name).replace("-", "_")) is None]
