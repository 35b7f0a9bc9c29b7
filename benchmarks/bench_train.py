"""PPO training: rlblocks against Stable-Baselines3 (CartPole to 475, StatelessCartPole with
LSTM/attention, a Pong smoke), JSON lines + a summary table.

Usage: ``PYTHONPATH=python python benchmarks/bench_train.py [--quick] [--cases cartpole]``.
"""

from __future__ import annotations

from rlblocks.benchmarking.train import main

if __name__ == "__main__":
    main()
