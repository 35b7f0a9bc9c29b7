"""A zoo of small learning tasks, one per feature of the observation / action / model stack.

Every task is a short episode (16 steps by default) of independent rounds: each step shows
a freshly drawn observation and rewards the action that is the right function of THAT
observation (``1`` for a right answer, ``0`` otherwise; continuous and multi-part actions
earn partial credit in ``[0, 1]``). Because the observations of successive steps are
independent, an agent that acts on a one-step-stale observation, or ignores a key, a
channel, an item of a list or the list's length, scores exactly what a random agent scores
(:attr:`ZooEnv.random_return`). The memory task (:class:`Recall`) instead rewards echoing
the observation shown ``delay`` steps earlier, which needs ``use_lstm`` / ``use_attention``.

Families (``rlblocks/zoo-<Name>-v0`` ids and their training budgets are in
:data:`rlblocks.envs.ZOO`):

* :class:`BoxBandit` — a float ``Box`` of any rank and dtype (rank 3: the vision model).
* :class:`ImageBandit` — a ``uint8`` HxWxC picture with a bright square in one half.
* :class:`GridBandit` — a MiniGrid-like 7x7x3 ``uint8`` grid (object, colour, state codes).
* :class:`DiscreteBandit` / :class:`MultiDiscreteBandit` — one-hot encoded observations.
* :class:`NestedBandit` — nested ``Dict`` or ``Tuple`` observations.
* :class:`RepeatedBandit` — a :class:`~rlblocks.spaces.Repeated` list (its length or its
  last item is the answer).
* :class:`ActionBandit` — ``MultiDiscrete``, ``Box``, ``Tuple`` and ``Dict`` actions.
* masks: :class:`~rlblocks.envs.masked_bandit.MaskedBanditEnv` (``Discrete`` /
  ``MultiDiscrete`` actions behind RLlib's ``action_mask``) is in the zoo's table too.
* :class:`Recall` — echo the symbol seen ``delay`` steps ago (memory).

Examples:
    >>> env = DiscreteBandit(n=5, episode_len=4)
    >>> obs, _ = env.reset(seed=0)
    >>> total = 0.0
    >>> for _ in range(4):
    ...     obs, reward, terminated, truncated, info = env.step(env.answer(obs))
    ...     total += reward
    >>> total, truncated, env.max_return, env.random_return
    (4.0, True, 4.0, 0.8)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlblocks.spaces import Repeated

__all__ = [
    "ActionBandit",
    "BoxBandit",
    "DiscreteBandit",
    "GridBandit",
    "ImageBandit",
    "MultiDiscreteBandit",
    "NestedBandit",
    "Recall",
    "RepeatedBandit",
    "ZooEnv",
]


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
            raise ValueError(f"{type(self).__name__}: episode_len must be an int > 0, "
                             f"got {episode_len!r}")
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
            raise ValueError(f"{name}: {path} must be a number array of shape {space.shape}, "
                             f"got {action!r}")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name}: {path} must be finite, got {action!r}")
        return
    if isinstance(space, spaces.Tuple):
        if not isinstance(action, (tuple, list)) or len(action) != len(space.spaces):
            raise ValueError(f"{name}: {path} must be a tuple of {len(space.spaces)} "
                             f"actions, got {action!r}")
        for i, (sub, a) in enumerate(zip(space.spaces, action, strict=True)):
            _check_action(sub, a, name, f"{path}[{i}]")
        return
    if isinstance(space, spaces.Dict):
        if not isinstance(action, dict) or set(action) != set(space.spaces):
            raise ValueError(f"{name}: {path} must be a dict with keys {sorted(space.spaces)}, "
                             f"got {action!r}")
        for key, sub in space.spaces.items():
            _check_action(sub, action[key], name, f"{path}[{key!r}]")
        return
    value = np.asarray(action)
    if isinstance(space, spaces.MultiDiscrete) and np.issubdtype(value.dtype, np.integer):
        value = value.astype(space.dtype)
    if not space.contains(value if value.shape else value.item()):
        raise ValueError(f"{name}: {path} {action!r} is not in {space}")


def _third(x: np.ndarray | float) -> np.ndarray:
    """The third of ``[-1, 1]`` a value falls in: 0, 1 or 2."""
    return np.digitize(x, [-1.0 / 3.0, 1.0 / 3.0])


def _closeness(action: np.ndarray, target: np.ndarray) -> float:
    """Mean over components of ``max(0, 1 - |action - target|)`` (actions clipped to
    ``[-1, 1]``): 1 on target, 0 at distance >= 1; uniform actions in ``[-1, 1]`` against a
    uniform target earn 5/12 on average."""
    a = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
    return float(np.mean(np.maximum(0.0, 1.0 - np.abs(a - np.asarray(target, np.float64)))))


class BoxBandit(ZooEnv):
    """A uniform ``Box(-1, 1, shape, dtype)``; the answer (``Discrete(2)``) is whether the sum
    of all its entries is positive.

    Rank 1 takes the fully connected model, rank 2 the complex-input model, rank 3 (e.g.
    ``(10, 10, 2)``) the vision model.

    Args:
        shape: The observation's shape.
        dtype: ``"float32"`` or ``"float64"``.
        episode_len: Steps per episode.

    Examples:
        >>> env = BoxBandit(shape=(3, 4), dtype="float64")
        >>> obs, _ = env.reset(seed=1)
        >>> obs.dtype, obs.shape, env.score(obs, env.answer(obs)), env.random_return
        (dtype('float64'), (3, 4), 1.0, 8.0)
    """

    random_step_reward = 0.5

    def __init__(self, shape: tuple[int, ...] | list[int] = (4,), dtype: str = "float32",
                 episode_len: int = 16):
        super().__init__(episode_len)
        if dtype not in ("float32", "float64"):
            raise ValueError(f"BoxBandit: dtype must be 'float32' or 'float64', got {dtype!r}")
        shape = tuple(int(d) for d in shape)
        if not shape or any(d <= 0 for d in shape):
            raise ValueError(f"BoxBandit: shape must be non-empty and positive, got {shape}")
        self.observation_space = spaces.Box(-1.0, 1.0, shape, np.dtype(dtype))
        self.action_space = spaces.Discrete(2)

    def _draw(self) -> np.ndarray:
        space = self.observation_space
        assert isinstance(space, spaces.Box)
        return self.np_random.uniform(-1.0, 1.0, space.shape).astype(space.dtype)

    def answer(self, obs: np.ndarray) -> int:
        return int(float(np.sum(obs, dtype=np.float64)) > 0.0)

    def score(self, obs: np.ndarray, action: Any) -> float:
        return float(int(action) == self.answer(obs))


class ImageBandit(ZooEnv):
    """A ``uint8`` HxWxC picture of dim noise with one bright 3x3 square; the answer
    (``Discrete(2)``) is the half (0: left, 1: right) the square lies in.

    Args:
        shape: ``(H, W, C)``, ``W >= 6`` and ``H >= 3``.
        episode_len: Steps per episode.

    Examples:
        >>> env = ImageBandit()
        >>> obs, _ = env.reset(seed=0)
        >>> obs.dtype, obs.shape, env.score(obs, env.answer(obs))
        (dtype('uint8'), (10, 10, 3), 1.0)
    """

    random_step_reward = 0.5

    def __init__(self, shape: tuple[int, int, int] | list[int] = (10, 10, 3),
                 episode_len: int = 16):
        super().__init__(episode_len)
        h, w, c = (int(d) for d in shape)
        if h < 3 or w < 6 or c < 1:
            raise ValueError(f"ImageBandit: shape must be (H>=3, W>=6, C>=1), got {shape}")
        self.observation_space = spaces.Box(0, 255, (h, w, c), np.uint8)
        self.action_space = spaces.Discrete(2)

    def _draw(self) -> np.ndarray:
        h, w, c = self.observation_space.shape  # type: ignore[misc]
        rng = self.np_random
        img = rng.integers(0, 60, (h, w, c), dtype=np.uint8)
        right = int(rng.integers(2))
        half = w // 2
        col = int(rng.integers(0, half - 2)) + (w - half if right else 0)
        row = int(rng.integers(0, h - 2))
        img[row:row + 3, col:col + 3, :] = 255
        return img

    def answer(self, obs: np.ndarray) -> int:
        bright = np.all(obs == 255, axis=-1)
        cols = np.nonzero(bright.any(axis=0))[0]
        return int(cols.mean() >= obs.shape[1] / 2)

    def score(self, obs: np.ndarray, action: Any) -> float:
        return float(int(action) == self.answer(obs))


#: MiniGrid's object codes used by :class:`GridBandit`.
_EMPTY, _WALL, _BALL, _GOAL = 1, 2, 6, 8


class GridBandit(ZooEnv):
    """A MiniGrid-like 7x7x3 ``uint8`` egocentric view (channels: object type, colour,
    state, as MiniGrid encodes them): empty floor, a few walls and balls, and one goal. The
    agent stands at the bottom middle; the answer (``Discrete(3)``) is where the goal is:
    0 left of the agent's column, 1 in it, 2 right of it.

    Args:
        size: The view's side (odd, >= 3).
        episode_len: Steps per episode.

    Examples:
        >>> env = GridBandit()
        >>> obs, _ = env.reset(seed=2)
        >>> obs.shape, int((obs[..., 0] == 8).sum()), env.score(obs, env.answer(obs))
        ((7, 7, 3), 1, 1.0)
    """

    random_step_reward = 1.0 / 3.0

    def __init__(self, size: int = 7, episode_len: int = 16):
        super().__init__(episode_len)
        if size < 3 or size % 2 == 0:
            raise ValueError(f"GridBandit: size must be odd and >= 3, got {size}")
        self.size = int(size)
        self.observation_space = spaces.Box(0, 10, (self.size, self.size, 3), np.uint8)
        self.action_space = spaces.Discrete(3)

    def _draw(self) -> np.ndarray:
        n, rng = self.size, self.np_random
        mid = n // 2
        grid = np.zeros((n, n, 3), np.uint8)
        grid[..., 0] = _EMPTY
        # walls and balls of random colours on n cells other than the agent's
        for cell in rng.permutation(n * n - 1)[:n]:
            row, col = divmod(int(cell), n)
            col += int(row == n - 1 and col >= mid)  # skip the agent's cell (n - 1, mid)
            kind = _WALL if rng.random() < 0.5 else _BALL
            grid[row, col] = (kind, int(rng.integers(6)), 0)
        # the goal's column is uniform over the three answers; never on the agent's cell
        target = int(rng.integers(3))
        col = (int(rng.integers(0, mid)) if target == 0 else mid if target == 1
               else int(rng.integers(mid + 1, n)))
        row = int(rng.integers(0, n - 1 if target == 1 else n))
        grid[row, col] = (_GOAL, 1, 0)  # a green goal
        return grid

    def answer(self, obs: np.ndarray) -> int:
        col = int(np.argwhere(obs[..., 0] == _GOAL)[0][1])
        mid = obs.shape[1] // 2
        return 0 if col < mid else 1 if col == mid else 2

    def score(self, obs: np.ndarray, action: Any) -> float:
        return float(int(action) == self.answer(obs))


class DiscreteBandit(ZooEnv):
    """A ``Discrete(n)`` observation; the answer (``Discrete(n)``) is ``(obs + 1) % n``.

    Args:
        n: Number of observations and actions (>= 2).
        episode_len: Steps per episode.
    """

    def __init__(self, n: int = 5, episode_len: int = 16):
        super().__init__(episode_len)
        if n < 2:
            raise ValueError(f"DiscreteBandit: n must be >= 2, got {n}")
        self.n = int(n)
        self.observation_space = spaces.Discrete(self.n)
        self.action_space = spaces.Discrete(self.n)
        self.random_step_reward = 1.0 / self.n

    def _draw(self) -> int:
        return int(self.np_random.integers(self.n))

    def answer(self, obs: int) -> int:
        return (int(obs) + 1) % self.n

    def score(self, obs: int, action: Any) -> float:
        return float(int(action) == self.answer(obs))


class MultiDiscreteBandit(ZooEnv):
    """A ``MultiDiscrete([n] * k)`` observation; the answer (``Discrete(n ** k)``) is the
    observation read as a base-``n`` number, component 0 first: every component is one digit
    of the answer, so ignoring one caps the score at ``1 / n``.

    Args:
        n: Values per component (>= 2).
        k: Components (>= 2).
        episode_len: Steps per episode.

    Examples:
        >>> env = MultiDiscreteBandit()
        >>> env.score(np.array([2, 1]), 7), env.random_return
        (1.0, 1.777778)
    """

    def __init__(self, n: int = 3, k: int = 2, episode_len: int = 16):
        super().__init__(episode_len)
        if n < 2 or k < 2:
            raise ValueError(f"MultiDiscreteBandit: n and k must be >= 2, got {n}, {k}")
        self.n, self.k = int(n), int(k)
        self.observation_space = spaces.MultiDiscrete([self.n] * self.k)
        self.action_space = spaces.Discrete(self.n ** self.k)
        self.random_step_reward = 1.0 / self.n ** self.k

    def _draw(self) -> np.ndarray:
        space = self.observation_space
        assert isinstance(space, spaces.MultiDiscrete)
        return self.np_random.integers(0, self.n, space.shape).astype(space.dtype)

    def answer(self, obs: np.ndarray) -> int:
        return sum(int(v) * self.n ** (self.k - 1 - i) for i, v in enumerate(obs))

    def score(self, obs: np.ndarray, action: Any) -> float:
        return float(int(action) == self.answer(obs))


class NestedBandit(ZooEnv):
    """A nested ``Dict`` (``kind="dict"``) or ``Tuple`` (``kind="tuple"``) observation holding
    a ``Discrete(3)`` code, a ``Box(-1, 1, (3,))`` vector and a distractor; the answer
    (``Discrete(9)``) is ``3 * code + argmax(vector)``: each part is one digit of the
    answer, so ignoring either caps the score at 1/3 (random: 1/9).

    ``dict``: ``{"code": Discrete(3), "inner": {"vector": Box(3,), "noise": Box(2,)}}``;
    ``tuple``: ``(Discrete(3), (Box(3,), Box(2,)))``.

    Args:
        kind: ``"dict"`` or ``"tuple"``.
        episode_len: Steps per episode.

    Examples:
        >>> env = NestedBandit("dict")
        >>> obs, _ = env.reset(seed=0)
        >>> sorted(obs), sorted(obs["inner"]), env.score(obs, env.answer(obs))
        (['code', 'inner'], ['noise', 'vector'], 1.0)
    """

    random_step_reward = 1.0 / 9.0

    def __init__(self, kind: str = "dict", episode_len: int = 16):
        super().__init__(episode_len)
        if kind not in ("dict", "tuple"):
            raise ValueError(f"NestedBandit: kind must be 'dict' or 'tuple', got {kind!r}")
        self.kind = kind
        vector = spaces.Box(-1.0, 1.0, (3,), np.float32)
        noise = spaces.Box(-1.0, 1.0, (2,), np.float32)
        if kind == "dict":
            self.observation_space = spaces.Dict({
                "code": spaces.Discrete(3),
                "inner": spaces.Dict({"vector": vector, "noise": noise}),
            })
        else:
            self.observation_space = spaces.Tuple((spaces.Discrete(3),
                                                   spaces.Tuple((vector, noise))))
        self.action_space = spaces.Discrete(9)

    def _draw(self) -> Any:
        rng = self.np_random
        code = int(rng.integers(3))
        vector = rng.uniform(-1.0, 1.0, 3).astype(np.float32)
        noise = rng.uniform(-1.0, 1.0, 2).astype(np.float32)
        if self.kind == "dict":
            return {"code": code, "inner": {"vector": vector, "noise": noise}}
        return (code, (vector, noise))

    def answer(self, obs: Any) -> int:
        if self.kind == "dict":
            code, vector = obs["code"], obs["inner"]["vector"]
        else:
            code, vector = obs[0], obs[1][0]
        return 3 * int(code) + int(np.argmax(vector))

    def score(self, obs: Any, action: Any) -> float:
        return float(int(action) == self.answer(obs))


class RepeatedBandit(ZooEnv):
    """A :class:`~rlblocks.spaces.Repeated` list of ``Discrete(3)`` items.

    ``target="count"``: the list has 0..``max_len`` items and the answer
    (``Discrete(max_len + 1)``) is its length. ``target="last"``: the list has 1..``max_len``
    items and the answer (``Discrete(3)``) is the value of its LAST item (which slot that
    is depends on the length, so the length and the padding must both be read right).

    Args:
        target: ``"count"`` or ``"last"``.
        max_len: Longest list (>= 2).
        episode_len: Steps per episode.

    Examples:
        >>> env = RepeatedBandit("last", max_len=4)
        >>> env.score([0, 2, 1], 1), env.score([0, 2, 1], 2), env.random_return
        (1.0, 0.0, 5.333333)
    """

    def __init__(self, target: str = "count", max_len: int = 4, episode_len: int = 16):
        super().__init__(episode_len)
        if target not in ("count", "last"):
            raise ValueError(f"RepeatedBandit: target must be 'count' or 'last', got {target!r}")
        if max_len < 2:
            raise ValueError(f"RepeatedBandit: max_len must be >= 2, got {max_len}")
        self.target, self.max_len = target, int(max_len)
        self.observation_space = Repeated(spaces.Discrete(3), max_len=self.max_len)
        n = self.max_len + 1 if target == "count" else 3
        self.action_space = spaces.Discrete(n)
        self.random_step_reward = 1.0 / n

    def _draw(self) -> list[int]:
        rng = self.np_random
        length = int(rng.integers(0 if self.target == "count" else 1, self.max_len + 1))
        return [int(v) for v in rng.integers(0, 3, length)]

    def answer(self, obs: list[int]) -> int:
        return len(obs) if self.target == "count" else int(obs[-1])

    def score(self, obs: list[int], action: Any) -> float:
        return float(int(action) == self.answer(obs))


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

    _RANDOM = {"multidiscrete": 1.0 / 3.0, "box": 5.0 / 12.0,
               "tuple": (1.0 / 3.0 + 5.0 / 12.0) / 2.0, "dict": (1.0 / 3.0 + 0.5) / 2.0}

    def __init__(self, action: str = "multidiscrete", episode_len: int = 16):
        super().__init__(episode_len)
        if action not in self._RANDOM:
            raise ValueError(f"ActionBandit: action must be one of {sorted(self._RANDOM)}, "
                             f"got {action!r}")
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


class Recall(ZooEnv):
    """Echo the symbol seen ``delay`` steps ago: each step shows a uniform ``Discrete(n)``
    symbol; from step ``delay`` on, the action (``Discrete(n)``) scores 1 when it equals the
    symbol shown ``delay`` steps earlier. The first ``delay`` steps score 0 whatever the
    action, so the best return is ``episode_len - delay`` and a memoryless agent scores
    :attr:`random_return`.

    Args:
        delay: How many steps back (>= 1).
        n: Symbols (>= 2).
        episode_len: Steps per episode (> delay).

    Examples:
        >>> env = Recall(delay=2, n=2, episode_len=6)
        >>> obs, _ = env.reset(seed=0)
        >>> seen, total = [obs], 0.0
        >>> for t in range(6):
        ...     obs, r, _, trunc, _ = env.step(seen[t - 2] if t >= 2 else 0)
        ...     seen.append(obs)
        ...     total += r
        >>> total, trunc, env.max_return, env.random_return
        (4.0, True, 4.0, 2.0)
    """

    def __init__(self, delay: int = 2, n: int = 2, episode_len: int = 16):
        super().__init__(episode_len)
        if delay < 1 or n < 2 or self.episode_len <= delay:
            raise ValueError(f"Recall: need delay >= 1, n >= 2 and episode_len > delay, got "
                             f"delay={delay}, n={n}, episode_len={episode_len}")
        self.delay, self.n = int(delay), int(n)
        self.observation_space = spaces.Discrete(self.n)
        self.action_space = spaces.Discrete(self.n)
        self._seen: list[int] = []

    @property
    def max_return(self) -> float:
        return float(self.episode_len - self.delay)

    @property
    def random_return(self) -> float:
        return round((self.episode_len - self.delay) / self.n, 6)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        self._seen = []
        return super().reset(seed=seed, options=options)

    def _draw(self) -> int:
        symbol = int(self.np_random.integers(self.n))
        self._seen.append(symbol)
        return symbol

    def target(self) -> int | None:
        """The symbol the next action should echo (None during the first ``delay`` steps)."""
        t = len(self._seen) - 1
        return self._seen[t - self.delay] if t >= self.delay else None

    def answer(self, obs: Any) -> int:
        target = self.target()
        return 0 if target is None else target

    def score(self, obs: Any, action: Any) -> float:
        target = self.target()
        return 0.0 if target is None else float(int(action) == target)
