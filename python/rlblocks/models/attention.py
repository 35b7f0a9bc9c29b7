"""The ``use_attention`` models: RLlib's GTrXLNet and the attention wrapper.

* :class:`GTrXLNet`: a flat observation through a :class:`~rlblocks.models.gtrxl.GTrXL`
  (:mod:`rlblocks.models.gtrxl` holds the building blocks) to logits and a value.
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
GTrXLNet's logits are linear, like the wrapper's heads (RLlib puts a ReLU on GTrXLNet's
logits, so they can never be negative: difference 18).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlblocks.models.gtrxl import GTrXL, next_memories
from rlblocks.models.misc import SlimFC, is_symbolic
from rlblocks.models.modelv2 import ModelV2, flatten_obs_space_size
from rlblocks.models.recurrent import (
    action_input_size,
    prev_actions_to_input,
    sequence_row_mask,
    validate_seq_lens,
)
from rlblocks.views import ViewRequirement

__all__ = ["AttentionWrapper", "GTrXLNet"]


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
        for key, value in (
            ("num_transformer_units", num_transformer_units),
            ("attention_dim", attention_dim),
            ("num_heads", num_heads),
            ("memory_inference", memory_inference),
            ("memory_training", memory_training),
            ("head_dim", head_dim),
            ("position_wise_mlp_dim", position_wise_mlp_dim),
        ):
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
        self.gtrxl = GTrXL(
            self.obs_dim,
            self.num_transformer_units,
            self.attention_dim,
            num_heads,
            head_dim,
            position_wise_mlp_dim,
            init_gru_gate_bias,
            self.memory_inference,
        )
        self.logits: nn.Module | None = None
        self.values_out: nn.Module | None = None
        self._value_out: torch.Tensor | None = None
        if self.num_outputs is not None:
            # difference 18: linear logits (RLlib's ReLU would keep every logit >= 0)
            self.logits = SlimFC(self.attention_dim, self.num_outputs)
            self.values_out = SlimFC(self.attention_dim, 1)
        else:
            self.num_outputs = self.attention_dim
        space = gym.spaces.Box(-1.0, 1.0, shape=(self.attention_dim,))
        for i in range(self.num_transformer_units):
            self.view_requirements[f"state_in_{i}"] = ViewRequirement(
                f"state_out_{i}",
                shift=f"-{self.memory_training}:-1",
                batch_repeat_value=self.max_seq_len,
                space=space,
            )
            self.view_requirements[f"state_out_{i}"] = ViewRequirement(
                space=space, used_for_training=False
            )

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
        self.wrapped = wrapped_cls(
            obs_space, action_space, None, model_config, f"{name}_wrapped", **kwargs
        )
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
        self.gtrxl = GTrXLNet(gtrxl_space, action_space, None, model_config, "gtrxl", **gtrxl_sizes)
        if self.num_outputs is None:
            self.num_outputs = self.attention_dim
            self._logits_branch: nn.Module | None = None
        else:
            self._logits_branch = SlimFC(self.attention_dim, self.num_outputs)
        self._value_branch = SlimFC(self.attention_dim, 1)
        # vf_share_layers False (difference 25; RLlib's wrapper always shares its GTrXL): the
        # value head reads its own wrapped model and GTrXL (same architecture), whose memories
        # follow the policy's in the state.
        self.value_trunk: nn.ModuleDict | None = None
        if not self.config.vf_share_layers and self._logits_branch is not None:
            self.value_trunk = nn.ModuleDict(
                {
                    "wrapped": wrapped_cls(
                        obs_space,
                        action_space,
                        None,
                        model_config,
                        f"{name}_value_wrapped",
                        **kwargs,
                    ),
                    "gtrxl": GTrXLNet(
                        gtrxl_space, action_space, None, model_config, "value_gtrxl", **gtrxl_sizes
                    ),
                }
            )
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
                "actions", space=action_space, shift=f"-{self.use_n_prev_actions}:-1"
            )
        if self.use_n_prev_rewards:
            vrs["prev_n_rewards"] = ViewRequirement(
                "rewards", shift=f"-{self.use_n_prev_rewards}:-1"
            )
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
            raise ValueError(
                f"AttentionWrapper: expected {n_state} memory tensors in state "
                f"({units} per GTrXL), got {len(state)}"
            )
        feats, new_state, mask = self.gtrxl.features(x, list(state[:units]), lens)
        value_feats = feats
        if self.value_trunk is not None:
            vx = self._gtrxl_input(self.value_trunk["wrapped"], input_dict)
            value_feats, value_state, _ = self._value_gtrxl().features(
                vx, list(state[units:]), lens
            )
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
            flat = prev_actions_to_input(prev.reshape(rows * n, *prev.shape[2:]), self.action_space)
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
