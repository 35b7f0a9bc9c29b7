"""What the peer comparisons in ``benchmarks/`` share beyond the package's timing harness.

Rows timed per item (medians, ratios against the best alternative, the kernel table) come
from :mod:`rlblocks.benchmarking.harness`. The rows here are whole runs (training to a
target, steps per second): whether a peer is installed, one JSON line per run, medians and
a column table.

Examples:
    >>> rows = [{"method": "rlblocks", "wall_s": 1.5}, {"method": "sb3", "wall_s": None}]
    >>> print(format_rows(rows, [("method", "method", "<9"), ("wall s", "wall_s", ">7.1f")]))
    method     wall s
    rlblocks      1.5
    sb3             -
    >>> median([3.0, 1.0, 2.0]), median([])
    (2.0, None)
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

#: A table column: header, the row's key (or a function of the row), and a format spec whose
#: leading alignment and width also place the header.
Column = tuple[str, str | Callable[[Mapping[str, Any]], Any], str]


def available(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    return importlib.util.find_spec(module) is not None


def skip_note(what: str, install: str) -> str:
    """The line a script prints for a comparison it skips because a peer is missing.

    Examples:
        >>> skip_note("sb3", "rlblocks[bench]")
        '# sb3: skipped; pip install "rlblocks[bench]" to run this comparison'
    """
    return f'# {what}: skipped; pip install "{install}" to run this comparison'


def tree_cpu_s() -> float:
    """CPU seconds of this process (all threads) and of its live ``multiprocessing``
    children (e.g. env worker processes), from ``/proc`` (Linux; elsewhere: this process)."""
    import multiprocessing

    total = time.process_time()
    for child in multiprocessing.active_children():
        try:
            with open(f"/proc/{child.pid}/stat", encoding="ascii") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def emit(row: Any) -> None:
    """Prints one run (a dataclass or a dict) as a JSON line, flushed at once."""
    is_instance = dataclasses.is_dataclass(row) and not isinstance(row, type)
    data = dataclasses.asdict(row) if is_instance else row
    print(json.dumps(data), flush=True)


def median(values: Iterable[float]) -> float | None:
    """The median, or None for no values (a case where no run reached its target)."""
    values = list(values)
    return float(statistics.median(values)) if values else None


def _place(spec: str) -> str:
    """The alignment and width that open a format spec (``">9"`` of ``">9,.0f"``)."""
    found = re.match(r"[<>^]?\d*", spec)
    return found.group() if found else ""


def format_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> str:
    """A header line and one line per row; a missing or None value prints as ``-``."""
    widths = [_place(spec) for _, _, spec in columns]
    lines = [" ".join(f"{header:{w}}" for (header, _, _), w in zip(columns, widths, strict=True))]
    for row in rows:
        cells = []
        for (_, key, spec), w in zip(columns, widths, strict=True):
            value = key(row) if callable(key) else row.get(key)
            cells.append(f"{'-':{w}}" if value is None else f"{value:{spec}}")
        lines.append(" ".join(cells))
    return "\n".join(line.rstrip() for line in lines)
