"""Memory safety and twin agreement of the flattening core (hardening issue 16, section 1).

Each test names a class of defect: index checks made on the exact integer that is written,
arrays kept alive while the GIL is released, containers that change while they are read,
byte order, what both twins accept, and scratch memory after huge batches. Crashing
scenarios run in a subprocess, so a regression fails the test instead of killing pytest.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import rlblocks as rb
from hypothesis import given, settings
from hypothesis import strategies as st
from rlblocks import _core
from rlblocks.spaces import Repeated

pytestmark = pytest.mark.native

INDEX_DTYPES = [
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
]


def make(space: gym.Space):
    return rb.get_preprocessor(space)(space)


def outcome(fn):
    """("ok", output) or ("ValueError", message); anything else propagates."""
    try:
        return "ok", np.asarray(fn())
    except ValueError as err:
        return "ValueError", str(err)


def assert_twins_agree(pre, method: str, value) -> tuple[str, object]:
    native_fn = {
        "transform": pre._plan.transform,
        "list": pre._plan.transform_list,
        "batched": pre._plan.transform_batched,
    }[method]
    ref_fn = {
        "transform": pre._reference.transform,
        "list": pre._reference.transform_list,
        "batched": pre._reference.transform_batched,
    }[method]
    native, ref = outcome(lambda: native_fn(value)), outcome(lambda: ref_fn(value))
    assert native[0] == ref[0], f"native {native} vs numpy {ref}"
    if native[0] == "ok":
        np.testing.assert_array_equal(native[1], ref[1])
    return native


# ------------------------------------------------------------------ 1. exact index checks


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("start", [2**24 + 1, 2**53 + 1, -(2**62), 2**62])
def test_float_index_is_checked_as_the_integer_written(dtype: str, start: int) -> None:
    space = gym.spaces.MultiDiscrete([2, 2], start=[start, start])
    pre = make(space)
    x = np.array([start - 1, start - 1], dtype=np.float64).astype(dtype)
    exact = [int(v) for v in x]
    base = np.zeros(9, np.float32)
    out = base[1:].reshape(2, 4)
    accepts = all(start <= v < start + 2 for v in exact)
    for call in (
        lambda: pre.transform_batch([x, x], out=out),
        lambda: pre.transform_batch(np.stack([x, x]), out=out),
        lambda: pre.transform(x),
    ):
        if accepts:
            call()
        else:
            with pytest.raises(ValueError, match="out of range"):
                call()
    assert base[0] == 0.0  # nothing written before the buffer
    if not accepts:
        assert not out.any()  # nor into it


@settings(max_examples=150, deadline=None)
@given(
    dtype=st.sampled_from(INDEX_DTYPES),
    start=st.sampled_from([0, -3, 2**24 + 1, 2**31 - 2, 2**53 + 1, -(2**62), 2**62]),
    n=st.integers(1, 3),
    delta=st.integers(-2, 4),
    method=st.sampled_from(["list", "batched"]),
)
def test_every_index_width_agrees_with_the_reference_at_the_range_edges(
    dtype: str, start: int, n: int, delta: int, method: str
) -> None:
    space = gym.spaces.Dict(
        {
            "d": gym.spaces.Discrete(n, start=start),
            "m": gym.spaces.MultiDiscrete([n, n], start=[start, start]),
        }
    )
    value = start + delta
    try:
        with np.errstate(over="ignore"):
            v = np.array(value).astype(dtype)
    except OverflowError:
        return
    obs = {"d": v, "m": np.array([v, v])}
    pre = make(space)
    batch = (
        [obs, obs] if method == "list" else {"d": np.stack([v, v]), "m": np.stack([obs["m"]] * 2)}
    )
    assert_twins_agree(pre, method, batch)
    assert_twins_agree(pre, "transform", obs)


def test_spaces_whose_range_overflows_int64_are_refused() -> None:
    with pytest.raises(ValueError, match="overflows int64"):
        _core.FlattenPlan(
            [{"kind": "discrete", "size": 2, "label": "D", "n": 2, "start": 2**63 - 1}], 0
        )


# ------------------------------------------------------------------ 2. arrays kept alive

RACE = """
import threading, numpy as np, gymnasium as gym, rlblocks as rb
space = gym.spaces.Dict({"a": gym.spaces.Box(-1e9, 1e9, (2000,), np.float64),
                         "b": gym.spaces.MultiDiscrete([4] * 8)})
pre = rb.get_preprocessor(space)(space)
B = 64
obs = [{"a": np.full(2000, float(i)), "b": np.full(8, i % 4)} for i in range(B)]
stop = False
def replace():
    k = 0
    while not stop:
        k += 1
        i = k % B
        obs[i] = {"a": np.full(2000, float(k % 1000)), "b": np.full(8, k % 4)}
