"""The native off-policy trainers: DQNTrainer and SACTrainer end to end (short runs),
exact resume with the replay buffer, next-step autoreset envs, masks, the command line,
evaluation and export."""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from rlblocks.envs.masked_bandit import MaskedBanditEnv
from rlblocks.train import DQNConfig, DQNTrainer, SACConfig, SACTrainer, restore_trainer

FAST_DQN: dict[str, Any] = {
    "env": "CartPole-v1",
    "timesteps_per_iteration": 200,
    "learning_starts": 100,
    "train_freq": 2,
    "target_network_update_freq": 50,
    "model": {"fcnet_hiddens": [16]},
}
FAST_SAC: dict[str, Any] = {
    "env": "Pendulum-v1",
    "timesteps_per_iteration": 100,
    "learning_starts": 50,
    "train_batch_size": 32,
    "model": {"fcnet_hiddens": [16]},
}


def test_dqn_trains_and_reports_its_columns() -> None:
    with DQNTrainer(FAST_DQN) as trainer:
        first = trainer.train()
        second = trainer.train()
    assert first["timesteps_total"] == 200 and second["timesteps_total"] == 400
    for key in ("qf_loss", "q_mean", "td_error_mean", "epsilon", "num_updates", "replay_size"):
        assert key in second, key
    # an update at every multiple of train_freq=2 from step 100 on: 51 by step 200
    # (100, 102, ..., 200), 100 more by step 400
    assert first["num_updates"] == 51 and second["num_updates"] == 151
    assert second["epsilon"] == pytest.approx(1.0 - 0.95 * 400 / 10_000)


@pytest.mark.parametrize(
    ("make", "config"),
    [(DQNTrainer, {**FAST_DQN, "prioritized_replay": True, "n_step": 3}), (SACTrainer, FAST_SAC)],
    ids=["dqn-prioritized-nstep", "sac"],
)
def test_resume_with_the_replay_buffer_continues_exactly(
    make: Any, config: dict[str, Any], tmp_path: Path
) -> None:
    trainer = make({**config, "checkpoint_replay": True}, run_dir=tmp_path)
    trainer.train()
    path = trainer.save()
    expected = trainer.train()
    weights = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # nothing is lost: no warning
        resumed = restore_trainer(path)
    assert type(resumed) is make
    again = resumed.train()
    for key in ("qf_loss", "episode_return_mean", "num_updates", "replay_size"):
        assert again[key] == expected[key] or (np.isnan(again[key]) and np.isnan(expected[key])), (
            key
        )
    for p, w in zip(resumed.model.parameters(), weights, strict=True):
        assert torch.equal(p, w)
    resumed.close()


def test_resume_without_the_replay_buffer_says_so(tmp_path: Path) -> None:
    with DQNTrainer(FAST_DQN, run_dir=tmp_path) as trainer:
        trainer.train()
        path = trainer.save()
    with pytest.warns(RuntimeWarning, match="replay buffer was not stored"):
        resumed = restore_trainer(path)
    assert len(resumed.replay) == 0
    resumed.train()
    resumed.close()


def test_next_step_autoreset_envs_store_no_reset_steps() -> None:
    # CartPole's own vector env resets on the step after an episode ends (NEXT_STEP)
    cfg = {**FAST_DQN, "vector_mode": "native", "num_envs": 4, "learning_starts": 10_000}
    with DQNTrainer(cfg) as trainer:
        for _ in range(3):
            trainer.train()
        episodes = trainer.episodes_total
        state = trainer.replay.state_dict()
    # every stored entry is a step or an episode's final observation; the reset steps
    # (whose action the env ignores) are not stored
    stored = int(np.asarray(state["counts"]).sum())
    assert episodes > 10
    assert stored == trainer.timesteps_total + episodes


def test_dqn_never_takes_a_masked_action() -> None:
    MaskedBanditEnv.counts.update(steps=0, masked=0)
    cfg = {
        **FAST_DQN,
        "env": "rlblocks/MaskedBandit-v0",
        "env_config": {"action": "discrete", "n": 5},
        "num_envs": 2,
    }
    with DQNTrainer(cfg) as trainer:
        for _ in range(3):
            trainer.train()
        result = trainer.evaluate(3)
    assert MaskedBanditEnv.counts["steps"] > 600 and MaskedBanditEnv.counts["masked"] == 0
    assert result["episodes"] == 3


def test_off_policy_configs_refuse_what_they_cannot_do() -> None:
    with pytest.raises(ValueError, match="SAC"):
        DQNTrainer({**FAST_DQN, "env": "Pendulum-v1"})
    with pytest.raises(ValueError, match="observation_filter"):
        DQNConfig(observation_filter="MeanStdFilter")
    with pytest.raises(ValueError, match="actor_lr=0.001 with lr_schedule: the schedule moves"):
        SACConfig(lr_schedule=[[0, 1e-3], [100, 1e-4]], actor_lr=1e-3)
    with pytest.raises(ValueError, match="unknown DQN config key 'buffer_size'; did you mean"):
        DQNConfig.from_dict({"buffer_size": 10})


