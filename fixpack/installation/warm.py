"""The already-applied path of ``fixes/apply_all.py``, for every container start after the first.

When an apply writes a state that leaves every fix applied, it records in the manifest a *warm
stamp* (``make_stamp``) holding:

- ``key``: the sha256 of the request exactly as given: the raw arguments (``apply_all.py ARGS``
  and ``fixpack apply ARGS`` pass the same ARGS, so either one's stamp serves the other), the
  working directory (for relative paths) and the variables that change the request,
  ``FIXPACK_SITE``, ``FIXPACK_COOKBOOK`` and ``FIXPACK_EXPECT_FIX_SET`` (a stamp vouches for the
  pin it was made under only). Another order, spelling or flag is another key: the
  full apply answers it (and ``--dry-run`` never writes a stamp).
- where the state is: the state directory, the folder the apply locks, and what an interrupted
  transaction leaves there (the journal; for an overlay, the ``.NAME.fixpack-*`` folders beside it).
- what "already applied" was decided from: each file by absolute path and sha256 (None: absent):
  the targets and the runtime check's files, each distribution's ``METADATA``, ``PKG-INFO``,
  ``direct_url.json`` and ``_version.py``, every file of the cookbook's fix folders and profiles,
  ``fixes/apply_all.py`` and the engine's ``.py`` files; the listing of ``fixes/``, ``profiles/``
  and each fix folder (a new fix, profile or lock file is noticed; a new engine module is not,
  until an engine file that imports it changes); the engine folder; and the path searched for
  distributions (the site, or ``sys.path``) with the ``*.dist-info``/``*.egg-info`` names of each
  entry holding any, so that a distribution appearing earlier on the path, or any other
  distribution installed or removed there, is noticed. Path entries holding none do not count
  (the apply's own script folder differs between ``apply_all.py`` and ``fixpack``).
- the answer: the exact stdout and stderr of an already-applied run, and the ``--exec`` command
  (with the overlay to put on ``PYTHONPATH``) as the full apply parsed it.

``try_warm`` parses no argument. The stamp is looked for in the state directory of each raw
argument (and of the value of ``--opt=value``), of ``FIXPACK_SITE`` and of each ``sys.path``
entry: whichever of them is a site or an overlay holds it; a stamp whose key or state directory
is not this request's is ignored. Then, holding the lock (without waiting), every recorded file,
listing and path entry is checked; if all hold, the recorded output is printed and the recorded
command run: no click, no catalog, no importlib.metadata, nothing written. Anything else (no
stamp, any difference, a journal or an overlay build left behind, a busy lock, a terminal,
``FIXPACK_NO_FAST_PATH``) falls back to the full apply, which answers and recovers.

The stamp alone never decides: the manifest must be a regular file no other user can write
(``fixpack.runtime.index``'s rule), its content must be the one the full apply wrote (the stamp
holds its ``seal``), and the command run must be the one this command line gives after ``--exec``
(or, with ``--launch``, the recipe's); otherwise the full apply answers.

Standard library only, imported before anything else: this module is the start-up cost. So it
is the warm stamp's one reader and writer, and it reads the manifest itself (``json.loads``, the
stamp and the seal, a stamp of another ``format`` ignored) rather than through ``installation/manifest.py``,
whose imports (the models, the fix-set identity) took 12.8 ms here, twice this module's 6.4 ms.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable, Sequence

from ..core.fingerprint import sha256
from ..runtime.index import read_regular
from .layout import JOURNAL, MANIFEST, STATE_DIR_NAME, aside_prefix

__all__ = ["make_stamp", "seal", "try_warm", "exec_command", "pythonpath", "ENGINE"]

FORMAT = 2
ENGINE = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # holds fixpack/
_DISTS = (".dist-info", ".egg-info")
MANIFEST_LIMIT = 16 << 20  # a manifest of the whole pack is about 40 kB


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def request_key(argv: Sequence[str]) -> str:
    """The key of one request: its raw arguments, where they were given, and the variables it reads."""
    env = os.environ
    variables = [env.get(name) for name in ("FIXPACK_SITE", "FIXPACK_COOKBOOK", "FIXPACK_EXPECT_FIX_SET")]
    request = [FORMAT, list(argv), os.getcwd(), *variables]
    return hashlib.sha256(json.dumps(request).encode()).hexdigest()


def listing(folder: str) -> list[str] | None:
    """The sorted names in ``folder`` but bytecode caches; None when there is no such folder."""
    try:
        return sorted(n for n in os.listdir(folder) if n != "__pycache__")
    except (FileNotFoundError, NotADirectoryError):
        return None


def _dist_names(entry: str) -> list[str] | None:
    """The dist-info/egg-info names of one path entry; [] for an absent one, None for one that
    cannot be listed (a zip, which importlib.metadata searches, or a folder this user cannot read)."""
    try:
        return sorted(n for n in os.listdir(entry) if n.lower().endswith(_DISTS))
    except FileNotFoundError:
        return []
    except OSError:
        return None


def _search(site: str | None, adding: dict[str, set[str]] | None = None) -> list[list]:
    """[entry, dist-info names] for the site, or for each ``sys.path`` entry that holds
    distributions, in path order (``adding``: folder -> the names an apply is about to make)."""
    out = []
    for entry in [site] if site is not None else sys.path:
        entry = os.path.abspath(entry or ".")
        names = _dist_names(entry)
        if names is not None and adding and entry in adding:
            names = sorted(set(names) | adding[entry])
        if names != [] or site is not None:
            out.append([entry, names])
    return out


def _engine_files() -> list[str]:
    """The engine's code: every ``.py`` file of the fixpack package, and ``fixes/apply_all.py``."""
    out = [os.path.join(ENGINE, "fixes", "apply_all.py")]
    for folder, dirs, files in os.walk(os.path.join(ENGINE, "fixpack")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        out += [os.path.join(folder, n) for n in sorted(files) if n.endswith(".py")]
    return out


def make_stamp(
    argv: Sequence[str],
    state_dir: str,
    site: str | None,
    overlay: str | None,
    targets: dict[str, str | None],
    read: Iterable[str],
    folders: Iterable[str],
    printed: tuple[str, str],
    command: Sequence[str] = (),
) -> dict | None:
    """The stamp for the all-applied state an apply leaves in ``state_dir`` (of ``site``, or of the
    interpreter's path when None; ``overlay``: that overlay's): ``targets`` (file -> hash after the
    apply) and the files in ``read`` and listings of ``folders`` as they are now must hold for
    ``printed`` (stdout, stderr) to be the answer again, and ``command`` to be run. None when the
    state cannot be vouched for from files and listings (a path entry or a file that cannot be
    read, a working directory that is gone): every re-run then takes the full path."""
    files = {os.path.abspath(t): h for t, h in targets.items()}
    adding: dict[str, set[str]] = {}  # the dist-info folders the apply leaves a file in (the runtime check's)
    for path, digest in files.items():
        folder = os.path.dirname(path)
        if digest is not None and folder.lower().endswith(_DISTS):
            adding.setdefault(os.path.dirname(folder), set()).add(os.path.basename(folder))
    site = os.path.abspath(site) if site is not None else None
    try:
        key = request_key(argv)
        search = _search(site, adding)
        for path in [*read, *_engine_files()]:
            files.setdefault(os.path.abspath(path), sha256(_read(path)))
        listings = {os.path.abspath(f): listing(os.fspath(f)) for f in folders}
    except OSError:
        return None
    if any(names is None for _, names in search):
        return None
    state_dir = os.path.abspath(state_dir)
    if overlay is not None:
        overlay = os.path.abspath(overlay)
        lock, journal = os.path.dirname(overlay), None
        aside = [os.path.dirname(overlay), aside_prefix(os.path.basename(overlay))]
    else:
        lock, journal, aside = os.path.dirname(state_dir), os.path.join(state_dir, JOURNAL), None
    return {
        "format": FORMAT,
        "key": key,
        "state_dir": state_dir,
        "lock": lock,
        "journal": journal,
        "aside": aside,
        "engine": ENGINE,
        "files": files,
        "listings": listings,
        "site": site,
        "search": search,
        "stdout": printed[0],
        "stderr": printed[1],
        "exec": list(command),
        "exec_overlay": overlay,
    }


def seal(manifest: dict) -> str:
    """The sha256 of a manifest's content without its warm stamp. The manifest's writer puts it in
    the stamp, so that the warm path answers only for the manifest the full apply wrote (a manifest
    edited since, its format or files included, takes the full path, which says what is wrong)."""
    body = {k: v for k, v in manifest.items() if k != "warm"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


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


def _find(argv: list[str]) -> dict | None:
    """This request's stamp, from the state directory of whichever candidate folder holds it: a
    manifest no other user can write (``fixpack.runtime.index``'s rule, up to the site or overlay
    folder), sealed by the full apply that wrote it; None otherwise."""
    key = request_key(argv)
    values = [arg.partition("=")[2] if arg.startswith("-") else arg for arg in argv]
    seen = set()
    for folder in [*values, os.environ.get("FIXPACK_SITE") or "", *sys.path]:
        state_dir = os.path.join(os.path.abspath(folder or "."), STATE_DIR_NAME)
        if state_dir in seen:
            continue
        seen.add(state_dir)
        try:
            raw = read_regular(os.path.join(state_dir, MANIFEST), MANIFEST_LIMIT, os.path.dirname(state_dir))
        except (FileNotFoundError, NotADirectoryError):
            continue
        data = json.loads(raw)
        stamp = data.get("warm") if isinstance(data, dict) else None
        if isinstance(stamp, dict) and stamp.get("key") == key and stamp.get("state_dir") == state_dir:
            sealed = stamp.get("format") == FORMAT and stamp.get("manifest") == seal(data)
            return stamp if sealed else None
    return None


def _asked(argv: list[str], stamp: dict) -> bool:
    """The stamp's command is the one this command line asks for: what follows ``--exec``; with
    ``--launch``, the recipe's (which the stamp's files pin); none otherwise. Its overlay is the
    stamp's own."""
    command, overlay = stamp["exec"], stamp["exec_overlay"]
    if "--exec" in argv:
        asked = command == argv[argv.index("--exec") + 1 :]
    else:
        asked = bool(command) if "--launch" in argv else command == []
    return asked and (overlay is None or os.path.join(overlay, STATE_DIR_NAME) == stamp["state_dir"])


def _interrupted(stamp: dict) -> bool:
    """A transaction or an overlay build was left half done: the full apply recovers it."""
    if stamp["journal"] is not None and os.path.lexists(stamp["journal"]):
        return True
    if stamp["aside"] is not None:
        folder, prefix = stamp["aside"]
        return any(n.startswith(prefix) for n in os.listdir(folder))
    return False


def _holds(stamp: dict) -> bool:
    """Every file, listing and path entry the stamp's answer was decided from is as it was."""
    if stamp["engine"] != ENGINE:
        return False
    for path, digest in stamp["files"].items():
        if sha256(_read(path)) != digest:
            return False
    if any(listing(folder) != names for folder, names in stamp["listings"].items()):
        return False
    return _search(stamp["site"]) == stamp["search"]


def _check(argv: list[str]) -> dict | None:
    """The stamp, if this request is already applied and nothing it depends on changed."""
    stamp = _find(argv)
    if stamp is None or _interrupted(stamp):
        return None
    import fcntl

    fd = os.open(stamp["lock"], os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # another fixpack is at work: the full path waits for it
        if _interrupted(stamp) or not _holds(stamp):
            return None
    finally:
        os.close(fd)
    return stamp


def try_warm(argv: list[str]) -> int | None:
    """Exit code 0 if this request is already applied (output printed; with a recorded ``--exec``
    command, that command run in this process's place); None: run the full apply."""
    if os.environ.get("FIXPACK_NO_FAST_PATH") or sys.stdout.isatty():
        return None
    try:
        stamp = _check(argv)
        if stamp is None or not _asked(argv, stamp):
            return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, MemoryError):
        return None  # unreadable, or a stamp not of this shape: the full path says what is wrong
    sys.stderr.write(stamp["stderr"])
    sys.stdout.write(stamp["stdout"])
    sys.stdout.flush()
    command = stamp["exec"]
    if command:
        try:
            exec_command(command, stamp["exec_overlay"])
        except OSError as exc:
            sys.stderr.write(f"fixpack: error: --exec {command[0]}: {exc.strerror}\n")
            return 3
    return 0
