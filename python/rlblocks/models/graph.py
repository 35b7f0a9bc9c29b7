"""``GraphEncoder``: message passing over a batch of padded graphs, then a pooled readout.

A graph leaf's flat block is ``[n_nodes, n_edges, nodes (max_nodes x F), edges
(max_edges x E), links (max_edges x 2)]``, zero-padded (:mod:`rlblocks.layout`).
:func:`split_graph` cuts it into dense tensors; :class:`GraphEncoder` embeds the node
features (a Linear to ``dim``), runs ``layers`` GINE convolutions (Hu et al., 2020)

    ``x_i' = nn((1 + eps) * x_i + sum_{edges j -> i} relu(x_j + lin(e_ji)))``

(GIN's ``x_j`` messages when the graph has no edge features), a ReLU between
convolutions, and pools the valid nodes (mean / max / sum / attention). Messages flow
along each edge from ``links[i, 0]`` to ``links[i, 1]`` (PyG's source -> target); list
both directions for an undirected graph. Padded nodes and edges, and links that point
outside ``0 .. n_nodes - 1``, never reach the output; an empty graph encodes to zeros.

``backend="torch"`` runs a plain torch implementation (gather, ``index_add``);
``backend="pyg"`` runs ``torch_geometric.nn.GINEConv`` / ``GINConv`` on the batch viewed as
one big graph (padded edges go to an extra sink node that is dropped afterwards, so the
shapes stay static and the model exports). Both register the same parameters under the
same names (``convs.<i>.nn.*``, ``convs.<i>.lin.*``, ``convs.<i>.eps``), so a state dict
moves between them and they give the same outputs. ``"auto"`` picks PyG when it imports.
The ``graph_encoder`` model-config key (:data:`rlblocks.config.GRAPH_ENCODER_DEFAULTS`)
holds the options.

Examples:
    >>> import torch
    >>> enc = GraphEncoder(node_size=2, edge_size=1, dim=8, layers=2, backend="torch")
    >>> nodes = torch.randn(1, 4, 2)                   # 4 node slots, 3 in use
    >>> edges = torch.randn(1, 5, 1)                   # 5 edge slots, 2 in use
    >>> links = torch.tensor([[[0, 1], [1, 2], [0, 0], [0, 0], [0, 0]]]).float()
    >>> out = enc(nodes, edges, links, torch.tensor([3.0]), torch.tensor([2.0]))
    >>> out.shape
    torch.Size([1, 8])
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from rlblocks.config_fields import as_int
from rlblocks.models.entity import POOLS, MaskedPool, length_mask, trim_padding

__all__ = ["BACKENDS", "GraphEncoder", "pyg_available", "split_graph"]

#: ``graph_encoder["backend"]`` values.
BACKENDS = ("auto", "torch", "pyg")


@functools.cache
def pyg_available() -> bool:
    """Whether ``torch_geometric`` (its ``GINEConv`` and ``GINConv``) imports."""
    if importlib.util.find_spec("torch_geometric") is None:
        return False
    try:
        from torch_geometric.nn import GINConv, GINEConv  # noqa: F401
    except Exception:  # a broken install (e.g. built for another torch): use plain torch
        return False
    return True


def split_graph(
    flat: torch.Tensor, node_size: int, edge_size: int, max_nodes: int, max_edges: int
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A graph leaf's flat block ``[B, size]`` -> ``(nodes [B, N, F], edges [B, M, E] or
    None, links [B, M, 2], n_nodes [B], n_edges [B])``.

    Examples:
        >>> flat = torch.tensor([[2.0, 1.0, 5.0, 6.0, 0.0, 1.0, 0.0, 0.0]])  # F=1, E=0, N=2, M=2
        >>> nodes, edges, links, n, m = split_graph(flat, 1, 0, 2, 2)
        >>> nodes.reshape(-1).tolist(), edges, links[0, 0].tolist(), n.tolist(), m.tolist()
        ([5.0, 6.0], None, [0.0, 1.0], [2.0], [1.0])
    """
    size = 2 + max_nodes * node_size + max_edges * edge_size + 2 * max_edges
    if flat.shape[-1] != size:
        raise ValueError(
            f"split_graph: expected 2 + {max_nodes} x {node_size} + {max_edges} x {edge_size} "
            f"+ 2 x {max_edges} = {size} floats, got {flat.shape[-1]}"
        )
    flat = flat.reshape(-1, size)
    e0 = 2 + max_nodes * node_size
    l0 = e0 + max_edges * edge_size
    nodes = flat[:, 2:e0].reshape(-1, max_nodes, node_size)
    edges = flat[:, e0:l0].reshape(-1, max_edges, edge_size) if edge_size else None
    links = flat[:, l0:].reshape(-1, max_edges, 2)
    return nodes, edges, links, flat[:, 0], flat[:, 1]


