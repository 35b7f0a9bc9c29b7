"""CartPole with parametric actions: the two real actions hide among ``max_avail_actions`` slots.

Every step the environment puts the embeddings of "push left" and "push right" into two
random slots of ``avail_actions`` (``[max_avail_actions, 2]``) and fills the other slots with
random decoy embeddings. ``action_mask`` is 1 exactly at the two real slots. The action is a
slot index; choosing a masked slot is an error. A model must therefore read the embeddings
(and should apply the mask), as in the "Variable-length / Parametric Action Spaces"
section of RLlib's models guide. The real CartPole observation is under ``cart``.

Examples:
    >>> env = ParametricCartPole(max_avail_actions=6)
    >>> obs, _ = env.reset(seed=0)
    >>> sorted(obs), obs["avail_actions"].shape, int(obs["action_mask"].sum())
    (['action_mask', 'avail_actions', 'cart'], (6, 2), 2)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

__all__ = ["ParametricCartPole"]

EMBED_SIZE = 2


class ParametricCartPole(gym.Env):
    """CartPole-v1 behind a masked, embedded ``Discrete(max_avail_actions)`` action space.

    The left/right embeddings describe the actions themselves, so every instance built with
    the same ``embedding_seed`` has the same ones (the envs of a vector env agree on what
    "left" looks like); their slots and the decoys change every step. ``info`` carries
    ``left_slot`` and ``right_slot``.

    Args:
        max_avail_actions: Number of action slots (>= 2).
        max_episode_steps: Truncate after this many steps (CartPole-v1: 500).
        embedding_seed: Seeds the two action embeddings.

    Raises:
        ValueError: ``max_avail_actions < 2``.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        max_avail_actions: int = 10,
        max_episode_steps: int | None = 500,
        embedding_seed: int = 0,
    ):
        if max_avail_actions < 2:
            raise ValueError(
                f"ParametricCartPole: max_avail_actions must be >= 2, got {max_avail_actions}"
            )
        self.max_avail_actions = int(max_avail_actions)
        self.max_episode_steps = max_episode_steps
        self.cartpole = CartPoleEnv()
        n = self.max_avail_actions
        self.action_space = spaces.Discrete(n)
        self.observation_space = spaces.Dict(
            {
                "action_mask": spaces.Box(0.0, 1.0, (n,), np.float32),
                "avail_actions": spaces.Box(-1.0, 1.0, (n, EMBED_SIZE), np.float32),
                "cart": self.cartpole.observation_space,
            }
        )
        # Two opposite unit vectors at a seeded angle: well separated, so learnable.
        angle = np.random.default_rng(embedding_seed).uniform(0.0, 2.0 * np.pi)
        self.left_embed = np.array([np.cos(angle), np.sin(angle)], np.float32)
        self.right_embed = -self.left_embed
        self.left_slot = 0
        self.right_slot = 1
        self._elapsed = 0
        self._mask = np.zeros(n, np.float32)
        self._avail = np.zeros((n, EMBED_SIZE), np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        cart, _ = self.cartpole.reset(seed=None if seed is None else seed + 1)
        self._elapsed = 0
        return self._observe(cart), self._info()

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        slot = int(action)
        if slot == self.left_slot:
            real = 0
        elif slot == self.right_slot:
            real = 1
        else:
            raise ValueError(
                f"ParametricCartPole: action {slot} is masked out; legal slots are "
                f"{self.left_slot} (left) and {self.right_slot} (right)"
            )
        cart, reward, terminated, truncated, _ = self.cartpole.step(real)
        self._elapsed += 1
        if self.max_episode_steps is not None and self._elapsed >= self.max_episode_steps:
            truncated = True
        return self._observe(cart), float(reward), bool(terminated), bool(truncated), self._info()

    def _observe(self, cart: np.ndarray) -> dict[str, np.ndarray]:
        n = self.max_avail_actions
        self.left_slot, self.right_slot = (int(i) for i in self.np_random.choice(n, 2, False))
        self._avail = self.np_random.uniform(-1.0, 1.0, (n, EMBED_SIZE)).astype(np.float32)
        self._avail[self.left_slot] = self.left_embed
        self._avail[self.right_slot] = self.right_embed
        self._mask = np.zeros(n, np.float32)
        self._mask[[self.left_slot, self.right_slot]] = 1.0
        return {
            "action_mask": self._mask.copy(),
            "avail_actions": self._avail.copy(),
            "cart": np.asarray(cart, np.float32),
        }

    def _info(self) -> dict[str, Any]:
        return {"left_slot": self.left_slot, "right_slot": self.right_slot}
