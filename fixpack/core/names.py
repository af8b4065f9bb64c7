"""Names: distribution-name normalisation and did-you-mean suggestions. Standard library only,
since the warm path uses it too."""

from __future__ import annotations

import re

__all__ = ["canonical", "suggest"]


def canonical(name: str) -> str:
    """PEP 503 normalisation: ``vllm_gaudi``, ``vLLM.Gaudi`` and ``vllm-gaudi`` are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def suggest(name: str, known: list[str] | tuple[str, ...]) -> str:
    """`` (did you mean 'x'?)`` for the closest known name, or ''."""
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""
