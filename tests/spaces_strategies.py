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


# Characters of the random Text spaces: ASCII, and beyond (the native core's map, not its table).
CHARSETS = ["ab", "abc ", "xyz01", "aé☃", "é"]


@st.composite
def text_spaces(draw: st.DrawFn) -> gym.spaces.Text:
    max_length = draw(st.integers(1, 4))
    return gym.spaces.Text(
        max_length,
        min_length=draw(st.integers(0, max_length)),
        charset=draw(st.sampled_from(CHARSETS)),
    )


@st.composite
def graph_spaces(draw: st.DrawFn) -> gym.spaces.Graph:
    item = st.one_of(
        st.sampled_from([(1,), (2,), (2, 2)]).map(lambda shape: gym.spaces.Box(-5.0, 5.0, shape)),
        st.integers(1, 4).map(gym.spaces.Discrete),
    )
    return gym.spaces.Graph(draw(item), draw(st.one_of(st.none(), item)))


def nested_spaces(
    allow_repeated: bool = True, max_leaves: int = 6, new_kinds: bool = False
) -> st.SearchStrategy[gym.Space]:
    """Random nests of Tuple / Dict (/ Repeated) over the leaf spaces; with ``new_kinds`` also
    gymnasium Sequence (stacked too), OneOf, Graph and Text (issue 26; sample them with
    :func:`sample_value` and the options of :data:`NEW_KIND_OPTIONS`)."""
    leaves = st.one_of(leaf_spaces, graph_spaces(), text_spaces()) if new_kinds else leaf_spaces
    stackable = st.one_of(
        leaf_spaces,
        st.lists(leaf_spaces, min_size=1, max_size=2).map(lambda cs: gym.spaces.Tuple(cs)),
        st.dictionaries(KEYS, leaf_spaces, min_size=1, max_size=2).map(gym.spaces.Dict),
    )

    def extend(children: st.SearchStrategy[gym.Space]) -> st.SearchStrategy[gym.Space]:
        options = [
            st.lists(children, min_size=1, max_size=3).map(lambda cs: gym.spaces.Tuple(cs)),
            st.dictionaries(KEYS, children, min_size=1, max_size=3).map(gym.spaces.Dict),
        ]
        if allow_repeated:
            options.append(st.builds(Repeated, children, st.integers(0, 3)))
        if new_kinds:
            options += [
                st.builds(gym.spaces.Sequence, children),
                st.builds(gym.spaces.Sequence, stackable, stack=st.just(True)),
                st.lists(children, min_size=1, max_size=3).map(lambda cs: gym.spaces.OneOf(cs)),
            ]
        return st.one_of(*options)

    return st.recursive(leaves, extend, max_leaves=max_leaves)


# Model-config sizes that every value of sample_value fits (sequences of up to 3 items,
# graphs of up to 4 nodes and 5 edges).
NEW_KIND_OPTIONS = {"sequence_max_len": 3, "graph_max_nodes": 4, "graph_max_edges": 5}


def sample_value(space: gym.Space, rng: np.random.Generator) -> Any:
    """A valid observation of ``space`` with small variable sizes (see NEW_KIND_OPTIONS), in
    the forms gymnasium produces: tuples of items, stacked arrays for ``stack=True``,
    GraphInstance, str, ``(np.int64 branch, value)``."""
    if isinstance(space, gym.spaces.Dict):
        return {k: sample_value(s, rng) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(sample_value(s, rng) for s in space.spaces)
    if isinstance(space, Repeated):
        return [
            sample_value(space.child_space, rng) for _ in range(rng.integers(0, space.max_len + 1))
        ]
    if isinstance(space, gym.spaces.Sequence):
        items = [sample_value(space.feature_space, rng) for _ in range(rng.integers(0, 4))]
        if space.stack:
            return _stacked(space.feature_space, items)
        return tuple(items)
    if isinstance(space, gym.spaces.Graph):
        n, m = int(rng.integers(1, 5)), int(rng.integers(0, 6))
        nodes = _stacked(space.node_space, [sample_value(space.node_space, rng) for _ in range(n)])
        edges = None
        if space.edge_space is not None:
            edges = _stacked(
                space.edge_space, [sample_value(space.edge_space, rng) for _ in range(m)]
            )
        links = rng.integers(0, n, (m, 2)) if m or rng.random() < 0.5 else None
        return gym.spaces.GraphInstance(nodes, edges, links)
    if isinstance(space, gym.spaces.Text):
        length = int(rng.integers(space.min_length, space.max_length + 1))
        return "".join(
            space.character_list[i] for i in rng.integers(0, len(space.character_list), length)
        )
    if isinstance(space, gym.spaces.OneOf):
        branch = rng.integers(0, len(space.spaces))
        return (branch, sample_value(space.spaces[int(branch)], rng))
    space.seed(int(rng.integers(2**31)))
    return space.sample()


def _stacked(space: gym.Space, items: list) -> Any:
    """Items of a leaf / Dict / Tuple space with a leading length dim (as gymnasium stacks)."""
    if isinstance(space, gym.spaces.Dict):
        return {k: _stacked(s, [x[k] for x in items]) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_stacked(s, [x[i] for x in items]) for i, s in enumerate(space.spaces))
    return np.array(items, dtype=space.dtype).reshape((len(items), *(space.shape or ())))


def contains_repeated(space: gym.Space) -> bool:
    if isinstance(space, Repeated):
        return True
    if isinstance(space, gym.spaces.Tuple):
        return any(contains_repeated(s) for s in space.spaces)
    if isinstance(space, gym.spaces.Dict):
        return any(contains_repeated(s) for s in space.spaces.values())
    return False


def stack_batch(space: gym.Space, samples: list, text_arrays: bool = False) -> Any:
    """The batched-structure form of a list of samples (leading batch dim on every leaf;
    Repeated and the issue-26 kinds: the list of per-env values; ``text_arrays``: Text leaves
    as an ndarray of str)."""
    if isinstance(space, gym.spaces.Dict):
        return {
            k: stack_batch(s, [x[k] for x in samples], text_arrays) for k, s in space.spaces.items()
        }
    if isinstance(space, gym.spaces.Tuple):
        return tuple(
            stack_batch(s, [x[i] for x in samples], text_arrays) for i, s in enumerate(space.spaces)
        )
    if isinstance(space, gym.spaces.Text) and text_arrays:
        return np.array(samples, dtype=np.str_)
    if isinstance(
        space, (Repeated, gym.spaces.Sequence, gym.spaces.Graph, gym.spaces.Text, gym.spaces.OneOf)
    ):
        return list(samples)
    return np.stack([np.asarray(x) for x in samples])
