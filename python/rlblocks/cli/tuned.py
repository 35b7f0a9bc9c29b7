"""``rlblocks tuned [NAME]``: lists the tuned configs shipped with rlblocks, or prints one's
YAML (:mod:`rlblocks.train.tuned`).

Examples:
    >>> from rlblocks.cli import build_parser
    >>> build_parser().parse_args(["tuned"]).name is None
    True
"""

from __future__ import annotations

import argparse
from typing import Any

from rlblocks.cli._args import add_command


def add_parser(sub: Any) -> None:
    """Adds ``tuned`` to an argparse subparsers object."""
    tuned = add_command(
        sub,
        "tuned",
        run,
        help="list the tuned configs, or print one",
        description="Lists the tuned configs shipped with rlblocks (env, model, target, last "
        "measurement), or prints one's YAML; run one with rlblocks train --tuned NAME.",
    )
    tuned.add_argument("name", nargs="?", help="print this tuned config's YAML")
    tuned.add_argument("--list", action="store_true", help="list them (the default)")


def _measured(t: Any) -> str:
    """The last measurement of tuned config ``t``: ``bench_tuned.py --record``'s, else the
    suites table's (``bench_suites.py``)."""
    m, suite = t.measured, t.suite
    if m:
        return f"{m['reached']}, {m['median_steps']:,}, {m['median_wall_s']} s ({m['date']})"
    if suite:
        digits = 3 if abs(suite["mean"]) < 10 else 1  # MiniGrid's returns lie in [0, 1]
        return (
            f"suites: {suite['reached']} seeds reached {suite['target']:g}, evaluation "
            f"{suite['mean']:.{digits}f} ± {suite['std']:.{digits}f}, {suite['steps']:,} steps "
            "(docs/benchmarks.md)"
        )
    return "not measured"


def run(args: argparse.Namespace) -> int:
    """Prints one tuned config's YAML, or a table of them all."""
    from rlblocks.train.tuned import list_tuned, load_tuned

    if args.name:
        print(load_tuned(args.name).path.read_text(), end="")
        return 0
    rows = [
        (
            "name",
            "algo",
            "env",
            "model",
            "target",
            "last measured (seeds reached, median steps, median wall s)",
        )
    ]
    for t in list_tuned():
        target = f"{t.stop_reward:g} in {t.stop_timesteps:,} steps"
        if t.hardware != "CPU":
            target += " (GPU or long run)"
        if t.zoo is not None:
            target += f"; rl-zoo3: {t.zoo[0]:g} in {t.zoo[1]:,}"
        if t.extra:
            target += f" (needs rlblocks[{t.extra}])"
        measured = _measured(t)
        rows.append((t.name, t.algo, t.env, t.model_summary, target, measured))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[5])
    print(
        "\nrun one: rlblocks train --tuned NAME [--set key=value ...]; "
        "show one: rlblocks tuned NAME"
    )
    return 0
