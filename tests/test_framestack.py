"""FrameStacker: C++ against the numpy twin and an RLlib-style deque oracle; bad input."""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np
import pytest
import rlblocks
from hypothesis import given, settings
from hypothesis import strategies as st
from rlblocks import _impl
from rlblocks._reference import framestack as ref
from rlblocks.framestack import FrameStacker, stacked_space

pytestmark = pytest.mark.native


@pytest.fixture(params=["native", "numpy"])
def impl(request):
    before = _impl.native()
    _impl.use_numpy_reference(request.param == "numpy")
    yield request.param
    _impl.use_numpy_reference(not before)


class DequeOracle:
    """RLlib's FrameStack, one deque per env: reset appends k times, step appends once."""

    def __init__(self, num_envs, k, channels_last):
        self.k, self.channels_last = k, channels_last
        self.frames = [deque(maxlen=k) for _ in range(num_envs)]

    def reset(self, env, frame):
        for _ in range(self.k):
            self.frames[env].append(frame)

    def step(self, env, frame):
        self.frames[env].append(frame)

    def obs(self, env):
        frames = [f if f.ndim == 3 else f[:, :, None] for f in self.frames[env]]
        stacked = np.concatenate(frames, axis=2)
        return stacked if self.channels_last else np.moveaxis(stacked, 2, 0)

    def all_obs(self, envs=None):
        envs = range(len(self.frames)) if envs is None else envs
        return np.stack([self.obs(e) for e in envs])


def random_frames(rng, n, frame_shape, dtype):
    if np.dtype(dtype) == np.bool_:
        return rng.random((n, *frame_shape)) < 0.5
    if np.dtype(dtype).kind == "f":
        return rng.normal(size=(n, *frame_shape)).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=(n, *frame_shape), endpoint=True, dtype=dtype)


frame_shapes = st.tuples(st.integers(1, 5), st.integers(1, 5)) | st.tuples(
    st.integers(1, 4), st.integers(1, 4), st.integers(1, 5)
)
dtypes = st.sampled_from([np.uint8, np.int8, np.uint16, np.int32, np.float32, np.float64, np.bool_])


@settings(max_examples=60, deadline=None)
@given(
    num_envs=st.integers(1, 5),
    k=st.sampled_from([1, 2, 3, 4, 5, 8, 9, 12]),
    frame_shape=frame_shapes,
    dtype=dtypes,
    channels_last=st.booleans(),
    steps=st.integers(0, 12),
    seed=st.integers(0, 2**32 - 1),
)
def test_native_twin_and_deque_oracle_agree(
    num_envs, k, frame_shape, dtype, channels_last, steps, seed
):
    rng = np.random.default_rng(seed)
    native = rlblocks._core.FrameStacker(num_envs, k, frame_shape, np.dtype(dtype), channels_last)
    twin = ref.FrameStacker(num_envs, k, frame_shape, dtype, channels_last)
    oracle = DequeOracle(num_envs, k, channels_last)
    first = random_frames(rng, num_envs, frame_shape, dtype)
    outs = [native.reset(first), twin.reset(first)]
    for e in range(num_envs):
        oracle.reset(e, first[e])
    for o in outs:
        np.testing.assert_array_equal(o, oracle.all_obs())
    for _ in range(steps):
        frames = random_frames(rng, num_envs, frame_shape, dtype)
        action = rng.integers(0, 3)
        copy = channels_last or bool(rng.integers(2))  # channels-first: views in place too
        if action == 0:  # plain step
            got = [native.push(frames, copy=copy), twin.push(frames)]
            for e in range(num_envs):
                oracle.step(e, frames[e])
            want = oracle.all_obs()
        elif action == 1:  # step with autoreset of some envs
            mask = rng.random(num_envs) < 0.4
            got = [native.push(frames, mask, copy=copy), twin.push(frames, mask)]
            for e in range(num_envs):
                (oracle.reset if mask[e] else oracle.step)(e, frames[e])
            want = oracle.all_obs()
        else:  # explicit reset of a subset
            ids = rng.permutation(num_envs)[: rng.integers(0, num_envs + 1)]
            sub = frames[: len(ids)]
            got = [native.reset(sub, ids), twin.reset(sub, ids)]
            for i, e in enumerate(ids):
                oracle.reset(int(e), sub[i])
            want = (
                oracle.all_obs(ids.tolist())
                if len(ids)
                else np.empty((0, *native.observation_shape), dtype)
            )
        for g in got:
            assert g.dtype == np.dtype(dtype)
            np.testing.assert_array_equal(g, want)
        np.testing.assert_array_equal(native.observation(), oracle.all_obs())
        np.testing.assert_array_equal(twin.observation(), oracle.all_obs())


