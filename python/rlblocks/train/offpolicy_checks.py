"""Off-policy settings that would run and never learn, refused with one line that names the
keys and a value that works: a replay buffer too small to ever hold a batch (also once the
env's frame stacks are known), one too large for the machine's memory, and a stop budget
that ends the run before its first gradient step or target update.

Examples:
    >>> replay_capacity_needed(train_batch_size=200, num_envs=1)
    201
    >>> replay_capacity_needed(train_batch_size=32, num_envs=1, frame_stack=4)
    36
    >>> run_budget(stop_timesteps=1500, stop_iters=None, timesteps_per_iteration=1000)
    (2000, 'stop_timesteps=1500, 2000 steps in whole iterations')
    >>> from rlblocks.train.offpolicy_config import DQNConfig
    >>> check_budget(DQNConfig(learning_starts=1000), 1, 500, "stop_timesteps=500")
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: learning_starts=1000 is at or beyond the stop budget (stop_timesteps=500): ...
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rlblocks.replay import ReplayBuffer

__all__ = [
    "check_budget",
    "check_replay_fits",
    "checked_replay_buffer",
    "no_learning_yet",
    "replay_capacity_needed",
    "run_budget",
]


def replay_capacity_needed(train_batch_size: int, num_envs: int, frame_stack: int = 0) -> int:
    """The smallest ``replay_capacity`` whose buffer can hold ``train_batch_size`` sampleable
    steps: each env keeps ``replay_capacity // num_envs`` steps, of which all but its newest
    (and, for stacks of k frames, all but the k newest) can be sampled in a long episode."""
    k = max(1, frame_stack)
    return num_envs * (k + -(-train_batch_size // num_envs))


def check_replay_fits(
    train_batch_size: int,
    replay_capacity: int,
    num_envs: int,
    frame_stack: int = 0,
    names: Mapping[str, str] | None = None,
) -> None:
    """Refuses a ``replay_capacity`` that can never hold ``train_batch_size`` sampleable steps
    (the run would never take a gradient step). ``names``: how the message names the keys
    where the user spelled them otherwise (RLlib's)."""
    names = names or {}
    batch_key = names.get("train_batch_size", "train_batch_size")
    capacity_key = names.get("replay_capacity", "replay_capacity")
    need = replay_capacity_needed(train_batch_size, num_envs, frame_stack)
    if replay_capacity >= need:
        return
    k = max(1, frame_stack)
    per_env = replay_capacity // num_envs
    stack = (
        f" and the observations are stacks of frame_stack={frame_stack} frames (each env's "
        f"{frame_stack} newest steps cannot be sampled yet)"
        if frame_stack > 1
        else " (each env's newest step cannot be sampled yet)"
    )
    most = max(0, num_envs * (per_env - k))
    raise ValueError(
        f"{batch_key}={train_batch_size} with {capacity_key}={replay_capacity}: the "
        f"buffer keeps {per_env} step{'' if per_env == 1 else 's'} per env for "
        f"num_envs={num_envs}{stack}, so at most "
        f"{most} steps are ever sampleable and the run would never learn; use "
        f"{capacity_key}={max(need, 2 * train_batch_size)} (at least {need})"
        + (f" or {batch_key}={most}" if most >= 1 else "")
    )


def run_budget(
    stop_timesteps: int | None,
    stop_iters: int | None,
    timesteps_per_iteration: int,
    timesteps_name: str | None = None,
) -> tuple[int, str] | None:
    """The env steps a fresh run with these stops takes at most (whole iterations of
    ``timesteps_per_iteration``) and how to name it in a message (``timesteps_name``: how
    to name ``stop_timesteps``, by default ``stop_timesteps=N``); None without a budget."""
    budgets = []
    if isinstance(stop_timesteps, int) and not isinstance(stop_timesteps, bool):
        iters = max(1, -(-stop_timesteps // timesteps_per_iteration))
        steps = iters * timesteps_per_iteration
        rounded = f", {steps} steps in whole iterations" if steps != stop_timesteps else ""
        name = timesteps_name or f"stop_timesteps={stop_timesteps}"
        budgets.append((steps, f"{name}{rounded}"))
    if isinstance(stop_iters, int) and not isinstance(stop_iters, bool):
        budgets.append(
            (
                stop_iters * timesteps_per_iteration,
                f"stop_iters={stop_iters} of timesteps_per_iteration={timesteps_per_iteration}",
            )
        )
    return min(budgets) if budgets else None


def check_budget(
    config: Any,
    num_envs: int,
    budget: int,
    budget_name: str,
    names: Mapping[str, str] | None = None,
) -> None:
    """Refuses a stop budget of ``budget`` env steps (``budget_name`` says where it came
    from, e.g. ``"--stop-timesteps 500"``) in which a run of the off-policy ``config``
    would take no gradient step (``learning_starts``, ``train_batch_size`` or
    ``train_freq`` at or beyond it) or never update its target networks
    (``target_network_update_freq`` beyond it). ``names``: how the message names the keys
    where the user spelled them otherwise (RLlib's)."""
    names = names or {}
    example = max(0, budget // 10)
    key = names.get("learning_starts", "learning_starts")
    if config.learning_starts >= budget:
        raise ValueError(
            f"{key}={config.learning_starts} is at or beyond the stop budget "
            f"({budget_name}): the run would end before its first gradient step; use "
            f"{key}={example} (below {budget}) or a larger budget"
        )
    # the buffer holds at most the steps taken so far, less each env's newest
    key = names.get("train_batch_size", "train_batch_size")
    if config.train_batch_size > budget - num_envs:
        raise ValueError(
            f"{key}={config.train_batch_size}: the replay buffer holds at most "
            f"{max(0, budget - num_envs)} sampleable steps within the stop budget "
            f"({budget_name}), so the run would never learn; use {key}="
            f"{max(1, min(32, budget // 4))} or a larger budget"
        )
    key = names.get("train_freq", "train_freq")
    if config.train_freq > budget:
        raise ValueError(
            f"{key}={config.train_freq} is beyond the stop budget ({budget_name}): the "
            f"run would end before its first round of gradient steps; use {key}="
            f"{max(1, min(4, budget))} or a larger budget"
        )
    key = names.get("target_network_update_freq", "target_network_update_freq")
    if config.target_network_update_freq > budget:
        raise ValueError(
            f"{key}={config.target_network_update_freq} is beyond the stop budget "
            f"({budget_name}): the target networks would never be updated; use "
            f"{key}={max(1, math.ceil(budget / 10))} or a larger budget"
        )


def no_learning_yet(config: Any, timesteps: int, sampleable: int) -> str:
    """The warning of a first iteration (of a run with no stop budget to check up front)
    that took no gradient step."""
    return (
        f"{config.ALGORITHM} {config.env_name}: iteration 1 ({timesteps} steps) took no "
        f"gradient step: updates start once learning_starts={config.learning_starts} steps "
        f"are taken and train_batch_size={config.train_batch_size} steps are sampleable "
        f"(now {sampleable}); lower learning_starts, or give fit() a stop_timesteps budget "
        "to have it checked up front"
    )


def checked_replay_buffer(
    replay_capacity: int,
    num_envs: int,
    obs_shape: tuple[int, ...],
    obs_dtype: Any,
    action_shape: tuple[int, ...],
    action_dtype: Any,
    train_batch_size: int,
    frame_stack: int,
    stack_axis: int,
    prioritized: bool,
    **kwargs: Any,
) -> ReplayBuffer:
    """The trainer's :class:`~rlblocks.replay.ReplayBuffer`, after refusing settings that
    would never fill a batch (:func:`check_replay_fits`, with the env's frame stacks); the
    buffer's own refusals (among them a buffer larger than the machine's memory, with the
    bytes of each part) name ``replay_capacity``, the config's key, and an allocation that
    fails is one line."""
    check_replay_fits(train_batch_size, replay_capacity, num_envs, frame_stack)
    try:
        return ReplayBuffer(
            replay_capacity,
            num_envs,
            obs_shape,
            obs_dtype,
            action_shape,
            action_dtype,
            frame_stack=frame_stack,
            stack_axis=stack_axis,
            prioritized=prioritized,
            **kwargs,
        )
    except MemoryError:
        raise ValueError(
            f"replay_capacity={replay_capacity}: the replay buffer could not be allocated (out "
            "of memory); use a smaller replay_capacity"
        ) from None
    except ValueError as err:
        text = str(err)
        if not text.startswith("capacity"):
            raise
        detail = text.removeprefix("capacity:").strip()
        detail = detail.replace("use capacity", "use replay_capacity")
        raise ValueError(f"replay_capacity={replay_capacity}: {detail}") from None
