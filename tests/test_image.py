"""Image kernels: C++ vs numpy twin (bit for bit), vs OpenCV (within +-1), bad input."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import rlblocks
from rlblocks import _core, _impl, image

pytestmark = pytest.mark.native

cv2 = pytest.importorskip("cv2")

RNG = np.random.default_rng(1234)


@contextlib.contextmanager
def numpy_impl():
    _impl.use_numpy_reference(True)
    try:
        yield
    finally:
        _impl.use_numpy_reference(False)


@contextlib.contextmanager
def simd(allowed: bool):
    previous = _core._image_allow_simd(allowed)
    try:
        yield
    finally:
        _core._image_allow_simd(previous)


@contextlib.contextmanager
def threads(n: int):
    previous = rlblocks.get_num_threads()
    rlblocks.set_num_threads(n)
    try:
        yield
    finally:
        rlblocks.set_num_threads(previous)


def both(fn, *args, **kwargs):
    """The native result (AVX2 and scalar paths) and the numpy twin's; all must agree."""
    native = fn(*args, **kwargs)
    with simd(False):
        scalar = fn(*args, **kwargs)
    with numpy_impl():
        twin = fn(*args, **kwargs)
    np.testing.assert_array_equal(native, scalar)
    np.testing.assert_array_equal(native, twin)
    return native


def cv_gray_resize(frame: np.ndarray, h: int, w: int) -> np.ndarray:
    g = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
    return cv2.resize(g, (w, h), interpolation=cv2.INTER_AREA).reshape(h, w, 1)


def cv_resize(frame: np.ndarray, h: int, w: int) -> np.ndarray:
    return cv2.resize(frame, (w, h), interpolation=cv2.INTER_AREA).reshape(h, w, frame.shape[2])


def assert_within_one(ours: np.ndarray, theirs: np.ndarray) -> None:
    diff = np.abs(ours.astype(np.int16) - theirs.astype(np.int16))
    where = np.unravel_index(diff.argmax(), diff.shape)
    assert diff.max() <= 1, f"max difference {diff.max()} at {where}"


# Sizes: Atari (non-integer ratio), integer ratios, odd ratios, enlarging, mixed, degenerate.
SIZES = [
    (210, 160, 84, 84),
    (160, 160, 84, 84),
    (210, 160, 105, 80),
    (84, 84, 42, 42),
    (100, 100, 33, 33),
    (7, 5, 3, 2),
    (5, 5, 1, 1),
    (300, 7, 11, 3),
    (13, 17, 13, 17),
    (84, 84, 210, 160),
    (10, 10, 33, 33),
    (6, 21, 18, 119),
    (45, 87, 7, 150),
    (160, 160, 84, 200),
    (1, 1, 4, 4),
    (2, 9, 5, 4),
    (250, 250, 31, 17),
    (64, 48, 64, 47),
]


@pytest.mark.parametrize(("H", "W", "h", "w"), SIZES)
def test_gray_resize_matches_twin_and_opencv(H, W, h, w):
    frames = RNG.integers(0, 256, (3, H, W, 3), dtype=np.uint8)
    out = both(image.gray_resize, frames, (h, w))
    assert out.shape == (3, h, w, 1) and out.dtype == np.uint8
    for b in range(3):
        assert_within_one(out[b], cv_gray_resize(frames[b], h, w))


@pytest.mark.parametrize(("H", "W", "h", "w"), SIZES)
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_resize_uint8_matches_twin_and_opencv(H, W, h, w, channels):
    frames = RNG.integers(0, 256, (2, H, W, channels), dtype=np.uint8)
    out = both(image.resize, frames, (h, w))
    for b in range(2):
        assert_within_one(out[b], cv_resize(frames[b], h, w))