def test_channels_first_views_in_place(impl):
    fs = FrameStacker(3, k=4, frame_shape=(6, 5, 2), dtype=np.int16, channels_last=False)
    rng = np.random.default_rng(0)
    fs.reset(random_frames(rng, 3, (6, 5, 2), np.int16))
    for _ in range(6):  # past the ring's wrap-around
        frames = random_frames(rng, 3, (6, 5, 2), np.int16)
        copied = fs.observation()
        view = fs.push(frames, copy=False)
        assert view.shape == (3, 8, 6, 5) and view.dtype == np.int16
        assert not view.flags.writeable
        np.testing.assert_array_equal(view[:, :6], copied[:, 2:])  # shifted by one frame
        np.testing.assert_array_equal(view[:, 6:], np.moveaxis(frames, -1, 1))
        np.testing.assert_array_equal(view, fs.observation())
        with pytest.raises(ValueError, match="read-only"):
            view[0, 0, 0, 0] = 1
    del fs
    assert int(view.sum()) == int(view.copy().sum())  # the view keeps its memory alive


def test_copy_false_errors_change_nothing(impl):
    last = FrameStacker(2, k=2, frame_shape=(3, 3))
    last.reset(np.zeros((2, 3, 3), np.uint8))
    with pytest.raises(ValueError, match="copy=False needs channels_last=False"):
        last.push(np.ones((2, 3, 3), np.uint8), copy=False)
    first = FrameStacker(2, k=2, frame_shape=(3, 3), channels_last=False)
    first.reset(np.zeros((2, 3, 3), np.uint8))
    with pytest.raises(ValueError, match="exclude each other"):
        first.push(np.ones((2, 3, 3), np.uint8), out=np.empty((2, 2, 3, 3), np.uint8), copy=False)
    for stacker in (last, first):
        assert not stacker.observation().any()


def test_rllib_layout_84x84(impl):
    fs = FrameStacker(2, 4, (84, 84, 1))
    assert fs.observation_shape == (84, 84, 4) and fs.native == (impl == "native")
    obs = fs.reset(np.stack([np.full((84, 84, 1), 1, np.uint8), np.full((84, 84, 1), 2, np.uint8)]))
    assert obs.shape == (2, 84, 84, 4) and (obs[0] == 1).all() and (obs[1] == 2).all()
    for t in range(3, 8):
        obs = fs.push(np.full((2, 84, 84, 1), t, np.uint8))
    assert obs[0, 5, 7].tolist() == [4, 5, 6, 7]
    cf = FrameStacker(1, 4, (84, 84), channels_last=False)
    cf.reset(np.zeros((1, 84, 84), np.uint8))
    obs = cf.push(np.full((1, 84, 84), 9, np.uint8))
    assert obs.shape == (1, 4, 84, 84) and obs[0, :, 3, 3].tolist() == [0, 0, 0, 9]


def test_out_is_reused_without_allocation(impl):
    fs = FrameStacker(3, 4, (6, 5, 2), dtype=np.float32)
    out = np.empty((3, 6, 5, 8), np.float32)
    r = fs.reset(np.ones((3, 6, 5, 2), np.float32), out=out)
    assert r is out or np.shares_memory(r, out)
    for _ in range(5):
        r = fs.push(np.zeros((3, 6, 5, 2), np.float32), out=out)
        assert r is out or np.shares_memory(r, out)
    assert (out == 0).all()
    r = fs.observation(out=out)
    assert r is out or np.shares_memory(r, out)


def test_unaligned_out_and_strided_frames(impl):
    """Frames of 4 uint8 channels move as 4-byte units; an out at an odd address and
    non-contiguous frames must still give the exact result."""
    rng = np.random.default_rng(0)
    fs = FrameStacker(2, 3, (5, 7, 4))
    oracle = DequeOracle(2, 3, True)
    raw = np.zeros(2 * 5 * 7 * 12 + 1, np.uint8)
    out = raw[1:].reshape(2, 5, 7, 12)
    assert out.ctypes.data % 4 != 0 and out.flags.c_contiguous
    big = rng.integers(0, 256, size=(2, 10, 7, 4), dtype=np.uint8)
    first = big[:, ::2]  # strided view
    fs.reset(first, out=out)
    for e in range(2):
        oracle.reset(e, first[e])
    np.testing.assert_array_equal(out, oracle.all_obs())
    for _ in range(4):
        frames = rng.integers(0, 256, size=(2, 5, 7, 4), dtype=np.uint8)[:, :, ::-1]
        fs.push(frames, out=out)
        for e in range(2):
            oracle.step(e, frames[e])
        np.testing.assert_array_equal(out, oracle.all_obs())


