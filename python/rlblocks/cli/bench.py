"""``rlblocks bench [NAME ...] [--quick] [--list]``: runs the benchmarks of the table
:data:`rlblocks.benchmarking.BENCHMARKS` (default ``preprocessors``; ``all`` runs each).

Examples:
    >>> from rlblocks.cli import main
    >>> main(["bench", "no-such-benchmark"])  # the error goes to stderr
    2
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

from rlblocks.benchmarking import BENCHMARKS


def add_parser(sub: Any) -> None:
    """Adds ``bench`` to an argparse subparsers object (its errors are not guarded: a
    benchmark's failure shows its traceback)."""
    bench = sub.add_parser(
        "bench", help="run benchmarks (JSON lines + a table)", allow_abbrev=False
    )
    bench.add_argument("names", nargs="*", help="benchmarks to run (default: preprocessors; 'all')")
    bench.add_argument("--quick", action="store_true", help="fewer cases and repeats")
    bench.add_argument("--list", action="store_true", help="list the available benchmarks")
    bench.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Runs the chosen benchmarks one after another; exit code 2 for an unknown name."""
    names = list(BENCHMARKS)
    if args.list:
        print("\n".join(names))
        return 0
    chosen = args.names or ["preprocessors"]
    if chosen == ["all"]:
        chosen = names
    unknown = [n for n in chosen if n not in BENCHMARKS]
    if unknown:
        print(
            f"rlblocks bench: unknown benchmark(s) {unknown}; available: {names} or 'all'",
            file=sys.stderr,
        )
        return 2
    for name in chosen:
        print(f"== rlblocks bench {name} ==", flush=True)
        module = importlib.import_module(BENCHMARKS[name])
        module.main(["--quick"] if args.quick else [])
    return 0
