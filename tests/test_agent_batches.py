"""Multi-agent PPO's batch defaults counted in agent steps (rlblocks.train.agent_batches):
the rule for few vs many agents, the line ``rlblocks train`` prints, config.json, and a
user's ``--set`` winning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rlblocks.cli import main
from rlblocks.train.agent_batches import (
    AGENT_STEPS_PER_ITER,
    MIN_STEPS_PER_COPY,
    MINIBATCHES_PER_EPOCH,
    agent_batch_defaults,
)

pytest.importorskip("pettingzoo")

ZOO = "rlblocks.envs.multiagent_zoo:parallel_env"


def _agents(scouts: int, pilots: int) -> list[str]:
    return [
        "--set",
        f"env_config.max_scouts={scouts}",
        "--set",
        f"env_config.max_pilots={pilots}",
    ]


def _train(tmp_path: Path, *args: str) -> dict:
    run = tmp_path / "run"
    argv = ["train", "--env", ZOO, *args, "--set", "num_sgd_iter=1", "--no-progress"]
    assert main([*argv, "--stop-timesteps", "256", "--run-dir", str(run)]) == 0
    config: dict = json.loads((run / "config.json").read_text())
    return config


def test_few_agents_keep_ppos_batch_and_many_share_the_agent_step_budget() -> None:
    two = agent_batch_defaults(2, 8)
    many = agent_batch_defaults(75, 8)
    assert two == {"train_batch_size": 2048, "sgd_minibatch_size": 256}  # PPO's own defaults
    # 75 agents: the agent-step budget gives 8192 // 75 // 8 * 8 = 104 env steps, under the
    # floor of 32 steps per copy, so the floor's 8 * 32 env steps
    assert many["train_batch_size"] == 8 * MIN_STEPS_PER_COPY
    assert many["train_batch_size"] * 75 < 2048 * 75 // 4  # far below the old 153,600
    assert many["sgd_minibatch_size"] * MINIBATCHES_PER_EPOCH >= many["train_batch_size"] * 75
    middle = agent_batch_defaults(16, 8)  # no floor: the budget itself
    assert middle["train_batch_size"] * 16 <= AGENT_STEPS_PER_ITER
    assert middle["train_batch_size"] % 8 == 0
    assert agent_batch_defaults(1, 100)["train_batch_size"] % 100 == 0  # whole copies
    with pytest.raises(ValueError, match=r"agents \(0\) and num_envs \(8\) must be at least 1"):
        agent_batch_defaults(0, 8)


def test_train_prints_the_agent_step_batches_and_writes_them_to_config(tmp_path, capsys) -> None:
    config = _train(tmp_path, *_agents(40, 35))
    out = capsys.readouterr().out
    expected = agent_batch_defaults(75, 8)
    assert (
        f"rlblocks train: multi-agent batch defaults (75 agents, 8 env copies): "
        f"train_batch_size={expected['train_batch_size']} env steps "
        f"({expected['train_batch_size'] * 75} agent steps, "
        f"{expected['train_batch_size'] // 8} per copy), "
        f"sgd_minibatch_size={expected['sgd_minibatch_size']} agent steps"
    ) in out
    assert config["train_batch_size"] == expected["train_batch_size"]
    assert config["sgd_minibatch_size"] == expected["sgd_minibatch_size"]
    config = _train(tmp_path / "two", *_agents(1, 1), "--set", "num_envs=2")
    assert config["train_batch_size"] == 2048 and config["sgd_minibatch_size"] == 256
    assert "(2 agents, 2 env copies): train_batch_size=2048" in capsys.readouterr().out


def test_a_users_set_wins_over_the_agent_step_defaults(tmp_path, capsys) -> None:
    config = _train(tmp_path, *_agents(40, 35), "--set", "train_batch_size=512")
    assert config["train_batch_size"] == 512  # given; the minibatch follows its agent steps
    assert config["sgd_minibatch_size"] == agent_batch_defaults(75, 8)["sgd_minibatch_size"] * 2
    both = ["--set", "train_batch_size=256", "--set", "sgd_minibatch_size=100"]
    config = _train(tmp_path / "both", *_agents(40, 35), *both)
    assert (config["train_batch_size"], config["sgd_minibatch_size"]) == (256, 100)
    assert "sgd_minibatch_size=100 agent steps" in capsys.readouterr().out
