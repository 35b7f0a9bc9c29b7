"""Restoring whichever trainer wrote a checkpoint: single-agent or multi-agent PPO.

Examples:
    >>> from rlblocks.train import restore_trainer  # doctest: +SKIP
    >>> trainer = restore_trainer("rlblocks_runs/PPO_CartPole-v1_20260101-000000")  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

from rlblocks.multiagent.trainer import FORMAT, MultiAgentPPOTrainer
from rlblocks.train.checkpoint import checkpoint_meta
from rlblocks.train.ppo import PPOTrainer

__all__ = ["restore_trainer"]


def restore_trainer(path: str | Path, log: bool = True) -> PPOTrainer:
    """:meth:`PPOTrainer.restore`, or :meth:`MultiAgentPPOTrainer.restore` for a multi-agent
    checkpoint (by the ``format`` in its ``meta.json``).

    Raises:
        ValueError: No checkpoint there, or a corrupt one.
    """
    if checkpoint_meta(path).get("format") == FORMAT:
        return MultiAgentPPOTrainer.restore(path, log=log)
    return PPOTrainer.restore(path, log=log)
