"""Hindsight relabelling in the off-policy trainers (rlblocks.train.hindsight): ``her=auto``
picks it on a goal env and says so, the config's refusals are one line, a checkpoint with
the replay buffer continues exactly, and ``success_rate`` reaches progress.csv and
evaluation only for goal envs."""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from rlblocks.envs.zoo_goals import GoalBits
from rlblocks.train import restore_trainer
from rlblocks.train.algo_spaces import check_rllib_run
from rlblocks.train.offpolicy import DQNTrainer, SACTrainer, TD3Trainer
from rlblocks.train.offpolicy_config import DQNConfig

GOAL = "rlblocks/zoo-Goal-v0"
FAST = {
    "env": GOAL,
    "seed": 3,
    "timesteps_per_iteration": 120,
    "learning_starts": 60,
    "train_batch_size": 16,
    "train_freq": 2,
    "model": {"fcnet_hiddens": [16]},
}


def test_auto_turns_her_on_for_a_goal_env_and_writes_the_choice(tmp_path: Path) -> None:
    with DQNTrainer(FAST, run_dir=tmp_path) as trainer:
        assert trainer.her is not None and trainer.her.strategy == "future"
        assert trainer.her_note.startswith("her: on (her=auto")
        row = trainer.train()
    assert json.loads((tmp_path / "config.json").read_text())["her"] is True
    assert 0.0 <= row["success_rate"] <= 1.0
    with DQNTrainer({**FAST, "her": "false"}) as trainer:
        assert trainer.her is None and trainer.config.her is False
    with DQNTrainer({**FAST, "env": "CartPole-v1"}, run_dir=tmp_path / "cp") as trainer:
        assert trainer.her is None and trainer.her_note.startswith("her: off")
        assert "success_rate" not in trainer.train()
    with open(tmp_path / "cp" / "progress.csv") as f:
        assert "success_rate" not in next(csv.reader(f))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"her": "maybe"}, "her must be 'auto', True or False, got 'maybe'"),
        ({"her_strategy": "last"}, "her_strategy"),
        ({"her_n_sampled_goal": 0}, "her_n_sampled_goal"),
        ({"goal_reward": "no_colon"}, "goal_reward must be None, a callable or 'module:function'"),
        (
            {"env": "CartPole-v1", "her": True},
            "her=True: env 'CartPole-v1' does not observe a goal",
        ),
        ({"n_step": 3}, "not supported with n_step=3"),
        ({"prioritized_replay": True}, "not supported with prioritized_replay=True"),
        (
            {"goal_reward": "rlblocks.nowhere:fn"},
            "goal_reward='rlblocks.nowhere:fn': cannot import",
        ),
    ],
)
def test_bad_her_settings_are_one_line(change: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(")", r"\)")) as err:
        DQNTrainer({**FAST, **change}).close()
    assert "\n" not in str(err.value)


def test_her_on_the_rllib_backend_is_refused_before_ray() -> None:
    with pytest.raises(ValueError, match="her=True: DQN on --backend rllib cannot honour"):
        check_rllib_run(DQNConfig.from_dict({"env": GOAL, "her": True}), "DQN")


def test_box_actions_relabel_for_sac_and_td3() -> None:
    for make in (SACTrainer, TD3Trainer):
        cfg = {**FAST, "env": "rlblocks/zoo-GoalBox-v0", "her_strategy": "episode"}
        with make(cfg) as trainer:
            assert trainer.her is not None
            row = trainer.train()
        assert row["num_updates"] > 0 and np.isfinite(row["qf_loss"])


def _constant_reward(achieved: Any, desired: Any, info: Any) -> np.ndarray:
    return np.full(len(achieved), -1.0, np.float32)


def test_goal_reward_replaces_compute_reward() -> None:
    with DQNTrainer({**FAST, "goal_reward": _constant_reward}) as trainer:
        assert trainer.her is not None and trainer.her.reward_fn is _constant_reward
        trainer.train()
        batch = trainer.her.sample(16)
    assert (batch.rewards[: trainer.her.n_relabel(16)] == -1.0).all()  # the relabelled rows


def test_resume_with_the_replay_buffer_continues_exactly(tmp_path: Path) -> None:
    trainer = DQNTrainer({**FAST, "checkpoint_replay": True, "num_envs": 2}, run_dir=tmp_path)
    trainer.train()
    path = trainer.save()
    expected = trainer.train()
    weights = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        resumed = restore_trainer(path)
    assert resumed.her is not None
    again = resumed.train()
    for key in ("qf_loss", "episode_return_mean", "success_rate", "num_updates"):
        assert again[key] == expected[key], key
    for p, w in zip(resumed.model.parameters(), weights, strict=True):
        assert torch.equal(p, w)
    resumed.close()


def test_evaluation_reports_the_success_rate(tmp_path: Path) -> None:
    cfg = {**FAST, "evaluation_interval": 1, "evaluation_episodes": 3}
    with DQNTrainer(cfg, run_dir=tmp_path) as trainer:
        row = trainer.train()
        result = trainer.evaluate(episodes=4, seed=0)
    assert 0.0 <= row["evaluation/success_rate"] <= 1.0
    assert result["success_rate"] in (0.0, 0.25, 0.5, 0.75, 1.0)


def test_goal_env_rewards_and_success() -> None:
    env = GoalBits(n_bits=3)
    obs, info = env.reset(seed=1)
    assert info == {"is_success": 0.0}
    for i in np.flatnonzero(obs["observation"] != obs["desired_goal"]):
        obs, reward, terminated, truncated, info = env.step(int(i))
    assert reward == 0.0 and info["is_success"] == 1.0 and not terminated
    obs, reward, *_ = env.step(3)  # the no-op stays on the goal
    assert reward == 0.0
    box = GoalBits(n_bits=3, action="box")
    obs, _ = box.reset(seed=2)
    flip = np.where(obs["observation"] != obs["desired_goal"], 1.0, -1.0)
    assert box.step(flip)[1] == 0.0
    with pytest.raises(ValueError, match="n_bits must be an int in"):
        GoalBits(n_bits=1)


@pytest.mark.parametrize("mode", ["same", "next"])
def test_episode_success_reads_a_vector_envs_batched_infos(mode: str) -> None:
    from gymnasium.vector import AutoresetMode, SyncVectorEnv
    from rlblocks.wrappers.vector_steps import episode_success

    autoreset = AutoresetMode.SAME_STEP if mode == "same" else AutoresetMode.NEXT_STEP
    venv = SyncVectorEnv([lambda: GoalBits(n_bits=2, episode_len=1)] * 2, autoreset_mode=autoreset)
    obs, _ = venv.reset(seed=0)
    # env 0 flips the one differing bit it can see first; env 1 stays (never on its goal)
    first = int(np.flatnonzero(obs["observation"][0] != obs["desired_goal"][0])[0])
    _, rewards, _, truncated, info = venv.step(np.array([first, 2]))
    assert truncated.all()
    assert episode_success(info, 0) == float(rewards[0] == 0.0)
    assert episode_success(info, 1) == 0.0
    venv.close()


class _WinsAtTheEnd(GoalBits):
    """Reset infos say 0, every last step's info says 1."""

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {"is_success": float(truncated)}


@pytest.mark.parametrize("num_envs", [1, 3])
def test_training_success_rate_is_the_last_steps_not_the_resets(num_envs: int) -> None:
    cfg = {**FAST, "env": lambda env_config: _WinsAtTheEnd(), "num_envs": num_envs}
    with DQNTrainer(cfg) as trainer:
        row = trainer.train()
    assert row["episodes_this_iter"] > 0 and row["success_rate"] == 1.0
