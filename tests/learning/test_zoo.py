"""Every task of the zoo (``rlblocks.envs.ZOO``) learns with the CLI's defaults.

Each run is the real command line, ``rlblocks.cli.main(["train", "--env", ID, ...])``, with
nothing set but ``model.use_lstm`` / ``model.use_attention`` where the task needs memory
(and ``model.entity_encoder`` where a list's order matters). The float64 twins of the
rank-2 and rank-3 Box tasks (:data:`TWINS`) are not trained here: their models are the
float32 tasks' (``BoxRank2``, ``BoxRank3``) and the float64 observation's cast to the
model's float32 is learned by ``BoxRank1Float64``.
The id's ``reward_threshold`` is the zoo's pass threshold, so a run stops as soon as its mean
return reaches it; it must do so within the entry's step budget. Masked tasks must also
score the legal-random return from their first iteration (honoured masks), which a policy
that ignores the masks cannot.

The runs go to ``RLBLOCKS_ZOO_WORKERS`` (default 2) worker processes, started once for the
session: every test submits its env when the fixture starts and waits for its own result,
so selecting a few ids (``-k Grid``) trains only those. A summary table (steps, return,
wall seconds) is printed at the end of the session.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import time
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import rlblocks.envs as envs

WORKERS = int(os.environ.get("RLBLOCKS_ZOO_WORKERS", "2"))
#: Seconds a test waits for its run (the runs before it in the queue included).
TIMEOUT_S = 900
#: Float64 twins of tasks whose model and dtype are each learned by another id here.
TWINS = ("rlblocks/zoo-BoxRank2Float64-v0", "rlblocks/zoo-BoxRank3Float64-v0")
#: Ids (substrings) of the tasks with the slowest models (conv nets, recurrent nets, the
#: complex-input net over nested spaces, the entity / graph / text encoders).
SLOW = ("Grid", "Recall", "Dict-", "Tuple-", "BoxRank3", "Sequence", "Graph", "Text")


def train_cli(env_id: str, run_dir: str) -> dict[str, Any]:
    """Runs ``rlblocks train`` for one zoo id in this (worker) process; the exit code, the
    wall and CPU seconds (the CPU time is what the run costs on an idle machine) and the rows
    of ``progress.csv``."""
    from rlblocks.cli import main

    entry = envs.ZOO[env_id]
    argv = [
        "train",
        "--env",
        env_id,
        "--stop-timesteps",
        str(entry.budget),
        "--run-dir",
        run_dir,
        "--no-progress",
    ]
    for key, value in entry.model.items():
        argv += ["--set", f"model.{key}={json.dumps(value)}"]
    start, cpu = time.perf_counter(), time.process_time()
    rc = main(argv)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    path = Path(run_dir) / "progress.csv"
    rows: list[dict[str, str]] = []
    if path.is_file():
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    return {"rc": rc, "wall_s": wall, "cpu_s": cpu, "rows": rows}


def _selected_ids(session: pytest.Session) -> list[str]:
    ids = []
    for item in session.items:
        callspec, module = getattr(item, "callspec", None), getattr(item, "module", None)
        if callspec is not None and module is not None and module.__name__ == __name__:
            env_id = callspec.params.get("env_id")
            if env_id is not None and env_id not in ids:
                ids.append(env_id)
    # the slowest models first, then the longest budgets: the workers finish together
    return sorted(ids, key=lambda i: (not any(s in i for s in SLOW), -envs.ZOO[i].budget))


@pytest.fixture(scope="module")
def zoo_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future]]:
    """Starts the selected zoo runs on ``WORKERS`` processes; env id -> future result."""
    root = tmp_path_factory.mktemp("zoo")
    pool = ProcessPoolExecutor(max_workers=WORKERS, mp_context=multiprocessing.get_context("spawn"))
    start = time.perf_counter()
    futures = {
        env_id: pool.submit(train_cli, env_id, str(root / env_id.split("/")[-1]))
        for env_id in _selected_ids(request.session)
    }
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)
    lines = [
        f"zoo (native, {WORKERS} workers): {time.perf_counter() - start:.0f} s in all",
        f"{'env':38} {'random':>7} {'pass':>6} {'return':>7} {'steps':>7} {'wall s':>7} "
        f"{'cpu s':>6}",
    ]
    for env_id, future in futures.items():
        entry = envs.ZOO[env_id]
        if future.done() and not future.cancelled() and future.exception() is None:
            result = future.result()
            rows = result["rows"]
            ret = float(rows[-1]["episode_return_mean"]) if rows else float("nan")
            steps = int(rows[-1]["timesteps_total"]) if rows else 0
            lines.append(
                f"{env_id:38} {entry.random_return:7.2f} {entry.threshold:6.1f} "
                f"{ret:7.2f} {steps:7d} {result['wall_s']:7.1f} "
                f"{result['cpu_s']:6.1f}"
            )
        else:
            lines.append(f"{env_id:38} (no result)")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        for line in lines:
            reporter.write_line(line)


@pytest.mark.parametrize("env_id", [i for i in envs.ZOO if i not in TWINS])
def test_zoo_env_learns_with_cli_defaults(env_id: str, zoo_runs: dict[str, Future]) -> None:
    assert {i.replace("Float64", "") for i in TWINS} | {"rlblocks/zoo-BoxRank1Float64-v0"} <= set(
        envs.ZOO
    )
    entry = envs.ZOO[env_id]
    result = zoo_runs[env_id].result(timeout=TIMEOUT_S)
    rows = result["rows"]
    assert result["rc"] == 0 and rows, f"{env_id}: rlblocks train exited with {result['rc']}"
    curve = [(int(r["timesteps_total"]), round(float(r["episode_return_mean"]), 2)) for r in rows]
    final = curve[-1][1]
    assert entry.threshold > entry.random_return
    assert final >= entry.threshold, (
        f"{env_id}: mean return {final} after {curve[-1][0]} steps, below the pass threshold "
        f"{entry.threshold} (random {entry.random_return:.2f}); curve {curve}"
    )
    assert curve[-1][0] <= entry.budget + 2048
    if entry.first_return is not None:
        assert curve[0][1] >= entry.first_return, (
            f"{env_id}: first iteration's mean return {curve[0][1]} < {entry.first_return}: "
            f"the action mask was not honoured (legal-random {entry.random_return})"
        )
