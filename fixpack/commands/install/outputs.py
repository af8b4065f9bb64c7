"""Files named on the command line (``sbom -o``, ``--junit``): written whole or not at all, never
through a link, never over a folder or a special file (see fixpack/installation/files.py)."""

from __future__ import annotations

from pathlib import Path

from ...errors import EnvironmentProblem
from ...installation import files

__all__ = ["write_named"]


def write_named(option: str, path: Path, text: str) -> None:
    """``path`` (given as ``option``) holds ``text`` whole, or is as it was; EnvironmentProblem
    (one line) when it cannot be written."""
    try:
        files.write_output(path, text.encode("utf-8"))
    except files.NotARegularFile as exc:
        raise EnvironmentProblem(f"{option} {exc}; nothing was written", path=str(path)) from None
    except OSError as exc:
        raise EnvironmentProblem(
            f"{option} {path}: cannot write it ({exc.strerror or exc}); nothing was written", path=str(path)
        ) from None
