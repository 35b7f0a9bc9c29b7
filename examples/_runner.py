"""What every example shares: its flags, the smoke-vs-full training budget, and the run.

Each example script builds its own model and config (the part worth reading) and hands the
rest to these helpers.
"""

from __future__ import annotations

import argparse
from typing import Any

from rlblocks.train import PPOConfig, PPOTrainer


def example_parser(
    doc: str | None, stop_reward: float, stop_timesteps: int
) -> argparse.ArgumentParser:
    """``--smoke`` (one tiny iteration), ``--stop-reward``, ``--stop-timesteps``, ``--seed``."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0] if doc else None)
    parser.add_argument("--smoke", action="store_true", help="one tiny iteration")
    parser.add_argument("--stop-reward", type=float, default=stop_reward)
    parser.add_argument("--stop-timesteps", type=int, default=stop_timesteps)
    parser.add_argument("--seed", type=int, default=0)
    return parser


def budget(smoke: bool, batch: tuple[int, int], minibatch: tuple[int, int]) -> dict[str, int]:
    """PPO sizes: ``(smoke, full)`` batch and minibatch; 2 envs and 1 epoch when smoking."""
    pick = 0 if smoke else 1
    return {
        "num_envs": 2 if smoke else 8,
        "train_batch_size": batch[pick],
        "sgd_minibatch_size": minibatch[pick],
        "num_sgd_iter": 1 if smoke else 10,
    }


def train(config: PPOConfig, args: argparse.Namespace) -> dict[str, Any]:
    """One iteration with ``--smoke``, else until the stop reward or timesteps."""
    trainer = PPOTrainer(config)
    if args.smoke:
        return trainer.train()
    return trainer.fit(stop_reward=args.stop_reward, stop_timesteps=args.stop_timesteps)


def report(label: str, result: dict[str, Any], note: str = "") -> None:
    """Prints the steps taken and the mean return reached."""
    print(
        f"{label}: {result['timesteps_total']} steps, mean return "
        f"{result['episode_return_mean']}{note}"
    )
