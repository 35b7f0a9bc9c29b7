"""CartPole with a nested Dict observation: a task for the Dict/Discrete preprocessing path.

The state ``[x, x_dot, theta, theta_dot]`` is split into ``{"cart": {"position", "velocity"},
"pole": {"angle", "angular_velocity"}}`` (each a ``Box(1,)``) plus ``"side"``, a
``Discrete(2)`` telling on which half of the track the cart is (one-hot encoded by the
preprocessor). Dynamics, rewards and termination are CartPole's.

Examples:
    >>> env = DictCartPole()
    >>> obs, _ = env.reset(seed=0)
    >>> sorted(obs), sorted(obs["cart"]), int(obs["side"]) in (0, 1)
    (['cart', 'pole', 'side'], ['position', 'velocity'], True)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

__all__ = ["DictCartPole"]


def _scalar(bound: float) -> spaces.Box:
    return spaces.Box(-bound, bound, (1,), np.float32)


class DictCartPole(gym.Env[dict[str, Any], Any]):
    """CartPole-v1 whose observation is a nested Dict; truncated after
    ``max_episode_steps`` steps by the env itself (CartPole-v1: 500)."""

    metadata = CartPoleEnv.metadata

    def __init__(self, max_episode_steps: int | None = 500, render_mode: str | None = None):
        self.cartpole = CartPoleEnv(render_mode=render_mode)
        self.render_mode = render_mode
        self.action_space = spaces.Discrete(2)
        big = float(np.finfo(np.float32).max)
        self.observation_space = spaces.Dict(
            {
                "cart": spaces.Dict(
                    {"position": _scalar(self.cartpole.x_threshold * 2), "velocity": _scalar(big)}
                ),
                "pole": spaces.Dict(
                    {
                        "angle": _scalar(self.cartpole.theta_threshold_radians * 2),
                        "angular_velocity": _scalar(big),
                    }
                ),
                "side": spaces.Discrete(2),
            }
        )
        self.max_episode_steps = max_episode_steps
        self._elapsed = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        obs, info = self.cartpole.reset(seed=seed, options=options)
        self._elapsed = 0
        return self._nest(obs), info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.cartpole.step(action)
        self._elapsed += 1
        if self.max_episode_steps is not None and self._elapsed >= self.max_episode_steps:
            truncated = True
        return self._nest(obs), float(reward), bool(terminated), bool(truncated), info

    def render(self) -> Any:
        return self.cartpole.render()

    def close(self) -> None:
        self.cartpole.close()

    @staticmethod
    def _nest(obs: np.ndarray) -> dict[str, Any]:
        x, x_dot, theta, theta_dot = (np.asarray([v], np.float32) for v in obs)
        return {
            "cart": {"position": x, "velocity": x_dot},
            "pole": {"angle": theta, "angular_velocity": theta_dot},
            "side": int(x[0] >= 0),
        }
