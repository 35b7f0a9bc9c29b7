"""``--algo DQN|SAC`` on ``--backend rllib`` takes the native ``DQNConfig`` / ``SACConfig``:
each key lands on RLlib's ``AlgorithmConfig`` attribute (rlblocks.rllib.q_config), and run
directories of both kinds (the algorithm's config, or the PPO keys and ``rllib`` block of
runs written before) load with the right class. No Ray is started."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from rlblocks.rllib.algo_config import build_algo_config  # noqa: E402
from rlblocks.rllib.checkpoints import META_FILE, newest_checkpoint  # noqa: E402
from rlblocks.rllib.trainer import _trainer_config  # noqa: E402
from rlblocks.train.offpolicy_config import DQNConfig, SACConfig  # noqa: E402
from rlblocks.train.trainer_config import PPOConfig  # noqa: E402

DQN_KEYS: dict[str, Any] = {
    "env": "CartPole-v1",
    "num_envs": 2,
    "seed": 5,
    "metrics_smoothing_episodes": 7,
    "model": {"fcnet_hiddens": [16]},
    "lr": 1e-3,
    "gamma": 0.9,
    "grad_clip": 5.0,
    "train_batch_size": 64,
    "replay_capacity": 5000,
    "learning_starts": 200,
    "train_freq": 8,
    "gradient_steps": 2,
    "target_network_update_freq": 300,
    "tau": 0.5,
    "n_step": 3,
    "prioritized_replay": True,
    "prioritized_replay_alpha": 0.5,
    "prioritized_replay_beta": 0.6,
    "final_prioritized_replay_beta": 0.6,
    "timesteps_per_iteration": 500,
    "double_q": False,
    "dueling": False,
    "num_atoms": 5,
    "v_min": -5.0,
    "v_max": 5.0,
    "td_error_loss_fn": "mse",
    "epsilon": [[0, 0.5], [1000, 0.01]],
    "random_steps": 100,
}

#: RLlib's attribute -> its value for DQN_KEYS.
DQN_TABLE: dict[str, Any] = {
    "num_envs_per_env_runner": 2,
    "seed": 5,
    "metrics_num_episodes_for_smoothing": 7,
    "lr": 1e-3,
    "gamma": 0.9,
    "grad_clip": 5.0,
    "train_batch_size_per_learner": 64,
    "total_train_batch_size": 64,
    "num_steps_sampled_before_learning_starts": 200,
    "training_intensity": 2 * 64 / 8,
    "rollout_fragment_length": 4,  # train_freq=8 over 2 envs (at least n_step)
    "target_network_update_freq": 300,
    "tau": 0.5,
    "n_step": 3,
    "replay_buffer_config": {
        "type": "PrioritizedEpisodeReplayBuffer",
        "capacity": 5000,
        "alpha": 0.5,
        "beta": 0.6,
    },
    "min_sample_timesteps_per_iteration": 500,
    "double_q": False,
    "dueling": False,
    "num_atoms": 5,
    "v_min": -5.0,
    "v_max": 5.0,
    "td_error_loss_fn": "mse",
    # epsilon 1 for the random_steps, then the schedule's (0.5 -> 0.01 over 1000 steps)
    "epsilon": [[0, 1.0], [99, 1.0], [100, pytest.approx(0.451)], [1000, 0.01]],
}


def test_each_dqn_key_maps_onto_rllibs_attribute() -> None:
    algo = build_algo_config(DQNConfig.from_dict(DQN_KEYS), "DQN")
    for attribute, expected in DQN_TABLE.items():
        assert getattr(algo, attribute) == expected, attribute
    model = algo.rl_module_spec.model_config
    # the native DQN's model defaults under the user's keys, as the native trainer builds it
    assert model["fcnet_hiddens"] == [16] and model["fcnet_activation"] == "relu"
    assert model["fcnet_weights_initializer"] == "orthogonal"
    spec = algo.get_rl_module_spec().model_config
    assert (spec["dueling"], spec["double_q"], spec["num_atoms"]) == (False, False, 5)
    scheduled = build_algo_config(
        DQNConfig(env="CartPole-v1", lr_schedule=[[100, 1e-3], [2000, 1e-4]]), "DQN"
    )
    assert scheduled.lr == [[0, 1e-3], [100, 1e-3], [2000, 1e-4]]
    uniform = build_algo_config(DQNConfig(env="CartPole-v1", replay_capacity=300), "DQN")
    assert uniform.replay_buffer_config == {"type": "EpisodeReplayBuffer", "capacity": 300}


def test_the_dqn_defaults_are_the_native_ones() -> None:
    native = DQNConfig(env="CartPole-v1")
    algo = build_algo_config(native, "DQN")
    assert (algo.lr, algo.grad_clip, algo.train_batch_size_per_learner) == (5e-4, 10.0, 32)
    assert algo.num_steps_sampled_before_learning_starts == native.learning_starts == 1000
    assert algo.training_intensity == 32 / 4 and algo.rollout_fragment_length == 4
    assert algo.replay_buffer_config == {"type": "EpisodeReplayBuffer", "capacity": 100_000}
    assert algo.epsilon[:3] == [[0, 1.0], [999, 1.0], [1000, pytest.approx(0.905)]]
    assert algo.rl_module_spec.model_config["fcnet_hiddens"] == [64, 64]


def test_each_sac_key_maps_onto_rllibs_attribute() -> None:
    config = SACConfig.from_dict(
        {
            "env": "Pendulum-v1",
            "lr": 1e-3,
            "actor_lr": 2e-4,
            "alpha_lr": 1e-4,
            "initial_alpha": 0.5,
            "target_entropy": -2.0,
            "twin_q": False,
            "tau": 0.01,
            "train_batch_size": 128,
            "target_network_update_freq": 2,
        }
    )
    sac = build_algo_config(config, "SAC")
    table = {
        "actor_lr": 2e-4,
        "critic_lr": 1e-3,  # unset: lr
        "alpha_lr": 1e-4,
        "lr": None,  # RLlib's SAC takes the three above
        "initial_alpha": 0.5,
        "target_entropy": -2.0,
        "twin_q": False,
        "tau": 0.01,
        "train_batch_size_per_learner": 128,
        "training_intensity": 128.0,
        "target_network_update_freq": 2,
        "num_steps_sampled_before_learning_starts": 100,
        "grad_clip": None,
    }
    for attribute, expected in table.items():
        assert getattr(sac, attribute) == expected, attribute
    assert sac.rl_module_spec.model_config["fcnet_hiddens"] == [256, 256]


def test_a_config_of_another_algorithm_is_refused() -> None:
    with pytest.raises(ValueError, match="--algo DQN runs a DQNConfig, got a SACConfig"):
        build_algo_config(SACConfig(env="CartPole-v1"), "DQN")
    with pytest.raises(ValueError, match="PPO runs a PPOConfig, got a DQNConfig"):
        build_algo_config(DQNConfig(env="CartPole-v1"), "PPO")
    with pytest.raises(ValueError, match="--algo DQN runs a DQNConfig .* got a PPOConfig"):
        _trainer_config(PPOConfig(env="CartPole-v1"), "DQN", resumed=False)


def _run_dir(root: Path, config: dict[str, Any], algo: str) -> Path:
    """A run directory as the RLlib trainer leaves it, written by hand (config.json and one
    checkpoint's counters)."""
    backend = {"name": "rllib", "algo": algo, "num_env_runners": 0}
    root.mkdir()
    (root / "config.json").write_text(json.dumps({**config, "backend": backend}))
    ckpt = root / "checkpoint_000001"
    ckpt.mkdir()
    (ckpt / META_FILE).write_text(json.dumps({"iteration": 1, "timesteps_total": 10}))
    return root


def test_run_directories_load_with_their_algorithms_config(tmp_path: Path) -> None:
    new = _run_dir(tmp_path / "new", DQNConfig(env="CartPole-v1", n_step=3).to_dict(), "DQN")
    config = newest_checkpoint(new).trainer_config
    assert isinstance(config, DQNConfig) and config.n_step == 3
    assert build_algo_config(config, "DQN").n_step == 3


def test_old_run_directories_of_ppo_keys_still_load(tmp_path: Path) -> None:
    """A DQN run written before DQN took its own config on RLlib: PPO keys, its settings in
    the ``rllib`` block, RLlib's defaults and model defaults otherwise."""
    old = PPOConfig.from_dict(
        {"env": "CartPole-v1", "num_envs": 1, "rllib": {"training": {"n_step": 3, "lr": 1e-3}}}
    ).to_dict()
    run = _run_dir(tmp_path / "old", old, "DQN")
    ckpt = newest_checkpoint(run)
    config = ckpt.trainer_config
    assert isinstance(config, PPOConfig)
    assert isinstance(_trainer_config(ckpt.config, "DQN", resumed=True), PPOConfig)
    algo = build_algo_config(config, "DQN")
    assert (algo.n_step, algo.lr, algo.num_envs_per_env_runner) == (3, 1e-3, 1)
    assert algo.rl_module_spec.model_config["fcnet_activation"] == "tanh"  # RLlib's
    assert algo.replay_buffer_config["type"] == "PrioritizedEpisodeReplayBuffer"  # RLlib's
