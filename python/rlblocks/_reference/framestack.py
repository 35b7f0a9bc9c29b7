"""Pure-numpy twin of the native frame stacker (``rlblocks._core.FrameStacker``).

A ring ``(B, k, H, W, C)`` with one write position for all envs (a reset fills all k slots,
so every env always holds k frames); the stacked observation is ``np.concatenate`` of the k
slots, oldest first, on the channel axis: ``(B, H, W, k*C)`` (RLlib's FrameStack) or
``(B, k*C, H, W)``. Same API, validation and results as the C++ kernel; it is the oracle of
the tests and the "numpy concatenate" baseline of the benchmarks.

Examples:
    >>> import numpy as np
    >>> fs = FrameStacker(num_envs=1, k=3, frame_shape=(1, 2))
    >>> fs.reset(np.array([[[1, 2]]], dtype=np.uint8))[0, 0].tolist()
    [[1, 1, 1], [2, 2, 2]]
    >>> fs.push(np.array([[[7, 8]]], dtype=np.uint8))[0, 0].tolist()
    [[1, 1, 7], [2, 2, 8]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlblocks._reference.arrays import describe
from rlblocks._reference.filters import checked_product

MAX_K = 256


def _shape_str(shape: tuple[int, ...]) -> str:
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValueError(f"{name}: expected an int, got {value!r}")
    return int(value)


def parse_config(
    num_envs: Any, k: Any, frame_shape: Any, dtype: Any
) -> tuple[int, int, tuple[int, ...], np.dtype]:
    """Validates the stacker's settings (the same rules as the C++ constructor)."""
    n = _int(num_envs, "num_envs")
    if n < 1:
        raise ValueError(f"num_envs: expected >= 1, got {n}")
    kk = _int(k, "k")
    if not 1 <= kk <= MAX_K:
        raise ValueError(f"k: expected 1 <= k <= {MAX_K}, got {kk}")
    if isinstance(frame_shape, (str, bytes)) or not hasattr(frame_shape, "__iter__"):
        raise ValueError(f"frame_shape: expected (H, W) or (H, W, C), got {frame_shape!r}")
    shape = tuple(_int(d, "frame_shape") for d in frame_shape)
    if len(shape) not in (2, 3) or any(d < 1 for d in shape):
        raise ValueError(
            "frame_shape: expected (H, W) or (H, W, C) with positive sizes, got "
            f"{_shape_str(shape)}"
        )
    try:
        dt = np.dtype(dtype)
    except TypeError as err:
        raise ValueError(f"dtype: expected a numpy dtype, got {dtype!r}") from err
    if dt.kind not in "biuf" or dt.itemsize not in (1, 2, 4, 8) or not dt.isnative:
        raise ValueError(
            f"dtype: expected a native bool/int/uint/float dtype of 1, 2, 4 or 8 bytes, got {dt}"
        )
    c = shape[2] if len(shape) == 3 else 1
    nbytes = checked_product(
        (n, kk, shape[0], shape[1], c, dt.itemsize),
        "FrameStacker: num_envs * k * H * W * C * itemsize",
    )
    if nbytes > 2**40:
        raise ValueError(
            f"FrameStacker: num_envs * k * frame bytes = {nbytes} is too large "
            "(at most 2**40 bytes)"
        )
    return n, kk, shape, dt


