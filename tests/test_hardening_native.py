"""Hardening, round 2 (issue 28): one regression test per defect class of the native layer.

1. Sizes and offsets never wrap: ``write`` with ``offset + size`` past int64, layouts, filter
   shapes, frame stacks, sequence batches and crop windows whose sizes overflow are refused
   with ValueError (all go through ``cpp/include/rlblocks/checked.hpp``).
3. ``out=`` aliasing an input: leaves that are views of the output buffer give the same
   result as separate arrays (native and numpy twin, list and batched input, B = 4 and 2000).
4. Running statistics never turn NaN/inf silently: a push whose moments or merge overflow
   float64 is refused (naming the column and value) before anything changes; huge values
   that do fit are taken (scaled sums), and a spread beyond float32 still normalises.
10. Library edges: pass-through ``out=`` dtypes, empty image batches, the twin's errors,
    ``load_state_dict`` counts, ``set_num_threads`` and flag types.

Crashing scenarios (a regression of item 1 overwrote memory before the array) run in a
subprocess, so a regression fails the test instead of killing pytest.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import rlblocks as rb
from rlblocks import _core, image
from rlblocks._reference import filters as ref_filters
from rlblocks.filters import MeanStdFilter
from rlblocks.framestack import FrameStacker
from rlblocks.running_stat import RunningStat
from rlblocks.spaces import Repeated

pytestmark = pytest.mark.native

INT64_MAX = 2**63 - 1


def make(space: gym.Space):
    return rb.get_preprocessor(space)(space)


DICT_SPACE = gym.spaces.Dict(
    {
        "a": gym.spaces.Discrete(3),
        "b": gym.spaces.Box(-1.0, 1.0, (4,), np.float32),
        "c": gym.spaces.MultiDiscrete([2, 3]),
    }
)  # flat layout: a 0..2, b 3..6, c 7..11


# ------------------------------------------------------------------ 1. checked sizes


@pytest.mark.parametrize("offset", [INT64_MAX, INT64_MAX - 3, 2**62, 2**64, -1])
def test_write_offset_past_int64_is_refused_and_nothing_is_written(impl, offset) -> None:
    pre = make(DICT_SPACE)
    guard = np.arange(40, dtype=np.float32)
    before = guard.copy()
    obs = {"a": 1, "b": np.ones(4, np.float32), "c": [1, 2]}
    with pytest.raises(ValueError, match="write: offset"):
        pre.write(obs, guard[8:], offset)
    assert np.array_equal(guard, before)


def test_write_offset_wrap_on_a_large_layout_does_not_crash() -> None:
    # 200k floats: before the fix the wrapped bounds check wrote ~800 KB before the array
    code = textwrap.dedent("""
        import gymnasium as gym, numpy as np, rlblocks as rb
        sp = gym.spaces.Box(-1, 1, (200_000,), np.float32)
        sp = gym.spaces.Dict({"x": sp})
        pre = rb.get_preprocessor(sp)(sp)
        buf = np.zeros(300_000, np.float32)
        try:
            pre.write({"x": np.ones(200_000, np.float32)}, buf[100_000:], 2**63 - 100_000)
        except ValueError as err:
            print("refused:", err)
        assert not buf.any()
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "refused: write: offset" in run.stdout


def test_write_at_the_exact_end_still_works(impl) -> None:
    pre = make(DICT_SPACE)
    buf = np.zeros(20, np.float32)
    pre.write({"a": 2, "b": np.full(4, 0.5, np.float32), "c": [0, 1]}, buf, 20 - pre.size)
    assert buf[20 - pre.size :].tolist() == [0, 0, 1, 0.5, 0.5, 0.5, 0.5, 1, 0, 0, 1, 0]


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.MultiDiscrete([2**62, 2**62]),
        gym.spaces.Tuple([gym.spaces.Discrete(2**62), gym.spaces.Discrete(2**62)]),
        Repeated(gym.spaces.Discrete(2**40), max_len=2**40),
        gym.spaces.Dict({"r": Repeated(gym.spaces.Discrete(2**32), max_len=2**31)}),
    ],
)
def test_layouts_whose_flat_size_exceeds_int64_are_refused(space) -> None:
    with pytest.raises(ValueError, match="does not fit in int64"):
        make(space)


