"""``MaskedBanditEnv``: a contextual bandit in RLlib's action-mask convention.

Observations are ``Dict(action_mask=..., observations=...)``. Each step draws a fresh
context (the rewarded action of each discrete component) and a fresh mask: the rewarded
action is always legal, every other action is legal with probability 1/2. The context is
shown in ``observations`` (a one-hot Box with noise, or an image with one bright column);
the policy must read it to score above a uniform pick among the legal actions.

Every step checks the action against the mask of the observation it answers: a masked
action scores ``-1`` and is counted in the class-wide :attr:`MaskedBanditEnv.counts`
(``steps``, ``masked``), which the tests read after whole training runs.

Action spaces (``action=``):

* ``"discrete"``: ``Discrete(n)``, mask of ``n`` entries;
* ``"multidiscrete"``: ``MultiDiscrete([n, n])``, mask of ``2n`` entries (the components'
  blocks concatenated, RLlib's convention); reward: the fraction of components right;
* ``"tuple"``: ``Tuple(Discrete(n), Box(-1, 1, (2,)))``, mask of ``n`` entries over the
  Discrete part (the Box part is continuous and unmasked; it earns nothing);
* ``"dict"``: ``Dict(pick=Discrete(n), aim=Box(-1, 1, (2,)), also=MultiDiscrete([n]))``,
  mask of ``2n`` entries in flatten order (keys sorted: ``also``'s block, then ``pick``'s;
  ``aim`` is continuous); reward: the fraction of the two discrete parts right.

Examples:
    >>> env = MaskedBanditEnv(action="multidiscrete", n=3)
    >>> obs, _ = env.reset(seed=0)
    >>> obs["action_mask"].shape, env.observation_space["observations"].shape
    ((6,), (10,))
    >>> _, reward, *_ = env.step(env.best_action())
    >>> reward
    1.0
"""

from __future__ import annotations

from math import comb
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["MaskedBanditEnv"]


