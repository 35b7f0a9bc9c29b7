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

from rlblocks.train.loop import episode_summary
from rlblocks.train.play import play_episode
from rlblocks.train.policy import Policy

__all__ = ["PolicyActor", "evaluate_policy"]


def evaluate_policy(
    policy: Policy,
    observe: Callable[[list[Any]], np.ndarray],
    env: gym.Env,
    episodes: int,
    seed: int,
    explore: bool = False,
    clip: bool = True,
) -> dict[str, Any]:
    """Episodes ``seed + i`` (``i < episodes``) on ``env`` (each one
    :func:`~rlblocks.train.play.play_episode`, the policy acting greedily unless
    ``explore``; Box actions clipped into the action space when ``clip``), summed
    up by :func:`~rlblocks.train.loop.episode_summary` (plus ``success_rate`` when the env's
    last-step infos give ``is_success`` or ``success``); torch's RNG state is restored
    after."""
    returns: list[float] = []
    lengths: list[int] = []
    successes: list[float] = []
    with torch.random.fork_rng(devices=[]):
        for ep in range(episodes):
            actor = PolicyActor(policy, observe, explore)
            total, length = play_episode(
                actor, env, seed + ep, policy.action_space if clip else None, successes
            )
            returns.append(total)
            lengths.append(length)
    summary = episode_summary(returns, lengths)
    if successes:  # the env gives is_success / success: their mean over the episodes
        summary["success_rate"] = sum(successes) / len(successes)
    return summary


class PolicyActor:
    """A native :class:`~rlblocks.train.policy.Policy` as a
    :class:`~rlblocks.train.play.LaneActor` (``observe`` turns raw observations into
    the model's inputs; greedy actions unless ``explore``)."""

    def __init__(
        self, policy: Policy, observe: Callable[[list[Any]], np.ndarray], explore: bool = False
    ) -> None:
        self.policy = policy
        self._observe = observe
        self.explore = explore

    def initial_state(self, n: int) -> list[Any] | None:
        """:meth:`Policy.initial_state` (empty for a model without state)."""
        return self.policy.initial_state(n)

    def initial_prev(self, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The policy's initial previous action (``n`` rows) and zero previous rewards."""
        pol = self.policy
        pa = pr = None
        if pol.n_prev_actions:
            pa = np.broadcast_to(
                pol.initial_prev_action, (n, pol.n_prev_actions, *pol.action_shape)
            ).copy()
        if pol.n_prev_rewards:
            pr = np.zeros((n, pol.n_prev_rewards), np.float32)
        return pa, pr

    def observe(self, raw: list[Any], x: Any, fresh: np.ndarray | None) -> Any:
        """The model's inputs, stacked onto ``x`` where the model reads past observations."""
        return self.policy.stack_obs(x, self._observe(raw), fresh)

    def act(self, x: Any, state: Any, pa: Any, pr: Any) -> tuple[Any, Any]:
        """:meth:`Policy.act` (no values or log-probabilities)."""
        out = self.policy.act(x, state, pa, pr, explore=self.explore, full=False)
        return out["actions"], out["state_out"]

    def restart(self, state: list[Any], fresh: np.ndarray) -> list[Any]:
        """A copy of ``state`` with the rows ``fresh`` at the initial state."""
        init = self.policy.initial_state(len(fresh))
        idx = torch.as_tensor(fresh, device=self.policy.device)
        out = [s.clone() for s in state]
        for s, s0 in zip(out, init, strict=True):
            s[idx] = s0
        return out
