"""The zoo's observation tasks: one bandit per kind of observation space (see
:mod:`rlblocks.envs.zoo`). Each step's right action is a function of that step's observation
alone, so an agent that ignores part of it, or acts on a stale one, scores random.

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

from typing import Any

import numpy as np
from gymnasium import spaces

from rlblocks.envs.zoo import ZooEnv
from rlblocks.spaces import Repeated

__all__ = [
    "BoxBandit",
    "DiscreteBandit",
    "GridBandit",
    "ImageBandit",
    "MultiDiscreteBandit",
    "NestedBandit",
    "RepeatedBandit",
]


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

    def __init__(
        self,
        shape: tuple[int, ...] | list[int] = (4,),
        dtype: str = "float32",
        episode_len: int = 16,
    ):
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

    def __init__(
        self, shape: tuple[int, int, int] | list[int] = (10, 10, 3), episode_len: int = 16
    ):
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
        img[row : row + 3, col : col + 3, :] = 255
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
        col = (
            int(rng.integers(0, mid))
            if target == 0
            else mid
            if target == 1
            else int(rng.integers(mid + 1, n))
        )
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
        self.action_space = spaces.Discrete(self.n**self.k)
        self.random_step_reward = 1.0 / self.n**self.k

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
            self.observation_space = spaces.Dict(
                {
                    "code": spaces.Discrete(3),
                    "inner": spaces.Dict({"vector": vector, "noise": noise}),
                }
            )
        else:
            self.observation_space = spaces.Tuple(
                (spaces.Discrete(3), spaces.Tuple((vector, noise)))
            )
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
