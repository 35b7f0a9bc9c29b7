"""Hindsight experience replay learns the zoo's goal env, and only HER does.

``rlblocks/zoo-Goal-v0`` (6-bit flipping to a goal, reward 0 on the goal and -1 otherwise)
through the real command line with its defaults (``--algo DQN``; ``her`` is ``auto``, so on)
must reach a training ``success_rate`` of :data:`PASS` within :data:`BUDGET` steps, and
``rlblocks evaluate`` must report the greedy policy's ``success_rate``. The same budget must
NOT be enough (below :data:`FAIL`):

* with ``--set her=false`` (the sparse reward alone);
* with the relabelled rewards not recomputed (``goal_reward`` returns -1 for every pair,
  as the stored rewards are);
* with wrong goals (an env whose ``achieved_goal`` is unrelated noise, so the relabelled
  goals are no step's real goal, as a wrong goal index would give).

Each run takes ~10-15 s of one core.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rlblocks.cli import main
from rlblocks.envs.zoo_goals import GoalBits
from rlblocks.train.offpolicy import DQNTrainer

ENV = "rlblocks/zoo-Goal-v0"
BUDGET = 15_000
PASS, FAIL = 0.8, 0.3


def _success(run: Path) -> list[float]:
    with open(run / "progress.csv", newline="") as f:
        return [float(r["success_rate"]) for r in csv.DictReader(f)]


def test_goal_zoo_learns_with_the_cli_defaults_and_not_without_her(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["train", "--algo", "DQN", "--env", ENV, "--stop-timesteps", str(BUDGET)]
    base += ["--seed", "1", "--no-progress"]
    assert main([*base, "--run-dir", str(tmp_path / "her")]) == 0
    assert "rlblocks train: her: on (her=auto" in capsys.readouterr().out
    curve = _success(tmp_path / "her")
    assert curve[-1] >= PASS, f"HER: success_rate {curve}"
    assert main(["evaluate", str(tmp_path / "her"), "--episodes", "20", "--seed", "0"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["success_rate"] >= PASS, result
    assert main([*base, "--run-dir", str(tmp_path / "off"), "--set", "her=false"]) == 0
    assert "her: off (her=false)" in capsys.readouterr().out
    curve = _success(tmp_path / "off")
    assert curve[-1] < FAIL, f"without HER: success_rate {curve}"


class NoisyGoals(GoalBits):
    """``achieved_goal`` is noise: relabelling then writes goals no step reached."""

    def _obs(self) -> dict[str, np.ndarray]:
        obs = super()._obs()
        obs["achieved_goal"] = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        return obs


def _always_missed(achieved: Any, desired: Any, info: Any) -> np.ndarray:
    return np.full(len(achieved), -1.0, np.float32)


@pytest.mark.parametrize(
    "corruption",
    [{"goal_reward": _always_missed}, {"env": lambda env_config: NoisyGoals()}],
    ids=["reward-not-recomputed", "wrong-goals"],
)
def test_a_corrupted_relabelling_does_not_learn(corruption: dict[str, Any]) -> None:
    with DQNTrainer({"env": ENV, "seed": 1, **corruption}) as trainer:
        assert trainer.her is not None
        row = trainer.fit(stop_timesteps=BUDGET, progress=False)
    assert row["success_rate"] < FAIL, row["success_rate"]
