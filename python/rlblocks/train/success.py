"""The ``success_rate`` column of ``progress.csv``, one implementation for every native
trainer (PPO, DQN, SAC, TD3, DDPG).

A goal-conditioned env (a goal ``Dict`` observation: gymnasium-robotics' ``GoalEnv``,
highway-env's parking) says in the info of each step whether the goal is met:
``info["is_success"]``, or ``info["success"]`` as PointMaze names it. The success of an
episode is that flag at its last step (read by
:func:`~rlblocks.wrappers.vector_steps.episode_success` as the envs are stepped); the column
is their mean over the last ``metrics_smoothing_episodes`` finished episodes, NaN before one
ends. Only goal-Dict envs get the column (progress.csv's columns are fixed by its first
row); ``evaluate`` reports ``success_rate`` for any env whose infos carry the flag.

Examples:
    >>> import gymnasium as gym
    >>> box = gym.spaces.Box(-1.0, 1.0, (2,))
    >>> goal = gym.spaces.Dict({"observation": box, "achieved_goal": box, "desired_goal": box})
    >>> window = SuccessWindow(goal, size=3)
    >>> window.metrics()
    {'success_rate': nan}
    >>> window.add([1.0, 0.0, 1.0, 1.0])   # the window keeps the last 3
    >>> window.metrics(), window.state()
    ({'success_rate': 0.6666666666666666}, [0.0, 1.0, 1.0])
    >>> SuccessWindow(box, size=3).metrics()   # not a goal env: no column
    {}
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import Any

import gymnasium as gym

from rlblocks.her import is_goal_space

__all__ = ["SuccessWindow"]


class SuccessWindow:
    """The success flags of the last ``size`` finished episodes, and their column.

    Args:
        observation_space: The env's (one sub-env's) observation space: a goal Dict has the
            column.
        size: How many episodes the mean runs over (``metrics_smoothing_episodes``).
    """

    def __init__(self, observation_space: gym.Space, size: int):
        #: Whether progress.csv has ``success_rate`` (and ``evaluation/success_rate``).
        self.tracked = is_goal_space(observation_space)
        self.flags: deque[float] = deque(maxlen=size)

    def add(self, flags: Iterable[float]) -> None:
        """Appends the flags of newly finished episodes (oldest first)."""
        self.flags.extend(float(f) for f in flags)

    def take(self, steps: Any) -> None:
        """Appends the flags a :class:`~rlblocks.wrappers.vector_steps.VectorSteps` booked
        since the last call (its ``take_successes``)."""
        self.add(steps.take_successes())

    def metrics(self) -> dict[str, float]:
        """``{"success_rate": mean}`` (NaN before an episode with a flag ends) for a goal
        env; ``{}`` for any other."""
        if not self.tracked:
            return {}
        won = list(self.flags)
        return {"success_rate": sum(won) / len(won) if won else math.nan}

    def state(self) -> list[float]:
        """The flags, for a checkpoint."""
        return list(self.flags)

    def load(self, flags: Iterable[float] | None) -> None:
        """Restores :meth:`state` (None: a checkpoint written before the column existed)."""
        self.flags.clear()
        self.add(flags or ())
