"""Observation preprocessors: rlblocks C++ against numpy and gymnasium (JSON lines + a table).

Usage: ``PYTHONPATH=python python benchmarks/bench_preprocessors.py [--quick] [--json FILE]``.
"""

from __future__ import annotations

from rlblocks.benchmarking.preprocessors import main

if __name__ == "__main__":
    main()
