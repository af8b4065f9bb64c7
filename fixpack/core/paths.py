"""The one rule for a relative path that a patch, a lock or a journal names: plain components
joined by ``/``, so that joining it to a root can only land under that root (symlinks aside, which
``fixpack.installation.confine`` checks on the disk). Pure: no file system."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..errors import UsageError

__all__ = ["UnsafePath", "relative", "check_all"]


class UnsafePath(ValueError):
    """A path that could name something outside the root it is joined to."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"path {path!r} {reason}")
        self.path = path
        self.reason = reason


def relative(path: str) -> str:
    """``path`` itself when it is plain and relative; UnsafePath otherwise.

    Only the normal form is accepted (no ``.`` or empty components rewritten away), so that one
    file has one name in patches, locks, the manifest and the journal."""
    if not isinstance(path, str) or not path:
        raise UnsafePath(str(path), "is empty or not text")
    if "\0" in path:
        raise UnsafePath(path, "contains a NUL byte")
    if "\\" in path:  # a Windows separator here is a mistake or a trick, never a real file name
        raise UnsafePath(path, "contains a backslash")
    if path.startswith("/"):
        raise UnsafePath(path, "is absolute")
    for part in path.split("/"):
        if part == "":
            raise UnsafePath(path, "has an empty component")
        if part in (".", ".."):
            raise UnsafePath(path, f"has a {part!r} component")
    return path


def check_all(paths: Iterable[str], *, fix_id: str, where: Path | str) -> None:
    """A usage error, naming the fix, the file and the path, for the first path of a cookbook
    file (a patch, a lock) that is not plain and relative: refused when the cookbook is loaded."""
    for path in paths:
        try:
            relative(path)
        except UnsafePath as exc:
            raise UsageError(
                f"invalid {where}: fix {fix_id}: {exc}; a change's path is relative to its distribution's root, "
                "as in the upstream repository (e.g. vllm_gaudi/v1/worker/hpu_model_runner.py)",
                fix_id=fix_id,
                path=exc.path,
            ) from None
