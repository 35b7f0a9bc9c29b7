"""``export_policy``: write a trained policy as one ONNX or torch.export artifact + sidecar.

Examples:
    >>> from rlblocks.train import PPOConfig, PPOTrainer
    >>> trainer = PPOTrainer(PPOConfig(env="CartPole-v1", num_envs=1))
    >>> import tempfile, os
    >>> out = export_policy(trainer, os.path.join(tempfile.mkdtemp(), "p.pt2"), "torch-export")
    >>> out.name, sorted(p.name for p in out.parent.iterdir())
    ('p.pt2', ['p.pt2', 'p.pt2.json'])
    >>> trainer.close()
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from rlblocks.export import rllib_run
from rlblocks.export.sidecar import TURN_BASED_SIDECAR, multiagent_sidecar
from rlblocks.export.writer import FORMATS, write_policy

__all__ = ["FORMATS", "export_policies", "export_policy", "multiagent_sidecar", "rllib_run"]


def _refuse_rllib_run(source: Any, instead: str) -> None:
    """A ``--backend rllib`` run is exported by :mod:`rlblocks.rllib.export` (``rlblocks
    export`` picks it): a ValueError naming it."""
    if rllib_run(source):
        raise ValueError(
            f"export: {str(source)!r} was trained with --backend rllib; export it with "
            f"rlblocks.rllib.export.{instead} (the ray extra) or `rlblocks export`"
        )


def _trainer(source: Any) -> tuple[Any, bool]:
    """``(trainer, opened_here)`` for a trainer or a run / checkpoint directory."""
    if (hasattr(source, "policy") and hasattr(source, "preprocessor")) or hasattr(
        source, "policies"
    ):
        return source, False
    from rlblocks.train.restoring import restore_trainer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # envs not stored: irrelevant here
        return restore_trainer(source, log=False), True


def export_policy(source: Any, path: str | Path | None = None, fmt: str = "onnx") -> Path:
    """Exports a trained policy to ``path`` (and ``path + ".json"``, the sidecar).

    Args:
        source: A :class:`~rlblocks.train.PPOTrainer`, or a run / checkpoint directory
            (its newest checkpoint is restored). A ``--backend rllib`` run is refused:
            :func:`rlblocks.rllib.export.export_rllib_policy` exports it (``rlblocks
            export`` chooses between the two).
        path: The artifact's path; default ``RUN_DIR/policy.onnx`` (``policy.pt2`` for
            torch.export), or ``policy.onnx`` in the current directory for a trainer
            without a run directory.
        fmt: ``"onnx"`` or ``"torch-export"``.

    Returns:
        The artifact's path.

    Raises:
        ValueError: An unknown format, no checkpoint, a ``--backend rllib`` run, or a policy
            that cannot be traced.
        ImportError: ``fmt="onnx"`` without the ``export`` extra.
    """
    if fmt not in FORMATS:
        raise ValueError(f"export: unknown format {fmt!r}; choose one of {sorted(FORMATS)}")
    _refuse_rllib_run(source, "export_rllib_policy")
    trainer, opened = _trainer(source)
    if hasattr(trainer, "policies"):
        if opened:
            trainer.close()
        raise ValueError(
            "export: this is a multi-agent run; export_policies writes one artifact per "
            "policy (rlblocks export does it)"
        )
    try:
        return write_policy(trainer, path, fmt)
    finally:
        if opened:
            trainer.close()


class _PolicyOfRun:
    """One policy of a multi-agent trainer, seen as the single-agent trainer
    :func:`export_policy` exports (its union space is the artifact's observation)."""

    def __init__(self, trainer: Any, policy_id: str) -> None:
        parts = trainer.policies[policy_id]
        self.policy, self.preprocessor = parts.policy, parts.preprocessor
        self.obs_filter, self.config = parts.obs_filter, parts.config
        self.venv = trainer.hub.lanes(policy_id)
        self.run_dir, self.checkpoint_path = trainer.run_dir, trainer.checkpoint_path
        from rlblocks.multiagent.turns import TurnBasedVectorEnv

        entry = multiagent_sidecar(policy_id, trainer.hub.specs[policy_id])
        if isinstance(trainer.hub, TurnBasedVectorEnv):
            entry["turn_based"] = dict(TURN_BASED_SIDECAR)
        self.sidecar_extra = {"multiagent": entry}


def export_policies(
    source: Any, out_dir: str | Path | None = None, fmt: str = "onnx"
) -> dict[str, Path]:
    """Exports every policy of a multi-agent run as ``policy_<id>.onnx`` (or ``.pt2``) with
    its sidecar; its ``multiagent`` entry names the policy's agents and their own spaces
    (:class:`~rlblocks.multiagent.union.UnionSpec` rebuilt from them turns an agent's
    observation into the artifact's input). A single-agent run gives ``{"default": path}``.

    Args:
        source: A trainer, or a run / checkpoint directory (a ``--backend rllib`` run is
            refused: :func:`rlblocks.rllib.export.export_rllib_policies` exports it).
        out_dir: Where the artifacts go (default: the run directory).
        fmt: ``"onnx"`` or ``"torch-export"``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"export: unknown format {fmt!r}; choose one of {sorted(FORMATS)}")
    _refuse_rllib_run(source, "export_rllib_policies")
    trainer, opened = _trainer(source)
    try:
        if not hasattr(trainer, "policies"):
            target = None if out_dir is None else Path(out_dir) / f"policy{FORMATS[fmt]}"
            return {"default": export_policy(trainer, target, fmt)}
        base = Path(out_dir) if out_dir is not None else trainer.run_dir
        if base is None:
            base = trainer.checkpoint_path.parent if trainer.checkpoint_path else Path(".")
        out = {}
        for pid in trainer.policies:
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in pid)
            out[pid] = export_policy(
                _PolicyOfRun(trainer, pid), Path(base) / f"policy_{safe}{FORMATS[fmt]}", fmt
            )
        return out
    finally:
        if opened:
            trainer.close()
