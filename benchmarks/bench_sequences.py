"""Sequence chopping, LSTM wrapper overhead and GTrXL step latency (see
rlblocks.benchmarking.sequences). Usage: python benchmarks/bench_sequences.py [--quick]"""

from __future__ import annotations

import sys

from rlblocks.benchmarking.sequences import main

if __name__ == "__main__":
    sys.exit(main())
