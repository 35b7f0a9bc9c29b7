"""Running mean and variance with exact batched updates and merges (C++ core).

:class:`RunningStat` is the statistic behind :class:`rlblocks.filters.MeanStdFilter`: float64
state, Welford for one observation, two-pass moments plus Chan's parallel merge for a batch,
and RLlib's ``update(other)`` (merge what ``other`` saw since it was created). The numpy twin
is :class:`rlblocks._reference.filters.RunningStat`; ``RLBLOCKS_IMPL=numpy`` selects it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rlblocks import _core, _impl
from rlblocks._reference import filters as _ref

__all__ = ["RunningStat", "ShapeLike", "normalise_shape"]

ShapeLike = int | Sequence[int]


def _backend_stat(shape: tuple[int, ...], native: bool) -> Any:
    return _core.RunningStat(shape) if native else _ref.RunningStat(shape)


def normalise_shape(shape: Any) -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints (an int means a 1-d shape).

    Examples:
        >>> normalise_shape(3), normalise_shape([2, 2])
        ((3,), (2, 2))
    """
    if isinstance(shape, bool):
        raise ValueError(f"shape: expected an int or a tuple of ints, got {shape!r}")
    if hasattr(shape, "__index__"):
        shape = (int(shape),)
    if shape is None or isinstance(shape, (dict, str, bytes)) or not hasattr(shape, "__iter__"):
        raise ValueError(f"shape: expected an int or a tuple of non-negative ints, got {shape!r}")
    return _ref.parse_shape(tuple(shape))


class RunningStat:
    """Running mean and variance of observations of a fixed shape (float64 state).

    Welford for one observation, two-pass moments plus Chan's merge for a batch, and RLlib's
    ``update(other)`` which merges ``other``'s pushes since it was created (its "delta"
    state). All operations are exact to rounding: merged stats equal one stat that saw every
    sample. ``var`` is the unbiased ``S / (n - 1)`` as float32 (0 while ``n <= 1``) and
    ``std = sqrt(max(0, var))`` in float32, as in RLlib.

    With the C++ backend every method is atomic (an internal mutex), so sharing one stat
    between threads never corrupts it.

    Args:
        shape: Shape of one observation (an int means a 1-d shape).

    Examples:
        >>> import numpy as np
        >>> s = RunningStat((2,))
        >>> s.push(np.array([1.0, 10.0]))
        >>> s.push_batch(np.array([[3.0, 10.0], [5.0, 10.0]]))
        >>> s.n, s.mean.tolist(), s.var.tolist(), s.std.tolist()
        (3, [3.0, 10.0], [4.0, 0.0], [2.0, 0.0])
    """

    __slots__ = ("_stat",)

    def __init__(self, shape: ShapeLike = ()) -> None:
        self._stat = _backend_stat(normalise_shape(shape), _impl.native())

    @classmethod
    def _wrap(cls, backend: Any) -> RunningStat:
        obj = cls.__new__(cls)
        obj._stat = backend
        return obj

    @classmethod
    def on_backend(cls, shape: ShapeLike, native: bool) -> RunningStat:
        """An empty stat on the C++ core (``native``) or the numpy twin, whatever
        ``RLBLOCKS_IMPL`` says."""
        return cls._wrap(_backend_stat(normalise_shape(shape), native))

    @classmethod
    def from_state(cls, shape: ShapeLike, state: dict[str, Any]) -> RunningStat:
        """A stat of ``shape`` holding ``state`` (as returned by :meth:`state`)."""
        stat = cls(shape)
        stat.set_state(state)
        return stat

    @property
    def native(self) -> bool:
        """Whether this stat runs on the C++ core (else the numpy twin)."""
        return isinstance(self._stat, _core.RunningStat)

    @property
    def backend(self) -> Any:
        """The C++ or numpy object itself, as the filter kernels take it."""
        return self._stat

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of one observation."""
        return tuple(self._stat.shape)

    @property
    def n(self) -> int:
        """Number of observations (RLlib's ``num_pushes``)."""
        return int(self._stat.n)

    num_pushes = n

    @property
    def n_delta(self) -> int:
        """Observations pushed into this stat itself (RLlib's ``num_pushes_delta``)."""
        return int(self._stat.n_delta)

    @property
    def mean(self) -> np.ndarray:
        """Running mean (float64 copy)."""
        return self._stat.mean

    @property
    def var(self) -> np.ndarray:
        """Unbiased variance as float32 (zeros while ``n <= 1``)."""
        return self._stat.var

    @property
    def std(self) -> np.ndarray:
        """``sqrt(max(0, var))`` in float32."""
        return self._stat.std

    def push(self, x: Any) -> None:
        """Adds one observation of shape ``self.shape``.

        Raises:
            ValueError: Wrong shape, non-numeric or non-finite values (nothing is updated).
        """
        self._stat.push(x)

    def push_batch(self, x: Any) -> None:
        """Adds a batch ``(B, *shape)``; the same stats as pushing its rows one by one.

        Raises:
            ValueError: Wrong shape, non-numeric or non-finite values (nothing is updated).
        """
        self._stat.push_batch(x)

    def update(self, other: RunningStat) -> None:
        """Merges what ``other`` saw since it was created (its delta state) into self.

        Self's own delta state does not change, as in RLlib. Applying the same ``other``
        twice counts its samples twice.

        Raises:
            ValueError: ``other`` has a different shape, or the merged mean / sum of squared
                deviations would overflow float64 (nothing is changed then).
        """
        if not isinstance(other, RunningStat):
            raise ValueError(f"update: expected a RunningStat, got {type(other).__name__}")
        self._stat.update(other._converted(self.native))

    def _converted(self, native: bool) -> Any:
        """The backend object, converted (by state) when the other backend is wanted."""
        if self.native == native:
            return self._stat
        twin = _backend_stat(self.shape, native)
        twin.set_state(self._stat.get_state())
        return twin

    def converted(self, native: bool) -> RunningStat:
        """Self if it runs on the wanted backend, else a copy of it on that backend."""
        if self.native == native:
            return self
        return RunningStat._wrap(self._converted(native))

    def copy(self) -> RunningStat:
        """An independent copy (same backend)."""
        return RunningStat._wrap(self._stat.copy())

    def state(self) -> dict[str, Any]:
        """RLlib's six fields: ``num_pushes``, ``num_pushes_delta``, ``mean_array``,
        ``mean_delta_array``, ``sum_sq_diff_array``, ``sum_sq_diff_delta_array``."""
        return self._stat.get_state()

    to_state = state

    def set_state(self, state: dict[str, Any]) -> None:
        """Loads :meth:`state` output; ValueError (nothing changed) if it does not fit."""
        if not isinstance(state, dict):
            raise ValueError(f"state: expected a dict, got {type(state).__name__}")
        self._stat.set_state(state)

    def __getstate__(self) -> dict[str, Any]:
        return {"shape": self.shape, "native": self.native, "state": self.state()}

    def __setstate__(self, d: dict[str, Any]) -> None:
        self._stat = _backend_stat(tuple(d["shape"]), bool(d["native"]))
        self._stat.set_state(d["state"])

    def __repr__(self) -> str:
        return f"RunningStat(shape={self.shape}, n={self.n})"