def box_node(size: int, label: str) -> dict:
    return {
        "kind": "box",
        "size": size,
        "shape": [size],
        "map": "identity",
        "label": label,
        "children": [],
    }


def test_native_plan_refuses_offsets_that_overflow() -> None:
    # a hand-made layout (the plan's own checks, independent of the Python compiler)
    nodes = [
        box_node(2**62, "a"),
        box_node(2**62, "b"),
        {"kind": "tuple", "size": -(2**63), "children": [0, 1], "label": "t"},
    ]
    with pytest.raises(ValueError, match="flat offset"):
        _core.FlattenPlan(nodes, 2)
    rep = [
        box_node(2**40, "a"),
        {"kind": "repeated", "size": 1, "children": [0], "max_len": 2**40, "label": "r"},
    ]
    with pytest.raises(ValueError, match="max_len \\* item size"):
        _core.FlattenPlan(rep, 1)


@pytest.mark.parametrize("shape", [(2**40, 2**40), (0, 2**40, 2**40), (2**32,) * 3, (2**21, 2**20)])
def test_filter_shapes_that_wrap_or_cannot_be_allocated_are_refused(impl, shape) -> None:
    with pytest.raises(ValueError, match="shape: "):
        MeanStdFilter(shape)
    with pytest.raises(ValueError, match="shape: "):
        RunningStat(shape)


@pytest.mark.parametrize("frame_shape", [(2**32, 2**32), (2**32, 2**32, 2**32), (2**21, 2**21, 3)])
def test_frame_stacks_whose_size_wraps_are_refused(impl, frame_shape) -> None:
    with pytest.raises(ValueError, match="FrameStacker: num_envs \\* k"):
        FrameStacker(2, 4, frame_shape=frame_shape)


def test_sequence_padding_sizes_are_checked() -> None:
    leaf = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match=r"len\(seq_lens\) \* max_seq_len"):
        _core.pad_sequences([leaf], np.array([1, 1, 1]), 2**62, False, None)
    with pytest.raises(ValueError, match="seq_lens"):
        _core.pad_sequences([leaf], np.array([2**32]), 2**33, False, None)


def test_crop_windows_whose_end_overflows_are_refused() -> None:
    frames = np.zeros((1, 10, 10, 3), np.uint8)
    for top, left in ((INT64_MAX, 0), (0, INT64_MAX)):
        with pytest.raises(ValueError, match="must be non-empty and inside"):
            _core.image_crop(frames, top, left, 5, 5, np.zeros((1, 5, 5, 3), np.uint8))


# ------------------------------------------------------------------ 3. out= aliasing


def expected_rows(pre, obs_list) -> np.ndarray:
    """The rows computed from independent copies, one observation at a time."""
    return np.stack([pre.transform(o) for o in obs_list])


def copied(obs):
    if isinstance(obs, dict):
        return {k: copied(v) for k, v in obs.items()}
    if isinstance(obs, (list, tuple)):
        return type(obs)(copied(v) for v in obs)
    return np.array(obs, copy=True)


@pytest.mark.parametrize("batch", [4, 2000])
def test_batched_leaves_that_are_views_of_out_give_the_right_rows(impl, batch) -> None:
    pre = make(DICT_SPACE)
    rng = np.random.default_rng(batch)
    for lo in (3, 0, 5, 8):  # the leaf over its own slot, over the one-hot slots, shifted
        buf = rng.standard_normal((batch, pre.size)).astype(np.float32)
        buf[:, lo : lo + 4] = rng.uniform(-1, 1, (batch, 4))
        buf[:, 8:10] = rng.integers(0, 2, (batch, 2))  # "c" indices as float32 views too
        obs = {"a": np.arange(batch) % 3, "b": buf[:, lo : lo + 4], "c": buf[:, 8:10]}
        obs["c"] = np.where(obs["c"] > 1, 1, obs["c"])  # a copy: only b aliases here
        want = pre.transform_batch(copied(obs))
        got = pre.transform_batch(obs, out=buf)
        assert got is buf or np.shares_memory(got, buf)
        np.testing.assert_array_equal(buf, want)


