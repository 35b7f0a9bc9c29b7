"""``success_rate`` in progress.csv for PPO runs too (rlblocks.train.success, the one
implementation the off-policy trainers use): the last step's ``is_success`` / ``success`` of
the window's episodes, a column only for goal envs, an evaluation column beside it, and the
window carried by a checkpoint."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
from rlblocks.envs.zoo_goals import GoalBits
from rlblocks.train import restore_trainer
from rlblocks.train.ppo import PPOTrainer

SMALL = {
    "seed": 5,
    "num_envs": 2,
    "train_batch_size": 48,
    "sgd_minibatch_size": 24,
    "num_sgd_iter": 1,
    "model": {"fcnet_hiddens": [16]},
}


class _Flags(GoalBits):
    """Reset infos and mid-episode infos say the opposite of the last step's flag."""

    def __init__(self, key: str, last: float) -> None:
        super().__init__()
        self.key, self.last = key, last

    def reset(self, **kwargs: Any) -> Any:
        obs, _ = super().reset(**kwargs)
        return obs, {self.key: 1.0 - self.last}

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, _ = super().step(action)
        end = terminated or truncated
        return obs, reward, terminated, truncated, {self.key: self.last if end else 1 - self.last}


@pytest.mark.parametrize(("key", "last"), [("is_success", 1.0), ("success", 0.0)])
def test_ppo_success_rate_is_the_last_steps_flag(key: str, last: float) -> None:
    cfg = {**SMALL, "env": lambda env_config: _Flags(key, last)}
    with PPOTrainer(cfg) as trainer:
        row = trainer.train()
    assert row["episodes_this_iter"] > 0 and row["success_rate"] == last


def test_ppo_goal_env_has_the_columns_and_a_checkpoint_keeps_the_window(tmp_path: Path) -> None:
    cfg = {**SMALL, "env": "rlblocks/zoo-Goal-v0", "evaluation_interval": 1,
           "evaluation_episodes": 2}  # fmt: skip
    with PPOTrainer(cfg, run_dir=tmp_path / "goal") as trainer:
        row = trainer.train()
        path = trainer.save()
        window = trainer.successes.state()
    assert 0.0 <= row["success_rate"] <= 1.0 and len(window) == row["episodes_total"]
    assert 0.0 <= row["evaluation/success_rate"] <= 1.0
    with open(tmp_path / "goal" / "progress.csv") as f:
        header = next(csv.reader(f))
    assert "success_rate" in header and "evaluation/success_rate" in header
    with restore_trainer(path, log=False) as again:
        assert again.successes.state() == window
    with PPOTrainer({**SMALL, "env": "CartPole-v1"}, run_dir=tmp_path / "cp") as trainer:
        assert "success_rate" not in trainer.train()
    with open(tmp_path / "cp" / "progress.csv") as f:
        assert "success_rate" not in next(csv.reader(f))