class MaskedBanditEnv(gym.Env):
    """A masked contextual bandit (see the module docstring).

    Args:
        action: ``"discrete"``, ``"multidiscrete"``, ``"tuple"`` or ``"dict"``.
        n: Actions per discrete component (>= 2).
        obs: ``"box"`` (one-hot context plus 2 noise features, per component) or
            ``"image"`` (``(6, n, k)`` float32 image, ``k`` components: channel ``j`` has
            the column of component ``j``'s rewarded action lit).
        mask: ``"multibinary"`` (``MultiBinary``) or ``"box"`` (``Box(0, 1)`` float32).
        episode_len: Steps per episode (truncated after it).

    Attributes:
        counts: Class-wide ``{"steps": ..., "masked": ...}`` over every instance.
    """

    metadata = {"render_modes": []}  # noqa: RUF012  (gymnasium's own attribute)
    counts: ClassVar[dict[str, int]] = {"steps": 0, "masked": 0}

    def __init__(
        self,
        action: str = "discrete",
        n: int = 4,
        obs: str = "box",
        mask: str = "multibinary",
        episode_len: int = 10,
    ):
        if action not in ("discrete", "multidiscrete", "tuple", "dict"):
            raise ValueError(
                f"MaskedBanditEnv: action must be 'discrete', 'multidiscrete', "
                f"'tuple' or 'dict', got {action!r}"
            )
        if obs not in ("box", "image"):
            raise ValueError(f"MaskedBanditEnv: obs must be 'box' or 'image', got {obs!r}")
        if mask not in ("multibinary", "box"):
            raise ValueError(f"MaskedBanditEnv: mask must be 'multibinary' or 'box', got {mask!r}")
        if int(n) < 2 or int(episode_len) < 1:
            raise ValueError(
                f"MaskedBanditEnv: need n >= 2 and episode_len >= 1, got n={n}, "
                f"episode_len={episode_len}"
            )
        self.kind, self.n, self.obs_kind = action, int(n), obs
        self.k = 2 if action in ("multidiscrete", "dict") else 1
        self.episode_len = int(episode_len)
        if action == "discrete":
            self.action_space: gym.Space = spaces.Discrete(self.n)
        elif action == "multidiscrete":
            self.action_space = spaces.MultiDiscrete([self.n] * self.k)
        elif action == "tuple":
            self.action_space = spaces.Tuple(
                (spaces.Discrete(self.n), spaces.Box(-1.0, 1.0, (2,), np.float32))
            )
        else:
            self.action_space = spaces.Dict(
                {
                    "pick": spaces.Discrete(self.n),
                    "aim": spaces.Box(-1.0, 1.0, (2,), np.float32),
                    "also": spaces.MultiDiscrete([self.n]),
                }
            )
        size = self.k * self.n
        mask_space: gym.Space = (
            spaces.MultiBinary(size)
            if mask == "multibinary"
            else spaces.Box(0.0, 1.0, (size,), np.float32)
        )
        if obs == "box":
            obs_space: gym.Space = spaces.Box(-2.0, 2.0, (self.k * (self.n + 2),), np.float32)
        else:
            obs_space = spaces.Box(0.0, 1.0, (6, self.n, self.k), np.float32)
        self.observation_space = spaces.Dict({"action_mask": mask_space, "observations": obs_space})
        self._mask_dtype = mask_space.dtype
        self._t = 0
        self._target = np.zeros(self.k, np.int64)
        self._mask = np.ones((self.k, self.n), bool)

    # --- episode ---------------------------------------------------------------------------
    def _observe(self) -> dict[str, np.ndarray]:
        rng = self.np_random
        self._target = rng.integers(0, self.n, self.k)
        self._mask = rng.random((self.k, self.n)) < 0.5
        self._mask[np.arange(self.k), self._target] = True
        if self.obs_kind == "box":
            parts = []
            for j in range(self.k):
                one_hot = np.zeros(self.n, np.float32)
                one_hot[self._target[j]] = 1.0
                parts += [one_hot, rng.uniform(-1.0, 1.0, 2).astype(np.float32)]
            observations = np.concatenate(parts)
        else:
            observations = np.zeros((6, self.n, self.k), np.float32)
            for j in range(self.k):
                observations[:, self._target[j], j] = 1.0
        return {
            "action_mask": self._mask.reshape(-1).astype(self._mask_dtype),
            "observations": observations,
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def _discrete(self, action: Any) -> np.ndarray:
        if self.kind == "tuple":
            action = action[0]
        elif self.kind == "dict":  # flatten order: "also" before "pick"
            return np.array([np.asarray(action["also"]).reshape(-1)[0], action["pick"]], np.int64)
        return np.atleast_1d(np.asarray(action, np.int64))

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"MaskedBanditEnv: action {action!r} is not in {self.action_space}")
        chosen = self._discrete(action)
        legal = self._mask[np.arange(self.k), chosen]
        masked = not bool(legal.all())
        MaskedBanditEnv.counts["steps"] += 1
        MaskedBanditEnv.counts["masked"] += int(masked)
        reward = -1.0 if masked else float(np.mean(chosen == self._target))
        self._t += 1
        return self._observe(), reward, False, self._t >= self.episode_len, {"masked": masked}

    # --- helpers for tests -------------------------------------------------------------------
    def best_action(self) -> Any:
        """The rewarded action for the current observation."""
        if self.kind == "discrete":
            return int(self._target[0])
        if self.kind == "multidiscrete":
            return self._target.copy()
        if self.kind == "dict":
            return {
                "pick": int(self._target[1]),
                "aim": np.zeros(2, np.float32),
                "also": self._target[:1].copy(),
            }
        return (int(self._target[0]), np.zeros(2, np.float32))

    @property
    def random_legal_return(self) -> float:
        """Expected episode return of a uniform pick among the legal actions."""
        # Legal actions besides the target: j ~ Binomial(n - 1, 1/2); the pick is right with
        # probability 1 / (1 + j) (the same per component for MultiDiscrete).
        p = sum(comb(self.n - 1, j) / 2 ** (self.n - 1) / (1 + j) for j in range(self.n))
        return float(self.episode_len * p)

    @classmethod
    def reset_counts(cls) -> None:
        """Zeroes :attr:`counts`."""
        cls.counts["steps"] = 0
        cls.counts["masked"] = 0
