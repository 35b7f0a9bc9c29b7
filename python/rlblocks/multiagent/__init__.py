"""Multi-agent envs: PettingZoo / RLlib multi-agent envs, policy mapping, union layouts.

* :class:`~rlblocks.multiagent.union.UnionSpec`: one observation and one action space for
  agents whose spaces differ, so that one shared model serves them all;
* :func:`~rlblocks.multiagent.mapping.resolve_mapping`: ``shared``, ``per_agent``,
  ``by_space`` or your own ``module:function``;
* :class:`~rlblocks.multiagent.envs.MultiAgentVectorEnv`: many env copies, every agent in a
  lane of its policy; :func:`~rlblocks.multiagent.envs.as_parallel_env` adapts RLlib envs
  and parallel envs seen through ``parallel_to_aec``;
* :class:`~rlblocks.multiagent.turns.TurnBasedVectorEnv`: turn-based PettingZoo AEC games,
  stepped turn by turn (only the agent to move acts);
* the env side only: the trainer that drives them is
  :class:`~rlblocks.train.multiagent.MultiAgentPPOTrainer` (``rlblocks.train``, a tier
  above), PPO with one model per policy; ``rlblocks train`` picks it for a multi-agent env.

PettingZoo itself is the ``multiagent`` extra (``pip install "rlblocks[multiagent]"``); nothing
here imports it until an env of it is handed over.

Examples:
    >>> from gymnasium.spaces import Box, Discrete
    >>> from rlblocks.multiagent import UnionSpec
    >>> UnionSpec.build({"a": Box(-1, 1, (2,))}, {"a": Discrete(3)}).action_space
    Discrete(3)
"""

from __future__ import annotations

from rlblocks.multiagent.envs import (
    MultiAgentVectorEnv,
    RLlibParallelEnv,
    as_parallel_env,
    is_multiagent_env,
)
from rlblocks.multiagent.mapping import SHARED, agent_role, resolve_mapping
from rlblocks.multiagent.union import UnionSpec, unify_actions

__all__ = [
    "SHARED",
    "MultiAgentVectorEnv",
    "RLlibParallelEnv",
    "UnionSpec",
    "agent_role",
    "as_parallel_env",
    "is_multiagent_env",
    "resolve_mapping",
    "unify_actions",
]