@pytest.mark.parametrize(("H", "W", "h", "w"), SIZES)
def test_resize_float_matches_twin_and_opencv(H, W, h, w):
    frames = (RNG.random((2, H, W, 3)) * 255).astype(np.float32)
    out = both(image.resize, frames, (h, w))
    assert out.dtype == np.float32
    for b in range(2):
        np.testing.assert_allclose(out[b], cv_resize(frames[b], h, w), atol=2e-3, rtol=1e-5)


def test_random_sizes_against_opencv():
    for _ in range(60):
        H, W = (int(v) for v in RNG.integers(1, 130, 2))
        h, w = (int(v) for v in RNG.integers(1, 170, 2))
        frames = RNG.integers(0, 256, (1, H, W, 3), dtype=np.uint8)
        ours = both(image.gray_resize, frames, (h, w))[0]
        assert_within_one(ours, cv_gray_resize(frames[0], h, w))
        assert_within_one(both(image.resize, frames, (h, w))[0], cv_resize(frames[0], h, w))


def test_flat_images_stay_exact():
    for value in (0, 1, 127, 128, 254, 255):
        frame = np.full((210, 160, 3), value, dtype=np.uint8)
        assert (image.gray_resize(frame, 84) == value).all()
        assert (image.resize(frame, (37, 91)) == value).all()
        assert (image.resize(frame, (400, 300)) == value).all()


def test_real_ale_frames_against_opencv():
    ale_py = pytest.importorskip("ale_py")
    import gymnasium as gym

    gym.register_envs(ale_py)
    frames = []
    for game in ("ALE/Pong-v5", "ALE/Breakout-v5"):
        env = gym.make(game, frameskip=1, repeat_action_probability=0.0)
        obs, _ = env.reset(seed=0)
        for t in range(200):
            obs, *_ = env.step(env.action_space.sample() if t % 3 else 1)
            if t % 25 == 0:
                frames.append(obs)
        env.close()
    batch = np.stack(frames)
    out = both(image.gray_resize, batch, 84)
    for b in range(len(batch)):
        assert_within_one(out[b], cv_gray_resize(batch[b], 84, 84))
    colour = both(image.resize, batch, 84)
    for b in range(len(batch)):
        assert_within_one(colour[b], cv_resize(batch[b], 84, 84))


def test_rgb_to_gray_is_opencv_exactly():
    frames = RNG.integers(0, 256, (4, 37, 53, 3), dtype=np.uint8)
    out = both(image.rgb_to_gray, frames)
    for b in range(4):
        np.testing.assert_array_equal(out[b, ..., 0], cv2.cvtColor(frames[b], cv2.COLOR_RGB2GRAY))


def test_batches_threads_and_single_frames_agree():
    frames = RNG.integers(0, 256, (9, 210, 160, 3), dtype=np.uint8)
    with threads(1):
        one = image.gray_resize(frames, 84)
    with threads(2):
        two = image.gray_resize(frames, 84)
    np.testing.assert_array_equal(one, two)
    for b in (0, 4, 8):
        np.testing.assert_array_equal(image.gray_resize(frames[b], 84), one[b])
    assert image.gray_resize(frames[:0], 84).shape == (0, 84, 84, 1)


def test_views_and_other_layouts_are_read_correctly():
    big = RNG.integers(0, 256, (4, 260, 200, 3), dtype=np.uint8)
    view = big[::2, 25:235, 20:180]  # strided batch, cropped rows and columns
    expected = image.gray_resize(np.ascontiguousarray(view), 84)
    np.testing.assert_array_equal(both(image.gray_resize, view, 84), expected)
    fortran = np.asfortranarray(big[0])
    np.testing.assert_array_equal(image.resize(fortran, 50), image.resize(big[0], 50))
    flipped = big[0, ::-1]
    np.testing.assert_array_equal(
        image.resize(flipped, 50), image.resize(np.ascontiguousarray(flipped), 50)
    )
    ints = big[0].astype(np.int64)
    np.testing.assert_array_equal(image.gray_resize(ints, 84), image.gray_resize(big[0], 84))


