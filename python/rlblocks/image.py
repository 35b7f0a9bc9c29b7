"""Batched image kernels for Atari-style pipelines (C++ core, numpy twin).

Every function takes one frame ``(H, W, C)`` or a batch ``(B, H, W, C)`` and returns the
same rank; ``out=`` receives the result in place (it must have exactly the result's shape
and dtype, be C-contiguous and writeable, and not overlap the input). Batches run with the
GIL released, split over ``rlblocks.set_num_threads`` workers. ``rlblocks._impl.native()``
switches to the pure-numpy twins in ``rlblocks._reference.image`` (bit-identical results).

Results are within +-1 of OpenCV: ``gray_resize`` of ``cv2.resize(cv2.cvtColor(f,
COLOR_RGB2GRAY), size, interpolation=INTER_AREA)``, ``resize`` of ``cv2.resize(f, size,
interpolation=INTER_AREA)`` (float32: within float rounding), ``rgb_to_gray`` equals
``cv2.cvtColor`` exactly. Sizes are ``(height, width)`` (OpenCV's dsize is ``(width,
height)``).

Examples:
    >>> import numpy as np
    >>> from rlblocks import image
    >>> frames = np.zeros((8, 210, 160, 3), dtype=np.uint8)
    >>> image.gray_resize(frames, 84).shape
    (8, 84, 84, 1)
    >>> image.resize(frames[0], (105, 80)).shape
    (105, 80, 3)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rlblocks import _core, _impl
from rlblocks._reference import image as _ref

__all__ = [
    "crop",
    "generic_pixel",
    "gray_resize",
    "max_last_two",
    "palette_resize",
    "palette_unknown",
    "resize",
    "rgb_to_gray",
]

Size = int | tuple[int, int] | Sequence[int]


def _size(size: Size, fn: str) -> tuple[int, int]:
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        h = w = int(size)
    else:
        try:
            h, w = (int(v) for v in size)  # type: ignore[union-attr]
        except (TypeError, ValueError):
            raise ValueError(
                f"{fn}: size must be an int or a (height, width) pair, got {size!r}"
            ) from None
    if h < 1 or w < 1:
        raise ValueError(f"{fn}: size must be >= 1 in both dimensions, got ({h}, {w})")
    return h, w


def _frames(
    frames: object, fn: str, *, floats: bool, channels: int | None = None, min_height: int = 1
) -> tuple[np.ndarray, bool]:
    """Validates and converts input to a batch ``(B, H, W, C)``; returns it and whether the
    input was a single frame. uint8 passes through; other integer arrays are accepted when
    every value is in [0, 255]; floats become float32 when ``floats`` is allowed."""
    a = frames if isinstance(frames, np.ndarray) else np.asarray(frames)
    allowed = "uint8 or float" if floats else "uint8"
    if a.ndim not in (3, 4):
        raise ValueError(
            f"{fn}: frames must have shape (H, W, C) or (B, H, W, C), got shape {a.shape}"
        )
    single = a.ndim == 3
    if single:
        a = a[None]
    if a.shape[1] < min_height or a.shape[2] < 1 or a.shape[3] < 1:
        raise ValueError(
            f"{fn}: frames need H >= {min_height}, W >= 1 and C >= 1, got shape {a.shape[1:]}"
        )
    if channels is not None and a.shape[3] != channels:
        raise ValueError(
            f"{fn}: frames must have {channels} channels (last axis), got shape {a.shape[1:]}"
        )
    if a.dtype == np.uint8:
        pass
    elif np.issubdtype(a.dtype, np.integer):
        if a.size and (a.min() < 0 or a.max() > 255):
            bad = a.min() if a.min() < 0 else a.max()
            raise ValueError(f"{fn}: integer frames must hold values in [0, 255], got {bad}")
        a = a.astype(np.uint8)
    elif floats and np.issubdtype(a.dtype, np.floating):
        a = a.astype(np.float32, copy=False)
    else:
        raise ValueError(f"{fn}: frames must be {allowed}, got {a.dtype}")
    item = a.itemsize
    c, w = a.shape[3], a.shape[2]
    rows_ok = (c == 1 or a.strides[3] == item) and (w == 1 or a.strides[2] == c * item)
    if not rows_ok or a.strides[0] < 0 or a.strides[1] < 0:
        a = np.ascontiguousarray(a)
    return a, single


def _out(
    out: np.ndarray | None,
    shape: tuple[int, ...],
    dtype: type,
    frames: np.ndarray,
    single: bool,
    fn: str,
) -> np.ndarray:
    """The batched output array: a new one, or the caller's, validated by the native core
    exactly as its kernels validate ``out=``."""
    if out is None:
        return np.empty(shape, dtype=dtype)
    want = shape[1:] if single else shape
    return _core.check_out(out, np.dtype(dtype), want, frames, fn).reshape(shape)


def _result(out: np.ndarray, single: bool) -> np.ndarray:
    return out[0] if single else out


def rgb_to_gray(frames: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Luminance of RGB uint8 frames, bit-identical to ``cv2.cvtColor(f, COLOR_RGB2GRAY)``.

    Args:
        frames: ``(H, W, 3)`` or ``(B, H, W, 3)`` uint8 (or integers in [0, 255]).
        out: optional uint8 array of shape ``(..., H, W, 1)``.

    Returns:
        uint8 ``(..., H, W, 1)``.

    Examples:
        >>> import numpy as np
        >>> rgb_to_gray(np.array([[[255, 0, 0], [0, 255, 0]]], dtype=np.uint8))[..., 0]
        array([[ 76, 150]], dtype=uint8)
    """
    a, single = _frames(frames, "rgb_to_gray", floats=False, channels=3)
    o = _out(out, (*a.shape[:3], 1), np.uint8, a, single, "rgb_to_gray")
    if _impl.native():
        _core.image_rgb_to_gray(a, o)
    else:
        _ref.rgb_to_gray(a, o)
    return _result(o, single)


