"""Where a trainer writes: its run directory, opened under the writer lock
(:mod:`rlblocks.train.rundir`) with ``config.json`` and ``progress.csv``, reopened after a
restore (later checkpoints abandoned, ``progress.csv`` cut back) and released by
``close()``. :class:`RunDirectoryMixin` is a base of
:class:`~rlblocks.train.trainer.Trainer` (and so of every native trainer).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlblocks.train.checkpoint import (
    BEST,
    abandon_newer_checkpoints,
    load_checkpoint,
    recover_interrupted_saves,
)
from rlblocks.train.logger import ProgressLogger, truncate_progress
from rlblocks.train.rundir import RunDirLock, claim_run_dir, lock_run_dir

__all__ = ["BEST", "RunDirectoryMixin"]


class RunDirectoryMixin:
    """The run-directory methods of the native trainers (see the module docstring)."""

    config: Any
    iteration: int
    best_score: float
    run_dir: Path | None
    checkpoint_path: Path | None
    _logger: ProgressLogger | None
    _run_lock: RunDirLock | None
    #: What ``best/`` is scored by (the trainer's method; a best score of another kind is
    #: not compared).
    best_by: Callable[[], str]

    def _config_json(self) -> dict[str, Any]:
        """What ``config.json`` holds."""
        raise NotImplementedError

    def _open_run_dir(self, run_dir: Path) -> None:
        """Locks ``run_dir`` and opens it for this run: ``config.json``, the progress log."""
        self._lock_run_dir(run_dir)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            data = self._config_json()
            (run_dir / "config.json").write_text(json.dumps(data, indent=2, default=repr))
            self._logger = ProgressLogger(run_dir, tensorboard=self.config.tensorboard)
        except OSError as err:
            raise ValueError(
                f"cannot use {str(run_dir)!r} as the run directory: {err.strerror or err}"
            ) from err
        self.run_dir = run_dir

    def _claim_run_dir(self, run_dir: Path) -> None:
        """Locks the run directory of a new run, refusing one that holds a previous run or
        other files (:func:`~rlblocks.train.rundir.claim_run_dir`): a new run never mixes its
        ``progress.csv`` and checkpoints with an earlier one's."""
        hint = (
            f"continue it with {type(self).__name__}.restore({str(run_dir)!r}), or pass "
            "another run_dir (or delete that run)"
        )
        self._run_lock = claim_run_dir(run_dir, resume_hint=hint)

    def _lock_run_dir(self, run_dir: Path) -> None:
        """Holds ``run_dir``'s writer lock until :meth:`close` (:mod:`rlblocks.train.rundir`)."""
        if getattr(self, "_run_lock", None) is None:
            self._run_lock = lock_run_dir(run_dir)

    def _resume_logging(self, state: dict[str, Any], run_dir: str | Path | None, log: bool) -> None:
        """After a restore: the run directory to log into (its later checkpoints abandoned,
        ``progress.csv`` cut back) and the best score so far."""
        ckpt = Path(state["_path"])
        target = Path(run_dir) if run_dir is not None else ckpt.parent
        self.run_dir = None
        self.checkpoint_path = ckpt
        self._logger = None
        self._run_lock = None
        if log:
            self._lock_run_dir(target)
            recover_interrupted_saves(target)
            abandon_newer_checkpoints(target, self.iteration)  # one timeline per run
            truncate_progress(target, self.iteration)
            self._open_run_dir(target)
            if (target / BEST / "state.pt").is_file() and Path(ckpt) != target / BEST:
                try:  # best/ may have been saved after this checkpoint, with a higher score
                    saved = load_checkpoint(target / BEST)
                except ValueError:  # a corrupt best/ is replaced by the next best score
                    saved = {}
                if saved.get("best_by", self.best_by()) == self.best_by():
                    best = float(saved.get("best_score", -math.inf))
                    self.best_score = max(self.best_score, best)

    def _release_run_dir(self) -> None:
        """Drops the run directory's writer lock (the run's files stay)."""
        lock = getattr(self, "_run_lock", None)
        if lock is not None:
            lock.release()
            self._run_lock = None
