"""``ActionMaskModel``: any model whose outputs are masked by RLlib's ``action_mask``
observations (:mod:`rlblocks.masks`: the convention, the mask layout and the masking), and
:func:`build_masked_model`, which the catalog calls for such an observation space.

Examples:
    >>> import gymnasium as gym, torch
    >>> from gymnasium.spaces import Box, Dict, Discrete, MultiBinary
    >>> from rlblocks.catalog import ModelCatalog
    >>> from rlblocks.preprocessors import get_preprocessor
    >>> space = Dict({"action_mask": MultiBinary(3), "observations": Box(-1, 1, (4,))})
    >>> obs_space = get_preprocessor(space)(space).observation_space
    >>> model = ModelCatalog.get_model_v2(obs_space, Discrete(3), 3, {"fcnet_hiddens": [8]})
    >>> isinstance(model, ActionMaskModel)
    True
    >>> obs = torch.cat([torch.tensor([[1.0, 0.0, 1.0]]), torch.zeros(1, 4)], dim=1)
    >>> bool(model({"obs": obs})[0][0, 1] < -1e38)
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box

from rlblocks.config import ModelConfig
from rlblocks.masks import (
    MASK_KEY,
    OBS_KEY,
    MaskLayout,
    apply_action_mask,
    mask_columns,
    mask_layout,
)
from rlblocks.models.modelv2 import ModelV2

__all__ = ["ActionMaskModel", "build_masked_model"]


class ActionMaskModel(ModelV2):
    """Any model over ``observations`` (or, for a model that reads the mask itself, over the
    whole Dict), its outputs masked by ``action_mask`` (:func:`~rlblocks.masks.apply_action_mask`).

    Built by :meth:`rlblocks.catalog.ModelCatalog.get_model_v2` for an observation space
    whose ``original_space`` is ``Dict(action_mask, observations)``: the catalog picks the
    wrapped model for ``observations`` alone (a Box gets the fully connected net, an image
    the vision net, ``use_lstm`` / ``use_attention`` wrap it as usual). Recurrent state,
    view requirements, ``value_function``, ``custom_loss`` and ``metrics`` are the wrapped
    model's.

    Args:
        obs_space: The flat preprocessed space of the whole Dict (``original_space`` set).
        action_space: The action space.
        num_outputs: The distribution's input size.
        model_config: The model config.
        name: The model's name.
        inner: The wrapped model.
        layout: :func:`~rlblocks.masks.mask_layout` of the mask over ``num_outputs``.
        full_obs: Whether ``inner`` takes the whole Dict (a model that reads the mask) rather
            than ``observations``.
        inner_shape: The shape of ``observations``' own preprocessed space (what ``inner``
            takes); default ``inner.obs_space.shape``.

    Attributes:
        mask_columns: The mask's column slice in the flat observation.
        layout: The :class:`~rlblocks.masks.MaskLayout`.
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any] | ModelConfig | None,
        name: str,
        *,
        inner: ModelV2,
        layout: MaskLayout,
        full_obs: bool = False,
        inner_shape: tuple[int, ...] | None = None,
    ):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.inner = inner
        self.layout = layout
        self.full_obs = bool(full_obs)
        self.mask_columns, self.obs_columns = mask_columns(obs_space, self.model_config)
        self.time_major = inner.time_major
        if inner_shape is None:
            inner_shape = tuple(inner.obs_space.shape or ())
        self._inner_shape = tuple(int(d) for d in inner_shape)
        width = self.obs_columns.stop - self.obs_columns.start
        if not self.full_obs and int(np.prod(self._inner_shape, dtype=np.int64)) != width:
            raise ValueError(
                f"ActionMaskModel: {OBS_KEY!r} takes {width} columns of the observation, the "
                f"wrapped model's input shape is {self._inner_shape}"
            )
        views = dict(inner.view_requirements)
        for key, vr in views.items():
            if key != "obs" and getattr(vr, "data_col", None) == "obs":
                raise ValueError(
                    f"{type(inner).__name__} reads past observations ({key!r}), which is not "
                    f"supported with {MASK_KEY!r} observations"
                )
        if "obs" in views:
            from rlblocks.views import ViewRequirement

            views["obs"] = ViewRequirement(shift=0, space=obs_space)
        self._view_requirements = views

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: torch.Tensor | None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        flat = input_dict["obs_flat"]
        mask = flat[:, self.mask_columns]
        inner_input = {k: v for k, v in input_dict.items() if k not in ("obs", "obs_flat")}
        if self.full_obs:
            inner_input["obs"] = flat
        else:
            inner_input["obs"] = flat[:, self.obs_columns].reshape(-1, *self._inner_shape)
        out, state_out = self.inner(inner_input, state, seq_lens)
        return apply_action_mask(out, mask, self.layout), state_out

    def value_function(self) -> torch.Tensor:
        return self.inner.value_function()

    def get_initial_state(self) -> list[torch.Tensor]:
        return self.inner.get_initial_state()

    def custom_loss(self, policy_loss: Any, loss_inputs: Any) -> Any:
        return self.inner.custom_loss(policy_loss, loss_inputs)

    def metrics(self) -> dict[str, Any]:
        return self.inner.metrics()


def build_masked_model(
    obs_space: gym.Space,
    action_space: gym.Space,
    num_outputs: int | None,
    config: ModelConfig,
    name: str,
    build: Any,
    reads_mask: bool,
) -> ModelV2:
    """The :class:`ActionMaskModel` for a flat preprocessed action-mask ``obs_space``.

    ``build(space)`` builds the wrapped model for ``space``: ``observations``' own
    preprocessed space, or the whole flat space when ``reads_mask`` (the model masks
    itself too; masking twice changes nothing).

    Raises:
        ValueError: ``obs_space`` is not the flat preprocessed form, or
            :func:`~rlblocks.masks.mask_layout`'s.
    """
    from rlblocks.preprocessors import get_preprocessor

    original = getattr(obs_space, "original_space", obs_space)
    if (
        not isinstance(obs_space, Box)
        or len(obs_space.shape or ()) != 1
        or (not isinstance(original, gym.spaces.Dict))
    ):
        raise ValueError(
            f"an {MASK_KEY!r} observation must reach the model preprocessed (a flat Box whose "
            f"original_space is the Dict), got {obs_space}"
        )
    layout = mask_layout(action_space, num_outputs, original[MASK_KEY], config)
    inner_space: gym.Space
    if reads_mask:
        inner_space = obs_space
    else:
        child = original[OBS_KEY]
        inner_space = get_preprocessor(child)(child, config.to_dict()).observation_space
    return ActionMaskModel(
        obs_space,
        action_space,
        num_outputs,
        config,
        name,
        inner=build(inner_space),
        layout=layout,
        full_obs=reads_mask,
        inner_shape=tuple(inner_space.shape or ()),
    )
