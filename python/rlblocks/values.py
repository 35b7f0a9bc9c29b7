"""Structured views of variable-size observations, as :func:`rlblocks.restore_original_dimensions`
returns them: lists (``Repeated`` and gymnasium ``Sequence``), graphs, text and ``OneOf``.

Every array field is a slice or reshape of the flat batch (numpy in, numpy out; torch in,
torch out), so building a view copies nothing; masks and integer ids are computed when
asked for.

Examples:
    >>> import numpy as np
    >>> rv = RepeatedValues(np.zeros((2, 3, 1)), np.array([1.0, 3.0]), 3)
    >>> rv.mask.tolist()
    [[True, False, False], [True, True, True]]
    >>> text = TextValues(np.array([[2.0, 0.0, 0.0]]), np.array([1.0]), "ids", 4)
    >>> text.ids.tolist(), text.mask.tolist()
    ([[2, 0, 0]], [[True, False, False]])
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from rlblocks.nest import register_node, tree_map

__all__ = ["GraphValues", "OneOfValues", "RepeatedValues", "TextValues", "positions_below"]


def _is_torch(x: Any) -> bool:
    return hasattr(x, "detach")


def _to_numpy(x: Any) -> Any:
    return x.detach().cpu().numpy() if _is_torch(x) else x


def positions_below(lengths: Any, size: int) -> Any:
    """``mask[..., i] = i < lengths[...]``: which of ``size`` slots hold an item (bool, the
    input's array type and device).

    Examples:
        >>> positions_below(np.array([0.0, 2.0]), 3).tolist()
        [[False, False, False], [True, True, False]]
    """
    if _is_torch(lengths):
        import torch

        return torch.arange(size, device=lengths.device) < lengths.unsqueeze(-1)
    return np.arange(size) < np.asarray(lengths)[..., None]


def _as_int64(x: Any) -> Any:
    return x.long() if _is_torch(x) else np.asarray(x).astype(np.int64)


class RepeatedValues:
    """A batch of variable-length lists: ``values`` ``[*B, max_len, ...]`` (any nested
    structure), ``lengths`` ``[*B]`` (float, as produced by the preprocessor), ``max_len``.

    Examples:
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

    @property
    def mask(self) -> Any:
        """``[*B, max_len]`` bool: True where a slot holds an item."""
        return positions_below(self.lengths, self.max_len)

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


register_node(
    RepeatedValues,
    lambda rv: ((rv.values, rv.lengths), rv.max_len),
    lambda max_len, children: RepeatedValues(children[0], children[1], max_len),
)


class GraphValues(NamedTuple):
    """A batch of padded graphs (gymnasium ``Graph``).

    ``nodes`` ``[*B, max_nodes, *node_shape]`` (Discrete nodes: their one-hot), ``edges``
    ``[*B, max_edges, *edge_shape]`` or None, ``edge_index`` ``[*B, max_edges, 2]`` (the
    (source, target) node of each edge, as floats), ``node_mask`` / ``edge_mask`` (bool,
    True for real nodes and edges), ``n_nodes`` / ``n_edges`` ``[*B]`` (floats).

    Examples:
        >>> flat = np.array([[2.0, 1.0, 5.0, 6.0, 0.0, 1.0, 0.0]])   # 2 nodes, edge 1 -> 0
        >>> g = GraphValues.from_blocks(flat[:, 0], flat[:, 1], flat[:, 2:5].reshape(1, 3, 1),
        ...                             None, flat[:, 5:7].reshape(1, 1, 2))
        >>> g.node_mask.tolist(), g.edge_index.tolist()
        ([[True, True, False]], [[[1.0, 0.0]]])
    """

    nodes: Any
    edges: Any
    edge_index: Any
    node_mask: Any
    edge_mask: Any
    n_nodes: Any
    n_edges: Any

    @classmethod
    def from_blocks(
        cls, n_nodes: Any, n_edges: Any, nodes: Any, edges: Any, edge_index: Any
    ) -> GraphValues:
        """The view over a graph's blocks (masks from the counts)."""
        return cls(
            nodes,
            edges,
            edge_index,
            positions_below(n_nodes, nodes.shape[n_nodes.ndim]),
            positions_below(n_edges, edge_index.shape[n_edges.ndim]),
            n_nodes,
            n_edges,
        )

    def to_pyg(self) -> Any:
        """The graphs as one ``torch_geometric.data.Batch`` (the batch dims flattened; torch
        views only; needs the ``graph`` extra): ``x`` the node features, ``edge_index``
        ``[2, E]`` int64, ``edge_attr`` the edge features when there are any.

        Raises:
            ImportError: torch_geometric is not installed (``pip install rlblocks[graph]``).
            ValueError: the view holds numpy arrays (restore a torch batch instead).
        """
        try:
            from torch_geometric.data import Batch, Data
        except ImportError as err:
            raise ImportError(
                "GraphValues.to_pyg needs torch_geometric: pip install 'rlblocks[graph]'"
            ) from err
        if not _is_torch(self.nodes):
            raise ValueError("GraphValues.to_pyg needs torch tensors; restore a torch batch")
        n_nodes = self.n_nodes.reshape(-1).long().tolist()
        n_edges = self.n_edges.reshape(-1).long().tolist()
        nodes = self.nodes.reshape(len(n_nodes), *self.nodes.shape[self.n_nodes.ndim :])
        links = self.edge_index.reshape(len(n_nodes), -1, 2)
        edges = (
            None
            if self.edges is None
            else self.edges.reshape(len(n_nodes), *self.edges.shape[self.n_edges.ndim :])
        )
        graphs = []
        for b, (n, m) in enumerate(zip(n_nodes, n_edges, strict=True)):
            data = Data(x=nodes[b, :n], edge_index=links[b, :m].long().t().contiguous())
            if edges is not None:
                data.edge_attr = edges[b, :m]
            data.num_nodes = n
            graphs.append(data)
        return Batch.from_data_list(graphs)


class TextValues:
    """A batch of strings: ``values`` the one-hot ``[*B, max_len, num_chars]``
    (``encoding`` "one_hot") or the ids ``[*B, max_len]`` ("ids", floats), ``lengths``
    ``[*B]`` (floats).

    Examples:
        >>> one_hot = np.eye(3)[[[1, 2, 0]]] * np.array([1, 1, 0])[:, None]  # "bc", max 3
        >>> t = TextValues(one_hot, np.array([2.0]), "one_hot", 3)
        >>> t.ids.tolist(), t.mask.tolist()
        ([[1, 2, 0]], [[True, True, False]])
    """

    def __init__(self, values: Any, lengths: Any, encoding: str, num_chars: int):
        self.values = values
        self.lengths = lengths
        self.encoding = encoding
        self.num_chars = int(num_chars)

    @property
    def max_len(self) -> int:
        return int(self.values.shape[-2 if self.encoding == "one_hot" else -1])

    @property
    def mask(self) -> Any:
        """``[*B, max_len]`` bool: True where a position holds a character."""
        return positions_below(self.lengths, self.max_len)

    @property
    def ids(self) -> Any:
        """``[*B, max_len]`` int64 character ids (0 at unused positions)."""
        if self.encoding == "ids":
            return _as_int64(self.values)
        return self.values.argmax(-1)

    def __repr__(self) -> str:
        return (
            f"TextValues(values={self.values!r}, lengths={self.lengths!r}, "
            f"encoding={self.encoding!r}, num_chars={self.num_chars})"
        )


register_node(
    TextValues,
    lambda t: ((t.values, t.lengths), (t.encoding, t.num_chars)),
    lambda aux, children: TextValues(children[0], children[1], *aux),
)


class OneOfValues(NamedTuple):
    """A batch of gymnasium ``OneOf`` values: ``branch`` the branch one-hot ``[*B, k]``,
    ``values`` every branch's restored view (the inactive ones zero).

    Examples:
        >>> v = OneOfValues(np.array([[0.0, 1.0]]), (np.zeros((1, 2)), np.ones((1, 1))))
        >>> v.index.tolist()
        [1]
    """

    branch: Any
    values: tuple[Any, ...]

    @property
    def index(self) -> Any:
        """``[*B]`` int64: the active branch."""
        return _as_int64(self.branch.argmax(-1))
