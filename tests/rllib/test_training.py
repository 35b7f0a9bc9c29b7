"""RLlib PPO with RLBlocksRLModule + env_to_module learns (local Ray, 2 CPUs, bounded).

Each test stops as soon as its target is reached and fails if the iteration budget runs
out; wall times are printed, never asserted.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

ray = pytest.importorskip("ray")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from gymnasium.spaces import Box, Dict, Discrete, MultiDiscrete  # noqa: E402
from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402
from rlblocks.rllib import env_to_module, rl_module_spec  # noqa: E402

pytestmark = pytest.mark.usefixtures("local_ray")  # tests/conftest.py


def ppo(
    env: Any,
    model: dict,
    *,
    batch: int = 2048,
    minibatch: int = 256,
    epochs: int = 6,
    lr: float = 3e-4,
    gamma: float = 0.99,
    env_config: dict | None = None,
    runners: int = 0,
    observation_filter: str = "NoFilter",
) -> PPOConfig:
    return (
        PPOConfig()
        .environment(env, env_config=env_config or {})
        .rl_module(rl_module_spec=rl_module_spec(model))
        .env_runners(
            num_env_runners=runners,
            num_envs_per_env_runner=8,
            num_cpus_per_env_runner=0.5,
            env_to_module_connector=env_to_module(model, observation_filter),
        )
        .resources(num_cpus_for_main_process=0.5)
        .training(
            train_batch_size_per_learner=batch,
            minibatch_size=minibatch,
            num_epochs=epochs,
            lr=lr,
            gamma=gamma,
        )
        .debugging(seed=0)
    )


def train_until(config: PPOConfig, target: float, max_iters: int) -> tuple[float, int, float]:
    """(best mean return, iterations, seconds): trains until ``target`` or the budget."""
    algo = config.build_algo()
    start, best = time.perf_counter(), -np.inf
    try:
        for i in range(1, max_iters + 1):
            ret = algo.train()["env_runners"].get("episode_return_mean")
            if ret is not None and np.isfinite(ret):
                best = max(best, float(ret))
            if best >= target:
                return best, i, time.perf_counter() - start
        return best, max_iters, time.perf_counter() - start
    finally:
        algo.stop()


class FreshObservationEnv(gym.Env):
    """A new random observation (``_obs``) every step, episodes of ``horizon`` steps."""

    horizon = 20

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        return self._obs(), {}

    def _step(self, reward: float) -> tuple:
        self.t += 1
        return self._obs(), reward, False, self.t >= self.horizon, {}


def ppo_learns(env: type[gym.Env], target: float) -> None:
    """PPO on ``env`` reaches a mean return of ``target`` within 25 iterations."""
    config = ppo(env, {"fcnet_hiddens": [32]}, batch=1000, minibatch=125, lr=1e-3, gamma=0.5)
    best, iters, secs = train_until(config, target, max_iters=25)
    print(f"\nPPO {env.__name__}: mean return {best:.1f} after {iters} iterations, {secs:.1f} s")
    assert best >= target


class MaskedPick(FreshObservationEnv):
    """Pick the target slot (shown in the observation) among the legal ones; a masked pick
    raises (so a single masked action fails the run)."""

    N = 6

    def __init__(self, config: dict | None = None):
        self.observation_space = Dict(
            {
                "action_mask": Box(0, 1, (self.N,), np.int8),
                "observations": Dict({"target": Discrete(self.N), "noise": Box(-1, 1, (2,))}),
            }
        )
        self.action_space = Discrete(self.N)
        self.rng = np.random.default_rng()
        self.t = 0

    def _obs(self) -> dict:
        self.target = int(self.rng.integers(self.N))
        self.mask = (self.rng.random(self.N) < 0.5).astype(np.int8)
        self.mask[self.target] = 1
        return {
            "action_mask": self.mask.copy(),
            "observations": {
                "target": self.target,
                "noise": self.rng.uniform(-1, 1, 2).astype(np.float32),
            },
        }

    def step(self, action):
        if not self.mask[int(action)]:
            raise RuntimeError(f"masked action {action} chosen (mask {self.mask.tolist()})")
        return self._step(float(int(action) == self.target))


def test_masked_env_never_gets_a_masked_action_and_learns():
    # random legal picks score about 20 / 3.5 ~ 6 per episode; 20 is perfect
    ppo_learns(MaskedPick, 15.0)


class NestedMatch(FreshObservationEnv):
    """Nested Dict observation, MultiDiscrete action: copy ``a`` and ``b.c[0]``."""

    horizon = 10

    def __init__(self, config: dict | None = None):
        self.observation_space = Dict(
            {
                "a": Discrete(3),
                "b": Dict({"c": MultiDiscrete([2, 2]), "d": Box(-1, 1, (2,))}),
            }
        )
        self.action_space = MultiDiscrete([3, 2])
        self.rng = np.random.default_rng()
        self.t = 0

    def _obs(self) -> dict:
        self.obs = {
            "a": int(self.rng.integers(3)),
            "b": {
                "c": self.rng.integers(0, 2, 2),
                "d": self.rng.uniform(-1, 1, 2).astype(np.float32),
            },
        }
        return self.obs

    def step(self, action):
        return self._step(
            float(action[0] == self.obs["a"]) + float(action[1] == self.obs["b"]["c"][0])
        )


def test_nested_dict_observation_multidiscrete_action_learns():
    # random actions score (1/3 + 1/2) * 10 ~ 8.3 per episode; 20 is perfect
    ppo_learns(NestedMatch, 15.0)


def _filter_stats(worker: Any) -> tuple[int, list[float]]:
    from rlblocks.rllib import MeanStdFilterBatched

    (piece,) = [c for c in worker._env_to_module.connectors if isinstance(c, MeanStdFilterBatched)]
    stats = piece.filter.running_stats
    return stats.n, stats.mean.tolist()


def test_mean_std_filter_state_merges_across_two_env_runners():
    model = {"fcnet_hiddens": [32]}
    config = ppo(
        "CartPole-v1",
        model,
        batch=1000,
        minibatch=250,
        epochs=2,
        runners=2,
        observation_filter="MeanStdFilter",
    )
    algo = config.build_algo()
    try:
        for _ in range(3):
            result = algo.train()
        steps = result["env_runners"]["num_env_steps_sampled_lifetime"]
        remote = algo.env_runner_group.foreach_env_runner(_filter_stats, local_env_runner=False)
        local = _filter_stats(algo.env_runner_group.local_env_runner)
    finally:
        algo.stop()
    assert len(remote) == 2
    # every runner holds the same merged stats after the sync, and nothing is counted twice:
    # one push per observation (the env steps plus each episode's reset observation)
    for n, mean in remote:
        assert n == local[0]
        np.testing.assert_allclose(mean, local[1], rtol=1e-12)
    assert steps <= local[0] <= 1.25 * steps, (local[0], steps)


def test_appos_losses_update_the_module():
    """APPO's V-trace losses update rlblocks' APPO module (IMPALA's learner, whose module class
    is PPO's, trains end to end through the command line in tests/rllib/test_cli.py)."""
    algo = "APPO"
    from rlblocks.rllib.algo_config import build_algo_config
    from rlblocks.train import PPOConfig as RLBlocksPPOConfig

    config = RLBlocksPPOConfig.from_dict(
        {
            "env": "CartPole-v1",
            "num_envs": 4,
            "train_batch_size": 500,
            "model": {"fcnet_hiddens": [32]},
            "lr": 5e-4,
        }
    )
    algo_config = build_algo_config(config, algo, num_env_runners=1)
    algo_config.env_runners(num_cpus_per_env_runner=0.5).resources(num_cpus_for_main_process=0.5)
    trainer = algo_config.build_algo()
    try:
        module = trainer.get_module()
        assert type(module).__name__ == "RLBlocksAPPORLModule"
        before = trainer.learner_group.get_weights()["default_policy"]
        assert any(k.startswith("model.") for k in before)
        losses: dict[str, Any] = {}
        deadline = time.perf_counter() + 90
        while time.perf_counter() < deadline:  # nan in iterations without an update
            result = trainer.train()
            losses = result.get("learners", {}).get("default_policy", {})
            if np.isfinite(float(losses.get("total_loss", np.nan))):
                break
        assert np.isfinite(float(losses.get("total_loss", np.nan))), losses
        assert np.isfinite(float(losses["entropy"]))
        after = trainer.learner_group.get_weights()["default_policy"]
        changed = [k for k in before if not np.allclose(after[k], before[k])]
        assert changed, "the learner did not update the rlblocks model's weights"
    finally:
        trainer.stop()


def test_killed_env_runner_is_restarted_and_training_goes_on():
    model = {"fcnet_hiddens": [32]}
    config = ppo(
        "CartPole-v1",
        model,
        batch=1000,
        minibatch=250,
        epochs=2,
        runners=2,
        observation_filter="MeanStdFilter",
    )
    config.fault_tolerance(restart_failed_env_runners=True, delay_between_env_runner_restarts_s=0.0)
    algo = config.build_algo()
    try:
        algo.train()
        group = algo.env_runner_group
        victim = group.healthy_env_runner_ids()[0]
        # the env runner's process dies mid-training
        group.foreach_env_runner(
            lambda w: os._exit(1),
            remote_worker_ids=[victim],
            local_env_runner=False,
            timeout_seconds=10,
        )
        steps = []
        deadline = time.perf_counter() + 120
        while time.perf_counter() < deadline:
            steps.append(algo.train()["env_runners"]["num_env_steps_sampled_lifetime"])
            if (
                group.num_remote_worker_restarts() >= 1
                and group.num_healthy_remote_env_runners() == 2
                and len(steps) >= 3
            ):
                break
        assert group.num_remote_worker_restarts() >= 1
        assert group.num_healthy_remote_env_runners() == 2
        assert steps == sorted(steps) and steps[-1] > steps[0]
        algo.train()  # one more sync: the restarted runner now holds the merged filter too
        stats = group.foreach_env_runner(_filter_stats, local_env_runner=False)
    finally:
        algo.stop()
    assert len(stats) == 2 and stats[0][0] == stats[1][0] > 0


@pytest.mark.parametrize("kind", ["lstm", "attention", "framestack"])
def test_view_inputs_train(kind):
    import rlblocks.envs  # noqa: F401  (registers rlblocks/StatelessCartPole-v0)
    from rlblocks.models.framestack_model import FrameStackingModel

    if kind == "lstm":
        model: dict[str, Any] = {
            "use_lstm": True,
            "lstm_cell_size": 32,
            "lstm_use_prev_action": True,
            "lstm_use_prev_reward": True,
        }
        keys = {"prev_actions", "prev_rewards"}
    elif kind == "attention":
        model = {
            "use_attention": True,
            "attention_dim": 16,
            "attention_head_dim": 8,
            "attention_memory_inference": 8,
            "attention_memory_training": 8,
            "attention_use_n_prev_actions": 2,
            "attention_use_n_prev_rewards": 2,
        }
        keys = {"prev_n_actions", "prev_n_rewards"}
    else:
        model = {
            "custom_model": FrameStackingModel,
            "custom_model_config": {"num_frames": 4, "hidden": 64},
        }
        keys = {"prev_n_obs", "prev_n_actions", "prev_n_rewards"}
    model.update(fcnet_hiddens=[32], max_seq_len=10)
    algo = ppo(
        "rlblocks/StatelessCartPole-v0", model, batch=1000, minibatch=250, epochs=2
    ).build_algo()
    try:
        for _ in range(2):
            result = algo.train()
        losses = result["learners"]["default_policy"]
        assert np.isfinite(float(losses["total_loss"]))
        obs_space = algo.get_module().observation_space
        assert set(obs_space.spaces) == {"observations", *keys}
    finally:
        algo.stop()
