"""PPO training on gymnasium envs with rlblocks models, preprocessors and distributions.

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
    from rlblocks.multiagent.trainer import MultiAgentPPOTrainer
    from rlblocks.train.loop import Callback, StopTraining
    from rlblocks.train.ppo import PPOTrainer
    from rlblocks.train.restoring import restore_trainer
    from rlblocks.train.trainer_config import PPOConfig

__all__ = [
    "Callback",
    "MultiAgentPPOTrainer",
    "PPOConfig",
    "PPOTrainer",
    "StopTraining",
    "restore_trainer",
]

# Loaded on first use: the package's torch-free modules (trainer_config, envs, loop, logger) can be
# imported without torch (rlblocks.export's runtime relies on it).
_LAZY = {
    "PPOConfig": "rlblocks.train.trainer_config",
    "PPOTrainer": "rlblocks.train.ppo",
    "restore_trainer": "rlblocks.train.restoring",
    "MultiAgentPPOTrainer": "rlblocks.multiagent.trainer",
    "Callback": "rlblocks.train.loop",
    "StopTraining": "rlblocks.train.loop",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'rlblocks.train' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
