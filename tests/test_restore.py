"""restore_original_dimensions: structure, views, RepeatedValues, numpy and torch."""

from __future__ import annotations

import gc

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from rlblocks import (
    GraphValues,
    OneOfValues,
    RepeatedValues,
    TextValues,
    get_preprocessor,
    restore_original_dimensions,
)
from rlblocks.nest import tree_map
from rlblocks.spaces import Repeated
from spaces_strategies import nested_spaces

pytestmark = pytest.mark.native

B, D, MD = gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete


def decode(value, space):
    """Turns a restored (one-hot, float) value of one observation back into the sample."""
    if isinstance(space, gym.spaces.Dict):
        return {k: decode(value[k], s) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(decode(v, s) for v, s in zip(value, space.spaces, strict=False))
    if isinstance(space, (Repeated, gym.spaces.Sequence)):
        assert isinstance(value, RepeatedValues)
        child = space.child_space if isinstance(space, Repeated) else space.feature_space
        n = int(value.lengths)
        return [decode(_index(value.values, i), child) for i in range(n)]
    if isinstance(space, gym.spaces.Graph):
        assert isinstance(value, GraphValues)
        n, m = int(value.n_nodes), int(value.n_edges)
        nodes = [decode(value.nodes[i], space.node_space) for i in range(n)]
        edges = None
        if space.edge_space is not None:
            edges = [decode(value.edges[i], space.edge_space) for i in range(m)]
        return nodes, edges, np.asarray(value.edge_index[:m]).astype(np.int64)
    if isinstance(space, gym.spaces.Text):
        assert isinstance(value, TextValues)
        chars = space.character_list
        return "".join(chars[int(i)] for i in value.ids[: int(value.lengths)])
    if isinstance(space, gym.spaces.OneOf):
        assert isinstance(value, OneOfValues)
        k = int(value.index)
        return k, decode(value.values[k], space.spaces[k])
    if isinstance(space, D):
        return int(np.argmax(value)) + int(space.start)
    if isinstance(space, MD):
        nvec = np.asarray(space.nvec).ravel()
        start = np.broadcast_to(space.start, space.nvec.shape).ravel()
        blocks = np.split(np.asarray(value), np.cumsum(nvec)[:-1])
        return (np.array([int(np.argmax(b)) for b in blocks]) + start).reshape(space.nvec.shape)
    return np.asarray(value)


def _index(values, i):
    if isinstance(values, GraphValues):  # (a NamedTuple: before plain tuples)
        return GraphValues(*(None if f is None else f[i] for f in values))
    if isinstance(values, OneOfValues):
        return OneOfValues(values.branch[i], tuple(_index(v, i) for v in values.values))
    if isinstance(values, dict):
        return {k: _index(v, i) for k, v in values.items()}
    if isinstance(values, tuple):
        return tuple(_index(v, i) for v in values)
    if isinstance(values, RepeatedValues):
        return RepeatedValues(_index(values.values, i), values.lengths[i], values.max_len)
    if isinstance(values, TextValues):
        return TextValues(values.values[i], values.lengths[i], values.encoding, values.num_chars)
    return values[i]


def assert_same(decoded, original, space):
    if isinstance(space, gym.spaces.Dict):
        for k, s in space.spaces.items():
            assert_same(decoded[k], original[k], s)
    elif isinstance(space, gym.spaces.Tuple):
        for d, o, s in zip(decoded, original, space.spaces, strict=False):
            assert_same(d, o, s)
    elif isinstance(space, Repeated):
        assert len(decoded) == len(original)
        for d, o in zip(decoded, original, strict=False):
            assert_same(d, o, space.child_space)
    elif isinstance(space, gym.spaces.Sequence):
        items = original
        if space.stack:  # one stacked structure: split it into its items
            items = [_index(original, i) for i in range(len(decoded))]
        assert len(decoded) == len(items)
        for d, o in zip(decoded, items, strict=True):
            assert_same(d, o, space.feature_space)
    elif isinstance(space, gym.spaces.Graph):
        nodes, edges, links = decoded
        assert len(nodes) == len(original.nodes)
        for d, o in zip(nodes, original.nodes, strict=True):
            assert_same(d, o, space.node_space)
        if space.edge_space is not None:
            for d, o in zip(edges, original.edges, strict=True):
                assert_same(d, o, space.edge_space)
        want = original.edge_links if original.edge_links is not None else np.zeros((0, 2))
        np.testing.assert_array_equal(links, np.asarray(want).reshape(-1, 2))
    elif isinstance(space, gym.spaces.Text):
        assert decoded == original
    elif isinstance(space, gym.spaces.OneOf):
        assert decoded[0] == int(original[0])
        assert_same(decoded[1], original[1], space.spaces[decoded[0]])
    elif isinstance(space, (D, MD)):
        np.testing.assert_array_equal(decoded, original)
    else:
        np.testing.assert_array_equal(decoded, np.asarray(original).astype(np.float32))


@given(space=nested_spaces(), seed=st.integers(0, 2**16))
def test_restore_of_transform_recovers_the_observation(space, seed):
    if not isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple, Repeated)):
        return
    prep = get_preprocessor(space)(space)
    space.seed(seed)
    obs = [space.sample() for _ in range(3)]
    flat = prep.transform_batch(obs)
    restored = restore_original_dimensions(flat, prep.observation_space, "numpy")
    for i, o in enumerate(obs):
        assert_same(decode(_index(restored, i), space), o, space)


