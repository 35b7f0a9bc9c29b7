"""Benchmark: wall time of ``rlblocks`` commands in a fresh process (JSON lines + a table).

Every docs example, every user's first run and each of CI's shell blocks starts a new
interpreter, so a command's fixed cost (imports, the trainer's construction, the plot) is
paid each time. Cases, each a new process started with ``OMP_NUM_THREADS=1``:

* ``train 1 iteration``: ``rlblocks train --env CartPole-v1 --stop-timesteps 2048`` (one
  2048-step iteration with its updates, a checkpoint and ``progress.png``);
* ``evaluate``: ``rlblocks evaluate RUN --episodes 1`` on that run;
* ``tuned``: ``rlblocks tuned`` (no torch).

Methods: ``rlblocks`` is the command as installed (``python -m rlblocks.cli``, what the
``rlblocks`` script runs: :func:`rlblocks.cli.console_main`, which builds trainers without
importing torch's compiler, :mod:`rlblocks.cli._startup`); ``rlblocks.cli.main()`` is the
same command called as a library function from ``python -c``, which leaves torch as it
imports itself (its ``torch.optim`` wrappers import ``torch._dynamo`` on first use).

Run ``python benchmarks/bench_cli.py [--quick] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import emit, format_rows, median

__all__ = ["main"]

#: method -> the interpreter arguments that run ``rlblocks ARGS``
METHODS = {
    "rlblocks": ["-m", "rlblocks.cli"],
    "rlblocks.cli.main()": ["-c", "import sys; from rlblocks.cli import main; sys.exit(main())"],
}


def _cases(work: Path) -> dict[str, list[str]]:
    run = str(work / "run")
    return {
        "train 1 iteration": [
            "train", "--env", "CartPole-v1", "--stop-timesteps", "2048", "--run-dir", run,
            "--overwrite", "--no-progress",
        ],
        "evaluate": ["evaluate", run, "--episodes", "1"],
        "tuned": ["tuned"],
    }  # fmt: skip


def _seconds(method: str, args: list[str]) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *METHODS[method], *args], capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"rlblocks {' '.join(args)} ({method}): {done.stderr[-2000:]}")
    return wall


def run(repeats: int) -> list[dict[str, Any]]:
    """Times every case with every method ``repeats`` times (interleaved); one row per case
    and method with the median wall seconds."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = _cases(Path(tmp))
        walls: dict[tuple[str, str], list[float]] = {}
        for _ in range(repeats):
            for case, args in cases.items():  # train first: evaluate reads its run
                for method in METHODS:
                    walls.setdefault((case, method), []).append(_seconds(method, args))
        load = round(os.getloadavg()[0], 2)
        for (case, method), times in walls.items():
            rows.append(
                {"case": case, "method": method, "wall_s": median(times), "repeats": repeats}
            )
    for row in rows:
        base = next(r for r in rows if r["case"] == row["case"] and r["method"] != "rlblocks")
        row["ratio"] = row["wall_s"] / base["wall_s"]
        row["load"] = load
        emit(row)
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat (a smoke run)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per case and method")
    args = parser.parse_args(argv)
    rows = run(1 if args.quick else args.repeats)
    columns = [
        ("case", "case", "<18"),
        ("method", "method", "<20"),
        ("wall s (median)", "wall_s", ">15.2f"),
        ("vs main()", "ratio", ">9.2f"),
    ]
    print(format_rows(rows, columns))
    return rows


if __name__ == "__main__":
    main()
