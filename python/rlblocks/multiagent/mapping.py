"""Which policy acts for which agent (a config's ``multiagent.policy_mapping``).

* ``"shared"`` (the default): one policy, ``"shared"``, for every agent, even when their
  spaces differ (:class:`~rlblocks.multiagent.union.UnionSpec` lays them out together);
* ``"per_agent"``: one policy per agent, named after it;
* ``"by_space"``: one policy per set of agents with equal observation *and* action spaces,
  named after the agents' common role (the id without a trailing ``_<digits>``);
* ``"module:function"``: ``function(agent_id)`` names the policy (called once per agent).

Examples:
    >>> from gymnasium.spaces import Box, Discrete
    >>> obs = {"adversary_0": Box(-1, 1, (8,)), "agent_0": Box(-1, 1, (10,)),
    ...        "agent_1": Box(-1, 1, (10,))}
    >>> act = dict.fromkeys(obs, Discrete(5))
    >>> resolve_mapping(list(obs), obs, act, "by_space")
    {'adversary_0': 'adversary', 'agent_0': 'agent', 'agent_1': 'agent'}
    >>> resolve_mapping(list(obs), obs, act, "shared")["agent_1"]
    'shared'
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

__all__ = ["SHARED", "agent_role", "resolve_mapping"]

#: The policy id of the ``shared`` mapping.
SHARED = "shared"


def agent_role(agent: Any) -> str:
    """An agent id without its trailing ``_<digits>`` (``"adversary_0"`` -> ``"adversary"``).

    Examples:
        >>> agent_role("pilot_12"), agent_role("solo")
        ('pilot', 'solo')
    """
    return re.sub(r"_\d+$", "", str(agent)) or str(agent)


def _function(path: str) -> Callable[[Any], Any]:
    module, _, name = path.partition(":")
    try:
        found = getattr(importlib.import_module(module), name)
    except Exception as err:  # the user's module may fail in any way while importing
        raise ValueError(
            f"multiagent.policy_mapping {path!r}: cannot load it ({type(err).__name__}: {err})"
        ) from None
    if not callable(found):
        raise ValueError(f"multiagent.policy_mapping {path!r} is not callable")
    return found  # type: ignore[no-any-return]


def resolve_mapping(
    agents: Sequence[Any],
    obs_spaces: Mapping[Any, gym.Space],
    action_spaces: Mapping[Any, gym.Space],
    how: str,
) -> dict[Any, str]:
    """``{agent_id: policy_id}`` for every agent of ``agents`` (module docstring).

    Raises:
        ValueError: An unknown mapping, or a function that fails or returns no name.
    """
    if how == SHARED:
        return dict.fromkeys(agents, SHARED)
    if how == "per_agent":
        return {a: str(a) for a in agents}
    if how == "by_space":
        groups: list[tuple[gym.Space, gym.Space, list[Any]]] = []
        for a in agents:
            for obs, act, members in groups:
                if obs == obs_spaces[a] and act == action_spaces[a]:
                    members.append(a)
                    break
            else:
                groups.append((obs_spaces[a], action_spaces[a], [a]))
        out: dict[Any, str] = {}
        taken: set[str] = set()
        for _, _, members in groups:
            roles = {agent_role(a) for a in members}
            name = roles.pop() if len(roles) == 1 else agent_role(members[0])
            base, i = name, 1
            while name in taken:
                name, i = f"{base}_{i}", i + 1
            taken.add(name)
            out.update(dict.fromkeys(members, name))
        return {a: out[a] for a in agents}
    if ":" not in how:
        raise ValueError(
            f"multiagent.policy_mapping must be 'shared', 'per_agent', 'by_space' or "
            f"'module:function', got {how!r}"
        )
    fn = _function(how)
    mapping: dict[Any, str] = {}
    for a in agents:
        try:
            pid = fn(a)
        except Exception as err:  # the user's function may fail in any way
            raise ValueError(
                f"multiagent.policy_mapping {how!r} failed for agent {a!r}: "
                f"{type(err).__name__}: {err}"
            ) from None
        if not isinstance(pid, str) or not pid:
            raise ValueError(
                f"multiagent.policy_mapping {how!r} returned {pid!r} for agent {a!r}; it "
                "must return a policy id (a non-empty str)"
            )
        mapping[a] = pid
    return mapping
