"""RayVectorEnv (the native trainer's ``vector_mode="ray"``): sub-envs in Ray actors give the
same trajectories as ``vector_mode="sync"`` for the same seeds."""

from __future__ import annotations

import math

import pytest

ray = pytest.importorskip("ray")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from gymnasium.vector import AutoresetMode, SyncVectorEnv  # noqa: E402
from rlblocks.train import PPOConfig, PPOTrainer  # noqa: E402
from rlblocks.train.envs import vector_env_from_config  # noqa: E402
from rlblocks.wrappers.ray_vector import RayVectorEnv  # noqa: E402

pytestmark = pytest.mark.usefixtures("local_ray")  # tests/conftest.py


def _leaves(x):
    if isinstance(x, dict):
        return [leaf for k in sorted(x) for leaf in _leaves(x[k])]
    return [x]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "rlblocks.envs:rlblocks/DictCartPole-v0"])
def test_same_seeds_same_trajectories_as_sync(env_id):
    n = 5
    make = [lambda: gym.make(env_id)] * n
    sync = SyncVectorEnv(make, autoreset_mode=AutoresetMode.SAME_STEP)
    remote = RayVectorEnv(make, num_actors=3, num_cpus_per_actor=0.5)
    try:
        assert remote.num_actors == 3 and remote.num_envs == n
        assert remote.single_observation_space == sync.single_observation_space
        a_obs, _ = sync.reset(seed=7)
        b_obs, _ = remote.reset(seed=7)
        for x, y in zip(_leaves(a_obs), _leaves(b_obs), strict=True):
            np.testing.assert_array_equal(x, y)
        rng = np.random.default_rng(0)
        finals = 0
        for _ in range(300):
            actions = rng.integers(0, 2, n)
            a = sync.step(actions)
            b = remote.step(actions)
            for x, y in zip(_leaves(a[0]), _leaves(b[0]), strict=True):
                np.testing.assert_array_equal(x, y)
            for i in (1, 2, 3):
                np.testing.assert_array_equal(a[i], b[i])
            if "final_obs" in a[4]:
                finals += 1
                np.testing.assert_array_equal(a[4]["_final_obs"], b[4]["_final_obs"])
                for i in np.flatnonzero(a[4]["_final_obs"]):
                    for x, y in zip(
                        _leaves(a[4]["final_obs"][i]), _leaves(b[4]["final_obs"][i]), strict=True
                    ):
                        np.testing.assert_array_equal(x, y)
        assert finals > 0  # episodes ended (and were reset) along the way
    finally:
        sync.close()
        remote.close()


def test_native_trainer_vector_mode_ray_equals_sync():
    base = {
        "env": "CartPole-v1",
        "num_envs": 4,
        "train_batch_size": 256,
        "sgd_minibatch_size": 64,
        "num_sgd_iter": 2,
        "seed": 3,
    }
    results = {}
    for mode in ("sync", "ray"):
        trainer = PPOTrainer({**base, "vector_mode": mode})
        try:
            if mode == "ray":
                assert isinstance(trainer.venv, RayVectorEnv)
            results[mode] = [trainer.train() for _ in range(3)]
        finally:
            trainer.close()
    for a, b in zip(results["sync"], results["ray"], strict=True):
        for key in (
            "timesteps_total",
            "episodes_total",
            "episode_return_mean",
            "total_loss",
            "entropy",
        ):
            if isinstance(a[key], float) and math.isnan(a[key]):
                assert math.isnan(b[key])
            else:
                assert a[key] == b[key], key


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one env"):
        RayVectorEnv([])
    with pytest.raises(ValueError, match="num_actors must be in 1..2"):
        RayVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_actors=3)
    venv = vector_env_from_config(PPOConfig(env="CartPole-v1", num_envs=2, vector_mode="ray"))
    try:
        assert isinstance(venv, RayVectorEnv)
    finally:
        venv.close()
