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
from . import finder
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
    cookbook: str | os.PathLike[str],
    profile: str,
    asked: list[str],
    site: object,
    allow_unpinned: bool,
    overlay: object = None,
) -> str:
    """The key of one request against this engine and one cookbook (``overlay``: its folder)."""
    site_s = os.path.abspath(site) if site is not None else None  # type: ignore[arg-type]
    request: list = [FORMAT, profile, sorted(set(asked)), site_s, allow_unpinned]
    if overlay is not None:
        request.append(os.path.abspath(overlay))  # type: ignore[arg-type]
    h = hashlib.sha256(json.dumps(request).encode())
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


class Request:
    """What ``apply_all.py ARGS`` asks, when the warm path can answer it."""

    def __init__(self, profile: str, asked: list[str], site: str | None, overlay: str | None, command: list[str]):
        self.profile, self.asked, self.site, self.overlay, self.command = profile, asked, site, overlay, command


def _parse(argv: list[str]) -> Request | None:
    values: dict[str, str | None] = {"--profile": None, "--site": os.environ.get("FIXPACK_SITE") or None}
    values["--overlay"] = None
    asked: list[str] = []
    args, command = list(argv), []
    if "--exec" in args:
        at = args.index("--exec")
        args, command = args[:at], args[at + 1 :]
        if not command:
            return None
    while args:
        arg = args.pop(0)
        key, eq, value = arg.partition("=")
        if key in values and not eq:
            if not args:
                return None
            values[key] = args.pop(0)
        elif key in values:
            values[key] = value
        elif arg.startswith("-") or not arg:
            return None  # --json, --dry-run, --allow-unpinned, --help, ...: the full path
        else:
            asked.append(arg)
    profile, site, overlay = values["--profile"], values["--site"], values["--overlay"]
    if not profile:
        return None
    site = os.path.abspath(site) if site else None
    return Request(profile, asked, site, os.path.abspath(overlay) if overlay else None, command)


def pythonpath(overlay: str, current: str | None) -> str:
    """PYTHONPATH with the overlay folder first (once)."""
    rest = [p for p in (current or "").split(os.pathsep) if p and os.path.abspath(p) != overlay]
    return os.pathsep.join([overlay, *rest])


def exec_command(command: list[str], overlay: str | None) -> None:
    """Replace this process with ``command`` (OSError when it cannot run), the overlay on PYTHONPATH."""
    env = dict(os.environ)
    if overlay is not None:
        env["PYTHONPATH"] = pythonpath(os.path.abspath(overlay), env.get("PYTHONPATH"))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(command[0], command, env)


def _state_dirs(site: str | None) -> list[str]:
    if site is not None:
        return [os.path.join(site, STATE_DIR_NAME)]
    return [os.path.join(entry or ".", STATE_DIR_NAME) for entry in sys.path]


def _dists_hold(stamp: dict, site: str | None) -> bool:
    """The distributions the stamp was made for are still the ones apply would find, unchanged."""
    entries = [site] if site is not None else list(sys.path)
    for dist in stamp["dists"]:
        want = finder.normalize(dist["name"])
        first = None
        for entry in entries:
            found = finder.dist_dirs(entry).get(want)
            if found:
                first = found
                break
        if first is None or len(first) != 1 or os.path.abspath(first[0]) != dist["dist_info"]:
            return False
        if any(sha256(_read(path)) != digest for path, digest in dist["files"].items()):
            return False
    return True


def try_warm(argv: list[str], engine: str) -> int | None:
    """Exit code 0 if this request is already applied (output printed; ``--exec CMD``: CMD run in
    this process's place); None: run the full apply."""
    if os.environ.get("FIXPACK_NO_FAST_PATH") or sys.stdout.isatty():
        return None
    request = _parse(argv)
    if request is None:
        return None
    overlay, site = request.overlay, request.site
    if overlay is not None:
        candidates = [os.path.join(overlay, STATE_DIR_NAME)]
        lock_dir = os.path.dirname(overlay)
        try:
            if any(n.startswith(f".{os.path.basename(overlay)}.fixpack-") for n in os.listdir(lock_dir)):
                return None  # an interrupted overlay build: the full path recovers it
        except OSError:
            return None
    else:
        candidates, lock_dir = _state_dirs(site), ""
    for state_dir in candidates:
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
        fd = os.open(lock_dir or os.path.dirname(os.path.abspath(state_dir)), os.O_RDONLY)
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
        key = request_key(cookbook, request.profile, request.asked, site, False, overlay)
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
    if request.command:
        try:
            exec_command(request.command, overlay)
        except OSError as exc:
            sys.stderr.write(f"fixpack: error: --exec {request.command[0]}: {exc.strerror}\n")
            return 3
    return 0
