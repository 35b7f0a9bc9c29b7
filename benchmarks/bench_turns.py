"""Turn-based self-play: a PettingZoo classic game trained by ``rlblocks train --env GAME``
(the native multi-agent PPO with its defaults: one shared policy on every seat and
:data:`rlblocks.cli.train_defaults.TURN_DEFAULTS`), then ``rlblocks evaluate RUN --opponent
random --episodes GAMES``: greedy games against a random legal player, with the checkpoint
``evaluate`` picks (``best/``, kept by the in-training evaluation against the random
player: exact for a game small enough, tictactoe, ``selfplay_eval_exact``; played and
confirmed games for the others) and, for comparison, with the newest (``--checkpoint
last``).

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

**Tictactoe only** (a game small enough to enumerate), each checkpoint also gets
``exact``: the exact probabilities of its greedy policy's win / draw / loss against the
random legal player from each seat (:func:`rlblocks.train.exact_games.exact_versus_random`:
every random move enumerated, not sampled), ``expected_losses`` in ``--games`` games with
the seats alternating and ``p_no_loss``, the chance that those games hold no loss. The
played games stay the measure of the target; the exact figures say whether the policy can
lose at all (an exact loss probability of 0 loses no game, in any number of games).

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


def exact_scores(checkpoint: Path, games: int) -> dict[str, Any]:
    """The exact chances of ``checkpoint``'s greedy policy against a random legal player
    from each seat, its expected losses in ``games`` games and the chance of none (module
    docstring; tictactoe-sized games only)."""
    import warnings

    from rlblocks.train.exact_games import exact_versus_random, expected_losses
    from rlblocks.train.restoring import restore_trainer
    from rlblocks.train.selfplay import policy_mover

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        trainer = restore_trainer(str(checkpoint), log=False)
    hub = trainer.fresh_hub(1)
    try:
        mover = policy_mover(trainer.policies, hub, explore=False)
        env = hub.envs[0]
        owner = {a: pid for pid, spec in hub.specs.items() for a in spec.agents}
        seats = {
            seat: exact_versus_random(env, mover, seat, policy_of=owner.__getitem__)
            for seat in env.possible_agents
        }
    finally:
        hub.close()
        trainer.close()
    mean, none = expected_losses([s["loss"] for s in seats.values()], games)
    return {
        "by_seat": {a: {k: round(v, 6) for k, v in s.items()} for a, s in seats.items()},
        "expected_losses": round(mean, 4),
        "p_no_loss": round(none, 4),
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
            if "tictactoe" in args.env:  # small enough to enumerate (module docstring)
                line["exact"] = {
                    which: exact_scores(run_dir / line[which]["checkpoint"], games)
                    for which in ("best", "last")
                }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
