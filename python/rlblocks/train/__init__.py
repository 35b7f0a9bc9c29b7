"""PPO training on gymnasium envs with rlblocks models, preprocessors and distributions.

Examples:
    >>> from rlblocks.train import PPOConfig, PPOTrainer
    >>> cfg = PPOConfig.from_dict({"env": "CartPole-v1", "num_envs": 4})
    >>> cfg.rollout_fragment_length
    512
"""

from __future__ import annotations

from rlblocks.train.config import PPOConfig
from rlblocks.train.ppo import PPOTrainer

__all__ = ["PPOConfig", "PPOTrainer"]
