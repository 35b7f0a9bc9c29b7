"""Smoke test of the preprocessor benchmark: it runs, and prints well-formed JSON lines.

Timings are never asserted (shared, noisy machines); only the output format and the
correctness checks the benchmark does itself (hand-written numpy == rlblocks).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rlblocks.benchmarking import preprocessors as bench

KEYS = {"case", "method", "us_per_item", "items_per_s", "batch", "threads", "extra", "ratio"}


def _json_rows(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_quick_subset_prints_json_lines(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_file = tmp_path / "rows.jsonl"
    bench.main(["--quick", "--cases", "discrete,dict", "--batches", "1,4", "--min-time", "0.002",
                "--json", str(out_file)])
    rows = _json_rows(capsys.readouterr().out)
    assert rows, "no JSON lines printed"
    for row in rows:
        assert set(row) == KEYS
        assert row["us_per_item"] > 0
    methods = {r["method"] for r in rows}
    assert {"rlblocks t=1", "rlblocks t=2", "rlblocks transform", "numpy reference",
            "numpy hand-written", "gymnasium flatten loop"} <= methods
    assert {r["case"] for r in rows} == {"Discrete(100) list", "Discrete(100) batched",
                                         "nested Dict list", "nested Dict batched"}
    assert all(r["ratio"] is not None for r in rows if r["method"].startswith("rlblocks"))
    assert all(r["extra"].get("matches_rlblocks", True) for r in rows)
    assert _json_rows(out_file.read_text()) == rows


def test_repeated_and_bound_rows(capsys: pytest.CaptureFixture[str]) -> None:
    rows = bench.run(["repeated", "multidiscrete"], [2], [1], min_time=0.002, repeats=1,
                     progress=False)
    assert {r.case for r in rows} == {"Repeated(Dict) len~U(0,32) list",
                                      "MultiDiscrete([10]*16) list",
                                      "MultiDiscrete([10]*16) batched"}
    bench.report_rows(rows)
    assert "target checks" in capsys.readouterr().out


def test_bound_row_arithmetic() -> None:
    case = bench.build_cases(["discrete"], 4)[1]  # batched: int64 in, 100 float32 out
    ours = bench.Result(case.name, "rlblocks t=1", 0.1, 1e7, 4, 1)
    row = bench.bound_row(case, 4, 1e9, [ours])
    assert row.extra["bytes_in_per_item"] == 8
    assert row.extra["bytes_out_per_item"] == 400
    assert row.us_per_item == pytest.approx(0.408)
    assert row.extra["rlblocks_t=1_over_bound"] == pytest.approx(0.1 / 0.408, rel=1e-2)
