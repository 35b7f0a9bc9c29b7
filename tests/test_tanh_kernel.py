"""The vectorised float32 tanh (``rlblocks._core.tanh``, AVX2) and ``tanh_cpu``: accuracy
against float64 numpy, special values, tails, ``out=`` handling, strided input, the pool."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from rlblocks import _core
from rlblocks.models.misc import tanh_cpu

pytestmark = pytest.mark.native

F32 = np.float32
TINY = np.finfo(F32).smallest_subnormal
SPECIALS = [
    0.0,
    -0.0,
    np.inf,
    -np.inf,
    np.nan,
    TINY,
    -TINY,
    3 * TINY,
    np.finfo(F32).tiny,
    -np.finfo(F32).tiny,
    np.finfo(F32).max,
    -np.finfo(F32).max,
    0.55,
    -0.55,
    np.nextafter(F32(0.55), F32(0)),
    np.nextafter(F32(0.55), F32(1)),
    9.0,
    9.01,
    -9.01,
    10.0,
    np.nextafter(F32(10), F32(0)),
    np.nextafter(F32(10), F32(11)),
    1e-4,
    1.0,
    -1.0,
    20.0,
    88.0,
    89.0,
    -1e30,
]


def ulp32(ref: np.ndarray) -> np.ndarray:
    """The float32 spacing at the (float64) reference value: 2^(exponent - 23), subnormal
    spacing below the normal range."""
    a = np.abs(ref)
    return 2.0 ** (np.floor(np.log2(np.maximum(a, 2.0**-126))) - 23)


def assert_within_2ulp(x: np.ndarray, y: np.ndarray) -> None:
    """``y = tanh(x)`` to 2 float32 ulp of float64 numpy, with the special values exact."""
    assert y.dtype == F32 and y.shape == x.shape
    x64, y64 = x.astype(np.float64).reshape(-1), y.astype(np.float64).reshape(-1)
    nan = np.isnan(x64)
    assert np.isnan(y64[nan]).all(), "nan must stay nan"
    ok = ~nan
    ref = np.tanh(x64[ok])
    err = np.abs(y64[ok] - ref) / ulp32(ref)
    assert err.max(initial=0.0) <= 2.0, (
        f"{err.max()} ulp at x={x64[ok][np.argmax(err)]!r}: got {y64[ok][np.argmax(err)]!r}, "
        f"float64 says {ref[np.argmax(err)]!r}"
    )
    # sign (including -0.0) and range
    assert (np.signbit(y64[ok]) == np.signbit(x64[ok])).all()
    assert (np.abs(y64[ok]) <= 1.0).all()
    inf = np.isinf(x64)
    assert (y64[inf] == np.sign(x64[inf])).all(), "+-inf must give +-1"


def bits_between(lo: float, hi: float, step: int = 1) -> np.ndarray:
    """Every ``step``-th float32 in ``[lo, hi)`` (lo, hi >= 0)."""
    a, b = np.array([lo, hi], F32).view(np.int32)
    return np.arange(a, b, step, dtype=np.int32).view(F32)


elements = st.one_of(
    st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.floats(-12.0, 12.0, width=32),
    st.floats(0.5, float(F32(0.6)), width=32).flatmap(lambda v: st.sampled_from([v, -v])),
    st.floats(float(F32(8.9)), float(F32(10.1)), width=32).flatmap(
        lambda v: st.sampled_from([v, -v])
    ),
    st.floats(float(F32(-1e-30)), float(F32(1e-30)), width=32, allow_subnormal=True),
    st.sampled_from([F32(v) for v in SPECIALS]),
)
float32_arrays = hnp.arrays(F32, st.integers(0, 300), elements=elements)


# --- accuracy ---------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(float32_arrays)
def test_within_2ulp_of_float64_for_any_float32(x):
    """Random lengths and values (specials, subnormals, near the 0.55 branch and 9-10)."""
    assert_within_2ulp(x, _core.tanh(x))


def test_within_2ulp_on_a_dense_grid_and_every_float_near_the_branches():
    """A dense linspace over [-12, 12] plus every float32 around the 0.55 polynomial/exp
    switch and where tanh starts rounding to 1 (9.01) and the clamp (10)."""
    grid = np.linspace(-12, 12, 240_001, dtype=F32)
    near = np.concatenate(
        [
            bits_between(0.545, 0.556),
            bits_between(8.99, 9.03, 3),
            bits_between(9.98, 10.02, 3),
            bits_between(0.0, 1e-3, 997),
        ]
    )
    x = np.concatenate([grid, near, -near, np.array(SPECIALS, F32)])
    assert_within_2ulp(x, _core.tanh(x))


def test_special_values_exactly():
    """-0 keeps its sign, nan stays nan, +-inf -> +-1, subnormals pass through unchanged."""
    x = np.array(
        [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, TINY, -TINY, 1e-40, 20.0, -50.0], F32
    )
    y = _core.tanh(x)
    assert y[0] == 0.0 and not np.signbit(y[0])
    assert y[1] == 0.0 and np.signbit(y[1])
    assert np.isnan(y[2]) and np.isnan(y[3])
    assert y[4] == 1.0 and y[5] == -1.0
    np.testing.assert_array_equal(y[6:9], x[6:9])
    assert y[9] == 1.0 and y[10] == -1.0


@settings(max_examples=30, deadline=None)
@given(float32_arrays)
def test_odd_symmetry_is_exact(x):
    """tanh(-x) == -tanh(x) bit for bit (the kernel works on |x| and puts the sign back)."""
    y, y_neg = _core.tanh(x), _core.tanh(-x)
    np.testing.assert_array_equal(
        (-y).view(np.int32)[~np.isnan(x)], y_neg.view(np.int32)[~np.isnan(x)]
    )


# --- lengths, layouts and out= ---------------------------------------------------------------
def test_every_length_gives_the_same_values_as_inside_a_long_array():
    """Tails (lengths not a multiple of 8) and every lane position give the same result as
    the same value inside a 1000-element array."""
    rng = np.random.default_rng(0)
    for n in range(41):
        x = np.concatenate([rng.normal(0, 3, n), rng.choice(SPECIALS, n)]).astype(F32)[:n]
        rng.shuffle(x)
        for pad in (0, 3, 7):
            big = rng.normal(0, 3, 1000).astype(F32)
            big[pad : pad + n] = x
            np.testing.assert_array_equal(_core.tanh(x), _core.tanh(big)[pad : pad + n])
        if n:
            singles = np.concatenate([_core.tanh(x[i : i + 1]) for i in range(n)])
            np.testing.assert_array_equal(_core.tanh(x), singles)


def test_scalar_and_multidimensional_shapes():
    """0-d and n-d inputs keep their shape."""
    x0 = np.array(0.3, F32)
    assert _core.tanh(x0).shape == () and _core.tanh(x0) == pytest.approx(np.tanh(0.3), rel=1e-6)
    x = np.random.default_rng(1).normal(0, 2, (3, 5, 7)).astype(F32)
    y = _core.tanh(x)
    assert y.shape == (3, 5, 7)
    np.testing.assert_array_equal(y.reshape(-1), _core.tanh(x.reshape(-1)))
    assert _core.tanh(np.empty((0, 4), F32)).shape == (0, 4)


def test_in_place_out_is_the_input():
    """``out=x`` overwrites x and returns it; a separate out is filled and returned."""
    x = np.random.default_rng(2).normal(0, 3, 123).astype(F32)
    expected = _core.tanh(x.copy())
    assert not np.array_equal(x, expected)
    res = _core.tanh(x, out=x)
    assert res is x
    np.testing.assert_array_equal(x, expected)
    src = np.random.default_rng(3).normal(0, 3, (4, 9)).astype(F32)
    keep = src.copy()
    out = np.full((4, 9), np.nan, F32)
    assert _core.tanh(src, out=out) is out
    np.testing.assert_array_equal(out, _core.tanh(keep))
    np.testing.assert_array_equal(src, keep)  # the input is untouched


def test_non_contiguous_inputs():
    """Strided, transposed, Fortran-ordered and broadcast views give the values of their
    contiguous copies (a new C-contiguous array of the view's shape)."""
    base = np.random.default_rng(4).normal(0, 3, (20, 30)).astype(F32)
    views = [
        base[::3],
        base[:, ::2],
        base.T,
        np.asfortranarray(base),
        base[::-1, 5:17],
        np.broadcast_to(base[0], (4, 30)),
    ]
    for v in views:
        y = _core.tanh(v)
        assert y.shape == v.shape and y.flags.c_contiguous
        np.testing.assert_array_equal(y, _core.tanh(np.ascontiguousarray(v)))
    # a strided input whose memory a (contiguous) out overlaps: the input is read first
    buf = np.random.default_rng(5).normal(0, 3, 100).astype(F32)
    x = buf[::2]
    expected = _core.tanh(x.copy())
    _core.tanh(x, out=buf[:50])
    np.testing.assert_array_equal(buf[:50], expected)


def _read_only(shape):
    a = np.zeros(shape, F32)
    a.flags.writeable = False
    return a


BAD_OUT = r"out must be a writeable C-contiguous float32 array of shape \(10,\), got "


@pytest.mark.parametrize(
    "make_out, fragment",
    [
        (lambda x: np.empty(9, F32), BAD_OUT + r"float32 array of shape \(9,\)"),
        (lambda x: np.empty((2, 5), F32), BAD_OUT + r"float32 array of shape \(2, 5\)"),
        (lambda x: np.empty(10, np.float64), BAD_OUT + r"float64 array"),
        (lambda x: np.empty(10, np.int32), BAD_OUT + r"int32 array"),
        (lambda x: [0.0] * 10, BAD_OUT + r"list"),
        (lambda x: torch.zeros(10), BAD_OUT + r"Tensor"),
        (lambda x: _read_only(10), BAD_OUT + r"read-only float32 array"),
    ],
    ids=["short", "2d", "float64", "int32", "list", "tensor", "read-only"],
)
def test_bad_out_is_a_clear_error(make_out, fragment):
    x = np.linspace(-1, 1, 10, dtype=F32)
    with pytest.raises(ValueError, match="^tanh: " + fragment):
        _core.tanh(x, out=make_out(x))


@pytest.mark.parametrize("shift", [1, -1, 7, -9])
def test_partly_overlapping_out_is_refused(shift):
    """out sharing some (not all) of the input's memory would read overwritten values."""
    buf = np.linspace(-3, 3, 40, dtype=F32)
    keep = buf.copy()
    x = buf[10:20]
    out = buf[10 + shift : 20 + shift]
    with pytest.raises(ValueError, match="out partly overlaps the input"):
        _core.tanh(x, out=out)
    np.testing.assert_array_equal(buf, keep)  # nothing written
    # adjacent, not overlapping: fine
    _core.tanh(buf[0:10], out=buf[10:20])
    np.testing.assert_array_equal(buf[10:20], _core.tanh(keep[0:10]))


def test_strided_or_fortran_out_is_refused_as_non_contiguous():
    """out is written as one C-ordered block: a strided or Fortran-ordered out is refused
    with a message that says so."""
    x = np.zeros((4, 5), F32)
    for out in (np.empty((4, 10), F32)[:, ::2], np.asfortranarray(np.empty((4, 5), F32))):
        with pytest.raises(
            ValueError,
            match="^tanh: out must be a writeable C-contiguous .*, got non-contiguous float32",
        ):
            _core.tanh(x, out=out)


def test_equivalent_float32_dtypes_are_accepted():
    """An unpickled array and one whose float32 dtype carries metadata are float32 too."""
    x = np.linspace(-3, 3, 37, dtype=F32)
    expected = _core.tanh(x)
    unpickled = pickle.loads(pickle.dumps(x))
    np.testing.assert_array_equal(_core.tanh(unpickled), expected)
    tagged = x.astype(np.dtype(F32, metadata={"unit": "rad"}))
    np.testing.assert_array_equal(_core.tanh(tagged), expected)
    out = pickle.loads(pickle.dumps(np.empty_like(x)))
    _core.tanh(x, out=out)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros(4, np.float64),
        np.zeros(4, np.float16),
        np.zeros(4, np.int32),
        np.zeros(4, ">f4"),
        [0.5, 1.0],
    ],
    ids=["float64", "float16", "int32", "big-endian", "list"],
)
def test_non_float32_input_is_refused(bad):
    with pytest.raises(ValueError, match="tanh: expected float32, got dtype"):
        _core.tanh(bad)


