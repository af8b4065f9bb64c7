"""What the real-tree tests share: where the real v0.26.0 trees are, the marks that skip a module
without them, and the pack's own profile, read and run as a container would.

FIXPACK_SRC_VLLM_GAUDI is a vllm-gaudi tree at v0.26.0 and FIXPACK_SRC_VLLM vLLM 0.26.0's .py
files, both in repository layout. Nothing upstream is stored here: the trees are read from those
folders and copied to temporary ones (``real_site`` in conftest.py).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from builders import REPO

from fixpack.cookbook.catalog import Catalog

# Read once, at import, as each module's skip condition is decided at collection.
SRC_GAUDI = os.environ.get("FIXPACK_SRC_VLLM_GAUDI")
SRC_VLLM = os.environ.get("FIXPACK_SRC_VLLM")
# A real-tree module's ``pytestmark``: skipped, saying so, without both trees.
REALTREE = [
    pytest.mark.realtree,
    pytest.mark.skipif(
        not (SRC_GAUDI and SRC_VLLM), reason="FIXPACK_SRC_VLLM_GAUDI and FIXPACK_SRC_VLLM are not set (real trees)"
    ),
]
PROFILE = "v0.26.0"


def opt_ins_of(profile: str = PROFILE) -> list[str]:
    """The opt-ins the repository's own ``profile`` lists."""
    return list(Catalog.load(REPO).profile(profile).opt_ins)


def package_files(root: Path, package: str) -> dict[str, bytes]:
    """Every file of ``package`` under the tree ``root``, by its path from ``root``; no bytecode."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted((root / package).rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def tree_hashes(site: Path) -> dict[str, str]:
    """The sha256 of every module under ``site``, to compare a site before and after."""
    return {
        str(p.relative_to(site)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(site.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def run_python(*args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` with this checkout's fixpack and the repository's own cookbook (the caller's
    FIXPACK_COOKBOOK left out), as the image runs it."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("FIXPACK_COOKBOOK", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=600)
