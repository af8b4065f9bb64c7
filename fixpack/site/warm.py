"""The already-applied path of ``fixes/apply_all.py``, for every container start after the first.

When ``apply`` writes a plan that leaves everything applied, it also records in the manifest a
*warm stamp*: a key over everything the decision "all applied, nothing to do" depends on (the
request, the cookbook's and the engine's files, the distributions' metadata and ``_version.py``),
the absolute paths and after-hashes of the target files, and the exact output of an already-applied
run. A later ``apply_all.py`` with the same request reads that stamp, recomputes the key, hashes the
targets, and, if all holds, prints the recorded output and exits 0: no click, no catalog, no
importlib.metadata, nothing written. Anything else (another request, a changed file, a journal, a
busy lock, a terminal, flags other than --profile/--site) falls back to the full ``apply``.

Standard library only, imported before anything else: this module is the start-up cost.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any

from ..core.fingerprint import sha256
from .layout import JOURNAL, MANIFEST, STATE_DIR_NAME

FORMAT = 1


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _tree(h: Any, root: str) -> None:
    """Every file under ``root`` (no bytecode, no dot files), by relative path and content."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or name.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(folder, name)
            h.update(os.path.relpath(path, root).encode() + b"\0")
            h.update(_read(path) or b"")
            h.update(b"\0")


PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # fixpack/, whose code decides


def request_key(
    cookbook: str | os.PathLike[str], profile: str, asked: list[str], site: object, allow_unpinned: bool
) -> str:
    """The key of one request against this engine and one cookbook."""
    site_s = os.path.abspath(site) if site is not None else None  # type: ignore[arg-type]
    h = hashlib.sha256(json.dumps([FORMAT, profile, sorted(set(asked)), site_s, allow_unpinned]).encode())
    cookbook = os.path.abspath(cookbook)
    for root in (PACKAGE, os.path.join(cookbook, "fixes"), os.path.join(cookbook, "profiles")):
        h.update(root.encode() + b"\0")
        _tree(h, root)
    return h.hexdigest()


def make_stamp(
    key: str, dists: list[Any], state_dir: object, targets: dict[str, str | None], printed: tuple[str, str]
) -> dict:
    """The stamp ``apply`` records in the manifest for the all-applied state it leaves: ``dists``
    (site Distributions) and ``targets`` (file -> hash) must hold for ``printed`` (stdout, stderr)
    to be the answer again."""
    dist_files = []
    for d in dists:
        files = [d.dist_info / "METADATA", d.dist_info / "direct_url.json", d.files_root / d.package / "_version.py"]
        dist_files.append(
            {
                "name": d.name,
                "dist_info": os.path.abspath(d.dist_info),
                "files": {os.path.abspath(f): sha256(_read(str(f))) for f in files},
            }
        )
    return {
        "format": FORMAT,
        "key": key,
        "state_dir": os.path.abspath(state_dir),  # type: ignore[arg-type]
        "dists": dist_files,
        "targets": {os.path.abspath(t): h for t, h in targets.items()},
        "stdout": printed[0],
        "stderr": printed[1],
    }


def _normalize(name: str) -> str:
    return "_".join(p for p in name.lower().replace("-", "_").replace(".", "_").split("_") if p)


def _dist_dirs(entry: str) -> dict[str, list[str]]:
    """Normalized name -> the dist-info/egg-info folders in one path entry, as importlib.metadata sees them."""
    out: dict[str, list[str]] = {}
    try:
        names = os.listdir(entry or ".")
    except OSError:
        return out
    for child in names:
        low = child.lower()
        if low.endswith((".dist-info", ".egg-info")):
            out.setdefault(_normalize(low.rpartition(".")[0].partition("-")[0]), []).append(os.path.join(entry, child))
    return out


def _parse(argv: list[str]) -> tuple[str, list[str], str | None] | None:
    profile, site, asked = None, os.environ.get("FIXPACK_SITE") or None, []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("--profile", "--site"):
            if not args:
                return None
            value = args.pop(0)
            if arg == "--profile":
                profile = value
            else:
                site = value
        elif arg.startswith(("--profile=", "--site=")):
            key, _, value = arg.partition("=")
            if key == "--profile":
                profile = value
            else:
                site = value
        elif arg.startswith("-") or not arg:
            return None  # --json, --dry-run, --allow-unpinned, --help, ...: the full path
        else:
            asked.append(arg)
    if not profile:
        return None
    return profile, asked, (os.path.abspath(site) if site else None)


def _state_dirs(site: str | None) -> list[str]:
    if site is not None:
        return [os.path.join(site, STATE_DIR_NAME)]
    return [os.path.join(entry or ".", STATE_DIR_NAME) for entry in sys.path]


def _dists_hold(stamp: dict, site: str | None) -> bool:
    """The distributions the stamp was made for are still the ones apply would find, unchanged."""
    entries = [site] if site is not None else list(sys.path)
    for dist in stamp["dists"]:
        want = _normalize(dist["name"])
        first = None
        for entry in entries:
            found = _dist_dirs(entry).get(want)
            if found:
                first = found
                break
        if first is None or len(first) != 1 or os.path.abspath(first[0]) != dist["dist_info"]:
            return False
        if any(sha256(_read(path)) != digest for path, digest in dist["files"].items()):
            return False
    return True


def try_warm(argv: list[str], engine: str) -> int | None:
    """Exit code 0 if this request is already applied (output printed); None: run the full apply."""
    if os.environ.get("FIXPACK_NO_FAST_PATH") or sys.stdout.isatty():
        return None
    request = _parse(argv)
    if request is None:
        return None
    profile, asked, site = request
    for state_dir in _state_dirs(site):
        raw = _read(os.path.join(state_dir, MANIFEST))
        if raw is not None:
            break
    else:
        return None
    try:
        stamp = json.loads(raw).get("warm")
    except ValueError:
        return None
    if not stamp or stamp.get("format") != FORMAT or stamp.get("state_dir") != os.path.abspath(state_dir):
        return None
    if os.path.exists(os.path.join(state_dir, JOURNAL)):
        return None  # an interrupted transaction: the full path recovers it
    import fcntl

    try:
        fd = os.open(os.path.dirname(os.path.abspath(state_dir)), os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # another fixpack is at work: the full path waits for it
        if os.path.exists(os.path.join(state_dir, JOURNAL)):
            return None
        cookbook = os.environ.get("FIXPACK_COOKBOOK") or engine
        key = request_key(cookbook, profile, asked, site, False)
        if key != stamp.get("key") or not _dists_hold(stamp, site):
            return None
        for path, digest in stamp["targets"].items():
            if sha256(_read(path)) != digest:
                return None
    finally:
        os.close(fd)
    sys.stderr.write(stamp["stderr"])
    sys.stdout.write(stamp["stdout"])
    sys.stdout.flush()
    return 0
