"""``rlblocks train --env ID`` alone: defaults decided from the env's spaces (continuous
control gets observation normalisation and reward scaling, printed and in config.json), a
user's ``--set`` wins, MountainCar's start names the tuned config that solves it, and a goal
env's names the algorithm that relabels its goals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rlblocks.cli import main

TINY = ["--set", "num_envs=2", "--set", "train_batch_size=64", "--stop-timesteps", "64"]


def _train(tmp_path: Path, *args: str) -> dict:
    run = tmp_path / "run"
    assert main(["train", *args, *TINY, "--no-progress", "--run-dir", str(run)]) == 0
    config: dict = json.loads((run / "config.json").read_text())
    return config


def test_continuous_control_normalises_by_default(tmp_path, capsys) -> None:
    config = _train(tmp_path, "--env", "Pendulum-v1")
    out = capsys.readouterr().out
    assert (
        "rlblocks train: continuous control (Box observations and actions): "
        "observation_filter=MeanStdFilter, normalize_reward=True (--set either to change)"
    ) in out
    assert config["observation_filter"] == "MeanStdFilter"
    assert config["normalize_reward"] is True


def test_a_users_set_wins_and_discrete_envs_keep_rllibs_defaults(tmp_path, capsys) -> None:
    config = _train(tmp_path, "--env", "Pendulum-v1", "--set", "observation_filter=NoFilter")
    assert config["observation_filter"] == "NoFilter" and config["normalize_reward"] is True
    assert "normalize_reward=True (--set" in capsys.readouterr().out
    config = _train(tmp_path / "cartpole", "--env", "CartPole-v1")
    assert config["observation_filter"] == "NoFilter" and config["normalize_reward"] is False
    assert "continuous control" not in capsys.readouterr().out


def test_a_tuned_config_or_an_off_policy_algo_is_left_as_it_is(tmp_path, capsys) -> None:
    config = _train(tmp_path, "--tuned", "pendulum_sac", "--set", "learning_starts=16")
    assert config["observation_filter"] == "NoFilter"
    config = _train(tmp_path / "sac", "--algo", "SAC", "--env", "Pendulum-v1")
    assert config["observation_filter"] == "NoFilter"
    assert "continuous control" not in capsys.readouterr().out


@pytest.mark.parametrize("algo", ["PPO", "DQN"])
def test_mountaincar_names_the_tuned_config_that_solves_it(tmp_path, capsys, algo) -> None:
    small = ["--set", "learning_starts=16"] if algo == "DQN" else []
    _train(tmp_path, "--algo", algo, "--env", "MountainCar-v0", *small)
    assert (
        "rlblocks train: note: MountainCar-v0 is a hard-exploration env: these defaults will "
        "not solve it (the return stays -200); `rlblocks train --tuned mountaincar_dqn` does"
    ) in capsys.readouterr().out


def test_a_turn_based_game_with_masks_gets_an_entropy_bonus(tmp_path, capsys) -> None:
    """``rlblocks train --env GAME`` on a turn-based game whose agents observe action masks
    (docs/multiagent.md, "Self-play": the bonus is what kept tictactoe's greedy policy from
    losing to a random legal player); a parallel env and a user's ``--set`` keep theirs."""
    pytest.importorskip("pettingzoo", reason="pettingzoo is the multiagent extra")
    from rlblocks.cli.train_defaults import TURN_DEFAULTS

    config = _train(tmp_path, "--env", "rlblocks.envs.turn_zoo:env")
    shown = ", ".join(f"{k}={v}" for k, v in TURN_DEFAULTS.items())
    assert f"rlblocks train: a turn-based game with action masks: {shown} (--set" in (
        capsys.readouterr().out
    )
    assert all(config[k] == v for k, v in TURN_DEFAULTS.items())
    config = _train(
        tmp_path / "set", "--env", "rlblocks.envs.turn_zoo:env", "--set", "entropy_coeff=0"
    )
    assert config["entropy_coeff"] == 0
    config = _train(tmp_path / "par", "--env", "rlblocks.envs.multiagent_zoo:parallel_env")
    assert config["entropy_coeff"] == 0 and "turn-based" not in capsys.readouterr().out


def test_ppo_on_a_goal_env_names_the_algo_that_relabels(tmp_path, capsys) -> None:
    _train(tmp_path, "--env", "rlblocks/zoo-GoalBox-v0")
    assert (
        "rlblocks train: note: rlblocks/zoo-GoalBox-v0 is a goal env: PPO does not relabel its "
        "goals; `--algo SAC` trains it with hindsight replay (her=auto turns it on; "
        "docs/goals.md)"
    ) in capsys.readouterr().out
    _train(tmp_path / "cartpole", "--env", "CartPole-v1")
    assert "goal env" not in capsys.readouterr().out
