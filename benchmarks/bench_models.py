"""Model forward latency: rlblocks models against nn.Sequential (JSON lines + a table).

Usage: ``PYTHONPATH=python python benchmarks/bench_models.py [--quick] [--threads N]``.
"""

from __future__ import annotations

import sys

from rlblocks.benchmarking.models import main

if __name__ == "__main__":
    sys.exit(main())
