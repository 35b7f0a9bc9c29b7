"""Kernel benchmarks against pure numpy, shipped with the package: ``rlblocks bench NAME``
runs ``BENCHMARKS[NAME]`` on the user's own machine.

Each module has ``main(argv)`` and prints JSON lines and a table. This table is
read by the command line without importing any benchmark (or torch). The comparisons with
other libraries (Stable-Baselines3, envpool, RLlib, training runs) are the scripts in the
repository's ``benchmarks/``.
"""

#: Benchmark name -> module (each has ``main(argv)``).
BENCHMARKS = {
    "preprocessors": "rlblocks.benchmarking.preprocessors",
    "atari": "rlblocks.benchmarking.atari",
    "filters": "rlblocks.benchmarking.filters",
    "sequences": "rlblocks.benchmarking.sequences",
}
