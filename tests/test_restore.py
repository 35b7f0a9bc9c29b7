"""restore_original_dimensions: structure, views, RepeatedValues, numpy and torch."""

from __future__ import annotations

import gc

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from rlblocks import RepeatedValues, get_preprocessor, restore_original_dimensions
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
    if isinstance(space, Repeated):
        assert isinstance(value, RepeatedValues)
        n = int(value.lengths)
        return [decode(_index(value.values, i), space.child_space) for i in range(n)]
    if isinstance(space, D):
        return int(np.argmax(value)) + int(space.start)
    if isinstance(space, MD):
        nvec = np.asarray(space.nvec).ravel()
        start = np.broadcast_to(space.start, space.nvec.shape).ravel()
        blocks = np.split(np.asarray(value), np.cumsum(nvec)[:-1])
        return (np.array([int(np.argmax(b)) for b in blocks]) + start).reshape(space.nvec.shape)
    return np.asarray(value)


def _index(values, i):
    if isinstance(values, dict):
        return {k: _index(v, i) for k, v in values.items()}
    if isinstance(values, tuple):
        return tuple(_index(v, i) for v in values)
    if isinstance(values, RepeatedValues):
        return RepeatedValues(_index(values.values, i), values.lengths[i], values.max_len)
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
    for n in range(2, 40):
        space = gym.spaces.Tuple((D(n), D(2)))
        seen_ids.add(id(space))
        a, b = restore_original_dimensions(np.zeros((1, n + 2)), space, "numpy")
        assert a.shape == (1, n) and b.shape == (1, 2)
        del space, a, b
        gc.collect()  # the space (and the layout it holds) is freed: its id can come back
    assert len(seen_ids) < 38  # ids were recycled, so the check above was meaningful
