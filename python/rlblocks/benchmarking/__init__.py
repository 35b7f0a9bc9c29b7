"""Benchmarks shipped with the package: ``rlblocks bench NAME`` runs ``BENCHMARKS[NAME]``.

Each module has ``main(argv) -> None`` and prints JSON lines and a table. This table is
read by the command line without importing any benchmark (or torch).
"""

#: Benchmark name -> module (each has ``main(argv)``).
BENCHMARKS = {
    "preprocessors": "rlblocks.benchmarking.preprocessors",
    "atari": "rlblocks.benchmarking.atari",
    "filters": "rlblocks.benchmarking.filters",
    "sequences": "rlblocks.benchmarking.sequences",
    "distributions": "rlblocks.benchmarking.distributions",
    "models": "rlblocks.benchmarking.models",
    "train": "rlblocks.benchmarking.train",
    "tuned": "rlblocks.benchmarking.tuned",
    "export": "rlblocks.benchmarking.export",
}
