"""A zoo of small learning tasks, one per feature of the observation / action / model stack.

Every task is a short episode (16 steps by default) of independent rounds: each step shows
a freshly drawn observation and rewards the action that is the right function of THAT
observation (``1`` for a right answer, ``0`` otherwise; continuous and multi-part actions
earn partial credit in ``[0, 1]``). Because the observations of successive steps are
independent, an agent that acts on a one-step-stale observation, or ignores a key, a
channel, an item of a list or the list's length, scores exactly what a random agent scores
(:attr:`ZooEnv.random_return`). The memory task (``Recall``) instead rewards echoing
the observation shown ``delay`` steps earlier, which needs ``use_lstm`` / ``use_attention``.

Families (``rlblocks/zoo-<Name>-v0`` ids and their training budgets are in
:data:`rlblocks.envs.ZOO`):

* observations (:mod:`rlblocks.envs.zoo_observations`): ``BoxBandit`` (a float ``Box`` of
  any rank and dtype; rank 3: the vision model), ``ImageBandit`` (a ``uint8`` HxWxC
  picture), ``GridBandit`` (a MiniGrid-like 7x7x3 grid), ``DiscreteBandit`` /
  ``MultiDiscreteBandit`` (one-hot encoded), ``NestedBandit`` (nested ``Dict`` or
  ``Tuple``), ``RepeatedBandit`` (a :class:`~rlblocks.spaces.Repeated` list).
* structured observations (:mod:`rlblocks.envs.zoo_structures`): ``SequenceBandit``
  (a gymnasium ``Sequence``), ``GraphBandit`` (a ``Graph``), ``TextBandit`` (a ``Text``
  string), ``OneOfBandit`` (a ``OneOf`` union).
* actions (:mod:`rlblocks.envs.zoo_actions`): ``ActionBandit`` — ``MultiDiscrete``,
  ``Box``, ``Tuple`` and ``Dict`` actions.
* masks: :class:`~rlblocks.envs.masked_bandit.MaskedBanditEnv` (``Discrete`` /
  ``MultiDiscrete`` actions behind RLlib's ``action_mask``) is in the zoo's table too.
* memory (:mod:`rlblocks.envs.zoo_memory`): ``Recall`` — echo the symbol seen ``delay``
  steps ago.

This module holds what every task shares: :class:`ZooEnv` and its action check.

Examples:
    >>> from gymnasium import spaces
    >>> class Parity(ZooEnv):  # reward 1 for saying whether the observed number is odd
    ...     observation_space, action_space = spaces.Discrete(10), spaces.Discrete(2)
    ...     random_step_reward = 0.5
    ...     def _draw(self):
    ...         return int(self.np_random.integers(10))
    ...     def score(self, obs, action):
    ...         return float(action == obs % 2)
    ...     def answer(self, obs):
    ...         return obs % 2
    >>> env = Parity(episode_len=3)
    >>> obs, _ = env.reset(seed=0)
    >>> env.step(env.answer(obs))[1:4], env.max_return, env.random_return
    ((1.0, False, False), 3.0, 1.5)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["ZooEnv"]


class ZooEnv(gym.Env, ABC):
    """Base of the zoo: ``episode_len`` independent rounds, truncated (never terminated).

    Subclasses set ``observation_space`` / ``action_space`` and implement :meth:`_draw`
    (a fresh observation) and :meth:`score` (the reward of an action for an observation,
    in ``[0, 1]``); :meth:`answer` returns an action that scores 1.

    Args:
        episode_len: Steps per episode (> 0).

    Raises:
        ValueError: A non-positive episode length.
    """

    metadata: dict[str, Any] = {"render_modes": []}
    #: Expected reward per step of uniformly random actions (set by subclasses).
    random_step_reward: float = 0.0

    def __init__(self, episode_len: int = 16):
        if isinstance(episode_len, bool) or int(episode_len) != episode_len or episode_len <= 0:
            raise ValueError(
                f"{type(self).__name__}: episode_len must be an int > 0, got {episode_len!r}"
            )
        self.episode_len = int(episode_len)
        self._t = 0
        self._obs: Any = None

    @property
    def max_return(self) -> float:
        """The return of an agent that always answers right."""
        return float(self.episode_len)

    @property
    def random_return(self) -> float:
        """The expected return of uniformly random actions (and of any agent that acts on
        a stale observation)."""
        return round(self.episode_len * self.random_step_reward, 6)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        self._obs = self._draw()
        return self._obs, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self._obs is None:
            raise RuntimeError(f"{type(self).__name__}: call reset() before step()")
        _check_action(self.action_space, action, type(self).__name__)
        reward = float(self.score(self._obs, action))
        self._t += 1
        self._obs = self._draw()
        return self._obs, reward, False, self._t >= self.episode_len, {}

    @abstractmethod
    def score(self, obs: Any, action: Any) -> float:
        """The reward of ``action`` taken on ``obs`` (in ``[0, 1]``)."""

    @abstractmethod
    def answer(self, obs: Any) -> Any:
        """An action that earns the full reward on ``obs``."""

    @abstractmethod
    def _draw(self) -> Any:
        """The next observation."""


def _check_action(space: gym.Space, action: Any, name: str, path: str = "action") -> None:
    """ValueError unless ``action`` fits ``space`` (Box actions: any float dtype, right shape,
    finite)."""
    if isinstance(space, spaces.Box):
        arr = np.asarray(action)
        if arr.shape != space.shape or not np.issubdtype(arr.dtype, np.number):
            raise ValueError(
                f"{name}: {path} must be a number array of shape {space.shape}, got {action!r}"
            )
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name}: {path} must be finite, got {action!r}")
        return
    if isinstance(space, spaces.Tuple):
        if not isinstance(action, (tuple, list)) or len(action) != len(space.spaces):
            raise ValueError(
                f"{name}: {path} must be a tuple of {len(space.spaces)} actions, got {action!r}"
            )
        for i, (sub, a) in enumerate(zip(space.spaces, action, strict=True)):
            _check_action(sub, a, name, f"{path}[{i}]")
        return
    if isinstance(space, spaces.Dict):
        if not isinstance(action, dict) or set(action) != set(space.spaces):
            raise ValueError(
                f"{name}: {path} must be a dict with keys {sorted(space.spaces)}, got {action!r}"
            )
        for key, sub in space.spaces.items():
            _check_action(sub, action[key], name, f"{path}[{key!r}]")
        return
    value = np.asarray(action)
    if isinstance(space, spaces.MultiDiscrete) and np.issubdtype(value.dtype, np.integer):
        value = value.astype(space.dtype)
    if not space.contains(value if value.shape else value.item()):
        raise ValueError(f"{name}: {path} {action!r} is not in {space}")
