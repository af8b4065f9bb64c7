"""Sphinx configuration of fixpack's documentation: Furo and MyST Markdown, as pip's documentation.

Build it as CI does (the ``docs`` extra installs the pinned tools):

    python3 -m pip install -e '.[docs]' && sphinx-build -W --keep-going -b html docs /tmp/fixpack-docs
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "_ext"), str(HERE.parent)]  # the generator, and fixpack from this checkout

project = "fixpack"
author = "the fixpack authors"
copyright = "the fixpack authors"

extensions = ["myst_parser", "fixpack_docs"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext"]

# `page.md#a-heading` links: every heading down to ### gets GitHub's anchor (myst_parser.slugs.github_slugify),
# the rule tests/test_docs.py checks the README's links with
myst_heading_anchors = 3
myst_enable_extensions = ["deflist"]
# option names stay as typed (`--site`, not an en dash)
smartquotes = False

html_theme = "furo"
html_title = "fixpack"
html_static_path: list[str] = []
pygments_style = "sphinx"
