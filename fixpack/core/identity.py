"""The fix-set identity of a site: what code it runs, reduced to one short digest. Pure: no I/O.

A site's fix set is the release, the fixes applied in order, and the content of every file those
fixes changed. Two sites with the same fix set run the same code, however they got there: with
``--profile`` or a recipe, in place or into an overlay, in one apply or several, from any
cookbook checkout, over any of the content-identical builds a profile pins. So the identity holds
none of those: not the recipe, not the installed commit ids, not an absolute path, not the mode.

What goes in:

- the **release** (``v0.26.0``), not the profile's name: the release names the unpatched files
  the fixes leave alone (a profile accepts only builds of its release with the same content), and
  the after-hashes below name the patched ones, so two profiles of one release that apply the same
  fixes to the same bytes run the same code and get one digest. The name is a label; the status
  and the runtime check's line still print it.
- the **fixes**, in the order applied (the plan's: pack order, each fix after what it requires).
  Two sites that ask for the same opt-ins in another order on their command lines get the same
  plan and the same order.
- each **patched file**: its distribution's canonical name (``vllm-gaudi``), its path inside the
  distribution as in the upstream repository (``vllm_gaudi/v1/worker/hpu_model_runner.py``) and
  the sha256 of its bytes after the fixes, or null for a file a fix deletes.

The canonical form, for another implementation to recompute the digest::

    ["fixpack-fix-set", 1, RELEASE, [FIX, ...], [[DIST, PATH, SHA256_OR_NULL], ...]]

with the fixes in applied order, the files sorted by (DIST, PATH) (code-point order), each
SHA256 64 lowercase hex digits, serialised as JSON with no whitespace (separators ``,`` and
``:``) and non-ASCII characters escaped (``\\uXXXX``), i.e. Python's
``json.dumps(value, separators=(",", ":"), ensure_ascii=True)``. The digest is the first 16
hex digits (64 bits) of the sha256 of those bytes: enough to tell apart the fix sets of one
deployment, and short enough to pin in a deployment file as an image digest is pinned.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..errors import UsageError
from ..models import FileEntry
from ..runtime import fixset

__all__ = ["TAG", "VERSION", "DIGEST_LENGTH", "FixSet", "fix_set", "expected_digest", "mismatch"]

TAG, VERSION, DIGEST_LENGTH = fixset.TAG, fixset.VERSION, fixset.DIGEST_LENGTH


@dataclass(frozen=True, slots=True)
class FixSet:
    release: str
    fixes: tuple[str, ...]
    files: tuple[tuple[str, str, str | None], ...]  # (dist, path, sha256 after; None: deleted), sorted

    @property
    def canonical(self) -> bytes:
        return fixset.canonical(self.release, self.fixes, self.files)

    @property
    def digest(self) -> str:
        return fixset.digest(self.release, self.fixes, self.files)

    def to_json(self) -> dict[str, object]:
        """What ``status --json`` and the runtime check's index carry."""
        return {"digest": self.digest, "fixes": list(self.fixes)}

    def summary(self) -> str:
        return f"{self.digest} ({len(self.fixes)} fixes)"


def fix_set(release: str, fixes: Sequence[str], files: Mapping[str, FileEntry]) -> FixSet:
    """The fix set of ``fixes`` (in applied order) of ``release`` leaving ``files`` (path inside
    its distribution -> the record of what the fixes made of it) as recorded."""
    rows = sorted((record.dist, path, record.applied) for path, record in files.items())
    return FixSet(release, tuple(fixes), tuple(rows))


def expected_digest(value: str) -> str:
    """A ``--expect-fix-set`` value as ``fixpack status`` prints it: 16 hex digits (any case)."""
    digest = value.strip().lower()
    if len(digest) != DIGEST_LENGTH or any(c not in string.hexdigits for c in digest):
        raise UsageError(
            f"--expect-fix-set {value!r}: expected a fix-set digest, {DIGEST_LENGTH} hex digits "
            "as fixpack status prints it (fix set: DIGEST)"
        )
    return digest


def mismatch(expected: str, planned: FixSet | None, known: Iterable[FixSet | None] = ()) -> str | None:
    """Why the fix set a plan leaves is not the ``expected`` one, in one sentence (None: it is).

    A digest alone does not say which fixes it stands for; when one of ``known`` (the set applied
    there now) has the expected digest, the fixes and files that differ from it are named,
    otherwise the plan's own fixes are listed."""
    if planned is not None and planned.digest == expected:
        return None
    if planned is None:
        actual = "no fix set (no fix would be applied)"
    else:
        actual = f"fix set {planned.digest} (release {planned.release}; {len(planned.fixes)} fixes: "
        actual += f"{', '.join(planned.fixes)})"
    line = f"--expect-fix-set {expected}: this apply would leave {actual}"
    reference = next((k for k in known if k is not None and k.digest == expected), None)
    if reference is not None:
        line += f"; against the expected set (the one applied here now): {_difference(reference, planned)}"
    return line


def _difference(old: FixSet, new: FixSet | None) -> str:
    """What ``new`` changes from ``old``: release, fixes added and dropped, files with other bytes."""
    if new is None:
        return f"drops every fix ({', '.join(old.fixes)})"
    parts = []
    if new.release != old.release:
        parts.append(f"release {new.release}, not {old.release}")
    added = [f for f in new.fixes if f not in old.fixes]
    dropped = [f for f in old.fixes if f not in new.fixes]
    if added:
        parts.append(f"adds {', '.join(added)}")
    if dropped:
        parts.append(f"drops {', '.join(dropped)}")
    if not added and not dropped and new.fixes != old.fixes:
        parts.append(f"orders the fixes {', '.join(new.fixes)}")
    before = {(d, p): h for d, p, h in old.files}
    after = {(d, p): h for d, p, h in new.files}
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k, "") != after.get(k, ""))
    if changed and not added and not dropped:
        parts.append(f"other bytes in {', '.join(f'{d}:{p}' for d, p in changed)}")
    return "; ".join(parts)
