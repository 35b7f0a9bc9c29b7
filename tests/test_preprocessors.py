"""Preprocessors: RLlib's layouts, C++ == numpy reference, == gymnasium flatten, batching."""

from __future__ import annotations

import pickle
import threading
from collections import OrderedDict

import gymnasium as gym
import numpy as np
import pytest
import rlblocks as rb
from conftest import both_impls
from hypothesis import given
from hypothesis import strategies as st
from rlblocks.preprocessors import (
    AtariRamPreprocessor,
    DictFlatteningPreprocessor,
    MultiBinaryPreprocessor,
    NoPreprocessor,
    OneHotPreprocessor,
    RepeatedValuesPreprocessor,
    TupleFlatteningPreprocessor,
    get_preprocessor,
)
from rlblocks.spaces import Repeated
from spaces_strategies import nested_spaces, stack_batch

pytestmark = pytest.mark.native

B, D, MD, MB = gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary


def prep_for(space: gym.Space, **kw):
    return get_preprocessor(space, **kw)(space)


# --------------------------------------------------------------------------- RLlib examples


def test_multidiscrete_example_from_the_spec(impl):
    assert prep_for(MD([3, 4])).transform([1, 3]).tolist() == [0, 1, 0, 0, 0, 0, 1]
    assert prep_for(MD([2, 3])).transform(np.array([1, 2])).tolist() == [0, 1, 0, 0, 1]


def test_multidiscrete_2d_nvec_is_row_major_with_start(impl):
    space = MD(np.array([[2, 3], [4, 2]]), start=np.array([[1, 0], [-1, 5]]))
    prep = prep_for(space)
    assert prep.shape == (11,)
    out = prep.transform(np.array([[2, 1], [-1, 6]]))
    expected = np.zeros(11, np.float32)
    expected[[0 + 1, 2 + 1, 5 + 0, 9 + 1]] = 1
    np.testing.assert_array_equal(out, expected)


def test_discrete_with_start(impl):
    prep = prep_for(D(4, start=-2))
    assert prep.transform(-2).tolist() == [1, 0, 0, 0]
    assert prep.transform(np.int64(1)).tolist() == [0, 0, 0, 1]


def test_repeated_layout_length_in_slot_zero_then_items_then_zeros(impl):
    space = Repeated(gym.spaces.Tuple((D(2), B(-1, 1, (1,)))), max_len=3)
    prep = prep_for(space)
    assert prep.shape == (1 + 3 * 3,)
    out = prep.transform([(1, np.array([0.5])), (0, np.array([-0.25]))])
    assert out.dtype == np.float32  # difference 2: float32 also at the top level
    assert out.tolist() == [2, 0, 1, 0.5, 1, 0, -0.25, 0, 0, 0]
    assert prep.transform([]).tolist() == [0] * 10


def test_nested_repeated(impl):
    space = Repeated(Repeated(D(2), max_len=2), max_len=2)
    prep = prep_for(space)
    assert prep.size == 1 + 2 * (1 + 2 * 2)
    out = prep.transform([[1], [0, 1]])
    assert out.tolist() == [2, 1, 0, 1, 0, 0, 2, 1, 0, 0, 1]


def test_dict_children_follow_space_order_and_match_by_key(impl):
    space = gym.spaces.Dict(
        OrderedDict([("z", D(2)), ("a", B(-1, 1, (2,)))])
    )  # unsorted on purpose
    prep = prep_for(space)
    expected = [0, 1, 0.5, -0.5]
    a = np.array([0.5, -0.5], np.float32)
    assert prep.transform({"z": 1, "a": a}).tolist() == expected
    assert prep.transform({"a": a, "z": 1}).tolist() == expected
    assert prep.transform(OrderedDict([("a", a), ("z", 1)])).tolist() == expected


def test_choice_rules_and_dtype_departures():
    assert get_preprocessor(D(3)) is OneHotPreprocessor
    assert get_preprocessor(MD([2, 2])) is OneHotPreprocessor
    assert get_preprocessor(B(0, 255, (128,), np.uint8)) is AtariRamPreprocessor
    assert get_preprocessor(B(-1, 1, (128,), np.float32)) is NoPreprocessor  # difference 1
    assert get_preprocessor(B(0, 1, (210, 160, 3), np.float32)) is NoPreprocessor
    assert get_preprocessor(gym.spaces.Tuple((D(2),))) is TupleFlatteningPreprocessor
    assert get_preprocessor(gym.spaces.Dict({"a": D(2)})) is DictFlatteningPreprocessor
    assert get_preprocessor(Repeated(D(2), 2)) is RepeatedValuesPreprocessor
    assert get_preprocessor(MB(3)) is NoPreprocessor
    assert get_preprocessor(MB(3), include_multi_binary=True) is MultiBinaryPreprocessor
    assert get_preprocessor(rb.spaces.Simplex((3,))) is NoPreprocessor


