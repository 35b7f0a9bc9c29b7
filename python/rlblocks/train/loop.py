"""The loop every trainer's ``fit`` runs: train until a return, step or iteration budget, with
a progress bar and periodic checkpoints (:class:`~rlblocks.train.trainer.Trainer`, and
``rlblocks.rllib``'s ``RLlibTrainer``); and the summary every ``evaluate`` returns. No torch.

Examples:
    >>> class Counter:
    ...     timesteps_total, iteration, last_metrics, checkpoint_path = 0, 0, {}, None
    ...     def train(self):
    ...         self.iteration += 1
    ...         self.timesteps_total += 10
    ...         return {"episode_return_mean": 5.0 * self.iteration, "steps_per_s": 1.0}
    >>> train_until(Counter(), "demo", stop_reward=20.0, progress=False)["episode_return_mean"]
    20.0
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from rlblocks.train.numbers import format_return

__all__ = [
    "Callback",
    "StopTraining",
    "Trainable",
    "episode_summary",
    "nearest_iteration",
    "should_stop",
    "train_until",
]


class StopTraining(Exception):  # noqa: N818 (a signal, not an error)
    """Raised by a callback (or anything ``train()`` calls) to end ``fit`` cleanly: the
    iteration's metrics are kept and the final checkpoint is written."""


class Callback:
    """Hooks ``fit(..., callbacks=[...])`` calls; subclass it or pass any object with some
    of these methods.

    ``on_iteration`` returning True stops the run after this iteration (as does raising
    :class:`StopTraining`, or calling ``trainer.stop()``).

    Examples:
        >>> class StopAt(Callback):
        ...     def on_iteration(self, trainer, result):
        ...         return trainer.iteration >= 2
        >>> class Counter:
        ...     timesteps_total, iteration, last_metrics, checkpoint_path = 0, 0, {}, None
        ...     def train(self):
        ...         self.iteration += 1
        ...         return {"episode_return_mean": 0.0, "steps_per_s": 1.0}
        >>> train_until(Counter(), "demo", stop_iters=10, progress=False, callbacks=[StopAt()])
        {'episode_return_mean': 0.0, 'steps_per_s': 1.0}
    """

    def on_iteration(self, trainer: Any, result: dict[str, Any]) -> bool | None:
        """After each iteration (its metrics in ``result``); True stops the run."""
        return None

    def on_checkpoint(self, trainer: Any, path: Path) -> None:
        """After each checkpoint ``fit`` writes (``path``: its directory)."""
        return None


class Trainable(Protocol):
    """What :func:`train_until` needs of a trainer."""

    timesteps_total: int
    iteration: int
    last_metrics: dict[str, Any]
    checkpoint_path: Path | None

    def train(self) -> dict[str, Any]: ...


def should_stop(
    trainer: Trainable,
    metrics: dict[str, Any],
    stop_reward: float | None,
    stop_timesteps: int | None,
    stop_iters: int | None,
) -> bool:
    """Whether a budget is spent or the mean return (NaN before the first episode) reached
    ``stop_reward``."""
    if stop_timesteps is not None and trainer.timesteps_total >= stop_timesteps:
        return True
    if stop_iters is not None and trainer.iteration >= stop_iters:
        return True
    try:
        ret = float(metrics.get("episode_return_mean", math.nan))
    except (TypeError, ValueError):
        ret = math.nan
    return stop_reward is not None and not math.isnan(ret) and ret >= stop_reward


def nearest_iteration(steps: int, budget: int, iteration_steps: int) -> bool:
    """Whether a trainer that runs whole iterations of about ``iteration_steps`` steps
    (RLlib's) is nearest its step ``budget`` now: the budget is reached, or is less than
    half an iteration away (one more would end farther past it).

    Examples:
        >>> nearest_iteration(4096, 5000, 2048), nearest_iteration(4096, 5200, 2048)
        (True, False)
    """
    return steps >= budget or 2 * (budget - steps) < iteration_steps


def train_until(
    trainer: Trainable,
    desc: str,
    stop_reward: float | None = None,
    stop_timesteps: int | None = None,
    stop_iters: int | None = None,
    progress: bool = True,
    save: Any = None,
    checkpoint_freq: int = 0,
    callbacks: Sequence[Any] = (),
    after_iteration: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Calls ``trainer.train()`` until :func:`should_stop`; with ``save`` (a callable), every
    ``checkpoint_freq`` iterations and at the end unless the last iteration was just saved.

    After each iteration ``after_iteration(metrics)`` runs (the trainer's own bookkeeping),
    then each callback's ``on_iteration(trainer, metrics)``; a True return, a
    :class:`StopTraining` or ``trainer.stop_requested`` ends the loop. Each checkpoint
    written calls ``on_checkpoint(trainer, path)``.

    Returns:
        The last iteration's metrics.

    Raises:
        ValueError: No stopping criterion given.
    """
    if stop_reward is None and stop_timesteps is None and stop_iters is None:
        raise ValueError(
            "fit needs a stopping criterion: stop_reward, stop_timesteps or stop_iters"
        )
    callbacks = list(callbacks)

    def checkpoint() -> None:
        path = save()
        for cb in callbacks:
            hook = getattr(cb, "on_checkpoint", None)
            if hook is not None:
                hook(trainer, path)

    def stop_requested(metrics: dict[str, Any]) -> bool:
        stop = bool(getattr(trainer, "stop_requested", False))
        if after_iteration is not None:
            after_iteration(metrics)
        for cb in callbacks:
            hook = getattr(cb, "on_iteration", None)
            if hook is not None and hook(trainer, metrics) is True:
                stop = True
        return stop or bool(getattr(trainer, "stop_requested", False))

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=stop_timesteps,
            initial=trainer.timesteps_total,
            unit="step",
            dynamic_ncols=True,
            desc=desc,
        )
    metrics = trainer.last_metrics
    try:
        while not should_stop(trainer, metrics, stop_reward, stop_timesteps, stop_iters):
            before = trainer.timesteps_total
            try:
                metrics = trainer.train()
            except StopTraining:
                break
            if bar is not None:
                bar.update(trainer.timesteps_total - before)
                bar.set_postfix(
                    ret=format_return(metrics["episode_return_mean"]),
                    sps=f"{metrics['steps_per_s']:.0f}",
                    refresh=False,
                )
            if save is not None and checkpoint_freq and trainer.iteration % checkpoint_freq == 0:
                checkpoint()
            try:
                if stop_requested(metrics):
                    break
            except StopTraining:
                break
    finally:
        if bar is not None:
            bar.close()
    path = trainer.checkpoint_path
    if save is not None and (path is None or path.name != f"checkpoint_{trainer.iteration:06d}"):
        checkpoint()
    return metrics


def episode_summary(returns: list[float], lengths: list[int]) -> dict[str, Any]:
    """What ``evaluate`` returns for finished episodes (at least one).

    Examples:
        >>> episode_summary([10.0, 20.0], [5, 7])["episode_return_mean"]
        15.0
    """
    arr = [float(r) for r in returns]
    mean = sum(arr) / len(arr)
    return {
        "episodes": len(arr),
        "episode_return_mean": mean,
        "episode_return_std": math.sqrt(sum((r - mean) ** 2 for r in arr) / len(arr)),
        "episode_return_min": min(arr),
        "episode_return_max": max(arr),
        "episode_len_mean": sum(lengths) / len(lengths),
        "episode_returns": list(returns),
    }
