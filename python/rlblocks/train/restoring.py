"""Restoring whichever trainer wrote a checkpoint: PPO (single- or multi-agent), DQN, SAC,
TD3, DDPG.

Examples:
    >>> from rlblocks.train import restore_trainer  # doctest: +SKIP
    >>> trainer = restore_trainer("rlblocks_runs/PPO_CartPole-v1_20260101-000000")  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

from rlblocks.train.checkpoint import checkpoint_meta
from rlblocks.train.multiagent import MultiAgentPPOTrainer
from rlblocks.train.offpolicy import DDPGTrainer, DQNTrainer, SACTrainer, TD3Trainer
from rlblocks.train.ppo import PPOTrainer
from rlblocks.train.trainer import Trainer

__all__ = ["restore_trainer"]


def restore_trainer(path: str | Path, log: bool = True) -> Trainer:
    """The ``restore`` of the trainer that wrote the checkpoint (by the ``format`` in its
    ``meta.json``): :class:`PPOTrainer`, :class:`MultiAgentPPOTrainer`, :class:`DQNTrainer`
    :class:`SACTrainer`, :class:`TD3Trainer` or :class:`DDPGTrainer`.

    Raises:
        ValueError: No checkpoint there, or a corrupt one.
    """
    kind = checkpoint_meta(path).get("format")
    for trainer in (MultiAgentPPOTrainer, DQNTrainer, SACTrainer, TD3Trainer, DDPGTrainer):
        if kind == trainer.FORMAT:
            return trainer.restore(path, log=log)
    return PPOTrainer.restore(path, log=log)
