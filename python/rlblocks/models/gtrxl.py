"""GTrXL (gated Transformer-XL): the attention core that ``use_attention`` models run.

The building blocks, as in RLlib's ``models/torch/attention_net.py`` and the GTrXL paper
(Parisotto et al. 2019, https://arxiv.org/abs/1910.06764):

* :class:`RelativeMultiHeadAttention`: Transformer-XL attention with relative sinusoidal
  position embeddings, learned content/position biases (``u``, ``v``), an input LayerNorm
  and a ReLU output projection; memory rows are prepended to the keys (no gradient).
* :class:`GRUGate`: the gated skip connection ``(1 - z) * x + z * h_hat``, whose update-gate
  bias (``attention_init_gru_gate_bias``) starts the block close to the identity.
* :class:`GTrXL`: ``x -> Linear -> L x [attention + GRU gate, MLP + GRU gate]``; the
  input of every attention unit is its memory for later steps
  (:func:`next_memories` advances it).

The models built on it (:class:`~rlblocks.models.attention.GTrXLNet`,
:class:`~rlblocks.models.attention.AttentionWrapper`) live in :mod:`rlblocks.models.attention`,
which documents the memory layout.

Examples:
    >>> import torch
    >>> core = GTrXL(in_dim=4, num_transformer_units=1, attention_dim=8, num_heads=2,
    ...              head_dim=4, position_wise_mlp_dim=8, init_gru_gate_bias=2.0, memory=3)
    >>> mem = core.initial_memory(batch_size=2)
    >>> feats, outs = core(torch.zeros(2, 5, 4), mem)
    >>> feats.shape, [o.shape for o in outs]
    (torch.Size([2, 5, 8]), [torch.Size([2, 5, 8])])
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from rlblocks.models.misc import is_symbolic

__all__ = [
    "GRUGate",
    "GTrXL",
    "RelativeMultiHeadAttention",
    "RelativePositionEmbedding",
    "SkipConnection",
    "next_memories",
]


def _linear(
    in_size: int, out_size: int, bias: bool = True, act: type[nn.Module] | None = None
) -> nn.Module:
    """RLlib's SlimFC layout (``_model.0`` = xavier-initialised Linear, then the activation)."""
    from rlblocks.models.misc import SlimFC

    return SlimFC(in_size, out_size, activation_fn=act, use_bias=bias)


