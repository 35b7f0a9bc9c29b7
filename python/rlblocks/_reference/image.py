"""Pure-numpy twins of the image kernels (``cpp/include/rlblocks/image_*.hpp``).

They compute exactly what the C++ core computes (same tap tables, same fixed-point
integers, same float operation order), so the tests compare the two bit for bit; OpenCV
is only the external reference (within +-1). All functions take batches ``(B, H, W, C)``
that the caller has validated and write into a preallocated ``out``.

* Gray: ``(9798 R + 19235 G + 3735 B + 2**14) >> 15`` (OpenCV's RGB2GRAY fixed point).
* Resize: OpenCV's INTER_AREA taps per axis (computed in float64 like OpenCV). uint8
  quantises each axis' weights to 14 bits summing to 16384; the vertical pass gives int16
  rows ``(sum wy * row + 2**6) >> 7``, the horizontal pass ``(sum wx * v + 2**20) >> 21``.
  Gray+resize folds the luminance coefficients into the horizontal weights (no
  intermediate gray rounding). float32 accumulates in float64, vertical taps first.

Examples:
    >>> import numpy as np
    >>> frames = np.full((1, 210, 160, 3), 200, dtype=np.uint8)
    >>> out = np.empty((1, 84, 84, 1), dtype=np.uint8)
    >>> resize(frames, 84, 84, True, out)[0, 0, 0, 0]
    np.uint8(200)
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

WEIGHT_BITS = 14
WEIGHT_ONE = 1 << WEIGHT_BITS
VERTICAL_SHIFT = 7
FINAL_SHIFT = 2 * WEIGHT_BITS - VERTICAL_SHIFT
GRAY_SHIFT = 15
GRAY_COEFFS = (9798, 19235, 3735)
GENERIC_CROP = 25
GENERIC_FIRST_DIM = 84


def _opencv_scale(n_in: int, n_out: int) -> float:
    # OpenCV's scale is 1 / (n_out / n_in), not always n_in / n_out in float64.
    return 1.0 / (n_out / n_in)


def _area_taps(n_in: int, n_out: int) -> list[list[tuple[int, float]]]:
    scale = _opencv_scale(n_in, n_out)
    res = []
    for d in range(n_out):
        fs1 = d * scale
        fs2 = fs1 + scale
        s1 = math.ceil(fs1)
        s2 = min(math.floor(fs2), n_in - 1)
        s1 = min(s1, s2)
        cell = min(scale, n_in - fs1)
        taps = []
        if s1 - fs1 > 1e-3:
            taps.append((s1 - 1, (s1 - fs1) / cell))
        taps.extend((s, 1.0 / cell) for s in range(s1, s2))
        if fs2 - s2 > 1e-3:
            taps.append((s2, min(min(fs2 - s2, 1.0), cell) / cell))
        res.append(taps)
    return res


def _area_linear_taps(n_in: int, n_out: int) -> list[list[tuple[int, float]]]:
    scale = _opencv_scale(n_in, n_out)
    inv_scale = n_out / n_in
    res = []
    for d in range(n_out):
        s = math.floor(d * scale)
        f = float(np.float32((d + 1) - (s + 1) * inv_scale))
        f = 0.0 if f <= 0.0 else f - math.floor(f)
        if s < 0:
            f, s = 0.0, 0
        if s >= n_in - 1:
            f, s = 0.0, n_in - 1
        res.append([(s, 1.0)] if f == 0.0 else [(s, 1.0 - f), (s + 1, f)])
    return res


def _quantise(scaled: list[tuple[int, float]], one: int, dst: np.ndarray) -> None:
    """Rounds scaled weights, giving the rounding error to the first largest one."""
    total = 0
    biggest, biggest_q = scaled[0][0], -1
    for slot, x in scaled:
        q = math.floor(x + 0.5)
        dst[slot] = q
        total += q
        if q > biggest_q:
            biggest, biggest_q = slot, q
    dst[biggest] = biggest_q + (one - total)


@lru_cache(maxsize=256)
def axis_taps(n_in: int, n_out: int, enlarge: bool) -> tuple[np.ndarray, ...]:
    """Tap table of one axis: ``(start, float64 weights, int weights, gray weights)``.

    Output ``o`` reads inputs ``start[o] + k`` for ``k < K``; windows running past the end
    are shifted back inside (their weights move with them), unused taps weigh zero. The
    gray weights ``(n_out, 3 K)`` fold the luminance coefficients into the 14-bit weights.

    Examples:
        >>> start, wd, wq, wg = axis_taps(4, 2, False)
        >>> start.tolist(), wq.tolist()
        ([0, 2], [[8192, 8192], [8192, 8192]])
    """
    raw = _area_linear_taps(n_in, n_out) if enlarge else _area_taps(n_in, n_out)
    k = max(len(t) for t in raw)
    start = np.zeros(n_out, dtype=np.int64)
    wd = np.zeros((n_out, k), dtype=np.float64)
    wq = np.zeros((n_out, k), dtype=np.int64)
    wg = np.zeros((n_out, 3 * k), dtype=np.int64)
    for o, taps in enumerate(raw):
        s = min(taps[0][0], n_in - k)
        start[o] = s
        scaled: list[tuple[int, float]] = []
        scaled_gray: list[tuple[int, float]] = []
        for index, weight in taps:
            j = index - s
            wd[o, j] = weight
            scaled.append((j, weight * WEIGHT_ONE))
            scaled_gray.extend(
                (3 * j + c, (weight * coef) * 0.5) for c, coef in enumerate(GRAY_COEFFS)
            )
        _quantise(scaled, WEIGHT_ONE, wq[o])
        _quantise(scaled_gray, WEIGHT_ONE, wg[o])
    for a in (start, wd, wq, wg):
        a.setflags(write=False)
    return start, wd, wq, wg


def _plan(h_in: int, w_in: int, h_out: int, w_out: int) -> tuple[Any, Any]:
    enlarge = h_out > h_in or w_out > w_in
    return axis_taps(h_in, h_out, enlarge), axis_taps(w_in, w_out, enlarge)


def rgb_to_gray(frames: np.ndarray, out: np.ndarray) -> np.ndarray:
    """OpenCV's fixed-point RGB->gray of ``(B, H, W, 3)`` uint8 into ``out (B, H, W, 1)``."""
    out[..., 0] = _gray(frames)
    return out