class _GINEConv(nn.Module):
    """Plain torch twin of PyG's ``GINEConv`` (``GINConv`` when ``edge_size`` is 0), with
    the same parameter names; messages of edges with ``valid`` False are dropped."""

    eps: torch.Tensor

    def __init__(self, mlp: nn.Sequential, dim: int, edge_size: int):
        super().__init__()
        self.nn = mlp
        self.register_buffer("eps", torch.zeros(1))
        self.lin: nn.Linear | None = nn.Linear(edge_size, dim) if edge_size else None

    def forward(
        self,
        x: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
        edge_attr: torch.Tensor | None,
        valid: torch.Tensor,
    ) -> torch.Tensor:
        message = x.index_select(0, src)
        if self.lin is not None and edge_attr is not None:
            message = torch.relu(message + self.lin(edge_attr))
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        message = torch.where(valid.unsqueeze(-1), message, zero)
        aggregated = torch.zeros_like(x).index_add(0, dst, message)
        return self.nn(aggregated + (1 + self.eps) * x)


def _mlp(dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))


class GraphEncoder(nn.Module):
    """GINE message passing over padded graphs and a pooled readout (module docstring).

    Args:
        node_size: Floats per node (F).
        edge_size: Floats per edge (E), 0 when the graph has no edge features.
        dim: Width of the node embeddings and of the output.
        layers: Message-passing rounds, >= 1.
        pool: ``"mean"``, ``"max"``, ``"sum"`` or ``"attention"`` over the valid nodes.
        backend: ``"auto"``, ``"torch"`` or ``"pyg"``.
        key: The config key named in error messages.

    Raises:
        ValueError: A bad option, or ``backend="pyg"`` without torch_geometric.
    """

    def __init__(
        self,
        node_size: int,
        edge_size: int = 0,
        dim: int = 64,
        layers: int = 2,
        pool: str = "mean",
        backend: str = "auto",
        key: str = "graph_encoder",
    ):
        super().__init__()
        for name, value, least in (
            ("node_size", node_size, 1),
            ("edge_size", edge_size, 0),
            (f"{key}.dim", dim, 1),
            (f"{key}.layers", layers, 1),
        ):
            as_int(value, name, least)
        if pool not in POOLS:
            raise ValueError(
                f"{key}.pool must be one of {', '.join(map(repr, POOLS))}, got {pool!r}"
            )
        if backend not in BACKENDS:
            raise ValueError(
                f"{key}.backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}"
            )
        if backend == "pyg" and not pyg_available():
            raise ValueError(
                f"{key}.backend='pyg' needs torch_geometric (pip install 'rlblocks[graph]'); "
                "use backend 'torch' or 'auto'"
            )
        self.backend = (
            "pyg" if backend == "pyg" or (backend == "auto" and pyg_available()) else "torch"
        )
        self.node_size, self.edge_size, self.num_outputs = node_size, edge_size, dim
        self.embed = nn.Linear(node_size, dim)
        self.convs = nn.ModuleList()
        for _ in range(layers):
            if self.backend == "pyg":
                from torch_geometric.nn import GINConv, GINEConv

                conv: nn.Module = (
                    GINEConv(_mlp(dim), edge_dim=edge_size) if edge_size else GINConv(_mlp(dim))
                )
            else:
                conv = _GINEConv(_mlp(dim), dim, edge_size)
            self.convs.append(conv)
        self.pool = MaskedPool(dim, pool)

    @classmethod
    def from_config(
        cls, node_size: int, edge_size: int, options: Mapping[str, Any]
    ) -> GraphEncoder:
        """Built from a ``graph_encoder`` config dict (dim, layers, pool, backend)."""
        return cls(
            node_size,
            edge_size,
            dim=options["dim"],
            layers=options["layers"],
            pool=options["pool"],
            backend=options["backend"],
        )

    def forward(
        self,
        nodes: torch.Tensor,
        edges: torch.Tensor | None,
        links: torch.Tensor,
        n_nodes: torch.Tensor,
        n_edges: torch.Tensor,
    ) -> torch.Tensor:
        """``nodes [B, N, F]``, ``edges [B, M, E]`` (or None), ``links [B, M, 2]`` (source,
        target node indices, any numeric dtype), ``n_nodes`` / ``n_edges`` ``[B]`` ->
        ``[B, dim]``."""
        node_mask = length_mask(n_nodes.reshape(-1), nodes.shape[1])
        nodes, node_mask = trim_padding(node_mask, nodes, node_mask)
        edge_slots = length_mask(n_edges.reshape(-1), links.shape[1])
        if edges is None:
            links, edge_slots = trim_padding(edge_slots, links, edge_slots)
        else:
            links, edges, edge_slots = trim_padding(edge_slots, links, edges, edge_slots)
        b, n, m = nodes.shape[0], nodes.shape[1], links.shape[1]
        zero = torch.zeros((), dtype=nodes.dtype, device=nodes.device)
        x = self.embed(torch.where(node_mask.unsqueeze(-1), nodes, zero)).reshape(b * n, -1)
        links = links.to(torch.float32)
        count = n_nodes.reshape(-1, 1).to(torch.float32)
        src_f, dst_f = links[..., 0], links[..., 1]
        valid = edge_slots & (src_f >= 0) & (src_f < count) & (dst_f >= 0) & (dst_f < count)
        base = (torch.arange(b, device=nodes.device) * n).unsqueeze(1)
        src = src_f.clamp(0, n - 1).to(torch.int64) + base
        dst = dst_f.clamp(0, n - 1).to(torch.int64) + base
        edge_attr = None
        if self.edge_size:
            if edges is None:
                raise ValueError("GraphEncoder: built with edge features, but edges is None")
            edge_attr = torch.where(
                valid.unsqueeze(-1), edges.reshape(b, m, self.edge_size), zero
            ).reshape(b * m, self.edge_size)
        valid, src, dst = valid.reshape(-1), src.reshape(-1), dst.reshape(-1)
        if self.backend == "pyg":
            x = self._pyg_layers(x, src, dst, edge_attr, valid, b * n)
        else:
            for i, conv in enumerate(self.convs):
                x = conv(x, src, dst, edge_attr, valid)
                if i + 1 < len(self.convs):
                    x = torch.relu(x)
        return self.pool(x.reshape(b, n, -1), node_mask)

    def _pyg_layers(
        self,
        x: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
        edge_attr: torch.Tensor | None,
        valid: torch.Tensor,
        total: int | torch.SymInt,
    ) -> torch.Tensor:
        # One big graph: node b*N + i; padded edges become sink -> sink edges on an extra
        # node (index total), dropped after every layer.
        sink = torch.full_like(src, 0).add(total)
        edge_index = torch.stack([torch.where(valid, src, sink), torch.where(valid, dst, sink)])
        pad = torch.zeros_like(x[:1])
        for i, conv in enumerate(self.convs):
            out = conv(torch.cat([x, pad]), edge_index, edge_attr)
            x = out[:-1]
            if i + 1 < len(self.convs):
                x = torch.relu(x)
        return x
