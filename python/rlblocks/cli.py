"""The ``rlblocks`` command line: ``rlblocks train|evaluate|plot|bench ...``.

``train``, ``evaluate`` and ``plot`` are documented in :mod:`rlblocks.train.cli`;
``bench [NAME ...] [--quick]`` runs the benchmarks.

Examples:
    >>> main(["bench", "no-such-benchmark"])  # the error goes to stderr
    2
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from rlblocks.benchmarking import BENCHMARKS


def _bench(args: argparse.Namespace) -> int:
    names = list(BENCHMARKS)
    if args.list:
        print("\n".join(names))
        return 0
    chosen = args.names or ["preprocessors"]
    if chosen == ["all"]:
        chosen = names
    unknown = [n for n in chosen if n not in BENCHMARKS]
    if unknown:
        print(
            f"rlblocks bench: unknown benchmark(s) {unknown}; available: {names} or 'all'",
            file=sys.stderr,
        )
        return 2
    for name in chosen:
        print(f"== rlblocks bench {name} ==", flush=True)
        module = importlib.import_module(BENCHMARKS[name])
        module.main(["--quick"] if args.quick else [])
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from rlblocks import __version__

    parser = argparse.ArgumentParser(
        prog="rlblocks", description="The rlblocks command line: train, evaluate, export and "
        "plot PPO runs, list the tuned configs, run the benchmarks. `rlblocks COMMAND --help` "
        "describes a command (no command imports torch for its help).")
    parser.add_argument("--version", action="version", version=f"rlblocks {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="run benchmarks (JSON lines + a table)")
    bench.add_argument("names", nargs="*", help="benchmarks to run (default: preprocessors; 'all')")
    bench.add_argument("--quick", action="store_true", help="fewer cases and repeats")
    bench.add_argument("--list", action="store_true", help="list the available benchmarks")
    bench.set_defaults(func=_bench)
    from rlblocks.train.cli import add_subcommands

    add_subcommands(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
