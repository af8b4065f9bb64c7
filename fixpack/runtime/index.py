"""The runtime index, ``fixpack_runtime_check/index.json``: its one reader and its one writer, and
the rule for which files the runtime may trust.

``fixpack apply`` writes it (through fixpack/installation/plugin.py) beside the runtime check; the check,
the rank agreement, the overlay's import hook, ``fixpack status`` and the overlay destination read
it. Copied out of fixpack as the plugin package's ``index`` module, so standard library only; the
hook, which runs at every Python start-up, loads this file by its path rather than the package
(whose ``__init__`` is the whole check), and nothing here imports ``__future__``.

    {"format": 2, "mode": "in-place" | "overlay", "profile": str, "release": str, "fixes": [str],
     "packages": [the pinned import packages, e.g. "vllm", "vllm_gaudi"],
     "fix_set": {"digest": str, "fixes": [str], ...} or null: what the check logs and vouches for,
     "recipe": the recipe's slug, and "rules": [its rules], only when applied with --recipe,
     "files": [{"path": repository path, "dist": its distribution's canonical name,
                "module": dotted name or null (not a module),
                "file": the patched file (absolute; in an overlay, ".fixpack/modules/" + path) or
                        null (removed),
                "sha256": its hash or null, "original": the installed file an overlay shadows
                (absolute) or null, "pristine": the hash the overlay was built from or null}]}

The index is not trusted: it is read only from a regular file of at most MAX_BYTES that no user
but root and this process's own can write (:func:`untrusted`, the file and its folders up to the
overlay or site folder), and refused (ValueError, one line) unless every entry has the shape above:
a module is the one its ``path`` names, inside the pinned packages (never a module of the standard
library), an overlay's copy is at its own place, an installed file ends with its ``path``. An index
of another ``format`` is refused the same way: the check reports it as its problem line, the hook
leaves the overlay inactive saying why, the destination finds every file unaccounted for.

Who may write: root (uid 0), this process's own uid, and members of group 0 (a file that is
group-writable with gid 0, as OpenShift's images make them for their arbitrary uid in group 0).
A file another uid owns, or that is writable by every user or by another group, is refused, also
when a root process inherits the ``PYTHONPATH`` of a container that runs as another uid.
"""

import json
import os
import re
import stat
import sys

NAME = "index.json"
FORMAT = 2
MAX_BYTES = 4 << 20  # an index of the whole pack is about 20 kB
MODULES = ".fixpack/modules/"  # an overlay's copies, by repository path
_MODES = ("in-place", "overlay")
_SHA256 = re.compile("[0-9a-f]{64}")  # fullmatch: no trailing newline, unlike $
_TEXT_KEYS = ("dist", "module", "file", "sha256", "original", "pristine")


def loads(raw: bytes) -> "dict":
    """The index in ``raw``; ValueError (one line) when it is not an index of this FORMAT and shape."""
    data = format_object(raw, "index", FORMAT)
    _check_shape(data)
    return data


def format_object(raw: bytes, what: str, expected: int) -> "dict":
    """A JSON object whose ``format`` is ``expected`` (fixpack's state files: this index, the
    manifest); ValueError in one line otherwise, also for nesting too deep to parse."""
    try:
        data = json.loads(raw)
    except (RecursionError, MemoryError):
        raise ValueError("nested too deep or too large to read") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    found = data.get("format")
    if found != expected or isinstance(found, bool):  # True == 1 in Python
        raise ValueError(f"{what} format {found!r}; this fixpack reads format {expected}")
    return data


def read(path: str, up_to: str) -> "dict":
    """The index at ``path`` (inside the folder ``up_to``): OSError when it cannot be opened,
    ValueError when it is not a regular file, another user could write it, or as ``loads``."""
    return loads(read_regular(path, MAX_BYTES, up_to))


def dumps(data: "dict") -> bytes:
    """The bytes of an index holding ``data`` (every key but ``format``, which this adds)."""
    return (json.dumps({"format": FORMAT, **data}, indent=1) + "\n").encode()


def module_name(path: str) -> "str | None":
    """``vllm_gaudi/v1/worker/hpu_model_runner.py`` -> ``vllm_gaudi.v1.worker.hpu_model_runner``."""
    if not path.endswith(".py"):
        return None
    parts = path[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) if parts and all(p.isidentifier() for p in parts) else None


def writer(st: "os.stat_result") -> "str | None":
    """Who besides root and this process could write a file or folder with this status; None if nobody."""
    if st.st_uid not in (0, os.geteuid()):
        return f"uid {st.st_uid}, its owner"
    if st.st_mode & stat.S_IWOTH:
        return "every user"
    if st.st_mode & stat.S_IWGRP and st.st_gid != 0:
        return f"the members of group {st.st_gid}"
    return None