def test_out_is_filled_in_place():
    frames = RNG.integers(0, 256, (5, 210, 160, 3), dtype=np.uint8)
    out = np.zeros((5, 84, 84, 1), dtype=np.uint8)
    assert image.gray_resize(frames, 84, out=out) is not None
    np.testing.assert_array_equal(out, image.gray_resize(frames, 84))
    single = np.zeros((84, 84, 1), dtype=np.uint8)
    image.gray_resize(frames[2], 84, out=single)
    np.testing.assert_array_equal(single, out[2])


def test_crop_and_max_last_two():
    frames = RNG.integers(0, 256, (3, 210, 160, 3), dtype=np.uint8)
    np.testing.assert_array_equal(
        both(image.crop, frames, 25, 3, 160, 150), frames[:, 25:185, 3:153]
    )
    floats = RNG.random((2, 10, 12, 2)).astype(np.float64)
    np.testing.assert_array_equal(both(image.crop, floats, 0, 0, 10, 12), floats)
    stack = RNG.integers(0, 256, (4, 3, 21, 16, 3), dtype=np.uint8)
    np.testing.assert_array_equal(
        both(image.max_last_two, stack, axis=1), np.maximum(stack[:, 1], stack[:, 2])
    )
    np.testing.assert_array_equal(
        both(image.max_last_two, stack[0]), np.maximum(stack[0, 1], stack[0, 2])
    )
    f = RNG.random((2, 5, 7)).astype(np.float32)
    np.testing.assert_array_equal(
        both(image.max_last_two, f, axis=-1), np.maximum(f[..., 5], f[..., 6])
    )


# --------------------------------------------------------------------- GenericPixel


def rllib_generic_fixed(
    frame: np.ndarray, dim: int, grayscale: bool, zero_mean: bool
) -> np.ndarray:
    """RLlib's steps with OpenCV, with the float maths done right (float64 throughout)."""
    x = frame[25:-25, :, :]
    if dim < 84:
        x = cv2.resize(x, (84, 84), interpolation=cv2.INTER_AREA)
    x = cv2.resize(x, (dim, dim), interpolation=cv2.INTER_AREA).astype(np.float64)
    if grayscale:
        x = x.mean(2)[..., None]
    return (x - 128) / 128 if zero_mean else x / 255


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("grayscale", [False, True])
@pytest.mark.parametrize("zero_mean", [False, True])
@pytest.mark.parametrize("dim", [84, 42, 10, 100])
def test_generic_pixel_every_combination(dtype, grayscale, zero_mean, dim):
    frames = RNG.integers(0, 256, (3, 210, 160, 3)).astype(dtype)
    out = both(image.generic_pixel, frames, dim, grayscale, zero_mean)
    assert out.dtype == np.float32 and out.shape == (3, dim, dim, 1 if grayscale else 3)
    scale = 128.0 if zero_mean else 255.0
    lo, hi = (-1.0, 127 / 128) if zero_mean else (0.0, 1.0)
    assert out.min() >= lo and out.max() <= hi
    # Two rounded resizes can differ from OpenCV's by up to 1 each.
    tol = (2.0 if dtype == np.uint8 and dim < 84 else 1.0 if dtype == np.uint8 else 1e-3) / scale
    for b in range(3):
        expected = rllib_generic_fixed(frames[b], dim, grayscale, zero_mean)
        np.testing.assert_allclose(out[b], expected, atol=tol + 1e-6, rtol=0)


def test_generic_pixel_uint8_rgb_does_not_wrap_or_raise():
    frame = np.zeros((210, 160, 3), dtype=np.uint8)  # RLlib: (0 - 128) wraps to 128 -> +1.0
    np.testing.assert_array_equal(image.generic_pixel(frame, 84, False, True), -1.0)
    np.testing.assert_array_equal(image.generic_pixel(frame, 84, False, False), 0.0)


def test_generic_pixel_float64_input_is_converted():
    frame = RNG.integers(0, 256, (210, 160, 3)).astype(np.float64)
    np.testing.assert_array_equal(
        image.generic_pixel(frame, 42, True),
        image.generic_pixel(frame.astype(np.float32), 42, True),
    )