def test_safe_cast_accepted_unsafe_rejected(impl):
    fs = FrameStacker(1, 2, (2, 2))
    obs = fs.reset(np.ones((1, 2, 2), dtype=bool))
    assert obs.dtype == np.uint8 and (obs == 1).all()
    with pytest.raises(ValueError, match="safely"):
        fs.push([[[1, 2], [3, 4]]])  # numpy makes int64 of it: not safe to cast to uint8
    obs = fs.push(np.array([[[1, 2], [3, 4]]], np.uint8))
    assert obs[0, 1, 1].tolist() == [1, 4]


def test_large_batch_threads_identical():
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 256, size=(64, 84, 84), dtype=np.uint8) for _ in range(6)]
    before = rlblocks.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            rlblocks.set_num_threads(threads)
            fs = FrameStacker(64, 4, (84, 84))
            fs.reset(frames[0])
            for f in frames[1:]:
                obs = fs.push(f)
            results.append(obs)
    finally:
        rlblocks.set_num_threads(before)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0][..., 3], frames[-1])
    np.testing.assert_array_equal(results[0][..., 0], frames[-4])


def snapshot(fs):
    return fs.observation().copy()


@pytest.mark.parametrize(
    "call",
    [
        lambda fs: fs.push(np.zeros((3, 4, 5), np.uint8)),  # wrong H
        lambda fs: fs.push(np.zeros((2, 4, 4), np.uint8)),  # wrong B
        lambda fs: fs.push(np.zeros((3, 4, 4, 1), np.uint8)),  # extra channel axis
        lambda fs: fs.push(np.zeros((3, 4, 4), np.int64)),  # unsafe cast
        lambda fs: fs.push(np.zeros((3, 4, 4), np.float32)),
        lambda fs: fs.push(np.zeros((3, 4, 4), np.uint8), reset_mask=[1, 0, 0]),
        lambda fs: fs.push(np.zeros((3, 4, 4), np.uint8), reset_mask=np.zeros(2, bool)),
        lambda fs: fs.push(np.zeros((3, 4, 4), np.uint8), out=np.empty((3, 4, 4, 3), np.uint8)),
        lambda fs: fs.push(np.zeros((3, 4, 4), np.uint8), out=np.empty((3, 4, 4, 2), np.uint16)),
        lambda fs: fs.push(
            np.zeros((3, 4, 4), np.uint8), out=np.empty((3, 4, 4, 4), np.uint8)[..., ::2]
        ),
        lambda fs: fs.push(np.zeros((3, 4, 4), np.uint8), out=[0]),
        lambda fs: fs.push("frames"),
        lambda fs: fs.reset(np.zeros((1, 4, 4), np.uint8), env_ids=[3]),
        lambda fs: fs.reset(np.zeros((1, 4, 4), np.uint8), env_ids=[-1]),
        lambda fs: fs.reset(np.zeros((2, 4, 4), np.uint8), env_ids=[1, 1]),
        lambda fs: fs.reset(np.zeros((1, 4, 4), np.uint8), env_ids=[0.5]),
        lambda fs: fs.reset(np.zeros((2, 4, 4), np.uint8), env_ids=[0]),
        lambda fs: fs.reset(np.zeros((1, 4, 4), np.uint8), env_ids=[[0]]),
        lambda fs: fs.observation(out=np.empty((3, 4, 4, 2), np.int8)),
    ],
)
def test_bad_input_raises_and_changes_nothing(impl, call):
    fs = FrameStacker(3, 2, (4, 4))
    rng = np.random.default_rng(2)
    fs.reset(rng.integers(0, 256, size=(3, 4, 4), dtype=np.uint8))
    fs.push(rng.integers(0, 256, size=(3, 4, 4), dtype=np.uint8))
    before = snapshot(fs)
    with pytest.raises(ValueError):
        call(fs)
    np.testing.assert_array_equal(snapshot(fs), before)
    nxt = rng.integers(0, 256, size=(3, 4, 4), dtype=np.uint8)
    after = fs.push(nxt)  # the ring position did not move either
    np.testing.assert_array_equal(after[..., 0], before[..., 1])
    np.testing.assert_array_equal(after[..., 1], nxt)


