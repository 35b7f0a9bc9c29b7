"""Permutation-invariant encoders of variable-length lists: :class:`EntityEncoder` (masked
self-attention or DeepSets, then a masked pooling) and :class:`TextEncoder` (a character
embedding plus a learned position embedding, then an entity encoder).

They read the flat layout of a ``Repeated`` / gymnasium ``Sequence`` leaf
(``[length, item_0, ..., item_{max_len-1}]``, zero-padded) or of a text leaf
(``[length, one-hot or id per position]``): :func:`split_items` and
:meth:`TextEncoder.forward_flat` turn the block into items and a padding mask. Padded
positions never reach the output (their inputs are zeroed, their keys masked in attention,
and pooling skips them), and a list of length 0 encodes to zeros. Mean and max pooling
forget how many items there were, so the encoding ends with ``length / max_len`` (the
fraction of the slots in use, evenly spaced so every count is as easy to tell apart;
``dim + 1`` features in all). The attention is written
with ``matmul`` / ``softmax`` / ``masked_fill`` so that ``torch.export`` and ONNX take it.

:class:`~rlblocks.models.complex_input.ComplexInputNetwork` builds these for the
``entity_encoder`` model-config key (:data:`rlblocks.config.ENTITY_ENCODER_DEFAULTS`).

Examples:
    >>> import torch
    >>> enc = EntityEncoder(item_size=3, dim=8, heads=2, layers=1, pool="mean")
    >>> items = torch.randn(2, 5, 3)
    >>> mask = torch.tensor([[True, True, True, False, False], [False] * 5])
    >>> out = enc(items, mask)
    >>> out.shape, bool(out[1].abs().sum() == 0)    # an empty list encodes to zeros
    (torch.Size([2, 9]), True)
    >>> round(out[0, -1].item(), 4)                  # 3 items of 5 slots
    0.6
    >>> perm = torch.tensor([2, 0, 1, 3, 4])         # reorder the three items of row 0
    >>> torch.allclose(enc(items[:, perm], mask), out, atol=1e-6)
    True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from rlblocks.config_fields import as_int

__all__ = [
    "ENCODER_TYPES",
    "POOLS",
    "EntityEncoder",
    "MaskedPool",
    "TextEncoder",
    "distinct_rows",
    "length_mask",
    "split_items",
    "trim_padding",
]

#: ``entity_encoder["type"]`` values an :class:`EntityEncoder` builds ("flatten" is
#: ComplexInputNetwork's FC stack over the flat block, not an EntityEncoder).
ENCODER_TYPES = ("attention", "deepsets")
#: Pooling modes of :class:`MaskedPool`.
POOLS = ("mean", "max", "sum", "attention")


def _neg(x: torch.Tensor) -> float:
    return float(torch.finfo(x.dtype).min)


def _tracing() -> bool:
    """Whether torch is tracing or exporting (ONNX, ``torch.export``): shapes that depend on
    the values (a cut padding, the distinct rows) would be frozen into the artifact."""
    return bool(
        torch.jit.is_tracing()
        or torch.compiler.is_compiling()
        or torch.compiler.is_exporting()
        or torch.onnx.is_in_onnx_export()
    )


_FINGERPRINTS: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}
#: The last batch :func:`distinct_rows` grouped, its version and the answer: the policy's and
#: the value function's encoders read the same block (one tuple, replaced whole).
_LAST: tuple[Any, int, Any] = (None, -1, None)


def distinct_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(first, inverse)`` for a ``[B, N]`` batch with repeated rows: ``first`` the index of
    each distinct row's first occurrence, ``inverse`` each row's position in ``first``
    (``rows[first][inverse]`` equals ``rows``). None when every row is distinct, for fewer
    than two rows, a tensor of another rank, and while tracing or exporting.

    Rows are grouped by a fixed random projection, then compared exactly with their group's
    first row; should two different rows ever share a projection, the answer is None (no
    grouping) rather than a wrong one.

    Examples:
        >>> first, inverse = distinct_rows(torch.tensor([[1.0, 2], [3, 4], [1, 2]]))
        >>> first.tolist(), inverse.tolist()
        ([0, 1], [0, 1, 0])
        >>> distinct_rows(torch.eye(3)) is None
        True
    """
    global _LAST
    if rows.dim() != 2 or rows.shape[0] < 2 or not rows.is_floating_point() or _tracing():
        return None
    last_rows, last_version, last_found = _LAST
    if last_rows is rows and last_version == rows._version:  # held: its id is not reused
        return last_found  # type: ignore[no-any-return]
    found = _distinct_rows(rows)
    if not rows.requires_grad:  # an observation block: held, it keeps no graph alive
        _LAST = (rows, rows._version, found)
    return found


