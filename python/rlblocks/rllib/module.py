"""``RLBlocksRLModule``: an RLlib (new API stack) TorchRLModule around an rlblocks model.

The model comes from rlblocks' :class:`~rlblocks.catalog.ModelCatalog` for the module's
``model_config`` (an rlblocks / RLlib ``MODEL_DEFAULTS`` dict: ``fcnet_hiddens``,
``conv_filters``, ``use_lstm``, ``use_attention``, ``custom_model``, ``custom_model_config``,
``custom_action_dist``, ...), and its action distribution is an
:class:`~rlblocks.rllib.distribution.RLBlocksDistribution` over the catalog's rlblocks
distribution. Keys of ``model_config`` that rlblocks does not know (RLlib's new-stack
``DefaultModelConfig`` keys that ``AlgorithmConfig`` merges in) are ignored; build the spec
with :func:`rlblocks.rllib.rl_module_spec`, which passes every rlblocks key explicitly.

Observations: a flat or image Box (what :func:`rlblocks.rllib.env_to_module` produces; its
``original_space`` lets Dict/Tuple models see the nested structure), or a Dict of
``observations`` plus ``action_mask`` (RLlib's convention, :mod:`rlblocks.masks`: the
logits of actions whose mask entry is <= 0 get the float32 minimum, so they are never
sampled; Discrete, MultiDiscrete and the discrete parts of Tuple/Dict action spaces; a mask
row without a legal action is a ValueError when acting) and/or the inputs the model's view
requirements ask for (past observations, actions, rewards, ``[n, ...]`` each, under the
view's name: ``prev_actions`` for ``lstm_use_prev_action``, ``prev_n_actions`` for
``attention_use_n_prev_actions``, ``prev_n_obs`` for the guide's frame-stacking model;
``env_to_module`` adds them).

Recurrent models (``use_lstm``, ``use_attention``, custom recurrent ModelV2s) keep their
state in RLlib's ``STATE_IN`` / ``STATE_OUT`` columns (``{"0": ..., "1": ...}``, one entry
per state tensor), with batches of ``[B, T=max_seq_len, ...]`` sequences in training.

The module's ``EMBEDDINGS`` output (training forward only) holds the value estimates of that
same forward pass, so ``compute_values(batch, embeddings)`` costs nothing extra.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box

from rlblocks.catalog import ModelCatalog
from rlblocks.config import MODEL_DEFAULTS, ModelConfig
from rlblocks.masks import (
    MASK_KEY,
    OBS_KEY,
    apply_action_mask,
    check_action_mask,
    is_mask_space,
    mask_layout,
    masked_dist,
)
from rlblocks.models.modelv2 import ModelV2
from rlblocks.rllib._ray import (
    TARGET_NETWORK_ACTION_DIST_INPUTS,
    Columns,
    TargetNetworkAPI,
    TorchRLModule,
    ValueFunctionAPI,
)
from rlblocks.rllib.distribution import RLBlocksDistribution

__all__ = [
    "MASK_KEY",
    "OBS_KEY",
    "RLBlocksAPPORLModule",
    "RLBlocksRLModule",
    "is_mask_space",
    "model_views",
]

#: Trajectory columns a model's view requirements may read besides the observation.
_VIEW_COLUMNS = ("obs", "actions", "rewards")


def model_views(model: ModelV2) -> dict[str, tuple[str, list[int], bool]]:
    """The inputs a model reads from the trajectory besides the current observation, from its
    view requirements: ``{input name: (column, shifts, has_time_axis)}`` for the columns
    ``obs`` (shifts <= 0), ``actions`` and ``rewards`` (shifts <= -1).

    Raises:
        ValueError: A view that looks into the future.

    Examples:
        >>> from rlblocks.models.recurrent import LSTMWrapper
        >>> from rlblocks.models.fcnet import FullyConnectedNetwork
        >>> from gymnasium.spaces import Discrete
        >>> m = LSTMWrapper(Box(-1, 1, (3,)), Discrete(2), 2, {"lstm_use_prev_action": True},
        ...                 "m", wrapped_cls=FullyConnectedNetwork)
        >>> model_views(m)
        {'prev_actions': ('actions', [-1], False)}
    """
    views = {}
    for name, vr in model.view_requirements.items():
        column = vr.data_col or name
        if name == "obs" or column not in _VIEW_COLUMNS:
            continue
        shifts = [int(x) for x in np.atleast_1d(vr.shift_arr)]
        if max(shifts) > (0 if column == "obs" else -1):
            raise ValueError(
                f"view requirement {name!r}: shifts {shifts} of {column!r} look into the future"
            )
        views[name] = (column, shifts, bool(vr.has_time_axis))
    return views


def rlblocks_model_config(model_config: Any) -> ModelConfig:
    """The rlblocks keys of an RLModule's ``model_config`` (others dropped), validated.

    Raises:
        ValueError: An invalid rlblocks value, or a model_config that is not a dict.
    """
    if model_config is None:
        model_config = {}
    if not isinstance(model_config, dict):
        if dataclasses.is_dataclass(model_config) and not isinstance(model_config, type):
            model_config = dataclasses.asdict(model_config)
        else:
            raise ValueError(f"model_config must be a dict, got {type(model_config).__name__}")
    return ModelConfig.from_dict({k: v for k, v in model_config.items() if k in MODEL_DEFAULTS})


class RLBlocksRLModule(TorchRLModule, ValueFunctionAPI):  # type: ignore[misc]
    """RLlib's ``TorchRLModule`` + ``ValueFunctionAPI`` whose network is an rlblocks ModelV2.

    Attributes:
        model: The :class:`~rlblocks.models.ModelV2` from the catalog.
        dist_fn: The rlblocks distribution class (or partial) the model outputs feed.
        action_dist_cls: The bound :class:`RLBlocksDistribution` RLlib builds actions from.
    """

    def setup(self) -> None:
        """Builds the catalog model and the distribution adapter."""
        config = rlblocks_model_config(self.model_config)
        self.rlblocks_config = config
        space = self.observation_space
        if space is None or self.action_space is None:
            raise ValueError("RLBlocksRLModule needs observation_space and action_space")
        keyed = isinstance(space, gym.spaces.Dict) and OBS_KEY in space.spaces
        self.keyed = keyed
        self.masked = keyed and MASK_KEY in space.spaces
        model_space = space[OBS_KEY] if keyed else space
        if not isinstance(model_space, Box):
            raise ValueError(
                f"RLBlocksRLModule needs Box observations (flat or image), got {model_space}; "
                "add rlblocks.rllib.env_to_module(...) as the env_to_module_connector to "
                "flatten nested Dict/Tuple/Discrete observations"
            )
        dist_fn, num_outputs = ModelCatalog.get_action_dist(self.action_space, config)
        # The mask layout over the outputs (rlblocks.masks, shared with the native trainer):
        # wrong lengths and unmaskable action spaces fail here, at build time.
        self.mask_layout = (
            mask_layout(self.action_space, num_outputs, space[MASK_KEY], config)
            if self.masked
            else None
        )
        if self.masked and not config.custom_action_dist:
            dist_fn = masked_dist(self.action_space) or dist_fn
        self.dist_fn = dist_fn
        self.model: ModelV2 = ModelCatalog.get_model_v2(
            model_space, self.action_space, num_outputs, config, name="rlblocks_rl_module"
        )
        self._num_state = len(self.model.get_initial_state())
        self._views = model_views(self.model)
        given = set(space.spaces) - {OBS_KEY, MASK_KEY} if keyed else set()
        missing = sorted(set(self._views) - given)
        if missing:
            raise ValueError(
                f"RLBlocksRLModule: the model reads {missing} (previous observations, actions "
                "or rewards) next to the observation; build the env_to_module_connector with "
                "rlblocks.rllib.env_to_module(model_config)"
            )
        if given - set(self._views):
            raise ValueError(
                f"RLBlocksRLModule: unexpected observation keys "
                f"{sorted(given - set(self._views))} next to {OBS_KEY!r}"
            )
        self.max_seq_len = int(config.max_seq_len)
        self.action_dist_cls = RLBlocksDistribution.bind(dist_fn, num_outputs, self.model)

    # --- state ---------------------------------------------------------------------------------
    def get_initial_state(self) -> dict[str, np.ndarray]:
        """One entry per state tensor of the model (``{}`` for feed-forward models)."""
        return {
            str(i): s.detach().cpu().numpy() for i, s in enumerate(self.model.get_initial_state())
        }

    # --- forward passes ------------------------------------------------------------------------
    def _run(
        self, batch: dict[str, Any], model: ModelV2 | None = None, acting: bool = False
    ) -> tuple[dict[str, Any], torch.Tensor]:
        """``(outputs, values)`` of one call of ``model`` (default ``self.model``) on ``batch``;
        ``acting`` (inference / exploration) refuses mask rows without a legal action."""
        model = self.model if model is None else model
        obs = batch[Columns.OBS]
        mask = None
        extras: dict[str, Any] = {}
        if self.keyed:
            wanted = set(self.observation_space.spaces)
            if not isinstance(obs, dict) or not wanted <= set(obs):
                raise ValueError(
                    f"RLBlocksRLModule: observations must be dicts with the keys "
                    f"{sorted(wanted)}, got {sorted(obs) if isinstance(obs, dict) else type(obs)}"
                )
            mask = obs.get(MASK_KEY) if self.masked else None
            extras = {k: torch.as_tensor(obs[k]) for k in self._views}
            obs = obs[OBS_KEY]
        obs = torch.as_tensor(obs)
        if not torch.is_floating_point(obs):
            obs = obs.float()
        state: list[torch.Tensor] = []
        seq_lens = None
        lead: tuple[int, ...] = (obs.shape[0],)
        if self._num_state:
            state_in = batch.get(Columns.STATE_IN)
            keys = [str(i) for i in range(self._num_state)]
            if not isinstance(state_in, dict) or any(k not in state_in for k in keys):
                raise ValueError(
                    f"RLBlocksRLModule: the recurrent model needs batch[{Columns.STATE_IN!r}] "
                    f"with keys {keys} (get_initial_state() gives them), got "
                    f"{sorted(state_in) if isinstance(state_in, dict) else type(state_in)}"
                )
            model_rank = len(self.model.obs_space.shape or ())
            if obs.dim() != model_rank + 2:
                raise ValueError(
                    f"RLBlocksRLModule: a recurrent model takes observations [B, T, ...] "
                    f"(rank {model_rank + 2}), got shape {tuple(obs.shape)}"
                )
            state = [state_in[k] for k in keys]
            b, t = obs.shape[0], obs.shape[1]
            lead = (b, t)
            obs = obs.reshape(b * t, *obs.shape[2:])
            extras = {k: v.reshape(b * t, *v.shape[2:]) for k, v in extras.items()}
            loss_mask = batch.get(Columns.LOSS_MASK)
            if loss_mask is not None and tuple(loss_mask.shape) == (b, t):
                seq_lens = loss_mask.sum(1).long()
            else:
                seq_lens = torch.full((b,), t, dtype=torch.int64, device=obs.device)
        inputs: dict[str, Any] = {"obs": obs, "is_training": self.training}
        for key, value in extras.items():  # [rows, n, ...]; a single-shift view has no n axis
            inputs[key] = value if self._views[key][2] else value[:, 0]
        out, state_out = model(inputs, state, seq_lens)
        values = model.value_function().reshape(lead)
        out = out.reshape(*lead, out.shape[-1])
        if mask is not None and self.mask_layout is not None:
            mask = torch.as_tensor(mask, device=out.device)
            if tuple(mask.shape) != (*lead, self.mask_layout.size):
                raise ValueError(
                    f"RLBlocksRLModule: {MASK_KEY} of shape {tuple(mask.shape)} does not match "
                    f"the expected {(*lead, self.mask_layout.size)}"
                )
            if acting:
                check_action_mask(mask, self.mask_layout)
            out = apply_action_mask(out, mask, self.mask_layout)
        result: dict[str, Any] = {Columns.ACTION_DIST_INPUTS: out}
        if self._num_state:
            result[Columns.STATE_OUT] = {str(i): s for i, s in enumerate(state_out)}
        return result, values

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._run(batch, acting=True)[0]

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        result, values = self._run(batch)
        result[Columns.EMBEDDINGS] = values
        return result

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        """Value estimates ``[B]`` (``[B, T]`` for recurrent models); ``embeddings`` from
        ``forward_train`` are those values already."""
        if isinstance(embeddings, torch.Tensor):
            return embeddings
        return self._run(batch)[1]


class RLBlocksAPPORLModule(RLBlocksRLModule, TargetNetworkAPI):  # type: ignore[misc]
    """:class:`RLBlocksRLModule` with the target network APPO needs (a copy of the model)."""

    def make_target_networks(self) -> None:
        """Creates the target model (a deep copy, updated by the learner)."""
        self.target_model = copy.deepcopy(self.model)
        self.target_model.requires_grad_(False)

    def get_target_network_pairs(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        return [(self.model, self.target_model)]

    def forward_target(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """The target model's distribution inputs for ``batch``."""
        result, _ = self._run(batch, self.target_model)
        return {TARGET_NETWORK_ACTION_DIST_INPUTS: result[Columns.ACTION_DIST_INPUTS]}
