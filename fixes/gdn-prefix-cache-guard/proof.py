"""Proof for gdn-prefix-cache-guard.

Runs the GDN set-up of the tree's real ``HPUModelRunner.__init__`` (the statement that defaults
``VLLM_COMPACT_GDN`` and checks prefix caching, and the ``_compact_gdn_enabled`` assignment that
then picks the compact slots; see ``fixes/_support/gdn_init.py``) for a Qwen3.5-like model, 36 GDN
layers, under each environment and prefix-caching setting below.

The bug: with compact GDN (the default) and prefix caching on, the worker only logs "Compact GDN
mode does not support prefix caching." and starts; every GDN prefix-cache hit then resumes from a
stale compact slot (gdn-prefix-cache's proof shows the wrong states and outputs). With
VLLM_COMPACT_GDN=True (any case but "true") it does not even log that: the check compares the raw
string, while ``_compact_gdn_enabled`` lower-cases it and turns compact mode on.

Fixed: every setting that ends with compact slots and prefix caching raises at start-up, with a
message naming prefix caching; compact GDN without prefix caching, VLLM_COMPACT_GDN=0 or PD
serving without it, and models without GDN layers (plain attention, Granite 4.0-H) start as before.
"""

from __future__ import annotations

from fixes._support.gdn_init import describe, gdn_start
from fixpack.proofkit import Trees

# (what, prefix caching, environment, other gdn_start arguments)
REFUSED = [
    ("compact GDN by default, --enable-prefix-caching", {}, {}),
    ("VLLM_COMPACT_GDN=1, --enable-prefix-caching", {"VLLM_COMPACT_GDN": "1"}, {}),
    ("VLLM_COMPACT_GDN=True, --enable-prefix-caching", {"VLLM_COMPACT_GDN": "True"}, {}),
]
STARTS = [
    ("compact GDN by default, no prefix caching", False, {}, {}),
    ("VLLM_COMPACT_GDN=0, no prefix caching", False, {"VLLM_COMPACT_GDN": "0"}, {}),
    ("PD serving (compact auto-disabled), no prefix caching", False, {}, {"kv_transfer": True}),
    ("a model without GDN layers, --enable-prefix-caching", True, {}, {"num_gdn_layers": 0, "num_mamba_like": 0}),
    (
        "Granite 4.0-H (mamba, not GDN), --enable-prefix-caching",
        True,
        {},
        {"model_type": "granitemoehybrid", "num_mamba_like": 40},
    ),
]


def check(trees: Trees) -> None:
    root = trees.vllm_gaudi
    assert root is not None, "needs the vllm-gaudi tree"
    for what, prefix_caching, env, kwargs in STARTS:
        start = gdn_start(root, prefix_caching=prefix_caching, env=env, **kwargs)
        if start.error is not None:
            raise RuntimeError(f"{what}: must start, but {describe(start)}")
    for what, env, kwargs in REFUSED:
        start = gdn_start(root, prefix_caching=True, env=env, **kwargs)
        if start.error is None:
            # The runner goes on with compact slots and prefix caching: the silent-wrong-output case.
            assert not start.compact, (
                f"{what}: the worker starts with compact GDN slots and prefix caching on "
                f"(logged: {start.warnings or 'nothing'}); every GDN prefix-cache hit then resumes from "
                "a stale compact slot"
            )
            raise RuntimeError(f"{what}: starts without compact slots ({describe(start)}), not the case under test")
        assert isinstance(start.error, ValueError) and "prefix caching" in str(start.error), (
            f"{what}: refused, but not with a clear error: {describe(start)}"
        )
