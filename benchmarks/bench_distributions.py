"""Action distributions vs torch.distributions at B=4096 (``--quick`` for a smoke run)."""

from __future__ import annotations

from rlblocks.benchmarking.distributions import main

if __name__ == "__main__":
    main()
