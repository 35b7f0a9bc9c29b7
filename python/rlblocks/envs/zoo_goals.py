"""A goal-conditioned zoo task for hindsight experience replay: :class:`GoalBits`.

Bit flipping (Andrychowicz et al. 2017, "Hindsight Experience Replay", section 3.1): the
state is ``n_bits`` bits, the goal another ``n_bits`` bits drawn at reset (never equal to the
start), and an episode lasts ``n_bits`` steps (then truncated; reaching the goal ends
nothing, as in gymnasium-robotics). Observations are a goal Dict (``observation`` and
``achieved_goal``: the bits, ``desired_goal``: the goal; float32 0/1). The reward is sparse,
0 when the bits equal the goal after the step and -1 otherwise, and
:meth:`GoalBits.compute_reward` computes it batched, as gymnasium-robotics'
``compute_reward(achieved_goal, desired_goal, info)``; ``info["is_success"]`` is 1.0 on the
goal. Actions:

* ``action="discrete"`` (DQN, SAC): ``Discrete(n_bits + 1)`` flips one bit, or none
  (action ``n_bits``: stay on a reached goal);
* ``action="box"`` (SAC, TD3, DDPG): ``Box(-1, 1, (n_bits,))`` flips every bit whose
  component is > 0 (one step can reach any goal).

A policy that ignores the goal reaches it by chance only (about ``n_bits * 2**-n_bits`` of
the episodes with discrete flips), and a learner without relabelling sees that reward too
rarely to learn within the zoo's budget; with hindsight goals every episode teaches.

Examples:
    >>> import numpy as np
    >>> env = GoalBits(n_bits=4)
    >>> obs, _ = env.reset(seed=0)
    >>> sorted(obs), obs["achieved_goal"].tolist() == obs["observation"].tolist()
    (['achieved_goal', 'desired_goal', 'observation'], True)
    >>> env.compute_reward(np.zeros((2, 4)), np.array([[0, 0, 0, 0], [1, 0, 0, 0]]), None)
    array([ 0., -1.], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["GoalBits"]


class GoalBits(gym.Env):
    """Bit flipping to a goal with a sparse reward (module docstring).

    Args:
        n_bits: Bits of the state and the goal (2..64).
        action: ``"discrete"`` (flip one bit, or none with action ``n_bits``) or ``"box"``
            (flip the bits whose component is > 0).
        episode_len: Steps per episode (None: ``n_bits``).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self, n_bits: int = 6, action: str = "discrete", episode_len: int | None = None
    ) -> None:
        if isinstance(n_bits, bool) or not isinstance(n_bits, int) or not 2 <= n_bits <= 64:
            raise ValueError(f"n_bits must be an int in [2, 64], got {n_bits!r}")
        if action not in ("discrete", "box"):
            raise ValueError(f"action must be 'discrete' or 'box', got {action!r}")
        length = n_bits if episode_len is None else episode_len
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(f"episode_len must be None or an int >= 1, got {episode_len!r}")
        self.n_bits, self.episode_len, self.action = n_bits, length, action
        bits = spaces.Box(0.0, 1.0, (n_bits,), np.float32)
        self.observation_space = spaces.Dict(
            {"observation": bits, "achieved_goal": bits, "desired_goal": bits}
        )
        self.action_space: spaces.Space[Any] = (
            spaces.Discrete(n_bits + 1)
            if action == "discrete"
            else spaces.Box(-1.0, 1.0, (n_bits,), np.float32)
        )
        self._bits = np.zeros(n_bits, np.float32)
        self._goal = np.ones(n_bits, np.float32)
        self._t = 0

    def compute_reward(self, achieved_goal: Any, desired_goal: Any, info: Any) -> Any:
        """0 where ``achieved_goal`` equals ``desired_goal`` (every bit), else -1; batched
        over the leading dimensions (``info`` is not read)."""
        a, d = np.asarray(achieved_goal), np.asarray(desired_goal)
        miss = (np.abs(a - d) > 0.5).any(axis=-1)
        return np.where(miss, -1.0, 0.0).astype(np.float32)

    def _obs(self) -> dict[str, np.ndarray]:
        return {
            "observation": self._bits.copy(),
            "achieved_goal": self._bits.copy(),
            "desired_goal": self._goal.copy(),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """A random state and a different random goal."""
        super().reset(seed=seed)
        n = self.n_bits
        self._bits = self.np_random.integers(0, 2, n).astype(np.float32)
        goal = self.np_random.integers(0, 2, n).astype(np.float32)
        if np.array_equal(goal, self._bits):  # never start on the goal
            i = int(self.np_random.integers(0, n))
            goal[i] = 1.0 - goal[i]
        self._goal = goal
        self._t = 0
        return self._obs(), {"is_success": 0.0}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Flips the bits of ``action``; reward 0 on the goal, else -1."""
        if self.action == "discrete":
            if not self.action_space.contains(action):
                raise ValueError(f"action must be an int in [0, {self.n_bits}], got {action!r}")
            if int(action) < self.n_bits:
                self._bits[int(action)] = 1.0 - self._bits[int(action)]
        else:
            a = np.asarray(action, np.float64)
            if a.shape != (self.n_bits,) or not np.isfinite(a).all():
                raise ValueError(
                    f"action must be {self.n_bits} finite numbers, got {np.asarray(action)!r}"
                )
            flip = a > 0.0
            self._bits[flip] = 1.0 - self._bits[flip]
        self._t += 1
        reward = float(self.compute_reward(self._bits, self._goal, None))
        truncated = self._t >= self.episode_len
        return self._obs(), reward, False, truncated, {"is_success": float(reward == 0.0)}
