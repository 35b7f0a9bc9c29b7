"""Environments bundled for the examples, tests and benchmarks (gymnasium API).

Importing this package registers the gymnasium ids below, so ``gymnasium.make`` works:

* ``rlblocks/StatelessCartPole-v0`` — :class:`StatelessCartPole` (velocities hidden).
* ``rlblocks/RepeatAfterMe-v0`` — :class:`RepeatAfterMe` (echo an earlier observation).
* ``rlblocks/ParametricCartPole-v0`` — :class:`ParametricCartPole` (masked, embedded actions).
* ``rlblocks/CorrelatedActions-v0`` — :class:`CorrelatedActionsEnv` (autoregressive actions).
* ``rlblocks/DictCartPole-v0`` — :class:`DictCartPole` (a nested Dict observation).

Keyword arguments of ``gymnasium.make`` go to the class's constructor.

Examples:
    >>> import gymnasium as gym
    >>> import rlblocks.envs
    >>> gym.make("rlblocks/StatelessCartPole-v0").observation_space.shape
    (2,)
"""

from __future__ import annotations

import gymnasium as gym

from rlblocks.envs.correlated_actions import CorrelatedActionsEnv, correlated_reward
from rlblocks.envs.dict_cartpole import DictCartPole
from rlblocks.envs.parametric_cartpole import ParametricCartPole
from rlblocks.envs.repeat_after_me import RepeatAfterMe
from rlblocks.envs.stateless_cartpole import StatelessCartPole

__all__ = [
    "ENV_IDS",
    "CorrelatedActionsEnv",
    "DictCartPole",
    "ParametricCartPole",
    "RepeatAfterMe",
    "StatelessCartPole",
    "correlated_reward",
]

#: gymnasium id -> entry point. The classes truncate episodes themselves.
ENV_IDS: dict[str, str] = {
    "rlblocks/StatelessCartPole-v0": "rlblocks.envs.stateless_cartpole:StatelessCartPole",
    "rlblocks/RepeatAfterMe-v0": "rlblocks.envs.repeat_after_me:RepeatAfterMe",
    "rlblocks/ParametricCartPole-v0": "rlblocks.envs.parametric_cartpole:ParametricCartPole",
    "rlblocks/CorrelatedActions-v0": "rlblocks.envs.correlated_actions:CorrelatedActionsEnv",
    "rlblocks/DictCartPole-v0": "rlblocks.envs.dict_cartpole:DictCartPole",
}


def _register() -> None:
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point)


_register()
