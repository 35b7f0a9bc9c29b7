"""Timing harness shared by every benchmark: medians, JSON lines and a table.

Each case measures several *methods* (rlblocks C++, the numpy reference, gymnasium, ...)
in the same process and run; ``ratio`` compares a method with the best alternative
(anything that is not rlblocks) of the same case, so ratios > 1 mean rlblocks is faster.

Examples:
    >>> r = measure("demo", "noop", lambda: None, items=1, min_time=0.001)
    >>> r.us_per_item >= 0
    True
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO


@dataclass
class Result:
    case: str
    method: str
    us_per_item: float
    items_per_s: float
    batch: int = 1
    threads: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    ratio: float | None = None  # best alternative's time / this time (rlblocks rows only)


def measure(
    case: str,
    method: str,
    fn: Callable[[], Any],
    items: int,
    *,
    batch: int = 1,
    threads: int = 1,
    min_time: float = 0.2,
    repeats: int = 5,
    **extra: Any,
) -> Result:
    """Median time per item of ``fn`` (which processes ``items`` items per call)."""
    fn()  # warm up (allocations, caches, lazy imports)
    calls = 1
    while True:  # calls per repeat so that one repeat lasts about min_time / repeats
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time / repeats or calls >= 1 << 20:
            break
        calls *= 2 if dt == 0 else max(2, min(100, int(min_time / repeats / dt) + 1))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / (calls * items))
    per_item = statistics.median(samples)
    return Result(
        case,
        method,
        per_item * 1e6,
        1.0 / per_item if per_item > 0 else float("inf"),
        batch,
        threads,
        dict(extra),
    )


def add_ratios(results: list[Result], ours: str = "rlblocks") -> None:
    """Sets ``ratio`` on rows whose method starts with ``ours`` against the best other row
    with the same case and batch."""
    for r in results:
        if not r.method.startswith(ours):
            continue
        others = [
            o.us_per_item
            for o in results
            if o.case == r.case and o.batch == r.batch and not o.method.startswith(ours)
        ]
        if others and r.us_per_item > 0:
            r.ratio = min(others) / r.us_per_item


def emit_json(results: Iterable[Result], stream: TextIO = sys.stdout) -> None:
    for r in results:
        print(json.dumps(asdict(r)), file=stream)


def format_table(results: list[Result]) -> str:
    header = (
        f"{'case':<34} {'method':<26} {'B':>5} {'thr':>3} {'us/item':>10} "
        f"{'items/s':>12} {'ratio':>7}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else ""
        lines.append(
            f"{r.case:<34} {r.method:<26} {r.batch:>5} {r.threads:>3} "
            f"{r.us_per_item:>10.3f} {r.items_per_s:>12,.0f} {ratio:>7}"
        )
    return "\n".join(lines)


def report(results: list[Result], json_stream: TextIO = sys.stdout) -> None:
    """Adds ratios, prints JSON lines, then the table."""
    add_ratios(results)
    emit_json(results, json_stream)
    print(format_table(results))
