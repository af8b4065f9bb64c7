"""The runtime index, ``fixpack_runtime_check/index.json``: its one reader and its one writer.

``fixpack apply`` writes it (through fixpack/site/plugin.py) beside the runtime check; the check,
the rank agreement, the overlay's import hook and the overlay destination read it. Copied out of
fixpack as the plugin package's ``index`` module, so standard library only; the hook, which runs
at every Python start-up, loads this file by its path rather than the package (whose
``__init__`` is the whole check), and nothing here imports ``__future__``.

    {"format": 1, "mode": "in-place" | "overlay", "profile": str, "release": str, "fixes": [str],
     "fix_set": {"digest": str, "fixes": [str], ...} or null: what the check logs and vouches for,
     "recipe": the recipe's slug, and "rules": [its rules], only when applied with --recipe,
     "files": [{"path": repository path, "module": dotted name or null (not a module),
                "file": the patched file (absolute; in an overlay, relative to it) or null (removed),
                "sha256": its hash or null, "original": the installed file an overlay shadows
                (absolute) or null, "pristine": the hash the overlay was built from or null}]}

An index of another ``format`` is refused on read (ValueError): the check reports it as its
problem line, the hook leaves the overlay inactive saying why, the destination finds every file
unaccounted for.
"""

import json

NAME = "index.json"
FORMAT = 1


def loads(raw: bytes) -> "dict":
    """The index in ``raw``; ValueError when it is not an index of this FORMAT."""
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("format") != FORMAT:
        raise ValueError(f"index format {data.get('format')!r}; this fixpack reads format {FORMAT}")
    return data


def read(path: str) -> "dict":
    """The index at ``path``: OSError when it cannot be opened, ValueError as ``loads``."""
    with open(path, "rb") as fh:
        return loads(fh.read())


def dumps(data: "dict") -> bytes:
    """The bytes of an index holding ``data`` (every key but ``format``, which this adds)."""
    return (json.dumps({"format": FORMAT, **data}, indent=1) + "\n").encode()
