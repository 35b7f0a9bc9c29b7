"""Turn-based self-play: a PettingZoo classic game trained by rlblocks' native multi-agent PPO
with the defaults ``rlblocks train --env GAME`` takes (one shared policy on every seat, and
:func:`rlblocks.cli.train_defaults.turn_based_defaults`), then played greedily against a
random legal player.

The trained policy takes seat ``g % 2`` in game ``g`` (so it moves first in half the
games); the other seat plays a uniformly random legal move. Counted: the policy's wins,
draws and losses, and its moves outside the action mask (the training run's own count is
``illegal_moves_total``).

Usage: ``python benchmarks/bench_turns.py [--quick] [--env pettingzoo.classic.tictactoe_v3:env]
[--steps 100000] [--games 200] [--seed 0] [--eval-at 50000,100000] [--set KEY=VALUE ...]``
(``--set``: config keys over the defaults, e.g. ``selfplay_snapshot_every=5``;
``--eval-at``: also play the games when training passes each of these step counts, so one
run measures several budgets). Prints one JSON line per evaluation, the last at ``--steps``.
The model is the catalog's default for the game's board, the vision net (a derived conv
stack for tictactoe's 3x3x2 and connect_four's 6x7x2; ``--set model={fcnet_hiddens: ...}``
changes nothing there, ``--set model={conv_filters: ...}`` does); the JSON line names it.

Examples:
    >>> config_sets(["selfplay_snapshot_every=5", "entropy_coeff=0.01"])
    {'selfplay_snapshot_every': 5, 'entropy_coeff': 0.01}
    >>> eval_points(100000, "50000, 150000,")  # none past --steps, which always counts
    [50000, 100000]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np


def config_sets(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings (values read as YAML) as a config dict."""
    import yaml

    return {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in pairs)}


def eval_points(steps: int, eval_at: str) -> list[int]:
    """The step counts to evaluate at: ``--eval-at``'s (comma-separated) up to ``steps``,
    and ``steps``."""
    points = {int(p) for p in eval_at.split(",") if p.strip()}
    return sorted({p for p in points if p < steps} | {steps})


def play_vs_random(trainer: Any, games: int, seed: int) -> dict[str, int]:
    """``games`` greedy games of ``trainer``'s policy against a random legal player (the
    loop of ``rlblocks evaluate --opponent random``: :func:`rlblocks.train.matches.play_games`)
    and the policy's moves outside the mask (``illegal``)."""
    from rlblocks.train.matches import play_games, random_legal
    from rlblocks.train.selfplay import policy_mover

    hub = trainer.fresh_hub(min(games, 8))
    try:
        learner = policy_mover(trainer.policies, hub, explore=False)
        counts = play_games(hub, learner, random_legal(np.random.default_rng(seed)), games, seed)
        illegal = hub.illegal_moves  # the random legal player makes none
    finally:
        hub.close()
    return {
        "win": counts["wins"],
        "draw": counts["draws"],
        "loss": counts["losses"],
        "illegal": illegal,
    }


def main(argv: list[str] | None = None) -> None:
    """Trains, plays and prints the JSON line (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2048 steps, 10 games")
    parser.add_argument("--env", default="pettingzoo.classic.tictactoe_v3:env")
    parser.add_argument("--steps", type=int, default=100_000, help="env steps of training")
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--eval-at", default="", help="comma-separated step counts to evaluate at on the way"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config key (YAML)"
    )
    args = parser.parse_args(argv)
    steps, games = (2048, 10) if args.quick else (args.steps, args.games)
    from rlblocks.cli.train_defaults import turn_based_defaults
    from rlblocks.train import MultiAgentPPOTrainer
    from rlblocks.train.trainer_config import PPOConfig

    sets = config_sets(args.set)
    config = {"env": args.env, "seed": args.seed, **sets}
    defaults = turn_based_defaults(PPOConfig.from_dict(config), sets)  # as the CLI's
    points = eval_points(steps, args.eval_at)
    trainer = MultiAgentPPOTrainer({**config, **defaults})
    try:
        train_s = 0.0
        metrics: dict[str, Any] = {}
        for point in points:
            start = time.perf_counter()
            while trainer.timesteps_total < point:
                metrics = trainer.train()
            train_s += time.perf_counter() - start
            counts = play_vs_random(trainer, games, args.seed + 1)
            line = {
                "env": args.env,
                "defaults": defaults,
                "model": type(getattr(trainer.model, "inner", trainer.model)).__name__,
                "timesteps_total": trainer.timesteps_total,
                "train_s": round(train_s, 1),
                "illegal_moves_total": metrics.get("illegal_moves_total"),
                "games": games,
                **counts,
            }
            print(json.dumps(line), flush=True)
    finally:
        trainer.close()


if __name__ == "__main__":
    main()
