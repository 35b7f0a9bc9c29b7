"""Defaults ``rlblocks train --env ID`` decides from the env's spaces (no tuned config, no
config file).

Continuous control (a flat float ``Box`` observation and a ``Box`` action space) trains PPO
with observation normalisation (``observation_filter=MeanStdFilter``) and reward scaling
(``normalize_reward=True``), as rl-baselines3-zoo's ``VecNormalize`` does for those envs; a
key the user sets (``--set``) is never changed. The choice is printed at the start and lands
in ``config.json`` with the rest of the config. A known hard-exploration env (MountainCar)
gets a one-line note naming the tuned config that solves it. A multi-agent env's train batch
and minibatch are counted in agent steps (:mod:`rlblocks.train.agent_batches`), also printed.

A turn-based game (a PettingZoo ``AECEnv``) whose every agent observes an ``action_mask``
and moves in a ``Discrete`` space, trained by one ``shared`` policy, gets
:data:`TURN_DEFAULTS`: an entropy bonus (``entropy_coeff``), which keeps self-play's own
moves varied, so that the greedy policy has also learnt the positions a weak opponent
leads to (measured in docs/multiagent.md, "Self-play": tictactoe's losses to a random
legal player fell from 10 to 1-3 of 500 at 100k steps).

Examples:
    >>> import gymnasium as gym
    >>> box = gym.spaces.Box(-1.0, 1.0, (3,))
    >>> continuous_control(box, box), continuous_control(box, gym.spaces.Discrete(2))
    (True, False)
    >>> hard_exploration_note("MountainCar-v0").split(";")[1]
    ' `rlblocks train --tuned mountaincar_dqn` does'
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = [
    "CONTROL_DEFAULTS",
    "TURN_DEFAULTS",
    "continuous_control",
    "goal_env_note",
    "hard_exploration_note",
    "multiagent_defaults",
    "space_defaults",
    "turn_based_defaults",
]

#: What continuous control gets when the user set neither key.
CONTROL_DEFAULTS: dict[str, Any] = {"observation_filter": "MeanStdFilter", "normalize_reward": True}

#: What a turn-based game with action masks gets when the user set neither key.
TURN_DEFAULTS: dict[str, Any] = {"entropy_coeff": 0.01}

#: Hard-exploration envs (id prefix) and the tuned config that solves each.
_HARD = {"MountainCar-": "mountaincar_dqn"}


def continuous_control(observation_space: gym.Space, action_space: gym.Space) -> bool:
    """Whether the spaces are continuous control's: a 1-D float ``Box`` observation and a
    ``Box`` action."""
    return (
        isinstance(observation_space, gym.spaces.Box)
        and len(observation_space.shape) == 1
        and np.issubdtype(observation_space.dtype, np.floating)
        and isinstance(action_space, gym.spaces.Box)
    )


def hard_exploration_note(env: str) -> str | None:
    """The start-of-run note for a known hard-exploration env (None for any other)."""
    for prefix, tuned in _HARD.items():
        if env.startswith(prefix) or env.partition(":")[2].startswith(prefix):
            return (
                f"{env} is a hard-exploration env: these defaults will not solve it (the "
                f"return stays -200); `rlblocks train --tuned {tuned}` does"
            )
    return None


def goal_env_note(env_id: str, observation_space: gym.Space, action_space: gym.Space) -> str:
    """The start-of-run note for native PPO on a goal env (a goal ``Dict`` observation):
    PPO does not relabel goals; the off-policy algorithm for its action space does.

    Examples:
        >>> goal_env_note("parking-v0", None, gym.spaces.Box(-1.0, 1.0, (2,)))[:58]
        'parking-v0 is a goal env: PPO does not relabel its goals; '
    """
    algo = "DQN" if isinstance(action_space, gym.spaces.Discrete) else "SAC"
    return (
        f"{env_id} is a goal env: PPO does not relabel its goals; `--algo {algo}` trains it "
        "with hindsight replay (her=auto turns it on; docs/goals.md)"
    )


def space_defaults(config: Any, given: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """For a native PPO ``config`` built from ``--env`` alone: the keys to add (the
    :data:`CONTROL_DEFAULTS` the user did not set, ``given``, when the env's spaces are
    continuous control; ``{}`` otherwise, and for a multi-agent env or one that fails to
    build, which the trainer then reports), and :func:`goal_env_note` for a goal env."""
    from rlblocks.her import is_goal_space
    from rlblocks.train.envs import make_env_creator

    try:
        env = make_env_creator(config)()
    except Exception:  # the trainer's own start names what is wrong with the env
        return {}, None
    try:
        obs_space, action_space = env.observation_space, env.action_space
    finally:
        env.close()
    goal = is_goal_space(obs_space)
    note = goal_env_note(str(config.env_name), obs_space, action_space) if goal else None
    if not continuous_control(obs_space, action_space):
        return {}, note
    return {k: v for k, v in CONTROL_DEFAULTS.items() if k not in given}, note


def multiagent_defaults(config: Any, given: dict[str, Any]) -> tuple[int, dict[str, int]] | None:
    """``(agents, keys to add)`` for native PPO on a multi-agent ``config``: the batch sizes
    counted in agent steps (:func:`~rlblocks.train.agent_batches.agent_batch_defaults`)
    that the user did not set (``given``); None for a single-agent env (or one that fails to
    build, which the trainer then reports). ``agents``: the env's ``possible_agents``, 1 for
    a turn-based game (one agent moves per env step)."""
    from rlblocks.multiagent.envs import is_multiagent_env
    from rlblocks.multiagent.turns import is_turn_based_env
    from rlblocks.train.agent_batches import agent_batch_defaults
    from rlblocks.train.envs import env_callable, raw_env_creator

    if isinstance(config.env, str) and env_callable(config.env) is None:
        return None  # a registered id: single-agent, nothing made
    try:
        env = raw_env_creator(config)()
    except Exception:  # the trainer's own start names what is wrong with the env
        return None
    try:
        if not is_multiagent_env(env):
            return None
        agents = 1 if is_turn_based_env(env) else len(getattr(env, "possible_agents", None) or [1])
    finally:
        close = getattr(env, "close", None)
        if close is not None:
            close()
    return agents, agent_batch_defaults(max(agents, 1), config.num_envs, given)


def turn_based_defaults(config: Any, given: dict[str, Any]) -> dict[str, Any]:
    """The :data:`TURN_DEFAULTS` the user did not set (``given``) when ``config``'s env is a
    turn-based game whose every agent observes an ``action_mask`` and has a ``Discrete``
    action space, and the mapping is ``shared``; ``{}`` otherwise (and for an env that fails
    to build, which the trainer then reports)."""
    from rlblocks.masks import MASK_KEY
    from rlblocks.multiagent.turns import is_turn_based_env
    from rlblocks.train.multiagent import multiagent_creator

    if config.multiagent.get("policy_mapping", "shared") != "shared":
        return {}
    try:
        env = multiagent_creator(config)()
    except Exception:  # the trainer's own start names what is wrong with the env
        return {}
    try:
        if not is_turn_based_env(env):
            return {}
        for agent in env.possible_agents:
            obs, act = env.observation_space(agent), env.action_space(agent)
            if not isinstance(act, gym.spaces.Discrete) or not (
                isinstance(obs, gym.spaces.Dict) and MASK_KEY in obs.spaces
            ):
                return {}
    finally:
        env.close()
    return {k: v for k, v in TURN_DEFAULTS.items() if k not in given}
