"""The one place where a relative path from a patch, a lock, the manifest or a journal becomes a
path on the disk: joined to the root it belongs to (a distribution's root, the state directory),
and refused unless it stays inside that root once symlinked folders are followed.

Every refusal here is an EnvironmentProblem (exit 3): the cookbook's paths were checked when it
was loaded (``fixpack.core.paths``, a usage error), so what is left to find is a site laid out in
a way fixpack will not write through: a symlinked folder leading out of the root, a target that
is a symlink (replacing it by renaming would turn the link into a regular file, and revert could
not bring the link back), a folder where a file should be, or a journal naming a path it must
not."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..core.paths import UnsafePath, relative
from ..errors import EnvironmentProblem

__all__ = ["inside"]


def inside(root: Path, rel: str, *, folder: bool = False) -> Path:
    """``root / rel``, once it is known to stay inside ``root``; it need not exist.

    ``folder``: the end must be a folder (else a regular file) when it exists; never a symlink."""
    try:
        relative(rel)
    except UnsafePath as exc:
        raise EnvironmentProblem(f"refusing {exc}: fixpack only writes inside {root}", path=rel) from None
    path = root / rel
    if _symlinked_folder(str(root), rel):  # rel has no "..": only a symlinked folder can lead out
        fence = os.path.realpath(root)
        real_parent = os.path.realpath(path.parent)
        if real_parent != fence and not real_parent.startswith(fence.rstrip(os.sep) + os.sep):
            raise EnvironmentProblem(
                f"refusing {path}: a symlinked folder on the way leads out of {root} (to {real_parent}); "
                "fixpack writes only inside the installation it patches",
                path=str(path),
            )
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    except NotADirectoryError:
        raise EnvironmentProblem(f"refusing {path}: a folder on the way is a file", path=str(path)) from None
    if stat.S_ISLNK(mode):
        raise EnvironmentProblem(
            f"refusing {path}: it is a symlink, and fixpack does not write through symlinks "
            "(replace the link by a copy of the file it points to, or patch the file where it lives)",
            path=str(path),
        )
    if folder and not stat.S_ISDIR(mode):
        raise EnvironmentProblem(f"refusing {path}: a folder was expected, it is a file", path=str(path))
    if not folder and not stat.S_ISREG(mode):
        what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise EnvironmentProblem(f"refusing {path}: it is {what}, where a source file was expected", path=str(path))
    return path


def _symlinked_folder(root: str, rel: str) -> bool:
    """Whether a folder on the way from ``root`` to ``rel``'s file is a symlink (the root's own
    path may have links: they are the same for everything inside it). The walk stops where the
    folders do not exist yet, as fixpack makes them: real folders."""
    here = root
    for part in rel.split("/")[:-1]:
        here = f"{here}{os.sep}{part}"
        try:
            mode = os.lstat(here).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return False
        if stat.S_ISLNK(mode):
            return True
    return False
