"""The cookbook on disk: ``fixes/<id>/`` and ``profiles/<release>.toml``. The only code that knows
their file names and formats; each format's reader and writer live together."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ENGINE_ROOT", "default_root"]

ENGINE_ROOT = Path(__file__).resolve().parent.parent.parent  # the checkout fixpack runs from


def default_root() -> Path:
    """The cookbook in use: ``FIXPACK_COOKBOOK``, or the checkout fixpack runs from."""
    return Path(os.environ.get("FIXPACK_COOKBOOK") or ENGINE_ROOT)