def test_atari_ram_scaling_and_nested(impl):
    space = B(0, 255, (128,), np.uint8)
    x = np.arange(128, dtype=np.uint8) * 2
    expected = (x.astype(np.float32) - 128) / 128
    np.testing.assert_array_equal(prep_for(space).transform(x), expected)
    nested = gym.spaces.Tuple((space, D(2)))
    out = prep_for(nested).transform((x, 1))
    np.testing.assert_array_equal(out[:128], expected)


def test_multibinary_preprocessor_keeps_shape(impl):
    prep = prep_for(MB([2, 3]), include_multi_binary=True)
    assert prep.shape == (2, 3)
    x = np.array([[1, 0, 1], [0, 0, 1]], np.int8)
    out = prep.transform(x)
    assert out.dtype == np.float32 and out.shape == (2, 3)
    np.testing.assert_array_equal(out, x)
    assert prep.observation_space.low.min() == 0.0


def test_no_preprocessor_passes_through_unchanged():
    space = B(0, 10, (3, 4), np.int64)
    prep = prep_for(space)
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    assert prep.transform(x) is x
    assert prep.observation_space is space
    batch = prep.transform_batch([x, x + 1])
    assert batch.shape == (2, 3, 4) and batch.dtype == np.int64
    buf = np.zeros(14, np.float32)
    prep.write(x, buf, 2)
    np.testing.assert_array_equal(buf[2:], x.ravel())
    with pytest.raises(ValueError, match=r"expected shape \(3, 4\)"):
        prep.transform(np.zeros((4, 3)))


def test_observation_space_carries_original_space():
    space = gym.spaces.Dict({"a": D(3), "b": B(-1, 1, (2,))})
    prep = prep_for(space)
    obs_space = prep.observation_space
    assert obs_space.shape == (5,) and obs_space.dtype == np.float32
    assert obs_space.original_space is space


def test_building_a_preprocessor_draws_nothing_from_the_space_rng():
    space = gym.spaces.Dict({"a": D(5), "b": Repeated(B(-1, 1, (2,)), 3)}, seed=123)
    expected = gym.spaces.Dict({"a": D(5), "b": Repeated(B(-1, 1, (2,)), 3)}, seed=123).sample()
    prep_for(space)
    got = space.sample()
    assert got["a"] == expected["a"] and len(got["b"]) == len(expected["b"])


@pytest.mark.parametrize(
    ("space", "cls"),
    [
        (gym.spaces.Text(5), "TextPreprocessor"),
        (gym.spaces.Graph(B(0, 1, (2,)), D(2)), "GraphPreprocessor"),
        (gym.spaces.Sequence(D(2)), "SequencePreprocessor"),
        (gym.spaces.OneOf((D(2), D(3))), "OneOfPreprocessor"),
    ],
)
def test_variable_size_spaces_have_preprocessors(space, cls):
    assert get_preprocessor(space).__name__ == cls
    assert get_preprocessor(gym.spaces.Dict({"x": space})).__name__ == "DictFlatteningPreprocessor"


def test_shapeless_spaces_fail_clearly():
    class Shapeless(gym.Space):
        def __init__(self):
            super().__init__(None, None)

    with pytest.raises(ValueError, match=r"space\['x'\]: Shapeless has no shape"):
        get_preprocessor(gym.spaces.Dict({"x": Shapeless()}))


# --------------------------------------------------------------------------- parity


def samples_of(space: gym.Space, seed: int, n: int) -> list:
    space.seed(seed)
    return [space.sample() for _ in range(n)]


@given(space=nested_spaces(), seed=st.integers(0, 2**16), n=st.integers(0, 5))
def test_native_equals_numpy_reference_bit_for_bit(space, seed, n):
    prep = prep_for(space)
    obs = samples_of(space, seed, n)
    native, reference = both_impls(prep.transform_batch, obs)
    if isinstance(prep, NoPreprocessor):
        assert native.shape == (n, *prep.shape) and native.dtype == space.dtype
    else:
        assert native.dtype == np.float32 and native.shape == (n, prep.size)
    np.testing.assert_array_equal(native, reference)
    if n:
        single, single_ref = both_impls(prep.transform, obs[0])
        np.testing.assert_array_equal(np.asarray(single).ravel(), native[0].ravel())
        np.testing.assert_array_equal(np.asarray(single_ref).ravel(), native[0].ravel())


@given(space=nested_spaces(), seed=st.integers(0, 2**16), n=st.integers(1, 5))
def test_batched_structure_equals_list_of_observations(space, seed, n):
    if isinstance(space, (B, MB)):
        return  # pass-through spaces are not flattened
    prep = prep_for(space)
    obs = samples_of(space, seed, n)
    from_list = prep.transform_batch(obs)
    native, reference = both_impls(prep.transform_batch, stack_batch(space, obs))
    np.testing.assert_array_equal(native, from_list)
    np.testing.assert_array_equal(reference, from_list)


@given(space=nested_spaces(allow_repeated=False), seed=st.integers(0, 2**16))
def test_equals_gymnasium_flatten(space, seed):
    prep = prep_for(space)
    obs = samples_of(space, seed, 3)
    if isinstance(prep, NoPreprocessor):
        return
    expected = np.stack([gym.spaces.flatten(space, o).astype(np.float32) for o in obs])
    np.testing.assert_array_equal(prep.transform_batch(obs), expected)


