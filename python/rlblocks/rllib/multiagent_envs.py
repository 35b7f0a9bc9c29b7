"""The RLlib env a multi-agent rlblocks config makes: a
:class:`~rlblocks.rllib.turn_env.TurnBasedMultiAgentEnv` for a turn-based PettingZoo
``AECEnv``, else a :class:`~rlblocks.rllib.multiagent_env.UnionMultiAgentEnv`, each mapped
as the config's ``multiagent`` block says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlblocks.multiagent.envs import is_multiagent_env
from rlblocks.multiagent.turns import is_turn_based_env
from rlblocks.rllib.multiagent_env import UnionMultiAgentEnv
from rlblocks.rllib.turn_env import TurnBasedMultiAgentEnv
from rlblocks.train.envs import raw_env_creator
from rlblocks.train.trainer_config import PPOConfig, TrainerConfig

__all__ = ["make_multiagent_env", "multiagent_env_creator", "union_multiagent_env"]


def make_multiagent_env(
    config: TrainerConfig | Mapping[str, Any], policy_mapping: Mapping[Any, Any] | None = None
) -> UnionMultiAgentEnv:
    """The :class:`UnionMultiAgentEnv` of an rlblocks config: its ``env`` made with its
    ``env_config`` (:func:`rlblocks.train.envs.raw_env_creator`: ``"module:callable"``
    called with the keys as keywords, a callable with the dict), mapped as its
    ``multiagent`` block says (``policy_mapping`` overrides the block's mapping with an
    explicit ``{agent_id: policy_id}``).

    Raises:
        ValueError: The env cannot be made, is not a multi-agent env, or cannot be mapped.
    """
    # multi-agent runs are PPO's (another config's keys are refused as unknown PPO keys)
    cfg = PPOConfig.from_dict(
        config if isinstance(config, PPOConfig | Mapping) else config.to_dict()
    )
    made = raw_env_creator(cfg)()
    if not is_multiagent_env(made):
        close = getattr(made, "close", None)
        if close is not None:
            close()
        raise ValueError(
            f"env {cfg.env_name!r} made a {type(made).__name__}, not a PettingZoo or RLlib "
            "multi-agent env"
        )
    block = cfg.multiagent
    return union_multiagent_env(
        made,
        block.get("policy_mapping", "shared") if policy_mapping is None else policy_mapping,
        bool(block.get("agent_id_one_hot", False)),
    )


def union_multiagent_env(
    env: Any, policy_mapping: str | Mapping[Any, Any] = "shared", agent_id_one_hot: bool = False
) -> UnionMultiAgentEnv:
    """The RLlib env of a made multi-agent ``env``: a
    :class:`~rlblocks.rllib.turn_env.TurnBasedMultiAgentEnv` for a turn-based PettingZoo
    ``AECEnv``, else a :class:`UnionMultiAgentEnv` (the same arguments)."""
    if is_turn_based_env(env):
        return TurnBasedMultiAgentEnv(env, policy_mapping, agent_id_one_hot)
    return UnionMultiAgentEnv(env, policy_mapping, agent_id_one_hot)


def multiagent_env_creator(
    config: Mapping[str, Any],
    policy_mapping: Mapping[Any, Any] | None = None,
    env_config: Mapping[str, Any] | None = None,
) -> UnionMultiAgentEnv:
    """RLlib's env-creator form of :func:`make_multiagent_env`, for
    ``register_env(name, functools.partial(multiagent_env_creator, config, mapping))``
    (RLlib's ``EnvContext``, passed as ``env_config``, is the config's ``env_config``)."""
    return make_multiagent_env(config, policy_mapping)
