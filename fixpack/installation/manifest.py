"""``manifest.json``: what fixpack applied to an environment, kept in its state directory; read and
written here.

An apply with ``--recipe SLUG`` also records the recipe (``"recipe"``) and its rules on the
environment alone (``"rules"``, as :mod:`fixpack.runtime.rules` reads them), which the runtime
check applies in every vLLM process; any other apply or revert leaves them out. Both keys are
optional: a manifest written before recipes existed reads as applied without one."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from ..core.identity import FixSet, fix_set
from ..models import FileEntry
from ..runtime.index import format_object
from . import warm

__all__ = ["FORMAT", "Manifest"]

FORMAT = 1


@dataclass(frozen=True, slots=True)
class Manifest:
    profile: str | None = None
    release: str | None = None
    fixes: tuple[str, ...] = ()
    files: dict[str, FileEntry] = field(default_factory=dict)
    time: str = ""
    warm: dict | None = None  # fastpath's stamp: what an already-applied re-run checks and prints
    # dist-info name -> sha256 of the RECORD apply wrote (on disk: "records")
    record_digests: dict[str, str] = field(default_factory=dict)
    recipe: str | None = None  # the slug of the recipe the applied set came from (apply --recipe)
    rules: tuple[dict, ...] = ()  # that recipe's rules on the environment alone (JSON-able)

    def steps(self, path: str) -> tuple[tuple[str, str], ...]:
        """(fix id, patch digest) of each change recorded for ``path``, in order."""
        record = self.files.get(path)
        return tuple(zip(record.fixes, record.patches)) if record else ()

    @property
    def empty(self) -> bool:
        return not self.fixes

    @property
    def fix_set(self) -> FixSet | None:
        """The identity of what is applied (``fixpack.core.identity``); None when nothing is."""
        return None if self.empty else fix_set(self.release or "", self.fixes, self.files)

    def to_bytes(self) -> bytes:
        data: dict[str, object] = {
            "format": FORMAT,
            "profile": self.profile,
            "release": self.release,
            "fixes": list(self.fixes),
            "time": self.time or time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "files": {
                path: {
                    "dist": r.dist,
                    "pristine": r.pristine,
                    "applied": r.applied,
                    "fixes": list(r.fixes),
                    "patches": list(r.patches),
                }
                for path, r in sorted(self.files.items())
            },
        }
        if self.record_digests:
            data["records"] = dict(sorted(self.record_digests.items()))
        if self.recipe is not None:
            data["recipe"] = self.recipe
            data["rules"] = list(self.rules)
        if self.warm is not None:
            data["warm"] = {**self.warm, "manifest": warm.seal(data)}
        return (json.dumps(data, indent=2) + "\n").encode()

    @classmethod
    def from_bytes(cls, raw: bytes | None) -> Manifest:
        if raw is None:
            return cls()
        data = format_object(raw, "manifest", FORMAT)
        files = {
            path: FileEntry(r["dist"], r["pristine"], r["applied"], tuple(r["fixes"]), tuple(r.get("patches", ())))
            for path, r in data.get("files", {}).items()
        }
        return cls(
            data.get("profile"),
            data.get("release"),
            tuple(data.get("fixes", ())),
            files,
            data.get("time", ""),
            _unsealed(data.get("warm")),
            dict(data.get("records", {})),
            data.get("recipe"),
            tuple(data.get("rules", ())),
        )

    def same_content(self, other: Manifest) -> bool:
        return (self.profile, self.release, self.fixes, self.files, self.record_digests, self.recipe, self.rules) == (
            other.profile,
            other.release,
            other.fixes,
            other.files,
            other.record_digests,
            other.recipe,
            other.rules,
        )


def _unsealed(stamp: object) -> dict | None:
    """A stamp as made (``warm.make_stamp``): the seal is the writer's, put in each time it writes."""
    return {k: v for k, v in stamp.items() if k != "manifest"} if isinstance(stamp, dict) else None
