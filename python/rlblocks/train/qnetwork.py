"""``QNetwork``: the catalog's model with a (dueling, optionally distributional) Q head, for
Discrete actions, reading RLlib's action-mask observations.

The network is the model :class:`~rlblocks.catalog.ModelCatalog` picks for the observation
(fully connected, vision or complex-input; nested observations arrive flat from the C++
preprocessor) followed by :class:`~rlblocks.models.heads.DuelingQModel` (``dueling=True``)
or by a plain layer of ``n * num_atoms`` outputs. With ``num_atoms > 1`` the head is C51's:
per-action logits over ``linspace(v_min, v_max, num_atoms)``, whose expectations are the
Q-values.

An observation in RLlib's ``{"action_mask", "observations"}`` form: the model reads the
``observations`` columns of the flat batch and the Q-values of masked actions are
``FLOAT_MIN``, so a masked action is never the argmax.

Called as a :class:`~rlblocks.models.ModelV2`, the outputs are the (masked) Q-values and
``value_function()`` is their maximum, so a :class:`~rlblocks.train.policy.Policy` with a
Categorical distribution around it takes the greedy action deterministically (export).

Examples:
    >>> import gymnasium as gym, torch
    >>> q = QNetwork(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), {"fcnet_hiddens": [8]})
    >>> out, _ = q({"obs": torch.zeros(2, 4)})
    >>> out.shape, q.q_logits(torch.zeros(2, 4))[0].shape
    (torch.Size([2, 3]), torch.Size([2, 3, 1]))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch
from gymnasium.spaces import Discrete

from rlblocks.catalog import ModelCatalog
from rlblocks.config import ModelConfig
from rlblocks.distributions import FLOAT_MIN
from rlblocks.masks import MASK_KEY, OBS_KEY, is_mask_space, mask_columns
from rlblocks.models.heads import DuelingQModel
from rlblocks.models.modelv2 import ModelV2

__all__ = ["QNetwork"]


class QNetwork(ModelV2):
    """Q-values of every action (module docstring).

    Args:
        obs_space: The preprocessed observation space (``original_space`` set for nested
            and action-mask observations).
        action_space: A ``Discrete`` action space.
        model_config: The model config of the network's body (recurrent models refused).
        name: The model's name.
        dueling: A dueling head (``V + A - mean(A)``); False: one output per action (atom).
        num_atoms: Atoms of the return distribution (1: expected Q-values).
        v_min, v_max: The support of the distribution (``num_atoms > 1``).

    Raises:
        ValueError: A non-Discrete action space, a recurrent model, an action mask of the
            wrong length.
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        model_config: Mapping[str, Any] | ModelConfig | None = None,
        name: str = "q_network",
        *,
        dueling: bool = True,
        num_atoms: int = 1,
        v_min: float = -10.0,
        v_max: float = 10.0,
    ):
        if not isinstance(action_space, Discrete):
            raise ValueError(f"QNetwork needs a Discrete action space, got {action_space}")
        n = int(action_space.n)
        super().__init__(obs_space, action_space, n, model_config, name)
        config = self.config
        if config.use_lstm or config.use_attention:
            raise ValueError(
                "QNetwork: recurrent models (use_lstm / use_attention) are not supported for "
                "Q-learning; use a feed-forward model (frame stacking gives memory)"
            )
        # Q-learning never reads a value branch: the body is shared
        body_config = ModelConfig.from_dict({**config.to_dict(), "vf_share_layers": True})
        original: Any = getattr(obs_space, "original_space", obs_space)
        self.masked = is_mask_space(original)
        self.mask_columns: slice | None = None
        self.obs_columns: slice | None = None
        body_space = obs_space
        if self.masked:
            from rlblocks.preprocessors import get_preprocessor

            self.mask_columns, self.obs_columns = mask_columns(obs_space, config.to_dict())
            width = self.mask_columns.stop - self.mask_columns.start
            if width != n:
                raise ValueError(
                    f"QNetwork: {MASK_KEY!r} has {width} entries, the action space {action_space} "
                    f"has {n} actions"
                )
            child = original[OBS_KEY]
            body_space = get_preprocessor(child)(child, config.to_dict()).observation_space
        self.n_actions, self.num_atoms = n, int(num_atoms)
        self.dueling = bool(dueling)
        if self.dueling:
            base = ModelCatalog.get_model_v2(
                body_space, action_space, None, body_config, name="q_body"
            )
            if not base.num_outputs:
                raise ValueError(f"QNetwork: the catalog model for {body_space} has no features")
            self.body: ModelV2 = DuelingQModel(
                body_space,
                action_space,
                n,
                body_config,
                "q_head",
                base_model=base,
                num_atoms=self.num_atoms,
                v_min=v_min,
                v_max=v_max,
            )
        else:
            self.body = ModelCatalog.get_model_v2(
                body_space, action_space, n * self.num_atoms, body_config, name="q_body"
            )
        self.register_buffer(
            "support", torch.linspace(float(v_min), float(v_max), self.num_atoms), persistent=False
        )
        self._last_q: torch.Tensor | None = None

    def split(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(the body's input, the mask or None)`` of a flat (or image) batch."""
        if not self.masked:
            return obs, None
        assert self.mask_columns is not None and self.obs_columns is not None
        flat = obs.reshape(obs.shape[0], -1)
        return flat[:, self.obs_columns], flat[:, self.mask_columns]

    def q_logits(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(logits [B, n, num_atoms], mask [B, n] or None)`` for a preprocessed batch
        (``num_atoms == 1``: the Q-values with a trailing axis of 1)."""
        x, mask = self.split(obs)
        if not torch.is_floating_point(x):
            x = x.float()
        out, _ = self.body({"obs": x})
        if isinstance(self.body, DuelingQModel):
            logits = self.body.get_q_logits(out)
        else:
            logits = out.reshape(out.shape[0], self.n_actions, self.num_atoms)
        return logits, mask

    def q_values(self, logits: torch.Tensor) -> torch.Tensor:
        """Expected Q-values ``[B, n]`` of :meth:`q_logits`' logits."""
        if self.num_atoms == 1:
            return logits.squeeze(-1)
        return (torch.softmax(logits, dim=-1) * self.get_buffer("support")).sum(-1)

    def masked_q(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B, n]`` with masked actions at ``FLOAT_MIN``."""
        logits, mask = self.q_logits(obs)
        q = self.q_values(logits)
        if mask is not None:
            q = q.masked_fill(mask <= 0, FLOAT_MIN)
        return q

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: Any
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        obs = input_dict["obs"]
        if not isinstance(obs, torch.Tensor):  # restored to its nested form: use the flat batch
            obs = input_dict["obs_flat"]
        self._last_q = self.masked_q(obs)
        return self._last_q, state

    def value_function(self) -> torch.Tensor:
        """The largest Q-value of each row of the last forward pass."""
        if self._last_q is None:
            raise ValueError("QNetwork: call the model before value_function()")
        return self._last_q.max(dim=-1).values