# --- large arrays (thread pool, GIL released) -------------------------------------------------
@pytest.mark.parametrize("threads", [1, 2, 4])
def test_large_arrays_equal_small_calls(threads):
    """300k elements (split over the pool) equal the element-wise results of small calls."""
    rng = np.random.default_rng(6)
    n = 300_003
    x = rng.normal(0, 4, n).astype(F32)
    x[rng.integers(0, n, 500)] = rng.choice(SPECIALS, 500)
    before = _core.get_num_threads()
    try:
        _core.set_num_threads(threads)
        y = _core.tanh(x)
        out = np.empty_like(x)
        _core.tanh(x, out=out)
        inplace = x.copy()
        _core.tanh(inplace, out=inplace)
    finally:
        _core.set_num_threads(before)
    small = np.concatenate([_core.tanh(x[i : i + 1001]) for i in range(0, n, 1001)])
    np.testing.assert_array_equal(y, small)
    np.testing.assert_array_equal(out, small)
    np.testing.assert_array_equal(inplace, small)
    assert_within_2ulp(x, y)


def test_concurrent_callers_get_their_own_results():
    """Python threads calling at once (the GIL is released; one of them gets the pool, the
    others run inline) each get the right values."""
    rng = np.random.default_rng(7)
    inputs = [rng.normal(0, 3, 150_000 + i).astype(F32) for i in range(4)]
    expected = [
        np.concatenate([_core.tanh(x[i : i + 997]) for i in range(0, x.size, 997)]) for x in inputs
    ]
    results: list = [None] * 4

    def work(i: int) -> None:
        for _ in range(3):
            results[i] = _core.tanh(inputs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected, strict=True):
        np.testing.assert_array_equal(got, want)


