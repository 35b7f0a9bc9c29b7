"""Evaluating a policy: whole episodes on one plain env, outside training.

:func:`evaluate_policy` runs seeded episodes with the policy's greedy (or sampled) actions
and returns :func:`~rlblocks.train.loop.episode_summary`; the training RNG streams are left
untouched, so evaluating during a run does not change what it learns.

Examples:
    >>> import gymnasium as gym
    >>> from rlblocks.catalog import ModelCatalog
    >>> from rlblocks.train.policy import Policy
    >>> from rlblocks.train.trainer_config import PPOConfig
    >>> env = gym.make("CartPole-v1")
    >>> prep = ModelCatalog.get_preprocessor_for_space(env.observation_space)
    >>> policy = Policy(prep.observation_space, env.action_space, PPOConfig(), "cpu")
    >>> result = evaluate_policy(policy, prep.transform_batch, env, episodes=2, seed=0)
    >>> result["episodes"], len(result["episode_returns"])
    (2, 2)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.nest import tree_map
from rlblocks.spaces import clip_actions
from rlblocks.train.loop import episode_summary
from rlblocks.train.policy import Policy

__all__ = ["evaluate_policy", "run_episode"]


def run_episode(
    policy: Policy,
    observe: Callable[[list[Any]], np.ndarray],
    env: gym.Env,
    seed: int,
    explore: bool = False,
    clip: bool = True,
) -> tuple[float, int]:
    """One episode on ``env`` from ``reset(seed=seed)``; ``(return, length)``.

    Args:
        policy: The policy acting (its recurrent state and previous actions/rewards start
            from their initial values).
        observe: Raw observations (a list) -> the model's inputs (preprocessed, filtered).
        env: A plain gymnasium env.
        seed: The reset seed.
        explore: Sample actions instead of taking the most likely ones.
        clip: Clip Box actions into the action space before stepping.
    """
    raw, _ = env.reset(seed=seed)
    state = policy.initial_state(1)
    pa = None
    if policy.n_prev_actions:
        pa = np.broadcast_to(
            policy.initial_prev_action, (1, policy.n_prev_actions, *policy.action_shape)
        )
    pr = np.zeros((1, policy.n_prev_rewards), np.float32) if policy.n_prev_rewards else None
    total, length, done = 0.0, 0, False
    x: np.ndarray | None = None
    while not done:
        x = policy.stack_obs(x, observe([raw]))
        out = policy.act(x, state, pa, pr, explore=explore, full=False)
        action = tree_map(lambda a: a[0], out["actions"])
        if clip:
            action = clip_actions(action, policy.action_space)
        raw, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        length += 1
        done = bool(terminated or truncated)
        state = out["state_out"]
        if pa is not None:
            pa = np.roll(pa, -1, axis=1)
            pa[0, -1] = np.asarray(out["actions"]).reshape(policy.action_shape)
        if pr is not None:
            pr = np.roll(pr, -1, axis=1)
            pr[0, -1] = reward
    return total, length


def evaluate_policy(
    policy: Policy,
    observe: Callable[[list[Any]], np.ndarray],
    env: gym.Env,
    episodes: int,
    seed: int,
    explore: bool = False,
    clip: bool = True,
) -> dict[str, Any]:
    """Episodes ``seed + i`` (``i < episodes``) on ``env`` (see :func:`run_episode`), summed
    up by :func:`~rlblocks.train.loop.episode_summary`; torch's RNG state is restored after."""
    returns: list[float] = []
    lengths: list[int] = []
    with torch.random.fork_rng(devices=[]):
        for ep in range(episodes):
            total, length = run_episode(policy, observe, env, seed + ep, explore, clip)
            returns.append(total)
            lengths.append(length)
    return episode_summary(returns, lengths)