# --------------------------------------------------------------------- bad input


BAD_CALLS = [
    (lambda: image.gray_resize(np.zeros((10, 10), np.uint8), 5), "shape"),
    (lambda: image.gray_resize(np.zeros((10, 10, 4), np.uint8), 5), "3 channels"),
    (lambda: image.gray_resize(np.zeros((10, 10, 3), np.float32), 5), "uint8"),
    (lambda: image.gray_resize(np.zeros((10, 10, 3), np.int32) - 1, 5), r"\[0, 255\]"),
    (lambda: image.gray_resize(np.zeros((10, 10, 3), np.uint8), 0), ">= 1"),
    (lambda: image.gray_resize(np.zeros((10, 10, 3), np.uint8), (5, 5, 5)), "size"),
    (lambda: image.resize(np.zeros((0, 10, 3), np.uint8), 5), "H >= 1"),
    (lambda: image.resize(np.zeros((10, 10, 3), np.complex64), 5), "uint8 or float"),
    (lambda: image.crop(np.zeros((10, 10, 3), np.uint8), 5, 0, 6, 10), "inside"),
    (lambda: image.crop(np.zeros((10, 10, 3), np.uint8), -1, 0, 2, 2), "inside"),
    (lambda: image.max_last_two(np.zeros((1, 4), np.uint8)), "at least 2"),
    (lambda: image.max_last_two(np.zeros((2, 4), np.int64)), "uint8 or float32"),
    (lambda: image.max_last_two(np.zeros((2, 4), np.uint8), axis=2), "axis"),
    (lambda: image.generic_pixel(np.zeros((50, 160, 3), np.uint8)), "H >= 51"),
    (lambda: image.generic_pixel(np.zeros((210, 160, 3), np.uint8), dim=0), "dim"),
]


@pytest.mark.parametrize(("call", "match"), BAD_CALLS)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
    with numpy_impl(), pytest.raises(ValueError, match=match):
        call()


def bad_outs(shape, dtype):
    good = np.full(shape, 7, dtype=dtype)
    wide = np.full(shape[:-2] + (shape[-2] * 2, shape[-1]), 7, dtype=dtype)
    readonly = good.copy()
    readonly.flags.writeable = False
    return [
        ("shape", np.full(shape[:-1] + (shape[-1] + 1,), 7, dtype=dtype)),
        ("dtype", good.astype(np.float64)),
        ("contiguous", wide[..., ::2, :]),
        ("read-only", readonly),
        ("list", [0] * 4),
    ]


