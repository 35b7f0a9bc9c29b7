"""Training on gymnasium and multi-agent envs with rlblocks models, preprocessors and
distributions: PPO (:class:`PPOTrainer`, :class:`MultiAgentPPOTrainer`), DQN
(:class:`DQNTrainer`), SAC (:class:`SACTrainer`), TD3 (:class:`TD3Trainer`) and DDPG
(:class:`DDPGTrainer`) on the C++ replay buffer.

Examples:
    >>> from rlblocks.train import PPOConfig, PPOTrainer
    >>> cfg = PPOConfig.from_dict({"env": "CartPole-v1", "num_envs": 4})
    >>> cfg.rollout_fragment_length
    512
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlblocks.train.loop import Callback, StopTraining
    from rlblocks.train.multiagent import MultiAgentPPOTrainer
    from rlblocks.train.offpolicy import DDPGTrainer, DQNTrainer, SACTrainer, TD3Trainer
    from rlblocks.train.offpolicy_config import DDPGConfig, DQNConfig, SACConfig, TD3Config
    from rlblocks.train.ppo import PPOTrainer
    from rlblocks.train.restoring import restore_trainer
    from rlblocks.train.trainer_config import PPOConfig

__all__ = [
    "Callback",
    "DDPGConfig",
    "DDPGTrainer",
    "DQNConfig",
    "DQNTrainer",
    "MultiAgentPPOTrainer",
    "PPOConfig",
    "PPOTrainer",
    "SACConfig",
    "SACTrainer",
    "StopTraining",
    "TD3Config",
    "TD3Trainer",
    "restore_trainer",
]

# Loaded on first use: the package's torch-free modules (trainer_config, envs, loop, logger) can be
# imported without torch (rlblocks.export's runtime relies on it).
_LAZY = {
    "PPOConfig": "rlblocks.train.trainer_config",
    "PPOTrainer": "rlblocks.train.ppo",
    "restore_trainer": "rlblocks.train.restoring",
    "MultiAgentPPOTrainer": "rlblocks.train.multiagent",
    "DQNConfig": "rlblocks.train.offpolicy_config",
    "SACConfig": "rlblocks.train.offpolicy_config",
    "DQNTrainer": "rlblocks.train.offpolicy",
    "SACTrainer": "rlblocks.train.offpolicy",
    "TD3Config": "rlblocks.train.offpolicy_config",
    "DDPGConfig": "rlblocks.train.offpolicy_config",
    "TD3Trainer": "rlblocks.train.offpolicy",
    "DDPGTrainer": "rlblocks.train.offpolicy",
    "Callback": "rlblocks.train.loop",
    "StopTraining": "rlblocks.train.loop",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'rlblocks.train' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