@pytest.mark.parametrize("batch", [4, 2000])
def test_list_items_that_are_views_of_out_give_the_right_rows(impl, batch) -> None:
    pre = make(DICT_SPACE)
    rng = np.random.default_rng(batch)
    buf = rng.uniform(-1, 1, (batch, pre.size)).astype(np.float32)
    buf[:, 9:11] = rng.integers(0, 2, (batch, 2))
    # b reads row i's own slot 3..6; c reads row i's 9..10 (float32 indices) as one-hots
    obs = [{"a": i % 3, "b": buf[i, 3:7], "c": buf[i, 9:11]} for i in range(batch)]
    want = expected_rows(pre, copied(obs))
    pre.transform_batch(obs, out=buf)
    np.testing.assert_array_equal(buf, want)


def test_one_hot_and_repeated_leaves_aliasing_out(impl) -> None:
    space = gym.spaces.Dict(
        {
            "m": gym.spaces.MultiDiscrete([4, 4]),
            "r": Repeated(gym.spaces.Box(-5.0, 5.0, (2,), np.float32), max_len=3),
        }
    )  # m 0..7, r 8..14
    pre = make(space)
    batch = 6
    buf = np.zeros((batch, pre.size), np.float32)
    buf[:, 0:2] = np.arange(batch * 2).reshape(batch, 2) % 4
    buf[:, 9:15] = np.arange(batch * 6).reshape(batch, 6)
    lists = [buf[i, 9 : 9 + 2 * (i % 4)].reshape(-1, 2) for i in range(batch)]
    batched = {"m": buf[:, 0:2], "r": lists}
    want = pre.transform_batch(copied(batched))
    pre.transform_batch(batched, out=buf)
    np.testing.assert_array_equal(buf, want)


def test_write_from_a_view_of_the_target_array(impl) -> None:
    pre = make(DICT_SPACE)
    buf = np.linspace(-1, 1, 30, dtype=np.float32)
    buf[10:12] = [1, 2]
    obs = {"a": 2, "b": buf[5:9], "c": buf[10:12]}
    want = pre.transform(copied(obs))
    pre.write(obs, buf, 4)
    np.testing.assert_array_equal(buf[4 : 4 + pre.size], want)


def test_native_and_twin_agree_on_aliased_outputs() -> None:
    pre = make(DICT_SPACE)
    results = []
    for numpy_ref in (False, True):
        rb._impl.use_numpy_reference(numpy_ref)
        try:
            buf = np.random.default_rng(0).uniform(-1, 1, (64, pre.size)).astype(np.float32)
            obs = {"a": np.arange(64) % 3, "b": buf[:, 2:6], "c": np.ones((64, 2), np.int64)}
            results.append(pre.transform_batch(obs, out=buf).copy())
        finally:
            rb._impl.use_numpy_reference(False)
    np.testing.assert_array_equal(results[0], results[1])


# ------------------------------------------------------------------ 4. running statistics


def state_of(stat: RunningStat) -> dict:
    return {k: np.asarray(v).tolist() for k, v in stat.state().items()}


TRACKED = r"values beyond \+-2\*\*479 .* cannot be tracked"


@pytest.mark.parametrize("as_batch", [False, True])
def test_huge_values_one_at_a_time_never_poison_the_filter(impl, as_batch) -> None:
    f = MeanStdFilter((3,))
    for v in (1e308, -1e308, 1e308, 1.0, 1e145):
        x = np.array([0.5, v, 2.0])
        x = x[None] if as_batch else x
        before = (state_of(f.running_stats), state_of(f.buffer))
        if abs(v) > 2.0**479:  # refused when it arrives, nothing changed
            with pytest.raises(
                ValueError, match=rf"x\[\.\.\., 1\] = {re.escape(repr(v))}.*{TRACKED}"
            ):
                f(x)
            assert (state_of(f.running_stats), state_of(f.buffer)) == before
        else:
            assert np.isfinite(f(x)).all()
    assert f.running_stats.n == 1 and f.running_stats.mean[1] == 1.0


def test_opposite_extremes_of_the_tracked_range_are_taken_not_zeroed(impl) -> None:
    f = MeanStdFilter((2,), clip=None)
    f(np.array([2.0**479, 1.0]))
    out = f(np.array([-(2.0**479), 2.0]))  # the deviation 2**480 squared still fits
    assert np.isfinite(out).all() and out[0] < 0 and f.running_stats.n == 2
    for v in (5.0, 6.0):  # and ordinary values go on being taken
        assert np.isfinite(f(np.array([v, 3.0]))).all()
    assert f.running_stats.n == 4


