"""Finding installed distributions as ``importlib.metadata`` finds them, without importing it (it
brings email, zipfile, csv and more: about 20 ms of a cold start, all of the warm one).

A distribution is a ``*.dist-info`` or ``*.egg-info`` folder in a path entry whose name, up to the
first ``-``, normalizes to the name asked for; the first path entry holding one wins. Unlike
importlib.metadata, zipped path entries are not searched: vLLM and vllm-gaudi are never installed
as zipped eggs. Standard library only (the warm path uses it).
"""

from __future__ import annotations

import os

__all__ = ["normalize", "dist_dirs", "find", "metadata"]


def normalize(name: str) -> str:
    """PEP 503 normalization, with underscores: "vllm-gaudi", "vllm_gaudi", "VLLM.Gaudi" -> "vllm_gaudi"."""
    return "_".join(p for p in name.lower().replace("-", "_").replace(".", "_").split("_") if p)


def dist_dirs(entry: str) -> dict[str, list[str]]:
    """Normalized name -> the dist-info/egg-info folders in one path entry."""
    out: dict[str, list[str]] = {}
    try:
        names = os.listdir(entry or ".")
    except OSError:
        return out
    for child in names:
        low = child.lower()
        if low.endswith((".dist-info", ".egg-info")):
            out.setdefault(normalize(low.rpartition(".")[0].partition("-")[0]), []).append(os.path.join(entry, child))
    return out


def find(name: str, entries: list[str]) -> list[str]:
    """Every dist-info/egg-info folder of ``name`` in ``entries``, in path order."""
    want = normalize(name)
    return [found for entry in entries for found in dist_dirs(entry).get(want, [])]


def metadata(dist_info: str) -> dict[str, str]:
    """The header fields of the core metadata (``METADATA``, or ``PKG-INFO`` for egg-info): each
    name's first value, continuation lines joined. {} when there is no such file. Raises OSError
    or UnicodeDecodeError for one that cannot be read."""
    for name in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(dist_info, name), "rb") as fh:
                raw = fh.read()
        except FileNotFoundError:
            continue
        except IsADirectoryError:
            raise OSError(f"{name} is a folder") from None
        return _headers(raw.decode("utf-8"))
    return {}


def _headers(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    current = None  # the field a continuation line belongs to, when it is that field's first value
    for line in text.splitlines():
        if not line.strip():
            break  # the description (the body) starts after the first blank line
        if line[0] in " \t":
            if current is not None:
                fields[current] += " " + line.strip()
            continue
        key, sep, value = line.partition(":")
        key = key.strip()
        current = key if sep and key not in fields else None
        if current is not None:
            fields[key] = value.strip()
    return fields
