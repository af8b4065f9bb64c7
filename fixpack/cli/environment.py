"""The environment variables fixpack reads, written once: the commands' help renders this table
(docs/reference/environment.md is the user's documentation of the same variables)."""

from __future__ import annotations

__all__ = ["VARIABLES", "TESTS_ONLY", "help_block"]

# name -> what it does, as the help says it
VARIABLES = {
    "FIXPACK_SITE": "default for --site",
    "FIXPACK_COOKBOOK": "use the fixes/ and profiles/ of another checkout",
    "FIXPACK_SRC_VLLM_GAUDI": "default --source vllm-gaudi=DIR (verify, lock)",
    "FIXPACK_SRC_VLLM": "default --source vllm=DIR (verify, lock)",
    "FIXPACK_LOCK_TIMEOUT": "seconds to wait for another fixpack's lock (default 300)",
    "FIXPACK_EXPECT_FIX_SET": "default for --expect-fix-set (empty: no pin)",
    "FIXPACK_NO_FAST_PATH": "1: apply_all.py always runs the full apply",
    "FIXPACK_RUNTIME_CHECK": "in vLLM processes: stop (default), warn or off",
    "FIXPACK_AGREE_TIMEOUT": "in vLLM processes: seconds a rank waits for the others (default 120)",
    "FIXPACK_PROOF_FORK": "0: each proof in a fresh interpreter (verify, port)",
    "FIXPACK_TOOLS": "where diff --check-style keeps upstream's style tools (default ~/.cache/fixpack/tools)",
}
# read by fixpack, never set by a user: the docs' table says so, the help leaves them out
TESTS_ONLY = ("FIXPACK_CRASH_AFTER",)


def help_block(names: tuple[str, ...] | None = None) -> str:
    """The ``Environment:`` block of a command's epilog: ``names`` (every variable by default), in
    that order, kept as written by click (``\\b``)."""
    chosen = list(VARIABLES) if names is None else names
    width = max(map(len, chosen)) + 2
    return "\b\nEnvironment:\n" + "".join(f"  {n:<{width}}{VARIABLES[n]}\n" for n in chosen)
