"""What the connector pieces share about observation spaces: a tree search for a space
kind, gymnasium ``Sequence`` read as ``Repeated`` (spaces and values), and the split of
RLlib's action-mask form ``Dict(action_mask=..., observations=...)``.

Examples:
    >>> import gymnasium as gym
    >>> space = gym.spaces.Dict({"items": gym.spaces.Sequence(gym.spaces.Discrete(3))})
    >>> has_sequence(space), has_repeated(space), has_repeated(sequence_as_repeated(space, 4))
    (True, False, True)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.spaces import Box

from rlblocks.rllib.module import MASK_KEY, OBS_KEY
from rlblocks.spaces import Repeated

__all__ = [
    "has_repeated",
    "has_sequence",
    "inner_space",
    "mask_dict",
    "sequence_as_repeated",
    "sequence_values_as_lists",
    "with_original_space",
]


def sequence_as_repeated(space: gym.Space, max_len: int) -> gym.Space:
    """``space`` with every gymnasium ``Sequence`` replaced by ``Repeated(child, max_len)``.

    Examples:
        >>> sequence_as_repeated(gym.spaces.Sequence(gym.spaces.Discrete(3)), 4)
        Repeated(Discrete(3), max_len=4)
    """
    if isinstance(space, gym.spaces.Sequence):
        return Repeated(sequence_as_repeated(space.feature_space, max_len), max_len)
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict(
            {k: sequence_as_repeated(s, max_len) for k, s in space.spaces.items()}
        )
    if isinstance(space, gym.spaces.Tuple):
        return gym.spaces.Tuple(tuple(sequence_as_repeated(s, max_len) for s in space.spaces))
    return space


def _holds(space: gym.Space, kind: type[gym.Space]) -> bool:
    """Whether a ``kind`` space is anywhere in ``space``'s tree (Dict/Tuple children)."""
    if isinstance(space, kind):
        return True
    children = (
        space.spaces.values()
        if isinstance(space, gym.spaces.Dict)
        else space.spaces
        if isinstance(space, gym.spaces.Tuple)
        else ()
    )
    return any(_holds(s, kind) for s in children)


def has_sequence(space: gym.Space) -> bool:
    """Whether a gymnasium ``Sequence`` is anywhere in ``space``'s tree (Dict/Tuple
    children)."""
    return _holds(space, gym.spaces.Sequence)


def has_repeated(space: gym.Space) -> bool:
    """Whether a ``Repeated`` space is anywhere in ``space``'s tree (Dict/Tuple children)."""
    return _holds(space, Repeated)


def _unstack(space: gym.Space, value: Any, i: int) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {k: _unstack(s, value[k], i) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_unstack(s, v, i) for s, v in zip(space.spaces, value, strict=True))
    return value[i]


def _stacked_len(space: gym.Space, value: Any) -> int:
    if isinstance(space, gym.spaces.Dict):
        return _stacked_len(next(iter(space.spaces.values())), value[next(iter(space.spaces))])
    if isinstance(space, gym.spaces.Tuple):
        return _stacked_len(space.spaces[0], value[0])
    return len(value)


def sequence_values_as_lists(space: gym.Space, value: Any) -> Any:
    """An observation of ``space`` with every ``Sequence`` value as a list of items (what
    ``Repeated`` takes); stacked sequences (``stack=True``) are split into items."""
    if isinstance(space, gym.spaces.Sequence):
        child = space.feature_space
        if space.stack:
            items = [_unstack(child, value, i) for i in range(_stacked_len(child, value))]
        else:
            items = list(value)
        return [sequence_values_as_lists(child, v) for v in items]
    if isinstance(space, gym.spaces.Dict):
        return {k: sequence_values_as_lists(s, value[k]) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(
            sequence_values_as_lists(s, v) for s, v in zip(space.spaces, value, strict=True)
        )
    return value


def with_original_space(space: Box, original: gym.Space | None) -> Box:
    """``space`` carrying ``original`` as its ``original_space`` (when there is one), so the
    module restores the nested structure from the flat rows."""
    if original is not None:
        space.original_space = original  # type: ignore[attr-defined]
    return space


def inner_space(space: gym.Space, masked: bool) -> gym.Space:
    """The ``observations`` of the action-mask form when ``masked``, else ``space``."""
    return space[OBS_KEY] if masked and isinstance(space, gym.spaces.Dict) else space


def mask_dict(space: gym.Space, out: gym.Space) -> gym.spaces.Dict:
    """The action-mask form with the mask of ``space`` and ``out`` as its observations."""
    assert isinstance(space, gym.spaces.Dict)
    return gym.spaces.Dict({MASK_KEY: space[MASK_KEY], OBS_KEY: out})