t = threading.Thread(target=replace)
t.start()
try:
    for _ in range(3000):
        out = pre.transform_batch(list(obs) if _ % 2 else obs)
        a = out[:, :2000]
        assert (a == a[:, :1]).all(), "a row mixes values of two arrays: freed memory was read"
        hot = out[:, 2000:].reshape(B, 8, 4)
        assert (hot.sum(-1) == 1).all()
finally:
    stop = True
    t.join()
print("ok")
"""


def test_items_replaced_by_another_thread_stay_alive_while_the_kernel_reads_them() -> None:
    result = subprocess.run(
        [sys.executable, "-c", RACE], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


# ------------------------------------------------------------------ 3. containers that change

MUTATION = """
import numpy as np, gymnasium as gym, rlblocks as rb
from rlblocks.spaces import Repeated

class Clears:
    def __init__(self, holder): self.holder = holder
    def __index__(self):
        self.holder.clear()
        return 0
    __float__ = lambda self: float(self.__index__())
    def __len__(self):
        self.holder.clear()
        return 0

def run(space, make_obs):
    pre = rb.get_preprocessor(space)(space)
    for method in ("transform", "list"):
        results = []
        for impl in (pre._plan, pre._reference):
            o = make_obs()
            fn = impl.transform if method == "transform" else impl.transform_list
            try:
                results.append(fn(o if method == "transform" else [o]).tolist())
            except ValueError as e:
                results.append("ValueError")
        assert results[0] == results[1], (space, method, results)

def listed():
    o = [0, 0, 0]
    o[0] = Clears(o)
    return o

run(Repeated(gym.spaces.Discrete(1), 3), listed)
run(gym.spaces.MultiDiscrete([1, 1, 1]), listed)
run(gym.spaces.Tuple([gym.spaces.Discrete(1)] * 3), listed)
run(Repeated(gym.spaces.Tuple([gym.spaces.Discrete(1)] * 3), 2), lambda: [listed(), listed()])
def mapping():
    d = {"a": 0, "b": 0}
    d["a"] = Clears(d)  # clearing a dict while its values are read
    return d