@pytest.mark.parametrize("impl", ["native", "numpy"])
def test_bad_out_raises_and_writes_nothing(impl):
    frames = RNG.integers(0, 256, (2, 210, 160, 3), dtype=np.uint8)
    cases = [
        (lambda o: image.gray_resize(frames, 84, out=o), (2, 84, 84, 1), np.uint8),
        (lambda o: image.resize(frames, 50, out=o), (2, 50, 50, 3), np.uint8),
        (lambda o: image.rgb_to_gray(frames, out=o), (2, 210, 160, 1), np.uint8),
        (lambda o: image.crop(frames, 0, 0, 5, 5, out=o), (2, 5, 5, 3), np.uint8),
        (lambda o: image.max_last_two(frames, out=o), (210, 160, 3), np.uint8),
        (lambda o: image.generic_pixel(frames, 42, out=o), (2, 42, 42, 3), np.float32),
    ]
    ctx = numpy_impl() if impl == "numpy" else contextlib.nullcontext()
    with ctx:
        for call, shape, dtype in cases:
            for _, out in bad_outs(shape, dtype):
                with pytest.raises(ValueError, match="out"):
                    call(out)
                if isinstance(out, np.ndarray):
                    assert (out == 7).all()
    overlap = np.zeros((2, 210, 160, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="overlap"):
        image.crop(overlap, 0, 0, 10, 10, out=overlap.reshape(-1)[:600].reshape(2, 10, 10, 3))


def test_native_bindings_refuse_bad_arrays_directly():
    """The C++ layer validates on its own (shape, dtype, strides, out) before any write."""
    frames = np.zeros((2, 30, 20, 3), dtype=np.uint8)
    out = np.full((2, 10, 10, 1), 7, dtype=np.uint8)
    bad = [
        lambda: _core.image_resize(frames[0], 10, 10, True, out),  # rank
        lambda: _core.image_resize(frames.astype(np.int16), 10, 10, True, out),  # dtype
        lambda: _core.image_resize(frames[..., :2], 10, 10, True, out),  # channels
        lambda: _core.image_resize(frames[:, :, ::-1], 10, 10, True, out),  # strides
        lambda: _core.image_resize(frames, 10, 11, True, out),  # out shape
        lambda: _core.image_resize(frames, 0, 10, True, out),  # size
        lambda: _core.image_resize(frames, 10, 10, True, out[:, ::2]),  # out layout
        lambda: _core.image_resize(frames, 10, 10, True, [1, 2]),  # out type
        lambda: _core.image_crop(frames, 25, 0, 10, 10, out),  # window
        lambda: _core.image_max_last_two(frames, 4, out),  # axis
        lambda: _core.image_generic_pixel(frames, 10, True, True, out),  # H <= 50
        lambda: _core.image_resize(
            frames, 10, 10, True, frames.reshape(-1)[:200].reshape(2, 10, 10, 1)
        ),  # overlap
    ]
    for call in bad:
        with pytest.raises(ValueError):
            call()
        assert (out == 7).all()


def test_max_with_fuses_the_max_pool():
    a = RNG.integers(0, 256, (3, 210, 160, 3), dtype=np.uint8)
    b = RNG.integers(0, 256, (3, 210, 160, 3), dtype=np.uint8)
    pooled = np.maximum(a, b)
    np.testing.assert_array_equal(
        both(image.gray_resize, a, 84, max_with=b), image.gray_resize(pooled, 84)
    )
    np.testing.assert_array_equal(
        both(image.resize, a, (50, 70), max_with=b), image.resize(pooled, (50, 70))
    )
    np.testing.assert_array_equal(
        image.gray_resize(a[1], 84, max_with=b[1]), image.gray_resize(pooled[1], 84)
    )
    view = b[:, ::-1]  # any layout is converted
    np.testing.assert_array_equal(
        image.gray_resize(a, 84, max_with=view), image.gray_resize(np.maximum(a, view), 84)
    )


@pytest.mark.parametrize("impl", ["native", "numpy"])
def test_bad_max_with_raises(impl):
    a = np.zeros((2, 20, 16, 3), dtype=np.uint8)
    out = np.full((2, 8, 8, 1), 7, dtype=np.uint8)
    ctx = numpy_impl() if impl == "numpy" else contextlib.nullcontext()
    with ctx:
        with pytest.raises(ValueError, match="max_with"):
            image.gray_resize(a, 8, max_with=a[:1])
        with pytest.raises(ValueError, match="uint8"):
            image.gray_resize(a, 8, max_with=a.astype(np.float32))
        with pytest.raises(ValueError, match="max_with"):
            image.resize(a.astype(np.float32), 8, max_with=a)
        alias = np.zeros(2 * 20 * 16 * 3, dtype=np.uint8)
        with pytest.raises(ValueError, match="overlap"):
            image.gray_resize(
                a, 8, out=alias[:128].reshape(2, 8, 8, 1), max_with=alias.reshape(2, 20, 16, 3)
            )
    with pytest.raises(ValueError, match="max_with"):
        _core.image_resize(a, 8, 8, True, out, a[:, :10])
    assert (out == 7).all()


# --------------------------------------------------------------------- palette-indexed screens


def _palette_case(batch, h, w, colours=6, seed=0):
    """A random palette and index screens: flat areas (few colours, like Atari screens) with
    scattered pixels of other indices, and a second screen that differs in a few places."""
    rng = np.random.default_rng(seed)
    pal = rng.integers(0, 256, (256, 3), dtype=np.uint8)
    used = rng.choice(256, colours, replace=False).astype(np.uint8)
    idx = np.repeat(used[rng.integers(0, colours, (batch, h, 1))], w, axis=2)
    idx[:, :, w // 3 : w // 2] = used[0]
    scatter = rng.random(idx.shape) < 0.05
    idx[scatter] = rng.integers(0, 256, scatter.sum(), dtype=np.uint8)
    second = idx.copy()
    moved = rng.random(idx.shape) < 0.1
    second[moved] = rng.integers(0, 256, moved.sum(), dtype=np.uint8)
    return pal, idx, second


@pytest.mark.parametrize(
    ("H", "W", "h", "w"), [(210, 160, 84, 84), (210, 160, 42, 64), (37, 53, 50, 20), (5, 17, 5, 17)]
)
@pytest.mark.parametrize("gray", [True, False])
def test_palette_resize_is_the_resize_of_the_rgb_frames(H, W, h, w, gray):
    pal, idx, second = _palette_case(3, H, W, seed=H + W + h)
    plain = image.gray_resize if gray else image.resize
    want = plain(pal[idx], (h, w), max_with=pal[second])
    np.testing.assert_array_equal(
        both(image.palette_resize, idx, pal, (h, w), gray=gray, max_with=second), want
    )
    np.testing.assert_array_equal(
        both(image.palette_resize, idx[1], pal, (h, w), gray=gray), plain(pal[idx[1]], (h, w))
    )
    ref = [
        cv2.resize(
            cv2.cvtColor(f, cv2.COLOR_RGB2GRAY) if gray else f, (w, h), interpolation=cv2.INTER_AREA
        )
        for f in np.maximum(pal[idx], pal[second])
    ]
    ref = np.stack(ref).reshape(want.shape).astype(int)
    assert np.abs(want.astype(int) - ref).max() <= 1


def test_palette_resize_threads_out_and_views():
    pal, idx, second = _palette_case(9, 210, 160, seed=5)
    want = image.gray_resize(pal[idx], 84, max_with=pal[second])
    with threads(2):
        np.testing.assert_array_equal(image.palette_resize(idx, pal, 84, max_with=second), want)
    out = np.full((9, 84, 84, 1), 7, dtype=np.uint8)
    assert np.shares_memory(image.palette_resize(idx, pal, 84, out, max_with=second), out)
    np.testing.assert_array_equal(out, want)
    wide = np.zeros((9, 210, 200), dtype=np.uint8)
    wide[:, :, 20:180] = idx  # a strided view is copied, never misread
    np.testing.assert_array_equal(
        image.palette_resize(wide[:, :, 20:180], pal, 84, max_with=second), want
    )
    np.testing.assert_array_equal(
        image.palette_resize(idx[::2], pal, 84), image.gray_resize(pal[idx[::2]], 84)
    )


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 210 * 160])
def test_palette_unknown_finds_every_index(n):
    rng = np.random.default_rng(n)
    known = (rng.random(256) < 0.5).astype(np.uint8)
    good = np.flatnonzero(known).astype(np.uint8)
    base = good[rng.integers(0, len(good), n)].astype(np.uint8)
    assert both(image.palette_unknown, base, known) is False
    for pos in sorted({0, n // 2, n - 1}) if n else []:
        for v in (int(np.flatnonzero(known == 0)[0]), int(np.flatnonzero(known == 0)[-1])):
            bad = base.copy()
            bad[pos] = v
            assert both(image.palette_unknown, bad, known) is True
    every = np.arange(256, dtype=np.uint8)
    for v in range(256):  # each index alone, on both AVX2 halves of the lookup
        k = np.ones(256, dtype=np.uint8)
        k[v] = 0
        assert both(image.palette_unknown, every, k) is True
        assert both(image.palette_unknown, np.delete(every, v), k) is False
    assert image.palette_unknown(base.reshape(1, -1), known.astype(bool)) is False


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda p, i: image.palette_resize(i.astype(np.int16), p, 84), "uint8 palette indices"),
        (lambda p, i: image.palette_resize(i[None, None], p, 84), "uint8 palette indices"),
        (
            lambda p, i: image.palette_resize(i, p[:255], 84),
            r"palette must be a uint8 array of shape \(256, 3\)",
        ),
        (lambda p, i: image.palette_resize(i, p.astype(np.float32), 84), "palette must be a uint8"),
        (lambda p, i: image.palette_resize(i, p, 0), "size must be >= 1"),
        (lambda p, i: image.palette_resize(i, p, 84, max_with=i[:-1]), "max_with must have"),
        (
            lambda p, i: image.palette_resize(i, p, 84, np.empty((84, 84, 3), np.uint8)),
            "out must be",
        ),
        (lambda p, i: image.palette_unknown(i.astype(np.int32), np.ones(256, np.uint8)), "uint8"),
        (
            lambda p, i: image.palette_unknown(i, np.ones(255, np.uint8)),
            r"known must be .*\(256,\)",
        ),
    ],
)
def test_palette_bad_input_raises(call, match, impl):
    pal, idx, _ = _palette_case(1, 30, 20)
    with pytest.raises(ValueError, match=match):
        call(pal, idx[0])


