"""``restore_original_dimensions``: a flat preprocessed batch back to its nested structure.

Works on numpy arrays and torch tensors alike (slices and reshapes only, so Box leaves are
views of the input, no copy). One-hot leaves stay one-hot, as in RLlib.

Examples:
    >>> import gymnasium as gym
    >>> import numpy as np
    >>> from rlblocks import get_preprocessor
    >>> space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (2, 2))))
    >>> prep = get_preprocessor(space)(space)
    >>> flat = prep.transform_batch([(1, np.ones((2, 2)))])
    >>> a, b = restore_original_dimensions(flat, prep.observation_space, "numpy")
    >>> a.tolist(), b.shape
    ([[0.0, 1.0]], (1, 2, 2))
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Dict, Tuple

from rlblocks.layout import Node, layout
from rlblocks.nest import register_node, tree_map
from rlblocks.spaces import Repeated

__all__ = ["RepeatedValues", "restore_original_dimensions"]


class RepeatedValues:
    """A batch of variable-length lists: ``values`` ``[*B, max_len, ...]`` (any nested
    structure), ``lengths`` ``[*B]`` (float, as produced by the preprocessor), ``max_len``.

    Examples:
        >>> import numpy as np
        >>> rv = RepeatedValues(np.arange(6.0).reshape(2, 3, 1), np.array([1.0, 3.0]), 3)
        >>> [len(items) for items in rv.unbatch_all()]
        [1, 3]
        >>> len(rv.unbatch_repeat_dim())
        3
    """

    def __init__(self, values: Any, lengths: Any, max_len: int):
        self.values = values
        self.lengths = lengths
        self.max_len = int(max_len)
        self._unbatched_all: list | None = None

    def unbatch_repeat_dim(self) -> list:
        """``max_len`` slices ``values[:, i]`` (each still batched over the first dim)."""
        return [tree_map(lambda v, i=i: v[:, i], self.values) for i in range(self.max_len)]

    def unbatch_all(self) -> list[list]:
        """Per batch item (first dim), the list of its ``int(lengths[b])`` items."""
        if self._unbatched_all is None:
            lengths = np.asarray(_to_numpy(self.lengths)).astype(np.int64).reshape(-1)
            self._unbatched_all = [
                [tree_map(lambda v, b=b, i=i: v[b, i], self.values) for i in range(int(n))]
                for b, n in enumerate(lengths)
            ]
        return self._unbatched_all

    def __repr__(self) -> str:
        return (
            f"RepeatedValues(value={self.values!r}, lengths={self.lengths!r}, "
            f"max_len={self.max_len})"
        )


def _flatten_repeated(rv: RepeatedValues) -> tuple[tuple[Any, Any], int]:
    return (rv.values, rv.lengths), rv.max_len


def _unflatten_repeated(max_len: int, children: Any) -> RepeatedValues:
    values, lengths = children
    return RepeatedValues(values, lengths, max_len)


register_node(RepeatedValues, _flatten_repeated, _unflatten_repeated)


def _to_numpy(x: Any) -> Any:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else x


def restore_original_dimensions(obs: Any, obs_space: gym.Space, tensorlib: Any = "torch") -> Any:
    """Unpacks a flat ``[*B, size]`` batch along ``obs_space.original_space``.

    Args:
        obs: The flat batch (numpy array or torch tensor), any number of batch dims.
        obs_space: A preprocessor's ``observation_space`` (it carries the ``layout`` the
            preprocessor wrote, Atari frame options included) or the original space itself.
        tensorlib: Accepted for RLlib compatibility and ignored: results keep the input's
            type (numpy in, numpy out; torch in, torch out).

    Returns:
        Tuple spaces give a tuple, Dict spaces a dict in space order, Repeated a
        ``RepeatedValues``; other spaces return ``obs`` unchanged.
    """
    space = getattr(obs_space, "original_space", obs_space)
    if not isinstance(space, (Tuple, Dict, Repeated)):
        return obs
    if isinstance(space, Tuple) and isinstance(obs, (list, tuple)):
        return tuple(obs)
    if isinstance(space, Dict) and isinstance(obs, dict):
        return obs
    lay = getattr(obs_space, "layout", None)
    node = lay.root if lay is not None and lay.space is space else layout(space).root
    shape = tuple(obs.shape)
    if len(shape) < 2 or shape[-1] != node.size:
        raise ValueError(
            f"Expected flattened obs shape of [..., {node.size}] for {space}, got {list(shape)}"
        )
    return _split(obs, node, shape[:-1])


def _split(obs: Any, node: Node, batch: tuple[int, ...]) -> Any:
    if node.is_leaf:
        return obs.reshape(batch + node.shape)
    if node.kind == "repeated":
        child = node.children[0]
        values = obs[..., 1:].reshape(batch + (node.max_len, child.size))
        return RepeatedValues(
            _split(values, child, batch + (node.max_len,)), obs[..., 0], node.max_len
        )
    parts = [
        _split(obs[..., off : off + c.size], c, batch)
        for off, c in zip(node.offsets, node.children, strict=True)
    ]
    if node.kind == "tuple":
        return tuple(parts)
    return dict(zip(node.keys, parts, strict=True))