@pytest.mark.parametrize("algo", ["DQN", "SAC"])
def test_cli_trains_evaluates_and_exports(
    algo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("onnxruntime", reason="the export extra")
    from rlblocks.cli import main
    from rlblocks.export.evaluate import load_exported

    cfg = FAST_DQN if algo == "DQN" else FAST_SAC
    run = tmp_path / "run"
    sets = [f"--set=timesteps_per_iteration={cfg['timesteps_per_iteration']}"]
    sets += [f"--set=learning_starts={cfg['learning_starts']}", "--set=model.fcnet_hiddens=[16]"]
    sets += ["--set=target_network_update_freq=100"]  # updated within the 400 steps
    args = ["train", "--algo", algo, "--env", cfg["env"], *sets, "--run-dir", str(run)]
    assert main([*args, "--stop-timesteps", "400", "--no-progress"]) == 0
    with open(run / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert int(rows[-1]["timesteps_total"]) >= 400 and "qf_loss" in rows[-1]
    capsys.readouterr()
    assert main(["evaluate", str(run), "--episodes", "2"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["episodes"] == 2
    assert main(["export", str(run)]) == 0
    exported = load_exported(run / "policy.onnx")
    trainer = restore_trainer(run, log=False)
    obs = np.stack([trainer.evaluation_env().observation_space.sample() for _ in range(5)])
    greedy = trainer.learner.act(trainer._model_input(obs), explore=False, timestep=0)
    actions, _ = exported.compute_actions(obs)
    np.testing.assert_allclose(actions, greedy, rtol=1e-5, atol=1e-5)
    trainer.close()


def test_cli_refuses_appo_natively() -> None:
    from rlblocks.cli import main

    assert main(["train", "--algo", "APPO", "--env", "CartPole-v1", "--no-progress"]) == 2


@pytest.mark.parametrize(("steps", "synced"), [(128, False), (130, True)])
def test_dqn_counts_its_rhythm_in_env_steps_as_sb3_does(steps: int, synced: bool) -> None:
    # rl-baselines3-zoo's CartPole rhythm, scaled down (issue 46): rounds of gradient steps
    # every train_freq env steps once learning_starts are stored, the target copied every
    # target_network_update_freq env steps, never inside a round (a round's gradient steps
    # all bootstrap from one target), as Stable-Baselines3's DQN with one env
    cfg = {**FAST_DQN, "learning_starts": 64, "train_freq": 64, "gradient_steps": 8,
           "target_network_update_freq": 10, "train_batch_size": 16,
           "timesteps_per_iteration": steps}  # fmt: skip
    with DQNTrainer(cfg) as trainer:
        result = trainer.train()
        online = torch.nn.utils.parameters_to_vector(trainer.learner.q.parameters())
        target = torch.nn.utils.parameters_to_vector(trainer.learner.target.parameters())
    assert result["num_updates"] == 16  # the rounds at steps 64 and 128
    # the last copy before step 128 was at step 120, before that round's updates; step 130's
    # copy takes them
    assert torch.equal(online, target) is synced


@pytest.mark.parametrize(
    ("algo", "extra", "moved"),
    [
        ("SAC", {}, ("actor_optimizer", "critic_optimizer", "alpha_optimizer")),
        ("SAC", {"alpha_lr": 0.0}, ("actor_optimizer", "critic_optimizer")),
        ("TD3", {}, ("actor_optimizer", "critic_optimizer")),
    ],
)
def test_lr_schedule_moves_every_actor_critic_rate_and_survives_the_config_round_trip(
    algo: str, extra: dict[str, Any], moved: tuple[str, ...]
) -> None:
    from rlblocks.train import TD3Trainer
    from rlblocks.train.offpolicy_config import TD3Config

    trainer_class, config_class = {
        "SAC": (SACTrainer, SACConfig),
        "TD3": (TD3Trainer, TD3Config),
    }[algo]
    cfg = {**FAST_SAC, "learning_starts": 10, "lr_schedule": [[0, 1e-3], [200, 0.0]], **extra}
    with trainer_class(cfg) as trainer:
        seen = []
        for _ in range(3):
            result = trainer.train()
            rates = {
                name: [g["lr"] for g in getattr(trainer.learner, name).param_groups]
                for name in ("actor_optimizer", "critic_optimizer", "alpha_optimizer")
                if hasattr(trainer.learner, name)
            }
            seen.append((result["lr"], rates))
        # the written config (every rate filled with lr) validates again
        config_class.from_dict(json.loads(json.dumps(trainer.config.to_dict())))
    assert [lr for lr, _ in seen] == pytest.approx([1e-3, 5e-4, 0.0])
    for lr, rates in seen:
        for name, groups in rates.items():  # a rate the schedule leaves is alpha's fixed 0
            assert groups == pytest.approx([lr if name in moved else 0.0]), name
    assert trainer.num_updates > 0


def test_a_scheduled_rate_beside_other_rates_is_refused_by_name() -> None:
    from rlblocks.train.offpolicy_config import TD3Config

    SACConfig(lr_schedule=[[0, 1e-3]], actor_lr=3e-4, alpha_lr=0.0)  # lr's value, fixed alpha
    with pytest.raises(ValueError, match=r"alpha_lr=0.01 with lr_schedule.*actor_lr / critic_lr"):
        SACConfig(lr_schedule=[[0, 1e-3]], alpha_lr=0.01)
    with pytest.raises(ValueError, match="actor_lr=0.1 with lr_schedule"):
        TD3Config(lr_schedule=[[0, 1e-3]], actor_lr=0.1)