def _distinct_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    key = (rows.shape[1], rows.dtype, rows.device)
    weights = _FINGERPRINTS.get(key)
    if weights is None:
        generator = torch.Generator().manual_seed(46)
        weights = torch.rand(rows.shape[1], generator=generator, dtype=torch.float64)
        weights = _FINGERPRINTS.setdefault(key, weights.to(rows.dtype).to(rows.device))
    with torch.no_grad():
        detached = rows.detach()
        prints, inverse = torch.unique(detached @ weights, return_inverse=True)
        if prints.shape[0] == rows.shape[0]:
            return None
        positions = torch.arange(rows.shape[0], device=rows.device)
        first = torch.full_like(prints, rows.shape[0], dtype=torch.int64)
        first = first.scatter_reduce(0, inverse, positions, "amin")
        if detached.device.type == "cpu":  # numpy compares a CPU batch several times faster
            values, index = detached.numpy(), first[inverse].numpy()
            same = bool((values[index] == values).all())
        else:
            same = bool((detached[first[inverse]] == detached).all())
        if not same:
            return None
    return first, inverse


def split_items(
    flat: torch.Tensor, max_len: int, item_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A list's flat block ``[B, 1 + max_len * item_size]`` -> items
    ``[B, max_len, item_size]`` and the padding mask ``[B, max_len]`` (position < length).

    Examples:
        >>> items, mask = split_items(torch.tensor([[2.0, 1, 1, 2, 2, 0, 0]]), 3, 2)
        >>> items.shape, mask.tolist()
        (torch.Size([1, 3, 2]), [[True, True, False]])
    """
    if flat.shape[-1] != 1 + max_len * item_size:
        raise ValueError(
            f"split_items: expected a block of 1 + {max_len} * {item_size} = "
            f"{1 + max_len * item_size} floats, got {flat.shape[-1]}"
        )
    items = flat[..., 1:].reshape(-1, max_len, item_size)
    return items, length_mask(flat[..., 0].reshape(-1), max_len)


def trim_padding(mask: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``tensors`` cut along dim 1 after the last position any row of ``mask`` ``[B, L]``
    uses (at least one position kept). The padding never changes an encoding, so this only
    saves work: a batch of short lists is not run over all ``max_len`` slots. While tracing
    or exporting (ONNX, ``torch.export``) nothing is cut, so the artifact takes any length.

    Examples:
        >>> mask = torch.tensor([[True, False, False, False], [True, True, False, False]])
        >>> [t.shape[1] for t in trim_padding(mask, mask, torch.zeros(2, 4, 3))]
        [2, 2]
    """
    if _tracing() or mask.shape[0] == 0:
        return tensors
    used = mask.any(dim=0).nonzero()
    keep = int(used.max()) + 1 if used.numel() else 1
    if keep == mask.shape[1]:
        return tensors
    return tuple(t[:, :keep] for t in tensors)


def length_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """``[B]`` lengths (float or int) -> bool ``[B, max_len]``, True where position < length.

    Examples:
        >>> length_mask(torch.tensor([0.0, 2.0]), 3).tolist()
        [[False, False, False], [True, True, False]]
    """
    positions = torch.arange(max_len, device=lengths.device, dtype=torch.float32)
    return positions.unsqueeze(0) < lengths.to(torch.float32).reshape(-1, 1)


class MaskedPool(nn.Module):
    """Pools ``[B, L, D]`` over the positions where ``mask`` ``[B, L]`` is True.

    ``mean`` (sum / count), ``max``, ``sum``, or ``attention`` (a learned score per
    position, softmax over the valid ones, weighted sum). A row without valid positions
    pools to zeros in every mode.

    Examples:
        >>> pool = MaskedPool(2, "max")
        >>> x = torch.tensor([[[1.0, 5.0], [3.0, -1.0], [9.0, 9.0]]])
        >>> pool(x, torch.tensor([[True, True, False]])).tolist()
        [[3.0, 5.0]]
    """

    def __init__(self, dim: int, mode: str = "mean"):
        super().__init__()
        if mode not in POOLS:
            raise ValueError(f"pool must be one of {', '.join(map(repr, POOLS))}, got {mode!r}")
        self.mode = mode
        self.score: nn.Linear | None = nn.Linear(dim, 1) if mode == "attention" else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.unsqueeze(-1)
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        kept = torch.where(m, x, zero)
        if self.mode == "sum":
            return kept.sum(dim=1)
        if self.mode == "mean":
            count = mask.sum(dim=1, keepdim=True).to(x.dtype).clamp(min=1.0)
            return kept.sum(dim=1) / count
        if self.mode == "max":
            best = torch.where(m, x, torch.full((), _neg(x), dtype=x.dtype, device=x.device)).amax(
                dim=1
            )
            return torch.where(mask.any(dim=1, keepdim=True), best, zero)
        assert self.score is not None
        scores = self.score(kept).squeeze(-1).masked_fill(~mask, _neg(x))
        weights = torch.softmax(scores, dim=-1) * mask.to(x.dtype)
        return (weights.unsqueeze(-1) * kept).sum(dim=1)


class _SelfAttention(nn.Module):
    """Multi-head self-attention whose keys at padded positions are masked out."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # [B, H, L, hd]
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        # A finite fill: a row with no valid key (an empty list) stays finite (uniform).
        scores = scores.masked_fill(~mask[:, None, None, :], _neg(scores))
        attended = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.out(attended.transpose(1, 2).reshape(b, n, d))


class _AttentionBlock(nn.Module):
    """A pre-norm transformer encoder layer: attention, then a position-wise MLP (4 x dim)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attention = _SelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x), mask)
        return x + self.mlp(self.norm2(x))


