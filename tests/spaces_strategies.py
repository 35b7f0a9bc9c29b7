"""Hypothesis strategies for random nested gymnasium spaces and their batches."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from hypothesis import strategies as st
from rlblocks.spaces import Repeated

BOX_DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.int8]
SHAPES = [(), (1,), (3,), (2, 3), (2, 1, 2)]


@st.composite
def box_spaces(draw: st.DrawFn) -> gym.spaces.Box:
    dtype = draw(st.sampled_from(BOX_DTYPES))
    shape = draw(st.sampled_from(SHAPES))
    if np.issubdtype(dtype, np.floating):
        return gym.spaces.Box(-5.0, 5.0, shape, dtype=dtype)
    lo = 0 if dtype == np.uint8 else -100
    return gym.spaces.Box(lo, 100, shape, dtype=dtype)


@st.composite
def discrete_spaces(draw: st.DrawFn) -> gym.spaces.Discrete:
    return gym.spaces.Discrete(draw(st.integers(1, 6)), start=draw(st.integers(-3, 3)))


@st.composite
def multidiscrete_spaces(draw: st.DrawFn) -> gym.spaces.MultiDiscrete:
    shape = draw(st.sampled_from([(1,), (3,), (2, 2)]))
    nvec = np.array(
        draw(
            st.lists(st.integers(1, 5), min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))
        )
    ).reshape(shape)
    start = np.array(
        draw(st.lists(st.integers(-2, 2), min_size=nvec.size, max_size=nvec.size))
    ).reshape(shape)
    return gym.spaces.MultiDiscrete(nvec, start=start)


@st.composite
def multibinary_spaces(draw: st.DrawFn) -> gym.spaces.MultiBinary:
    return gym.spaces.MultiBinary(draw(st.sampled_from([1, 4, [2, 3]])))


leaf_spaces = st.one_of(
    box_spaces(), discrete_spaces(), multidiscrete_spaces(), multibinary_spaces()
)
KEYS = st.text(alphabet="abcdefgh", min_size=1, max_size=3)


def nested_spaces(allow_repeated: bool = True, max_leaves: int = 6) -> st.SearchStrategy[gym.Space]:
    def extend(children: st.SearchStrategy[gym.Space]) -> st.SearchStrategy[gym.Space]:
        options = [
            st.lists(children, min_size=1, max_size=3).map(lambda cs: gym.spaces.Tuple(cs)),
            st.dictionaries(KEYS, children, min_size=1, max_size=3).map(gym.spaces.Dict),
        ]
        if allow_repeated:
            options.append(st.builds(Repeated, children, st.integers(0, 3)))
        return st.one_of(*options)

    return st.recursive(leaf_spaces, extend, max_leaves=max_leaves)


def contains_repeated(space: gym.Space) -> bool:
    if isinstance(space, Repeated):
        return True
    if isinstance(space, gym.spaces.Tuple):
        return any(contains_repeated(s) for s in space.spaces)
    if isinstance(space, gym.spaces.Dict):
        return any(contains_repeated(s) for s in space.spaces.values())
    return False


def stack_batch(space: gym.Space, samples: list) -> Any:
    """The batched-structure form of a list of samples (leading batch dim on every leaf)."""
    if isinstance(space, gym.spaces.Dict):
        return {k: stack_batch(s, [x[k] for x in samples]) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(stack_batch(s, [x[i] for x in samples]) for i, s in enumerate(space.spaces))
    if isinstance(space, Repeated):
        return list(samples)
    return np.stack([np.asarray(x) for x in samples])