# --- tanh_cpu ---------------------------------------------------------------------------------
def test_tanh_cpu_float32_uses_the_kernel():
    """float32 tensors: the kernel's values (not torch's), a new tensor, the input untouched."""
    x = torch.randn(7, 33) * 3
    keep = x.clone()
    y = tanh_cpu(x)
    assert y.dtype == torch.float32 and y.shape == x.shape and y.data_ptr() != x.data_ptr()
    np.testing.assert_array_equal(y.numpy(), _core.tanh(keep.numpy()))
    torch.testing.assert_close(x, keep, rtol=0, atol=0)
    torch.testing.assert_close(y, torch.tanh(keep), rtol=3e-7, atol=1e-7)


def test_tanh_cpu_in_place():
    """``inplace=True`` writes into x and returns x itself (float32 and float64)."""
    for dtype in (torch.float32, torch.float64):
        x = torch.linspace(-6, 6, 101, dtype=dtype)
        expected = tanh_cpu(x.clone())
        ptr = x.data_ptr()
        res = tanh_cpu(x, inplace=True)
        assert res is x and x.data_ptr() == ptr
        torch.testing.assert_close(x, expected, rtol=0, atol=0)


def test_tanh_cpu_float64_is_numpy():
    x = torch.randn(5, 17, dtype=torch.float64) * 4
    y = tanh_cpu(x)
    assert y.dtype == torch.float64
    np.testing.assert_array_equal(y.numpy(), np.tanh(x.numpy()))


def test_tanh_cpu_strided_and_grad_tensors():
    """A transposed view and a tensor that requires grad (read through ``detach``)."""
    x = (torch.randn(6, 10) * 3).t()
    np.testing.assert_array_equal(tanh_cpu(x).numpy(), _core.tanh(np.ascontiguousarray(x.numpy())))
    w = torch.randn(20, requires_grad=True)
    y = tanh_cpu(w)
    assert not y.requires_grad
    np.testing.assert_array_equal(y.numpy(), _core.tanh(w.detach().numpy()))
