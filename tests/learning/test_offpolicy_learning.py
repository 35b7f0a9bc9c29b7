"""The native off-policy trainers learn through the real command line.

Each run is ``rlblocks.cli.main(["train", ...])`` on the native backend:

* the tuned configs ``cartpole_dqn``, ``cartpole_c51`` (distributional), ``pendulum_sac``,
  ``cartpole_sac_discrete`` (a Categorical actor) and ``pendulum_td3`` must reach their
  ``stop`` return (CartPole 150, Pendulum -400, TD3's Pendulum -200) within :data:`BUDGETS`
  steps (below the configs' own budgets, with a margin over the steps the configs took on
  3 seeds);
* DQN with the CLI's defaults on the zoo's masked task (``rlblocks/zoo-MaskedDiscrete-v0``:
  a ``Dict(action_mask, observations)`` observation, ``Discrete(4)`` actions) must pass the
  zoo's threshold while never taking a masked action: the env counts every masked action
  it is given (:attr:`MaskedBanditEnv.counts`) and scores it -1; then ``rlblocks evaluate``
  plays the run greedily (still no masked action) and ``rlblocks export`` writes an ONNX
  artifact of the greedy policy.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
from rlblocks.cli import main
from rlblocks.envs import ZOO
from rlblocks.envs.masked_bandit import MaskedBanditEnv
from rlblocks.train.tuned import load_tuned

#: Tuned config -> env steps within which it must reach its stop return here.
BUDGETS = {
    "cartpole_dqn": 40_000,
    "cartpole_c51": 40_000,
    "pendulum_sac": 10_000,
    "cartpole_sac_discrete": 40_000,
    "pendulum_td3": 15_000,
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