run(gym.spaces.Dict({"a": gym.spaces.Discrete(1), "b": gym.spaces.Discrete(1)}), mapping)
print("ok")
"""


def test_an_index_that_empties_its_container_is_read_safely() -> None:
    result = subprocess.run(
        [sys.executable, "-c", MUTATION], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_a_dict_subclass_overriding_getitem_is_read_through_it() -> None:
    class Doubled(dict):
        def __getitem__(self, key):
            return super().__getitem__(key) * 2

    space = gym.spaces.Dict({"a": gym.spaces.Discrete(5)})
    pre = make(space)
    np.testing.assert_array_equal(pre.transform(Doubled(a=2)), np.eye(5, dtype=np.float32)[4])
    assert_twins_agree(pre, "list", [Doubled(a=1), {"a": 3}])


# ------------------------------------------------------------------ 4. byte order


@pytest.mark.parametrize("dtype", ["f8", "f4", "i2", "i4", "i8", "u2", "u4", "u8"])
@pytest.mark.parametrize("method", ["transform", "list", "batched"])
def test_non_native_byte_order_is_converted_never_reinterpreted(dtype: str, method: str) -> None:
    space = gym.spaces.Dict(
        {
            "box": gym.spaces.Box(0, 200, (3,), np.float64),
            "md": gym.spaces.MultiDiscrete([3, 3]),
            "d": gym.spaces.Discrete(3),
        }
    )
    pre = make(space)
    native_order = {"box": np.array([1, 2, 150]), "md": np.array([2, 1]), "d": np.array(1)}
    native_order = {k: v.astype("=" + dtype) for k, v in native_order.items()}
    swapped = {k: v.astype(v.dtype.newbyteorder()) for k, v in native_order.items()}
    assert swapped["box"].dtype.byteorder in "<>" and swapped["box"].dtype.byteorder != "="

    def form(obs):
        if method == "transform":
            return obs
        if method == "list":
            return [obs, obs]
        return {k: np.stack([v, v]).astype(v.dtype) for k, v in obs.items()}  # keeps the order

    expected = assert_twins_agree(pre, method, form(native_order))
    if method == "batched":
        assert form(swapped)["box"].dtype == swapped["box"].dtype
    got = assert_twins_agree(pre, method, form(swapped))
    np.testing.assert_array_equal(got[1], expected[1])


# ------------------------------------------------------------------ 5. what both twins accept


@pytest.mark.parametrize(
    "value, accepted",
    [
        (np.array([[2]]), False),  # a 2-d array is not a Discrete value
        (np.array(2), True),
        (np.complex128(1 + 2j), False),  # no silent truncation of the imaginary part
        (np.array(1 + 0j), False),
        (np.float16(2), True),
        (np.array(2, np.float16), True),
        (2.0, True),
        (2.5, False),
        ("2", False),
        (None, False),
        (2**70, False),
    ],
)
def test_discrete_values_both_twins_accept(value, accepted: bool) -> None:
    pre = make(gym.spaces.Discrete(3))
    result = assert_twins_agree(pre, "transform", value)
    assert (result[0] == "ok") == accepted, result


def test_float16_index_batches_and_complex_boxes() -> None:
    pre = make(gym.spaces.Tuple([gym.spaces.MultiDiscrete([3, 3]), gym.spaces.Box(-1, 1, (2,))]))
    ok = assert_twins_agree(pre, "batched", (np.array([[1, 2]], np.float16), np.zeros((1, 2))))
    assert ok[0] == "ok"
    for box in (np.zeros((1, 2), np.complex64), np.array([["0.5", "1"]])):
        bad = assert_twins_agree(pre, "batched", (np.array([[1, 2]]), box))
        assert bad[0] == "ValueError" and "real numbers" in bad[1]


def test_a_scalar_for_a_dict_is_a_value_error() -> None:
    pre = make(gym.spaces.Dict({"a": gym.spaces.Discrete(3)}))
    result = assert_twins_agree(pre, "transform", np.float32(1))
    assert result[0] == "ValueError" and "expected a dict" in result[1]


@pytest.mark.parametrize("ndim", [63, 64])
def test_a_64_dimensional_array_for_a_pass_through_box_is_a_value_error(ndim: int) -> None:
    pre = make(gym.spaces.Box(-1, 1, (2,)))
    x = np.zeros((1,) * ndim)
    for call in (
        lambda: pre.transform(x),
        lambda: pre.transform_batch(x),
        lambda: pre.transform_batch([x]),
        lambda: pre.write(x, np.zeros(2), 0),
    ):
        with pytest.raises(ValueError, match="expected"):
            call()
    with pytest.raises(ValueError, match="real numbers"):
        pre.transform(np.zeros(2, np.complex64))


@pytest.mark.parametrize("empty", [gym.spaces.Dict({}), gym.spaces.Tuple([])])
def test_the_batch_size_comes_from_the_first_child_that_holds_values(empty) -> None:
    space = gym.spaces.Tuple([empty, gym.spaces.Dict({"x": empty, "y": gym.spaces.Discrete(2)})])
    pre = make(space)
    value = {} if isinstance(empty, gym.spaces.Dict) else ()
    out = assert_twins_agree(pre, "batched", (value, {"x": value, "y": np.array([0, 1, 1])}))
    assert out[0] == "ok" and out[1].shape == (3, 2)
    nothing = make(gym.spaces.Tuple([empty]))
    result = assert_twins_agree(nothing, "batched", (value,))
    assert result[0] == "ValueError" and "holds no values" in result[1]


# ------------------------------------------------------------------ 6. scratch memory


def test_a_huge_batch_does_not_leave_its_scratch_memory_behind() -> None:
    space = Repeated(gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,))]), 4)
    pre = make(space)
    item = (1, np.zeros(2, np.float32))
    out = pre.transform_batch([[item] * 3] * 200_000)
    assert out.shape == (200_000, pre.size)
    assert _core._flatten_scratch_bytes() <= 11 * (1 << 20)
    pre.transform_batch([[item]] * 4)
    assert _core._flatten_scratch_bytes() <= 11 * (1 << 20)


# ------------------------------------------------------------------ the fuzzer


def test_spaces_of_the_fuzzer_are_accepted_by_both_twins_on_valid_samples() -> None:
    """A quick in-process pass over the fuzzer's valid inputs (the full differential run,
    in subprocesses, is tests/test_fuzz.py)."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "tools"))
    try:
        import fuzz_flatten
    finally:
        sys.path.pop(0)
    for seed in range(40):
        space, inputs = fuzz_flatten.case_inputs(seed)
        pre = make(space)
        if not hasattr(pre, "_plan"):
            continue
        for name, method, value in inputs:
            if name == "valid":
                result = assert_twins_agree(pre, method, value)
                # a batched structure without any leaf has no batch size to read
                assert result[0] == "ok" or "holds no values" in str(result[1]), (seed, method)
