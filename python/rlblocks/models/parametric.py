"""The parametric-actions model of RLlib's models guide: action embeddings dotted with an
intent vector, masked.

The environment puts, in a Dict observation, ``action_mask`` (``[A]``, 1 = legal),
``avail_actions`` (``[A, E]``: one embedding per action slot) and the real observation
(any other single key). The model turns the real observation into an intent vector of size
``E`` with a fully connected network, scores every slot by the dot product with its
embedding, and sets masked slots to the float32 minimum (``FLOAT_MIN``).
Use it with :class:`rlblocks.distributions.MaskedCategorical` (masked actions are then
never sampled and entropy/KL cover legal actions only) or with a plain ``Categorical``.

Without ``avail_actions`` (RLlib's plain mask convention ``Dict(action_mask,
observations)``: a mask and nothing else), the embeddings are learned parameters
(``[A, E]``, one per action slot) instead of observed ones. The model declares
``handles_action_mask = True``: the catalog gives it the whole Dict (it reads the mask
itself) and still masks its outputs again (see :mod:`rlblocks.masks`), which changes
nothing.

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
from torch import nn

from rlblocks.config import ModelConfig
from rlblocks.distributions import FLOAT_MIN
from rlblocks.layout import layout
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.models.modelv2 import ModelV2

__all__ = ["ParametricActionsModel"]

MASK_KEY = "action_mask"
EMBED_KEY = "avail_actions"


class ParametricActionsModel(ModelV2):
    """Logits = avail_actions · intent(real_obs), masked slots set to FLOAT_MIN.

    Args:
        obs_space: The Dict observation space (or a preprocessor's flat space carrying it
            as ``original_space``) with ``action_mask``, optionally ``avail_actions`` (else
            the embeddings are learned), and one more key.
        action_space: ``Discrete(A)``: one action per slot.
        num_outputs: ``A``.
        model_config: RLlib model config for the intent network (``fcnet_hiddens``, ...).
        name: Model name.
        true_obs_shape: Accepted for RLlib compatibility; the size comes from ``obs_space``.
        action_embed_size: ``E``, the embedding size.
        obs_key: Key of the real observation (default: the one key that is neither
            ``action_mask`` nor ``avail_actions``).

    Raises:
        ValueError: The spaces do not fit the layout above.
    """

    #: The catalog gives this model the whole action-mask Dict (it reads ``action_mask``).
    handles_action_mask = True

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
        if MASK_KEY not in original.spaces:
            raise ValueError(
                f"ParametricActionsModel: the observation needs the key {MASK_KEY!r} (and "
                f"optionally {EMBED_KEY!r}), got {list(original.spaces)}"
            )
        self.observed_embeddings = EMBED_KEY in original.spaces
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
        embed_shape = (
            tuple(original.spaces[EMBED_KEY].shape or ())
            if self.observed_embeddings
            else (n_actions, int(action_embed_size))
        )
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
        real_size = layout(original, self.model_config).find((obs_key,)).node.size
        self.obs_key = obs_key
        self.action_embed_size = int(action_embed_size)
        if not self.observed_embeddings:
            # Learned embeddings, one per action slot (unit normal, like nn.Embedding).
            self.action_embeddings = nn.Parameter(torch.randn(n_actions, self.action_embed_size))
        self.action_embed_model = FullyConnectedNetwork(
            Box(-np.inf, np.inf, (real_size,), np.float32),
            action_space,
            self.action_embed_size,
            self.model_config,
            f"{self.name}_action_embed",
        )

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: torch.Tensor | None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        obs = input_dict["obs"]
        action_mask = obs[MASK_KEY].float()
        real = _flat(obs[self.obs_key])
        intent, _ = self.action_embed_model({"obs": real})
        if self.observed_embeddings:
            # [B, A, E] * [B, 1, E] summed over E: one logit per action slot.
            logits = (obs[EMBED_KEY].float() * intent.unsqueeze(1)).sum(2)
        else:
            logits = intent @ self.action_embeddings.t()
        return logits.masked_fill(action_mask <= 0, FLOAT_MIN), state

    def value_function(self) -> torch.Tensor:
        return self.action_embed_model.value_function()


def _flat(x: Any) -> torch.Tensor:
    """A restored observation (a tensor, or a Dict / Tuple of them) as ``[B, N]`` float32."""
    if isinstance(x, Mapping):
        return torch.cat([_flat(v) for v in x.values()], -1)
    if isinstance(x, (tuple, list)):
        return torch.cat([_flat(v) for v in x], -1)
    t = torch.as_tensor(x).float()
    return t.reshape(t.shape[0], -1)