def _max_with(max_with: object, a: np.ndarray, single: bool, fn: str) -> np.ndarray | None:
    """Validates the optional second batch of frames that is max-pooled with the first."""
    if max_with is None:
        return None
    m, _ = _frames(max_with, fn, floats=False)
    if m.shape != a.shape:
        want, got = (a.shape[1:], m.shape[1:]) if single else (a.shape, m.shape)
        raise ValueError(f"{fn}: max_with must have the frames' shape {want}, got {got}")
    return m


def gray_resize(
    frames: np.ndarray,
    size: Size,
    out: np.ndarray | None = None,
    *,
    max_with: np.ndarray | None = None,
) -> np.ndarray:
    """Grayscale + INTER_AREA resize of RGB uint8 frames, fused in one pass.

    Within +-1 of ``cv2.resize(cv2.cvtColor(f, COLOR_RGB2GRAY), (w, h), INTER_AREA)`` for
    any size ratio (the luminance weights are folded into the resize, so the gray values are
    not rounded in between).

    Args:
        frames: ``(H, W, 3)`` or ``(B, H, W, 3)`` uint8.
        size: ``dim`` (square) or ``(height, width)``.
        out: optional uint8 array of shape ``(..., height, width, 1)``.
        max_with: optional uint8 frames of the same shape; the result is that of
            ``gray_resize(np.maximum(frames, max_with), size)``, without the intermediate
            array (MaxAndSkip's flicker removal fused into the same pass).

    Returns:
        uint8 ``(..., height, width, 1)``.

    Examples:
        >>> import numpy as np
        >>> frame = np.full((210, 160, 3), (10, 200, 30), dtype=np.uint8)
        >>> gray_resize(frame, 84)[0, 0, 0]
        np.uint8(124)
        >>> gray_resize(frame, 84, max_with=np.full_like(frame, 255))[0, 0, 0]
        np.uint8(255)
    """
    if (
        type(size) is int
        and out is None
        and type(frames) is np.ndarray
        and (
            max_with is None
            or (
                type(max_with) is np.ndarray
                and max_with.dtype == np.uint8
                and max_with.shape == frames.shape
                and max_with.flags.c_contiguous
            )
        )
        and frames.dtype == np.uint8
        and frames.ndim in (3, 4)
        and frames.flags.c_contiguous
        and size >= 1
        and _impl.native()
    ):
        # Fast path for the per-step wrapper call; the C++ side validates shape and layout.
        batch = frames if frames.ndim == 4 else frames[None]
        second = max_with if max_with is None or max_with.ndim == 4 else max_with[None]
        o = np.empty((batch.shape[0], size, size, 1), dtype=np.uint8)
        _core.image_resize(batch, size, size, True, o, second)
        return o if frames.ndim == 4 else o[0]
    h, w = _size(size, "gray_resize")
    a, single = _frames(frames, "gray_resize", floats=False, channels=3)
    m = _max_with(max_with, a, single, "gray_resize")
    o = _out(out, (a.shape[0], h, w, 1), np.uint8, a, single, "gray_resize")
    if m is not None and np.may_share_memory(o, m):
        raise ValueError("gray_resize: out must not overlap max_with")
    if _impl.native():
        _core.image_resize(a, h, w, True, o, m)
    else:
        _ref.resize(a if m is None else np.maximum(a, m), h, w, True, o)
    return _result(o, single)


