"""RLlib's ``NormalizeAndClipActions`` on a batch of actions, planned once per action space.

RLlib's module-to-env piece unsquashes (``unsquash_action``) or clips (``clip_action``)
the Box parts of every batch of actions through ``tree.map_structure`` over the action
space's struct: a structure check and a Python walk per env step, which on a
``Tuple(Discrete, Box)`` space cost about a sixth of a ``VectorEnvRunner`` step.
:func:`env_action_fn` walks the struct once and returns a function that applies the same
arithmetic to each Box leaf (precomputed bounds, the same operations in the same order)
and passes every other leaf through; actions of another structure than the space's (a list
for a Tuple, a missing key) go to RLlib's function, which raises as it does.

Examples:
    >>> import numpy as np
    >>> from gymnasium.spaces import Box, Discrete, Tuple
    >>> space = Tuple((Discrete(3), Box(-2.0, 2.0, (1,), np.float32)))
    >>> to_env = env_action_fn(space, normalize=True, clip=False)
    >>> a, b = to_env((np.array([1, 2]), np.array([[0.5], [3.0]], np.float32)))
    >>> a.tolist(), b.tolist()
    ([1, 2], [[1.0], [2.0]])
    >>> env_action_fn(Discrete(3), normalize=True, clip=True) is None  # nothing to do
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium.spaces import Box

from rlblocks.nest import tree_leaves
from rlblocks.rllib._ray import clip_action, get_base_struct_from_space, unsquash_action

__all__ = ["env_action_fn"]

_Fn = Callable[[Any], Any]


def _clip(a: Any, low: np.ndarray, high: np.ndarray) -> Any:
    """``np.clip(a, low, high)``'s values (it is ``minimum(maximum(a, low), high)``, NaN
    kept), without its dispatch cost at a rollout's few rows."""
    return np.minimum(np.maximum(a, low), high)


def _leaf(space: Any, normalize: bool) -> _Fn | None:
    """What RLlib's ``unsquash_action`` (``normalize``) or ``clip_action`` does to one leaf
    (None: passes it through)."""
    if not isinstance(space, Box):
        return None
    low, high = space.low, space.high
    if not normalize:
        return lambda a: _clip(a, low, high)
    if not (np.all(space.bounded_below) and np.all(space.bounded_above)):
        return None
    if space.dtype == np.float32 or space.dtype == np.float64:
        span = high - low
        if np.all(span == 2.0):  # x * 2 / 2 is x exactly (no overflow: clipped anyway)
            return lambda a: _clip(low + (a + 1.0), low, high)
        return lambda a: _clip(low + (a + 1.0) * span / 2.0, low, high)
    if np.issubdtype(space.dtype, np.integer):
        return lambda a: low + a
    return None


def _plan(struct: Any, normalize: bool) -> _Fn | None:
    """The per-leaf function for ``struct`` (None: every leaf passes through); raises
    ``_Mismatch`` on actions of another structure."""
    if isinstance(struct, tuple):
        parts = [_plan(s, normalize) for s in struct]
        if all(p is None for p in parts):
            return None
        fns = [p if p is not None else _same for p in parts]
        size = len(struct)

        def tuple_fn(a: Any) -> Any:
            if type(a) is not tuple or len(a) != size:
                raise _Mismatch
            return tuple(f(x) for f, x in zip(fns, a, strict=True))

        return tuple_fn
    if isinstance(struct, dict):
        plans = {k: _plan(s, normalize) for k, s in struct.items()}
        if all(p is None for p in plans.values()):
            return None
        keys = set(struct)

        def dict_fn(a: Any) -> Any:
            if type(a) is not dict or a.keys() != keys:
                raise _Mismatch
            return {k: (v if plans[k] is None else plans[k](v)) for k, v in a.items()}  # type: ignore[misc]

        return dict_fn
    return _leaf(struct, normalize)


class _Mismatch(Exception):
    """Actions whose structure is not the space's: RLlib's function decides."""


def _same(a: Any) -> Any:
    return a


def env_action_fn(space: Any, normalize: bool, clip: bool) -> _Fn | None:
    """RLlib's ``unsquash_action`` (``normalize``, RLlib's ``normalize_actions``) or
    ``clip_action`` (``clip``) of batched actions for ``space``, as one planned function;
    None when it changes nothing (no Box in the space, or neither option set)."""
    if not (normalize or clip):
        return None
    struct = get_base_struct_from_space(space)
    if not any(isinstance(x, Box) for x in tree_leaves(struct)):
        return None
    plan = _plan(struct, normalize)
    rllib_fn = unsquash_action if normalize else clip_action
    if plan is None:
        return None

    def to_env(actions: Any) -> Any:
        try:
            return plan(actions)
        except _Mismatch:
            return rllib_fn(actions, struct)

    return to_env
