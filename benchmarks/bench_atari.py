"""Atari kernels and DQN pipeline benchmark (see rlblocks.benchmarking.atari)."""

from __future__ import annotations

import sys

from rlblocks.benchmarking.atari import main

if __name__ == "__main__":
    sys.exit(main())