def resize(
    frames: np.ndarray,
    size: Size,
    out: np.ndarray | None = None,
    *,
    max_with: np.ndarray | None = None,
) -> np.ndarray:
    """INTER_AREA resize of uint8 or float frames (any channel count, any size ratio).

    Args:
        frames: ``(H, W, C)`` or ``(B, H, W, C)``, uint8 or float (floats become float32).
        size: ``dim`` (square) or ``(height, width)``.
        out: optional array of the result's shape and dtype (uint8 or float32).
        max_with: optional uint8 frames of the same shape (uint8 input only), max-pooled
            with ``frames`` in the same pass.

    Returns:
        ``(..., height, width, C)``, uint8 for uint8 input, else float32.

    Examples:
        >>> import numpy as np
        >>> x = np.arange(16, dtype=np.float32).reshape(4, 4, 1)
        >>> resize(x, 2)[..., 0]
        array([[ 2.5,  4.5],
               [10.5, 12.5]], dtype=float32)
    """
    h, w = _size(size, "resize")
    a, single = _frames(frames, "resize", floats=True)
    if max_with is not None and a.dtype != np.uint8:
        raise ValueError(f"resize: max_with needs uint8 frames, got {a.dtype}")
    m = _max_with(max_with, a, single, "resize")
    o = _out(out, (a.shape[0], h, w, a.shape[3]), a.dtype.type, a, single, "resize")
    if m is not None and np.may_share_memory(o, m):
        raise ValueError("resize: out must not overlap max_with")
    if _impl.native():
        _core.image_resize(a, h, w, False, o, m)
    else:
        _ref.resize(a if m is None else np.maximum(a, m), h, w, False, o)
    return _result(o, single)


def crop(
    frames: np.ndarray, top: int, left: int, height: int, width: int, out: np.ndarray | None = None
) -> np.ndarray:
    """Copies the window ``[top:top+height, left:left+width]`` of every frame.

    Args:
        frames: ``(H, W, C)`` or ``(B, H, W, C)`` of any numeric dtype (kept).
        top, left: the window's first row and column.
        height, width: the window's size; it must lie inside the frame.
        out: optional array of shape ``(..., height, width, C)`` and the frames' dtype.

    Returns:
        A contiguous copy of the window.

    Examples:
        >>> import numpy as np
        >>> crop(np.arange(12, dtype=np.uint8).reshape(3, 4, 1), 1, 1, 2, 2)[..., 0]
        array([[ 5,  6],
               [ 9, 10]], dtype=uint8)
    """
    a = frames if isinstance(frames, np.ndarray) else np.asarray(frames)
    if a.ndim not in (3, 4) or not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        raise ValueError(
            f"crop: frames must be a numeric array of shape (H, W, C) or "
            f"(B, H, W, C), got {a.dtype} array of shape {a.shape}"
        )
    single = a.ndim == 3
    if single:
        a = a[None]
    top, left, height, width = int(top), int(left), int(height), int(width)
    H, W = a.shape[1], a.shape[2]
    if top < 0 or left < 0 or height < 1 or width < 1 or top + height > H or left + width > W:
        raise ValueError(
            f"crop: window rows [{top}, {top + height}) x cols [{left}, "
            f"{left + width}) must be non-empty and inside the {H}x{W} frame"
        )
    item, c = a.itemsize, a.shape[3]
    rows_ok = (c == 1 or a.strides[3] == item) and (W == 1 or a.strides[2] == c * item)
    if not rows_ok or a.strides[0] < 0 or a.strides[1] < 0:
        a = np.ascontiguousarray(a)
    o = _out(out, (a.shape[0], height, width, c), a.dtype.type, a, single, "crop")
    if _impl.native():
        _core.image_crop(a, top, left, height, width, o)
    else:
        _ref.crop(a, top, left, height, width, o)
    return _result(o, single)


