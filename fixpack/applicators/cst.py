"""The libcst authors' API under its first import path; it lives in :mod:`fixpack.transforms`."""

from ..transforms import *  # noqa: F403
from ..transforms import __all__  # noqa: F401
