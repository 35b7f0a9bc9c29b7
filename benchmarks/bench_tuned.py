"""Reruns the tuned configs (``rlblocks/train/tuned_configs``) and reports, per config, whether
each seed reached the config's ``stop`` return, in how many steps and how much wall time.

3 seeds for the configs meant for a CPU, 1 for those meant for a GPU or a long run (those
only with ``--all``). ``--record`` writes the medians to ``tuned_configs/measured.json``,
which ``rlblocks tuned`` shows and the table of docs/training.md is made from.

Usage: ``python benchmarks/bench_tuned.py [--names cartpole ...] [--seeds 0 1 2] [--record]``.

Examples:
    >>> rows = [RunResult("demo", "rlblocks", 0, 2.0, 1000, True, 480.0),
    ...         RunResult("demo", "rlblocks", 1, 6.0, 3000, False, 400.0)]
    >>> summarize_runs(rows)["demo"]["reached"]
    '1/2'
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from collections.abc import Sequence
from datetime import date
from typing import Any

from _harness import emit
from _ppo_runs import RunResult, run_rlblocks
from rlblocks.train.tuned import _MEASURED, list_tuned, load_tuned


def summarize_runs(runs: Sequence[RunResult]) -> dict[str, dict[str, Any]]:
    """Per config (a run's ``case``): seeds that reached the target, median steps and wall
    time of those that did (of all seeds if none did)."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r.case for r in runs):
        mine = [r for r in runs if r.case == name]
        ok = [r for r in mine if r.reached] or mine
        out[name] = {
            "reached": f"{sum(bool(r.reached) for r in mine)}/{len(mine)}",
            "median_steps": int(statistics.median(r.env_steps for r in ok)),
            "median_wall_s": round(statistics.median(r.wall_s for r in ok), 1),
            "best_return": round(max(r.final_return for r in mine), 1),
        }
    return out


def format_table(summary: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| tuned config | env | model | target (steps budget) | reached | median steps |"
        " median wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in summary.items():
        t = load_tuned(name)
        lines.append(
            f"| {name} | {t.env} | {t.model_summary} | {t.stop_reward} "
            f"({t.stop_timesteps:,}) | {row['reached']} | {row['median_steps']:,} | "
            f"{row['median_wall_s']} |"
        )
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


def main(argv: Sequence[str] | None = None) -> list[RunResult]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", nargs="+", help="tuned configs (default: every CPU one)")
    parser.add_argument("--all", action="store_true", help="include the GPU / long-run ones")
    parser.add_argument("--seeds", type=int, nargs="+", help="default: 0 1 2 (GPU ones: 0)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="one seed of the configs that finish in seconds (a smoke run)",
    )
    parser.add_argument("--record", action="store_true", help="write measured.json")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    chosen = (
        [load_tuned(n) for n in args.names]
        if args.names
        else [t for t in list_tuned() if args.all or t.hardware == "CPU"]
    )
    if args.quick:
        chosen = [t for t in chosen if (t.stop_timesteps or 0) <= 200_000][:2]
    runs: list[RunResult] = []
    for tuned in chosen:
        seeds = args.seeds or ([0] if args.quick or tuned.hardware != "CPU" else [0, 1, 2])
        for seed in seeds:
            print(f"# {tuned.name} seed {seed}", file=sys.stderr, flush=True)
            config = {**tuned.config, "seed": seed}
            run = run_rlblocks(
                tuned.name, config, seed, tuned.stop_reward, tuned.stop_timesteps, tuned.algo
            )
            emit(run)
            runs.append(run)
    summary = summarize_runs(runs)
    print(format_table(summary), flush=True)
    if args.record:
        record(summary)
    return runs


if __name__ == "__main__":
    main()
