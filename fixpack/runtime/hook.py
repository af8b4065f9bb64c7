"""fixpack overlay: the start-up import hook (this file is the overlay's ``sitecustomize.py``).

A Python process with the overlay folder on ``PYTHONPATH`` imports ``sitecustomize`` at start-up
(the ``site`` module does), which puts one finder at the front of ``sys.meta_path``. For exactly
the modules fixpack patched (``fixpack_runtime_check/index.json`` beside this file) the finder
returns a spec whose loader reads the overlay's patched file: its origin, ``__file__`` and the
file names in tracebacks are the overlay file, whose lines are the ones that run. Every other name
goes to the normal finders: ``vllm_gaudi`` stays the installed package, only its patched
sub-modules come from the overlay. Fork children inherit the finder; spawned interpreters run this
file again (they inherit ``PYTHONPATH``).

Nothing here is run or believed that another user could write: the overlay folder, the runtime
check's package, the index and each copy and ``.pyc`` must be writable only by root, this process's
uid or group 0 (the rule is ``index.py``'s ``writer``; this file applies it to the few files it
must check before it can load ``index.py``). The index must have its shape (``index.py``); a
module it lists is loaded only from the overlay's own place for it, and only inside the pinned
packages. Otherwise the overlay stays inactive, saying why in one line (and the runtime check
stops vLLM's processes).

Before a patched module is loaded the installed file it shadows is hashed: if the image changed
under the overlay (another build of vLLM or vllm-gaudi), the import stops with an error rather
than run a patched copy of old code (``FIXPACK_RUNTIME_CHECK=warn``: say so and load the installed
file instead; ``off``: no checks). The patched file is checked against its recorded hash as it is
read.

Then the next ``sitecustomize`` on ``sys.path`` (an image may have its own) is run, as if this
file were not there.

Not covered: ``python -S`` (no ``site``), ``python -I`` or ``-E`` (``PYTHONPATH`` ignored), and
processes started without ``PYTHONPATH`` (e.g. Ray workers whose runtime env does not carry it).

Standard library only; copied out of fixpack (fixpack/runtime/hook.py) by ``fixpack apply --overlay``.
"""

import importlib.machinery
import importlib.util
import os
import stat
import sys

# Every Python start-up runs this file, before anything else has loaded ``__future__`` (which
# ``from __future__ import annotations`` imports): annotations that Python 3.9 cannot evaluate are
# strings instead, and the names below are for mypy only, never imported here.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType
    from typing import Any

    from _typeshed.importlib import MetaPathFinderProtocol

ROOT = os.path.dirname(os.path.realpath(__file__))
PACKAGE = os.path.join(ROOT, "fixpack_runtime_check")
MODE_VARIABLE = "FIXPACK_RUNTIME_CHECK"  # stop (default) | warn | off


def _warn(message: str) -> None:
    # logging and hashlib are imported when first needed: most processes that run this file (the
    # resource tracker, torch's short probes) never import a patched module
    import logging

    logging.getLogger("vllm.fixpack").warning("%s", message)