def max_last_two(frames: np.ndarray, axis: int = 0, out: np.ndarray | None = None) -> np.ndarray:
    """Element-wise maximum of the last two entries of ``frames`` along ``axis``.

    ``axis=0`` for one environment's buffer ``(T, H, W, C)``, ``axis=1`` for a batch
    ``(B, T, H, W, C)``; the result drops that axis. MaxAndSkip's flicker removal.

    Args:
        frames: uint8 or float32 array with at least 2 entries along ``axis``.
        axis: the time axis (negative values count from the end).
        out: optional array of the result's shape and the frames' dtype.

    Returns:
        ``max(frames[..., -2, ...], frames[..., -1, ...])`` along ``axis``.

    Examples:
        >>> import numpy as np
        >>> max_last_two(np.array([[9, 0], [1, 5], [3, 2]], dtype=np.uint8))
        array([3, 5], dtype=uint8)
    """
    a = frames if isinstance(frames, np.ndarray) else np.asarray(frames)
    if a.dtype not in (np.uint8, np.float32):
        raise ValueError(f"max_last_two: frames must be uint8 or float32, got {a.dtype}")
    if a.ndim < 1:
        raise ValueError("max_last_two: frames must have at least one axis")
    ax = int(axis)
    if not -a.ndim <= ax < a.ndim:
        raise ValueError(f"max_last_two: axis must be in [{-a.ndim}, {a.ndim}), got {axis}")
    ax %= a.ndim
    if a.shape[ax] < 2:
        raise ValueError(
            f"max_last_two: frames need at least 2 entries along axis {ax}, got shape {a.shape}"
        )
    a = np.ascontiguousarray(a)
    shape = a.shape[:ax] + a.shape[ax + 1 :]
    o = _out(out, (1, *shape), a.dtype.type, a, True, "max_last_two")[0]
    if _impl.native():
        _core.image_max_last_two(a, ax, o)
    else:
        _ref.max_last_two(a, ax, o)
    return o


