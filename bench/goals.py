"""The goals, judged as data: each is a figure measured against a floor (or a budget) times a ratio."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .measure import Series
from .scale import SCALE_FIXES, SCALE_SIZES, ScaleRow

__all__ = ["Goal", "goals"]

# Issue 28: the cold apply against the compile floor (what it must do at the least: read, hash,
# compile and write the bytecode) and against the cookbook without fixpack (patch + compileall).
COLD_COMPILE, COLD_PEER, WARM, PEAK_MIB, VERIFY, FIRST_IMPORT, STACKED = 2.5, 1.1, 1.5, 100.0, 8.0, 1.5, 1.5
# Issue 31: verify --coverage against plain verify, measured in the same rounds.
COVERAGE = 2.0


@dataclass(frozen=True)
class Goal:
    name: str
    measured: float | None  # None: the workload was not run
    floor: float | None  # what the measured figure is held against: a floor's median, or a budget
    limit_ratio: float
    unit: str = "s"
    strict: bool = False  # met only below the limit, not at it

    @property
    def limit(self) -> float | None:
        return None if self.floor is None else self.floor * self.limit_ratio

    @property
    def met(self) -> bool | None:
        """None: not judged, for want of a figure."""
        if self.measured is None or self.limit is None:
            return None
        return self.measured < self.limit if self.strict else self.measured <= self.limit

    def json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "measured": self.measured,
            "floor": self.floor,
            "limit_ratio": self.limit_ratio,
            "limit": self.limit,
            "unit": self.unit,
            "strict": self.strict,
            "met": self.met,
        }


def _median(series: dict[str, Series], name: str) -> float | None:
    return series[name].median if name in series and series[name].runs else None  # absent: not run


def goals(s: dict[str, Series], scale: list[ScaleRow], imports: dict[str, Any]) -> list[Goal]:
    """``s``: every series of the main bed by name; a workload not run leaves its goal unmeasured."""
    out = [
        Goal("cold apply, against the compile floor", _median(s, "cold"), _median(s, "compile_floor"), COLD_COMPILE),
        Goal(
            "cold apply, against patch -p1 of each fix + compileall (the peer)",
            _median(s, "cold"),
            _median(s, "peer"),
            COLD_PEER,
        ),
        Goal("warm re-run, against the hash floor", _median(s, "warm"), _median(s, "warm_floor"), WARM),
        Goal(
            "peak memory of apply, re-run and revert",
            max(
                [s[k].peak_mib for k in ("cold", "warm", "revert")]
                + [max(r.cold.peak_mib, r.warm.peak_mib) for r in scale]
            ),
            PEAK_MIB,
            1.0,
            "MiB",
            strict=True,
        ),
        Goal(
            "verify of the whole profile, against importing torch",
            _median(s, "verify"),
            _median(s, "torch_import"),
            VERIFY,
        ),
        Goal(
            "verify --coverage of the whole profile, against verify",
            _median(s, "verify_coverage"),
            _median(s, "verify"),
            COVERAGE,
        ),
        Goal(
            "apply + first import of the patched modules, against the first import of the stock ones",
            _median(s, "apply_import"),
            _median(s, "stock_import"),
            FIRST_IMPORT,
        ),
        Goal(
            "no libcst on the pinned path (cold apply and warm re-run processes importing it)",
            float(sum(imports[k]["loaded"]["libcst"] for k in ("cold", "warm"))),
            0.0,
            1.0,
            "processes",
        ),
    ]
    top = max(SCALE_FIXES)
    for size in SCALE_SIZES if scale else ():
        for kind in ("cold", "warm"):
            by = {r.fixes: getattr(r, kind).median for r in scale if r.size == size and r.shape == "stacked"}
            out.append(
                Goal(f"scale {size} {kind}: {top} changes stacked on one file, against 1", by[top], by[1], STACKED)
            )
    return out
