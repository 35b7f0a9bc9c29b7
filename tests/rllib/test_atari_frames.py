"""Atari frames stored once: ``AtariFramesBatched(stack_in_episode=False)`` plus the
frame-stacking replay buffers give the module and the learner exactly the observations of
frames stacked in the episode (episode starts, ends, chunk cuts and n-step=3 transitions
included), while the episodes and the buffer hold one frame per step.

A fake env of random RGB frames stands in for ALE (its frames do not depend on the actions,
so two runs with the same seed see the same frames); RLlib's own env runner, replay
buffers and learner connector pipeline do the rest.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

ray = pytest.importorskip("ray")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from gymnasium.spaces import Box, Discrete  # noqa: E402
from ray.rllib.algorithms.dqn import DQNConfig  # noqa: E402
from ray.rllib.connectors.learner import (  # noqa: E402
    AddNextObservationsFromEpisodesToTrainBatch,
    AddObservationsFromEpisodesToBatch,
)
from ray.rllib.core.columns import Columns  # noqa: E402
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner  # noqa: E402
from ray.rllib.env.single_agent_episode import SingleAgentEpisode  # noqa: E402
from ray.rllib.utils.replay_buffers.episode_replay_buffer import (  # noqa: E402
    EpisodeReplayBuffer,
)
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (  # noqa: E402
    PrioritizedEpisodeReplayBuffer,
)
from rlblocks.image import gray_resize  # noqa: E402
from rlblocks.rllib import (  # noqa: E402
    AtariFramesBatched,
    FrameStackEpisodeReplayBuffer,
    FrameStackPrioritizedEpisodeReplayBuffer,
    atari_replay_buffer_config,
    env_to_module,
    rl_module_spec,
)

DIM = 42  # RLlib's smallest default conv stack: quick, and the code paths of 84
MODEL = {"dim": DIM}
STACKED = Box(0, 255, (DIM, DIM, 4), np.uint8)


class FakeFrames(gym.Env):
    """Random (210, 160, 3) frames; episodes of 2..11 steps end by termination or
    truncation; reward 1 for action 1."""

    observation_space = Box(0, 255, (210, 160, 3), np.uint8)
    action_space = Discrete(3)

    def __init__(self, config: Any = None) -> None:
        self._left = 0

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._left = int(self.np_random.integers(2, 12))
        return self._frame(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._left -= 1
        end = self._left <= 0
        truncated = bool(end and self.np_random.random() < 0.3)
        return self._frame(), float(action == 1), end and not truncated, truncated, {}

    def _frame(self) -> np.ndarray:
        return self.np_random.integers(0, 256, (210, 160, 3), dtype=np.uint8)


def dqn(stack_in_episode: bool, **training: Any) -> DQNConfig:
    return (
        DQNConfig()
        .environment(FakeFrames)
        .rl_module(rl_module_spec=rl_module_spec(MODEL, algo="DQN"))
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=2,
            rollout_fragment_length=4,
            env_to_module_connector=env_to_module(
                MODEL, atari=True, stack_in_episode=stack_in_episode
            ),
        )
        .learners(num_learners=0)
        .training(**training)
        .reporting(min_time_s_per_iteration=0, min_sample_timesteps_per_iteration=0)
        .debugging(seed=3)
    )


def rollout(stack_in_episode: bool) -> tuple[list[np.ndarray], list[list[Any]]]:
    """(the module's OBS batch of every exploration step, the episode chunks of each
    ``sample()``) of RLlib's env runner: 2 envs, 6 calls of 20 steps, module actions."""
    runner = SingleAgentEnvRunner(config=dqn(stack_in_episode))
    seen: list[np.ndarray] = []
    explore = runner.module.forward_exploration

    def spy(batch: dict[str, Any], **kwargs: Any) -> Any:
        seen.append(np.asarray(batch[Columns.OBS]).copy())
        return explore(batch, **kwargs)

    runner.module.forward_exploration = spy
    chunks = [runner.sample(num_timesteps=20, explore=True) for _ in range(6)]
    runner.stop()
    return seen, chunks