STRUCTURES = gym.spaces.Dict(
    {
        "items": gym.spaces.Sequence(gym.spaces.Tuple((D(3), B(-1, 1, (2,))))),
        "stacked": gym.spaces.Sequence(
            gym.spaces.Dict({"a": D(2), "b": B(0, 1, (2,))}), stack=True
        ),
        # (gymnasium 1.2.2 samples Discrete edges without their start: no start here)
        "graph": gym.spaces.Graph(B(0, 1, (3,)), D(4)),
        "bare": gym.spaces.Graph(D(5), None),
        "word": gym.spaces.Text(6, charset="xyz12"),
        "either": gym.spaces.OneOf((D(3), gym.spaces.Dict({"c": B(-1, 1, (2,))}))),
        "list": Repeated(gym.spaces.OneOf((D(2), gym.spaces.Text(2, charset="ab"))), 3),
    }
)


@pytest.mark.parametrize("encoding", ["one_hot", "ids"])
@pytest.mark.parametrize("seed", range(6))
def test_structured_views_recover_the_observation(encoding, seed):
    # gymnasium's samples: up to ~10 nodes and 90 edges, geometric sequence lengths
    options = {"sequence_max_len": 48, "graph_max_nodes": 12, "graph_max_edges": 100}
    prep = get_preprocessor(STRUCTURES)(STRUCTURES, {**options, "text_encoding": encoding})
    STRUCTURES.seed(seed)
    obs = [STRUCTURES.sample() for _ in range(4)]
    flat = prep.transform_batch(obs)
    restored = restore_original_dimensions(flat, prep.observation_space, "numpy")
    for i, o in enumerate(obs):
        assert_same(decode(_index(restored, i), STRUCTURES), o, STRUCTURES)
    from_torch = restore_original_dimensions(torch.from_numpy(flat), prep.observation_space)
    tree_map(
        lambda t, a: a is None or np.testing.assert_array_equal(t.numpy(), a), from_torch, restored
    )


def test_structured_views_are_views_with_masks():
    prep = get_preprocessor(STRUCTURES)(STRUCTURES, {"graph_max_nodes": 12, "graph_max_edges": 100})
    STRUCTURES.seed(3)
    flat = torch.from_numpy(prep.transform_batch([STRUCTURES.sample() for _ in range(5)]))
    view = restore_original_dimensions(flat, prep.observation_space)
    ptr = flat.untyped_storage().data_ptr()
    graph = view["graph"]
    for part in (graph.nodes, graph.edges, graph.edge_index, graph.n_nodes, view["word"].values):
        assert part.untyped_storage().data_ptr() == ptr
    assert graph.nodes.shape == (5, 12, 3) and graph.edges.shape == (5, 100, 4)
    assert graph.node_mask.dtype == torch.bool
    assert graph.node_mask.sum(-1).tolist() == graph.n_nodes.long().tolist()
    assert graph.edge_mask.sum(-1).tolist() == graph.n_edges.long().tolist()
    assert view["items"].mask.sum(-1).tolist() == view["items"].lengths.long().tolist()
    assert view["word"].mask.sum(-1).tolist() == view["word"].lengths.long().tolist()
    assert view["either"].index.dtype == torch.int64
    bare = view["bare"]
    assert bare.edges is None and bare.nodes.shape == (5, 12, 5)  # Discrete nodes: one-hot
    pyg = pytest.importorskip("torch_geometric")
    assert pyg is not None
    batch = graph.to_pyg()
    assert batch.num_graphs == 5 and batch.x.shape[0] == int(graph.n_nodes.sum())
    assert batch.edge_index.shape == (2, int(graph.n_edges.sum()))
    assert batch.edge_attr.shape == (int(graph.n_edges.sum()), 4)
    first = int(graph.n_edges[0])
    assert torch.equal(batch.edge_index[:, :first], graph.edge_index[0, :first].long().t())