def test_palette_native_bindings_refuse_bad_arrays_directly():
    pal, idx, second = _palette_case(2, 30, 20)
    out = np.empty((2, 8, 8, 1), np.uint8)
    with pytest.raises(ValueError, match=r"index must be a uint8 array of shape \(B, H, W\)"):
        _core.image_palette_resize(idx[0], pal, 8, 8, True, out)
    with pytest.raises(ValueError, match="contiguous"):
        _core.image_palette_resize(np.asfortranarray(idx[0])[None], pal, 8, 8, True, out[:1])
    with pytest.raises(ValueError, match="max_with must have"):
        _core.image_palette_resize(idx, pal, 8, 8, True, out, second[:1])
    with pytest.raises(ValueError, match="out must not overlap max_with"):
        buf = np.zeros(2 * 30 * 20 + 2 * 64, np.uint8)
        m = buf[: 2 * 600].reshape(2, 30, 20)
        out = buf[2 * 600 - 64 :][:128].reshape(2, 8, 8, 1)  # shares 64 bytes with m
        _core.image_palette_resize(idx, pal, 8, 8, True, out, m)
    with pytest.raises(ValueError, match="known must be"):
        _core.image_palette_unknown(idx, pal)
    with pytest.raises(ValueError, match="C-contiguous uint8"):
        _core.image_palette_unknown(idx[:, :, ::2], np.ones(256, np.uint8))


def test_unpickled_arrays_are_accepted():
    """Arrays restored by pickle (checkpoints, worker pipes) carry dtype objects that are
    equal to, not the same object as, numpy's own; the kernels take them all the same."""
    import pickle

    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (2, 30, 20, 3), dtype=np.uint8)
    copy = pickle.loads(pickle.dumps(frames))
    assert copy.dtype == frames.dtype and copy.dtype is not frames.dtype
    out = pickle.loads(pickle.dumps(np.zeros((2, 12, 12, 1), np.uint8)))
    image.gray_resize(copy, 12, out=out)
    np.testing.assert_array_equal(out, image.gray_resize(frames, 12))
    stacker = _core.FrameStacker(2, 3, (30, 20, 3), np.dtype(np.uint8), True)
    np.testing.assert_array_equal(stacker.reset(copy)[..., -3:], frames)
    x = pickle.loads(pickle.dumps(np.linspace(-3, 3, 50, dtype=np.float32)))
    np.testing.assert_allclose(_core.tanh(x), np.tanh(x), rtol=1e-6, atol=1e-7)
