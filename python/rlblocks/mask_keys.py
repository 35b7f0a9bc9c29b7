"""The observation forms that carry an action mask, without torch: RLlib's
``Dict(action_mask, observations)``, PettingZoo's ``Dict(observation, action_mask)`` read as it,
and the refusal of any other Dict with an ``action_mask`` key. :mod:`rlblocks.masks` (the mask
layout and the masking of logits) re-exports them; this module is what the env side and the
exported-policy runtime import.

Examples:
    >>> from gymnasium.spaces import Box, Dict, MultiBinary
    >>> pz = Dict({"observation": Box(-1, 1, (4,)), "action_mask": MultiBinary(2)})
    >>> sorted(mask_form_space(pz).spaces)
    ['action_mask', 'observations']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

__all__ = [
    "MASK_KEY",
    "OBS_KEY",
    "PZ_OBS_KEY",
    "is_mask_space",
    "mask_form",
    "mask_form_space",
    "refuse_unread_mask",
]

#: RLlib's action-masking convention: a Dict observation with exactly these two keys.
MASK_KEY = "action_mask"
OBS_KEY = "observations"


def is_mask_space(space: gym.Space) -> bool:
    """Whether ``space`` is RLlib's action-mask form ``Dict(action_mask, observations)``.

    Examples:
        >>> is_mask_space(gym.spaces.Dict({"action_mask": gym.spaces.Box(0, 1, (2,)),
        ...                                "observations": gym.spaces.Box(-1, 1, (4,))}))
        True
        >>> is_mask_space(gym.spaces.Dict({"action_mask": gym.spaces.Box(0, 1, (2,)),
        ...                                "cart": gym.spaces.Box(-1, 1, (4,))}))
        False
    """
    return isinstance(space, gym.spaces.Dict) and set(space.spaces) == {MASK_KEY, OBS_KEY}


#: PettingZoo's (and many gymnasium envs') observation key next to ``action_mask``.
PZ_OBS_KEY = "observation"


def mask_form_space(space: gym.Space) -> gym.Space:
    """PettingZoo's ``Dict(observation, action_mask)`` as RLlib's
    ``Dict(action_mask, observations)``; any other space as it is.

    Examples:
        >>> pz = gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (4,)),
        ...                       "action_mask": gym.spaces.MultiBinary(2)})
        >>> is_mask_space(mask_form_space(pz))
        True
    """
    if isinstance(space, gym.spaces.Dict) and set(space.spaces) == {PZ_OBS_KEY, MASK_KEY}:
        return gym.spaces.Dict({MASK_KEY: space[MASK_KEY], OBS_KEY: space[PZ_OBS_KEY]})
    return space


def mask_form(obs: Any) -> Any:
    """A value of PettingZoo's ``{"observation", "action_mask"}`` form in RLlib's
    ``{"action_mask", "observations"}`` form (:func:`mask_form_space`); any other value as
    it is."""
    if isinstance(obs, Mapping) and set(obs) == {PZ_OBS_KEY, MASK_KEY}:
        return {MASK_KEY: obs[MASK_KEY], OBS_KEY: obs[PZ_OBS_KEY]}
    return obs


def refuse_unread_mask(space: gym.Space) -> None:
    """Raises ValueError for a Dict observation space with an ``action_mask`` key that no
    model would read as a mask: one whose other keys are not exactly ``observations`` (the
    default models would take the mask as one more input feature and act on masked actions).

    Examples:
        >>> try:
        ...     refuse_unread_mask(gym.spaces.Dict({"action_mask": gym.spaces.MultiBinary(2),
        ...                                         "board": gym.spaces.Box(-1, 1, (4,))}))
        ... except ValueError as err:
        ...     print(str(err)[:65])
        the observation space has an 'action_mask' key next to ['board']:
    """
    if not isinstance(space, gym.spaces.Dict) or MASK_KEY not in space.spaces:
        return
    if is_mask_space(space):
        return
    others = sorted(str(k) for k in space.spaces if k != MASK_KEY)
    raise ValueError(
        f"the observation space has an {MASK_KEY!r} key next to {others}: rlblocks masks "
        f"actions for Dict({MASK_KEY}=..., {OBS_KEY}=...) (RLlib's form; PettingZoo's "
        f"Dict({PZ_OBS_KEY}=..., {MASK_KEY}=...) is read as it), and would otherwise feed "
        f"the mask to the model as an input and take masked actions; put the other keys "
        f"under {OBS_KEY!r}, or use a custom_model that reads the mask "
        "(handles_action_mask = True)"
    )
