"""Turn-based self-play: a PettingZoo classic game trained by rlblocks' native multi-agent PPO
with its defaults (one shared policy on every seat), then played greedily against a random
legal player.

The trained policy takes seat ``g % 2`` in game ``g`` (so it moves first in half the
games); the other seat plays a uniformly random legal move. Counted: the policy's wins,
draws and losses, and its moves outside the action mask (the training run's own count is
``illegal_moves_total``).

Usage: ``python benchmarks/bench_turns.py [--quick] [--env pettingzoo.classic.tictactoe_v3:env]
[--steps 100000] [--games 200] [--seed 0]``. Prints one JSON line.

Examples:
    >>> outcome(1.0), outcome(0.0), outcome(-1.0)
    ('win', 'draw', 'loss')
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from typing import Any

import numpy as np


def outcome(score: float) -> str:
    """A game's result for the policy from its return."""
    return "win" if score > 0 else "loss" if score < 0 else "draw"


def play_vs_random(trainer: Any, make: Any, games: int, seed: int) -> dict[str, int]:
    """``games`` greedy games of ``trainer``'s policy against a random legal player."""
    rng = np.random.default_rng(seed)
    counts = {"win": 0, "draw": 0, "loss": 0, "illegal": 0}
    for g in range(games):
        env = make()
        env.reset(seed=seed + g)
        me = env.possible_agents[g % 2]
        score = 0.0
        for agent in env.agent_iter():
            obs, reward, terminated, truncated, _ = env.last()
            if agent == me:
                score += float(reward)
            if terminated or truncated:
                env.step(None)
                continue
            legal = np.flatnonzero(obs["action_mask"])
            if agent == me:
                move = int(trainer.compute_single_action(obs, agent=agent)[0])
                counts["illegal"] += int(move not in legal)
            else:
                move = int(rng.choice(legal))
            env.step(move)
        counts[outcome(score)] += 1
        env.close()
    return counts


def main(argv: list[str] | None = None) -> None:
    """Trains, plays and prints the JSON line (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2048 steps, 10 games")
    parser.add_argument("--env", default="pettingzoo.classic.tictactoe_v3:env")
    parser.add_argument("--steps", type=int, default=100_000, help="env steps of training")
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    steps, games = (2048, 10) if args.quick else (args.steps, args.games)
    from rlblocks.train import MultiAgentPPOTrainer

    module, name = args.env.split(":")
    make = getattr(importlib.import_module(module), name)
    trainer = MultiAgentPPOTrainer({"env": args.env, "seed": args.seed})
    try:
        start = time.perf_counter()
        metrics: dict[str, Any] = {}
        while trainer.timesteps_total < steps:
            metrics = trainer.train()
        train_s = time.perf_counter() - start
        counts = play_vs_random(trainer, make, games, args.seed + 1)
    finally:
        trainer.close()
    print(
        json.dumps(
            {
                "env": args.env,
                "timesteps_total": trainer.timesteps_total,
                "train_s": round(train_s, 1),
                "illegal_moves_total": metrics.get("illegal_moves_total"),
                "games": games,
                **counts,
            }
        )
    )


if __name__ == "__main__":
    main()