class EntityEncoder(nn.Module):
    """A permutation-invariant encoder of a padded list of items ``[B, L, item_size]``.

    ``type="attention"``: a linear embedding of each item, ``layers`` pre-norm transformer
    encoder layers (``heads`` heads, padded keys masked), a final LayerNorm, then pooling.
    ``type="deepsets"``: ``phi`` (``layers`` Linear+ReLU layers) per item, pooling, then
    ``rho`` (Linear+ReLU). The output is the pooled ``dim`` features followed by the
    log of 1 + the number of items (``num_outputs = dim + 1``). No position
    information is used, so permuting the valid items leaves the output unchanged.

    Args:
        item_size: Floats per item.
        dim: Width of the item embeddings and of the pooled features.
        heads: Attention heads (``dim`` must be a multiple of it; unused by deepsets).
        layers: Transformer layers (attention) or phi layers (deepsets), >= 1.
        pool: ``"mean"``, ``"max"``, ``"sum"`` or ``"attention"`` (:class:`MaskedPool`).
        type: ``"attention"`` or ``"deepsets"``.
        key: The config key named in error messages.

    Raises:
        ValueError: A bad option (the message names ``key.option``).
    """

    def __init__(
        self,
        item_size: int,
        dim: int = 64,
        heads: int = 4,
        layers: int = 1,
        pool: str = "mean",
        type: str = "attention",  # noqa: A002  (the config key's name)
        key: str = "entity_encoder",
    ):
        super().__init__()
        as_int(item_size, "item_size")
        as_int(dim, f"{key}.dim")
        as_int(heads, f"{key}.heads")
        as_int(layers, f"{key}.layers")
        if type not in ENCODER_TYPES:
            raise ValueError(
                f"{key}.type must be one of {', '.join(map(repr, ENCODER_TYPES))} for an "
                f"EntityEncoder, got {type!r}"
            )
        if pool not in POOLS:
            raise ValueError(
                f"{key}.pool must be one of {', '.join(map(repr, POOLS))}, got {pool!r}"
            )
        if type == "attention" and dim % heads:
            raise ValueError(f"{key}.dim={dim} must be a multiple of {key}.heads={heads}")
        self.item_size, self.kind, self.num_outputs = item_size, type, dim + 1
        self.embed = nn.Linear(item_size, dim)
        self.blocks = nn.ModuleList()
        self.norm: nn.LayerNorm | None = None
        self.phi: nn.Sequential | None = None
        self.rho: nn.Sequential | None = None
        if type == "attention":
            self.blocks.extend(_AttentionBlock(dim, heads) for _ in range(layers))
            self.norm = nn.LayerNorm(dim)
        else:
            extra: list[nn.Module] = []
            for _ in range(layers - 1):
                extra += [nn.Linear(dim, dim), nn.ReLU()]
            self.phi = nn.Sequential(nn.ReLU(), *extra)
            self.rho = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())
        self.pool = MaskedPool(dim, pool)

    @classmethod
    def from_config(cls, item_size: int, options: Mapping[str, Any]) -> EntityEncoder:
        """Built from an ``entity_encoder`` config dict (type, dim, heads, layers, pool)."""
        return cls(
            item_size,
            dim=options["dim"],
            heads=options["heads"],
            layers=options["layers"],
            pool=options["pool"],
            type=options["type"],
        )

    def forward(self, items: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``items`` ``[B, L, item_size]``, ``mask`` bool ``[B, L]`` -> ``[B, dim + 1]``."""
        slots = mask.shape[1]
        if not _tracing() and not bool(mask.any()):  # every list empty: nothing to attend to
            return self.empty(mask.shape[0], items.dtype, items.device)
        items, mask = trim_padding(mask, items, mask)
        zero = torch.zeros((), dtype=items.dtype, device=items.device)
        x = self.embed(torch.where(mask.unsqueeze(-1), items, zero))
        if self.phi is not None and self.rho is not None:
            pooled = self.rho(self.pool(self.phi(x), mask))
        else:
            for block in self.blocks:
                x = block(x, mask)
            assert self.norm is not None
            pooled = self.pool(self.norm(x), mask)
        used = mask.sum(dim=1, keepdim=True).to(pooled.dtype) / max(slots, 1)
        return torch.cat([pooled, used], dim=1)

    def empty(self, batch: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """The encoding of ``batch`` empty lists ``[batch, dim + 1]``, what :meth:`forward`
        gives a row without items, computed without the items: zeros for attention (pooling
        skips every position; the encoder's parameters get no gradient, as their gradient
        through such rows is exactly zero), ``rho`` of zeros for DeepSets.

        Examples:
            >>> enc = EntityEncoder(item_size=3, dim=8, heads=2)
            >>> no_items = torch.zeros(2, 5, dtype=torch.bool)
            >>> torch.equal(enc(torch.randn(2, 5, 3), no_items), enc.empty(2, torch.float32,
            ...             torch.device("cpu")))
            True
        """
        dim = self.num_outputs - 1
        if self.rho is None:
            return torch.zeros(batch, dim + 1, dtype=dtype, device=device)
        pooled = self.rho(torch.zeros(1, dim, dtype=dtype, device=device)).expand(batch, dim)
        return torch.cat([pooled, torch.zeros(batch, 1, dtype=dtype, device=device)], dim=1)

    def forward_flat(self, flat: torch.Tensor, max_len: int) -> torch.Tensor:
        """The flat block of a Repeated / Sequence leaf ``[B, 1 + max_len * item_size]``."""
        items, mask = split_items(flat, max_len, self.item_size)
        return self(items, mask)


class TextEncoder(nn.Module):
    """Text as characters: an embedding of each character id plus a learned position
    embedding, then an :class:`EntityEncoder` over the positions shorter than the length.

    The embedding is one matrix ``embedding.weight`` ``[num_chars, embed_dim]``: one-hot
    input multiplies it (a Linear without bias), ids index it, so both encodings give the
    same result with the same weights.

    Args:
        num_chars: Size of the charset.
        max_len: Character positions.
        encoding: ``"one_hot"`` (values ``[B, max_len, num_chars]``) or ``"ids"``
            (``[B, max_len]``).
        options: The ``entity_encoder`` config (type, dim, heads, layers, pool); the
            embeddings are ``dim`` wide.

    Examples:
        >>> opts = {"type": "attention", "dim": 8, "heads": 2, "layers": 1, "pool": "mean"}
        >>> enc = TextEncoder(5, 4, "ids", opts)
        >>> enc.forward_flat(torch.tensor([[2.0, 3, 1, 0, 0]])).shape   # "db" of "abcde"
        torch.Size([1, 9])
    """

    def __init__(self, num_chars: int, max_len: int, encoding: str, options: Mapping[str, Any]):
        super().__init__()
        as_int(num_chars, "num_chars")
        as_int(max_len, "max_len")
        if encoding not in ("one_hot", "ids"):
            raise ValueError(f"text_encoding must be 'one_hot' or 'ids', got {encoding!r}")
        dim = as_int(options["dim"], "entity_encoder.dim")
        self.num_chars, self.max_len, self.encoding = num_chars, max_len, encoding
        self.embedding = nn.Embedding(num_chars, dim)
        self.position = nn.Parameter(torch.randn(max_len, dim) * 0.02)
        self.entities = EntityEncoder.from_config(dim, options)
        self.num_outputs = self.entities.num_outputs
        # Encodings made without gradients (the rollout's), by string row, valid while the
        # parameters equal the copy taken with them (compared, not trusted to versions: an
        # in-place write through .data or numpy leaves a tensor's version as it was).
        self._memo_key: tuple[Any, ...] = ()
        self._memo_params: list[torch.Tensor] = []
        self._memo: dict[bytes, torch.Tensor] = {}

    def forward(self, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``values``: one-hot ``[B, max_len, num_chars]`` or ids ``[B, max_len]``;
        ``lengths`` ``[B]`` -> ``[B, dim + 1]``."""
        mask = length_mask(lengths.reshape(-1), self.max_len)
        if self.encoding == "one_hot":
            chars = torch.matmul(
                values.reshape(-1, self.max_len, self.num_chars), self.embedding.weight
            )
        else:
            ids = values.reshape(-1, self.max_len).clamp(0, self.num_chars - 1).to(torch.int64)
            chars = self.embedding(ids)
        return self.entities(chars + self.position, mask)

    def forward_flat(self, flat: torch.Tensor) -> torch.Tensor:
        """The flat block of a text leaf: ``[B, 1 + max_len * (num_chars or 1)]``.

        A string that repeats in the batch (MiniGrid's mission, constant within an episode
        and across envs) is encoded once and its encoding shared by its rows
        (:func:`distinct_rows`; gradients add up over the rows as before); a changed string
        is a new row, encoded on its own. A batch whose strings are all empty (length <= 0)
        encodes to :meth:`EntityEncoder.empty` without running the encoder."""
        width = self.num_chars if self.encoding == "one_hot" else 1
        if flat.shape[-1] != 1 + self.max_len * width:
            raise ValueError(
                f"TextEncoder: expected a block of {1 + self.max_len * width} floats "
                f"(length, then {self.max_len} positions of {width}), got {flat.shape[-1]}"
            )
        if flat.dim() == 2 and not _tracing():
            if not bool(length_mask(flat[:, 0], self.max_len).any()):  # every string empty
                return self.entities.empty(flat.shape[0], flat.dtype, flat.device)
            if not torch.is_grad_enabled():
                return self._remembered(flat)
        distinct = distinct_rows(flat)
        if distinct is not None:  # a repeated string (MiniGrid's mission) is encoded once
            first, inverse = distinct
            rows = flat[first]
            return self(rows[:, 1:], rows[:, 0])[inverse]
        return self(flat[..., 1:], flat[..., 0])

    def _remembered(self, flat: torch.Tensor) -> torch.Tensor:
        """``forward_flat`` without gradients: each string row is encoded once while the
        parameters are unchanged (a rollout's mission, step after step)."""
        key = (flat.dtype, flat.device, torch.is_inference_mode_enabled())
        params = [p.detach() for p in self.parameters()]
        same = key == self._memo_key and len(params) == len(self._memo_params)
        same = same and all(
            a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and torch.equal(a, b)
            for a, b in zip(params, self._memo_params, strict=False)
        )
        if not same or len(self._memo) > 256:
            self._memo_key, self._memo = key, {}
            self._memo_params = [p.clone() for p in params]
        distinct = distinct_rows(flat)
        first = distinct[0] if distinct is not None else torch.arange(flat.shape[0])
        rows = flat[first]
        names = [row.tobytes() for row in rows.detach().cpu().numpy()]
        missing = [i for i, name in enumerate(names) if name not in self._memo]
        if missing:
            new = rows[missing]
            for i, encoded in zip(missing, self(new[:, 1:], new[:, 0]), strict=True):
                self._memo[names[i]] = encoded
        out = torch.stack([self._memo[name] for name in names])
        return out if distinct is None else out[distinct[1]]
