"""RunningStat / MeanStdFilter: C++ against the numpy twin, exact merges, RLlib semantics."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
import rlblocks
from hypothesis import given, settings
from hypothesis import strategies as st
from rlblocks import _impl
from rlblocks._reference import filters as ref
from rlblocks.filters import (
    ConcurrentMeanStdFilter,
    MeanStdFilter,
    NoFilter,
    get_filter,
)
from rlblocks.running_stat import RunningStat

pytestmark = pytest.mark.native

IMPLS = ["native", "numpy"]


@pytest.fixture(params=IMPLS)
def impl(request):
    before = _impl.native()
    _impl.use_numpy_reference(request.param == "numpy")
    yield request.param
    _impl.use_numpy_reference(not before)


def all_data_stats(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 mean and unbiased variance over axis 0, the direct way."""
    data = data.astype(np.float64)
    return data.mean(axis=0), data.var(axis=0, ddof=1)


def assert_stat_close(stat: RunningStat, data: np.ndarray, rtol: float) -> None:
    mean, var = all_data_stats(data)
    assert stat.n == len(data)
    scale = np.abs(data).max(axis=0) + 1e-300
    np.testing.assert_allclose(stat.mean, mean, rtol=0, atol=rtol * scale.max())
    ssd = stat.state()["sum_sq_diff_array"]
    np.testing.assert_allclose(
        ssd,
        var * (len(data) - 1),
        rtol=rtol,
        atol=rtol * float((data.astype(np.float64) ** 2).sum()),
    )


# ---------------------------------------------------------------- RunningStat


shapes = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)


@settings(max_examples=40, deadline=None)
@given(
    shape=shapes,
    sizes=st.lists(st.integers(0, 70), min_size=1, max_size=4),
    seed=st.integers(0, 2**32 - 1),
    f32=st.booleans(),
)
def test_batch_push_equals_one_at_a_time(shape, sizes, seed, f32):
    rng = np.random.default_rng(seed)
    batches = [rng.normal(rng.uniform(-5, 5), rng.uniform(0.1, 3), size=(n, *shape)) for n in sizes]
    if f32:
        batches = [b.astype(np.float32) for b in batches]
    native = rlblocks._core.RunningStat(shape)
    twin_batched = ref.RunningStat(shape)
    oracle = ref.RunningStat(shape)  # RLlib's literal Welford, one row at a time
    for b in batches:
        native.push_batch(b)
        twin_batched.push_batch(b)
        for row in b:
            oracle.push(row)
    want = oracle.get_state()
    for got in (native.get_state(), twin_batched.get_state()):
        assert got["num_pushes"] == want["num_pushes"] == sum(sizes)
        assert got["num_pushes_delta"] == want["num_pushes_delta"]
        for key in ref._STATE_ARRAYS:
            scale = max(1.0, float(np.abs(want[key]).max(initial=0.0)))
            np.testing.assert_allclose(
                got[key], want[key], rtol=1e-12, atol=1e-12 * scale, err_msg=key
            )
    np.testing.assert_allclose(native.var, oracle.var, rtol=1e-6, atol=1e-30)


def test_running_stat_basic_values(impl):
    s = RunningStat((2,))
    assert s.n == 0 and s.var.tolist() == [0.0, 0.0] and s.var.dtype == np.float32
    s.push([1.0, 10.0])
    assert s.n == 1 and s.mean.tolist() == [1.0, 10.0] and s.std.tolist() == [0.0, 0.0]
    s.push_batch(np.array([[3.0, 10.0], [5.0, 10.0]]))
    assert s.mean.dtype == np.float64 and s.std.dtype == np.float32
    assert s.mean.tolist() == [3.0, 10.0] and s.var.tolist() == [4.0, 0.0]
    assert s.std.tolist() == [2.0, 0.0]
    c = s.copy()
    c.push([100.0, 100.0])
    assert s.n == 3 and c.n == 4


def test_scalar_shape_and_int_shape(impl):
    s = RunningStat()
    assert s.shape == ()
    for v in (1.0, 2.0, 3.0, 4.0):
        s.push(v)
    assert float(s.mean) == 2.5
    assert RunningStat(3).shape == (3,)


