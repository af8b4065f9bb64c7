"""fixpack's runtime check: a vLLM general plugin, run in every process vLLM starts.

vLLM loads the entry points of group ``vllm.general_plugins`` in each of its processes and calls
them (``vllm.plugins.load_general_plugins``); an exception stops that process. This one checks,
from ``index.json`` beside it (written by ``fixpack apply``), that the code this process will
import is the code fixpack patched:

- in place: every patched file is there with the hash recorded when it was patched (a file
  created by a fix is there, one a fix removed is absent);
- overlay: the overlay's import hook is active in this process, each patched file in the overlay
  has its recorded hash, and each installed file it shadows still has the hash the overlay was
  built from (an image changed under an old overlay must not run patched copies of old code);
- a patched module this process imported already came from the expected file.

Then it logs one INFO line on vLLM's logger, e.g.
``fixpack: profile v0.26.0, fix set e47f637ad4b30c9e, 29 fixes (a, b, ...), mode overlay
/opt/fixpack-overlay, pid 4242, 29 files checked in 1.8 ms``: the fix set is the digest of the
release, the fixes in order and each patched file's hash (``fixpack.core.identity``), recomputed
from what the index lists (a digest recorded there that differs is refused: the index is not
trusted, see ``index.py``), and logged only while every patched file holds its hash as read now
(``fixset.py``): otherwise the line says ``fix set none (drifted)``. Two processes that log the
same digest run the same fixes.

On a site applied with ``--recipe SLUG``, the index also holds that recipe's rules on the
environment alone (its rules on the serve arguments are checked at the entry point only: a worker
process does not see the command line); they are evaluated on this process's environment by
``rules.py``, copied beside this file: a refusing rule stops the process with the line the entry
point gives (``recipe SLUG, rule ID: "message"``), a warning is logged.

A failed check raises RuntimeError (the process stops, saying why); ``FIXPACK_RUNTIME_CHECK=warn``
logs a warning instead, ``off`` skips the check. Standard library only, no vLLM import: it hashes
the few patched files and nothing else. Copied out of fixpack (fixpack/runtime/check.py) as the
``fixpack_runtime_check`` package by ``fixpack apply``.
"""

from __future__ import annotations

import logging
import os
import sys
import time

from . import fixset
from . import index as index_file

# Every vLLM process runs this plugin, after torch loaded ``__future__``: the names
# below are for mypy only, never imported there.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

HERE = os.path.dirname(os.path.realpath(__file__))
PACKAGE = "fixpack_runtime_check"  # this package's name where apply copies it
MODE_VARIABLE = "FIXPACK_RUNTIME_CHECK"  # stop (default) | warn | off

log = logging.getLogger("vllm.fixpack")
_done: list[bool] = []


def _short(digest: str | None) -> str:
    return digest[:12] if digest else "absent"


def read_index(root: str) -> dict[str, Any]:
    """The runtime index under ``root`` (the site, or the overlay folder), checked as every process
    reads it (``index.py``): OSError when it cannot be opened, ValueError when it is refused."""
    return index_file.read(os.path.join(root, PACKAGE, index_file.NAME), root)


def static_problems(index: dict[str, Any], root: str, listed: str | None = None) -> list[str]:
    """What is wrong with the index and the overlay's copies whatever the process: a copy another
    user could write, a recorded fix set that is not the one the index lists (``listed``, when
    computed already)."""
    out = []
    if index["mode"] == "overlay":
        checked: set[str] = set()  # the copies share their folders: each is looked at once
        for entry in index["files"]:
            found = entry.get("file") and index_file.untrusted(os.path.join(root, entry["file"]), root, checked)
            if found:
                out.append(f"{found}, which fixpack does not trust")
    recorded = (index.get("fix_set") or {}).get("digest")
    listed = listed or fixset.digest_of(index)
    if recorded is not None and recorded != listed:
        out.append(f"the index records fix set {recorded}, but the files it lists make fix set {listed}")
    return out


def refusal(root: str) -> str | None:
    """Why every process would refuse the runtime index under ``root`` before looking at a file's
    hash (``fixpack status`` reports it); None when it would not, or there is none."""
    try:
        index = read_index(root)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return f"the runtime index cannot be read ({exc})"
    return "; ".join(static_problems(index, root)) or None


