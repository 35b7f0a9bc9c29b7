"""MeanStdFilter and frame stacking: rlblocks C++ against numpy (JSON lines + a table).

Usage: ``PYTHONPATH=python python benchmarks/bench_filters.py [--quick] [--only filters]``.
"""

from __future__ import annotations

from rlblocks.benchmarking.filters import main

if __name__ == "__main__":
    main()
