"""The autoregressive-actions task of RLlib's models guide: two binary actions that should agree.

Each step shows a random bit ``o`` (``Discrete(2)``). The action is a pair ``(a1, a2)``
(``Tuple(Discrete(2), Discrete(2))``); the reward is ``5 * [a1 == o] + 5 * [a2 == a1]``, so
at most 10 per step. A policy that samples ``a1`` and ``a2`` independently can still reach
the optimum only by making both deterministic; an autoregressive distribution
``P(a1) P(a2 | a1)`` learns the correlation directly. Episodes are truncated after
``episode_len`` steps.

Examples:
    >>> env = CorrelatedActionsEnv(episode_len=2)
    >>> obs, _ = env.reset(seed=0)
    >>> env.step((obs, obs))[1], env.step((0, 1))[1] in (0.0, 5.0)
    (10.0, True)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium import spaces

__all__ = ["CorrelatedActionsEnv", "correlated_reward"]

MATCH_OBS_REWARD = 5.0
MATCH_A1_REWARD = 5.0


def correlated_reward(obs: int, a1: int, a2: int) -> float:
    """Reward of one step: 5 for ``a1 == obs`` plus 5 for ``a2 == a1``.

    Examples:
        >>> correlated_reward(1, 1, 1), correlated_reward(1, 0, 0), correlated_reward(0, 0, 1)
        (10.0, 5.0, 5.0)
    """
    return MATCH_OBS_REWARD * (a1 == obs) + MATCH_A1_REWARD * (a2 == a1)


class CorrelatedActionsEnv(gym.Env):
    """Observe a bit, answer with a pair; reward as in :func:`correlated_reward`.

    Args:
        episode_len: Steps per episode (truncation).

    Raises:
        ValueError: A non-positive episode length.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, episode_len: int = 20):
        if episode_len <= 0:
            raise ValueError(f"CorrelatedActionsEnv: episode_len must be > 0, got {episode_len}")
        self.episode_len = int(episode_len)
        self.observation_space = spaces.Discrete(2)
        self.action_space = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2)))
        self._obs: int | None = None
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        self._obs = int(self.np_random.integers(2))
        return self._obs, {}

    def step(self, action: Any) -> tuple[int, float, bool, bool, dict[str, Any]]:
        if self._obs is None:
            raise RuntimeError("CorrelatedActionsEnv: call reset() before step()")
        a1, a2 = (int(a) for a in action)
        if a1 not in (0, 1) or a2 not in (0, 1):
            raise ValueError(f"CorrelatedActionsEnv: actions must be 0 or 1, got {action!r}")
        reward = correlated_reward(self._obs, a1, a2)
        self._t += 1
        self._obs = int(self.np_random.integers(2))
        return self._obs, reward, False, self._t >= self.episode_len, {}
