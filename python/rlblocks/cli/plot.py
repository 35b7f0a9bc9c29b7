"""``rlblocks plot RUN_DIR``: one ``progress.csv`` column against another, as a PNG
(:mod:`rlblocks.train.plot`).

Examples:
    >>> from rlblocks.cli import build_parser
    >>> build_parser().parse_args(["plot", "runs/a"]).y
    'episode_return_mean'
"""

from __future__ import annotations

import argparse
from typing import Any

from rlblocks.cli._args import add_command, add_run_dir


def add_parser(sub: Any) -> None:
    """Adds ``plot`` to an argparse subparsers object."""
    plot = add_command(
        sub,
        "plot",
        run,
        help="learning curve PNG of a run",
        description="Plots one progress.csv column against another into a PNG (the "
        "directory of --out must exist).",
    )
    add_run_dir(plot, help="run directory")
    plot.add_argument("--out", default=None, help="PNG path (default RUN_DIR/progress.png)")
    plot.add_argument("--x", default="timesteps_total", help="x column of progress.csv")
    plot.add_argument("--y", default="episode_return_mean", help="y column of progress.csv")


def run(args: argparse.Namespace) -> int:
    """Writes the PNG and prints its path."""
    from rlblocks.train.plot import plot_run

    print(plot_run(args.run_dir, args.out, x=args.x, y=args.y))
    return 0