def _gray(frames: np.ndarray) -> np.ndarray:
    x = frames.astype(np.uint32)
    cr, cg, cb = GRAY_COEFFS
    return (
        cr * x[..., 0] + cg * x[..., 1] + cb * x[..., 2] + (1 << (GRAY_SHIFT - 1))
    ) >> GRAY_SHIFT


def _resize_u8(frames: np.ndarray, h_out: int, w_out: int, gray: bool) -> np.ndarray:
    """(B, H, W, C) uint8 -> (B, h_out, w_out, 1 if gray else C) uint8."""
    b, h_in, w_in, c = frames.shape
    (sy, _, wy, _), (sx, _, wx, wg) = _plan(h_in, w_in, h_out, w_out)
    rows = frames[:, sy[:, None] + np.arange(wy.shape[1])].astype(np.int32)  # (B, h, Ky, W, C)
    v = np.einsum("bykwc,yk->bywc", rows, wy.astype(np.int32))
    v = (v + (1 << (VERTICAL_SHIFT - 1))) >> VERTICAL_SHIFT  # (B, h_out, W, C), <= 32640
    if gray:
        flat = v.reshape(b, h_out, w_in * c)
        cols = flat[:, :, 3 * sx[:, None] + np.arange(wg.shape[1])]  # (B, h, w, 3 K)
        acc = np.einsum("byxj,xj->byx", cols, wg.astype(np.int32))[..., None]
    else:
        cols = v[:, :, sx[:, None] + np.arange(wx.shape[1])]  # (B, h, w, Kx, C)
        acc = np.einsum("byxkc,xk->byxc", cols, wx.astype(np.int32))
    return ((acc + (1 << (FINAL_SHIFT - 1))) >> FINAL_SHIFT).astype(np.uint8)


