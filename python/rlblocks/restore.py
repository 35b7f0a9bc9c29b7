"""``restore_original_dimensions``: a flat preprocessed batch back to its nested structure.

Works on numpy arrays and torch tensors alike (slices and reshapes only, so every array of
the result is a view of the input, no copy). One-hot leaves stay one-hot, as in RLlib.
Variable-size leaves come back as the structured views of :mod:`rlblocks.values`.

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
from gymnasium.spaces import Dict, Graph, OneOf, Sequence, Tuple

from rlblocks.layout import LIST_KINDS, Node, is_string_space, layout
from rlblocks.spaces import Repeated
from rlblocks.values import GraphValues, OneOfValues, RepeatedValues, TextValues

__all__ = ["RepeatedValues", "restore_original_dimensions"]


def restore_original_dimensions(obs: Any, obs_space: gym.Space, tensorlib: Any = "torch") -> Any:
    """Unpacks a flat ``[*B, size]`` batch along ``obs_space.original_space``.

    Args:
        obs: The flat batch (numpy array or torch tensor), any number of batch dims.
        obs_space: A preprocessor's ``observation_space`` (it carries the ``layout`` the
            preprocessor wrote, Atari frame options included) or the original space itself.
        tensorlib: Accepted for RLlib compatibility and ignored: results keep the input's
            type (numpy in, numpy out; torch in, torch out).

    Returns:
        Tuple spaces give a tuple, Dict spaces a dict in space order, Repeated and gymnasium
        Sequence a ``RepeatedValues``, Graph a ``GraphValues``, Text (and other spaces of
        strings) a ``TextValues``, OneOf a ``OneOfValues``; other spaces return ``obs``
        unchanged.
    """
    space = getattr(obs_space, "original_space", obs_space)
    if not isinstance(space, (Tuple, Dict, Repeated, Sequence, Graph, OneOf)) and not (
        is_string_space(space)
    ):
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
    if node.kind == "graph":
        return _split_graph(obs, node, batch)
    if node.kind == "text":
        per_position = (len(node.charset),) if node.encoding == "one_hot" else ()
        values = obs[..., 1:].reshape(batch + (node.max_len, *per_position))
        return TextValues(values, obs[..., 0], node.encoding, len(node.charset))
    if node.is_leaf:
        return obs.reshape(batch + node.shape)
    if node.kind in LIST_KINDS:
        values = obs[..., 1:].reshape(batch + (node.max_len, node.item.size))
        return RepeatedValues(
            _split(values, node.item, batch + (node.max_len,)), obs[..., 0], node.max_len
        )
    parts = [
        _split(obs[..., off : off + c.size], c, batch)
        for off, c in zip(node.offsets, node.children, strict=True)
    ]
    if node.kind == "oneof":
        return OneOfValues(obs[..., : len(parts)], tuple(parts))
    if node.kind == "tuple":
        return tuple(parts)
    return dict(zip(node.keys, parts, strict=True))


def _split_graph(obs: Any, node: Node, batch: tuple[int, ...]) -> GraphValues:
    nodes_at, edges_at, links_at = node.graph_offsets
    item = node.children[0]
    nodes = obs[..., nodes_at:edges_at].reshape(batch + (node.max_nodes, *item.shape))
    edges = None
    if len(node.children) > 1:
        edge = node.children[1]
        edges = obs[..., edges_at:links_at].reshape(batch + (node.max_edges, *edge.shape))
    links = obs[..., links_at : links_at + 2 * node.max_edges].reshape(batch + (node.max_edges, 2))
    return GraphValues.from_blocks(obs[..., 0], obs[..., 1], nodes, edges, links)
