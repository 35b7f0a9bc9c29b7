"""The base of the pieces that process the newest observation of every episode in one call.

A subclass gives the output space of the (inner) observation space; the base handles
RLlib's action-mask form ``Dict(action_mask=..., observations=...)`` around it (the mask
passes through, the piece sees ``observations`` only), gathers the newest observations of
the episodes and writes the processed rows back.
"""

from __future__ import annotations

import abc
from typing import Any

import gymnasium as gym
import numpy as np

from rlblocks.rllib._ray import ConnectorV2
from rlblocks.rllib.connectors.observation_spaces import inner_space, mask_dict
from rlblocks.rllib.module import MASK_KEY, OBS_KEY, is_mask_space

__all__ = ["NewestObservationPiece"]


class NewestObservationPiece(ConnectorV2):  # type: ignore[misc]
    """Shared space handling, gather and write-back of the newest observation of every
    episode (the action mask, if any, kept as it is)."""

    _masked = False

    @abc.abstractmethod
    def _inner_output_space(self, inner: gym.Space) -> gym.Space:
        """The piece's output space for the input (inner) observation space ``inner``."""

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        if input_observation_space is None:
            return None
        self._masked = is_mask_space(input_observation_space)
        out = self._inner_output_space(inner_space(input_observation_space, self._masked))
        return mask_dict(input_observation_space, out) if self._masked else out

    def _gather(self, episodes: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
        """The episodes that stepped, their newest observations, and those observations'
        inner part (``observations`` of the action-mask form)."""
        eps = list(self.single_agent_episode_iterator(episodes, agents_that_stepped_only=True))
        last = [ep.get_observations(-1) for ep in eps]
        return eps, last, [o[OBS_KEY] for o in last] if self._masked else last

    def _write(self, eps: list[Any], last: list[Any], rows: np.ndarray) -> None:
        space = self.observation_space
        for i, ep in enumerate(eps):
            new = {MASK_KEY: last[i][MASK_KEY], OBS_KEY: rows[i]} if self._masked else rows[i]
            ep.set_observations(at_indices=-1, new_data=new)
            ep.observation_space = space
