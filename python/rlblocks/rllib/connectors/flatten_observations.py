""":class:`FlattenObservationsBatched`: any nested observation -> the flat float32 row of
rlblocks' preprocessor, for the newest observation of all episodes in one C++ call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box

from rlblocks.config import ModelConfig
from rlblocks.preprocessors import NoPreprocessor, Preprocessor, get_preprocessor
from rlblocks.rllib.connectors.newest_observation import NewestObservationPiece
from rlblocks.rllib.connectors.observation_spaces import with_original_space

__all__ = ["FlattenObservationsBatched"]


class FlattenObservationsBatched(NewestObservationPiece):
    """Flattens the newest observation of all episodes in one C++ ``transform_batch`` call.

    Any nested observation the preprocessors read (Dict/Tuple/Discrete/MultiDiscrete,
    ``Repeated``, gymnasium ``Sequence`` / ``Graph`` / ``Text`` / ``OneOf``) becomes the flat
    float32 vector of rlblocks' preprocessor; the output Box carries ``original_space`` and
    the preprocessor's ``layout``, so that the models see the nested structure again, with
    the bounds that wrote the rows. A gymnasium ``Sequence`` holds at most the config's
    ``sequence_max_len`` items, zero-padded (a longer one is a ValueError naming the key, or
    cut with ``sequence_truncate``). The action-mask form
    ``Dict(action_mask=..., observations=...)`` keeps ``action_mask`` untouched and flattens
    ``observations`` only.

    Args:
        input_observation_space: The env's (single) observation space (set by the pipeline).
        input_action_space: The env's (single) action space.
        model_config: rlblocks model config (preprocessor options, e.g. ``grayscale``,
            ``sequence_max_len``, ``graph_max_nodes``).
        sequence_max_len: Overrides the config's ``sequence_max_len`` (None: keep it).
    """

    def __init__(
        self,
        input_observation_space: gym.Space | None = None,
        input_action_space: gym.Space | None = None,
        *,
        model_config: Mapping[str, Any] | None = None,
        sequence_max_len: int | None = None,
        **kwargs: Any,
    ) -> None:
        config = dict(model_config or {})
        if sequence_max_len is not None:
            config["sequence_max_len"] = sequence_max_len
        self._options = ModelConfig.from_dict(config).to_dict()
        self._prep: Preprocessor | None = None
        super().__init__(input_observation_space, input_action_space, **kwargs)

    @property
    def preprocessor(self) -> Preprocessor | None:
        """The rlblocks preprocessor in use (None until the input space is known)."""
        return self._prep

    def _inner_output_space(self, inner: gym.Space) -> gym.Space:
        prep = get_preprocessor(inner)(inner, self._options)
        self._prep = prep
        if isinstance(prep, NoPreprocessor):
            return inner
        box = Box(-np.inf, np.inf, prep.shape, np.float32)
        return with_original_space(box, inner, prep.layout)

    # A non-empty state on purpose: RLlib's pipeline pairs the merged states with its pieces
    # by position among the pieces that HAVE a state, so a stateless piece in front of
    # MeanStdFilterBatched would shift the filter's state onto the wrong piece.
    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        prep = self._prep
        return {
            "preprocessor": type(prep).__name__ if prep is not None else None,
            "shape": list(prep.shape) if prep is not None else None,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        mine = self.get_state()
        if state and mine["shape"] is not None and state.get("shape") not in (None, mine["shape"]):
            raise ValueError(
                f"FlattenObservationsBatched: state for output shape "
                f"{state.get('shape')}, this piece makes {mine['shape']}"
            )

    def merge_states(self, states: list[dict[str, Any]]) -> dict[str, Any]:
        return dict(states[0]) if states else {}

    def __call__(self, *, batch: dict[str, Any], episodes: list[Any], **kwargs: Any) -> Any:
        # RLlib passes rl_module, explore, shared_data, metrics...: unused here
        if self._prep is None or isinstance(self._prep, NoPreprocessor):
            return batch
        eps, last, inner = self._gather(episodes)
        if not eps:
            return batch
        self._write(eps, last, self._prep.transform_batch(inner))
        return batch