@pytest.fixture(scope="module")
def rollouts() -> dict[bool, tuple[list[np.ndarray], list[list[Any]]]]:
    return {stack: rollout(stack) for stack in (True, False)}


def test_module_sees_the_same_stacks_and_episodes_hold_single_frames(rollouts):
    stacked_batches, stacked_chunks = rollouts[True]
    frame_batches, frame_chunks = rollouts[False]
    assert len(frame_batches) == len(stacked_batches) >= 60
    for old, new in zip(stacked_batches, frame_batches, strict=True):
        assert new.shape == (2, DIM, DIM, 4) and new.dtype == np.uint8
        np.testing.assert_array_equal(new, old)
    old_eps = [ep for chunk in stacked_chunks for ep in chunk]
    new_eps = [ep for chunk in frame_chunks for ep in chunk]
    assert sum(ep.is_done for ep in new_eps) >= 10 and any(ep.t_started > 0 for ep in new_eps)
    for old, new in zip(old_eps, new_eps, strict=True):
        frames, stacks = new.get_observations(), old.get_observations()
        assert frames.shape == (len(new) + 1, DIM, DIM, 1)
        np.testing.assert_array_equal(frames[..., 0], stacks[..., -1])  # the newest frame


def learner_batch(stack_in_episode: bool, sampled: list[Any]) -> dict[str, Any]:
    """The train batch RLlib's DQN learner pipeline makes from buffer-sampled episodes."""
    pipeline = dqn(stack_in_episode).build_learner_connector(STACKED, Discrete(3))
    pipeline.insert_after(
        AddObservationsFromEpisodesToBatch, AddNextObservationsFromEpisodesToTrainBatch()
    )
    return pipeline(rl_module=None, batch={}, episodes=copy.deepcopy(sampled), shared_data={})


@pytest.mark.parametrize(
    "stock, ours",
    [
        (EpisodeReplayBuffer, FrameStackEpisodeReplayBuffer),
        (PrioritizedEpisodeReplayBuffer, FrameStackPrioritizedEpisodeReplayBuffer),
    ],
)
def test_learner_sees_the_same_n_step_obs_and_next_obs(rollouts, stock, ours):
    buffers = {True: stock(capacity=10_000), False: ours(capacity=10_000, framestack=4)}
    for stack, buffer in buffers.items():
        for chunk in rollouts[stack][1]:
            buffer.add(chunk)  # as DQN adds each sample() call's episodes
        buffer.rng = np.random.default_rng(0)
    draws = {
        stack: buffer.sample(
            num_items=256, n_step=3, batch_length_T=0, gamma=0.9, beta=0.4, sample_episodes=True
        )
        for stack, buffer in buffers.items()
    }
    old, new = draws[True], draws[False]
    assert [ep.t_started for ep in new] == [ep.t_started for ep in old]
    assert min(ep.t_started for ep in new) == 0  # stacks padded with the first frame
    assert any(ep.is_done for ep in new)  # o_{t+n} is an episode's last frame
    assert any(ep.is_done and ep.get_extra_model_outputs("n_step", 0) == 3 for ep in new)
    for a, b in zip(old, new, strict=True):
        assert b.observation_space == STACKED
        np.testing.assert_array_equal(b.get_observations(0), a.get_observations(0))
        np.testing.assert_array_equal(b.get_observations(-1), a.get_observations(-1))
    old_batch, new_batch = learner_batch(True, old), learner_batch(False, new)
    for column in (
        Columns.OBS,
        Columns.NEXT_OBS,
        Columns.REWARDS,
        Columns.TERMINATEDS,
        Columns.TRUNCATEDS,
    ):
        np.testing.assert_array_equal(new_batch[column], old_batch[column])
    assert new_batch[Columns.OBS].shape == (256, DIM, DIM, 4)
    # ... from a quarter of the stored pixels
    stored = {
        stack: sum(ep.get_observations().nbytes for ep in buffer.episodes)
        for stack, buffer in buffers.items()
    }
    assert stored[True] == 4 * stored[False]
    assert buffers[False].get_num_timesteps() == buffers[True].get_num_timesteps()


