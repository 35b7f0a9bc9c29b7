"""Turn-based self-play: a PettingZoo classic game trained by ``rlblocks train --env GAME``
(the native multi-agent PPO with its defaults: one shared policy on every seat and
:data:`rlblocks.cli.train_defaults.TURN_DEFAULTS`), then ``rlblocks evaluate RUN --opponent
random --episodes GAMES``: greedy games against a random legal player, with the checkpoint
``evaluate`` picks (``best/``, kept by the in-training games against the random player)
and, for comparison, with the newest (``--checkpoint last``).

The trained policy takes seat ``g % 2`` in game ``g`` (so it moves first in half the
games); the other seat plays a uniformly random legal move. Counted: the policy's wins,
draws and losses, and the training run's moves outside the action mask
(``illegal_moves_total``).

Usage: ``python benchmarks/bench_turns.py [--quick] [--env pettingzoo.classic.tictactoe_v3:env]
[--steps 100000] [--games 500] [--seed 0] [--eval-at 50000,100000] [--run-dir DIR]
[--set KEY=VALUE ...]`` (``--set``: config keys over the defaults, e.g.
``selfplay_snapshot_every=5``; ``--eval-at``: stop training at each of these step counts,
evaluate, and go on with ``rlblocks train --resume``, so one run measures several budgets).
Prints one JSON line per evaluation, the last at ``--steps``: ``best`` (the checkpoint
``rlblocks evaluate`` picks) and ``last`` (the newest) each with ``win`` / ``draw`` /
``loss`` and the checkpoint's iteration.

Examples:
    >>> config_sets(["selfplay_snapshot_every=5", "entropy_coeff=0.01"])
    {'selfplay_snapshot_every': 5, 'entropy_coeff': 0.01}
    >>> eval_points(100000, "50000, 150000,")  # none past --steps, which always counts
    [50000, 100000]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import tempfile
import time
from pathlib import Path
from typing import Any


def config_sets(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings (values read as YAML) as a config dict."""
    import yaml

    return {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in pairs)}


def eval_points(steps: int, eval_at: str) -> list[int]:
    """The step counts to evaluate at: ``--eval-at``'s (comma-separated) up to ``steps``,
    and ``steps``."""
    points = {int(p) for p in eval_at.split(",") if p.strip()}
    return sorted({p for p in points if p < steps} | {steps})


def cli(argv: list[str]) -> str:
    """Runs ``rlblocks ARGV`` in this process; its stdout (a failure raises)."""
    from rlblocks.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    if code != 0:
        raise SystemExit(f"rlblocks {' '.join(argv)} exited with {code}")
    return out.getvalue()


def versus_random(run_dir: Path, games: int, which: str) -> dict[str, Any]:
    """``rlblocks evaluate RUN --opponent random --episodes games --checkpoint which``."""
    out = cli(
        ["evaluate", str(run_dir), "--opponent", "random", "--episodes", str(games)]
        + ["--checkpoint", which]
    )
    result = json.loads(out.strip().splitlines()[-1])
    meta = json.loads((Path(result["checkpoint"]) / "meta.json").read_text())
    return {
        "win": result["wins"],
        "draw": result["draws"],
        "loss": result["losses"],
        "checkpoint": Path(result["checkpoint"]).name,
        "iteration": meta["iteration"],
    }


def main(argv: list[str] | None = None) -> None:
    """Trains, plays and prints the JSON lines (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2048 steps, 10 games")
    parser.add_argument("--env", default="pettingzoo.classic.tictactoe_v3:env")
    parser.add_argument("--steps", type=int, default=100_000, help="env steps of training")
    parser.add_argument("--games", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--eval-at", default="", help="comma-separated step counts to evaluate at on the way"
    )
    parser.add_argument("--run-dir", default=None, help="the run directory (default: a temp)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config key (YAML)"
    )
    args = parser.parse_args(argv)
    steps, games = (2048, 10) if args.quick else (args.steps, args.games)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(args.run_dir or Path(tmp) / "run")
        sets = [x for kv in args.set for x in ("--set", kv)]
        train_s = 0.0
        for i, point in enumerate(eval_points(steps, args.eval_at)):
            start = time.perf_counter()
            if i == 0:
                cli(
                    ["train", "--env", args.env, "--seed", str(args.seed), "--run-dir"]
                    + [str(run_dir), "--stop-timesteps", str(point), "--no-progress", *sets]
                )
            else:
                cli(["train", "--resume", str(run_dir), "--stop-timesteps", str(point)])
            train_s += time.perf_counter() - start
            config = json.loads((run_dir / "config.json").read_text())
            rows = list(csv.DictReader((run_dir / "progress.csv").open()))
            line = {
                "env": args.env,
                "seed": args.seed,
                "sets": config_sets(args.set),
                "timesteps_total": int(rows[-1]["timesteps_total"]),
                "train_s": round(train_s, 1),
                "illegal_moves_total": float(rows[-1].get("illegal_moves_total", "nan")),
                "selfplay_eval_games": config.get("selfplay_eval_games"),
                "selfplay_eval_interval": config.get("selfplay_eval_interval"),
                "games": games,
                "best": versus_random(run_dir, games, "auto"),
                "last": versus_random(run_dir, games, "last"),
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
