"""``num_env_workers="auto"`` (rlblocks.train.env_workers): the rule, the config value, the
trainer's choice (printed, in config.json) and ``rlblocks train``'s default."""

from __future__ import annotations

import json
import os

import pytest
from rlblocks.train.env_workers import auto_env_workers, free_cores
from rlblocks.train.trainer_config import PPOConfig

pytest.importorskip("pettingzoo")

ZOO = "rlblocks.envs.multiagent_zoo:parallel_env"


def test_the_rule_needs_free_cores_and_two_copies() -> None:
    assert auto_env_workers(8, 2, 1.5) == 2
    assert auto_env_workers(8, 2, 1.4) == 0
    assert auto_env_workers(3, 16, 16.0) == 3
    assert auto_env_workers(8, 16, 2.4) == 2
    assert auto_env_workers(1, 16, 16.0) == 0
    cpus, free = free_cores()
    assert cpus >= 1 and 0.0 <= free <= cpus


def test_the_config_takes_auto_and_refuses_other_words() -> None:
    assert PPOConfig.from_dict({"num_env_workers": "auto"}).num_env_workers == "auto"
    with pytest.raises(ValueError, match="num_env_workers must be an int >= 0 or 'auto', got 'x'"):
        PPOConfig.from_dict({"num_env_workers": "x"})


@pytest.mark.parametrize("load", ["idle", "busy"])
def test_the_trainer_resolves_auto_from_the_load(monkeypatch, capsys, tmp_path, load) -> None:
    """An idle machine (load average 0) gets workers where it has 2 cores or more, a busy
    one (load = cores) none; the number is printed and written to config.json."""
    from rlblocks.train import MultiAgentPPOTrainer

    cpus = free_cores()[0]
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0 if load == "idle" else cpus,) * 3)
    want = auto_env_workers(4, cpus, cpus if load == "idle" else 0.0)
    config = {
        "env": ZOO,
        "num_envs": 4,
        "num_env_workers": "auto",
        "train_batch_size": 64,
        "sgd_minibatch_size": 32,
        "num_sgd_iter": 1,
    }
    trainer = MultiAgentPPOTrainer(config, run_dir=tmp_path / "run")
    try:
        assert trainer.config.num_env_workers == want
        assert getattr(trainer.hub, "num_workers", 0) == want
        assert trainer.train()["agent_timesteps_total"] > 64
    finally:
        trainer.close()
    assert f"num_env_workers=auto: {want}" in capsys.readouterr().out
    assert json.loads((tmp_path / "run" / "config.json").read_text())["num_env_workers"] == want


def test_single_agent_runs_take_auto_as_none() -> None:
    from rlblocks.train import PPOTrainer

    trainer = PPOTrainer({"env": "CartPole-v1", "num_envs": 2, "num_env_workers": "auto"})
    trainer.close()
    with pytest.raises(ValueError, match="num_env_workers=2: env worker processes step"):
        PPOTrainer({"env": "CartPole-v1", "num_envs": 2, "num_env_workers": 2})


def test_rlblocks_train_defaults_a_multiagent_run_to_auto(tmp_path, capsys) -> None:
    from rlblocks.cli import main

    run = tmp_path / "run"
    argv = ["train", "--env", ZOO, "--set", "num_envs=2", "--set", "train_batch_size=32"]
    argv += ["--set", "num_sgd_iter=1", "--no-progress", "--stop-timesteps", "64"]
    assert main([*argv, "--run-dir", str(run)]) == 0
    chosen = json.loads((run / "config.json").read_text())["num_env_workers"]
    assert isinstance(chosen, int) and chosen in (0, 2)
    assert f"num_env_workers=auto: {chosen}" in capsys.readouterr().out
