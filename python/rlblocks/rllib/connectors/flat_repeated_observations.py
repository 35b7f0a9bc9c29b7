""":class:`FlatRepeatedObservations`: the env-side twin of :class:`FlattenObservationsBatched`
for ``Repeated`` observations, which RLlib's env runner cannot unbatch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box

from rlblocks.config import ModelConfig
from rlblocks.preprocessors import get_preprocessor
from rlblocks.rllib.connectors.observation_spaces import (
    inner_space,
    mask_dict,
    with_original_space,
)
from rlblocks.rllib.module import MASK_KEY, OBS_KEY, is_mask_space

__all__ = ["FlatRepeatedObservations"]


class FlatRepeatedObservations(gym.ObservationWrapper):  # type: ignore[type-arg]
    """Env side of the observations RLlib's env runner cannot unbatch (``Repeated``,
    gymnasium ``Sequence`` / ``Graph`` / ``Text`` / ``OneOf``, other string spaces: see
    :func:`~rlblocks.rllib.connectors.needs_env_side_flattening`): each observation -> the
    flat float32 row of rlblocks' preprocessor (the row
    :class:`~rlblocks.rllib.connectors.FlattenObservationsBatched` would make).

    gymnasium's vector env batches those spaces as a Tuple of per-env values, which RLlib's
    env runner cannot unbatch; a flat Box it can. The Box carries ``original_space`` (the
    structured space) and the preprocessor's ``layout``, so the module restores the
    structure exactly as after the connector's flattening, and the connector passes the
    rows through (a flat Box needs no preprocessor). The action-mask form
    ``Dict(action_mask=..., observations=...)`` keeps ``action_mask`` and flattens
    ``observations`` only. The bounds (``sequence_max_len``, ``graph_max_nodes``,
    ``text_max_length``, ...) are the model config's, as the connector reads them.

    Args:
        env: The env (its observation space holds one of the spaces above).
        model_config: rlblocks model config (preprocessor options).
    """

    def __init__(self, env: gym.Env, model_config: Mapping[str, Any] | None = None) -> None:
        super().__init__(env)
        options = ModelConfig.from_dict(model_config).to_dict()
        space = env.observation_space
        self._masked = is_mask_space(space)
        inner = inner_space(space, self._masked)
        self._prep = get_preprocessor(inner)(inner, options)
        box = Box(-np.inf, np.inf, self._prep.shape, np.float32)
        out = with_original_space(box, inner, self._prep.layout)
        self.observation_space = mask_dict(space, out) if self._masked else out

    def observation(self, observation: Any) -> Any:
        inner = observation[OBS_KEY] if self._masked else observation
        row = np.asarray(self._prep.transform(inner), np.float32)
        if self._masked:
            return {MASK_KEY: observation[MASK_KEY], OBS_KEY: row}
        return row