def test_large_batch_multi_block_independent_of_threads():
    rng = np.random.default_rng(1)
    data = rng.normal(2.0, 3.0, size=(20000, 7)).astype(np.float32)
    before = rlblocks.get_num_threads()
    try:
        states = []
        for threads in (1, 2):
            rlblocks.set_num_threads(threads)
            s = RunningStat((7,))
            s.push_batch(data)
            states.append(s.state())
    finally:
        rlblocks.set_num_threads(before)
    for key in ref._STATE_ARRAYS:
        np.testing.assert_array_equal(states[0][key], states[1][key])
    s = RunningStat((7,))
    s.push_batch(data)
    assert_stat_close(s, data, 1e-12)


@pytest.mark.parametrize(
    "bad",
    [
        np.array([1.0, np.nan, 3.0]),
        np.array([[1.0, 2.0, 3.0], [np.inf, 0.0, 0.0]]),
        np.zeros(4),
        np.zeros((2, 4)),
        np.zeros((2, 2, 3)),
        np.array(["a", "b", "c"]),
        np.array([1 + 2j, 0, 0]),
        [1.0, None, 2.0],
        "abc",
    ],
)
def test_running_stat_rejects_bad_input_and_changes_nothing(impl, bad):
    s = RunningStat((3,))
    s.push_batch(np.arange(6.0).reshape(2, 3))
    before = s.state()
    with pytest.raises(ValueError):
        if np.ndim(bad) == 2:
            s.push_batch(bad)
        else:
            s.push(bad)
    with pytest.raises(ValueError):
        s.push_batch(bad)
    after = s.state()
    assert after["num_pushes"] == before["num_pushes"] == 2
    for key in ref._STATE_ARRAYS:
        np.testing.assert_array_equal(after[key], before[key])


def test_nan_message_names_the_element():
    s = RunningStat((3,))
    with pytest.raises(ValueError, match=r"x\[1\]\[2\] is nan"):
        s.push_batch(np.array([[0.0, 1.0, 2.0], [0.0, 1.0, np.nan]]))
    with pytest.raises(ValueError, match=r"expected shape \(B, 3\), got \(3,\)"):
        s.push_batch(np.zeros(3))


def test_set_state_validates(impl):
    s = RunningStat((2,))
    good = s.state()
    for key, value in [
        ("num_pushes", -1),
        ("num_pushes", 1.5),
        ("mean_array", np.zeros(3)),
        ("sum_sq_diff_array", np.array([-1.0, 0.0])),
        ("mean_array", np.array([np.nan, 0.0])),
    ]:
        with pytest.raises(ValueError):
            s.set_state({**good, key: value})
    with pytest.raises(ValueError, match="missing key"):
        s.set_state({"num_pushes": 0})
    with pytest.raises(ValueError):
        s.set_state([1, 2])
    with pytest.raises(ValueError):
        RunningStat((2,)).update(RunningStat((3,)))


def test_update_merges_delta_state_and_keeps_own_delta(impl):
    rng = np.random.default_rng(3)
    a_data, b_data = rng.normal(size=(50, 3)), rng.normal(5, 2, size=(30, 3))
    a, b = RunningStat((3,)), RunningStat((3,))
    a.push_batch(a_data)
    b.push_batch(b_data)
    a_delta = {k: v for k, v in a.state().items() if "delta" in k}
    a.update(b)
    assert_stat_close(a, np.concatenate([a_data, b_data]), 1e-12)
    for k, v in a_delta.items():
        np.testing.assert_array_equal(a.state()[k], v)
    assert a.n_delta == 50
    a.update(a)  # merging a stat with itself uses a snapshot of its delta state
    assert a.n == 130


def test_update_across_backends():
    rng = np.random.default_rng(4)
    data = rng.normal(size=(40, 2))
    native = RunningStat((2,))
    _impl.use_numpy_reference(True)
    try:
        twin = RunningStat((2,))
    finally:
        _impl.use_numpy_reference(False)
    assert native.native and not twin.native
    native.push_batch(data[:10])
    twin.push_batch(data[10:])
    native.update(twin)
    assert_stat_close(native, data, 1e-12)


def test_running_stat_pickles(impl):
    s = RunningStat((2, 2))
    s.push_batch(np.arange(12.0).reshape(3, 2, 2))
    t = pickle.loads(pickle.dumps(s))
    assert t.native == s.native and t.n == 3
    np.testing.assert_array_equal(t.mean, s.mean)


# ---------------------------------------------------------------- merged workers