def generic_pixel(
    frames: np.ndarray,
    dim: int = 84,
    grayscale: bool = False,
    zero_mean: bool = True,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """RLlib's GenericPixelPreprocessor maths, with correct float results for every option.

    Steps: crop rows ``25:-25``; INTER_AREA to 84x84 first when ``dim < 84``; INTER_AREA to
    ``dim x dim`` (uint8 input is rounded to uint8 after each resize, like OpenCV; float
    input stays float32); the unweighted channel mean when ``grayscale``; then
    ``(x - 128) / 128`` if ``zero_mean`` else ``x / 255`` (as ``x * float32(1/255)``), in
    float32. Unlike RLlib, uint8 RGB input neither wraps (``zero_mean``) nor raises.

    Args:
        frames: ``(H, W, 3)`` or ``(B, H, W, 3)`` with ``H > 50`` (Atari: 210x160),
            uint8 or float.
        dim: output side.
        grayscale: average the channels into one.
        zero_mean: scale to [-1, 1) instead of [0, 1].
        out: optional float32 array of shape ``(..., dim, dim, 1 if grayscale else 3)``.

    Returns:
        float32 ``(..., dim, dim, 1 | 3)``.

    Examples:
        >>> import numpy as np
        >>> frame = np.full((210, 160, 3), 255, dtype=np.uint8)
        >>> generic_pixel(frame, dim=42, grayscale=True)[0, 0]
        array([0.9921875], dtype=float32)
        >>> generic_pixel(frame, zero_mean=False).shape
        (84, 84, 3)
    """
    dim = int(dim)
    if dim < 1:
        raise ValueError(f"generic_pixel: dim must be >= 1, got {dim}")
    a, single = _frames(frames, "generic_pixel", floats=True, channels=3, min_height=51)
    o = _out(
        out, (a.shape[0], dim, dim, 1 if grayscale else 3), np.float32, a, single, "generic_pixel"
    )
    if _impl.native():
        _core.image_generic_pixel(a, dim, bool(grayscale), bool(zero_mean), o)
    else:
        _ref.generic_pixel(a, dim, bool(grayscale), bool(zero_mean), o)
    return _result(o, single)


def _index_frames(index: object, fn: str, what: str) -> tuple[np.ndarray, bool]:
    a = index if isinstance(index, np.ndarray) else np.asarray(index)
    if a.dtype != np.uint8 or a.ndim not in (2, 3) or 0 in a.shape[-2:]:
        raise ValueError(
            f"{fn}: {what} must be uint8 palette indices of shape (H, W) or "
            f"(B, H, W), got {a.dtype} array of shape {a.shape}"
        )
    single = a.ndim == 2
    if single:
        a = a[None]
    if a.strides[2] != 1 or a.strides[1] != a.shape[2] or a.strides[0] < 0:
        a = np.ascontiguousarray(a)
    return a, single


def _palette_table(table: object, fn: str, what: str, shape: tuple[int, ...]) -> np.ndarray:
    t = table if isinstance(table, np.ndarray) else np.asarray(table)
    if t.shape != shape or t.dtype not in (np.uint8, np.bool_):
        raise ValueError(
            f"{fn}: {what} must be a uint8 array of shape {shape}, got "
            f"{t.dtype} array of shape {t.shape}"
        )
    return np.ascontiguousarray(t.view(np.uint8))


def palette_resize(
    index: np.ndarray,
    palette: np.ndarray,
    size: Size,
    out: np.ndarray | None = None,
    *,
    gray: bool = True,
    max_with: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`gray_resize` (or colour :func:`resize`) of palette-indexed screens.

    ALE's ``getScreen`` returns one palette index per pixel; ``palette[index]`` is the RGB
    frame ``getScreenRGB`` would return. The result equals ``gray_resize(palette[index],
    size, max_with=palette[max_with])`` (``resize`` when not ``gray``) exactly, without
    building the RGB frames in Python.

    Args:
        index: uint8 ``(H, W)`` or ``(B, H, W)`` palette indices.
        palette: uint8 ``(256, 3)`` RGB colour of each index.
        size: ``dim`` (square) or ``(height, width)``.
        out: optional uint8 array of shape ``(..., height, width, 1 | 3)``.
        gray: OpenCV luminance (1 channel) or RGB (3 channels).
        max_with: optional indices of the same shape; the RGB frames are max-pooled first.

    Returns:
        uint8 ``(..., height, width, 1 | 3)``.

    Examples:
        >>> import numpy as np
        >>> pal = np.zeros((256, 3), dtype=np.uint8)
        >>> pal[2] = (10, 200, 30)
        >>> palette_resize(np.full((210, 160), 2, dtype=np.uint8), pal, 84)[0, 0, 0]
        np.uint8(124)
    """
    if (
        type(size) is int
        and size >= 1
        and out is None
        and type(index) is np.ndarray
        and index.dtype == np.uint8
        and index.ndim in (2, 3)
        and index.flags.c_contiguous
        and type(palette) is np.ndarray
        and palette.dtype == np.uint8
        and palette.shape == (256, 3)
        and palette.flags.c_contiguous
        and (
            max_with is None
            or (
                type(max_with) is np.ndarray
                and max_with.dtype == np.uint8
                and max_with.shape == index.shape
                and max_with.flags.c_contiguous
            )
        )
        and _impl.native()
    ):
        # Fast path for the per-step wrapper call; the C++ side checks overlaps.
        batch = index if index.ndim == 3 else index[None]
        second = max_with if max_with is None or max_with.ndim != 2 else max_with[None]
        o = np.empty((batch.shape[0], size, size, 1 if gray else 3), dtype=np.uint8)
        _core.image_palette_resize(batch, palette, size, size, bool(gray), o, second)
        return o if index.ndim == 3 else o[0]
    h, w = _size(size, "palette_resize")
    a, single = _index_frames(index, "palette_resize", "index")
    pal = _palette_table(palette, "palette_resize", "palette", (256, 3))
    m = None
    if max_with is not None:
        m, _ = _index_frames(max_with, "palette_resize", "max_with")
        if m.shape != a.shape:
            raise ValueError(
                f"palette_resize: max_with must have the index shape "
                f"{a.shape[1:] if single else a.shape}, got "
                f"{m.shape[1:] if single else m.shape}"
            )
    o = _out(out, (a.shape[0], h, w, 1 if gray else 3), np.uint8, a, single, "palette_resize")
    if m is not None and np.may_share_memory(o, m):
        raise ValueError("palette_resize: out must not overlap max_with")
    if np.may_share_memory(o, pal):
        raise ValueError("palette_resize: out must not overlap palette")
    if _impl.native():
        _core.image_palette_resize(a, pal, h, w, bool(gray), o, m)
    else:
        _ref.palette_resize(a, pal, h, w, bool(gray), o, m)
    return _result(o, single)


def palette_unknown(index: np.ndarray, known: np.ndarray) -> bool:
    """Whether ``index`` holds a palette index ``i`` with ``known[i] == 0``.

    Args:
        index: uint8 array of any shape.
        known: ``(256,)`` uint8 or bool flags.

    Examples:
        >>> import numpy as np
        >>> known = np.zeros(256, dtype=np.uint8)
        >>> known[[0, 14]] = 1
        >>> palette_unknown(np.array([0, 14, 14], np.uint8), known), palette_unknown(
        ...     np.array([0, 15], np.uint8), known)
        (False, True)
    """
    a = index if isinstance(index, np.ndarray) else np.asarray(index)
    if a.dtype != np.uint8:
        raise ValueError(f"palette_unknown: index must be uint8, got {a.dtype}")
    k = _palette_table(known, "palette_unknown", "known", (256,))
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    if _impl.native():
        return bool(_core.image_palette_unknown(a, k))
    return _ref.palette_unknown(a, k)