def _resize_f32(frames: np.ndarray, h_out: int, w_out: int) -> np.ndarray:
    """(B, H, W, C) float32 -> (B, h_out, w_out, C) float32, in the kernel's order."""
    b, h_in, w_in, c = frames.shape
    (sy, wy, _, _), (sx, wx, _, _) = _plan(h_in, w_in, h_out, w_out)
    src = frames.astype(np.float64)
    acc = np.zeros((b, h_out, w_in, c), dtype=np.float64)
    for k in range(wy.shape[1]):
        w = wy[:, k][None, :, None, None]
        term = w * src[:, sy + k]
        acc += np.where(w == 0.0, 0.0, term)  # the kernel skips zero-weight rows
    res = np.zeros((b, h_out, w_out, c), dtype=np.float64)
    for k in range(wx.shape[1]):
        res += wx[:, k][None, None, :, None] * acc[:, :, sx + k]
    return res.astype(np.float32)


def resize(frames: np.ndarray, height: int, width: int, gray: bool, out: np.ndarray) -> np.ndarray:
    """INTER_AREA resize of ``(B, H, W, C)`` uint8 or float32 frames into ``out``.

    ``gray`` (uint8 RGB only) converts to gray before resizing, like
    ``cv2.resize(cv2.cvtColor(f, cv2.COLOR_RGB2GRAY), ..., INTER_AREA)``.
    """
    if frames.dtype == np.uint8:
        out[...] = _resize_u8(frames, height, width, gray)
    else:
        out[...] = _resize_f32(frames, height, width)
    return out


def crop(
    frames: np.ndarray, top: int, left: int, height: int, width: int, out: np.ndarray
) -> np.ndarray:
    """Copies ``frames[:, top:top+height, left:left+width]`` into ``out``."""
    out[...] = frames[:, top : top + height, left : left + width]
    return out


def max_last_two(frames: np.ndarray, axis: int, out: np.ndarray) -> np.ndarray:
    """Element-wise max of the last two entries of ``frames`` along ``axis``."""
    n = frames.shape[axis]
    np.maximum(np.take(frames, n - 2, axis=axis), np.take(frames, n - 1, axis=axis), out=out)
    return out


def _normalise(x: np.ndarray, zero_mean: bool) -> np.ndarray:
    if zero_mean:
        return (x - np.float32(128.0)) / np.float32(128.0)
    return x * np.float32(1.0 / 255.0)


def generic_pixel(
    frames: np.ndarray, dim: int, grayscale: bool, zero_mean: bool, out: np.ndarray
) -> np.ndarray:
    """RLlib's GenericPixelPreprocessor with correct float maths, into float32 ``out``.

    Crop rows ``25:-25``; INTER_AREA to 84x84 first when ``dim < 84``; INTER_AREA to
    ``dim``; uint8 stays uint8 (rounded) between steps, float32 stays float32; channel mean
    (float64, then float32) when ``grayscale``; ``(x - 128) / 128`` if ``zero_mean`` else
    ``x * float32(1/255)``, in float32.
    """
    h = frames.shape[1]
    x = frames[:, GENERIC_CROP : h - GENERIC_CROP]
    step = _resize_u8 if frames.dtype == np.uint8 else _resize_f32
    kwargs = {"gray": False} if frames.dtype == np.uint8 else {}
    if dim < GENERIC_FIRST_DIM:
        x = step(x, GENERIC_FIRST_DIM, GENERIC_FIRST_DIM, **kwargs)
    x = step(x, dim, dim, **kwargs)
    if grayscale:
        x64 = x.astype(np.float64)
        x = ((x64[..., 0] + x64[..., 1] + x64[..., 2]) / 3.0).astype(np.float32)[..., None]
    else:
        x = x.astype(np.float32)
    out[...] = _normalise(x, zero_mean)
    return out


def palette_resize(
    index: np.ndarray,
    palette: np.ndarray,
    height: int,
    width: int,
    gray: bool,
    out: np.ndarray,
    max_with: np.ndarray | None = None,
) -> np.ndarray:
    """Expands ``(B, H, W)`` palette indices to RGB (max-pooled with ``max_with``'s) and
    resizes like :func:`resize`."""
    rgb = palette[index]
    if max_with is not None:
        rgb = np.maximum(rgb, palette[max_with])
    return resize(rgb, height, width, gray, out)


def palette_unknown(index: np.ndarray, known: np.ndarray) -> bool:
    """Whether some index has ``known[index] == 0``."""
    return bool(index.size) and not bool(known[index].all())
