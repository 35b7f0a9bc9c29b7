"""Hindsight experience replay for the off-policy trainers: the ``her`` config rows
resolved against the env, and the :class:`~rlblocks.her.HindsightSampler` they build.

``her="auto"`` (the default) turns relabelling on when the observation space is a goal Dict
(``observation``, ``achieved_goal``, ``desired_goal``) and a reward function exists: the
config's ``goal_reward`` (a callable or ``"module:function"``), else the unwrapped env's
``compute_reward`` (gymnasium-robotics' signature, called batched). ``her=True`` on any other
env is refused with one line, as are n-step returns and prioritized replay with HER (the
relabelled reward is one step's; relabelling samples uniformly). The choice is one line
(:attr:`HerChoice.note`, printed by ``rlblocks train``) and replaces ``"auto"`` in the
config (config.json holds True / False).

Examples:
    >>> import gymnasium as gym
    >>> from rlblocks.train.offpolicy_config import DQNConfig
    >>> env = gym.make("CartPole-v1")
    >>> choice = resolve_her(DQNConfig(env="CartPole-v1"), env.observation_space, lambda: env)
    >>> choice.on, choice.note
    (False, 'her: off (the observation is not a goal Dict)')
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from rlblocks.her import HindsightSampler, goal_columns, is_goal_space
from rlblocks.layout import Layout
from rlblocks.replay import ReplayBuffer

__all__ = [
    "HerChoice",
    "auto_relabels",
    "build_her",
    "goal_and_reward",
    "goal_reward_fn",
    "resolve_her",
]


@dataclass(frozen=True)
class HerChoice:
    """Whether a run relabels, why (one line), and its reward function."""

    on: bool
    note: str
    reward_fn: Any = None


def goal_reward_fn(config: Any, env: gym.Env) -> Any:
    """The batched goal reward: the config's ``goal_reward`` (imported when a string), else
    the unwrapped env's ``compute_reward``, else None.

    Raises:
        ValueError: A ``goal_reward`` string that does not import (one line).
    """
    spec = getattr(config, "goal_reward", None)
    if spec is None:
        fn = getattr(env.unwrapped, "compute_reward", None)
        return fn if callable(fn) else None
    if callable(spec):
        return spec
    module, _, name = str(spec).partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"goal_reward={spec!r}: cannot import it ({err})") from err
    if not callable(fn):
        raise ValueError(f"goal_reward={spec!r}: not a callable")
    return fn


def goal_and_reward(config: Any, space: gym.Space, env: Callable[[], gym.Env]) -> tuple[bool, Any]:
    """Whether ``space`` is a goal Dict, and its batched reward function
    (:func:`goal_reward_fn`; None: none, and for any other space, where ``env()`` is not
    asked for). ``her="auto"`` relabels exactly when both are there (:func:`auto_relabels`).

    Raises:
        ValueError: A ``goal_reward`` string that does not import (one line).
    """
    goal = is_goal_space(space)
    return goal, goal_reward_fn(config, env()) if goal else None


def auto_relabels(config: Any, space: gym.Space, env: Callable[[], gym.Env]) -> bool:
    """Whether ``her="auto"`` turns relabelling on for observation ``space``: a goal Dict and
    a reward function (:func:`goal_and_reward`). ``config`` needs only ``goal_reward``
    (absent: the env's ``compute_reward``).

    Examples:
        >>> from rlblocks.envs.zoo_goals import GoalBits
        >>> env = GoalBits()
        >>> auto_relabels(None, env.observation_space, lambda: env)
        True
    """
    goal, fn = goal_and_reward(config, space, env)
    return goal and fn is not None


def resolve_her(config: Any, space: gym.Space, env: Callable[[], gym.Env]) -> HerChoice:
    """Decides ``config.her`` for the run's observation ``space``; ``env()`` gives one of
    its envs (asked only for a goal Dict, for its ``compute_reward``; module docstring).

    Raises:
        ValueError: ``her=True`` without a goal Dict or a reward function; HER (asked for or
            chosen by ``auto``) with ``n_step > 1``, prioritized replay or frame stacking.
    """
    goal, fn = goal_and_reward(config, space, env)
    mode = config.her
    if mode is True and not goal:
        raise ValueError(
            f"her=True: env {config.env_name!r} does not observe a goal Dict (keys "
            "'observation', 'achieved_goal', 'desired_goal'); hindsight relabelling needs one "
            "(set her=false)"
        )
    if mode is True and fn is None:
        raise ValueError(
            f"her=True: env {config.env_name!r} has no compute_reward(achieved_goal, "
            "desired_goal, info); give goal_reward='module:function' or set her=false"
        )
    if mode is False:
        return HerChoice(False, "her: off (her=false)")
    if not goal:
        return HerChoice(False, "her: off (the observation is not a goal Dict)")
    if fn is None:
        return HerChoice(
            False, "her: off (the goal env has no compute_reward; give goal_reward to relabel)"
        )
    why = "her=true" if mode is True else "her=auto: a goal Dict with compute_reward"
    for bad, fix in (
        (config.n_step != 1, f"n_step={config.n_step} (a relabelled reward is one step's)"),
        (config.prioritized_replay, "prioritized_replay=True (relabelling samples uniformly)"),
    ):
        if bad:
            raise ValueError(
                f"{why}: hindsight relabelling is not supported with {fix}; change it or set "
                "her=false"
            )
    note = (
        f"her: on ({why}; strategy {config.her_strategy}, "
        f"n_sampled_goal {config.her_n_sampled_goal})"
    )
    return HerChoice(True, note, fn)


def build_her(
    config: Any, choice: HerChoice, lay: Layout, replay: ReplayBuffer
) -> HindsightSampler | None:
    """The sampler of a resolved choice (None when off); ``config.her`` becomes its bool.

    Raises:
        ValueError: Goals that cannot be relabelled (:func:`~rlblocks.her.goal_columns`),
            frame-stacked storage.
    """
    config.her = choice.on
    if not choice.on:
        return None
    return HindsightSampler(
        replay,
        goal_columns(lay),
        choice.reward_fn,
        config.her_strategy,
        config.her_n_sampled_goal,
    )
