"""The run directory of ``rlblocks train --backend rllib`` and its checkpoints.

A run directory holds ``config.json`` (the rlblocks config plus a ``backend`` block; the
config of the run's algorithm, :func:`run_config`),
``progress.csv`` and ``checkpoint_NNNNNN/`` directories: RLlib's checkpoint plus
:data:`META_FILE` (the trainer's counters) and :data:`FILTER_FILE` (the observation
filter's state).

Examples:
    >>> is_rllib_run("no/such/run")
    False
"""

from __future__ import annotations

import json
import logging
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FILTER_FILE",
    "META_FILE",
    "MODULE_DIR",
    "RunCheckpoint",
    "checkpoints",
    "is_rllib_run",
    "run_config",
    "load_module",
    "newest_checkpoint",
]

#: The trainer's counters and backend settings, in each checkpoint.
META_FILE = "rlblocks_rllib.json"
#: The pickled state of the observation filter piece (None without a filter).
FILTER_FILE = "rlblocks_filter.pkl"
#: Where RLlib keeps the module inside a checkpoint.
MODULE_DIR = Path("learner_group") / "learner" / "rl_module" / "default_policy"


def is_rllib_run(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` (or the run of a checkpoint in it) was made by this backend."""
    path = Path(run_dir)
    for candidate in (path, path.parent):
        cfg = candidate / "config.json"
        if cfg.is_file():
            try:
                return json.loads(cfg.read_text()).get("backend", {}).get("name") == "rllib"
            except (ValueError, AttributeError):
                return False
    return False


def checkpoints(run_dir: Path) -> list[Path]:
    """The run's checkpoint directories, oldest first."""
    return sorted(p for p in run_dir.glob("checkpoint_*") if (p / META_FILE).is_file())


@dataclass(frozen=True)
class RunCheckpoint:
    """A checkpoint with its run's config.

    Attributes:
        path: The checkpoint directory (its parent is the run directory).
        config: The run's rlblocks config (``config.json`` without ``backend``).
        backend: The run's ``backend`` block (``algo``, runner counts).
    """

    path: Path
    config: dict[str, Any]
    backend: dict[str, Any]

    @property
    def trainer_config(self) -> Any:
        """The run's config as its algorithm's config class (:func:`run_config`)."""
        return run_config(self.config, self.backend["algo"])

    @property
    def meta(self) -> dict[str, Any]:
        """The trainer's counters saved with the checkpoint."""
        return dict(json.loads((self.path / META_FILE).read_text()))

    @property
    def filter_state(self) -> Any:
        """The observation filter's saved state (None without a filter)."""
        return pickle.loads((self.path / FILTER_FILE).read_bytes())

    @property
    def module_dir(self) -> Path:
        """The directory of the checkpoint's RLlib module."""
        return self.path / MODULE_DIR


def run_config(data: dict[str, Any], algo: str) -> Any:
    """The config of a run of ``algo`` from its ``config.json`` (without ``backend``): a
    :class:`~rlblocks.train.offpolicy_config.DQNConfig` / ``SACConfig`` for DQN / SAC, a
    :class:`~rlblocks.train.trainer_config.PPOConfig` for the others, and for DQN / SAC runs
    written before they took their own config on this backend (PPO keys, their settings in
    the ``rllib`` block: a ``config.json`` without ``replay_capacity``).

    Examples:
        >>> type(run_config({"env": "CartPole-v1", "replay_capacity": 500}, "DQN")).__name__
        'DQNConfig'
        >>> type(run_config({"env": "CartPole-v1", "num_sgd_iter": 30}, "DQN")).__name__
        'PPOConfig'
    """
    from rlblocks.train.offpolicy_config import DQNConfig, SACConfig
    from rlblocks.train.trainer_config import PPOConfig

    own: Any = {"DQN": DQNConfig, "SAC": SACConfig}.get(algo)
    if own is not None and "replay_capacity" in data:
        return own.from_dict(data)
    return PPOConfig.from_dict(data)


def newest_checkpoint(path: str | Path) -> RunCheckpoint:
    """The checkpoint ``path`` names, or the newest one of the run ``path`` names.

    Raises:
        ValueError: No checkpoint there, or not a run of this backend.
    """
    path = Path(path)
    if (path / META_FILE).is_file():
        ckpt = path
    else:
        found = checkpoints(path)
        if not found:
            raise ValueError(f"no RLlib-backend checkpoint in {str(path)!r}")
        ckpt = found[-1]
    run = ckpt.parent
    if not is_rllib_run(run):
        raise ValueError(f"{str(run)!r} is not a run of `rlblocks train --backend rllib`")
    config = json.loads((run / "config.json").read_text())
    backend = config.pop("backend")
    return RunCheckpoint(ckpt, config, backend)


class _NoRLModuleConfigNotice(logging.Filter):
    """Drops RLlib's ``RLModule(config=...)`` deprecation notice: RLlib's ``RLModule.__init__``
    logs it for every module it builds, though rlblocks' modules are built with the keyword
    arguments RLlib asks for (``observation_space=``, ``action_space=``, ``model_config=``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "RLModule(config=" not in record.getMessage()


@contextmanager
def _quiet_module_config() -> Iterator[None]:
    quiet = _NoRLModuleConfigNotice()
    log = logging.getLogger("ray._common.deprecation")  # where RLlib's notice is logged
    log.addFilter(quiet)
    try:
        yield
    finally:
        log.removeFilter(quiet)


def load_module(module_dir: str | Path) -> Any:
    """The RLlib module saved in ``module_dir`` (e.g. :attr:`RunCheckpoint.module_dir`),
    built in this process from its class and keyword arguments (no Ray cluster).

    Raises:
        ValueError: No module there.
    """
    from rlblocks.rllib._ray import RLModule

    path = Path(module_dir)
    if not (path / "class_and_ctor_args.pkl").is_file():
        raise ValueError(f"no RLlib module in {str(path)!r}")
    with _quiet_module_config():
        return RLModule.from_checkpoint(str(path.resolve()))