def test_the_same_values_as_one_batch_are_refused_the_same_way(impl) -> None:
    s = RunningStat((2,))
    with pytest.raises(ValueError, match=rf"x\[\.\.\., 0\] = 1e\+308 cannot be added.*{TRACKED}"):
        s.push_batch(np.array([[1e308, 0.0], [-1e308, 1.0]]))
    assert s.n == 0


def test_values_at_the_edge_of_the_range_are_summed_exactly(impl) -> None:
    s = RunningStat((2,))
    edge = 2.0**479
    s.push_batch(np.array([[edge, 1.0], [edge, 3.0], [-edge, 5.0]]))
    assert s.n == 3 and np.isfinite(s.mean).all()
    np.testing.assert_allclose(s.mean, [edge / 3, 3.0], rtol=1e-15)
    one = RunningStat((2,))
    for row in ([edge, 1.0], [edge, 3.0], [-edge, 5.0]):
        one.push(np.array(row))
    np.testing.assert_allclose(one.mean, s.mean, rtol=1e-15)


def test_a_spread_beyond_float32_still_normalises(impl) -> None:
    f = MeanStdFilter((1,), clip=None)
    f(np.array([1e20]))
    out = f(np.array([-1e20]))  # var 2e40 > float32 max: float32 std is inf
    assert np.isinf(f.running_stats.std[0])
    # closed form: mean 0, std sqrt(2e40) = 1.414e20 -> -1e20 / 1.414e20
    np.testing.assert_allclose(out, [-1 / np.sqrt(2)], rtol=1e-6)


def test_denormal_values_are_ordinary_values(impl) -> None:
    f = MeanStdFilter((2,))
    for v in (5e-324, -5e-324, 1e-310):
        out = f(np.array([v, 1.0]))
        assert np.isfinite(out).all()
    assert f.running_stats.n == 3


def test_merges_of_tracked_stats_always_fit(impl) -> None:
    a, b = MeanStdFilter((2,)), MeanStdFilter((2,))
    for _ in range(3):
        a(np.array([2.0**479, 1.0]))
        b(np.array([-(2.0**479), 2.0]))
    a.apply_changes(b, with_buffer=False)
    assert a.running_stats.n == 6
    np.testing.assert_array_equal(a.running_stats.mean, [0.0, 1.5])
    assert np.isfinite(state_of(a.running_stats)["sum_sq_diff_array"]).all()


def test_filter_refusals_and_outputs_match_the_twin_bit_for_bit() -> None:
    rng = np.random.default_rng(7)
    pool = np.array([0.0, 1.0, -3.0, 1e308, -1e308, 1e300, -1e300, 5e-324, 1e20, 3.4e38])
    xs = [rng.choice(pool, size=3) for _ in range(40)]

    def run():
        f = MeanStdFilter((3,))
        out = []
        for x in xs:
            try:
                out.append(f(x).tobytes())
            except ValueError as err:
                out.append(str(err))
        return out, state_of(f.running_stats)

    native, twin = rb_both(run)
    assert native == twin


def rb_both(fn):
    before = rb._impl.native()
    try:
        rb._impl.use_numpy_reference(False)
        native = fn()
        rb._impl.use_numpy_reference(True)
        twin = fn()
    finally:
        rb._impl.use_numpy_reference(not before)
    return native, twin


def test_counts_that_would_overflow_int64_are_refused(impl) -> None:
    s = RunningStat((1,))
    s.push(np.array([1.0]))
    state = s.state()
    s.set_state({**state, "num_pushes": INT64_MAX, "num_pushes_delta": 1})
    with pytest.raises(ValueError, match="exceed int64"):
        s.push(np.array([1.0]))
    assert s.n == INT64_MAX


# ------------------------------------------------------------------ 10. library edges