class FrameStacker:
    """Numpy twin of :class:`rlblocks.framestack.FrameStacker` (same arguments)."""

    def __init__(
        self,
        num_envs: int,
        k: int,
        frame_shape: tuple[int, ...],
        dtype: Any = np.uint8,
        channels_last: bool = True,
    ) -> None:
        self.num_envs, self.k, self.frame_shape, self.dtype = parse_config(
            num_envs, k, frame_shape, dtype
        )
        self.channels_last = bool(channels_last)
        h, w = self.frame_shape[:2]
        c = self.frame_shape[2] if len(self.frame_shape) == 3 else 1
        self.observation_shape = (h, w, self.k * c) if self.channels_last else (self.k * c, h, w)
        self._ring = np.zeros((self.num_envs, self.k, h, w, c), dtype=self.dtype)
        self._pos = 0  # slot of the newest frame
        self._ready = np.zeros(self.num_envs, dtype=bool)

    # ------------------------------------------------------------------ validation

    def _frames(self, frames: Any, n: int, name: str) -> np.ndarray:
        try:
            arr = np.asarray(frames)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{name}: expected an array, got {frames!r}") from err
        want = (n, *self.frame_shape)
        if arr.shape != want:
            raise ValueError(
                f"{name}: expected shape {_shape_str(want)}, got {_shape_str(arr.shape)}"
            )
        if arr.dtype != self.dtype and not np.can_cast(arr.dtype, self.dtype, "safe"):
            raise ValueError(
                f"{name}: dtype {arr.dtype} cannot be safely cast to the stacker's dtype "
                f"{self.dtype}"
            )
        # converted to C order first, as natively: a strided view is copied, and the overlap
        # check with out= then applies to the memory actually read
        arr = np.ascontiguousarray(arr.astype(self.dtype, copy=False))
        return arr.reshape(n, *self._ring.shape[2:])

    def _out(self, out: Any, n: int, frames: np.ndarray | None) -> np.ndarray:
        want = (n, *self.observation_shape)
        if out is None:
            return np.empty(want, dtype=self.dtype)
        ok = (
            isinstance(out, np.ndarray)
            and out.dtype == self.dtype
            and out.flags.c_contiguous
            and out.flags.writeable
            and out.flags.aligned
            and out.shape == want
        )
        if not ok:
            if isinstance(out, np.ndarray):
                got = f"{out.dtype} array of shape {_shape_str(out.shape)}"
                got += "" if out.flags.writeable else " (read-only)"
                got += "" if out.flags.c_contiguous else " (not C-contiguous)"
            else:
                got = repr(type(out))
            raise ValueError(
                f"out: expected a writeable C-contiguous {self.dtype} array of shape "
                f"{_shape_str(want)}, got {got}"
            )
        if frames is not None and frames.size and out.size and np.shares_memory(out, frames):
            raise ValueError("out: overlaps frames; pass a separate output array")
        return out

    def _ids(self, env_ids: Any) -> np.ndarray:
        arr = np.asarray(env_ids)
        if arr.ndim != 1 or not (arr.dtype.kind in "iu" or arr.size == 0):
            raise ValueError(
                f"env_ids: expected a 1-d sequence of ints in [0, {self.num_envs}), got {env_ids!r}"
            )
        ids = arr.astype(np.int64)
        bad = (ids < 0) | (ids >= self.num_envs)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"env_ids[{i}] = {int(ids[i])} is out of range [0, {self.num_envs})")
        uniq, counts = np.unique(ids, return_counts=True)
        if (counts > 1).any():
            dup = int(uniq[np.argmax(counts > 1)])
            raise ValueError(f"env_ids: env {dup} appears more than once")
        return ids

    # ------------------------------------------------------------------ stacking

    def _stack(self, envs: Any, out: np.ndarray) -> np.ndarray:
        order = [(self._pos + 1 + j) % self.k for j in range(self.k)]
        if self.channels_last:
            np.concatenate([self._ring[envs, s] for s in order], axis=-1, out=out)
        else:
            np.concatenate(
                [np.moveaxis(self._ring[envs, s], -1, 1) for s in order], axis=1, out=out
            )
        return out

    def reset(self, frames: Any, env_ids: Any = None, out: Any = None) -> np.ndarray:
        """Fills the stacks of ``env_ids`` (all envs when None) with their reset frame and
        returns those stacks ``(len(env_ids), *observation_shape)``."""
        ids = np.arange(self.num_envs) if env_ids is None else self._ids(env_ids)
        name = "frames" if env_ids is None else "frames (one per env id)"
        f = self._frames(frames, len(ids), name)
        result = self._out(out, len(ids), f)
        self._ring[ids] = f[:, None]
        self._ready[ids] = True
        return self._stack(ids, result)

    def push(
        self, frames: Any, reset_mask: Any = None, out: Any = None, copy: bool = True
    ) -> np.ndarray:
        """Appends one frame per env (envs flagged in ``reset_mask`` are refilled with it)
        and returns all stacks ``(num_envs, *observation_shape)``; ``copy=False``
        (channels-first only) returns them read-only, valid until the next push or reset."""
        if not copy and self.channels_last:
            raise ValueError(
                "copy=False needs channels_last=False: channel-last stacks "
                "interleave the frames, so they exist only as copies"
            )
        if not copy and out is not None:
            raise ValueError("out= and copy=False exclude each other")
        f = self._frames(frames, self.num_envs, "frames")
        mask = None
        if reset_mask is not None:
            mask = np.asarray(reset_mask)
            if mask.dtype != np.bool_ or mask.shape != (self.num_envs,):
                raise ValueError(
                    f"reset_mask: expected a bool array of shape ({self.num_envs},), got "
                    f"{mask.dtype} array of shape {_shape_str(mask.shape)}"
                )
        unready = ~self._ready if mask is None else ~(self._ready | mask)
        if unready.any():
            raise ValueError(
                f"env {int(np.argmax(unready))} has no frames yet: call reset() for it first, "
                "or flag it in reset_mask"
            )
        result = self._out(out, self.num_envs, f)
        slot = (self._pos + 1) % self.k
        self._ring[:, slot] = f
        if mask is not None and mask.any():
            self._ring[mask] = f[mask][:, None]
            self._ready |= mask
        self._pos = slot
        stacks = self._stack(slice(None), result)
        if not copy:
            stacks.setflags(write=False)
        return stacks

    def observation(self, out: Any = None) -> np.ndarray:
        """The current stacks of all envs."""
        if not self._ready.all():
            raise ValueError(
                f"env {int(np.argmin(self._ready))} has no frames yet: call reset() first"
            )
        return self._stack(slice(None), self._out(out, self.num_envs, None))

    # ------------------------------------------------------------------ state

    def get_state(self) -> dict[str, np.ndarray]:
        """``{"frames": (num_envs, k, *frame_shape) oldest first, "ready": bool (num_envs,)}``."""
        order = [(self._pos + 1 + j) % self.k for j in range(self.k)]
        frames = self._ring[:, order].reshape(self.num_envs, self.k, *self.frame_shape)
        return {"frames": frames.copy(), "ready": self._ready.copy()}

    def set_state(self, state: Any) -> None:
        """Loads :meth:`get_state` output after checking all of it (the native checks and
        messages); nothing changes on a ValueError."""
        if not isinstance(state, dict):
            raise ValueError(f"state: expected a dict, got {type(state).__name__}")
        for key in ("frames", "ready"):
            if key not in state:
                raise ValueError(f"state: missing key '{key}'")
        frames, ready = state["frames"], state["ready"]
        want = (self.num_envs, self.k, *self.frame_shape)
        if not isinstance(frames, np.ndarray) or frames.dtype != self.dtype or frames.shape != want:
            raise ValueError(
                f"state['frames']: expected a {self.dtype} array of shape {_shape_str(want)} "
                f"(num_envs, k, *frame_shape), got {describe(frames)}"
            )
        if (
            not isinstance(ready, np.ndarray)
            or ready.dtype.kind != "b"
            or ready.shape != (self.num_envs,)
        ):
            raise ValueError(
                f"state['ready']: expected a bool array of shape ({self.num_envs},), got "
                f"{describe(ready)}"
            )
        raw = np.ascontiguousarray(frames).view(np.uint8).reshape(self.num_envs, -1)
        stale = ~ready & raw.any(axis=1)
        if stale.any():
            b = int(np.argmax(stale))
            raise ValueError(
                f"state['frames'][{b}]: env {b} is not ready (state['ready'][{b}] is False) but "
                "holds frames; an env never reset holds zeros"
            )
        self._ring = frames.reshape(self._ring.shape).copy()
        self._ready = ready.astype(bool, copy=True)
        self._pos = self.k - 1