def untrusted(path: str, up_to: str, checked: "set[str] | None" = None) -> "str | None":
    """Why ``path`` must not be run or believed: it, or a folder between it and ``up_to`` (both
    included), can be written by another user; None when nothing can. ``checked``: folders found
    fine before (it grows), not looked at again."""
    current, top = os.path.abspath(path), os.path.abspath(up_to)
    while checked is None or current not in checked:
        try:
            st = os.stat(current)
        except OSError as exc:
            return f"{current} cannot be checked ({exc.strerror or exc})"
        who = writer(st)
        if who is not None:
            return f"{current} can be written by {who}"
        parent = os.path.dirname(current)
        if checked is not None and stat.S_ISDIR(st.st_mode):
            checked.add(current)
        if current == top or parent == current:
            return None
        current = parent
    return None


def read_regular(path: str, limit: int, up_to: "str | None" = None, checked: "set[str] | None" = None) -> bytes:
    """The bytes of the regular file ``path``, without blocking on a FIFO or a device: OSError when
    it cannot be opened, ValueError when it is not a regular file, holds more than ``limit``
    bytes, or (``up_to``: the folder it is inside) another user could write it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a regular file")
        if st.st_size > limit:
            raise ValueError(f"{path} holds {st.st_size} bytes, more than {limit}")
        if up_to is not None:
            who = writer(st)
            found = (
                untrusted(os.path.dirname(os.path.abspath(path)), up_to, checked)
                if who is None
                else f"{path} can be written by {who}"
            )
            if found is not None:
                raise ValueError(f"{found}, which fixpack does not trust")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise ValueError(f"{path} holds more than {limit} bytes")
        return data
    finally:
        os.close(fd)


def _check_shape(data: "dict") -> None:
    mode = data.get("mode")
    if mode not in _MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(_MODES)}")
    for key in ("profile", "release"):
        if not isinstance(data.get(key), str):
            raise ValueError(f"{key} is not a string")
    fixes, packages, files = data.get("fixes"), data.get("packages"), data.get("files")
    if not isinstance(fixes, list) or not all(isinstance(f, str) for f in fixes):
        raise ValueError("fixes is not a list of names")
    if not isinstance(packages, list) or not all(isinstance(p, str) and p.isidentifier() for p in packages):
        raise ValueError("packages is not a list of package names")
    stdlib = getattr(sys, "stdlib_module_names", frozenset(sys.builtin_module_names))
    if any(p in stdlib or p in ("sitecustomize", "usercustomize", "fixpack_runtime_check") for p in packages):
        raise ValueError(f"packages {packages!r} name a module that is not a pinned distribution's")
    fix_set = data.get("fix_set")
    if fix_set is not None and not (isinstance(fix_set, dict) and isinstance(fix_set.get("digest"), str)):
        raise ValueError("fix_set is neither null nor an object with a digest")
    if not isinstance(files, list) or not all(isinstance(e, dict) for e in files):
        raise ValueError("files is not a list of objects")
    for entry in files:
        _check_entry(entry, mode, frozenset(packages))


def _check_entry(entry: "dict", mode: str, packages: "frozenset[str]") -> None:
    # Every vLLM start-up runs this for each patched file, in each process: the common case is
    # tested first, cheaply, and the message is built only for a refusal.
    path = entry.get("path")
    if not isinstance(path, str):
        raise ValueError(f"files: path {path!r} is not a file of the pinned packages")
    parts = path.split("/")
    if parts[0] not in packages or "" in parts or "." in parts or ".." in parts:
        raise ValueError(f"files: path {path!r} is not a file of the pinned packages")
    for key in _TEXT_KEYS:
        value = entry.get(key)
        if value is not None and type(value) is not str:
            raise ValueError(f"files: {path}: {key} is neither null nor a string")
    if not entry.get("dist"):
        raise ValueError(f"files: {path}: no dist")
    module = entry.get("module")
    if module is not None and module != module_name(path):
        raise ValueError(f"files: {path}: module {module!r} is not the module the path names")
    for key in ("sha256", "pristine"):
        value = entry.get(key)
        if value is not None and _SHA256.fullmatch(value) is None:
            raise ValueError(f"files: {path}: {key} is not a sha256")
    file, original = entry.get("file"), entry.get("original")
    if file is not None:
        own = file == MODULES + path if mode == "overlay" else os.path.isabs(file) and file.endswith("/" + path)
        if not own:
            raise ValueError(f"files: {path}: file {file!r} is not its own place")
        if entry.get("sha256") is None:
            raise ValueError(f"files: {path}: a file without its sha256")
    if original is not None and not (os.path.isabs(original) and original.endswith("/" + path)):
        raise ValueError(f"files: {path}: original {original!r} is not an installed file of that path")
    if mode == "overlay" and module is None:
        raise ValueError(f"files: {path}: an overlay carries modules only")
