"""Frame stacking for vectorised environments (RLlib's ``FrameStack``, batched, in C++).

:class:`FrameStacker` keeps the last ``k`` frames of ``num_envs`` environments in one ring
buffer allocated up front and writes the stacked observations, oldest frame first:

* ``channels_last=True`` (default, RLlib's ``np.concatenate(frames, axis=2)``):
  ``(num_envs, H, W, k*C)``, where channel ``j*C + c`` is channel ``c`` of frame ``j``;
* ``channels_last=False``: ``(num_envs, k*C, H, W)`` (torch's NCHW layout).

Frames are ``(H, W)`` or ``(H, W, C)``, as given by ``frame_shape``. A reset fills all ``k``
slots of an environment with its reset frame (like RLlib appending it k times).
``push(frames, reset_mask)`` supports vector-env autoreset: envs flagged in ``reset_mask``
are refilled with their frame instead of appending it. Pass ``out=`` (reused every step)
and a step allocates nothing; without it each call returns a fresh array, safe to keep.
Channels-first stackers also return the stacks in place (``push(frames, copy=False)``: a
read-only view, overwritten by the next step), so a step writes only the new frames.
Large batches are copied on :func:`rlblocks.set_num_threads` threads with the GIL released.

Frames of another dtype are converted when numpy calls the cast "safe" (e.g. bool to
uint8); anything else (e.g. int64 or float frames into a uint8 stacker) raises ValueError,
as do wrong shapes, unknown or repeated env ids, a bad ``out``, and stepping an env that was
never reset. A call that raises changes nothing.

``RLBLOCKS_IMPL=numpy`` makes new stackers use the numpy twin
(:mod:`rlblocks._reference.framestack`).

Examples:
    >>> import numpy as np
    >>> from rlblocks.framestack import FrameStacker
    >>> fs = FrameStacker(num_envs=2, k=4, frame_shape=(84, 84))
    >>> obs = fs.reset(np.zeros((2, 84, 84), np.uint8))
    >>> obs.shape, obs.dtype
    ((2, 84, 84, 4), dtype('uint8'))
    >>> out = np.empty_like(obs)
    >>> _ = fs.push(np.full((2, 84, 84), 7, np.uint8), out=out)
    >>> out[0, 0, 0].tolist()  # oldest first
    [0, 0, 0, 7]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlblocks import _core, _impl
from rlblocks._reference import framestack as _ref

__all__ = ["FrameStacker", "stacked_space"]


class FrameStacker:
    """The last ``k`` frames of ``num_envs`` environments, stacked on the channel axis.

    Args:
        num_envs: Number of environments B (>= 1).
        k: Frames per stack (1..256).
        frame_shape: ``(H, W)`` or ``(H, W, C)`` of one frame.
        dtype: Element type of frames and stacks (default uint8).
        channels_last: ``(B, H, W, k*C)`` if True (RLlib), else ``(B, k*C, H, W)``.

    Raises:
        ValueError: Invalid sizes or an unsupported dtype.

    Examples:
        >>> import numpy as np
        >>> fs = FrameStacker(3, k=2, frame_shape=(1, 1), channels_last=False)
        >>> fs.reset(np.array([[[1]], [[2]], [[3]]], np.uint8)).shape
        (3, 2, 1, 1)
        >>> obs = fs.push(np.array([[[4]], [[5]], [[6]]], np.uint8),
        ...               reset_mask=np.array([False, True, False]))
        >>> obs[:, :, 0, 0].tolist()  # env 1 was reset with frame 5
        [[1, 4], [5, 5], [3, 6]]
    """

    def __init__(
        self,
        num_envs: int,
        k: int,
        frame_shape: tuple[int, ...],
        dtype: Any = np.uint8,
        channels_last: bool = True,
    ) -> None:
        try:
            dt = np.dtype(dtype)
        except TypeError as err:
            raise ValueError(f"dtype: expected a numpy dtype, got {dtype!r}") from err
        if _impl.native():
            self._impl: Any = _core.FrameStacker(num_envs, k, frame_shape, dt, bool(channels_last))
        else:
            self._impl = _ref.FrameStacker(num_envs, k, frame_shape, dt, channels_last)

    @property
    def native(self) -> bool:
        """Whether this stacker runs on the C++ core (else the numpy twin)."""
        return isinstance(self._impl, _core.FrameStacker)

    @property
    def num_envs(self) -> int:
        return int(self._impl.num_envs)

    @property
    def k(self) -> int:
        return int(self._impl.k)

    @property
    def frame_shape(self) -> tuple[int, ...]:
        return tuple(self._impl.frame_shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._impl.dtype)

    @property
    def channels_last(self) -> bool:
        return bool(self._impl.channels_last)

    @property
    def observation_shape(self) -> tuple[int, ...]:
        """Shape of one env's stack: ``(H, W, k*C)`` or ``(k*C, H, W)``."""
        return tuple(self._impl.observation_shape)

    def reset(self, frames: Any, env_ids: Any = None, out: np.ndarray | None = None) -> np.ndarray:
        """Fills the stacks of ``env_ids`` with their reset frames.

        Args:
            frames: ``(len(env_ids), *frame_shape)`` (``(num_envs, ...)`` when env_ids is None).
            env_ids: Distinct env indices, or None for all envs.
            out: Optional output ``(len(env_ids), *observation_shape)``.

        Returns:
            The stacks of those envs (k copies of each reset frame).

        Raises:
            ValueError: Bad frames, env ids or out (nothing is changed).
        """
        return self._impl.reset(frames, env_ids, out)

    def push(
        self,
        frames: Any,
        reset_mask: Any = None,
        out: np.ndarray | None = None,
        copy: bool = True,
    ) -> np.ndarray:
        """Appends one frame per env and returns every env's stack.

        Args:
            frames: ``(num_envs, *frame_shape)``, one new frame per env.
            reset_mask: Optional bool ``(num_envs,)``: flagged envs were just reset
                (vector-env autoreset) and get their stack refilled with their frame.
            out: Optional output ``(num_envs, *observation_shape)``, reused between steps.
            copy: False (channels-first stackers only) returns the stacks in place, no
                copy: a read-only view that the next ``push`` or ``reset`` overwrites (copy
                what you keep). A step then writes just the new frames.

        Returns:
            ``(num_envs, *observation_shape)`` stacks, oldest frame first.

        Raises:
            ValueError: Bad frames, mask or out, an env that was never reset, or
                ``copy=False`` on a channel-last stacker or with ``out`` (nothing is changed).

        Examples:
            >>> import numpy as np
            >>> fs = FrameStacker(2, k=3, frame_shape=(2, 2), channels_last=False)
            >>> _ = fs.reset(np.zeros((2, 2, 2), np.uint8))
            >>> view = fs.push(np.ones((2, 2, 2), np.uint8), copy=False)
            >>> view.shape, view.flags.writeable, view[:, :, 0, 0].tolist()
            ((2, 3, 2, 2), False, [[0, 0, 1], [0, 0, 1]])
        """
        return self._impl.push(frames, reset_mask, out, copy)

    def observation(self, out: np.ndarray | None = None) -> np.ndarray:
        """Every env's current stack, without pushing anything.

        Raises:
            ValueError: A bad ``out`` or an env that was never reset.
        """
        return self._impl.observation(out)

    def get_state(self) -> dict[str, np.ndarray]:
        """The stacks, for checkpoints: ``{"frames": (num_envs, k, *frame_shape)`` oldest
        first, ``"ready": bool (num_envs,)}`` (an env never reset holds zeros). Pickling and
        ``copy.deepcopy`` go through it."""
        return self._impl.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        """Loads :meth:`get_state` output of a stacker with the same settings.

        Raises:
            ValueError: Not a dict, a missing key, frames of another dtype or shape, ready
                flags that are not bool ``(num_envs,)``, or frames held by an env that is
                not ready (nothing is changed).
        """
        self._impl.set_state(state)

    def __eq__(self, other: object) -> bool:
        """Same settings, backend and stacks (frames and ready flags)."""
        if not isinstance(other, FrameStacker):
            return NotImplemented
        mine, theirs = self.get_state(), other.get_state()
        return (
            repr(self) == repr(other)
            and self.native == other.native
            and all(np.array_equal(mine[key], theirs[key]) for key in ("frames", "ready"))
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"FrameStacker(num_envs={self.num_envs}, k={self.k}, "
            f"frame_shape={self.frame_shape}, dtype={self.dtype}, "
            f"channels_last={self.channels_last})"
        )