def _sha256_of(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


class OverlayDrift(RuntimeError):
    """The installed file a patched module shadows is not the one the overlay was built from."""


def _mode() -> str:
    mode = os.environ.get(MODE_VARIABLE, "stop").strip().lower()
    return mode if mode in ("warn", "off") else "stop"


SOURCE_LIMIT = 64 << 20  # a patched module is a few MB at most


def _writer(st: "os.stat_result") -> "str | None":
    """index.py's ``writer``, for the files checked before index.py may be loaded."""
    if st.st_uid not in (0, os.geteuid()):
        return f"uid {st.st_uid}, its owner"
    if st.st_mode & stat.S_IWOTH:
        return "every user"
    if st.st_mode & stat.S_IWGRP and st.st_gid != 0:
        return f"the members of group {st.st_gid}"
    return None


def _bootstrap() -> None:
    """Refuse (OSError) an overlay folder, runtime package or index reader another user could write."""
    for path in (ROOT, __file__, PACKAGE, os.path.join(PACKAGE, "index.py")):
        who = _writer(os.stat(path))
        if who is not None:
            raise OSError(f"{path} can be written by {who}, which fixpack does not trust")


def _short(digest: "str | None") -> str:
    return digest[:12] if digest else "absent"


class _Loader(importlib.machinery.SourceFileLoader):
    """Reads the overlay's file (and its hash-based .pyc in the overlay's own __pycache__),
    checking the source against the hash recorded when the overlay was built, and each file
    read, as its folders, against who could write it."""

    def __init__(self, fullname: str, path: str, expected: str, finder: "OverlayFinder") -> None:
        super().__init__(fullname, path)
        self._expected = expected
        self._finder = finder

    def get_data(self, path: str) -> bytes:
        try:
            data = self._finder.reader.read_regular(
                path, SOURCE_LIMIT, self._finder.fixpack_overlay, self._finder.checked
            )
        except ValueError as exc:
            if path == self.path or _mode() == "stop":
                raise OverlayDrift(
                    f"fixpack overlay: {exc}; build the overlay again (fixpack apply --overlay)"
                ) from None
            _warn(f"fixpack overlay: {exc}; compiling {self.path} instead")
            raise OSError(str(exc)) from None  # the import system then compiles the checked source
        if path == self.path and _mode() != "off" and (found := _sha256_of(data)) != self._expected:
            message = (
                f"fixpack overlay: {path} changed after the overlay was built "
                f"(sha256 {_short(found)}, recorded {_short(self._expected)}); "
                "build the overlay again (fixpack apply --overlay)"
            )
            if _mode() == "stop":
                raise OverlayDrift(message)
            _warn(message)
        return data


class OverlayFinder:
    """The overlay's meta path finder: the patched modules from the overlay, nothing else."""

    def __init__(self, root: str, entries: "dict[str, dict[str, Any]]", reader: "ModuleType") -> None:
        self.fixpack_overlay = root  # what the runtime check looks for
        self.entries = entries  # module name -> index entry
        self.reader = reader  # index.py: the index's reader and the rule on who may write
        self.checked: set[str] = set()  # folders found writable by nobody else

    def _sha256(self, path: str) -> "str | None":
        """An installed file's hash; None when absent or not a regular file (never blocking on a FIFO)."""
        try:
            return _sha256_of(self.reader.read_regular(path, SOURCE_LIMIT))
        except (OSError, ValueError):
            return None

    def find_spec(
        self, fullname: str, path: "Sequence[str] | None" = None, target: "ModuleType | None" = None
    ) -> "importlib.machinery.ModuleSpec | None":
        entry = self.entries.get(fullname)
        if entry is None:
            return None
        mode = _mode()
        original = entry.get("original")
        now = self._sha256(original) if mode != "off" and original else None
        if mode != "off" and original and now != entry.get("pristine"):
            message = (
                f"fixpack overlay: {original} is not the file the overlay {self.fixpack_overlay} was built from "
                f"(sha256 {_short(now)}, built from {_short(entry.get('pristine'))}): the image "
                f"changed under the overlay, and its patched {fullname} would be a copy of old code; build the "
                f"overlay again (fixpack apply --overlay), or set {MODE_VARIABLE}=warn to run the installed file"
            )
            if mode == "stop":
                raise OverlayDrift(message)
            _warn(f"{message}; running the installed file")
            return None  # the normal finders: the installed file, unpatched
        if entry.get("file") is None:  # a fix removed the module
            raise ModuleNotFoundError(f"No module named {fullname!r} (removed by fixpack)", name=fullname)
        file = os.path.join(self.fixpack_overlay, entry["file"])
        package = os.path.basename(entry["path"]) == "__init__.py"
        where = None
        if package:  # the package's other modules stay the installed ones
            where = [os.path.dirname(original or file)]
        return importlib.util.spec_from_file_location(
            fullname, file, loader=_Loader(fullname, file, entry["sha256"], self), submodule_search_locations=where
        )


def active() -> "MetaPathFinderProtocol | None":
    """The overlay finder of this folder, if installed in this process."""
    for finder in sys.meta_path:
        if getattr(finder, "fixpack_overlay", None) == ROOT:
            return finder
    return None


def _index_reader() -> "ModuleType":
    """The index's one reader (the plugin package's ``index.py``), loaded by its path: importing it
    as ``fixpack_runtime_check.index`` would run the package's ``__init__``, the whole runtime check,
    at every start-up. OSError when it cannot be loaded."""
    path = os.path.join(PACKAGE, "index.py")
    spec = importlib.util.spec_from_file_location("fixpack_runtime_check_index", path)
    if spec is None or spec.loader is None:
        raise OSError(f"{path} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (SyntaxError, ImportError) as exc:
        raise OSError(f"{path} cannot be loaded ({exc})") from None
    return module


def install() -> None:
    """Put the finder first on sys.meta_path (once: a fork child already has it)."""
    if active() is not None:
        return
    try:
        _bootstrap()
        reader = _index_reader()
        index = reader.read(os.path.join(PACKAGE, reader.NAME), ROOT)
        if index["mode"] != "overlay":
            raise ValueError(f"an index of mode {index['mode']!r}, not an overlay's")
        entries = {e["module"]: e for e in index["files"] if e.get("module")}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        sys.stderr.write(f"fixpack overlay: the index in {PACKAGE} cannot be read ({exc}); the overlay is not active\n")
        return
    sys.meta_path.insert(0, OverlayFinder(ROOT, entries, reader))


def chain() -> "ModuleType | None":
    """Run the next ``sitecustomize`` on sys.path after this folder, as ``site`` would have."""
    entries, seen = [], False
    for entry in sys.path:
        if seen:
            entries.append(entry)
        elif os.path.realpath(entry or os.curdir) == ROOT:
            seen = True
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", entries if seen else [])
    if spec is None or spec.loader is None or os.path.realpath(spec.origin or "") == os.path.realpath(__file__):
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # as site.py treats an error in sitecustomize: said, and start-up goes on
        sys.stderr.write(f"Error in sitecustomize {spec.origin} (run after fixpack's overlay): {exc!r}\n")
    return module


install()
chained = chain()
