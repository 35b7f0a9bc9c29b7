"""Environments bundled for the examples, tests and benchmarks (gymnasium API).

Importing this package registers the gymnasium ids below, so ``gymnasium.make`` works:

* ``rlblocks/StatelessCartPole-v0`` — :class:`StatelessCartPole` (velocities hidden).
* ``rlblocks/RepeatAfterMe-v0`` — :class:`RepeatAfterMe` (echo an earlier observation).
* ``rlblocks/ParametricCartPole-v0`` — :class:`ParametricCartPole` (masked, embedded actions).
* ``rlblocks/CorrelatedActions-v0`` — :class:`CorrelatedActionsEnv` (autoregressive actions).
* ``rlblocks/DictCartPole-v0`` — :class:`DictCartPole` (a nested Dict observation).
* ``rlblocks/MaskedBandit-v0`` — :class:`~rlblocks.envs.masked_bandit.MaskedBanditEnv`
  (RLlib's ``Dict(action_mask, observations)`` convention, a new mask every step).
* ``rlblocks/zoo-Goal-v0`` / ``rlblocks/zoo-GoalBox-v0`` —
  :class:`~rlblocks.envs.zoo_goals.GoalBits` (goal-conditioned bit flipping with a sparse
  reward, Discrete / Box actions: hindsight experience replay, docs/goals.md).
* ``rlblocks/zoo-<Name>-v0`` — the zoo of small learning tasks (:mod:`rlblocks.envs.zoo`),
  one per feature; :data:`ZOO` lists each id with its model settings, step budget, random
  return and pass threshold.

Keyword arguments of ``gymnasium.make`` go to the class's constructor.

Examples:
    >>> import gymnasium as gym
    >>> import rlblocks.envs
    >>> gym.make("rlblocks/StatelessCartPole-v0").observation_space.shape
    (2,)
    >>> rlblocks.envs.ZOO["rlblocks/zoo-RecallLSTM-v0"].model
    {'use_lstm': True}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from rlblocks.envs.correlated_actions import CorrelatedActionsEnv, correlated_reward
from rlblocks.envs.dict_cartpole import DictCartPole
from rlblocks.envs.parametric_cartpole import ParametricCartPole
from rlblocks.envs.repeat_after_me import RepeatAfterMe
from rlblocks.envs.stateless_cartpole import StatelessCartPole

__all__ = [
    "ENV_IDS",
    "ZOO",
    "CorrelatedActionsEnv",
    "DictCartPole",
    "ParametricCartPole",
    "RepeatAfterMe",
    "StatelessCartPole",
    "ZooEntry",
    "correlated_reward",
]

#: gymnasium id -> entry point. The classes truncate episodes themselves.
ENV_IDS: dict[str, str] = {
    "rlblocks/StatelessCartPole-v0": "rlblocks.envs.stateless_cartpole:StatelessCartPole",
    "rlblocks/RepeatAfterMe-v0": "rlblocks.envs.repeat_after_me:RepeatAfterMe",
    "rlblocks/ParametricCartPole-v0": "rlblocks.envs.parametric_cartpole:ParametricCartPole",
    "rlblocks/CorrelatedActions-v0": "rlblocks.envs.correlated_actions:CorrelatedActionsEnv",
    "rlblocks/DictCartPole-v0": "rlblocks.envs.dict_cartpole:DictCartPole",
    "rlblocks/MaskedBandit-v0": "rlblocks.envs.masked_bandit:MaskedBanditEnv",
    "rlblocks/zoo-Goal-v0": "rlblocks.envs.zoo_goals:GoalBits",
    "rlblocks/zoo-GoalBox-v0": "rlblocks.envs.zoo_goals:GoalBits",
}
#: Constructor keyword arguments of the ids above that have some.
ENV_KWARGS: dict[str, dict[str, Any]] = {"rlblocks/zoo-GoalBox-v0": {"action": "box"}}


@dataclass(frozen=True)
class ZooEntry:
    """One task of the zoo (:mod:`rlblocks.envs.zoo`) as the learning tests train it.

    ``threshold`` is also the id's gymnasium ``reward_threshold``, so ``rlblocks train``
    stops there by itself.
    """

    entry_point: str
    """``module:Class`` of the env."""
    kwargs: dict[str, Any]
    """Constructor keyword arguments."""
    model: dict[str, Any] = field(default_factory=dict)
    """Model config keys the task needs on top of the trainer's defaults (memory)."""
    budget: int = 100_000
    """Environment steps within which PPO with the CLI's defaults passes ``threshold``."""
    random_return: float = 0.0
    """Expected episode return of uniformly random actions."""
    threshold: float = 0.0
    """Mean episode return that counts as learnt (clearly above ``random_return``)."""
    first_return: float | None = None
    """A floor for the FIRST iteration's mean return, or None: masked tasks score it from
    the start when the masks are honoured (``random_return`` is then that of a uniform pick
    among the legal actions; ignoring the masks scores far below it)."""


_ZOO_MODULES = {
    "MaskedBanditEnv": "masked_bandit",
    "ActionBandit": "zoo_actions",
    "Recall": "zoo_memory",
    "SequenceBandit": "zoo_structures",
    "GraphBandit": "zoo_structures",
    "TextBandit": "zoo_structures",
    "OneOfBandit": "zoo_structures",
}  # every other zoo class: zoo_observations


def _zoo(
    cls: str,
    kwargs: dict[str, Any],
    random_return: float,
    threshold: float,
    budget: int,
    model: dict[str, Any] | None = None,
    first_return: float | None = None,
) -> ZooEntry:
    module = _ZOO_MODULES.get(cls, "zoo_observations")
    return ZooEntry(
        f"rlblocks.envs.{module}:{cls}",
        kwargs,
        dict(model or {}),
        budget,
        random_return,
        threshold,
        first_return,
    )


