"""Env-to-module ConnectorV2 pieces backed by rlblocks' C++ core, batched over episodes, one
piece per module.

RLlib calls an env runner's env-to-module pipeline once per step with every episode of the
runner. Each piece here gathers the newest observation of all those episodes, processes
them in ONE batched call (RLlib's own ``FlattenObservations`` and ``MeanStdFilter`` work
one observation at a time in Python), and writes the rows back into the episodes, where
RLlib's default pieces pick them up.

* :class:`FlattenObservationsBatched` (``flatten_observations``): any nested observation ->
  the flat float32 row of rlblocks' preprocessor (gymnasium ``Sequence``, ``Graph``,
  ``Text`` and ``OneOf`` included). :class:`FlatRepeatedObservations`
  (``flat_repeated_observations``) does the same on the env side, for the spaces RLlib's
  env runner cannot unbatch (:func:`needs_env_side_flattening`: ``Repeated``, ``Sequence``,
  ``Graph``, ``Text``, ``OneOf``).
* :class:`MeanStdFilterBatched` (``mean_std_filter``): rlblocks'
  :class:`~rlblocks.filters.MeanStdFilter` on the flat observations, whose state merges
  across env runners exactly.
* :class:`ModelViewObservations` (``model_view_observations``): the past observations,
  actions and rewards the model's view requirements read.
* :class:`AtariFramesBatched` (``atari_frames``): the DeepMind frame pipeline.
* :func:`env_to_module` (``pipeline``): the pieces of a run, for
  ``config.env_runners(env_to_module_connector=...)``.
* :class:`MultiAgentFlattenObservations` and its factory :class:`MultiAgentEnvToModule`
  (``multiagent_observations``): the flattening of a multi-agent run, one C++ call per
  policy over all agents of all episodes.

The observation-space helpers the pieces share are in ``observation_spaces``.
"""

from __future__ import annotations

from rlblocks.rllib.connectors.atari_frames import AtariFramesBatched
from rlblocks.rllib.connectors.flat_repeated_observations import FlatRepeatedObservations
from rlblocks.rllib.connectors.flatten_observations import FlattenObservationsBatched
from rlblocks.rllib.connectors.mean_std_filter import MeanStdFilterBatched
from rlblocks.rllib.connectors.model_view_observations import ModelViewObservations
from rlblocks.rllib.connectors.multiagent_observations import (
    MultiAgentEnvToModule,
    MultiAgentFlattenObservations,
)
from rlblocks.rllib.connectors.observation_spaces import (
    has_repeated,
    needs_env_side_flattening,
)
from rlblocks.rllib.connectors.pipeline import FILTERS, EnvToModule, env_to_module

__all__ = [
    "FILTERS",
    "AtariFramesBatched",
    "EnvToModule",
    "FlatRepeatedObservations",
    "FlattenObservationsBatched",
    "MeanStdFilterBatched",
    "ModelViewObservations",
    "MultiAgentEnvToModule",
    "MultiAgentFlattenObservations",
    "env_to_module",
    "has_repeated",
    "needs_env_side_flattening",
]
