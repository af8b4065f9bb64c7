"""The bench's report line on what the cold-apply goal leaves beyond the compile floor."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import Run, Series  # noqa: E402
from bench.report import _headroom_line, cold_headroom  # noqa: E402


def _series(name: str, *seconds: float) -> Series:
    s = Series(name)
    for x in seconds:
        s.add(Run(x, 0, 0, "", ""))
    return s


def test_headroom_is_the_goal_less_the_compile_floor():
    s = {
        "cold": _series("cold", 0.160, 0.166, 0.170),
        "cold_floor": _series("cold_floor", 0.048),
        "cold_compile_floor": _series("cold_compile_floor", 0.110, 0.112, 0.114),
    }
    h = cold_headroom(s, 3.0)
    assert h is not None
    assert h["compile_floor_ratio"] == pytest.approx(0.112 / 0.048)
    assert h["left_s"] == pytest.approx(0.144 - 0.112)
    assert h["spent_s"] == pytest.approx(0.166 - 0.112)
    (line,) = _headroom_line(h, 3.0)
    assert "2.3x the floor" in line and "leaves 32 ms" in line and "spends 54 ms" in line


def test_no_headroom_line_without_the_runs():
    s = {"cold": _series("cold"), "cold_floor": _series("cold_floor", 0.05), "cold_compile_floor": _series("c")}
    assert cold_headroom(s, 3.0) is None
    assert _headroom_line(None, 3.0) == []


def test_a_compile_floor_above_the_goal_leaves_nothing():
    s = {
        "cold": _series("cold", 0.2),
        "cold_floor": _series("cold_floor", 0.04),
        "cold_compile_floor": _series("cold_compile_floor", 0.13),
    }
    (line,) = _headroom_line(cold_headroom(s, 3.0), 3.0)
    assert "leaves 0 ms" in line