def test_read_only_and_overlapping_out(impl):
    fs = FrameStacker(1, 2, (2, 2))
    fs.reset(np.zeros((1, 2, 2), np.uint8))
    ro = np.empty((1, 2, 2, 2), np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        fs.push(np.zeros((1, 2, 2), np.uint8), out=ro)
    buf = np.zeros(8, np.uint8)
    with pytest.raises(ValueError, match="overlaps"):
        fs.push(buf[:4].reshape(1, 2, 2), out=buf.reshape(1, 2, 2, 2))


def test_push_before_reset(impl):
    fs = FrameStacker(2, 3, (2, 2))
    with pytest.raises(ValueError, match="env 0 has no frames"):
        fs.push(np.zeros((2, 2, 2), np.uint8))
    with pytest.raises(ValueError, match="no frames"):
        fs.observation()
    fs.reset(np.ones((1, 2, 2), np.uint8), env_ids=[0])
    with pytest.raises(ValueError, match="env 1 has no frames"):
        fs.push(np.zeros((2, 2, 2), np.uint8))
    obs = fs.push(np.full((2, 2, 2), 5, np.uint8), reset_mask=np.array([False, True]))
    assert obs[0, 0, 0].tolist() == [1, 1, 5] and obs[1, 0, 0].tolist() == [5, 5, 5]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_envs": 0, "k": 4, "frame_shape": (2, 2)},
        {"num_envs": 1, "k": 0, "frame_shape": (2, 2)},
        {"num_envs": 1, "k": 257, "frame_shape": (2, 2)},
        {"num_envs": 1, "k": 4, "frame_shape": (2,)},
        {"num_envs": 1, "k": 4, "frame_shape": (2, 2, 2, 2)},
        {"num_envs": 1, "k": 4, "frame_shape": (2, 0)},
        {"num_envs": 1, "k": 4, "frame_shape": "ab"},
        {"num_envs": 1.5, "k": 4, "frame_shape": (2, 2)},
        {"num_envs": 2**70, "k": 4, "frame_shape": (2, 2)},
        {"num_envs": 1, "k": -(2**64), "frame_shape": (2, 2)},
        {"num_envs": 1, "k": 4, "frame_shape": (2, 2), "dtype": object},
        {"num_envs": 1, "k": 4, "frame_shape": (2, 2), "dtype": np.complex64},
        {"num_envs": 1, "k": 4, "frame_shape": (2, 2), "dtype": ">u2"},
        {"num_envs": 1, "k": 4, "frame_shape": (2, 2), "dtype": "not a dtype"},
    ],
)
def test_constructor_validation(impl, kwargs):
    with pytest.raises(ValueError):
        FrameStacker(**kwargs)


def test_stacked_space():
    box = gym.spaces.Box(0, 255, (84, 84, 1), np.uint8)
    s = stacked_space(box, 4)
    assert s.shape == (84, 84, 4) and s.dtype == np.uint8
    assert stacked_space(gym.spaces.Box(0, 1, (3, 5), np.float32), 2, False).shape == (2, 3, 5)
    with pytest.raises(ValueError):
        stacked_space(gym.spaces.Discrete(3), 4)
    with pytest.raises(ValueError):
        stacked_space(box, 0)


def test_concurrent_pushes_are_atomic():
    """Calls from several threads are serialised: no torn frames, every window is whole."""
    import threading

    fs = FrameStacker(2, 3, (8, 8), dtype=np.uint16)
    assert fs.native
    fs.reset(np.zeros((2, 8, 8), np.uint16))
    outputs: list[tuple[int, np.ndarray]] = []
    lock = threading.Lock()

    def work(t):
        for step in range(40):
            ident = 1 + t * 100 + step
            obs = fs.push(np.full((2, 8, 8), ident, np.uint16))
            with lock:
                outputs.append((ident, obs))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outputs) == 120
    for ident, obs in outputs:
        window = obs[0, 0, 0]
        assert window[-1] == ident
        assert (obs == window).all()  # every pixel of every env shows the same window
        assert len(set(window.tolist()) - {0}) == len([v for v in window if v != 0])


@pytest.mark.parametrize("offset,channels_last", [(0, True), (1, True), (0, False)])
def test_large_output_streaming_path_matches_twin(offset, channels_last):
    """Outputs >= 8 MiB take the non-temporal-store path (16-byte aligned out) or, when
    out is misaligned, the regular one; both must equal the numpy twin."""
    rng = np.random.default_rng(3)
    num_envs = 300  # 300 * 4 * 84 * 84 bytes = 8.1 MiB of output per step
    native = FrameStacker(num_envs, 4, (84, 84), channels_last=channels_last)
    twin = ref.FrameStacker(num_envs, 4, (84, 84), channels_last=channels_last)
    raw = np.empty(num_envs * 84 * 84 * 4 + 16 + offset, np.uint8)
    start = (-raw.ctypes.data) % 16 + offset
    out = raw[start : start + num_envs * 84 * 84 * 4].reshape(num_envs, *native.observation_shape)
    frames = rng.integers(0, 256, size=(num_envs, 84, 84), dtype=np.uint8)
    native.reset(frames)
    twin.reset(frames)
    for step in range(5):
        frames = rng.integers(0, 256, size=(num_envs, 84, 84), dtype=np.uint8)
        mask = rng.random(num_envs) < (0.1 if step % 2 else 0.0)
        native.push(frames, mask, out=out)
        np.testing.assert_array_equal(out, twin.push(frames, mask))