def test_pass_through_out_must_hold_the_values(impl) -> None:
    pre = make(gym.spaces.Box(-1.0, 1.0, (3,), np.float32))
    x = np.full((2, 3), 0.7, np.float32)
    for bad in (np.zeros((2, 3), np.int8), np.zeros((2, 3), np.uint8), np.zeros((2, 3), bool)):
        with pytest.raises(ValueError, match=f"out: dtype {bad.dtype} cannot hold float32"):
            pre.transform_batch(x, out=bad)
        assert not bad.any()
    with pytest.raises(ValueError, match="out: expected a writeable numpy array.*got list"):
        pre.transform_batch(x, out=[[0.0] * 3] * 2)
    for ok in (np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float64)):
        assert pre.transform_batch(x, out=ok) is ok
        np.testing.assert_array_equal(ok, x.astype(ok.dtype))
    ints = make(gym.spaces.Box(0, 100, (3,), np.uint8))
    u8 = np.full((2, 3), 200, np.uint8)
    with pytest.raises(ValueError, match="out: dtype int8 cannot hold uint8"):
        ints.transform_batch(u8, out=np.zeros((2, 3), np.int8))
    out16 = np.zeros((2, 3), np.int16)
    assert ints.transform_batch(u8, out=out16) is out16 and (out16 == 200).all()
    with pytest.raises(ValueError, match="write: array: dtype int8 cannot hold float32"):
        pre.write(np.full(3, 0.7, np.float32), np.zeros(5, np.int8), 0)


def test_pixel_out_of_a_wrong_type_is_a_value_error() -> None:
    space = gym.spaces.Box(0, 255, (210, 160, 3), np.uint8)
    pre = rb.preprocessors.GenericPixelPreprocessor(space, {"dim": 42})
    with pytest.raises(ValueError, match="out: expected a writeable float32 array"):
        pre.transform_batch(np.zeros((1, 210, 160, 3), np.uint8), out=[0])


@pytest.mark.parametrize(
    "call",
    [
        lambda f: image.resize(f, 84),
        lambda f: image.gray_resize(f, 84),
        lambda f: image.generic_pixel(f, 42),
        lambda f: image.rgb_to_gray(f),
        lambda f: image.crop(f, 1, 2, 10, 20),
        lambda f: image.resize(f.astype(np.float32), (30, 40)),
    ],
)
def test_empty_image_batches_give_empty_batches(call) -> None:
    frames = np.zeros((0, 210, 160, 3), np.uint8)
    native, twin = rb_both(lambda: call(frames))
    assert native.shape[0] == 0 and native.shape == twin.shape and native.dtype == twin.dtype


def test_empty_palette_batches_give_empty_batches() -> None:
    native, twin = rb_both(
        lambda: image.palette_resize(
            np.zeros((0, 210, 160), np.uint8), np.zeros((256, 3), np.uint8), 84
        )
    )
    assert native.shape == twin.shape == (0, 84, 84, 1)


@pytest.mark.parametrize(
    "obs",
    [
        {"a": 1, "b": np.zeros((1, 4), np.float32), "c": np.zeros((1, 2), np.int64)},
        {"a": np.array(1), "b": np.zeros((1, 4), np.float32), "c": np.zeros((1, 2), np.int64)},
    ],
)
def test_a_leaf_without_the_batch_dimension_is_the_same_value_error(obs) -> None:
    pre = make(DICT_SPACE)

    def message():
        with pytest.raises(ValueError) as err:
            pre.transform_batch(obs)
        return str(err.value)

    native, twin = rb_both(message)
    assert native == twin and native.startswith('obs["a"]: expected')


def test_load_state_dict_with_a_count_beyond_int64_is_a_value_error(impl) -> None:
    f = MeanStdFilter((2,))
    f(np.array([1.0, 2.0]))
    state = f.state_dict()
    state["running_stats"] = {**state["running_stats"], "num_pushes": 2**70}
    before = f.state_dict()
    with pytest.raises(ValueError, match="num_pushes.*below 2\\*\\*63"):
        f.load_state_dict(state)
    assert f.state_dict()["running_stats"]["num_pushes"] == before["running_stats"]["num_pushes"]


@pytest.mark.parametrize("n", [1.5, 2.0, True, np.bool_(True), "2", None, 0, -1, 2**40])
def test_set_num_threads_refuses_non_integers(n) -> None:
    before = rb.get_num_threads()
    with pytest.raises(ValueError, match="set_num_threads: n must be an int"):
        rb.set_num_threads(n)
    assert rb.get_num_threads() == before


def test_set_num_threads_accepts_numpy_integers() -> None:
    before = rb.get_num_threads()
    try:
        rb.set_num_threads(np.int64(2))
        assert rb.get_num_threads() == 2
    finally:
        rb.set_num_threads(before)


