"""Zoo tasks (``rlblocks.envs.ZOO``) learn on RLlib: ``rlblocks train --backend rllib``.

The CLI's defaults and nothing else (``model.use_lstm`` / ``use_attention`` only where the
task needs memory); the run stops at the id's ``reward_threshold`` (the zoo's pass
threshold) and must get there within the entry's step budget. The subset below keeps CI's
Ray step to about five minutes: one task per path through rlblocks' RLlib module and
connectors (fully connected, vision, Repeated, gymnasium Sequence and nested Dict
observations, action masks, Dict and Box actions, an LSTM). The command runs in the test's
process, on the module's Ray (``conftest.run_cli``).
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

import rlblocks.envs as envs  # noqa: E402
from conftest import run_cli  # noqa: E402

RLLIB_ZOO = [
    "rlblocks/zoo-BoxRank1-v0",
    "rlblocks/zoo-Image-v0",
    "rlblocks/zoo-RepeatedLast-v0",
    "rlblocks/zoo-Sequence-v0",
    "rlblocks/zoo-MaskedDiscrete-v0",
    "rlblocks/zoo-Dict-v0",
    "rlblocks/zoo-DictAction-v0",
    "rlblocks/zoo-BoxAction-v0",
    "rlblocks/zoo-RecallLSTM-v0",
]


@pytest.mark.parametrize("env_id", RLLIB_ZOO)
def test_zoo_env_learns_on_rllib(env_id: str, tmp_path: Path, local_ray: Any) -> None:
    entry = envs.ZOO[env_id]
    run = tmp_path / "run"
    argv = [
        "train",
        "--env",
        env_id,
        "--backend",
        "rllib",
        "--stop-timesteps",
        str(entry.budget),
        "--run-dir",
        str(run),
        "--no-progress",
    ]
    for key, value in entry.model.items():
        argv += ["--set", f"model.{key}={json.dumps(value)}"]
    start = time.perf_counter()
    out = run_cli(*argv)
    wall = time.perf_counter() - start
    assert out.returncode == 0, out.stderr[-3000:]
    with open(run / "progress.csv", newline="") as f:
        curve = [
            (int(r["timesteps_total"]), round(float(r["episode_return_mean"]), 2))
            for r in csv.DictReader(f)
        ]
    print(
        f"{env_id} (rllib): {curve[-1][1]} after {curve[-1][0]} steps (random "
        f"{entry.random_return:.2f}, pass {entry.threshold}), {wall:.0f} s"
    )
    assert curve[-1][1] >= entry.threshold > entry.random_return, (
        f"{env_id}: mean return {curve[-1][1]} after {curve[-1][0]} steps, below the pass "
        f"threshold {entry.threshold} (random {entry.random_return:.2f}); curve {curve}"
    )
    assert curve[-1][0] <= entry.budget + 2048
    if entry.first_return is not None:
        assert curve[0][1] >= entry.first_return, (
            f"{env_id}: first iteration's mean return {curve[0][1]} < {entry.first_return}: "
            f"the action mask was not honoured (legal-random {entry.random_return})"
        )
