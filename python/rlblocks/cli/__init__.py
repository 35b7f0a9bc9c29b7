"""The ``rlblocks`` command line: ``rlblocks train|evaluate|export|tuned|plot|bench ...``.

It sits above the library: one module per command, each with ``add_parser(sub)`` and
``run(args)``; a command imports what it runs (torch, :mod:`rlblocks.train`,
:mod:`rlblocks.export`, :mod:`rlblocks.rllib`) only when it runs, so ``--help`` imports no
torch. No library module imports this package.

Examples:
    >>> build_parser().parse_args(["train", "--env", "CartPole-v1"]).command
    'train'
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rlblocks.cli import bench, evaluate, export, plot, train, tuned

__all__ = ["build_parser", "console_main", "main"]

#: The commands, in the order ``rlblocks --help`` lists them.
_COMMANDS = (bench, train, evaluate, export, tuned, plot)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``rlblocks``: ``args.func(args)`` runs the chosen command."""
    from rlblocks import __version__

    parser = argparse.ArgumentParser(
        prog="rlblocks",
        description="The rlblocks command line: train, evaluate, export and "
        "plot PPO runs, list the tuned configs, run the benchmarks. `rlblocks COMMAND --help` "
        "describes a command (no command imports torch for its help).",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"rlblocks {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in _COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``rlblocks ARGV`` and returns its exit code (2 for a user's error)."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))


def console_main() -> int:
    """The ``rlblocks`` script and ``python -m rlblocks.cli``: :func:`main` in a process of
    its own, which skips an import that training and evaluating never use
    (:mod:`rlblocks.cli._startup`)."""
    from rlblocks.cli import _startup

    _startup.standalone = True
    return main()
