"""RepeatAfterMe: echo the observation seen ``repeat_delay`` steps ago (needs memory).

Each step the environment shows a random bit ``o_t`` (``Discrete(2)``). The action ``a_t``
taken after seeing ``o_t`` earns ``+1`` if it equals ``o_{t - repeat_delay}`` and ``-1``
otherwise; observations before the episode start count as ``0``. With ``repeat_delay=0`` the
task is trivially reactive; with ``repeat_delay >= 1`` only a model with memory (LSTM,
attention, frame stacking) can score above chance. Episodes are truncated after
``episode_len`` steps.

Examples:
    >>> env = RepeatAfterMe(repeat_delay=0, episode_len=4)
    >>> obs, _ = env.reset(seed=0)
    >>> total = 0.0
    >>> for _ in range(4):
    ...     obs, r, term, trunc, _ = env.step(obs)  # echo the current bit
    ...     total += r
    >>> total, trunc
    (4.0, True)
"""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym
from gymnasium import spaces

__all__ = ["RepeatAfterMe"]


class RepeatAfterMe(gym.Env):
    """Reward ``+1`` when ``a_t == o_{t - repeat_delay}``, else ``-1``.

    Args:
        repeat_delay: How many steps back the agent must echo (>= 0).
        episode_len: Steps per episode (truncation).

    Raises:
        ValueError: A negative delay or a non-positive episode length.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, repeat_delay: int = 1, episode_len: int = 100):
        if repeat_delay < 0:
            raise ValueError(f"RepeatAfterMe: repeat_delay must be >= 0, got {repeat_delay}")
        if episode_len <= 0:
            raise ValueError(f"RepeatAfterMe: episode_len must be > 0, got {episode_len}")
        self.repeat_delay = int(repeat_delay)
        self.episode_len = int(episode_len)
        self.observation_space = spaces.Discrete(2)
        self.action_space = spaces.Discrete(2)
        # The last repeat_delay + 1 observations, newest last; pre-episode slots are 0.
        self._history: deque[int] = deque(maxlen=self.repeat_delay + 1)
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        super().reset(seed=seed)
        self._history.clear()
        self._history.extend([0] * self.repeat_delay)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[int, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"RepeatAfterMe: action must be 0 or 1, got {action!r}")
        if not self._history:
            raise RuntimeError("RepeatAfterMe: call reset() before step()")
        target = self._history[0]
        reward = 1.0 if int(action) == target else -1.0
        self._t += 1
        return self._observe(), reward, False, self._t >= self.episode_len, {"target": target}

    def _observe(self) -> int:
        obs = int(self.np_random.integers(2))
        self._history.append(obs)
        return obs
