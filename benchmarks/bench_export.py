"""Single-observation action latency of an exported policy (JSON lines + a table).

OnnxPolicy / TorchExportPolicy against the trainer's compute_single_action and a plain torch
forward, for the CartPole default net and an 84x84x4 vision net. Needs the `export` extra.

Usage: ``PYTHONPATH=python python benchmarks/bench_export.py [--quick]``.
"""

from __future__ import annotations

import sys

from rlblocks.benchmarking.export import main

if __name__ == "__main__":
    sys.exit(main())