def test_wrong_setups_are_clear_errors(rollouts):
    stacked = FrameStackEpisodeReplayBuffer(capacity=1000)
    for chunk in rollouts[True][1]:
        stacked.add(chunk)
    with pytest.raises(ValueError, match="stack_in_episode=False"):
        stacked.sample(num_items=4, n_step=1, sample_episodes=True)
    ours = FrameStackEpisodeReplayBuffer(capacity=1000)
    with pytest.raises(ValueError, match="n-step transitions only"):
        ours.sample(num_items=4, batch_length_T=8, n_step=1, sample_episodes=True)
    with pytest.raises(ValueError, match="framestack"):
        FrameStackPrioritizedEpisodeReplayBuffer(capacity=10, framestack=0)
    with pytest.raises(ValueError, match="give atari=True"):
        env_to_module(MODEL, stack_in_episode=False)
    with pytest.raises(ValueError, match="capacity"):
        atari_replay_buffer_config(capacity=0)
    cfg = atari_replay_buffer_config({"framestack": False}, 123)
    assert cfg == {
        "type": "rlblocks.rllib.replay.FrameStackPrioritizedEpisodeReplayBuffer",
        "capacity": 123,
        "framestack": 1,
        "alpha": 0.6,
        "beta": 0.4,
    }


def test_piece_keeps_a_finished_episodes_row_until_it_is_gone():
    space = FakeFrames.observation_space
    piece = AtariFramesBatched(space, Discrete(3), dim=DIM, stack_in_episode=False)
    assert piece.observation_space == STACKED
    assert piece.episode_observation_space == Box(0, 255, (DIM, DIM, 1), np.uint8)
    rng = np.random.default_rng(1)
    ep = SingleAgentEpisode(observation_space=space, action_space=Discrete(3))
    first = rng.integers(0, 256, space.shape, dtype=np.uint8)
    ep.add_env_reset(observation=first)
    piece(rl_module=None, batch={}, episodes=[ep], explore=True, shared_data={})
    last = rng.integers(0, 256, space.shape, dtype=np.uint8)
    ep.add_env_step(observation=last, action=0, reward=0.0, terminated=True)
    for _ in range(2):  # the same step again: the same row, from the kept stack
        batch = piece(rl_module=None, batch={}, episodes=[ep], explore=True, shared_data={})
        (row,) = batch[Columns.OBS].values()
        a, b = gray_resize(first, DIM), gray_resize(last, DIM)
        np.testing.assert_array_equal(row[0], np.concatenate([a, a, a, b], axis=-1))
    np.testing.assert_array_equal(ep.get_observations(-1), b)
    piece(rl_module=None, batch={}, episodes=[], explore=True, shared_data={})
    assert not piece._slots and len(piece._free) == 8  # given back once it was gone


def test_dqn_trains_on_single_frame_episodes(local_ray):
    config = dqn(
        False,
        replay_buffer_config=atari_replay_buffer_config(MODEL, 2000),
        n_step=3,
        train_batch_size_per_learner=16,
        num_steps_sampled_before_learning_starts=32,
    )
    algo = config.build_algo()
    try:
        for _ in range(20):  # 8 steps an iteration; learning from the 5th
            result = algo.train()
        buffer = algo.local_replay_buffer
        assert isinstance(buffer, FrameStackPrioritizedEpisodeReplayBuffer)
        assert all(ep.get_observations().shape[1:] == (DIM, DIM, 1) for ep in buffer.episodes)
        loss = result["learners"]["default_policy"]["qf_loss"]
        assert math.isfinite(float(loss))
    finally:
        algo.stop()
