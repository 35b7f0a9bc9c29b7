"""GTrXL (gated Transformer-XL) and the ``use_attention`` wrapper.

Building blocks, as in RLlib's ``models/torch/attention_net.py`` and the GTrXL paper
(Parisotto et al. 2019, https://arxiv.org/abs/1910.06764):

* :class:`RelativeMultiHeadAttention`: Transformer-XL attention with relative sinusoidal
  position embeddings, learned content/position biases (``u``, ``v``), an input LayerNorm
  and a ReLU output projection; memory rows are prepended to the keys (no gradient).
* :class:`GRUGate`: the gated skip connection ``(1 - z) * x + z * h_hat``, whose update-gate
  bias (``attention_init_gru_gate_bias``) starts the block close to the identity.
* :class:`GTrXLNet`: ``obs -> Linear -> L x [attention + GRU gate, MLP + GRU gate]``; the
  input of every attention unit is its memory for later steps.
* :class:`AttentionWrapper`: wraps any default model; adds the previous n actions/rewards,
  a GTrXL, and linear logits/value heads.

Memory. The state of unit ``i`` is ``[B, M, attention_dim]``: the inputs of that unit at the
previous ``M = attention_memory_inference`` steps, oldest first (zeros before an episode's
start). ``forward`` returns the updated memories, taken at each sequence's true end, so
step-by-step inference just feeds the returned state back in. Training batches give each
sequence the memory that preceded it (view requirement ``state_in_i``: column
``state_out_i`` at shifts ``-M:-1``, where ``state_out_i`` holds the newest memory row,
``state[i][:, -1]``, of every step).

Differences from RLlib (deliberate): each position attends to itself and the ``M`` steps
before it in training too (RLlib lets training positions see the whole memory plus all
earlier steps of the sequence), so a whole-sequence training forward equals step-by-step
inference; padded steps never change the returned memories; outputs at padded steps are 0.
GTrXLNet's own logits layer keeps RLlib's ReLU (QUIRK 18); the wrapper's heads are linear.

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

import copy
import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlblocks.models.misc import is_symbolic
from rlblocks.models.modelv2 import ModelV2, flatten_obs_space_size
from rlblocks.models.recurrent import (
    action_input_size,
    prev_actions_to_input,
    sequence_row_mask,
    validate_seq_lens,
)
from rlblocks.views import ViewRequirement

__all__ = [
    "AttentionWrapper",
    "GRUGate",
    "GTrXL",
    "GTrXLNet",
    "RelativeMultiHeadAttention",
    "RelativePositionEmbedding",
    "SkipConnection",
]


def _linear(in_size: int, out_size: int, bias: bool = True, act: type[nn.Module] | None = None
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
        self._index_cache: dict[tuple[int, int, int, torch.device], tuple[
            torch.Tensor, torch.Tensor | None]] = {}

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
                RelativeMultiHeadAttention(self.attention_dim, self.attention_dim, num_heads,
                                           head_dim, input_layernorm=True,
                                           output_activation=nn.ReLU),
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
                f"GTrXL: expected {self.num_transformer_units} memory tensors, got "
                f"{len(memories)}"
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


class GTrXLNet(ModelV2):
    """RLlib's ``GTrXLNet`` as a model: flat obs ``[B*T, F]`` -> ``[B*T, num_outputs]``.

    Args:
        obs_space: a 1-D Box (the flat input).
        action_space: the action space.
        num_outputs: logits size; None: output the ``attention_dim`` features.
        model_config: the model config (``max_seq_len``).
        name: the model name.
        num_transformer_units, attention_dim, num_heads, head_dim, memory_inference,
        memory_training, position_wise_mlp_dim, init_gru_gate_bias: the GTrXL sizes
            (the ``attention_*`` keys).

    ``memory_training`` is the memory length training batches should give each sequence
    (the view requirement ``state_in_i`` uses it); positions attend to ``memory_inference``
    steps, so equal values (the default) make training and inference see the same context.

    Examples:
        >>> import gymnasium as gym, torch
        >>> net = GTrXLNet(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), 2, {}, "g",
        ...                attention_dim=8, head_dim=4, memory_inference=4, memory_training=4)
        >>> state = [s[None].expand(2, -1, -1) for s in net.get_initial_state()]
        >>> out, state = net({"obs": torch.zeros(6, 3)}, state, torch.tensor([3, 2]))
        >>> out.shape, state[0].shape, net.value_function().shape
        (torch.Size([6, 2]), torch.Size([2, 4, 8]), torch.Size([6]))
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any] | Any,
        name: str,
        *,
        num_transformer_units: int = 1,
        attention_dim: int = 64,
        num_heads: int = 2,
        memory_inference: int = 50,
        memory_training: int = 50,
        head_dim: int = 32,
        position_wise_mlp_dim: int = 32,
        init_gru_gate_bias: float = 2.0,
    ) -> None:
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        for key, value in (("num_transformer_units", num_transformer_units),
                           ("attention_dim", attention_dim), ("num_heads", num_heads),
                           ("memory_inference", memory_inference),
                           ("memory_training", memory_training), ("head_dim", head_dim),
                           ("position_wise_mlp_dim", position_wise_mlp_dim)):
            if int(value) < 1:
                raise ValueError(f"GTrXLNet: {key} must be >= 1, got {value}")
        if obs_space.shape is None or len(obs_space.shape) != 1:
            raise ValueError(f"GTrXLNet needs a flat 1-D Box observation space, got {obs_space}")
        self.num_transformer_units = int(num_transformer_units)
        self.attention_dim = int(attention_dim)
        self.memory_inference = int(memory_inference)
        self.memory_training = int(memory_training)
        self.max_seq_len = int(self.model_config["max_seq_len"])
        self.obs_dim = int(obs_space.shape[0])
        self.gtrxl = GTrXL(self.obs_dim, self.num_transformer_units, self.attention_dim,
                           num_heads, head_dim, position_wise_mlp_dim, init_gru_gate_bias,
                           self.memory_inference)
        self.logits: nn.Module | None = None
        self.values_out: nn.Module | None = None
        self._value_out: torch.Tensor | None = None
        if self.num_outputs is not None:
            self.logits = _linear(self.attention_dim, self.num_outputs, act=nn.ReLU)  # QUIRK 18
            self.values_out = _linear(self.attention_dim, 1)
        else:
            self.num_outputs = self.attention_dim
        space = gym.spaces.Box(-1.0, 1.0, shape=(self.attention_dim,))
        for i in range(self.num_transformer_units):
            self.view_requirements[f"state_in_{i}"] = ViewRequirement(
                f"state_out_{i}", shift=f"-{self.memory_training}:-1",
                batch_repeat_value=self.max_seq_len, space=space)
            self.view_requirements[f"state_out_{i}"] = ViewRequirement(
                space=space, used_for_training=False)

    def get_initial_state(self) -> list[torch.Tensor]:
        """Zero memories, ``[memory_inference, attention_dim]`` per transformer unit."""
        return self.gtrxl.initial_memory()

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: Any
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        obs = input_dict["obs_flat"].float()
        lens = validate_seq_lens(seq_lens, obs.shape[0], type(self).__name__)
        feats, new_state, mask = self.features(obs, state, lens)
        if self.logits is not None and self.values_out is not None:
            out = self.logits(feats)
            value = self.values_out(feats).reshape(-1)
            if mask is not None:
                out = out * mask[:, None]
                value = value * mask
            self._value_out = value
            return out, new_state
        return feats, new_state

    def features(
        self, obs: torch.Tensor, state: list[torch.Tensor], lens: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor | None]:
        """GTrXL features ``[B*T, attention_dim]`` (0 at padded rows), the memories at each
        sequence's end, and the float row mask (None when no row is padded).

        Args:
            obs: ``[B*T, obs_dim]`` float inputs.
            state: one ``[B, memory, attention_dim]`` memory per transformer unit.
            lens: validated ``[B]`` int64 lengths (see ``validate_seq_lens``).
        """
        b = lens.shape[0]
        t = obs.shape[0] // b
        if len(state) != self.num_transformer_units:
            raise ValueError(
                f"GTrXLNet: expected {self.num_transformer_units} memory tensors in state, "
                f"got {len(state)}"
            )
        for i, s in enumerate(state):
            if s.dim() != 3 or s.shape[0] != b or s.shape[2] != self.attention_dim:
                raise ValueError(
                    f"GTrXLNet: state[{i}] must be [B={b}, memory, {self.attention_dim}], got "
                    f"{tuple(s.shape)}"
                )
        feats, memory_outs = self.gtrxl(obs.reshape(b, t, self.obs_dim), list(state))
        feats = feats.reshape(b * t, self.attention_dim)
        row_mask = sequence_row_mask(lens, t)
        mask = None if not is_symbolic() and bool(row_mask.all()) else row_mask.to(feats.dtype)
        if mask is not None:
            feats = feats * mask[:, None]
        return feats, next_memories(list(state), memory_outs, lens), mask

    def value_function(self) -> torch.Tensor:
        if self._value_out is None:
            raise ValueError("GTrXLNet.value_function: call forward() first (with num_outputs)")
        return self._value_out


