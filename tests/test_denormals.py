"""Denormals flushed to zero inside a trainer's ``train()`` and only there
(rlblocks.train.denormals)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from rlblocks.train import DQNTrainer, PPOTrainer, SACTrainer
from rlblocks.train.denormals import denormals_flushed, flush_denormals, hardware_flushes

pytestmark = pytest.mark.skipif(
    not hardware_flushes(), reason="this CPU cannot flush denormals (torch.set_flush_denormal)"
)


def test_the_block_flushes_and_the_previous_setting_comes_back() -> None:
    assert not denormals_flushed()
    tiny = np.float32(np.finfo(np.float32).tiny)
    assert tiny / np.float32(4) > 0  # a denormal, as IEEE arithmetic gives it
    with flush_denormals():
        assert denormals_flushed()
        assert tiny / np.float32(4) == 0
        with flush_denormals(False):
            assert not denormals_flushed()
        assert denormals_flushed()
    assert not denormals_flushed()
    with pytest.raises(RuntimeError, match="inside"), flush_denormals():
        raise RuntimeError("inside")
    assert not denormals_flushed()


class _Probe(gym.Env):
    """A one-step contextual bandit that records, at every step, whether denormals are
    flushed on the thread stepping it."""

    seen: list[bool] = []

    def __init__(self, action_space: gym.Space) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = action_space

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        _Probe.seen.append(denormals_flushed())
        return self.observation_space.sample(), 0.0, True, False, {}


@pytest.mark.parametrize(
    ("trainer_class", "action_space", "extra"),
    [
        (PPOTrainer, gym.spaces.Discrete(2), {"train_batch_size": 64, "sgd_minibatch_size": 32}),
        (DQNTrainer, gym.spaces.Discrete(2), {"timesteps_per_iteration": 64}),
        (SACTrainer, gym.spaces.Box(-1.0, 1.0, (1,)), {"timesteps_per_iteration": 64}),
    ],
)
@pytest.mark.parametrize("flush", [True, False])
def test_train_runs_with_the_configured_setting_and_restores_it(
    trainer_class: Any, action_space: gym.Space, extra: dict, flush: bool
) -> None:
    config = {
        "env": lambda _cfg: _Probe(action_space),
        "num_envs": 1,
        "model": {"fcnet_hiddens": [8]},
        "flush_denormals": flush,
        **extra,
    }
    trainer = trainer_class(config)
    try:
        _Probe.seen = []
        trainer.train()
        assert _Probe.seen and set(_Probe.seen) == {flush}
        assert not denormals_flushed()
    finally:
        trainer.close()


def test_flush_denormals_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="flush_denormals must be True or False"):
        PPOTrainer({"env": "CartPole-v1", "flush_denormals": "yes"})