def stacked_space(space: Any, k: int, channels_last: bool = True) -> Any:
    """The observation space of ``k`` stacked frames of a ``Box`` space ``(H, W[, C])``.

    Bounds are repeated along the channel axis, as RLlib's ``FrameStack`` does.

    Raises:
        ValueError: ``space`` is not a Box of rank 2 or 3, or ``k < 1``.

    Examples:
        >>> import gymnasium as gym, numpy as np
        >>> stacked_space(gym.spaces.Box(0, 255, (84, 84, 1), np.uint8), 4).shape
        (84, 84, 4)
    """
    import gymnasium as gym

    if not isinstance(space, gym.spaces.Box) or len(space.shape) not in (2, 3):
        raise ValueError(f"stacked_space: expected a Box of shape (H, W) or (H, W, C), got {space}")
    if isinstance(k, bool) or not hasattr(k, "__index__") or int(k) < 1:
        raise ValueError(f"stacked_space: k must be an int >= 1, got {k!r}")
    low = space.low if space.low.ndim == 3 else space.low[..., None]
    high = space.high if space.high.ndim == 3 else space.high[..., None]
    low = np.concatenate([low] * int(k), axis=2)
    high = np.concatenate([high] * int(k), axis=2)
    if not channels_last:
        low, high = np.moveaxis(low, 2, 0), np.moveaxis(high, 2, 0)
    return gym.spaces.Box(low=low, high=high, dtype=space.dtype)
