"""The native off-policy trainers learn through the real command line.

Each run is ``rlblocks.cli.main(["train", ...])`` on the native backend:

* the tuned configs ``cartpole_dqn`` (3-step dueling double Q) and ``pendulum_sac`` (SAC's
  squashed Gaussian) must reach their ``stop`` return (CartPole 150, Pendulum -400) within
  :data:`BUDGETS` steps (below the configs' own budgets, with a margin over the steps the
  configs took on 3 seeds);
* the other off-policy heads learn a zoo bandit, ``rlblocks/zoo-Discrete-v0`` (16 steps an
  episode; acting on anything but the observation scores the random 3.2), to the zoo's pass
  threshold 10 within :data:`ZOO_RUNS`' budget: C51 (distributional DQN, 51 atoms) and
  SAC's Categorical actor. The reward is immediate, so both use gamma 0.5 (C51's support
  [0, 2] holds the returns); SAC's entropy target is 0.2 nats (the automatic 0.98 log 5
  keeps the policy near uniform). TD3 learns the zoo's Box-action bandit in
  ``tests/test_td3.py``;
* DQN with the CLI's defaults on the zoo's masked task (``rlblocks/zoo-MaskedDiscrete-v0``:
  a ``Dict(action_mask, observations)`` observation, ``Discrete(4)`` actions) must pass the
  zoo's threshold while never taking a masked action: the env counts every masked action
  it is given (:attr:`MaskedBanditEnv.counts`) and scores it -1; then ``rlblocks evaluate``
  plays the run greedily (still no masked action) and ``rlblocks export`` writes an ONNX
  artifact of the greedy policy.

The tuned configs' own returns on their envs are measured by ``benchmarks/bench_tuned.py``
and ``benchmarks/bench_suites.py`` (docs/benchmarks.md).
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any

import pytest
from rlblocks.cli import main
from rlblocks.envs import ZOO
from rlblocks.envs.masked_bandit import MaskedBanditEnv
from rlblocks.train.tuned import load_tuned

#: Tuned config -> env steps within which it must reach its stop return here.
BUDGETS = {"cartpole_dqn": 40_000, "pendulum_sac": 10_000}
#: Zoo run -> (algo, env, ``--set`` overrides, env steps within which it must pass the
#: zoo's threshold). Measured on seed 0 (CPU seconds of the run, on a loaded 2-core
#: machine): C51 passed at 3,000 steps (14.62, 13.7 s), SAC discrete at 4,000 (11.4, 38.0 s).
ZOO_RUNS: dict[str, tuple[str, str, dict[str, Any], int]] = {
    "c51": (
        "DQN",
        "rlblocks/zoo-Discrete-v0",
        {
            "num_atoms": 51,
            "v_min": 0.0,
            "v_max": 2.0,
            "gamma": 0.5,
            "epsilon": [[0, 1.0], [2000, 0.05]],
        },
        6_000,
    ),
    "sac_discrete": (
        "SAC",
        "rlblocks/zoo-Discrete-v0",
        {
            "gamma": 0.5,
            "target_entropy": 0.2,
            "train_batch_size": 64,
            "model": {"fcnet_hiddens": [64]},
            "q_model": {"fcnet_hiddens": [64]},
        },
        8_000,
    ),
}
MASKED_ENV = "rlblocks/zoo-MaskedDiscrete-v0"
#: Env steps of the masked DQN run (the CLI's defaults explore for the first 10,000).
MASKED_BUDGET = 20_000


def _curve(run: Path) -> list[tuple[int, float]]:
    with open(run / "progress.csv", newline="") as f:
        return [
            (int(r["timesteps_total"]), round(float(r["episode_return_mean"]), 1))
            for r in csv.DictReader(f)
        ]


@pytest.mark.parametrize("name", list(BUDGETS))
def test_tuned_offpolicy_config_reaches_its_return(name: str, tmp_path: Path) -> None:
    tuned = load_tuned(name)
    assert tuned.algo in ("DQN", "SAC", "TD3") and tuned.stop_reward is not None
    run = tmp_path / name
    argv = ["train", "--tuned", name, "--run-dir", str(run), "--no-progress"]
    argv += ["--set", f"stop.timesteps_total={BUDGETS[name]}"]
    start = time.perf_counter()
    assert main(argv) == 0
    wall = time.perf_counter() - start
    curve = _curve(run)
    print(f"{name}: {curve[-1][0]} steps, return {curve[-1][1]}, {wall:.1f} s")
    assert curve[-1][1] >= tuned.stop_reward, (
        f"{name} ({tuned.algo}): mean return {curve[-1][1]} after {curve[-1][0]} steps, "
        f"below {tuned.stop_reward}; curve {curve}"
    )


@pytest.mark.parametrize("name", list(ZOO_RUNS))
def test_an_offpolicy_head_learns_a_zoo_bandit(name: str, tmp_path: Path) -> None:
    algo, env, overrides, budget = ZOO_RUNS[name]
    entry = ZOO[env]
    run = tmp_path / name
    argv = ["train", "--algo", algo, "--env", env, "--seed", "0", "--run-dir", str(run)]
    argv += ["--stop-reward", str(entry.threshold), "--stop-timesteps", str(budget)]
    for key, value in overrides.items():
        argv += ["--set", f"{key}={json.dumps(value)}"]
    start = time.perf_counter()
    assert main([*argv, "--no-progress"]) == 0
    wall = time.perf_counter() - start
    config = json.loads((run / "config.json").read_text())
    assert all(config[key] == value for key, value in overrides.items() if "model" not in key)
    curve = _curve(run)
    print(f"{name} on {env}: {curve[-1][0]} steps, return {curve[-1][1]}, {wall:.1f} s")
    assert curve[-1][1] >= entry.threshold > entry.random_return, (
        f"{name} ({algo}) on {env}: mean return {curve[-1][1]} after {curve[-1][0]} steps, "
        f"below {entry.threshold} (random {entry.random_return:.2f}); curve {curve}"
    )


def test_dqn_with_an_action_mask_learns_and_never_takes_a_masked_action(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = ZOO[MASKED_ENV]
    run = tmp_path / "masked"
    MaskedBanditEnv.reset_counts()
    argv = ["train", "--algo", "DQN", "--env", MASKED_ENV, "--run-dir", str(run)]
    argv += ["--stop-timesteps", str(MASKED_BUDGET), "--no-progress"]
    start = time.perf_counter()
    assert main(argv) == 0
    wall = time.perf_counter() - start
    counts = dict(MaskedBanditEnv.counts)
    curve = _curve(run)
    print(f"DQN on {MASKED_ENV}: {curve[-1][0]} steps, return {curve[-1][1]}, {wall:.1f} s")
    assert counts["steps"] >= curve[-1][0] > 0  # the envs ran in this process
    assert counts["masked"] == 0, f"{counts['masked']} masked actions taken in training"
    assert curve[-1][1] >= entry.threshold, (
        f"DQN on {MASKED_ENV}: mean return {curve[-1][1]} after {curve[-1][0]} steps, below "
        f"{entry.threshold} (legal-random {entry.random_return}); curve {curve}"
    )

    capsys.readouterr()
    MaskedBanditEnv.reset_counts()
    assert main(["evaluate", str(run), "--episodes", "10", "--seed", "1"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert MaskedBanditEnv.counts["steps"] >= 10 * 16
    assert MaskedBanditEnv.counts["masked"] == 0
    assert result["episode_return_mean"] >= entry.threshold, result

    pytest.importorskip("onnx", reason="the export extra is not installed")
    artifact = tmp_path / "masked_dqn.onnx"
    assert main(["export", str(run), "--out", str(artifact)]) == 0
    assert artifact.is_file() and artifact.stat().st_size > 0
    assert Path(f"{artifact}.json").is_file()
