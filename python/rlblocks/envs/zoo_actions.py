"""The zoo's action task: structured action spaces (``MultiDiscrete``, ``Box``, ``Tuple``,
``Dict``) over a ``Box`` observation, with partial credit for partly right actions (see
:mod:`rlblocks.envs.zoo`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from rlblocks.envs.zoo import ZooEnv

__all__ = ["ActionBandit"]


def _third(x: np.ndarray | float) -> np.ndarray:
    """The third of ``[-1, 1]`` a value falls in: 0, 1 or 2."""
    return np.digitize(x, [-1.0 / 3.0, 1.0 / 3.0])


def _closeness(action: np.ndarray, target: np.ndarray) -> float:
    """Mean over components of ``max(0, 1 - |action - target|)`` (actions clipped to
    ``[-1, 1]``): 1 on target, 0 at distance >= 1; uniform actions in ``[-1, 1]`` against a
    uniform target earn 5/12 on average."""
    a = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
    return float(np.mean(np.maximum(0.0, 1.0 - np.abs(a - np.asarray(target, np.float64)))))


class ActionBandit(ZooEnv):
    """A ``Box(-1, 1, (2,))`` observation ``x`` and a structured action space.

    * ``"multidiscrete"``: ``MultiDiscrete([3, 3])``; component ``i`` should name the third
      of ``[-1, 1]`` that ``x[i]`` falls in (0, 1, 2); reward: the fraction right.
    * ``"box"``: ``Box(-1, 1, (2,))``; the action should be ``-x``; reward: the mean of
      ``max(0, 1 - |a_i + x_i|)``.
    * ``"tuple"``: ``(Discrete(3), Box(-1, 1, (1,)))``: the third of ``x[0]`` and ``-x[1]``;
      reward: the mean of the two parts' scores.
    * ``"dict"``: ``{"third": Discrete(3), "sign": Discrete(2)}``: the third of ``x[0]`` and
      whether ``x[1] > 0``; reward: the fraction right.

    Args:
        action: One of the four kinds above.
        episode_len: Steps per episode.

    Examples:
        >>> env = ActionBandit("tuple")
        >>> x = np.array([0.5, -0.25], np.float32)
        >>> env.answer(x)
        (2, array([0.25], dtype=float32))
        >>> env.score(x, (2, np.array([0.75], np.float32)))
        0.75
    """

    _RANDOM = {
        "multidiscrete": 1.0 / 3.0,
        "box": 5.0 / 12.0,
        "tuple": (1.0 / 3.0 + 5.0 / 12.0) / 2.0,
        "dict": (1.0 / 3.0 + 0.5) / 2.0,
    }

    def __init__(self, action: str = "multidiscrete", episode_len: int = 16):
        super().__init__(episode_len)
        if action not in self._RANDOM:
            raise ValueError(
                f"ActionBandit: action must be one of {sorted(self._RANDOM)}, got {action!r}"
            )
        self.kind = action
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        unit = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = {
            "multidiscrete": spaces.MultiDiscrete([3, 3]),
            "box": spaces.Box(-1.0, 1.0, (2,), np.float32),
            "tuple": spaces.Tuple((spaces.Discrete(3), unit)),
            "dict": spaces.Dict({"third": spaces.Discrete(3), "sign": spaces.Discrete(2)}),
        }[action]
        self.random_step_reward = self._RANDOM[action]

    def _draw(self) -> np.ndarray:
        return self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)

    def answer(self, obs: np.ndarray) -> Any:
        x = np.asarray(obs, np.float32)
        if self.kind == "multidiscrete":
            return _third(x).astype(np.int64)
        if self.kind == "box":
            return -x
        if self.kind == "tuple":
            return (int(_third(x[0])), -x[1:])
        return {"third": int(_third(x[0])), "sign": int(x[1] > 0)}

    def score(self, obs: np.ndarray, action: Any) -> float:
        x = np.asarray(obs, np.float64)
        if self.kind == "multidiscrete":
            return float(np.mean(np.asarray(action) == _third(x)))
        if self.kind == "box":
            return _closeness(action, -x)
        if self.kind == "tuple":
            return (float(int(action[0]) == int(_third(x[0]))) + _closeness(action[1], -x[1:])) / 2
        third = int(action["third"]) == int(_third(x[0]))
        sign = int(action["sign"]) == int(x[1] > 0)
        return (int(third) + int(sign)) / 2.0
