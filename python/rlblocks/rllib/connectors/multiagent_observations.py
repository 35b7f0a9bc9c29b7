""":class:`MultiAgentFlattenObservations`: the multi-agent form of
:class:`~rlblocks.rllib.connectors.FlattenObservationsBatched`, flattening the newest
observation of every agent of every episode with ONE C++ ``transform_batch`` call per policy.

RLlib's multi-agent env-to-module pipeline sees observation spaces keyed by agent id (its
``AgentToModuleMapping`` piece, which runs after the user's pieces, regroups them by module
and requires all agents of a module to have equal spaces: wrap the env in
:class:`~rlblocks.rllib.multiagent_env.UnionMultiAgentEnv` so they do). RLlib's own
``FlattenObservations(multi_agent=True)`` flattens one observation at a time in Python; this
piece groups the agents by policy (the agents of a policy share one preprocessor), gathers
their newest observations across all episodes and writes the rows back into the agents'
episodes. :class:`MultiAgentEnvToModule` is the connector factory of a multi-agent run.

Examples:
    >>> import numpy as np
    >>> from gymnasium.spaces import Box, Dict, Discrete
    >>> spaces = Dict({"a_0": Dict({"x": Discrete(3), "y": Box(-1, 1, (2,))}),
    ...                "a_1": Dict({"x": Discrete(3), "y": Box(-1, 1, (2,))})})
    >>> piece = MultiAgentFlattenObservations(spaces, policy_mapping={"a_0": "p", "a_1": "p"})
    >>> piece.observation_space["a_1"].shape
    (5,)
    >>> piece.groups
    {'p': ['a_0', 'a_1']}
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box

from rlblocks.config import ModelConfig
from rlblocks.preprocessors import NoPreprocessor, Preprocessor, get_preprocessor
from rlblocks.rllib._ray import ConnectorV2
from rlblocks.rllib.connectors.observation_spaces import (
    inner_space,
    mask_dict,
    with_original_space,
)
from rlblocks.rllib.module import MASK_KEY, OBS_KEY, is_mask_space

__all__ = ["MultiAgentEnvToModule", "MultiAgentFlattenObservations"]


class MultiAgentFlattenObservations(ConnectorV2):  # type: ignore[misc]
    """Flattens every agent's newest observation, one batched C++ call per policy.

    Each agent's observation becomes the flat float32 row of rlblocks' preprocessor for its
    policy's model config (``Dict(action_mask=..., observations=...)`` keeps the mask and
    flattens ``observations``), in a Box that carries ``original_space`` and the
    preprocessor's ``layout`` (the model sees the nested structure again). Agents whose
    space needs no preprocessing (a flat Box) pass through.

    Args:
        input_observation_space: ``Dict`` of the agents' observation spaces (set by the
            pipeline).
        input_action_space: ``Dict`` of the agents' action spaces (set by the pipeline).
        model_config: rlblocks model config (preprocessor options) of every policy without
            an entry in ``policy_model_configs``.
        policy_mapping: ``{agent_id: policy_id}``; None: each agent is its own group
            (agents with equal spaces still share one call).
        policy_model_configs: ``{policy_id: model config}`` per-policy overrides.

    Raises:
        ValueError: An invalid model config, or agents of one policy whose spaces differ
            (named, with the remedy).
    """

    def __init__(
        self,
        input_observation_space: gym.Space | None = None,
        input_action_space: gym.Space | None = None,
        *,
        model_config: Mapping[str, Any] | None = None,
        policy_mapping: Mapping[Any, Any] | None = None,
        policy_model_configs: Mapping[Any, Mapping[str, Any] | None] | None = None,
        **kwargs: Any,
    ) -> None:
        self._default = ModelConfig.from_dict(dict(model_config or {})).to_dict()
        self._configs = {
            p: ModelConfig.from_dict(dict(c or {})).to_dict()
            for p, c in (policy_model_configs or {}).items()
        }
        self._mapping = dict(policy_mapping) if policy_mapping is not None else None
        #: ``{group: (preprocessor, masked)}``; a group is a policy (or a space's index).
        self._preps: dict[Any, tuple[Preprocessor, bool]] = {}
        self._group_of: dict[Any, Any] = {}
        self._out: dict[Any, gym.Space] = {}
        super().__init__(input_observation_space, input_action_space, **kwargs)

    @property
    def groups(self) -> dict[Any, list[Any]]:
        """``{group: [agent ids]}``: the agents flattened together in one call."""
        out: dict[Any, list[Any]] = defaultdict(list)
        for agent, group in self._group_of.items():
            out[group].append(agent)
        return dict(out)

    def preprocessor(self, agent: Any) -> Preprocessor | None:
        """The preprocessor of ``agent``'s policy (None until the spaces are known)."""
        group = self._group_of.get(agent)
        return None if group is None else self._preps[group][0]

    def _group(self, agent: Any, space: gym.Space, seen: list[tuple[Any, gym.Space]]) -> Any:
        if self._mapping is not None:
            if agent not in self._mapping:
                raise ValueError(
                    f"MultiAgentFlattenObservations: agent {agent!r} has no policy in "
                    f"policy_mapping {self._mapping}"
                )
            return self._mapping[agent]
        for group, other in seen:
            if other == space:
                return group
        seen.append((agent, space))
        return agent

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        if input_observation_space is None:
            return None
        if not isinstance(input_observation_space, gym.spaces.Dict):
            raise ValueError(
                f"MultiAgentFlattenObservations: the pipeline's observation space must be a "
                f"Dict keyed by agent id, got {input_observation_space}"
            )
        self._preps, self._group_of, self._out = {}, {}, {}
        first: dict[Any, tuple[Any, gym.Space]] = {}
        seen: list[tuple[Any, gym.Space]] = []
        for agent, space in input_observation_space.spaces.items():
            group = self._group(agent, space, seen)
            self._group_of[agent] = group
            if group in first:
                other, other_space = first[group]
                if other_space != space:
                    raise ValueError(
                        f"MultiAgentFlattenObservations: agents {other!r} and {agent!r} of "
                        f"policy {group!r} observe different spaces ({other_space} vs "
                        f"{space}); wrap the env in "
                        f"rlblocks.rllib.multiagent_env.UnionMultiAgentEnv (the union space "
                        f"of a policy's agents) or map them to different policies"
                    )
                self._out[agent] = self._out[other]
                continue
            first[group] = (agent, space)
            masked = is_mask_space(space)
            inner = inner_space(space, masked)
            options = self._configs.get(group, self._default)
            prep = get_preprocessor(inner)(inner, options)
            self._preps[group] = (prep, masked)
            if isinstance(prep, NoPreprocessor):
                self._out[agent] = space
                continue
            box = with_original_space(
                Box(-np.inf, np.inf, prep.shape, np.float32), inner, prep.layout
            )
            self._out[agent] = mask_dict(space, box) if masked else box
        return gym.spaces.Dict(self._out)

    # A non-empty state on purpose (see FlattenObservationsBatched.get_state).
    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        return {
            "shapes": {
                str(group): list(prep.shape)
                for group, (prep, _) in sorted(self._preps.items(), key=lambda kv: str(kv[0]))
            }
        }

    def set_state(self, state: dict[str, Any]) -> None:
        mine = self.get_state()["shapes"]
        theirs = (state or {}).get("shapes") or {}
        for group, shape in theirs.items():
            if group in mine and mine[group] != shape:
                raise ValueError(
                    f"MultiAgentFlattenObservations: state for policy {group!r} has output "
                    f"shape {shape}, this piece makes {mine[group]}"
                )

    def merge_states(self, states: list[dict[str, Any]]) -> dict[str, Any]:
        return dict(states[0]) if states else {}

    def transform(self, observations: Mapping[Any, Any]) -> dict[Any, Any]:
        """``{agent_id: observation}`` -> ``{agent_id: flattened observation}``, one C++
        call per policy (what the piece writes into the episodes; for evaluation loops).

        Raises:
            ValueError: An agent that is not in the pipeline's observation space.
        """
        out = dict(observations)
        by_group: dict[Any, list[Any]] = defaultdict(list)
        for agent in observations:
            by_group[self._group_for(agent)].append(agent)
        for group, agents in by_group.items():
            if not isinstance(self._preps[group][0], NoPreprocessor):
                flat = self._flatten(group, [observations[a] for a in agents])
                out.update(zip(agents, flat, strict=True))
        return out

    def _flatten(self, group: Any, values: list[Any]) -> list[Any]:
        """The flattened form of ``values`` (observations of ``group``'s agents), one call."""
        prep, masked = self._preps[group]
        rows = prep.transform_batch([v[OBS_KEY] for v in values] if masked else values)
        if not masked:
            return list(rows)
        return [{MASK_KEY: v[MASK_KEY], OBS_KEY: r} for v, r in zip(values, rows, strict=True)]

    def _group_for(self, agent: Any) -> Any:
        group = self._group_of.get(agent)
        if group is None:
            raise ValueError(
                f"MultiAgentFlattenObservations: agent {agent!r} is not in the env's "
                f"observation spaces {sorted(map(str, self._group_of))}"
            )
        return group

    def __call__(self, *, batch: dict[str, Any], episodes: list[Any], **kwargs: Any) -> Any:
        # RLlib passes rl_module, explore, shared_data, metrics...: unused here
        by_group: dict[Any, list[Any]] = defaultdict(list)
        for ep in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=True):
            group = self._group_for(ep.agent_id)
            if not isinstance(self._preps[group][0], NoPreprocessor):
                by_group[group].append(ep)
        for group, eps in by_group.items():  # one call per policy: all its agents' episodes
            flat = self._flatten(group, [ep.get_observations(-1) for ep in eps])
            for ep, new in zip(eps, flat, strict=True):
                ep.set_observations(at_indices=-1, new_data=new)
                ep.observation_space = self._out[ep.agent_id]
        return batch


