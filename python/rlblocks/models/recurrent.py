"""Recurrent models: the ``RecurrentNetwork`` base class and the ``use_lstm`` wrapper.

Inputs arrive flat, ``[B*T, F]`` rows of ``B = len(seq_lens)`` sequences padded to ``T``
steps (see :func:`rlblocks.sequences.chop_into_sequences`); outputs leave in the same row
order. Differences from RLlib (deliberate): the returned state is the one at each
sequence's true end (RLlib's LSTM also runs over the padding), outputs and values at padded
steps are 0, and with ``_time_major`` the output rows still follow the input rows (RLlib
returned them time-major).

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks.models.fcnet import FullyConnectedNetwork
    >>> m = LSTMWrapper(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), 2,
    ...                 {"fcnet_hiddens": [8], "lstm_cell_size": 4}, "lstm",
    ...                 wrapped_cls=FullyConnectedNetwork)
    >>> h, c = (s.expand(2, -1) for s in m.get_initial_state())
    >>> out, (h, c) = m({"obs": torch.zeros(6, 3)}, [h, c], torch.tensor([3, 1]))
    >>> out.shape, h.shape, m.value_function().shape
    (torch.Size([6, 2]), torch.Size([2, 4]), torch.Size([6]))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlblocks.models.misc import is_symbolic
from rlblocks.models.modelv2 import ModelV2, flatten_obs_space_size
from rlblocks.sequences import add_time_dimension
from rlblocks.views import ViewRequirement

__all__ = [
    "LSTMWrapper",
    "RecurrentNetwork",
    "action_input_size",
    "prev_actions_to_input",
    "sequence_row_mask",
    "validate_seq_lens",
]


def validate_seq_lens(seq_lens: Any, rows: int, who: str) -> torch.Tensor:
    """``seq_lens`` as an int64 tensor, checked against ``rows`` padded rows.

    Raises:
        ValueError: missing, not 1-D, not dividing ``rows``, or a length outside ``[0, T]``.

    Examples:
        >>> validate_seq_lens([2, 1], 6, "demo").tolist()
        [2, 1]
    """
    if seq_lens is None:
        raise ValueError(f"{who}: seq_lens are required (one length per sequence)")
    lens = torch.as_tensor(seq_lens)
    if lens.dim() != 1 or lens.shape[0] == 0:
        raise ValueError(f"{who}: seq_lens must be a non-empty 1-D tensor, got {tuple(lens.shape)}")
    if lens.is_floating_point() or lens.dtype == torch.bool:
        raise ValueError(f"{who}: seq_lens must be integers, got {lens.dtype}")
    b = lens.shape[0]
    if rows % b:
        raise ValueError(f"{who}: {rows} rows do not split into {b} sequences of equal length")
    t = rows // b
    lens = lens.long()
    if not is_symbolic() and bool(((lens < 0) | (lens > t)).any()):
        raise ValueError(f"{who}: seq_lens must be in [0, T={t}], got {lens.tolist()}")
    return lens


def sequence_row_mask(lens: torch.Tensor, t: int) -> torch.Tensor:
    """``[B*T]`` bool mask of the real (non-padded) rows.

    Examples:
        >>> sequence_row_mask(torch.tensor([1, 2]), 2).tolist()
        [True, False, True, True]
    """
    return (torch.arange(t, device=lens.device)[None, :] < lens[:, None]).reshape(-1)


def action_input_size(space: gym.Space) -> int:
    """Size of one action as a model input: one-hot for Discrete/MultiDiscrete, flat Box.

    Examples:
        >>> action_input_size(gym.spaces.MultiDiscrete([2, 3]))
        5
    """
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return int(np.prod(space.shape))
    raise ValueError(
        f"previous actions as inputs support Discrete, MultiDiscrete, Box and MultiBinary action "
        f"spaces, got {space}"
    )


def prev_actions_to_input(prev: torch.Tensor, space: gym.Space) -> torch.Tensor:
    """``[N, ...]`` actions -> ``[N, action_input_size(space)]`` floats.

    Examples:
        >>> prev_actions_to_input(torch.tensor([1, 0]), gym.spaces.Discrete(2)).tolist()
        [[0.0, 1.0], [1.0, 0.0]]
    """
    n = prev.shape[0]
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        from rlblocks.utils import torch_one_hot

        if prev.is_floating_point():
            prev = prev.round().long()
        return torch_one_hot(prev, space).reshape(n, -1).float()
    return prev.reshape(n, -1).float()


class RecurrentNetwork(ModelV2):
    """Base class of recurrent models: implement :meth:`forward_rnn` on time-ranked inputs.

    ``forward`` reshapes ``input_dict["obs_flat"]`` (``[B*T, F]``) into ``[B, T, F]`` (or
    ``[T, B, F]`` with ``_time_major``), calls ``forward_rnn(inputs, state, seq_lens)`` and
    flattens the output back into the input's row order.

    Examples:
        >>> import gymnasium as gym, torch
        >>> class Cumsum(RecurrentNetwork):
        ...     def forward_rnn(self, inputs, state, seq_lens):
        ...         out = state[0][:, None] + inputs.cumsum(1)
        ...         return out, [out[:, -1]]
        ...     def get_initial_state(self):
        ...         return [torch.zeros(1)]
        >>> m = Cumsum(gym.spaces.Box(-9, 9, (1,)), gym.spaces.Discrete(2), 1, {}, "c")
        >>> m({"obs": torch.ones(4, 1)}, [torch.zeros(2, 1)], torch.tensor([2, 2]))[0].tolist()
        [[1.0], [2.0], [1.0], [2.0]]
    """

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: Any
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        flat = input_dict["obs_flat"].float()
        lens = validate_seq_lens(seq_lens, flat.shape[0], type(self).__name__)
        inputs = add_time_dimension(flat, seq_lens=lens, time_major=self.is_time_major())
        output, new_state = self.forward_rnn(inputs, state, lens)
        if self.is_time_major():
            output = output.transpose(0, 1)
        return output.reshape(flat.shape[0], -1), new_state

    def forward_rnn(
        self, inputs: torch.Tensor, state: list[torch.Tensor], seq_lens: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Runs the RNN on ``[B, T, F]`` inputs (``[T, B, F]`` when time-major).

        Args:
            inputs: the time-ranked inputs (padded steps after each sequence's end).
            state: the state list, each ``[B, ...]``.
            seq_lens: ``[B]`` int64 lengths.

        Returns:
            ``(outputs [B, T, num_outputs] (or [T, B, ...]), new_state_list)``.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement forward_rnn()")


class LSTMWrapper(RecurrentNetwork):
    """``use_lstm``: a default model, then an ``nn.LSTM``, then linear logits/value heads.

    Built by ``ModelCatalog.get_model_v2`` as ``LSTMWrapper(obs_space, action_space,
    num_outputs, model_config, name, wrapped_cls=<default model class>)``; the wrapped model
    is built with ``num_outputs=None``. The LSTM input is ``[wrapped features, one-hot(prev
    action) (raw for Box) if lstm_use_prev_action, prev reward if lstm_use_prev_reward]``
    (``input_dict["prev_actions"]``, ``input_dict["prev_rewards"]``). State: ``[h, c]``, each
    ``[B, lstm_cell_size]``.

    ``vf_share_layers`` False (difference 25; RLlib's wrapper always shares its LSTM): the
    value head reads ``value_trunk``, its own wrapped model and LSTM of the same
    architecture (``value_trunk.wrapped``, ``value_trunk.lstm``), so the value loss never
    changes the policy's layers; the state is then ``[h, c, h_v, c_v]``.

    Examples:
        >>> import gymnasium as gym, torch
        >>> from rlblocks.models.fcnet import FullyConnectedNetwork
        >>> m = LSTMWrapper(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), 2,
        ...                 {"lstm_cell_size": 4, "lstm_use_prev_action": True}, "lstm",
        ...                 wrapped_cls=FullyConnectedNetwork)
        >>> state = [s[None] for s in m.get_initial_state()]
        >>> out, state = m({"obs": torch.zeros(1, 3), "prev_actions": torch.tensor([1])},
        ...                state, torch.tensor([1]))
        >>> out.shape, state[1].shape
        (torch.Size([1, 2]), torch.Size([1, 4]))
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
        if wrapped_cls is None:
            raise ValueError("LSTMWrapper needs wrapped_cls (the model class it wraps)")
        cfg = self.model_config
        self.wrapped = wrapped_cls(
            obs_space, action_space, None, model_config, f"{name}_wrapped", **kwargs
        )
        in_size = self.wrapped.num_outputs
        if in_size is None:
            in_size = flatten_obs_space_size(obs_space)
        self.wrapped_size = int(in_size)
        self.cell_size = int(cfg["lstm_cell_size"])
        self.use_prev_action = bool(cfg["lstm_use_prev_action"])
        self.use_prev_reward = bool(cfg["lstm_use_prev_reward"])
        self.action_dim = action_input_size(action_space) if self.use_prev_action else 0
        in_size += self.action_dim + int(self.use_prev_reward)
        self.lstm_input_size = int(in_size)
        self.lstm = nn.LSTM(
            self.lstm_input_size, self.cell_size, batch_first=not self.is_time_major()
        )
        if self.num_outputs is None:
            self.num_outputs = self.cell_size
            self._logits_branch: nn.Linear | None = None
        else:
            self._logits_branch = nn.Linear(self.cell_size, self.num_outputs)
            nn.init.xavier_uniform_(self._logits_branch.weight)
            nn.init.zeros_(self._logits_branch.bias)
        self._value_branch = nn.Linear(self.cell_size, 1)
        nn.init.xavier_uniform_(self._value_branch.weight)
        nn.init.zeros_(self._value_branch.bias)
        # vf_share_layers False (difference 25): the value head reads its own wrapped model
        # and LSTM (same architecture), whose state follows the policy's: [h, c, h_v, c_v].
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
                    "lstm": nn.LSTM(
                        self.lstm_input_size, self.cell_size, batch_first=not self.is_time_major()
                    ),
                }
            )
        self.num_state = 2 if self.value_trunk is None else 4
        self._features: torch.Tensor | None = None
        self._mask: torch.Tensor | None = None
        vrs = dict(self.wrapped.view_requirements)
        vrs["obs"] = ViewRequirement(shift=0, space=obs_space)
        space = gym.spaces.Box(-np.inf, np.inf, shape=(self.cell_size,), dtype=np.float32)
        for i in range(self.num_state):
            vrs[f"state_in_{i}"] = ViewRequirement(f"state_out_{i}", shift=-1, space=space)
            vrs[f"state_out_{i}"] = ViewRequirement(space=space, used_for_training=False)
        if self.use_prev_action:
            vrs["prev_actions"] = ViewRequirement("actions", space=action_space, shift=-1)
        if self.use_prev_reward:
            vrs["prev_rewards"] = ViewRequirement("rewards", shift=-1)
        self.view_requirements = vrs

    def get_initial_state(self) -> list[torch.Tensor]:
        """Zero ``h`` and ``c``, each ``[lstm_cell_size]``, on the model's device (and the
        value LSTM's ``h_v``, ``c_v`` when ``vf_share_layers`` is False)."""
        w = next(self.lstm.parameters())
        return [w.new_zeros(self.cell_size) for _ in range(self.num_state)]

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: Any
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        x = self._lstm_input(self.wrapped, input_dict)
        rows = x.shape[0]
        if self.value_trunk is not None:
            # one [rows, 2 * lstm_input_size] input; forward_rnn splits it between the LSTMs
            x = torch.cat([x, self._lstm_input(self.value_trunk["wrapped"], input_dict)], dim=1)
        lens = validate_seq_lens(seq_lens, rows, type(self).__name__)
        out, new_state = super().forward({"obs_flat": x}, state, lens)
        self._mask = sequence_row_mask(lens, rows // lens.shape[0])
        return out, new_state

    def _lstm_input(self, wrapped: nn.Module, input_dict: dict[str, Any]) -> torch.Tensor:
        """``[rows, lstm_input_size]``: ``wrapped``'s features, then the previous action and
        reward when configured."""
        wrapped_out, _ = wrapped.forward(input_dict, [], None)
        rows = wrapped_out.shape[0]
        parts = [wrapped_out.reshape(rows, -1).float()]
        if self.use_prev_action:
            if "prev_actions" not in input_dict:
                raise ValueError(
                    "input_dict lacks 'prev_actions', which lstm_use_prev_action needs"
                )
            prev = torch.as_tensor(input_dict["prev_actions"])
            if prev.shape[0] != rows:
                raise ValueError(
                    f"LSTMWrapper: prev_actions has {prev.shape[0]} rows, obs has {rows}"
                )
            parts.append(prev_actions_to_input(prev, self.action_space))
        if self.use_prev_reward:
            if "prev_rewards" not in input_dict:
                raise ValueError(
                    "input_dict lacks 'prev_rewards', which lstm_use_prev_reward needs"
                )
            prev_r = torch.as_tensor(input_dict["prev_rewards"])
            if prev_r.numel() != rows:
                raise ValueError(
                    f"LSTMWrapper: prev_rewards must have one value per row ({rows}), got shape "
                    f"{tuple(prev_r.shape)}"
                )
            parts.append(prev_r.reshape(rows, 1).float())
        return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]

    def forward_rnn(
        self, inputs: torch.Tensor, state: list[torch.Tensor], seq_lens: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        names = ["h", "c"] if self.value_trunk is None else ["h", "c", "h_v", "c_v"]
        if len(state) != self.num_state:
            raise ValueError(
                f"LSTMWrapper: state must be [{', '.join(names)}], got {len(state)} tensors"
            )
        bdim = 0 if not self.is_time_major() else 1
        b, t = inputs.shape[bdim], inputs.shape[1 - bdim]
        for name, s in zip(names, state, strict=True):
            if s.dim() != 2 or s.shape[0] != b or s.shape[1] != self.cell_size:
                raise ValueError(
                    f"LSTMWrapper: state {name} must be [B={b}, {self.cell_size}], got "
                    f"{tuple(s.shape)}"
                )
        mask = (torch.arange(t, device=inputs.device)[None, :] < seq_lens[:, None]).to(inputs.dtype)
        mask = mask if not self.is_time_major() else mask.t()
        n_in = self.lstm_input_size
        feats, h, c = self._run_lstm(
            self.lstm, inputs[..., :n_in], state[0], state[1], seq_lens, mask
        )
        new_state = [h, c]
        value_feats = feats
        if self.value_trunk is not None:
            value_feats, h_v, c_v = self._run_lstm(
                self.value_trunk["lstm"], inputs[..., n_in:], state[2], state[3], seq_lens, mask
            )
            new_state += [h_v, c_v]
        self._features = value_feats.transpose(0, 1) if self.is_time_major() else value_feats
        out = feats if self._logits_branch is None else self._logits_branch(feats) * mask[..., None]
        return out, new_state

    def _run_lstm(
        self,
        lstm: nn.Module,
        inputs: torch.Tensor,
        h0: torch.Tensor,
        c0: torch.Tensor,
        seq_lens: torch.Tensor,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``lstm`` over padded sequences: features (0 at padded steps) and the ``h``, ``c``
        at each sequence's true end (the given ones for empty sequences)."""
        t = inputs.shape[1 if not self.is_time_major() else 0]
        hc0 = (h0.unsqueeze(0).to(inputs.dtype), c0.unsqueeze(0).to(inputs.dtype))
        full = t == 1 or is_symbolic() or bool((seq_lens == t).all())
        if full:
            feats, (h, c) = lstm(inputs, hc0)
            h, c = h[0], c[0]
            if t == 1 and not is_symbolic() and bool((seq_lens == 0).any()):
                keep = (seq_lens == 0)[:, None]
                h, c = torch.where(keep, h0, h), torch.where(keep, c0, c)
        else:
            packed = nn.utils.rnn.pack_padded_sequence(
                inputs,
                seq_lens.clamp(min=1).cpu(),
                batch_first=not self.is_time_major(),
                enforce_sorted=False,
            )
            packed_out, (h, c) = lstm(packed, hc0)
            feats, _ = nn.utils.rnn.pad_packed_sequence(
                packed_out, batch_first=not self.is_time_major(), total_length=t
            )
            h, c = h[0], c[0]
            empty = (seq_lens == 0)[:, None]
            h, c = torch.where(empty, h0, h), torch.where(empty, c0, c)
        return feats * mask[..., None], h, c

    def value_function(self) -> torch.Tensor:
        if self._features is None or self._mask is None:
            raise ValueError("LSTMWrapper.value_function: call forward() first")
        return self._value_branch(self._features).reshape(-1) * self._mask
