"""Exploration noise of deterministic actors (TD3 / DDPG): Gaussian or Ornstein-Uhlenbeck.

Both work on the normalised action in ``[-1, 1]`` (the learner scales to the Box bounds
after adding the noise and clipping), so ``sigma`` is a fraction of half the Box's range in
every dimension. The draws are torch's (``torch.randn``), so the trainer's seed fixes them.

* ``"gaussian"``: independent ``N(0, sigma^2)`` per step and dimension (what the TD3 paper
  explores with, sigma 0.1).
* ``"ornstein_uhlenbeck"``: one process per env row, ``x <- x + theta * (0 - x) * dt +
  sigma * sqrt(dt) * N(0, 1)`` per step (the DDPG paper's temporally correlated noise;
  Stable-Baselines3's discretisation). Its stationary standard deviation is
  ``sigma * sqrt(dt / (1 - (1 - theta * dt)^2))``, and it reverts to 0 at rate ``theta * dt``
  per step. The state carries across episodes (it is not reset at an episode's end); a
  batch of another row count than the last starts a fresh state at 0.

Examples:
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> noise = make_noise("ornstein_uhlenbeck", sigma=0.2, theta=0.15, dt=0.01)
    >>> noise.draw(4, 2).shape
    (4, 2)
    >>> noise.state_dict()["state"].shape
    (4, 2)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

__all__ = ["GaussianNoise", "OrnsteinUhlenbeckNoise", "make_noise"]


class GaussianNoise:
    """Independent ``N(0, sigma^2)`` noise per row and dimension.

    Args:
        sigma: The standard deviation (of the normalised action).
    """

    def __init__(self, sigma: float) -> None:
        self.sigma = float(sigma)

    def draw(self, rows: int, dim: int) -> np.ndarray:
        """``float32 [rows, dim]`` noise."""
        return (torch.randn(rows, dim) * self.sigma).numpy()

    def state_dict(self) -> dict[str, Any]:
        """Nothing to keep (the draws come from torch's seeded generator)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore."""


class OrnsteinUhlenbeckNoise:
    """One Ornstein-Uhlenbeck process per row, mean 0 (module docstring).

    Args:
        sigma: The diffusion scale.
        theta: The mean-reversion rate.
        dt: The time step.
    """

    def __init__(self, sigma: float, theta: float, dt: float) -> None:
        self.sigma, self.theta, self.dt = float(sigma), float(theta), float(dt)
        self.state: np.ndarray | None = None

    @property
    def stationary_std(self) -> float:
        """The process's standard deviation in the long run."""
        decay = 1.0 - self.theta * self.dt
        return self.sigma * math.sqrt(self.dt / max(1e-12, 1.0 - decay * decay))

    def draw(self, rows: int, dim: int) -> np.ndarray:
        """The next ``float32 [rows, dim]`` state of the processes (a copy)."""
        if self.state is None or self.state.shape != (rows, dim):
            self.state = np.zeros((rows, dim), np.float32)
        shock = torch.randn(rows, dim).numpy()
        self.state = (
            self.state
            - np.float32(self.theta * self.dt) * self.state
            + np.float32(self.sigma * math.sqrt(self.dt)) * shock
        ).astype(np.float32)
        return self.state.copy()

    def state_dict(self) -> dict[str, Any]:
        """The processes' current state (None before the first draw)."""
        return {"state": None if self.state is None else self.state.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`'s output."""
        saved = state.get("state")
        self.state = None if saved is None else np.asarray(saved, np.float32).copy()


def make_noise(kind: str, sigma: float, theta: float, dt: float) -> Any:
    """The noise of ``kind`` (``"gaussian"`` or ``"ornstein_uhlenbeck"``).

    Raises:
        ValueError: Another kind.
    """
    if kind == "gaussian":
        return GaussianNoise(sigma)
    if kind == "ornstein_uhlenbeck":
        return OrnsteinUhlenbeckNoise(sigma, theta, dt)
    raise ValueError(f"exploration_noise must be 'gaussian' or 'ornstein_uhlenbeck', got {kind!r}")
