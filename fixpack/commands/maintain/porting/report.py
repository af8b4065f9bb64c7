"""What ``fixpack port`` reports: each change's outcome on the new tree, each fix's proof there."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ....models import Fingerprint, PortOutcome, ProofOutcome

__all__ = ["ChangeReport", "FixProof", "PortReport"]


@dataclass
class ChangeReport:
    fix: str
    path: str
    outcome: PortOutcome
    detail: str = ""
    hunk: str = ""  # the failing hunk, for a conflict
    nearest: str = ""  # where the file comes closest to it, as a small diff
    patch: str = ""  # the change re-rendered against the new tree, when it applies
    fingerprint: Fingerprint | None = None
    merge: bytes | None = None  # a three-way merge left with conflict markers, for a maintainer to resolve

    def to_json(self) -> dict[str, str]:
        return {
            "fix": self.fix,
            "path": self.path,
            "outcome": self.outcome,
            "detail": self.detail,
            "hunk": self.hunk,
            "nearest": self.nearest,
        }


@dataclass(frozen=True, slots=True)
class FixProof:
    """A fix's proof on the new tree as it is (``pristine``) and with the ported pack (``ported``)."""

    pristine: ProofOutcome
    ported: ProofOutcome
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"pristine": self.pristine, "ported": self.ported, "detail": self.detail}


@dataclass
class PortReport:
    from_release: str
    to_release: str  # --write's name, else the name of the release the new tree is at
    changes: list[ChangeReport]
    fix_ids: tuple[str, ...]
    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    proofs: dict[str, FixProof] = field(default_factory=dict)  # empty when proofs were not run
    skipped: dict[str, str] = field(default_factory=dict)  # fix id -> why it was not tried

    def counts(self) -> dict[str, int]:
        return {o.value: sum(1 for c in self.changes if c.outcome == o) for o in PortOutcome}

    def applies(self, fix_id: str) -> str:
        """From the changes alone: conflict if any change conflicts, upstream if all are upstream, else ported."""
        outcomes = {c.outcome for c in self.changes if c.fix == fix_id}
        if "conflict" in outcomes:
            return "conflict"
        return "upstream" if outcomes == {"upstream"} else "ported"

    def fix_outcome(self, fix_id: str) -> str:
        """``applies``, except fixed-upstream when the proof passes on the new tree without the fix."""
        outcome = self.applies(fix_id)
        proof = self.proofs.get(fix_id)
        if outcome != "upstream" and proof is not None and proof.pristine is ProofOutcome.PASSES:
            return "fixed-upstream"
        return outcome

    def to_json(self) -> dict[str, object]:
        fixes: list[dict[str, object]] = []
        for f in self.fix_ids:
            fixes.append({"id": f, "outcome": self.fix_outcome(f)})
            if f in self.proofs:
                fixes[-1]["proof"] = self.proofs[f].to_json()
        return {
            "from": self.from_release,
            "to": self.to_release,
            "counts": self.counts(),
            "fixes": fixes,
            "changes": [c.to_json() for c in self.changes],
            "skipped": [{"id": f, "reason": why} for f, why in self.skipped.items()],
            "written": [str(p) for p in self.written],
            "notes": self.notes,
        }
