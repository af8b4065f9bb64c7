"""bench/serve.py's sums and report on figures given here (no server is started): each TP size's
parts added to the warm and the cold apply, judged against the stock server's median first answer."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.serve import judge, report  # noqa: E402


def _result(stock_s: float) -> dict:
    fixpack = {"check_ms": {"APIServer 1": 1.5}, "agree_ms": {}, "check_total_ms": 5.0, "agree_total_ms": 0.0}
    rounds = [{"stock": {"first_answer_s": stock_s}, "fixpack": {**fixpack, "first_answer_s": stock_s + 0.5}}]
    hook = {
        "APIServer 1": {
            **{"total_ms": 20.0, "own_ms": 4.0, "ppid": 0, "stdlib_ms": 16.0, "install_ms": 0.5},
            **{"find_spec_ms": 3.4, "find_spec_calls": 5000, "loads": ["a", "b"], "load_ms": 0.1},
        }
    }
    return {
        "date": "2026-12-06",
        "machine": "2 CPU cores",
        "load_at_start": 1.0,
        "load_at_end": 1.0,
        "apply": {"cold_s": [0.3], "warm_s": [0.03], "cold_median_s": 0.3, "warm_median_s": 0.03},
        "tp": {
            "1": {
                "hook": {"runs": [hook], "total_median_ms": 180.0, "own_median_ms": 20.0},
                "end_to_end": {
                    "rounds": rounds,
                    "stock_first_answer_median_s": stock_s,
                    "fixpack_first_answer_median_s": stock_s + 0.5,
                    "difference_median_s": 0.5,
                    "difference_min_s": 0.5,
                    "difference_max_s": 0.5,
                    "check_total_median_ms": 5.0,
                    "agree_total_median_ms": 0.0,
                },
            }
        },
    }


def test_the_parts_are_added_and_judged_against_the_stock_first_answer() -> None:
    result = _result(stock_s=30.0)
    judge(result)
    sums = result["tp"]["1"]["sums"]
    assert sums["warm"]["total_ms"] == pytest.approx(30.0 + 185.0) and sums["warm"]["met"]  # 0.72% of 30 s
    assert sums["cold"]["total_ms"] == pytest.approx(300.0 + 185.0) and sums["cold"]["met"]  # 1.62%
    text = report(result)
    assert "warm: apply 30 ms + 185.0 ms = 215 ms, 0.72% of the stock server's median first answer (30.00 s)" in text
    assert "goal 5%: met" in text and "difference per round median +0.50 s" in text


def test_a_missed_goal_is_said() -> None:
    result = _result(stock_s=5.0)  # 485 ms of 5 s: 9.7%, over the cold goal; 215 ms: 4.3%, over the warm
    judge(result)
    assert not result["tp"]["1"]["sums"]["cold"]["met"] and not result["tp"]["1"]["sums"]["warm"]["met"]
    assert report(result).count("MISSED") == 2


def test_the_control_rounds_are_reported_only_when_run() -> None:
    result = _result(stock_s=30.0)
    judge(result)
    assert "control" not in report(result)
    result["tp"]["1"]["end_to_end"]["control_differences_s"] = [0.4, -0.2, 1.1]
    assert "second stock minus stock median +0.40 s (min -0.20, max +1.10)" in report(result)
