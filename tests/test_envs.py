"""Semantics of the bundled environments (rlblocks.envs)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import rlblocks.envs as envs
from gymnasium.utils.env_checker import check_env
from rlblocks.envs import (
    CorrelatedActionsEnv,
    ParametricCartPole,
    RepeatAfterMe,
    StatelessCartPole,
    correlated_reward,
)


@pytest.mark.parametrize("env_id", sorted(envs.ENV_IDS))
def test_registered_ids_make_checked_envs(env_id: str) -> None:
    env = gym.make(env_id)
    if env_id != "rlblocks/ParametricCartPole-v0":  # check_env steps with masked actions
        check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    for _ in range(3):
        masked = isinstance(obs, dict) and "action_mask" in obs
        mask = obs["action_mask"].astype(np.int8) if masked else None
        obs = env.step(
            env.action_space.sample(mask=mask) if mask is not None else env.action_space.sample()
        )[0]
        assert env.observation_space.contains(obs)


def test_stateless_cartpole_is_cartpole_without_velocities() -> None:
    full = gym.make("CartPole-v1").unwrapped
    stateless = StatelessCartPole()
    full_obs, _ = full.reset(seed=123)
    obs, _ = stateless.reset(seed=123)
    np.testing.assert_array_equal(obs, full_obs[[0, 2]])
    rng = np.random.default_rng(0)
    steps = 0
    while True:
        action = int(rng.integers(2))
        f_obs, f_rew, f_term, _, _ = full.step(action)
        obs, rew, term, trunc, _ = stateless.step(action)
        steps += 1
        np.testing.assert_array_equal(obs, f_obs[[0, 2]])
        assert obs.dtype == np.float32 and obs.shape == (2,)
        assert (rew, term) == (f_rew, f_term)
        if term:
            break
    assert not trunc and steps > 1
    box = full.observation_space
    np.testing.assert_array_equal(stateless.observation_space.high, box.high[[0, 2]])


def test_stateless_cartpole_truncates_at_limit() -> None:
    env = StatelessCartPole(max_episode_steps=5)
    env.reset(seed=0)
    flags = []
    for _ in range(5):
        _, _, term, trunc, _ = env.step(0 if len(flags) % 2 else 1)
        flags.append((term, trunc))
    assert flags[-1] == (False, True) and not any(t for _, t in flags[:-1])
    env.reset(seed=0)
    assert env.step(1)[3] is False  # the counter restarts on reset


@pytest.mark.parametrize("delay", [0, 1, 3])
def test_repeat_after_me_reward_is_echo_of_delayed_obs(delay: int) -> None:
    env = RepeatAfterMe(repeat_delay=delay, episode_len=50)
    obs, _ = env.reset(seed=delay)
    seen = [0] * delay + [obs]  # pre-episode observations count as 0
    rng = np.random.default_rng(1)
    rewards = []
    for t in range(50):
        action = int(rng.integers(2))
        obs, rew, term, trunc, info = env.step(action)
        expected_target = seen[t]  # o_{t - delay}, shifted by the delay-long zero prefix
        assert info["target"] == expected_target
        assert rew == (1.0 if action == expected_target else -1.0)
        rewards.append(rew)
        seen.append(obs)
        assert not term and trunc == (t == 49)
    assert set(rewards) == {1.0, -1.0}


def test_repeat_after_me_perfect_echo_policy_scores_episode_len() -> None:
    env = RepeatAfterMe(repeat_delay=2, episode_len=30)
    obs, _ = env.reset(seed=7)
    history = [0, 0, obs]
    total = 0.0
    for _ in range(30):
        obs, rew, _, trunc, _ = env.step(history[-3])
        history.append(obs)
        total += rew
    assert total == 30.0 and trunc


def test_repeat_after_me_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="repeat_delay"):
        RepeatAfterMe(repeat_delay=-1)
    env = RepeatAfterMe()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="0 or 1"):
        env.step(2)


def test_parametric_cartpole_mask_and_embeddings() -> None:
    env = ParametricCartPole(max_avail_actions=7)
    obs, info = env.reset(seed=5)
    left, right = env.left_embed.copy(), env.right_embed.copy()
    slots_seen = set()
    for _ in range(30):
        assert obs["action_mask"].shape == (7,) and obs["avail_actions"].shape == (7, 2)
        assert obs["cart"].shape == (4,)
        legal = np.flatnonzero(obs["action_mask"])
        assert sorted(legal) == sorted([info["left_slot"], info["right_slot"]])
        np.testing.assert_array_equal(obs["avail_actions"][info["left_slot"]], left)
        np.testing.assert_array_equal(obs["avail_actions"][info["right_slot"]], right)
        slots_seen.add(info["left_slot"])
        obs, _, term, _, info = env.step(
            info["left_slot"] if len(slots_seen) % 2 else info["right_slot"]
        )
        if term:
            obs, info = env.reset()
    assert len(slots_seen) > 2  # the real actions move between slots
    np.testing.assert_array_equal(env.left_embed, left)  # fixed for the environment
    other = ParametricCartPole(max_avail_actions=3)  # every instance: the same embeddings
    other.reset(seed=99)
    np.testing.assert_array_equal(other.left_embed, left)
    assert not np.array_equal(ParametricCartPole(embedding_seed=1).left_embed, left)


def test_parametric_cartpole_slot_maps_to_cartpole_action() -> None:
    env = ParametricCartPole(max_avail_actions=4)
    ref = gym.make("CartPole-v1").unwrapped
    obs, info = env.reset(seed=11)
    ref_obs, _ = ref.reset(seed=12)  # the env seeds its CartPole with seed + 1
    np.testing.assert_array_equal(obs["cart"], ref_obs)
    for real in [1, 1, 0, 1, 0, 0]:
        slot = info["right_slot"] if real else info["left_slot"]
        obs, rew, term, _, info = env.step(slot)
        ref_obs, ref_rew, ref_term, _, _ = ref.step(real)
        np.testing.assert_array_equal(obs["cart"], ref_obs)
        assert (rew, term) == (ref_rew, ref_term)


def test_parametric_cartpole_rejects_masked_action() -> None:
    env = ParametricCartPole(max_avail_actions=5)
    obs, info = env.reset(seed=0)
    masked = int(np.flatnonzero(obs["action_mask"] == 0)[0])
    with pytest.raises(ValueError, match="masked out"):
        env.step(masked)
    with pytest.raises(ValueError, match=">= 2"):
        ParametricCartPole(max_avail_actions=1)


def test_correlated_actions_reward_definition() -> None:
    env = CorrelatedActionsEnv(episode_len=40)
    obs, _ = env.reset(seed=2)
    rng = np.random.default_rng(3)
    for t in range(40):
        a1, a2 = (int(a) for a in rng.integers(2, size=2))
        expected = 5.0 * (a1 == obs) + 5.0 * (a2 == a1)
        obs, rew, term, trunc, _ = env.step((a1, a2))
        assert rew == expected
        assert not term and trunc == (t == 39)
    assert correlated_reward(0, 0, 0) == 10.0
    assert correlated_reward(0, 1, 1) == 5.0  # a2 == a1 pays even when a1 is wrong
    assert correlated_reward(1, 1, 0) == 5.0
    assert correlated_reward(1, 0, 1) == 0.0


def test_same_seed_same_episode() -> None:
    for make in (
        lambda: RepeatAfterMe(),
        lambda: CorrelatedActionsEnv(),
        lambda: ParametricCartPole(),
    ):
        a, b = make(), make()
        oa, _ = a.reset(seed=9)
        ob, _ = b.reset(seed=9)
        for _ in range(5):
            act = a.action_space.sample() if not isinstance(a, ParametricCartPole) else None
            if act is None:
                act = int(np.flatnonzero(oa["action_mask"])[0])
            oa = a.step(act)[0]
            ob = b.step(act)[0]
        if isinstance(oa, dict):
            for k in oa:
                np.testing.assert_array_equal(oa[k], ob[k])
        else:
            assert oa == ob