class MultiAgentEnvToModule:
    """The multi-agent env-to-module connector factory, the value for
    ``config.env_runners(env_to_module_connector=...)`` in a multi-agent config: called by
    RLlib as ``(env, spaces, device)``, it returns ``[MultiAgentFlattenObservations(...)]``
    (picklable, so it travels to env runners); RLlib's default pieces (agent-to-module
    mapping, batching) follow it.

    Args:
        model_config: rlblocks model config of every policy without an override.
        policy_mapping: ``{agent_id: policy_id}`` (None: agents grouped by space).
        policy_model_configs: ``{policy_id: model config}`` per-policy overrides.
        observation_filter: ``"NoFilter"`` only (the multi-agent pipeline has no
            per-policy mean/std filter).

    Raises:
        ValueError: An invalid model config, a filter, or a model that reads past
            observations, actions or rewards (single-agent ``env_to_module`` only).

    Examples:
        >>> factory = MultiAgentEnvToModule({"fcnet_hiddens": [64]}, {"a_0": "shared"})
        >>> [type(piece).__name__ for piece in factory()]
        ['MultiAgentFlattenObservations']
    """

    def __init__(
        self,
        model_config: Mapping[str, Any] | None = None,
        policy_mapping: Mapping[Any, Any] | None = None,
        policy_model_configs: Mapping[Any, Mapping[str, Any] | None] | None = None,
        observation_filter: str = "NoFilter",
    ) -> None:
        if observation_filter != "NoFilter":
            raise ValueError(
                f"observation_filter={observation_filter!r}: multi-agent runs on RLlib take "
                "'NoFilter' only (normalise observations in the env)"
            )
        self.model_config = ModelConfig.from_dict(dict(model_config or {})).to_dict()
        self.policy_mapping = dict(policy_mapping) if policy_mapping is not None else None
        self.policy_model_configs = {
            p: ModelConfig.from_dict(dict(c or {})).to_dict()
            for p, c in (policy_model_configs or {}).items()
        }
        for policy, cfg in [(None, self.model_config), *self.policy_model_configs.items()]:
            reads = [
                key
                for key in ("lstm_use_prev_action", "lstm_use_prev_reward")
                if cfg["use_lstm"] and cfg[key]
            ] + [
                key
                for key in ("attention_use_n_prev_actions", "attention_use_n_prev_rewards")
                if cfg["use_attention"] and cfg[key]
            ]
            if reads:
                where = "model" if policy is None else f"policy {policy!r}'s model"
                raise ValueError(
                    f"{where} sets {reads}: multi-agent runs on RLlib do not feed past "
                    "actions or rewards to the model; unset them"
                )

    def __call__(self, env: Any = None, spaces: Any = None, device: Any = None) -> list[Any]:
        return [
            MultiAgentFlattenObservations(
                model_config=self.model_config,
                policy_mapping=self.policy_mapping,
                policy_model_configs=self.policy_model_configs,
            )
        ]
