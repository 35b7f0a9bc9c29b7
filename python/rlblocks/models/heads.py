"""Bundled model interfaces (the "Custom Model APIs" of RLlib's models guide): Q-value heads
on any model.

Use them through ``ModelCatalog.get_model_v2(..., model_interface=DuelingQModel)``, or
build them directly around a model with ``base_model=``. Both are compositions
(:class:`rlblocks.models.modelv2.ModelInterface`): the base model computes its usual
outputs, the interface adds a method that maps those outputs to Q-values.

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks import ModelCatalog
    >>> obs, act = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3)
    >>> m = ModelCatalog.get_model_v2(obs, act, 3, {"fcnet_hiddens": [16]},
    ...                               model_interface=DuelingQModel, name="dq")
    >>> out, _ = m({"obs": torch.zeros(2, 4)})
    >>> m.get_q_values(out).shape
    torch.Size([2, 3])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box, Discrete

from rlblocks.config import ModelConfig
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.models.misc import SlimFC
from rlblocks.models.modelv2 import ModelInterface, ModelV2

__all__ = ["ContinuousActionQModel", "DuelingQModel"]


class DuelingQModel(ModelInterface):
    """Adds ``get_q_values(model_out)``: a dueling head ``V + A - mean(A)``.

    The advantage head ``A`` (``num_outputs`` units, or ``action_space.n`` when
    ``num_outputs`` is None) and the state-value head ``V`` (1 unit) are SlimFC layers
    (xavier init, linear) on the base model's outputs.

    With ``num_atoms > 1`` the head is distributional (C51): ``A`` has ``n * num_atoms``
    units and ``V`` ``num_atoms``; :meth:`get_q_logits` gives per-action logits over the
    ``num_atoms`` support points ``linspace(v_min, v_max, num_atoms)`` (the advantages
    centred over actions, per atom), and :meth:`get_q_values` their expectations.

    Examples:
        >>> import gymnasium as gym, torch
        >>> from rlblocks.models.fcnet import FullyConnectedNetwork
        >>> obs, act = gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(4)
        >>> base = FullyConnectedNetwork(obs, act, None, {"fcnet_hiddens": [8]}, "base")
        >>> q = DuelingQModel(obs, act, None, {}, "q", base_model=base)
        >>> q.get_q_values(q({"obs": torch.zeros(3, 2)})[0]).shape
        torch.Size([3, 4])
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any] | ModelConfig | None,
        name: str,
        *,
        base_model: ModelV2,
        num_atoms: int = 1,
        v_min: float = -10.0,
        v_max: float = 10.0,
    ):
        super().__init__(
            obs_space, action_space, num_outputs, model_config, name, base_model=base_model
        )
        if isinstance(num_atoms, bool) or int(num_atoms) != num_atoms or num_atoms < 1:
            raise ValueError(f"DuelingQModel: num_atoms must be an int >= 1, got {num_atoms!r}")
        if num_atoms > 1 and not float(v_min) < float(v_max):
            raise ValueError(f"DuelingQModel: v_min ({v_min}) must be < v_max ({v_max})")
        if num_outputs:
            n_actions = int(num_outputs)
        elif isinstance(action_space, Discrete):
            n_actions = int(action_space.n)
        else:
            raise ValueError(
                "DuelingQModel: pass num_outputs (the number of Q-values) or use a Discrete "
                f"action space, got num_outputs={num_outputs!r} and {action_space}"
            )
        if not self.num_outputs:
            raise ValueError("DuelingQModel: the base model reports no output size")
        self.n_actions, self.num_atoms = n_actions, int(num_atoms)
        self.A = SlimFC(self.num_outputs, n_actions * self.num_atoms)
        self.V = SlimFC(self.num_outputs, self.num_atoms)
        self.register_buffer(
            "support", torch.linspace(float(v_min), float(v_max), self.num_atoms), persistent=False
        )

    def get_q_logits(self, underlying_output: torch.Tensor) -> torch.Tensor:
        """``[B, n_actions, num_atoms]``: ``V + A - mean_actions(A)`` per atom (for
        ``num_atoms == 1`` these are the Q-values with a trailing axis of 1)."""
        b = underlying_output.shape[0]
        advantages = self.A(underlying_output).reshape(b, self.n_actions, self.num_atoms)
        value = self.V(underlying_output).reshape(b, 1, self.num_atoms)
        return value + advantages - advantages.mean(dim=1, keepdim=True)

    def get_q_values(self, underlying_output: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B, n_actions]`` from the base model's outputs ``[B, num_outputs]``
        (the expectation over the support when ``num_atoms > 1``)."""
        logits = self.get_q_logits(underlying_output)
        if self.num_atoms == 1:
            return logits.squeeze(-1)
        return (torch.softmax(logits, dim=-1) * self.support).sum(-1)


class ContinuousActionQModel(ModelInterface):
    """Adds ``get_single_q_value(model_out, action)``: Q(s, a) for continuous actions.

    The base model is built without a logits layer (``num_outputs=None``), so its outputs
    are its features; a nested :class:`FullyConnectedNetwork` (``q_head``, same model
    config, one output) maps ``concat(features, action)`` to one Q-value.

    Examples:
        >>> import gymnasium as gym, torch
        >>> from rlblocks.models.fcnet import FullyConnectedNetwork
        >>> obs, act = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,))
        >>> base = FullyConnectedNetwork(obs, act, None, {"fcnet_hiddens": [8]}, "base")
        >>> q = ContinuousActionQModel(obs, act, None, {"fcnet_hiddens": [8]}, "q",
        ...                            base_model=base)
        >>> feats, _ = q({"obs": torch.zeros(5, 3)})
        >>> q.get_single_q_value(feats, torch.zeros(5, 2)).shape
        torch.Size([5, 1])
    """

    @classmethod
    def base_num_outputs(cls, num_outputs: int | None) -> int | None:
        return None

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any] | ModelConfig | None,
        name: str,
        *,
        base_model: ModelV2,
    ):
        super().__init__(
            obs_space, action_space, num_outputs, model_config, name, base_model=base_model
        )
        if not isinstance(action_space, Box):
            raise ValueError(f"ContinuousActionQModel needs a Box action space, got {action_space}")
        if not self.num_outputs:
            raise ValueError("ContinuousActionQModel: the base model reports no output size")
        self.action_dim = int(np.prod(action_space.shape, dtype=np.int64))
        combined = Box(-np.inf, np.inf, (self.num_outputs + self.action_dim,), np.float32)
        self.q_head = FullyConnectedNetwork(combined, action_space, 1, self.config, "q_head")

    def get_single_q_value(
        self, underlying_output: torch.Tensor, action: torch.Tensor
    ) -> torch.Tensor:
        """Q-values ``[B, 1]`` for features ``[B, num_outputs]`` and actions ``[B, *shape]``."""
        flat_action = action.reshape(action.shape[0], -1).to(underlying_output.dtype)
        q, _ = self.q_head({"obs": torch.cat([underlying_output, flat_action], dim=-1)})
        return q
