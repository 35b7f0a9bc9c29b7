"""Reruns every tuned config (``rlblocks train --tuned NAME``) and prints a table: reached /
steps / wall time; ``--record`` updates the figures ``rlblocks tuned`` shows.

Usage: ``PYTHONPATH=python python benchmarks/bench_tuned.py [--names cartpole] [--record]``.
"""

from __future__ import annotations

from rlblocks.benchmarking.tuned import main

if __name__ == "__main__":
    main()