@pytest.mark.parametrize("kwargs", [{"demean": "no"}, {"destd": 1}, {"demean": None}])
def test_filter_flags_must_be_bools(impl, kwargs) -> None:
    with pytest.raises(ValueError, match="expected True or False"):
        MeanStdFilter((2,), **kwargs)
    f = MeanStdFilter((2,), demean=np.bool_(False))
    assert f.demean is False
    with pytest.raises(ValueError, match="update: expected True or False"):
        f(np.zeros(2), update="no")
    state = f.state_dict()
    with pytest.raises(ValueError, match="state\\['destd'\\]: expected True or False"):
        f.load_state_dict({**state, "destd": "yes"})


def test_twin_shape_product_matches_native_rule() -> None:
    assert ref_filters.checked_product((0, 5), "x") == 0
    with pytest.raises(ValueError, match="x: 0 \\* 4294967296 \\* 4294967296 does not fit"):
        ref_filters.checked_product((0, 2**32, 2**32), "x")


# ------------------------------------------------------------------ every out= is checked


def test_every_kernel_checks_out_against_its_inputs(impl) -> None:
    """Flattening copies inputs that share memory with ``out`` (tested above); the image,
    frame-stack and filter kernels refuse a partial overlap with a ValueError, never a
    silently wrong result."""
    frames = np.zeros((2, 20, 20, 3), np.uint8)
    with pytest.raises(ValueError, match="overlap"):
        image.rgb_to_gray(frames, out=frames.reshape(-1)[:800].reshape(2, 20, 20, 1))
    pal = np.zeros((256, 3), np.uint8)
    index = np.zeros((1, 4, 4), np.uint8)
    with pytest.raises(ValueError, match="out must not overlap palette"):
        image.palette_resize(index, pal, 2, out=pal.reshape(-1)[:4].reshape(1, 2, 2, 1))
    fs = FrameStacker(1, 2, frame_shape=(4, 4), dtype=np.uint8, channels_last=True)
    out = np.arange(32, dtype=np.uint8).reshape(1, 4, 4, 2)
    with pytest.raises(ValueError, match="overlaps"):
        fs.reset(out.reshape(-1)[:16].reshape(1, 4, 4), out=out)
    want = np.repeat(out[..., :1], 2, axis=-1)  # a strided view is converted (copied) first
    np.testing.assert_array_equal(fs.reset(out[..., 0], out=out), want)
    f = MeanStdFilter((4,))
    x = np.zeros(8, np.float32)
    with pytest.raises(ValueError, match="overlaps"):
        f(x[:4], out=x[2:6])
    assert f.running_stats.n == 0


def test_sequence_lengths_beyond_int32_are_refused(impl) -> None:
    from rlblocks.sequences import _seq_lens_from_ids

    eps = np.zeros(3, np.int64)
    with pytest.raises(ValueError, match="max_seq_len: 4294967296 does not fit"):
        _seq_lens_from_ids(eps, None, None, 2**32)
    assert _seq_lens_from_ids(eps, None, None, 2**31 - 1).tolist() == [3]


def test_an_empty_batch_never_sizes_work_by_its_output() -> None:
    # a (0, 2**20, 2**20, 1) output is a valid empty array: nothing may be built for its size
    frames = np.zeros((0, 210, 160, 3), np.uint8)
    out = np.zeros((0, 2**20, 2**20, 1), np.uint8)
    _core.image_resize(frames, 2**20, 2**20, True, out, None)
    index = np.zeros((0, 210, 160), np.uint8)
    _core.image_palette_resize(index, np.zeros((256, 3), np.uint8), 2**20, 2**20, True, out, None)
    assert out.shape == (0, 2**20, 2**20, 1)


class _Two:
    def __index__(self) -> int:
        return 2


def test_a_list_of_index_objects_beside_an_array_is_read_alike() -> None:
    # found by the fuzzer (seeds 6293, 7859): the twin refused what the native core reads
    pre = make(Repeated(gym.spaces.MultiDiscrete([3, 3, 3]), max_len=3))
    obs = [[_Two(), 0, 1], np.array([1, 0, 2])]
    native, twin = rb_both(lambda: pre.transform(obs))
    np.testing.assert_array_equal(native, twin)
    item0 = [0, 0, 1, 1, 0, 0, 0, 1, 0]  # [2, 0, 1] as three one-hots of 3
    item1 = [0, 1, 0, 1, 0, 0, 0, 0, 1]  # [1, 0, 2]
    assert native.tolist() == [2] + item0 + item1 + [0] * 9
