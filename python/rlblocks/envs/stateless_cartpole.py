"""CartPole without the velocities: a partially observable task for recurrent models.

The observation keeps only the cart position and the pole angle (indices 0 and 2 of
CartPole's ``[x, x_dot, theta, theta_dot]``). A feed-forward policy cannot tell in which
direction the pole is moving; an LSTM or attention model can infer it from two or more
consecutive observations. Dynamics, rewards and termination are CartPole's.

Examples:
    >>> env = StatelessCartPole()
    >>> obs, _ = env.reset(seed=0)
    >>> obs.shape, env.observation_space.shape
    ((2,), (2,))
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

__all__ = ["VISIBLE", "StatelessCartPole"]

#: Indices of the CartPole state that stay visible (cart position, pole angle).
VISIBLE = (0, 2)


class StatelessCartPole(CartPoleEnv):
    """CartPole-v1 whose observation is ``[x, theta]`` (velocities hidden).

    Episodes are truncated after ``max_episode_steps`` steps by the environment itself, so
    the class behaves like ``CartPole-v1`` also when constructed directly (no TimeLimit
    wrapper needed).

    Args:
        max_episode_steps: Truncate after this many steps (CartPole-v1: 500); ``None`` for
            no limit.
        render_mode: Passed to CartPole.

    Examples:
        >>> env = StatelessCartPole(max_episode_steps=3)
        >>> _ = env.reset(seed=1)
        >>> [env.step(0)[3] for _ in range(3)]
        [False, False, True]
    """

    def __init__(self, max_episode_steps: int | None = 500, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        full = self.observation_space
        assert isinstance(full, spaces.Box)
        idx = list(VISIBLE)
        self.observation_space = spaces.Box(full.low[idx], full.high[idx], dtype=np.float32)
        self.max_episode_steps = max_episode_steps
        self._elapsed = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        self._elapsed = 0
        return self._hide(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        self._elapsed += 1
        if self.max_episode_steps is not None and self._elapsed >= self.max_episode_steps:
            truncated = True
        return self._hide(obs), float(reward), bool(terminated), bool(truncated), info

    @staticmethod
    def _hide(obs: np.ndarray) -> np.ndarray:
        return np.asarray(obs, dtype=np.float32)[list(VISIBLE)]