@given(space=nested_spaces(), seed=st.integers(0, 2**16), n=st.integers(1, 4))
def test_writes_never_leave_their_slot(space, seed, n):
    """Sentinels around the output prove the kernel writes only inside ``out``."""
    if isinstance(space, (B, MB)):
        return
    prep = prep_for(space)
    obs = samples_of(space, seed, n)
    pad = 64
    buf = np.full(n * prep.size + 2 * pad, 7.5, np.float32)
    out = buf[pad : pad + n * prep.size].reshape(n, prep.size)
    prep.transform_batch(obs, out=out)
    assert (buf[:pad] == 7.5).all() and (buf[-pad:] == 7.5).all()
    np.testing.assert_array_equal(out, prep.transform_batch(obs))
    line = np.full(prep.size + 2 * pad, 7.5, np.float32)
    prep.write(obs[0], line, pad)
    assert (line[:pad] == 7.5).all() and (line[-pad:] == 7.5).all()
    np.testing.assert_array_equal(line[pad:-pad], out[0])


def test_other_dtypes_and_non_contiguous_inputs_are_converted(impl):
    space = gym.spaces.Dict({"b": B(-10, 10, (4,)), "m": MD([3, 3, 3, 3])})
    prep = prep_for(space)
    base = np.arange(8, dtype=np.float64) - 4
    strided = base[::2]  # non-contiguous float64
    big_endian = np.array([2, 1, 0, 2], dtype=">i4")
    out = prep.transform({"b": strided, "m": big_endian})
    np.testing.assert_array_equal(out[:4], strided.astype(np.float32))  # keys sorted: b, m
    np.testing.assert_array_equal(out[4:], np.eye(3)[[2, 1, 0, 2]].ravel())
    batch = {"b": np.tile(base, (3, 1))[:, ::2], "m": np.tile(big_endian, (3, 1)).T.copy().T}
    np.testing.assert_array_equal(prep.transform_batch(batch), np.tile(out, (3, 1)))
    lists = prep.transform({"b": strided.tolist(), "m": big_endian.tolist()})
    np.testing.assert_array_equal(lists, out)


def test_float_indices_that_are_integral_are_accepted(impl):
    prep = prep_for(gym.spaces.Tuple((D(3), MD([2, 2]))))
    assert prep.transform((2.0, np.array([1.0, 0.0]))).tolist() == [0, 0, 1, 0, 1, 1, 0]


def test_thread_counts_give_identical_results():
    space = gym.spaces.Dict(
        {
            "r": Repeated(gym.spaces.Dict({"p": B(-1, 1, (3,)), "k": D(5)}), 8),
            "d": D(7),
            "x": B(-1, 1, (64,)),
        }
    )
    prep = prep_for(space)
    obs = samples_of(space, 0, 3000)
    rb.set_num_threads(1)
    one = prep.transform_batch(obs)
    rb.set_num_threads(2)
    assert rb.get_num_threads() == 2
    two = prep.transform_batch(obs)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(prep.transform_batch(stack_batch(space, obs)), one)


def test_concurrent_python_threads_are_safe():
    space = gym.spaces.Dict({"r": Repeated(D(4), 6), "x": B(-1, 1, (32,))})
    prep = prep_for(space)
    batches = [samples_of(space, s, 400) for s in range(4)]
    expected = [prep.transform_batch(b) for b in batches]
    rb.set_num_threads(2)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(20):
                np.testing.assert_array_equal(prep.transform_batch(batches[i]), expected[i])
                prep.transform(batches[i][0])
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_preprocessor_pickles_and_repeated_space_features():
    space = Repeated(gym.spaces.Dict({"a": D(3)}), max_len=4, seed=3)
    again = pickle.loads(pickle.dumps(space))
    assert again == space and repr(space) == "Repeated(Dict('a': Discrete(3)), max_len=4)"
    lengths = {len(space.sample()) for _ in range(200)}
    assert lengths == {0, 1, 2, 3, 4}
    assert space.contains([{"a": 1}]) and not space.contains([{"a": 5}])
    assert not space.contains("abc")
    s1, s2 = Repeated(D(5), 3, seed=7), Repeated(D(5), 3, seed=7)
    assert [s1.sample() for _ in range(5)] == [s2.sample() for _ in range(5)]
    outer = gym.spaces.Tuple((space, D(2)))
    assert outer.contains(([{"a": 0}], 1))


def test_repeated_sample_masks():
    space = Repeated(D(4), max_len=5, seed=0)
    assert all(len(space.sample(mask=(3, None))) == 3 for _ in range(5))
    lengths = np.zeros(6, bool)
    lengths[[1, 4]] = True
    assert {len(space.sample(mask=(lengths, None))) for _ in range(100)} == {1, 4}
    child_mask = np.array([0, 0, 1, 0], np.int8)
    assert all(x == 2 for x in space.sample(mask=(None, child_mask)))
    with pytest.raises(ValueError, match="length mask"):
        space.sample(mask=(np.zeros(6, bool), None))
    with pytest.raises(ValueError, match="probability"):
        space.sample(probability=np.ones(4))