#: The zoo: gymnasium id -> :class:`ZooEntry`. Episodes are 16 steps; rewards are 1 for a
#: right answer (a fraction for partly right multi-part or continuous actions). Where the
#: answer combines several parts of the observation (MultiDiscrete, Dict, Tuple: random
#: 16/9), an agent that ignores one part scores at most 16/3, below the threshold.
ZOO: dict[str, ZooEntry] = {
    # observations (the answer is a function of the current observation; Discrete actions)
    "rlblocks/zoo-BoxRank1-v0": _zoo("BoxBandit", {"shape": (4,)}, 8.0, 12.0, 40_000),
    "rlblocks/zoo-BoxRank1Float64-v0": _zoo(
        "BoxBandit", {"shape": (4,), "dtype": "float64"}, 8.0, 12.0, 40_000
    ),
    "rlblocks/zoo-BoxRank2-v0": _zoo("BoxBandit", {"shape": (3, 4)}, 8.0, 12.0, 40_000),
    "rlblocks/zoo-BoxRank2Float64-v0": _zoo(
        "BoxBandit", {"shape": (3, 4), "dtype": "float64"}, 8.0, 12.0, 40_000
    ),
    "rlblocks/zoo-BoxRank3-v0": _zoo("BoxBandit", {"shape": (10, 10, 2)}, 8.0, 12.0, 50_000),
    "rlblocks/zoo-BoxRank3Float64-v0": _zoo(
        "BoxBandit", {"shape": (10, 10, 2), "dtype": "float64"}, 8.0, 12.0, 50_000
    ),
    "rlblocks/zoo-Image-v0": _zoo("ImageBandit", {"shape": (10, 10, 3)}, 8.0, 12.0, 40_000),
    "rlblocks/zoo-Grid-v0": _zoo("GridBandit", {"size": 7}, 16 / 3, 10.0, 50_000),
    "rlblocks/zoo-Discrete-v0": _zoo("DiscreteBandit", {"n": 5}, 3.2, 10.0, 40_000),
    "rlblocks/zoo-MultiDiscrete-v0": _zoo(
        "MultiDiscreteBandit", {"n": 3, "k": 2}, 16 / 9, 9.0, 50_000
    ),
    "rlblocks/zoo-Dict-v0": _zoo("NestedBandit", {"kind": "dict"}, 16 / 9, 8.5, 60_000),
    "rlblocks/zoo-Tuple-v0": _zoo("NestedBandit", {"kind": "tuple"}, 16 / 9, 8.5, 60_000),
    "rlblocks/zoo-RepeatedCount-v0": _zoo(
        "RepeatedBandit", {"target": "count", "max_len": 4}, 3.2, 10.0, 60_000
    ),
    # the answer is in the LAST item: the list's order matters, which the default
    # (order-blind) entity encoder cannot see; RLlib's flat FC over the padded list can
    "rlblocks/zoo-RepeatedLast-v0": _zoo(
        "RepeatedBandit",
        {"target": "last", "max_len": 4},
        16 / 3,
        10.0,
        50_000,
        model={"entity_encoder": {"type": "flatten"}},
    ),
    # structured observations (no fixed shape: sequences, graphs, strings, unions)
    "rlblocks/zoo-Sequence-v0": _zoo("SequenceBandit", {"max_len": 6}, 8.0, 12.0, 40_000),
    "rlblocks/zoo-Graph-v0": _zoo(
        "GraphBandit", {"min_nodes": 3, "max_nodes": 8}, 8.0, 12.0, 40_000
    ),
    "rlblocks/zoo-Text-v0": _zoo("TextBandit", {"max_length": 8}, 4.0, 12.0, 40_000),
    "rlblocks/zoo-OneOf-v0": _zoo("OneOfBandit", {}, 16 / 3, 10.0, 40_000),
    # action masks (random_return: a uniform pick among the legal actions)
    "rlblocks/zoo-MaskedDiscrete-v0": _zoo(
        "MaskedBanditEnv",
        {"action": "discrete", "n": 4, "episode_len": 16},
        7.5,
        11.0,
        40_000,
        first_return=6.0,
    ),
    "rlblocks/zoo-MaskedMultiDiscrete-v0": _zoo(
        "MaskedBanditEnv",
        {"action": "multidiscrete", "n": 4, "episode_len": 16},
        7.5,
        10.5,
        50_000,
        first_return=6.0,
    ),
    # actions
    "rlblocks/zoo-MultiDiscreteAction-v0": _zoo(
        "ActionBandit", {"action": "multidiscrete"}, 16 / 3, 10.0, 60_000
    ),
    "rlblocks/zoo-BoxAction-v0": _zoo("ActionBandit", {"action": "box"}, 20 / 3, 10.0, 60_000),
    "rlblocks/zoo-TupleAction-v0": _zoo("ActionBandit", {"action": "tuple"}, 6.0, 9.5, 60_000),
    "rlblocks/zoo-DictAction-v0": _zoo("ActionBandit", {"action": "dict"}, 20 / 3, 11.0, 50_000),
    # memory
    "rlblocks/zoo-RecallLSTM-v0": _zoo(
        "Recall", {"delay": 2, "n": 2}, 7.0, 11.0, 50_000, {"use_lstm": True}
    ),
    "rlblocks/zoo-RecallAttention-v0": _zoo(
        "Recall", {"delay": 2, "n": 2}, 7.0, 10.0, 50_000, {"use_attention": True}
    ),
}


def _register() -> None:
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, kwargs=ENV_KWARGS.get(env_id, {}))
    for env_id, entry in ZOO.items():
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point=entry.entry_point,
                kwargs=dict(entry.kwargs),
                reward_threshold=entry.threshold,
            )


_register()
