"""Run the GDN set-up of the tree's real ``HPUModelRunner.__init__`` on a stand-in runner.

``HPUModelRunner.__init__`` decides the GDN cache modes in one statement, the
``if (self.num_mamba_like_layers > 0 and ... != "granitemoehybrid"):`` block that sets ``num_gdn``,
defaults ``VLLM_USE_HYBRID_CACHE`` / ``VLLM_COMPACT_GDN``, and logs (or refuses) what it cannot
serve; later, ``self._compact_gdn_enabled = ...`` reads ``VLLM_COMPACT_GDN`` once more to choose
the compact slots, and the assignments after it set up their (empty) state. :func:`gdn_start`
compiles those statements out of the tree's file, as they are, and runs them with a stand-in
``self``, a given environment and a recording logger: what a worker does at start-up for that
model and configuration, before any model is loaded.

Used by the proofs of gdn-prefix-cache-guard and gdn-prefix-cache (``fixes._support.gdn_init``).
"""

from __future__ import annotations

import ast
import itertools
import os
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from fixpack.proofkit import added_at, compile_nodes, parse_file

RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"


def _init_statements(path: Path) -> tuple[ast.If, list[ast.stmt]]:
    tree = parse_file(path)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "HPUModelRunner")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    gdn_block = [
        n
        for n in init.body
        if isinstance(n, ast.If)
        and "num_mamba_like_layers" in ast.unparse(n.test)
        and any("self.num_gdn" in ast.unparse(s) for s in n.body)
    ]
    compact = [
        i
        for i, n in enumerate(init.body)
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "self._compact_gdn_enabled"
    ]
    if len(gdn_block) != 1 or len(compact) != 1:
        raise LookupError(
            f"{path}: HPUModelRunner.__init__'s GDN set-up not found "
            f"({len(gdn_block)} GDN blocks, {len(compact)} _compact_gdn_enabled)"
        )
    # The compact slots' state follows it: the assignments to self's GDN attributes, up to the
    # first statement that sets something else.
    state = list(itertools.takewhile(_sets_gdn_state, init.body[compact[0] :]))
    return gdn_block[0], state


def _sets_gdn_state(node: ast.stmt) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return len(targets) == 1 and ast.unparse(targets[0]).startswith("self.") and "gdn" in ast.unparse(targets[0])


@dataclass
class Start:
    """What the GDN set-up did: ``error`` is the exception it raised (None: it went on)."""

    error: BaseException | None
    runner: Any
    env: dict[str, str]
    warnings: list[str] = field(default_factory=list)
    infos: list[str] = field(default_factory=list)

    @property
    def compact(self) -> bool:
        return bool(getattr(self.runner, "_compact_gdn_enabled", False))


class _Log:
    def __init__(self, start: Start) -> None:
        self.start = start

    def warning(self, msg: str, *args: Any) -> None:
        self.start.warnings.append(msg % args if args else msg)

    def info(self, msg: str, *args: Any) -> None:
        self.start.infos.append(msg % args if args else msg)

    def debug(self, msg: str, *args: Any) -> None:
        pass


def gdn_start(
    root: Path,
    *,
    prefix_caching: bool,
    env: dict[str, str] | None = None,
    num_gdn_layers: int = 36,
    num_mamba_like: int | None = None,
    model_type: str = "qwen3_5_moe",
    kv_transfer: bool = False,
) -> Start:
    """Run the tree's GDN set-up for a model with ``num_gdn_layers`` GDN layers (Qwen3.5-122B-A10B
    has 36 of 48) under ``env`` (the variables the runner reads; the others unset)."""
    gdn_block, state = _init_statements(root / RUNNER)
    body = [gdn_block, *state]
    # The statements keep their own lines; the wrapper function goes past the file's end.
    wrapper = added_at(ast.parse("def _gdn_start(self, vllm_config):\n    pass\n").body[0], root / RUNNER)
    assert isinstance(wrapper, ast.FunctionDef)
    wrapper.body = body
    start = Start(None, None, {})
    glb: dict[str, Any] = {"os": os, "logger": _Log(start), "__builtins__": __builtins__}
    exec(compile_nodes(root / RUNNER, [wrapper]), glb)

    def layers(parallel_config: Any, block_type: str) -> int:
        return num_gdn_layers if block_type == "linear_attention" else 0  # Qwen3.5 layer_types

    model_config = types.SimpleNamespace(
        hf_config=types.SimpleNamespace(model_type=model_type), get_num_layers_by_block_type=layers
    )
    vllm_config = types.SimpleNamespace(
        model_config=model_config,
        parallel_config=types.SimpleNamespace(),
        cache_config=types.SimpleNamespace(enable_prefix_caching=prefix_caching),
        kv_transfer_config=object() if kv_transfer else None,
    )
    runner = types.SimpleNamespace(
        vllm_config=vllm_config,
        model_config=model_config,
        num_mamba_like_layers=num_gdn_layers if num_mamba_like is None else num_mamba_like,
    )
    start.runner = runner
    names = ("VLLM_USE_HYBRID_CACHE", "VLLM_USE_NAIVE_MAMBA_CACHE_SHARING", "VLLM_COMPACT_GDN")
    with mock.patch.dict(os.environ, {}, clear=False):
        for name in names:
            os.environ.pop(name, None)
        os.environ.update(env or {})
        try:
            glb["_gdn_start"](runner, vllm_config)
        except Exception as exc:  # noqa: BLE001 - the refusal under test
            start.error = exc
        start.env = {name: os.environ[name] for name in names if name in os.environ}
    return start


def describe(start: Start) -> str:
    if start.error is not None:
        return f"refused: {type(start.error).__name__}: {start.error}"
    return f"starts (compact={start.compact}, warnings={start.warnings})"
