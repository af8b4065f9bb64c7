"""The libcst applicator: a change written as edits of named code rather than as diff hunks.

A fix's release may say ``transforms = "<release>_cst.py"`` in fix.toml instead of a patch. That
file is data: it defines ``TRANSFORMS``, a list of :class:`Transform`, one per file::

    from fixpack.transforms import (
        Transform, add_import, insert_after, replace_body, replace_expr, replace_statement,
    )

    TRANSFORMS = [
        Transform(
            path="vllm_gaudi/v1/core/sched/hpu_async_scheduler.py",
            edits=[
                replace_body("HPUAsyncScheduler._update_request_with_output", '''
                    if request.num_output_placeholders == 0 and len(new_token_ids) > 0:
                        return [], False
                    return super()._update_request_with_output(request, new_token_ids)
                '''),
                insert_after("HPUAsyncScheduler.schedule", "output = super().schedule()", "self._count(output)"),
                replace_statement("HPUAsyncScheduler.schedule", "self.paused = False", "self.paused = self.draining"),
                replace_expr("HPUAsyncScheduler.schedule", "len(self.running)", "self.num_running"),
                add_import("from vllm.logger import init_logger"),
            ],
        ),
    ]

Every edit names its place by qualified name: ``"func"``, ``"Class.method"``, ``"Class.method.inner"``
(``""`` is the whole module where an edit takes a scope). A name that is not defined, or defined
more than once (``if``/``else`` twins, overloads), fails with the name, never guessing.

An anchor statement is given by its text or, for a compound one (``if``, ``for``, ``with``), by its
first line; ``replace_statement`` replaces a compound statement with its whole block. Code given
to an edit is dedented; its indentation is the place's. ``fixpack lock`` renders the
transforms against the pristine file into ``<release>.rendered.patch`` (git-style, fingerprinted
like any diff), and ``apply`` uses that diff: libcst runs only while authoring (lock, port, record),
never on the container's start-up path. libcst is imported inside the functions that run an edit.
"""

from __future__ import annotations

import runpy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core import patch
from .edits import (
    CstFailed,
    Edit,
    EditError,
    add_entries,
    add_function,
    add_import,
    append_to,
    extend_docstring,
    insert_after,
    insert_before,
    replace_body,
    replace_expr,
    replace_statement,
)

__all__ = [
    "CstFailed",
    "Edit",
    "Transform",
    "add_entries",
    "add_function",
    "add_import",
    "append_to",
    "extend_docstring",
    "insert_after",
    "insert_before",
    "load_transforms",
    "render_transforms",
    "replace_body",
    "replace_expr",
    "replace_statement",
]


@dataclass(frozen=True, slots=True)
class Transform:
    """The edits of one file (a path as in the upstream repository), made in order."""

    path: str
    edits: Sequence[Edit]

    def apply(self, content: bytes | None) -> bytes:
        """The file's new bytes; pure. Encoding, line endings and untouched code are kept exactly."""
        import libcst as cst

        if content is None:
            raise CstFailed(self.path, "transform", "the file is absent (a transform edits an existing file)")
        try:
            module = cst.parse_module(content)
        except cst.ParserSyntaxError as exc:
            raise CstFailed(self.path, "transform", f"the file does not parse: {exc.message}") from None
        for edit in self.edits:
            try:
                module = edit.run(module)
            except EditError as exc:
                raise CstFailed(self.path, str(edit), str(exc)) from None
        return module.bytes


def load_transforms(path: Path) -> tuple[Transform, ...]:
    """Run a transforms file and return its ``TRANSFORMS``, checked to be Transforms of distinct files."""
    try:
        namespace = runpy.run_path(str(path))
    except Exception as exc:  # an author's file: any error is reported with its name
        raise ValueError(f"{path}: {exc.__class__.__name__}: {exc}") from None
    transforms = namespace.get("TRANSFORMS")
    if not isinstance(transforms, (list, tuple)) or not all(isinstance(t, Transform) for t in transforms):
        raise ValueError(f"{path}: TRANSFORMS must be a list of fixpack.transforms.Transform")
    for t in transforms:
        if not all(isinstance(e, Edit) for e in t.edits) or not t.edits:
            raise ValueError(f"{path}: {t.path}: edits must be a non-empty list of edits (replace_body(...), ...)")
    paths = [t.path for t in transforms]
    if len(set(paths)) != len(paths):
        raise ValueError(f"{path}: a file has two Transforms; give it one, with all its edits")
    return tuple(transforms)


def render_transforms(transforms: Sequence[Transform], read: Callable[[str], bytes | None]) -> str:
    """Transforms rendered as one git-style patch.

    ``read(path)`` gives the bytes a transform starts from: the release's pristine file, or (for a
    file that fixes earlier in pack order edit too) the result of those. Raises CstFailed.
    """
    parts = []
    for transform in transforms:
        path = transform.path
        before = read(path)
        after = transform.apply(before)
        if after == before:
            raise CstFailed(path, "transform", "changes nothing: is the fix already in this file?")
        parts.append(patch.render(path, before, after, blobs=True))
    return "".join(parts)
