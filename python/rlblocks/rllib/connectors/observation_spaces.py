"""What the connector pieces share about observation spaces: a tree search for a space
kind, the flat Box that carries the structure it came from, and the split of RLlib's
action-mask form ``Dict(action_mask=..., observations=...)``.

Examples:
    >>> import gymnasium as gym
    >>> from rlblocks.spaces import Repeated
    >>> space = gym.spaces.Dict({"items": Repeated(gym.spaces.Discrete(3), 4)})
    >>> has_repeated(space), has_repeated(gym.spaces.Sequence(gym.spaces.Discrete(3)))
    (True, False)
    >>> needs_env_side_flattening(gym.spaces.Dict({"name": gym.spaces.Text(5)}))
    True
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
from gymnasium.spaces import Box

from rlblocks.layout import Layout, is_string_space
from rlblocks.rllib.module import MASK_KEY, OBS_KEY
from rlblocks.spaces import Repeated

__all__ = [
    "has_repeated",
    "inner_space",
    "mask_dict",
    "needs_env_side_flattening",
    "with_original_space",
]


def _holds(space: gym.Space, kind: Callable[[gym.Space], bool]) -> bool:
    """Whether a space that ``kind`` accepts is anywhere in ``space``'s tree (Dict/Tuple
    children)."""
    if kind(space):
        return True
    children = (
        space.spaces.values()
        if isinstance(space, gym.spaces.Dict)
        else space.spaces
        if isinstance(space, gym.spaces.Tuple)
        else ()
    )
    return any(_holds(s, kind) for s in children)


def has_repeated(space: gym.Space) -> bool:
    """Whether a ``Repeated`` space is anywhere in ``space``'s tree (Dict/Tuple children)."""
    return _holds(space, lambda s: isinstance(s, Repeated))


#: The spaces that gymnasium's vector env batches as a ``Tuple`` of per-env values.
_UNBATCHABLE = (Repeated, gym.spaces.Sequence, gym.spaces.Graph, gym.spaces.OneOf)


def needs_env_side_flattening(space: gym.Space) -> bool:
    """Whether ``space``'s tree (Dict/Tuple children) holds a space whose values gymnasium's
    vector env batches as a ``Tuple`` of per-env values (``Repeated``, gymnasium
    ``Sequence`` / ``Graph`` / ``OneOf``, ``Text`` and other spaces of strings such as
    MiniGrid's ``MissionSpace``): RLlib's env runner cannot unbatch those, so the env flattens
    them itself (:class:`~rlblocks.rllib.connectors.FlatRepeatedObservations`)."""
    return _holds(space, lambda s: isinstance(s, _UNBATCHABLE) or is_string_space(s))


def with_original_space(
    space: Box, original: gym.Space | None, layout: Layout | None = None
) -> Box:
    """``space`` carrying ``original`` as its ``original_space`` (when there is one) and the
    preprocessor's ``layout`` (when given), so the module restores the nested structure from
    the flat rows with the same bounds (``sequence_max_len``, ``graph_max_nodes``, ...) that
    wrote them."""
    if original is not None:
        space.original_space = original  # type: ignore[attr-defined]
    if layout is not None:
        space.layout = layout  # type: ignore[attr-defined]
    return space


def inner_space(space: gym.Space, masked: bool) -> gym.Space:
    """The ``observations`` of the action-mask form when ``masked``, else ``space``."""
    return space[OBS_KEY] if masked and isinstance(space, gym.spaces.Dict) else space


def mask_dict(space: gym.Space, out: gym.Space) -> gym.spaces.Dict:
    """The action-mask form with the mask of ``space`` and ``out`` as its observations."""
    assert isinstance(space, gym.spaces.Dict)
    return gym.spaces.Dict({MASK_KEY: space[MASK_KEY], OBS_KEY: out})
