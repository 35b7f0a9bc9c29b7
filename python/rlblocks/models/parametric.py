"""The parametric-actions model of RLlib's models guide: action embeddings dotted with an
intent vector, masked.

The environment puts, in a Dict observation, ``action_mask`` (``[A]``, 1 = legal),
``avail_actions`` (``[A, E]``: one embedding per action slot) and the real observation
(any other single key). The model turns the real observation into an intent vector of size
``E`` with a fully connected network, scores every slot by the dot product with its
embedding, and adds ``max(log(mask), FLOAT_MIN)`` so masked slots get the float32 floor.
Use it with :class:`rlblocks.distributions.MaskedCategorical` (masked actions are then
never sampled and entropy/KL cover legal actions only) or with a plain ``Categorical``.

Examples:
    >>> import gymnasium as gym, torch
    >>> from gymnasium.spaces import Box, Dict, Discrete
    >>> from rlblocks.distributions import MaskedCategorical
    >>> obs_space = Dict({"action_mask": Box(0, 1, (3,)), "avail_actions": Box(-1, 1, (3, 2)),
    ...                   "cart": Box(-1, 1, (4,))})
    >>> model = ParametricActionsModel(obs_space, Discrete(3), 3, {}, "pa")
    >>> obs = {"action_mask": torch.tensor([[1.0, 0.0, 1.0]]),
    ...        "avail_actions": torch.ones(1, 3, 2), "cart": torch.zeros(1, 4)}
    >>> logits, _ = model.forward({"obs": obs}, [], None)
    >>> MaskedCategorical(logits).legal
    tensor([[ True, False,  True]])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box, Dict, Discrete

from rlblocks.config import ModelConfig
from rlblocks.distributions import FLOAT_MIN
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.models.modelv2 import ModelV2

__all__ = ["ParametricActionsModel"]

MASK_KEY = "action_mask"
EMBED_KEY = "avail_actions"


class ParametricActionsModel(ModelV2):
    """Logits = avail_actions · intent(real_obs) + max(log(action_mask), FLOAT_MIN).

    Args:
        obs_space: The Dict observation space (or a preprocessor's flat space carrying it
            as ``original_space``) with ``action_mask``, ``avail_actions`` and one more key.
        action_space: ``Discrete(A)``: one action per slot.
        num_outputs: ``A``.
        model_config: RLlib model config for the intent network (``fcnet_hiddens``, ...).
        name: Model name.
        true_obs_shape: Shape of the real observation, used when ``obs_space`` does not say.
        action_embed_size: ``E``, the embedding size.
        obs_key: Key of the real observation (default: the one key that is neither
            ``action_mask`` nor ``avail_actions``).

    Raises:
        ValueError: The spaces do not fit the layout above.
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int,
        model_config: Mapping[str, Any] | ModelConfig | None,
        name: str,
        true_obs_shape: Sequence[int] = (4,),
        action_embed_size: int = 2,
        obs_key: str | None = None,
    ):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        original = getattr(obs_space, "original_space", obs_space)
        if not isinstance(original, Dict):
            raise ValueError(
                f"ParametricActionsModel needs a Dict observation space with "
                f"{MASK_KEY!r} and {EMBED_KEY!r}, got {original}"
            )
        keys = [k for k in original.spaces if k not in (MASK_KEY, EMBED_KEY)]
        if MASK_KEY not in original.spaces or EMBED_KEY not in original.spaces:
            raise ValueError(
                f"ParametricActionsModel: the observation needs keys {MASK_KEY!r} and "
                f"{EMBED_KEY!r}, got {list(original.spaces)}"
            )
        if obs_key is None:
            if len(keys) != 1:
                raise ValueError(
                    "ParametricActionsModel: pass obs_key= to say which of "
                    f"{keys} is the real observation"
                )
            obs_key = keys[0]
        elif obs_key not in keys:
            raise ValueError(f"ParametricActionsModel: obs_key {obs_key!r} not in {keys}")
        if not isinstance(action_space, Discrete):
            raise ValueError(
                f"ParametricActionsModel needs a Discrete action space, got {action_space}"
            )
        n_actions = int(action_space.n)
        embed_shape = tuple(original.spaces[EMBED_KEY].shape or ())
        mask_shape = tuple(original.spaces[MASK_KEY].shape or ())
        if embed_shape != (n_actions, int(action_embed_size)) or mask_shape != (n_actions,):
            raise ValueError(
                f"ParametricActionsModel: expected {MASK_KEY} of shape {(n_actions,)} and "
                f"{EMBED_KEY} of shape {(n_actions, int(action_embed_size))} for {action_space} "
                f"and action_embed_size={action_embed_size}, got {mask_shape} and {embed_shape}"
            )
        if int(num_outputs) != n_actions:
            raise ValueError(
                f"ParametricActionsModel: num_outputs must equal the number of actions "
                f"({n_actions}), got {num_outputs}"
            )
        real_shape = tuple(original.spaces[obs_key].shape or true_obs_shape)
        self.obs_key = obs_key
        self.action_embed_size = int(action_embed_size)
        self.action_embed_model = FullyConnectedNetwork(
            Box(-np.inf, np.inf, (int(np.prod(real_shape)),), np.float32),
            action_space,
            self.action_embed_size,
            self.model_config,
            f"{self.name}_action_embed",
        )

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: torch.Tensor | None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        obs = input_dict["obs"]
        avail_actions = obs[EMBED_KEY].float()
        action_mask = obs[MASK_KEY].float()
        real = obs[self.obs_key].float()
        intent, _ = self.action_embed_model({"obs": real.reshape(real.shape[0], -1)})
        # [B, A, E] * [B, 1, E] summed over E: one logit per action slot.
        logits = (avail_actions * intent.unsqueeze(1)).sum(2)
        inf_mask = torch.clamp(torch.log(action_mask), min=FLOAT_MIN)
        return logits + inf_mask, state

    def value_function(self) -> torch.Tensor:
        return self.action_embed_model.value_function()