@pytest.mark.parametrize("num_workers", [1, 3, 8])
def test_n_workers_merged_equal_one_stat_over_all_data(impl, num_workers):
    rng = np.random.default_rng(num_workers)
    chunks = [
        rng.normal(rng.uniform(-100, 100), rng.uniform(0.01, 50), size=(n, 4, 3))
        for n in rng.integers(1, 400, size=num_workers)
    ]
    driver = RunningStat((4, 3))
    for chunk in chunks:
        w = RunningStat((4, 3))
        for part in np.array_split(chunk, 3):
            w.push_batch(part)
        driver.update(w)
    data = np.concatenate(chunks)
    mean, var = all_data_stats(data)
    assert driver.n == len(data)
    np.testing.assert_allclose(driver.mean, mean, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(
        driver.state()["sum_sq_diff_array"], var * (len(data) - 1), rtol=1e-10
    )
    np.testing.assert_allclose(driver.var, var.astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("num_workers,rounds", [(2, 3), (4, 5)])
def test_rllib_sync_protocol_over_rounds(impl, num_workers, rounds):
    """RolloutWorker.get_filters(flush_after=True) + FilterManager.synchronize, repeated."""
    rng = np.random.default_rng(10 * num_workers + rounds)
    shape = (5,)
    local = MeanStdFilter(shape)
    workers = [MeanStdFilter(shape) for _ in range(num_workers)]
    seen = []
    for _ in range(rounds):
        for w in workers:
            for _ in range(int(rng.integers(1, 4))):
                size = (int(rng.integers(1, 60)), *shape)
                batch = rng.normal(rng.uniform(-3, 3), rng.uniform(0.5, 2), size=size)
                if rng.random() < 0.3:
                    for row in batch:
                        w(row)
                else:
                    w(batch)
                seen.append(batch)
        # Each worker sends a snapshot, then flushes its buffer.
        snapshots = []
        for w in workers:
            snapshots.append(pickle.loads(pickle.dumps(w.as_serializable())))
            w.reset_buffer()
            assert w.buffer.n == 0
        for snap in snapshots:
            local.apply_changes(snap, with_buffer=False)
        for w in workers:
            w.sync(local.as_serializable())
        data = np.concatenate(seen)
        mean, var = all_data_stats(data)
        for f in [local, *workers]:
            assert f.running_stats.n == len(data)
            np.testing.assert_allclose(f.running_stats.mean, mean, rtol=1e-10, atol=1e-10)
            np.testing.assert_allclose(f.running_stats.var, var.astype(np.float32), rtol=1e-6)
        assert local.buffer.n == 0


def test_apply_changes_double_counts_like_rllib(impl):
    a = MeanStdFilter(())
    a(1.0)
    a(2.0)
    assert a.running_stats.n == 2 and float(a.running_stats.mean) == 1.5
    b = MeanStdFilter(())
    b(10.0)
    a.apply_changes(b, with_buffer=False)
    assert a.running_stats.n == 3
    assert float(a.running_stats.mean) == pytest.approx(13 / 3, rel=1e-15)
    a.apply_changes(b, with_buffer=False)
    assert a.running_stats.n == 4
    assert float(a.running_stats.mean) == pytest.approx(5.75, rel=1e-15)
    a.apply_changes(b, with_buffer=True)
    assert a.buffer.n == 1 and float(a.buffer.mean) == 10.0
    b(20.0)  # a's buffer is a copy, not b's object
    assert a.buffer.n == 1


# ---------------------------------------------------------------- MeanStdFilter


def manual_normalise(x, mean, std, clip):
    v = (np.asarray(x, np.float64) - mean) / (std + np.float32(1e-6)).astype(np.float64)
    if clip:
        v = np.clip(v, -clip, clip)
    return v.astype(np.float32)


def test_first_output_is_zero_and_update_then_normalise(impl):
    f = MeanStdFilter((3,))
    out = f(np.array([1.0, -2.0, 3.0]))
    assert out.dtype == np.float32 and out.tolist() == [0.0, 0.0, 0.0]
    x = np.array([3.0, 0.0, 3.0])
    out = f(x)
    rs = f.running_stats
    assert rs.n == 2
    np.testing.assert_array_equal(out, manual_normalise(x, rs.mean, rs.std, 10.0))


def test_batch_normalised_with_stats_after_whole_batch(impl):
    rng = np.random.default_rng(5)
    x = rng.normal(1, 2, size=(64, 6)).astype(np.float32)
    f = MeanStdFilter((6,), clip=None)
    out = f(x)
    rs = f.running_stats
    assert rs.n == 64 and f.buffer.n == 64
    np.testing.assert_allclose(
        out, manual_normalise(x, rs.mean, rs.std, None), rtol=1e-6, atol=1e-6
    )
    seq = MeanStdFilter((6,))
    for row in x:
        seq(row)
    for key in ref._STATE_ARRAYS:
        np.testing.assert_allclose(
            seq.running_stats.state()[key], rs.state()[key], rtol=1e-12, atol=1e-12
        )


@pytest.mark.parametrize(
    "demean,destd,clip",
    [
        (True, True, 10.0),
        (False, True, 10.0),
        (True, False, None),
        (False, False, 0.5),
        (True, True, 0.0),
        (True, True, 0.25),
    ],
)
def test_flags_and_clip(impl, demean, destd, clip):
    rng = np.random.default_rng(6)
    f = MeanStdFilter((4,), demean=demean, destd=destd, clip=clip)
    f(rng.normal(size=(10, 4)))
    x = rng.normal(0, 10, size=(5, 4))
    out = f(x, update=False)
    rs = f.running_stats
    assert rs.n == 10
    mean = rs.mean if demean else 0.0
    want = np.asarray(x, np.float64) - mean
    if destd:
        want = want / (rs.std + np.float32(1e-6)).astype(np.float64)
    if clip:
        want = np.clip(want, -clip, clip)
    np.testing.assert_allclose(out, want.astype(np.float32), rtol=1e-6, atol=1e-7)


def test_int_input_gives_float32_and_scalar_shape_gives_scalar(impl):
    f = MeanStdFilter((2,))
    f(np.array([1, 2], dtype=np.int64))
    out = f(np.array([3, 2], dtype=np.int64))
    assert out.dtype == np.float32 and out[0] > 0 and out[1] == 0
    g = MeanStdFilter(())
    r = g(5.0)
    assert isinstance(r, np.float32) and r == 0
    assert g(np.array([1.0, 2.0])).shape == (2,)  # a batch of two scalars


def test_out_and_in_place(impl):
    f = MeanStdFilter((3,))
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = np.empty((4, 3), np.float32)
    r = f(x, out=out)
    assert r is out or np.shares_memory(r, out)
    g = MeanStdFilter((3,))
    y = x.copy()
    g(y, out=y)  # exactly in place
    np.testing.assert_array_equal(y, out)


@pytest.mark.parametrize(
    "bad_out",
    [
        np.empty((4, 3), np.float64),
        np.empty((3, 3), np.float32),
        np.empty((4, 6), np.float32)[:, ::2],
        "out",
    ],
)
def test_bad_out_rejected_nothing_updated(impl, bad_out):
    f = MeanStdFilter((3,))
    with pytest.raises(ValueError, match="out"):
        f(np.ones((4, 3)), out=bad_out)
    assert f.running_stats.n == 0 and f.buffer.n == 0


def test_overlapping_out_rejected(impl):
    f = MeanStdFilter((3,))
    buf = np.zeros(15, np.float32)
    x = buf[:12].reshape(4, 3)
    out = buf[3:15].reshape(4, 3)
    with pytest.raises(ValueError, match="overlaps"):
        f(x, out=out)
    ro = np.zeros((4, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        f(np.ones((4, 3)), out=ro)
    assert f.running_stats.n == 0


@pytest.mark.parametrize(
    "bad",
    [
        np.array([[1.0, 2.0, np.nan]]),
        np.array([np.inf, 0, 0]),
        np.zeros((2, 4)),
        np.zeros((1, 1, 3)),
        np.array([["a", "b", "c"]]),
        None,
        {"a": 1},
    ],
)
def test_filter_rejects_bad_input(impl, bad):
    f = MeanStdFilter((3,))
    f(np.ones((2, 3)))
    before = f.state_dict()
    for update in (True, False):
        with pytest.raises(ValueError):
            f(bad, update=update)
    after = f.state_dict()
    for which in ("running_stats", "buffer"):
        assert after[which]["num_pushes"] == before[which]["num_pushes"]
        for key in ref._STATE_ARRAYS:
            np.testing.assert_array_equal(after[which][key], before[which][key])


def test_one_outlier_is_refused_and_the_filter_goes_on(impl):
    # 1e300 used to become the running mean; every later ordinary value's squared deviation
    # from it overflowed, so 5.0 and 6.0 were refused forever
    f = MeanStdFilter((1,), clip=None)
    with pytest.raises(ValueError, match=r"x\[\.\.\., 0\] = 1e\+300 cannot be added.*2\*\*479"):
        f(np.array([1e300]))
    assert f.running_stats.n == f.buffer.n == 0
    f(np.array([5.0]))
    out = f(np.array([6.0]))
    assert f.running_stats.n == f.buffer.n == 2
    assert f.running_stats.mean.tolist() == [5.5] and f.running_stats.var.tolist() == [0.5]
    np.testing.assert_allclose(out, [0.5 / (np.sqrt(np.float32(0.5)) + 1e-6)], rtol=1e-6)
    s = RunningStat((2,))
    for push in (s.push, s.push_batch):
        x = np.array([[1.0, -1e200]]) if push == s.push_batch else np.array([1.0, -1e200])
        with pytest.raises(ValueError, match=r"x\[\.\.\., 1\] = -1e\+200 cannot be added"):
            push(x)
    s.push(np.array([1.0, 2.0**479]))  # the edge of the range is tracked
    s.push(np.array([3.0, -(2.0**479)]))
    assert np.isfinite(s.mean).all() and s.n == 2


@pytest.mark.parametrize(
    "bad_args",
    [
        {"shape": None},
        {"shape": {"a": 1}},
        {"shape": (2, -1)},
        {"shape": "ab"},
        {"shape": (2,), "clip": -1.0},
        {"shape": (2,), "clip": float("nan")},
        {"shape": (2,), "clip": "big"},
    ],
)
def test_constructor_validation(impl, bad_args):
    with pytest.raises(ValueError):
        MeanStdFilter(**bad_args)


@settings(max_examples=30, deadline=None)
@given(
    shape=shapes,
    batch=st.integers(0, 40),
    seed=st.integers(0, 2**32 - 1),
    clip=st.sampled_from([None, 0.5, 3.0, 10.0]),
    demean=st.booleans(),
    destd=st.booleans(),
    f32=st.booleans(),
    single=st.booleans(),
)
def test_native_matches_numpy_twin(shape, batch, seed, clip, demean, destd, f32, single):
    rng = np.random.default_rng(seed)
    hist = rng.normal(rng.uniform(-3, 3), rng.uniform(0.1, 4), size=(batch, *shape))
    x = rng.normal(0, 3, size=shape if single else (batch, *shape))
    if f32:
        hist, x = hist.astype(np.float32), x.astype(np.float32)
    filters = []
    for numpy in (False, True):
        _impl.use_numpy_reference(numpy)
        try:
            f = MeanStdFilter(shape, demean=demean, destd=destd, clip=clip)
        finally:
            _impl.use_numpy_reference(False)
        out1 = f(hist)
        out2 = f(x)
        out3 = f(x, update=False)
        filters.append((f, out1, out2, out3))
    (fa, *outs_a), (fb, *outs_b) = filters
    assert fa.running_stats.native and not fb.running_stats.native
    for a, b in zip(outs_a, outs_b, strict=True):
        assert np.asarray(a).dtype == np.float32 and np.shape(a) == np.shape(b)
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=2e-6)
    sa, sb = fa.running_stats.state(), fb.running_stats.state()
    assert sa["num_pushes"] == sb["num_pushes"]
    for key in ref._STATE_ARRAYS:
        np.testing.assert_allclose(sa[key], sb[key], rtol=1e-11, atol=1e-11)


# ---------------------------------------------------------------- copy / sync / state


def test_copy_sync_reset_state_dict(impl):
    rng = np.random.default_rng(7)
    f = MeanStdFilter((2, 3), demean=False, clip=None)
    f(rng.normal(size=(20, 2, 3)))
    g = f.copy()
    assert type(g) is MeanStdFilter and g.shape == (2, 3) and not g.demean and g.clip is None
    g(rng.normal(size=(5, 2, 3)))
    assert f.running_stats.n == 20 and g.running_stats.n == 25
    h = MeanStdFilter((2, 3))
    h.sync(g)
    assert h.running_stats.n == 25 and h.buffer.n == 25 and h.clip is None and not h.demean
    h.reset_buffer()
    assert h.buffer.n == 0 and h.running_stats.n == 25
    d = h.state_dict()
    k = MeanStdFilter((2, 3))
    k.load_state_dict(d)
    assert k.running_stats.n == 25 and k.buffer.n == 0 and k.clip is None
    x = rng.normal(size=(3, 2, 3))
    np.testing.assert_array_equal(k(x, update=False), h(x, update=False))
    with pytest.raises(ValueError, match="shape"):
        MeanStdFilter((3,)).load_state_dict(d)
    with pytest.raises(ValueError, match="missing"):
        k.load_state_dict({"shape": [2, 3]})
    with pytest.raises(ValueError):
        k.sync(MeanStdFilter((4,)))
    p = pickle.loads(pickle.dumps(h))
    assert p.running_stats.n == 25 and p.running_stats.native == h.running_stats.native


def test_get_filter_and_nofilter(impl):
    f = get_filter("MeanStdFilter", (3,))
    assert isinstance(f, MeanStdFilter) and f.clip is None and not f.is_concurrent
    c = get_filter("ConcurrentMeanStdFilter", (3,))
    assert isinstance(c, ConcurrentMeanStdFilter) and c.clip is None and c.is_concurrent
    n = get_filter("NoFilter", (3,))
    assert isinstance(n, NoFilter)
    arr = np.ones(3)
    assert n(arr) is arr
    d = {"a": 1}
    assert n(d) is d
    assert n([1, 2]).tolist() == [1, 2]
    assert get_filter(lambda shape: ("custom", shape), (3,)) == ("custom", (3,))
    with pytest.raises(ValueError, match="Unknown observation_filter"):
        get_filter("Bogus", (3,))
    f(np.zeros((2, 3)))
    assert f(np.ones(3), update=False).min() > 1e5  # 1 / (0 + 1e-6): no clipping


# ---------------------------------------------------------------- threads


def test_concurrent_filter_from_threads(impl):
    rng = np.random.default_rng(8)
    chunks = [rng.normal(i, 1 + i, size=(200, 16)) for i in range(8)]
    f = ConcurrentMeanStdFilter((16,))
    errors = []

    def work(i):
        try:
            for part in np.array_split(chunks[i], 10):
                out = f(part)
                assert out.shape == part.shape
            if i % 2:  # readers racing with writers
                assert f.copy().running_stats.n <= 1600
                f.state_dict()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    data = np.concatenate(chunks)
    assert f.running_stats.n == f.buffer.n == len(data)
    mean, var = all_data_stats(data)
    np.testing.assert_allclose(f.running_stats.mean, mean, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(f.running_stats.var, var.astype(np.float32), rtol=1e-6)
    c = f.copy()
    assert isinstance(c, ConcurrentMeanStdFilter) and c.running_stats.n == len(data)
    p = pickle.loads(pickle.dumps(f))
    assert isinstance(p, ConcurrentMeanStdFilter) and p.running_stats.n == len(data)


def test_native_running_stat_is_atomic_under_threads():
    """Large batches release the GIL; concurrent pushes into one C++ stat stay exact."""
    rng = np.random.default_rng(9)
    chunks = [rng.normal(i, 2, size=(4096, 8)) for i in range(6)]
    s = RunningStat((8,))
    assert s.native

    def work(i):
        for part in np.array_split(chunks[i], 4):
            s.push_batch(part)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert_stat_close(s, np.concatenate(chunks), 1e-12)


def test_running_stat_from_state_round_trips_and_keeps_merging(impl):
    rng = np.random.default_rng(0)
    first, second = rng.normal(size=(50, 3)), rng.normal(size=(30, 3))
    stat = RunningStat((3,))
    stat.push_batch(first)
    copy = RunningStat.from_state((3,), stat.state())
    assert copy.n == stat.n == 50
    np.testing.assert_array_equal(copy.mean, stat.mean)
    np.testing.assert_array_equal(copy.std, stat.std)
    for x in second:  # both keep accumulating identically
        stat.push(x)
        copy.push(x)
    np.testing.assert_array_equal(copy.mean, stat.mean)
    np.testing.assert_allclose(copy.mean, np.concatenate([first, second]).mean(0), rtol=1e-12)
    with pytest.raises(ValueError):
        RunningStat.from_state((4,), stat.state())  # the shape does not fit