class AttentionWrapper(ModelV2):
    """``use_attention``: a default model, then a GTrXL, then linear logits/value heads.

    Built by ``ModelCatalog.get_model_v2`` as ``AttentionWrapper(obs_space, action_space,
    num_outputs, model_config, name, wrapped_cls=<default model class>)``. The wrapped model
    is built with ``num_outputs=None`` (its features feed the GTrXL). With
    ``attention_use_n_prev_actions`` / ``_rewards`` the previous n actions (one-hot for
    Discrete/MultiDiscrete, raw for Box) and rewards, oldest first (``input_dict
    ["prev_n_actions"]`` ``[B, n, ...]``, ``["prev_n_rewards"]`` ``[B, n]``), are appended.

    ``vf_share_layers`` False (difference 25; RLlib's wrapper always shares its GTrXL): the
    value head reads ``value_trunk``, its own wrapped model and GTrXL of the same
    architecture (``value_trunk.wrapped``, ``value_trunk.gtrxl``), so the value loss never
    changes the policy's layers; the state is the policy GTrXL's memories, then the value
    GTrXL's.

    Examples:
        >>> import gymnasium as gym, torch
        >>> from rlblocks.models.fcnet import FullyConnectedNetwork
        >>> cfg = {"fcnet_hiddens": [8], "attention_dim": 8, "attention_head_dim": 4,
        ...        "attention_memory_inference": 3, "attention_memory_training": 3,
        ...        "attention_position_wise_mlp_dim": 8, "max_seq_len": 4}
        >>> m = AttentionWrapper(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), 2, cfg,
        ...                      "att", wrapped_cls=FullyConnectedNetwork)
        >>> state = [s[None] for s in m.get_initial_state()]
        >>> out, state = m({"obs": torch.zeros(1, 3)}, state, torch.tensor([1]))
        >>> out.shape, state[0].shape, m.value_function().shape
        (torch.Size([1, 2]), torch.Size([1, 3, 8]), torch.Size([1]))
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any] | Any,
        name: str,
        wrapped_cls: type[ModelV2] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        cfg = self.model_config
        if wrapped_cls is None:
            raise ValueError("AttentionWrapper needs wrapped_cls (the model class it wraps)")
        self.wrapped = wrapped_cls(obs_space, action_space, None, model_config,
                                   f"{name}_wrapped", **kwargs)
        in_size = self.wrapped.num_outputs
        if in_size is None:
            in_size = flatten_obs_space_size(obs_space)
        self.use_n_prev_actions = int(cfg["attention_use_n_prev_actions"])
        self.use_n_prev_rewards = int(cfg["attention_use_n_prev_rewards"])
        self.action_dim = action_input_size(action_space) if self.use_n_prev_actions else 0
        in_size += self.use_n_prev_actions * self.action_dim + self.use_n_prev_rewards
        self.attention_dim = int(cfg["attention_dim"])
        gtrxl_space = gym.spaces.Box(-np.inf, np.inf, shape=(in_size,), dtype=np.float32)
        gtrxl_sizes = {
            "num_transformer_units": cfg["attention_num_transformer_units"],
            "attention_dim": self.attention_dim,
            "num_heads": cfg["attention_num_heads"],
            "head_dim": cfg["attention_head_dim"],
            "memory_inference": cfg["attention_memory_inference"],
            "memory_training": cfg["attention_memory_training"],
            "position_wise_mlp_dim": cfg["attention_position_wise_mlp_dim"],
            "init_gru_gate_bias": cfg["attention_init_gru_gate_bias"],
        }
        self.gtrxl = GTrXLNet(gtrxl_space, action_space, None, model_config, "gtrxl",
                              **gtrxl_sizes)
        if self.num_outputs is None:
            self.num_outputs = self.attention_dim
            self._logits_branch: nn.Module | None = None
        else:
            self._logits_branch = _linear(self.attention_dim, self.num_outputs)
        self._value_branch = _linear(self.attention_dim, 1)
        # vf_share_layers False (difference 25; RLlib's wrapper always shares its GTrXL): the
        # value head reads its own wrapped model and GTrXL (same architecture), whose memories
        # follow the policy's in the state.
        self.value_trunk: nn.ModuleDict | None = None
        if not self.config.vf_share_layers and self._logits_branch is not None:
            self.value_trunk = nn.ModuleDict({
                "wrapped": wrapped_cls(obs_space, action_space, None, model_config,
                                       f"{name}_value_wrapped", **kwargs),
                "gtrxl": GTrXLNet(gtrxl_space, action_space, None, model_config,
                                  "value_gtrxl", **gtrxl_sizes),
            })
        self._features: torch.Tensor | None = None
        self._mask: torch.Tensor | None = None
        vrs = dict(self.wrapped.view_requirements)
        vrs.update(self.gtrxl.view_requirements)
        units = self.gtrxl.num_transformer_units
        if self.value_trunk is not None:
            for i in range(units):  # the value GTrXL's memories: state_in_{units + i}
                for io in ("in", "out"):
                    vr = copy.copy(self.gtrxl.view_requirements[f"state_{io}_{i}"])
                    if io == "in":
                        vr.data_col = f"state_out_{units + i}"
                    vrs[f"state_{io}_{units + i}"] = vr
        vrs["obs"] = ViewRequirement(shift=0, space=obs_space)
        if self.use_n_prev_actions:
            vrs["prev_n_actions"] = ViewRequirement(
                "actions", space=action_space, shift=f"-{self.use_n_prev_actions}:-1")
        if self.use_n_prev_rewards:
            vrs["prev_n_rewards"] = ViewRequirement(
                "rewards", shift=f"-{self.use_n_prev_rewards}:-1")
        self.view_requirements = vrs

    def get_initial_state(self) -> list[torch.Tensor]:
        """Zero memories, ``[memory_inference, attention_dim]`` per transformer unit (then as
        many for the value GTrXL when ``vf_share_layers`` is False)."""
        if self.value_trunk is None:
            return self.gtrxl.get_initial_state()
        return self.gtrxl.get_initial_state() + self._value_gtrxl().get_initial_state()

    def _value_gtrxl(self) -> GTrXLNet:
        assert self.value_trunk is not None
        gtrxl = self.value_trunk["gtrxl"]
        assert isinstance(gtrxl, GTrXLNet)
        return gtrxl

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: Any
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        x = self._gtrxl_input(self.wrapped, input_dict)
        rows = x.shape[0]
        lens = validate_seq_lens(seq_lens, rows, type(self).__name__)
        units = self.gtrxl.num_transformer_units
        n_state = units if self.value_trunk is None else 2 * units
        if len(state) != n_state:
            raise ValueError(f"AttentionWrapper: expected {n_state} memory tensors in state "
                             f"({units} per GTrXL), got {len(state)}")
        feats, new_state, mask = self.gtrxl.features(x, list(state[:units]), lens)
        value_feats = feats
        if self.value_trunk is not None:
            vx = self._gtrxl_input(self.value_trunk["wrapped"], input_dict)
            value_feats, value_state, _ = self._value_gtrxl().features(
                vx, list(state[units:]), lens)
            new_state = new_state + value_state
        self._features = value_feats
        self._mask = mask
        out = feats if self._logits_branch is None else self._logits_branch(feats)
        if mask is not None:
            out = out * mask[:, None]
        return out, new_state

    def _gtrxl_input(self, wrapped: nn.Module, input_dict: dict[str, Any]) -> torch.Tensor:
        """``[rows, in_size]``: ``wrapped``'s features, then the previous n actions and
        rewards when configured."""
        wrapped_out, _ = wrapped.forward(input_dict, [], None)
        rows = wrapped_out.shape[0]
        parts = [wrapped_out.reshape(rows, -1).float()]
        if self.use_n_prev_actions:
            prev = _column(input_dict, "prev_n_actions", "attention_use_n_prev_actions")
            n = self.use_n_prev_actions
            if prev.shape[0] != rows or prev.dim() < 2 or prev.shape[1] != n:
                raise ValueError(
                    f"AttentionWrapper: prev_n_actions must be [B={rows}, n={n}, ...], got "
                    f"{tuple(prev.shape)}"
                )
            flat = prev_actions_to_input(prev.reshape(rows * n, *prev.shape[2:]),
                                         self.action_space)
            parts.append(flat.reshape(rows, n * self.action_dim))
        if self.use_n_prev_rewards:
            prev_r = _column(input_dict, "prev_n_rewards", "attention_use_n_prev_rewards")
            n = self.use_n_prev_rewards
            if prev_r.numel() != rows * n:
                raise ValueError(
                    f"AttentionWrapper: prev_n_rewards must be [B={rows}, n={n}], got "
                    f"{tuple(prev_r.shape)}"
                )
            parts.append(prev_r.reshape(rows, n).float())
        return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]

    def value_function(self) -> torch.Tensor:
        if self._features is None:
            raise ValueError("AttentionWrapper.value_function: call forward() first")
        value = self._value_branch(self._features).reshape(-1)
        return value if self._mask is None else value * self._mask


def _column(input_dict: Mapping[str, Any], key: str, option: str) -> torch.Tensor:
    if key not in input_dict:
        raise ValueError(f"input_dict lacks {key!r}, which {option} > 0 requires")
    v = input_dict[key]
    return v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v))
