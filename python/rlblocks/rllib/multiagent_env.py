"""A PettingZoo env as an RLlib ``MultiAgentEnv`` in which every agent mapped to one policy has
that policy's spaces, so that ONE RLlib module serves agents whose own spaces differ.

RLlib's agent-to-module mapping raises a ValueError when agents of one module have different
spaces. :class:`UnionMultiAgentEnv` builds a :class:`~rlblocks.multiagent.union.UnionSpec` per
policy over the policy's agents (the policy mapping comes from
:func:`~rlblocks.multiagent.mapping.resolve_mapping`): each agent observes
``UnionSpec.value(agent, obs)`` (its own observation in its block of the union space, with an
action mask when the agents' action sets differ) and its unified action is turned back into
its own with ``UnionSpec.agent_action``. Agents with equal spaces see their own values
unchanged. The env-to-module connector
(:class:`~rlblocks.rllib.connectors.MultiAgentFlattenObservations`) then flattens the union
values of all agents of all episodes in one C++ call per module.

Examples:
    A tiny env of two kinds of agent (each policy's union is in ``env.unions``):

    >>> import numpy as np
    >>> from gymnasium.spaces import Box, Discrete
    >>> from pettingzoo import ParallelEnv
    >>> class Two(ParallelEnv):
    ...     metadata = {"name": "two"}
    ...     possible_agents = ["scout_0", "pilot_0"]
    ...     def observation_space(self, agent):
    ...         return Box(-1, 1, (3,)) if agent.startswith("scout") else Discrete(4)
    ...     def action_space(self, agent):
    ...         return Discrete(3 if agent.startswith("scout") else 5)
    ...     def reset(self, seed=None, options=None):
    ...         self.agents = list(self.possible_agents)
    ...         return {"scout_0": np.zeros(3, np.float32), "pilot_0": 1}, {}
    ...     def step(self, actions):
    ...         obs, infos = self.reset()
    ...         self.agents = []
    ...         done = {a: True for a in self.possible_agents}
    ...         return obs, {a: 1.0 for a in obs}, done, done, infos
    >>> env = UnionMultiAgentEnv(Two())
    >>> env.policy_mapping, env.action_spaces["pilot_0"]
    ({'scout_0': 'shared', 'pilot_0': 'shared'}, Discrete(5))
    >>> obs, _ = env.reset(seed=0)
    >>> obs["scout_0"]["action_mask"].tolist()
    [1.0, 1.0, 1.0, 0.0, 0.0]
    >>> env.step({"scout_0": 2, "pilot_0": 4})[2]["__all__"]
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from rlblocks.multiagent.envs import as_parallel_env
from rlblocks.multiagent.mapping import resolve_mapping
from rlblocks.multiagent.union import UnionSpec
from rlblocks.rllib._ray import MultiAgentEnv

__all__ = ["UnionMultiAgentEnv"]


class UnionMultiAgentEnv(MultiAgentEnv):  # type: ignore[misc]
    """A PettingZoo ``ParallelEnv`` (an AEC env or RLlib ``MultiAgentEnv`` is converted with
    :func:`~rlblocks.multiagent.envs.as_parallel_env`) as an RLlib ``MultiAgentEnv`` whose
    agents observe their policy's union space (module docstring).

    Args:
        env: The PettingZoo env.
        policy_mapping: ``"shared"``, ``"per_agent"``, ``"by_space"``, ``"module:function"``
            (:func:`~rlblocks.multiagent.mapping.resolve_mapping`) or an explicit
            ``{agent_id: policy_id}`` covering ``possible_agents``.
        agent_id_one_hot: Add the agent's index among its policy's agents (a
            ``Discrete(n_agents)`` one-hot) to the union observations.

    Attributes:
        par_env: The PettingZoo parallel env.
        policy_mapping: ``{agent_id: policy_id}``.
        unions: ``{policy_id: UnionSpec}`` over the policy's agents.

    Raises:
        ValueError: A bad mapping, or a policy whose agents' action spaces cannot be unified
            (the agents are named).
    """

    def __init__(
        self,
        env: Any,
        policy_mapping: str | Mapping[Any, Any] = "shared",
        agent_id_one_hot: bool = False,
    ) -> None:
        super().__init__()
        self.par_env = as_parallel_env(env)
        self._map(self.par_env, policy_mapping, agent_id_one_hot)

    def _map(
        self, env: Any, policy_mapping: str | Mapping[Any, Any], agent_id_one_hot: bool
    ) -> None:
        """The mapping, unions and spaces of ``env``'s agents (a PettingZoo env)."""
        agents = list(env.possible_agents)
        obs_spaces = {a: env.observation_space(a) for a in agents}
        act_spaces = {a: env.action_space(a) for a in agents}
        if isinstance(policy_mapping, str):
            mapping = dict(resolve_mapping(agents, obs_spaces, act_spaces, policy_mapping))
        else:
            mapping = dict(policy_mapping)
            missing = [a for a in agents if a not in mapping]
            if missing:
                raise ValueError(
                    f"policy_mapping: agents {missing} are not mapped to a policy "
                    f"(possible agents: {agents})"
                )
        self.policy_mapping: dict[Any, Any] = mapping
        self.unions: dict[Any, UnionSpec] = {}
        for policy in dict.fromkeys(mapping[a] for a in agents):
            members = [a for a in agents if mapping[a] == policy]
            try:
                self.unions[policy] = UnionSpec.build(
                    {a: obs_spaces[a] for a in members},
                    {a: act_spaces[a] for a in members},
                    agent_id_one_hot=agent_id_one_hot,
                )
            except ValueError as err:
                raise ValueError(f"policy {policy!r}: {err}") from None
        self.possible_agents = agents
        self.agents: list[Any] = []
        self.observation_spaces = {a: self.unions[mapping[a]].observation_space for a in agents}
        self.action_spaces = {a: self.unions[mapping[a]].action_space for a in agents}
        self.observation_space = gym.spaces.Dict(self.observation_spaces)
        self.action_space = gym.spaces.Dict(self.action_spaces)
        self.metadata = dict(getattr(env, "metadata", {}) or {})
        self.render_mode = getattr(env, "render_mode", None)

    def _union_obs(self, obs: Mapping[Any, Any]) -> dict[Any, Any]:
        return {a: self.unions[self.policy_mapping[a]].value(a, o) for a, o in obs.items()}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[Any, Any], dict[Any, Any]]:
        """Resets the PettingZoo env; the agents' union observations and their infos."""
        obs, infos = self.par_env.reset(seed=seed, options=options)
        self.agents = list(self.par_env.agents)
        return self._union_obs(obs), {a: i for a, i in (infos or {}).items() if a in obs}

    def step(
        self, action_dict: Mapping[Any, Any]
    ) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
        """Steps with each agent's unified action turned into its own
        (``UnionSpec.agent_action``); ``"__all__"`` is set once no agent is left."""
        actions = {
            a: self.unions[self.policy_mapping[a]].agent_action(a, act)
            for a, act in action_dict.items()
        }
        obs, rewards, terminated, truncated, infos = self.par_env.step(actions)
        self.agents = list(self.par_env.agents)
        terminated = dict(terminated)
        truncated = dict(truncated)
        over = not self.agents
        # a truncated episode bootstraps: only when some agent was cut, not terminated
        cut = any(bool(v) and not terminated.get(a, False) for a, v in truncated.items())
        terminated["__all__"] = over and not cut
        truncated["__all__"] = over and cut
        infos = {a: i for a, i in (infos or {}).items() if a in obs}
        return self._union_obs(obs), dict(rewards), terminated, truncated, infos

    def render(self) -> Any:
        """The PettingZoo env's render."""
        return self.par_env.render()

    def close(self) -> None:
        """Closes the PettingZoo env."""
        self.par_env.close()
