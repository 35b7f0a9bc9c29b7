"""Spaces that gymnasium lacks (``Repeated``, ``Simplex``) and helpers over nested spaces.

Examples:
    >>> import gymnasium as gym
    >>> from rlblocks.spaces import Repeated
    >>> s = Repeated(gym.spaces.Discrete(3), max_len=4, seed=0)
    >>> s.contains([0, 2, 1])
    True
    >>> s.contains([0, 1, 2, 0, 1])   # longer than max_len
    False
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Dict, Tuple

__all__ = [
    "Repeated",
    "Simplex",
    "clip_actions",
    "flatten_space",
    "format_path",
    "space_path_items",
]


class Repeated(gym.Space[list]):
    """A variable-length list of up to ``max_len`` items of ``child_space``.

    Samples are Python lists whose length is drawn uniformly from ``0..max_len``.
    A Repeated can be nested in Dict/Tuple and can hold another Repeated.

    Examples:
        >>> import gymnasium as gym
        >>> s = Repeated(gym.spaces.Box(-1, 1, (2,)), max_len=3, seed=1)
        >>> len(s.sample()) <= 3
        True
        >>> s == Repeated(gym.spaces.Box(-1, 1, (2,)), max_len=3)
        True
    """

    def __init__(self, child_space: gym.Space, max_len: int, seed: int | None = None):
        if not isinstance(child_space, gym.Space):
            raise TypeError(f"Repeated: child_space must be a gymnasium Space, got {child_space!r}")
        if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or max_len < 0:
            raise ValueError(f"Repeated: max_len must be an int >= 0, got {max_len!r}")
        self.child_space = child_space
        self.max_len = int(max_len)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def seed(self, seed: int | None = None) -> list[int | None]:
        seeds: list[int | None] = list(np.atleast_1d(super().seed(seed)))  # type: ignore[arg-type]
        child_seed = int(self.np_random.integers(np.iinfo(np.int32).max))
        child = self.child_space.seed(child_seed)
        return seeds + (list(child) if isinstance(child, (list, tuple)) else [child])

    def sample(self, mask: Any = None, probability: Any = None) -> list:
        """A list of child samples; its length is uniform over the allowed lengths.

        Args:
            mask: ``None`` or ``(length_mask, child_mask)``: ``length_mask`` is ``None``, an
                int (that exact length) or a bool array of shape ``(max_len + 1,)`` marking
                the allowed lengths; ``child_mask`` is passed to every child ``sample``.
            probability: Not supported for Repeated (ValueError).
        """
        if probability is not None:
            raise ValueError("Repeated.sample: probability is not supported, use mask")
        length_mask, child_mask = (None, None) if mask is None else mask
        if length_mask is None:
            length = int(self.np_random.integers(0, self.max_len + 1))
        elif isinstance(length_mask, (int, np.integer)):
            if not 0 <= length_mask <= self.max_len:
                raise ValueError(f"Repeated.sample: length {length_mask} not in 0..{self.max_len}")
            length = int(length_mask)
        else:
            allowed = np.flatnonzero(np.asarray(length_mask, dtype=bool))
            if np.shape(length_mask) != (self.max_len + 1,) or allowed.size == 0:
                raise ValueError(
                    f"Repeated.sample: length mask must be a bool array of shape "
                    f"({self.max_len + 1},) with at least one True, got {length_mask!r}"
                )
            length = int(self.np_random.choice(allowed))
        kwargs = {} if child_mask is None else {"mask": child_mask}
        return [self.child_space.sample(**kwargs) for _ in range(length)]

    def contains(self, x: Any) -> bool:
        if not isinstance(x, (list, tuple, np.ndarray)):
            return False
        return len(x) <= self.max_len and all(self.child_space.contains(item) for item in x)

    def to_jsonable(self, sample_n: Sequence[list]) -> list:  # type: ignore[override]
        return [[self.child_space.to_jsonable([item])[0] for item in s] for s in sample_n]

    def from_jsonable(self, sample_n: list) -> list[list]:
        return [[self.child_space.from_jsonable([item])[0] for item in s] for s in sample_n]

    def __repr__(self) -> str:
        return f"Repeated({self.child_space!r}, max_len={self.max_len})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Repeated)
            and other.max_len == self.max_len
            and other.child_space == self.child_space
        )

    __hash__ = None  # type: ignore[assignment]


class Simplex(gym.Space[np.ndarray]):
    """Points on the probability simplex along the last axis (Dirichlet actions).

    Args:
        shape: The shape of a sample; the last axis sums to 1.
        concentration: Dirichlet concentration used by ``sample`` (default all ones).
        dtype: A float dtype.

    Examples:
        >>> s = Simplex((3,), seed=0)
        >>> x = s.sample()
        >>> bool(abs(x.sum() - 1) < 1e-5) and s.contains(x)
        True
    """

    def __init__(
        self,
        shape: Sequence[int],
        concentration: np.ndarray | None = None,
        dtype: Any = np.float32,
        seed: int | None = None,
    ):
        shape = tuple(int(d) for d in shape)
        if len(shape) == 0 or shape[-1] < 1:
            raise ValueError(f"Simplex: shape needs a non-empty last axis, got {shape}")
        self.dim = shape[-1]
        if concentration is None:
            concentration = np.ones(self.dim, dtype=np.float64)
        self.concentration = np.asarray(concentration, dtype=np.float64)
        if self.concentration.shape != (self.dim,) or (self.concentration <= 0).any():
            raise ValueError(
                f"Simplex: concentration must be {self.dim} positive numbers, got {concentration}"
            )
        super().__init__(shape=shape, dtype=dtype, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return True

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        batch = self.shape[:-1]  # type: ignore[index]  # a Simplex always has a shape
        draws = self.np_random.dirichlet(self.concentration, size=batch)
        return np.asarray(draws, dtype=self.dtype).reshape(self.shape)

    def contains(self, x: Any) -> bool:
        x = np.asarray(x)
        return (
            x.shape == self.shape
            and np.issubdtype(x.dtype, np.floating)
            and bool(np.all(x >= 0))
            and bool(np.allclose(x.sum(axis=-1), 1.0, atol=1e-4))
        )

    def __repr__(self) -> str:
        return f"Simplex({self.shape}, dtype={self.dtype})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Simplex)
            and other.shape == self.shape
            and np.allclose(other.concentration, self.concentration)
        )

    __hash__ = None  # type: ignore[assignment]


def flatten_space(space: gym.Space) -> list[gym.Space]:
    """The leaf spaces of a nested Tuple/Dict space, RLlib order (Dict keys sorted).

    Repeated and every other non-container space count as leaves.

    Examples:
        >>> import gymnasium as gym
        >>> inner = gym.spaces.Tuple((gym.spaces.Box(0, 1), gym.spaces.Discrete(3)))
        >>> s = gym.spaces.Dict({"b": gym.spaces.Discrete(2), "a": inner})
        >>> [type(x).__name__ for x in flatten_space(s)]
        ['Box', 'Discrete', 'Discrete']
    """
    return [leaf for _, leaf in space_path_items(space, sort_dict_keys=True)]


def space_path_items(
    space: gym.Space, sort_dict_keys: bool = False, prefix: tuple = ()
) -> list[tuple[tuple, gym.Space]]:
    """``(path, leaf)`` pairs of a nested space; a path is a tuple of dict keys / indices.

    Dict children come in space order (what the preprocessors use) or sorted by key
    (what RLlib's ``flatten_space`` uses).
    """
    if isinstance(space, Tuple):
        out: list[tuple[tuple, gym.Space]] = []
        for i, child in enumerate(space.spaces):
            out += space_path_items(child, sort_dict_keys, prefix + (i,))
        return out
    if isinstance(space, Dict):
        keys = sorted(space.spaces) if sort_dict_keys else list(space.spaces)
        out = []
        for k in keys:
            out += space_path_items(space.spaces[k], sort_dict_keys, prefix + (k,))
        return out
    return [(prefix, space)]


def clip_actions(actions: Any, space: gym.Space) -> Any:
    """Clips every Box part of ``actions`` (batched or not) to the space's bounds.

    Examples:
        >>> space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (2,))))
        >>> clip_actions((np.array([1]), np.array([[3.0, -0.5]])), space)[1].tolist()
        [[1.0, -0.5]]
    """
    if isinstance(space, gym.spaces.Box):
        # np.clip's values (NaN passes through), without its dispatch cost at a few rows
        clipped = np.minimum(np.maximum(actions, space.low), space.high)
        return clipped.astype(space.dtype, copy=False)
    if isinstance(space, Tuple):
        return tuple(clip_actions(a, s) for a, s in zip(actions, space.spaces, strict=True))
    if isinstance(space, Dict):
        return {k: clip_actions(actions[k], s) for k, s in space.spaces.items()}
    return actions


def format_path(path: Sequence[Any], root: str = "obs") -> str:
    """``('c', 'd', 2)`` -> ``obs["c"]["d"][2]`` (the form every error message uses)."""
    return root + "".join(f"[{json.dumps(p)}]" if isinstance(p, str) else f"[{p}]" for p in path)
