"""Bad observations: a ValueError naming the path, the value and what was allowed, and the
output buffer untouched, for single and batched calls, on both implementations."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from conftest import both_impls
from rlblocks.preprocessors import get_preprocessor
from rlblocks.spaces import Repeated

pytestmark = pytest.mark.native

B, D, MD = gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete

SPACE = gym.spaces.Dict(
    {
        "a": D(5),
        "b": B(-1, 1, (16,)),
        "c": gym.spaces.Dict({"d": MD([3, 4, 5]), "e": B(-1, 1, (3, 4))}),
        "f": gym.spaces.Tuple((D(2), B(-1, 1, (8,)))),
        "r": Repeated(gym.spaces.Dict({"pos": B(-1, 1, (3,)), "kind": D(5)}), max_len=4),
    }
)


def good_obs() -> dict:
    return {
        "a": 1,
        "b": np.zeros(16, np.float32),
        "c": {"d": np.array([0, 1, 2]), "e": np.zeros((3, 4), np.float32)},
        "f": (1, np.zeros(8, np.float32)),
        "r": [{"pos": np.zeros(3, np.float32), "kind": 3}],
    }


def set_path(obs: dict, path: tuple, value) -> dict:
    target = obs
    for p in path[:-1]:
        target = target[p]
    if isinstance(target, tuple):
        raise TypeError("use a list parent for this path")
    target[path[-1]] = value
    return obs


CASES = [
    # (path to change, new value, pattern the message must contain)
    (("a",), 7, r'obs\["a"\]: value 7 is out of range for Discrete\(5\) \(allowed 0\.\.4\)'),
    (("a",), -1, r'obs\["a"\]: value -1 is out of range'),
    (("a",), 2.5, r'obs\["a"\]: value 2\.5 is not an integer'),
    (("a",), math.nan, r'obs\["a"\]: value nan is not an integer'),
    (("a",), math.inf, r'obs\["a"\]: value inf is not an integer'),
    (("a",), "x", r'obs\["a"\]: expected an integer'),
    # a whole number beyond int64 is out of range, printed as read (float: %g; uint64: exact)
    (
        ("a",),
        1e308,
        r'obs\["a"\]: value 1e\+308 is out of range for Discrete\(5\) \(allowed 0\.\.4\)',
    ),
    (
        ("a",),
        np.uint64(2**64 - 1),
        r'obs\["a"\]: value 18446744073709551615 is out of range .*\(allowed 0\.\.4\)',
    ),
    (
        ("c", "d"),
        np.array([0.0, 0.5, 1.0]),
        r'obs\["c"\]\["d"\]\[1\]: value 0\.5 is not an integer; MultiDiscrete\(\[3 4 5\]\) '
        r"component allows integers 0\.\.3",
    ),
    (
        ("c", "d"),
        np.array([0, 1, 7]),
        r'obs\["c"\]\["d"\]\[2\]: value 7 is out of range .*allowed 0\.\.4',
    ),
    (
        ("c", "d"),
        np.array([0.0, np.nan, 1.0]),
        r'obs\["c"\]\["d"\]\[1\]: value nan is not an integer',
    ),
    (("c", "d"), np.array([0, 1]), r'obs\["c"\]\["d"\]: expected shape \(3,\)'),
    (("b",), np.zeros(15, np.float32), r'obs\["b"\]: expected shape \(16,\) .*got \(15,\)'),
    (("c", "e"), np.zeros((4, 3)), r'obs\["c"\]\["e"\]: expected shape \(3, 4\)'),
    (("b",), ["x"] * 16, r'obs\["b"\]: expected numbers'),
    (
        ("r",),
        [{"pos": np.zeros(3), "kind": 0}] * 5,
        r'obs\["r"\]: list of length 5 is longer than max_len=4',
    ),
    (("r",), 3, r'obs\["r"\]: expected a list'),
    (("f",), (1,), r'obs\["f"\]: expected 2 items'),
    (("c",), [1, 2], r'obs\["c"\]: expected a dict'),
]


def make_bad(path, value):
    obs = good_obs()
    obs["f"] = list(obs["f"])
    return set_path(obs, path, value)


@pytest.mark.parametrize(("path", "value", "pattern"), CASES)
def test_single_observation_errors_name_path_value_and_range(impl, path, value, pattern):
    prep = get_preprocessor(SPACE)(SPACE)
    bad = make_bad(path, value)
    with pytest.raises(ValueError, match=pattern):
        prep.transform(bad)


@pytest.mark.parametrize(("path", "value", "pattern"), CASES)
def test_batch_errors_name_the_env_and_leave_out_untouched(impl, path, value, pattern):
    prep = get_preprocessor(SPACE)(SPACE)
    batch = [good_obs() for _ in range(5)]
    batch[3] = make_bad(path, value)
    out = np.full((5, prep.size), 3.25, np.float32)
    with pytest.raises(ValueError, match=pattern.replace("obs", r"obs\[3\]", 1)):
        prep.transform_batch(batch, out=out)
    assert (out == 3.25).all()


@pytest.mark.parametrize(("path", "value", "pattern"), CASES)
def test_both_implementations_refuse_with_the_same_message(path, value, pattern):
    prep = get_preprocessor(SPACE)(SPACE)
    batch = [good_obs(), make_bad(path, value)]
    for fn, arg in ((prep.transform, batch[1]), (prep.transform_batch, batch)):
        native, numpy = both_impls(_message, fn, arg)
        assert native == numpy and native.startswith("obs"), (native, numpy)


def _message(fn, arg) -> str:
    try:
        fn(arg)
    except ValueError as err:
        return str(err)
    raise AssertionError("accepted")


def test_batched_structure_errors_name_what_was_given(impl):
    space = gym.spaces.Tuple((D(3), gym.spaces.Dict({"b": B(-1, 1, (2,))})))
    prep = get_preprocessor(space)(space)
    with pytest.raises(
        ValueError, match=r"^obs: expected a tuple of 2 items for Tuple\(.*\), got numpy\.ndarray$"
    ):
        prep.transform_batch(np.zeros((4, 2)))
    with pytest.raises(
        ValueError, match=r"^obs\[1\]: expected a dict with keys \['b'\] for Dict\(.*\), got list$"
    ):
        prep.transform_batch((np.zeros(4, int), [np.zeros((4, 2))]))


def test_nested_repeated_item_error_path():
    prep = get_preprocessor(SPACE)(SPACE)
    obs = good_obs()
    obs["r"] = [{"pos": np.zeros(3), "kind": 0}, {"pos": np.zeros(3), "kind": 9}]
    with pytest.raises(ValueError, match=r'obs\["r"\]\[1\]\["kind"\]: value 9 is out of range'):
        prep.transform(obs)


def test_missing_and_extra_keys(impl):
    prep = get_preprocessor(SPACE)(SPACE)
    obs = good_obs()
    del obs["b"]
    with pytest.raises(ValueError, match=r"missing key 'b'"):
        prep.transform(obs)
    obs = good_obs()
    obs["zzz"] = 1
    with pytest.raises(ValueError, match=r"unexpected keys \['zzz'\]"):
        prep.transform(obs)


def test_batched_structure_errors(impl):
    space = gym.spaces.Dict({"a": D(3), "b": B(-1, 1, (2,))})
    prep = get_preprocessor(space)(space)
    out = np.full((4, 5), 9.0, np.float32)
    with pytest.raises(
        ValueError, match=r'obs\["b"\]: batch dimension 3 differs from the batch size 4'
    ):
        prep.transform_batch({"a": np.zeros(4, int), "b": np.zeros((3, 2))}, out=out)
    with pytest.raises(ValueError, match=r'obs\["a"\]'):
        prep.transform_batch({"a": np.array([0, 1, 5, 2]), "b": np.zeros((4, 2))}, out=out)
    assert (out == 9.0).all()


@pytest.mark.parametrize(
    "out",
    [
        np.zeros((4, 5), np.float32),  # wrong batch length
        np.zeros((3, 5), np.float64),  # wrong dtype
        np.zeros((3, 10), np.float32)[:, ::2],  # not contiguous
        np.zeros((3, 4), np.float32),  # wrong width
    ],
)
def test_bad_out_buffers_are_rejected(impl, out):
    space = gym.spaces.Dict({"a": D(3), "b": B(-1, 1, (2,))})
    prep = get_preprocessor(space)(space)
    before = out.copy()
    with pytest.raises(
        ValueError,
        match=r"transform_batch: out must be a writeable C-contiguous float32 array of shape "
        r"\(3, 5\)",
    ):
        prep.transform_batch([{"a": 0, "b": np.zeros(2)}] * 3, out=out)
    np.testing.assert_array_equal(out, before)


def test_read_only_out_is_rejected():
    space = D(3)
    prep = get_preprocessor(space)(space)
    out = np.zeros((2, 3), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        prep.transform_batch([0, 1], out=out)


def test_write_checks_bounds(impl):
    prep = get_preprocessor(D(3))(D(3))
    arr = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="exceeds"):
        prep.write(1, arr, 2)
    assert (arr == 0).all()
    prep.write(1, arr, 1)
    assert arr.tolist() == [0, 0, 1, 0]


def test_check_shape_accepts_what_transform_accepts_and_names_the_path(impl):
    prep = get_preprocessor(SPACE)(SPACE)
    assert prep.check_shape(good_obs()) is None
    bad = set_path(good_obs(), ("c", "d"), np.array([0, 4, 2]))
    with pytest.raises(ValueError, match=r'obs\["c"\]\["d"\].*value 4 is out of range'):
        prep.check_shape(bad)
    missing = good_obs()
    del missing["b"]
    with pytest.raises(ValueError, match="'b'"):
        prep.check_shape(missing)
