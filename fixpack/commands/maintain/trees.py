"""What proofs run on: scratch copies of the upstream trees (``Scratch``), and the pack's files on
them change by change (``Pack``). verify, its mutants and coverage, and port share these, so that a
proof always sees a tree laid out the same way."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from ...core import patch, rebuild
from ...core.mutants import Target
from ...core.plan import chains
from ...models import Change, Fix, Profile
from ...proofkit import Trees

__all__ = ["Scratch", "Pack", "Step", "put"]


def put(target: Path, content: bytes | None) -> None:
    """Replace a scratch file (None: remove it), never writing in place: it may be a hard link."""
    target.unlink(missing_ok=True)
    if content is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


class Scratch:
    """Copies of the ``--source`` trees in a temporary folder, removed on exit: ``pristine``, each
    pinned package copied out of its source tree (repository layout), and ``changed``, hard links
    to it in which a command puts the files it changes (``put`` replaces a file, so the pristine
    copy is never written). Each is a root per distribution."""

    def __init__(self, sources: dict[str, Path], profile: Profile, prefix: str, changed: str = "patched") -> None:
        self.profile = profile
        self._tmp = tempfile.TemporaryDirectory(prefix=prefix)
        self.root = Path(self._tmp.name)
        try:
            self.pristine: dict[str, Path] = {}
            for pin in profile.pins:
                if pin.dist in sources:
                    dest = self.root / "pristine" / pin.dist
                    shutil.copytree(
                        sources[pin.dist] / pin.package,
                        dest / pin.package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                    )
                    self.pristine[pin.dist] = dest
            self.changed = self._linked(self.pristine, changed)
        except BaseException:
            self._tmp.cleanup()
            raise

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._tmp.cleanup()

    def link(self, name: str) -> dict[str, Path]:
        """Another copy of the changed trees, for runs that each change a file of their own (a
        mutant's slot)."""
        return self._linked(self.changed, name)

    def _linked(self, roots: dict[str, Path], name: str) -> dict[str, Path]:
        # Hard links: cheap, and safe as long as a file is replaced, never written in place.
        out = {}
        for dist, root in roots.items():
            shutil.copytree(root, self.root / name / dist, copy_function=os.link)
            out[dist] = self.root / name / dist
        return out

    def file(self, roots: dict[str, Path], path: str) -> Path:
        """Where a file the pack names (``vllm_gaudi/...``) is in ``roots``."""
        pin = self.profile.pin_for_path(path)
        assert pin is not None, path  # the catalog only takes changes under a pinned package
        return roots[pin.dist] / path

    def put(self, path: str, content: bytes | None) -> None:
        put(self.file(self.changed, path), content)

    def trees(self, roots: dict[str, Path]) -> Trees:
        """``roots`` as a proof is given them."""
        by_package = {p.package: roots.get(p.dist) for p in self.profile.pins}
        return Trees(vllm_gaudi=by_package.get("vllm_gaudi"), vllm=by_package.get("vllm"))


@dataclass(frozen=True, slots=True)
class Step:
    """One change of a fix where the whole pack chains it, in one file."""

    change: Change
    target: Target  # its diff and the bytes it meets (after the fixes before it)
    after: bytes | None  # the file once it is applied
    later: list[Change]  # the changes of the fixes after it
    final: bytes | None  # the file with the whole pack


class Pack:
    """The files the pack edits on the pristine trees: each one's chain of changes and its bytes
    before each change and after the last. A file where the pack does not apply is left out:
    verify reports it, and a fix with a change there has no steps."""

    def __init__(self, fixes: list[Fix], scratch: Scratch) -> None:
        self.release = scratch.profile.release
        self.files: dict[str, tuple[list[Change], list[bytes | None]]] = {}
        for path, chain in chains(fixes, self.release).items():
            target = scratch.file(scratch.pristine, path)
            contents = [target.read_bytes() if target.exists() else None]
            try:
                for change in chain:
                    contents.append(patch.apply(rebuild.parsed(change), contents[-1]))
            except patch.HunkFailed:
                continue
            self.files[path] = (chain, contents)

    def steps(self, fix: Fix) -> list[Step] | None:
        """Each change of ``fix`` in its file's chain; None where the pack does not apply to one."""
        out = []
        for change in fix.changes[self.release]:
            if change.path not in self.files:
                return None
            chain, contents = self.files[change.path]
            i = next(n for n, c in enumerate(chain) if c.fix_id == fix.id)
            target = Target(rebuild.parsed(change), contents[i])
            out.append(Step(change, target, contents[i + 1], chain[i + 1 :], contents[-1]))
        return out