def test_structure_types_and_views_numpy_and_torch():
    space = gym.spaces.Dict({"z": gym.spaces.Tuple((D(2), B(-1, 1, (2, 2)))), "a": B(-1, 1, (3,))})
    prep = get_preprocessor(space)(space)
    flat = prep.transform_batch([space.sample() for _ in range(4)])
    out = restore_original_dimensions(flat, prep.observation_space, "numpy")
    assert list(out) == ["a", "z"] and isinstance(out["z"], tuple)
    assert out["z"][1].shape == (4, 2, 2) and out["z"][0].shape == (4, 2)
    assert np.shares_memory(out["z"][1], flat) and np.shares_memory(out["a"], flat)
    t = torch.from_numpy(flat)
    tout = restore_original_dimensions(t, prep.observation_space, "torch")
    assert tout["z"][1].shape == (4, 2, 2)
    assert tout["z"][1].untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    np.testing.assert_array_equal(tout["a"].numpy(), out["a"])


def test_any_number_of_leading_dims():
    space = gym.spaces.Tuple((D(3), B(-1, 1, (2,))))
    flat = np.random.default_rng(0).random((2, 5, 5)).astype(np.float32)
    a, b = restore_original_dimensions(flat, space, "numpy")
    assert a.shape == (2, 5, 3) and b.shape == (2, 5, 2)
    np.testing.assert_array_equal(b, flat[..., 3:])


def test_repeated_values_and_nested_repeated():
    inner = Repeated(D(2), max_len=2)
    space = Repeated(inner, max_len=3)
    prep = get_preprocessor(space)(space)
    obs = [[[1], [0, 1]], [], [[1, 1], [], [0]]]
    flat = torch.from_numpy(prep.transform_batch(obs))
    rv = restore_original_dimensions(flat, prep.observation_space, "torch")
    assert isinstance(rv, RepeatedValues) and rv.max_len == 3
    assert rv.lengths.tolist() == [2, 0, 3]
    assert isinstance(rv.values, RepeatedValues)
    assert rv.values.lengths.shape == (3, 3)
    assert rv.values.values.shape == (3, 3, 2, 2)
    items = rv.unbatch_all()
    assert [len(x) for x in items] == [2, 0, 3]
    assert [int(x.lengths) for x in items[2]] == [2, 0, 1]
    slices = rv.unbatch_repeat_dim()
    assert len(slices) == 3 and slices[0].values.shape == (3, 2, 2)


def test_already_unpacked_and_plain_spaces_pass_through():
    space = gym.spaces.Tuple((D(2), D(3)))
    parts = [np.zeros((1, 2)), np.zeros((1, 3))]
    assert restore_original_dimensions(parts, space, "numpy") == tuple(parts)
    x = np.zeros((2, 3))
    assert restore_original_dimensions(x, B(-1, 1, (3,)), "numpy") is x


def test_wrong_shapes_raise():
    space = gym.spaces.Tuple((D(2), D(3)))
    with pytest.raises(ValueError, match=r"Expected flattened obs shape of \[\.\.\., 5\]"):
        restore_original_dimensions(np.zeros((2, 4)), space, "numpy")
    with pytest.raises(ValueError, match="Expected flattened"):
        restore_original_dimensions(np.zeros(5), space, "numpy")


def test_tensorlib_is_ignored_results_keep_the_input_type():
    """RLlib's ``tensorlib`` picks a framework; rlblocks keeps the input's (documented)."""
    space = gym.spaces.Tuple((D(2), D(3)))
    flat = np.arange(5.0)[None]
    for lib in ("torch", "numpy", "tf", None):
        a, b = restore_original_dimensions(flat, space, lib)
        assert isinstance(a, np.ndarray) and a.tolist() == [[0.0, 1.0]]
        assert b.tolist() == [[2.0, 3.0, 4.0]]


def test_plan_cache_never_serves_a_dead_space():
    """RLlib keys its cache on id(space); a recycled id must not return a stale layout."""
    seen_ids = set()
    # The objects alive before the loop (torch, hypothesis: ~200k) go to the permanent
    # generation, so each full collection below walks only what the loop made (it was ~1 s
    # a collection with them, 38 collections). Everything the loop makes is still collected.
    gc.freeze()
    try:
        for n in range(2, 40):
            space = gym.spaces.Tuple((D(n), D(2)))
            seen_ids.add(id(space))
            a, b = restore_original_dimensions(np.zeros((1, n + 2)), space, "numpy")
            assert a.shape == (1, n) and b.shape == (1, 2)
            del space, a, b
            gc.collect()  # the space (and the layout it holds) is freed: its id can come back
    finally:
        gc.unfreeze()
    assert len(seen_ids) < 38  # ids were recycled, so the check above was meaningful
