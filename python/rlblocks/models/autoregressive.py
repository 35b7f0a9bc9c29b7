"""The binary autoregressive model of RLlib's models guide: a context network plus an
``action_model``.

``forward`` maps the observation to a context vector (``num_outputs``, 16 by default, the
distribution's inputs). ``action_model(context, actions)`` returns the logits of
``P(a1 | obs)`` and ``P(a2 | a1)``, the protocol of
:class:`rlblocks.distributions.AutoregressiveDistribution`. Pair it with
:class:`rlblocks.distributions.BinaryAutoregressiveDistribution`.

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks.distributions import BinaryAutoregressiveDistribution
    >>> space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(2)))
    >>> model = AutoregressiveActionModel(gym.spaces.Box(-1, 1, (4,)), space, 16, {}, "ar")
    >>> context, _ = model({"obs": torch.zeros(5, 4)})
    >>> dist = BinaryAutoregressiveDistribution(context, model)
    >>> a1, a2 = dist.sample()
    >>> dist.logp((a1, a2)).shape, model.value_function().shape
    (torch.Size([5]), torch.Size([5]))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import torch
from gymnasium.spaces import Discrete, Tuple

from rlblocks.config import ModelConfig
from rlblocks.models.misc import SlimFC, normc_initializer
from rlblocks.models.modelv2 import ModelV2, flatten_obs_space_size

__all__ = ["AutoregressiveActionModel"]


class AutoregressiveActionModel(ModelV2):
    """Context ``tanh(W obs)``; ``P(a1 | context)``; ``P(a2 | a1)`` through a tanh layer.

    As in the guide, ``a2`` is conditioned on ``a1`` only (a richer model would also feed the
    context to the ``a2`` branch). The value head reads the context.

    Args:
        obs_space: The flat observation space.
        action_space: Must be ``Tuple(Discrete(2), Discrete(2))``.
        num_outputs: Context size (16 in the guide).
        model_config: RLlib model config (unused beyond the base class).
        name: Model name.

    Raises:
        ValueError: Another action space.
    """

    ACTION_SPACE = Tuple((Discrete(2), Discrete(2)))

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int,
        model_config: Mapping[str, Any] | ModelConfig | None,
        name: str,
    ):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        if action_space != self.ACTION_SPACE:
            raise ValueError(
                f"AutoregressiveActionModel only supports {self.ACTION_SPACE}, got {action_space}"
            )
        if not num_outputs or int(num_outputs) < 1:
            raise ValueError(f"AutoregressiveActionModel needs num_outputs >= 1, got {num_outputs}")
        context = int(num_outputs)
        self.context_layer = SlimFC(
            flatten_obs_space_size(obs_space), context, normc_initializer(1.0), "tanh"
        )
        self.value_branch = SlimFC(context, 1, normc_initializer(0.01), None)
        self.a1_logits = SlimFC(context, 2, normc_initializer(0.01), None)
        self.a2_hidden = SlimFC(1, 16, normc_initializer(1.0), "tanh")
        self.a2_logits = SlimFC(16, 2, normc_initializer(0.01), None)
        self._context: torch.Tensor | None = None

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: torch.Tensor | None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        obs = input_dict["obs_flat"].float()
        self._context = self.context_layer(obs.reshape(obs.shape[0], -1))
        return self._context, state

    def value_function(self) -> torch.Tensor:
        if self._context is None:
            raise ValueError(f"{self.name}: call the model on a batch before value_function()")
        return self.value_branch(self._context).squeeze(1)

    def action_model(
        self, context: torch.Tensor, actions: Sequence[torch.Tensor]
    ) -> list[torch.Tensor]:
        """``[a1_logits, a2_logits]``; ``a2_logits`` depend on ``actions[0]`` only.

        Args:
            context: ``[*batch, num_outputs]`` from ``forward``.
            actions: ``[a1, a2]`` int tensors ``[*batch]`` (``a2`` is not read).
        """
        a1_vec = actions[0].to(context.dtype).unsqueeze(-1)
        return [self.a1_logits(context), self.a2_logits(self.a2_hidden(a1_vec))]