class RelativePositionEmbedding(nn.Module):
    """Sinusoidal embeddings of relative distances ``0..n-1`` (``[n, dim]``).

    The table for the largest ``n`` seen so far is cached (it has no parameters).

    Examples:
        >>> RelativePositionEmbedding(6)(4).shape
        torch.Size([4, 6])
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = int(dim)
        freq = 1.0 / (10000 ** (torch.arange(0, self.dim, 2.0) / self.dim))
        self.inverse_freq: torch.Tensor
        self._table: torch.Tensor
        self.register_buffer("inverse_freq", freq, persistent=False)
        self.register_buffer("_table", torch.zeros(0, self.dim), persistent=False)

    def forward(self, n: int) -> torch.Tensor:
        freq = self.inverse_freq
        if self._table.shape[0] < n or self._table.dtype != freq.dtype:
            angles = torch.arange(n, dtype=freq.dtype, device=freq.device)[:, None] * freq[None, :]
            self._table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)[:, : self.dim]
        return self._table[:n]


class RelativeMultiHeadAttention(nn.Module):
    """Transformer-XL multi-head attention over ``[memory; inputs]`` with relative positions.

    Query ``i`` (absolute position ``Tau + i``) attends to keys ``j`` with
    ``0 <= Tau + i - j <= window`` (causal, at most ``window`` steps back); ``window``
    defaults to the memory length ``Tau``.

    Args:
        in_dim: input features.
        out_dim: output features.
        num_heads: attention heads H.
        head_dim: features per head d.
        input_layernorm: LayerNorm the concatenated memory and inputs first.
        output_activation: activation class after the output projection (RLlib: ReLU).

    Examples:
        >>> att = RelativeMultiHeadAttention(8, 8, num_heads=2, head_dim=4)
        >>> att(torch.zeros(3, 5, 8), memory=torch.zeros(3, 2, 8)).shape
        torch.Size([3, 5, 8])
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        num_heads: int,
        head_dim: int,
        input_layernorm: bool = True,
        output_activation: type[nn.Module] | None = nn.ReLU,
    ) -> None:
        super().__init__()
        self._num_heads = int(num_heads)
        self._head_dim = int(head_dim)
        hd = self._num_heads * self._head_dim
        self._qkv_layer = _linear(in_dim, 3 * hd, bias=False)
        self._linear_layer = _linear(hd, out_dim, bias=False, act=output_activation)
        self._uvar = nn.Parameter(torch.zeros(self._num_heads, self._head_dim))
        self._vvar = nn.Parameter(torch.zeros(self._num_heads, self._head_dim))
        nn.init.xavier_uniform_(self._uvar)
        nn.init.xavier_uniform_(self._vvar)
        self._pos_proj = _linear(in_dim, hd, bias=False)
        self._rel_pos_embedding = RelativePositionEmbedding(in_dim)
        self._input_layernorm = nn.LayerNorm(in_dim) if input_layernorm else None
        self._index_cache: dict[
            tuple[int, int, int, torch.device], tuple[torch.Tensor, torch.Tensor | None]
        ] = {}

    def _relative_index(
        self, tau: int, t: int, w: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Distance index ``[T, K]`` (clamped to ``[0, w]``) and the mask of disallowed keys
        (None when every key is allowed); cached per shape."""
        key = (tau, t, w, device)
        symbolic = is_symbolic()  # exporting: no data-dependent test, nothing cached
        cached = None if symbolic else self._index_cache.get(key)
        if cached is None:
            qpos = torch.arange(tau, tau + t, device=device)[:, None]
            dist = qpos - torch.arange(tau + t, device=device)[None, :]  # [T, K]
            invalid = (dist < 0) | (dist > w)
            cached = (dist.clamp(0, w), invalid if symbolic or bool(invalid.any()) else None)
            if symbolic:
                return cached
            if len(self._index_cache) > 64:
                self._index_cache.clear()
            self._index_cache[key] = cached
        return cached

    def forward(
        self, inputs: torch.Tensor, memory: torch.Tensor | None = None, window: int | None = None
    ) -> torch.Tensor:
        b, t = inputs.shape[0], inputs.shape[1]
        if memory is None:
            memory = inputs.new_zeros(b, 0, inputs.shape[2])
        tau = memory.shape[1]
        w = tau if window is None else int(window)
        h, d = self._num_heads, self._head_dim
        x = torch.cat([memory.detach(), inputs], dim=1)
        if self._input_layernorm is not None:
            x = self._input_layernorm(x)
        q, k, v = torch.chunk(self._qkv_layer(x), 3, dim=-1)
        q = q[:, tau:].reshape(b, t, h, d)
        k = k.reshape(b, tau + t, h, d)
        v = v.reshape(b, tau + t, h, d)
        rel = self._pos_proj(self._rel_pos_embedding(w + 1)).reshape(w + 1, h, d)
        content = torch.einsum("bihd,bjhd->bhij", q + self._uvar, k)
        index, invalid = self._relative_index(tau, t, w, inputs.device)
        # rel[index] is [T, K, H, d]: the embedding of each (query, key) distance.
        pos = torch.einsum("bihd,ijhd->bhij", q + self._vvar, rel[index])
        score = (content + pos) / math.sqrt(d)
        if invalid is not None:
            score = score.masked_fill(invalid, float("-inf"))
        weights = torch.softmax(score, dim=-1)
        out = torch.einsum("bhij,bjhd->bihd", weights, v).reshape(b, t, h * d)
        return self._linear_layer(out)


class GRUGate(nn.Module):
    """GRU-style gating of a skip connection: ``(1 - z) * x + z * tanh(W_h y + U_h (r * x))``.

    ``z = sigmoid(W_z y + U_z x - bias)``; a positive ``init_bias`` keeps the gate mostly
    closed (the block starts near the identity).

    Examples:
        >>> g = GRUGate(4, init_bias=2.0)
        >>> g((torch.zeros(2, 4), torch.ones(2, 4))).shape
        torch.Size([2, 4])
    """

    def __init__(self, dim: int, init_bias: float = 0.0) -> None:
        super().__init__()

        def weight() -> nn.Parameter:
            p = nn.Parameter(torch.zeros(dim, dim))
            nn.init.xavier_uniform_(p)
            return p

        self._w_r, self._w_z, self._w_h = weight(), weight(), weight()
        self._u_r, self._u_z, self._u_h = weight(), weight(), weight()
        self._bias_z = nn.Parameter(torch.full((dim,), float(init_bias)))

    def forward(self, inputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = inputs  # skip input, layer output
        r = torch.sigmoid(y @ self._w_r + x @ self._u_r)
        z = torch.sigmoid(y @ self._w_z + x @ self._u_z - self._bias_z)
        h_hat = torch.tanh(y @ self._w_h + (x * r) @ self._u_h)
        return (1 - z) * x + z * h_hat


class SkipConnection(nn.Module):
    """``fan_in((x, layer(x)))``, or ``x + layer(x)`` without a fan-in layer.

    Examples:
        >>> SkipConnection(nn.Identity())(torch.ones(2)).tolist()
        [2.0, 2.0]
    """

    def __init__(self, layer: nn.Module, fan_in_layer: nn.Module | None = None) -> None:
        super().__init__()
        self._layer = layer
        self._fan_in_layer = fan_in_layer

    def forward(self, inputs: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        out = self._layer(inputs, **kwargs)
        if self._fan_in_layer is None:
            return out + inputs
        return self._fan_in_layer((inputs, out))


class GTrXL(nn.Module):
    """The GTrXL stack as a plain module: ``(x [B,T,in], memories) -> (features, memory_outs)``.

    Args:
        in_dim: input features.
        num_transformer_units: attention + MLP blocks L.
        attention_dim: model width D.
        num_heads: attention heads.
        head_dim: features per head.
        position_wise_mlp_dim: hidden width of each block's MLP.
        init_gru_gate_bias: initial update-gate bias of every GRU gate.
        memory: attention window M (steps each position sees before itself).

    ``memories`` is a list of L tensors ``[B, Tau, D]``; ``memory_outs[i]`` (``[B, T, D]``)
    are unit i's inputs at the T steps (the memory rows for later steps).
    """

    def __init__(
        self,
        in_dim: int,
        num_transformer_units: int,
        attention_dim: int,
        num_heads: int,
        head_dim: int,
        position_wise_mlp_dim: int,
        init_gru_gate_bias: float,
        memory: int,
    ) -> None:
        super().__init__()
        self.in_dim = int(in_dim)
        self.num_transformer_units = int(num_transformer_units)
        self.attention_dim = int(attention_dim)
        self.memory = int(memory)
        self.linear_layer = _linear(self.in_dim, self.attention_dim)
        layers: list[nn.Module] = []
        for _ in range(self.num_transformer_units):
            mha = SkipConnection(
                RelativeMultiHeadAttention(
                    self.attention_dim,
                    self.attention_dim,
                    num_heads,
                    head_dim,
                    input_layernorm=True,
                    output_activation=nn.ReLU,
                ),
                fan_in_layer=GRUGate(self.attention_dim, init_gru_gate_bias),
            )
            mlp = SkipConnection(
                nn.Sequential(
                    nn.LayerNorm(self.attention_dim),
                    _linear(self.attention_dim, position_wise_mlp_dim, bias=False, act=nn.ReLU),
                    _linear(position_wise_mlp_dim, self.attention_dim, bias=False, act=nn.ReLU),
                ),
                fan_in_layer=GRUGate(self.attention_dim, init_gru_gate_bias),
            )
            layers.extend([mha, mlp])
        self.attention_layers = nn.Sequential(*layers)

    def initial_memory(self, batch_size: int | None = None) -> list[torch.Tensor]:
        """Zero memories ``[M, D]`` per unit (``[B, M, D]`` with a batch size)."""
        p = next(self.parameters())
        shape: tuple[int, ...] = (self.memory, self.attention_dim)
        if batch_size is not None:
            shape = (int(batch_size), *shape)
        return [p.new_zeros(shape) for _ in range(self.num_transformer_units)]

    def forward(
        self, x: torch.Tensor, memories: list[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        if len(memories) != self.num_transformer_units:
            raise ValueError(
                f"GTrXL: expected {self.num_transformer_units} memory tensors, got {len(memories)}"
            )
        out = self.linear_layer(x)
        memory_outs = []
        for i in range(self.num_transformer_units):
            memory_outs.append(out)
            out = self.attention_layers[2 * i](out, memory=memories[i], window=self.memory)
            out = self.attention_layers[2 * i + 1](out)
        return out, memory_outs


def next_memories(
    memories: list[torch.Tensor], memory_outs: list[torch.Tensor], seq_lens: torch.Tensor
) -> list[torch.Tensor]:
    """The last ``M`` rows of ``[memory; outs]`` ending at each sequence's true end.

    Examples:
        >>> m = [torch.zeros(2, 2, 1)]
        >>> outs = [torch.arange(1.0, 7.0).reshape(2, 3, 1)]
        >>> next_memories(m, outs, torch.tensor([3, 1]))[0][..., 0].tolist()
        [[2.0, 3.0], [0.0, 4.0]]
    """
    new = []
    for mem, outs in zip(memories, memory_outs, strict=True):
        m = mem.shape[1]
        full = torch.cat([mem, outs], dim=1)
        idx = seq_lens.to(full.device).long()[:, None] + torch.arange(m, device=full.device)
        idx = idx[:, :, None].expand(-1, -1, full.shape[2])
        new.append(torch.gather(full, 1, idx))
    return new
