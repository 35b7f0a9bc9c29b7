"""Shared pieces of the tests that hold an rlblocks learner beside its Stable-Baselines3
twin (tests/test_*_sb3.py): an env that only carries spaces, and a module's linear layers."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch


class SpacesOnly(gym.Env):
    """An env with only the spaces SB3's constructor reads (nothing steps it for real)."""

    def __init__(self, observation_space: gym.spaces.Box, action_space: gym.spaces.Space) -> None:
        self.observation_space = observation_space
        self.action_space = action_space

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action: Any) -> Any:
        return np.zeros(self.observation_space.shape, np.float32), 0.0, False, False, {}


def linears(module: torch.nn.Module) -> list[torch.nn.Linear]:
    """``module``'s linear layers, in order."""
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
