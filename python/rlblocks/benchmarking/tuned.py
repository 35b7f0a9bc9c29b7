"""Reruns the tuned configs (``rlblocks/train/tuned_configs``) and reports, per config, whether
each seed reached the config's ``stop`` return, in how many steps and how much wall time.

3 seeds for the configs meant for a CPU, 1 for those meant for a GPU or a long run (those
only with ``--all``). ``--record`` writes the medians to ``tuned_configs/measured.json``,
which ``rlblocks tuned`` shows and the README's table is made from.

Usage: ``python benchmarks/bench_tuned.py [--names cartpole ...] [--seeds 0 1 2] [--record]``.

Examples:
    >>> rows = [TunedRun("demo", 0, True, 1000, 2.0, 480.0),
    ...         TunedRun("demo", 1, False, 3000, 6.0, 400.0)]
    >>> summarize_runs(rows)["demo"]["reached"]
    '1/2'
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import date
from typing import Any

from rlblocks.train.tuned import _MEASURED, TunedConfig, list_tuned, load_tuned


@dataclass
class TunedRun:
    name: str
    seed: int
    reached: bool
    steps: int
    wall_s: float
    episode_return_mean: float


def run_tuned(tuned: TunedConfig, seed: int) -> TunedRun:
    """Trains one seed of a tuned config until its stop return or step budget."""
    from rlblocks.train import PPOConfig, PPOTrainer

    start = time.perf_counter()
    with PPOTrainer(PPOConfig.from_dict({**tuned.config, "seed": seed})) as trainer:
        result = trainer.fit(stop_reward=tuned.stop_reward, stop_timesteps=tuned.stop_timesteps,
                             progress=False)
    ret = float(result.get("episode_return_mean", math.nan))
    reached = tuned.stop_reward is not None and ret >= tuned.stop_reward
    return TunedRun(tuned.name, seed, reached, int(result["timesteps_total"]),
                    time.perf_counter() - start, ret)


def summarize_runs(runs: Sequence[TunedRun]) -> dict[str, dict[str, Any]]:
    """Per config: seeds that reached the target, median steps and wall time of those that
    did (of all seeds if none did)."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r.name for r in runs):
        mine = [r for r in runs if r.name == name]
        ok = [r for r in mine if r.reached] or mine
        out[name] = {
            "reached": f"{sum(r.reached for r in mine)}/{len(mine)}",
            "median_steps": int(statistics.median(r.steps for r in ok)),
            "median_wall_s": round(statistics.median(r.wall_s for r in ok), 1),
            "best_return": round(max(r.episode_return_mean for r in mine), 1),
        }
    return out


def format_table(summary: dict[str, dict[str, Any]]) -> str:
    lines = ["| tuned config | env | model | target (steps budget) | reached | median steps |"
             " median wall s |", "|---|---|---|---|---|---|---|"]
    for name, row in summary.items():
        t = load_tuned(name)
        lines.append(f"| {name} | {t.env} | {t.model_summary} | {t.stop_reward} "
                     f"({t.stop_timesteps:,}) | {row['reached']} | {row['median_steps']:,} | "
                     f"{row['median_wall_s']} |")
    return "\n".join(lines)


def _cpu_name() -> str:
    """``"AMD EPYC 7B13, 2 cores"`` (Linux), else the platform's machine name."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{name}, {os.cpu_count()} cores"


def record(summary: dict[str, dict[str, Any]]) -> None:
    """Merges the figures into ``measured.json`` (with the date and the machine)."""
    data = json.loads(_MEASURED.read_text()) if _MEASURED.is_file() else {}
    machine = _cpu_name()
    for name, row in summary.items():
        data[name] = {**row, "date": date.today().isoformat(), "machine": machine}
    _MEASURED.write_text(json.dumps(dict(sorted(data.items())), indent=1) + "\n")


def main(argv: Sequence[str] | None = None) -> list[TunedRun]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", nargs="+", help="tuned configs (default: every CPU one)")
    parser.add_argument("--all", action="store_true", help="include the GPU / long-run ones")
    parser.add_argument("--seeds", type=int, nargs="+", help="default: 0 1 2 (GPU ones: 0)")
    parser.add_argument("--quick", action="store_true",
                        help="one seed of the configs that finish in seconds (a smoke run)")
    parser.add_argument("--record", action="store_true", help="write measured.json")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    chosen = ([load_tuned(n) for n in args.names] if args.names else
              [t for t in list_tuned() if args.all or t.hardware == "CPU"])
    if args.quick:
        chosen = [t for t in chosen if (t.stop_timesteps or 0) <= 200_000][:2]
    runs: list[TunedRun] = []
    for tuned in chosen:
        seeds = args.seeds or ([0] if args.quick or tuned.hardware != "CPU" else [0, 1, 2])
        for seed in seeds:
            print(f"# {tuned.name} seed {seed}", file=sys.stderr, flush=True)
            run = run_tuned(tuned, seed)
            print(json.dumps(asdict(run)), flush=True)
            runs.append(run)
    summary = summarize_runs(runs)
    print(format_table(summary), flush=True)
    if args.record:
        record(summary)
    return runs


if __name__ == "__main__":
    main()