def problems(index: dict[str, Any], root: str, hashes: dict[str, str | None]) -> list[str]:
    """What is wrong in this process, as sentences; ``root``: the overlay folder (overlay mode);
    ``hashes``: absolute path -> sha256 as read now (``fixset.index_rows`` filled it)."""

    def now(path: str) -> str | None:
        return hashes[path] if path in hashes else fixset.sha256_of(path)

    out = []
    overlay = index.get("mode") == "overlay"
    if overlay and not any(getattr(f, "fixpack_overlay", None) == root for f in sys.meta_path):
        out.append(
            f"the overlay {root} is not active in this process: its import hook (sitecustomize.py) did not run "
            "(python -S, -I or -E? another sitecustomize earlier on sys.path?), so the installed, unpatched "
            "code would run"
        )
    for entry in index.get("files", []):
        file = entry.get("file")
        path = os.path.join(root, file) if overlay and file else file
        if path is not None and now(path) != entry.get("sha256"):
            out.append(
                f"{path} is not the file fixpack patched (sha256 {_short(now(path))}, "
                f"recorded {_short(entry.get('sha256'))})"
            )
        elif path is None and not overlay and entry.get("original") and os.path.exists(entry["original"]):
            out.append(f"{entry['original']} is back, though a fix removed it")
        original = entry.get("original")
        if overlay and original and now(original) != entry.get("pristine"):
            out.append(
                f"{original} is not the file the overlay was built from (sha256 {_short(now(original))}, "
                f"built from {_short(entry.get('pristine'))}): the image changed under the overlay"
            )
        module = sys.modules.get(entry.get("module") or "")
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        if module is not None and path is not None and origin and os.path.realpath(origin) != os.path.realpath(path):
            out.append(f"{entry['module']} was imported from {origin}, not from the patched {path}")
    return out


def recipe_findings(index: dict[str, Any], environ: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """(refusals, warnings) of the recipe's rules recorded in the index, each as its one line."""
    rules = index.get("rules")
    if not rules:
        return [], []
    from . import rules as rulebook  # only on a site applied with a recipe

    findings = rulebook.evaluate(rules, environ, None, index.get("fixes", []))
    lines = [(f.verdict, rulebook.refusal(index.get("recipe"), f)) for f in findings]
    return [line for v, line in lines if v == "refuse"], [line for v, line in lines if v != "refuse"]


def check() -> None:
    """The entry point vLLM calls in each process."""
    mode = os.environ.get(MODE_VARIABLE, "stop").strip().lower()
    if mode == "off" or _done:
        return
    try:
        _check(mode)
    except Exception as exc:  # never a traceback, and under warn never the end of the process
        if mode == "warn":
            log.warning("fixpack: the runtime check failed (%r); %s=warn: going on", exc, MODE_VARIABLE)
        elif isinstance(exc, RuntimeError) and str(exc).startswith("fixpack: "):
            raise  # the check's own refusal, already one line
        else:
            raise RuntimeError(
                f"fixpack: the runtime check failed ({exc!r}); {MODE_VARIABLE}=warn only warns"
            ) from None


def _check(mode: str) -> None:
    start = time.perf_counter()
    root = os.path.dirname(HERE)
    try:
        index = read_index(root)
        hashes: dict[str, str | None] = {}
        drifted = fixset.drifted(fixset.index_rows(index, root, hashes))
        listed = fixset.digest_of(index)
        found = static_problems(index, root, listed) + problems(index, root, hashes)
        refused, warned = recipe_findings(index, os.environ)
        digest = None if found else fixset.vouched(listed, drifted)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ImportError, RecursionError) as exc:
        where = os.path.join(HERE, index_file.NAME)
        index, found, refused, warned, drifted, digest = {}, [f"{where} cannot be read ({exc})"], [], [], [], None
    fixset.remember(digest, drifted)
    if found:
        message = (
            "fixpack: this process would not run the code fixpack applied: "
            + "; ".join(found)
            + f". Run fixpack apply again (or fixpack status); {MODE_VARIABLE}=warn only warns"
        )
        if mode != "warn":
            raise RuntimeError(message)
        log.warning("%s", message)
    for line in refused:
        if mode != "warn":
            raise RuntimeError(f"fixpack: {line}; {MODE_VARIABLE}=warn only warns")
        log.warning("fixpack: %s (a refusal; %s=warn: going on)", line, MODE_VARIABLE)
    for line in warned:
        log.warning("fixpack: warning: %s", line)
    _done.append(True)
    fixes = index.get("fixes", [])
    where = f" {root}" if index.get("mode") == "overlay" else ""
    log.info(
        "fixpack: profile %s, fix set %s, %d fixes (%s), mode %s%s, pid %d, %d files checked in %.1f ms%s",
        index.get("profile"),
        digest or ("none (drifted)" if drifted else "none"),
        len(fixes),
        ", ".join(fixes),
        index.get("mode"),
        where,
        os.getpid(),
        len(index.get("files", [])),
        (time.perf_counter() - start) * 1000,
        " (FAILED, warn only)" if found else "",
    )
