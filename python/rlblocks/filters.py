"""Observation filters: running mean/std normalisation with RLlib's semantics (C++ core).

``MeanStdFilter`` keeps two :class:`~rlblocks.running_stat.RunningStat` objects,
``running_stats`` (everything this filter has seen or merged) and ``buffer`` (what it has
seen since the last ``reset_buffer()``), exactly like RLlib, and supports RLlib's
distributed sync protocol:

* each worker: ``snapshot = f.as_serializable(); f.reset_buffer()``;
* the driver: ``local.apply_changes(snapshot, with_buffer=False)`` for every worker;
* each worker: ``f.sync(local.as_serializable())``.

Afterwards every filter's stats equal one stat over all samples (to about 1e-15 relative:
the merge is Chan's exact parallel formula).

Differences from RLlib (docs/differences.md, difference 15):

* ``__call__`` accepts one observation ``shape`` or a batch ``(B, *shape)`` and always returns
  float32 (RLlib raises on batches and casts back to the input dtype, which truncates int
  input). A batch is pushed as a whole and then normalised with the stats *after the whole
  batch*, so row 0 of a batch is normalised with statistics that include rows 1..B-1. The
  stats equal pushing the rows one at a time (to about 1e-15 relative).
* NaN/inf, a wrong shape or a non-numeric input raise ``ValueError`` and update nothing.
  So does a finite value the float64 statistics cannot hold (``-1e308`` after ``1e308``,
  ``+-1e300`` in one column: the squared deviation overflows): the error names the column
  and the value, and the stats stay exactly as they were (RLlib's would turn NaN/inf and
  normalise every later observation to NaN or 0). Huge values whose moments fit are taken
  (sums are scaled by a power of two when the plain sum overflows), and a feature whose
  spread exceeds float32 (std > 3.4e38) is divided by its float64 std instead of inf.
* ``demean``, ``destd`` and ``update`` must be bools (``"no"`` would read as True).
* ``shape`` is a tuple (RLlib stores ``np.array(shape)``).
* ``state_dict()`` / ``load_state_dict()`` for checkpoints, and pickling.

Everything else matches RLlib: update-then-normalise (so the first output is 0),
``std`` from the unbiased float32 variance, ``x / (std + 1e-6)``, clipping when ``clip`` is
truthy, ``get_filter("MeanStdFilter", shape)`` without clipping, and ``apply_changes``
double-counting a buffer applied twice.

``RLBLOCKS_IMPL=numpy`` (or :func:`rlblocks._impl.use_numpy_reference`) makes new stats and
filters use the numpy twin in :mod:`rlblocks._reference.filters`.

Examples:
    >>> import numpy as np
    >>> from rlblocks.filters import MeanStdFilter
    >>> f = MeanStdFilter((2,))
    >>> f(np.array([1.0, 2.0]))  # the first observation normalises to 0
    array([0., 0.], dtype=float32)
    >>> f(np.array([[3.0, 2.0], [5.0, 2.0]])).round(3)  # a batch: mean 3, std 2 after it
    array([[0., 0.],
           [1., 0.]], dtype=float32)
    >>> f.running_stats.n
    3
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from rlblocks import _core, _impl
from rlblocks._reference import filters as _ref
from rlblocks.layout import Layout
from rlblocks.mask_keys import MASK_KEY, is_mask_space
from rlblocks.running_stat import RunningStat, ShapeLike, normalise_shape

__all__ = [
    "ConcurrentMeanStdFilter",
    "Filter",
    "MeanStdFilter",
    "NoFilter",
    "check_passthrough",
    "get_filter",
    "unfiltered_columns",
]


def _checked_flag(value: Any, name: str) -> bool:
    """A bool option (``demean``, ``destd``): True/False or numpy's bools, nothing else (a
    string such as ``"no"`` would otherwise read as True)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name}: expected True or False, got {value!r}")
    return bool(value)


def unfiltered_columns(lay: Layout) -> np.ndarray:
    """The columns of ``lay``'s flat row that an observation filter must pass through:
    its :attr:`~rlblocks.layout.Layout.structure_columns` (list lengths, graph counts and
    links, a text's characters) and, for RLlib's action-mask form, the ``action_mask``'s
    columns.

    Normalised, a length of 3 would read as 0.4 (the list looks empty to the model), a
    graph's edge links would point at other nodes, a character's one-hot row would look up a
    blend of characters and a mask's 1 would read as another value.

    Examples:
        >>> import gymnasium as gym
        >>> from rlblocks.layout import layout
        >>> space = gym.spaces.Dict({"action_mask": gym.spaces.MultiBinary(2),
        ...                          "observations": gym.spaces.Text(3, charset="ab")})
        >>> # the mask (0-1), the text's length (2), its 3 characters one-hot over "ab" (3-8)
        >>> unfiltered_columns(layout(space)).tolist()
        [0, 1, 2, 3, 4, 5, 6, 7, 8]
    """
    columns = lay.structure_columns
    if is_mask_space(lay.space):
        mask = lay.find((MASK_KEY,)).columns
        columns = np.union1d(columns, np.arange(mask.start, mask.stop, dtype=np.int64))
    return columns


def check_passthrough(obs_filter: Any, lay: Layout) -> None:
    """Raises ValueError when ``obs_filter`` (a :class:`MeanStdFilter` over ``lay``'s rows)
    would normalise one of :func:`unfiltered_columns`; other filters pass.

    Examples:
        >>> import gymnasium as gym
        >>> from rlblocks.layout import layout
        >>> from rlblocks.spaces import Repeated
        >>> lay = layout(Repeated(gym.spaces.Box(-1, 1, (2,)), max_len=3))  # length, 3 items
        >>> check_passthrough(MeanStdFilter((lay.size,), passthrough=[0]), lay)
        >>> check_passthrough(MeanStdFilter((lay.size,)), lay)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: MeanStdFilter would normalise the columns [0] that the model reads as ...
    """
    if not isinstance(obs_filter, MeanStdFilter):
        return
    needed = unfiltered_columns(lay)
    kept: Any = obs_filter.passthrough if obs_filter.passthrough is not None else []
    missing = np.setdiff1d(needed, kept)
    if missing.size:
        raise ValueError(
            f"{type(obs_filter).__name__} would normalise the columns {_listed(missing)} that "
            "the model reads as counts, indices, characters or the action mask; build it with "
            "passthrough=unfiltered_columns(layout)"
        )


def _checked_passthrough(
    columns: Any, shape: tuple[int, ...], name: str = "passthrough"
) -> np.ndarray | None:
    """``columns`` as a sorted read-only int64 array (None for None or no columns)."""
    if columns is None:
        return None
    given = np.asarray(columns)
    if given.ndim != 1 or (given.size and given.dtype.kind not in "iu"):
        raise ValueError(f"{name}: expected a 1-d sequence of column indices, got {columns!r}")
    if given.size == 0:
        return None
    if len(shape) != 1:
        raise ValueError(f"{name}: columns need a 1-d filter shape, this one is {shape}")
    arr = np.unique(given.astype(np.int64))
    if len(arr) != given.size or arr[0] < 0 or arr[-1] >= shape[0]:
        raise ValueError(
            f"{name}: expected distinct columns in [0, {shape[0]}), got {_listed(columns)}"
        )
    arr.setflags(write=False)
    return arr


def _same_columns(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


def _listed(columns: Any, show: int = 8) -> str:
    """Column indices for a message: the first few and how many in all."""
    values = [] if columns is None else [int(c) for c in np.asarray(columns).ravel()]
    head = ", ".join(map(str, values[:show]))
    return f"[{head}]" if len(values) <= show else f"[{head}, ...] ({len(values)} columns)"


class Filter(Protocol):
    """What every observation filter provides (RLlib's ``Filter`` interface)."""

    is_concurrent: bool

    def __call__(self, x: Any, update: bool = True) -> Any: ...

    def apply_changes(self, other: Any, with_buffer: bool = False) -> None: ...

    def copy(self) -> Any: ...

    def sync(self, other: Any) -> None: ...

    def reset_buffer(self) -> None: ...

    def as_serializable(self) -> Any: ...


class NoFilter:
    """The identity filter.

    Arrays, dicts and tuples pass through unchanged; anything else becomes ``np.asarray(x)``.

    Examples:
        >>> NoFilter()([1, 2])
        array([1, 2])
    """

    is_concurrent = True

    def __call__(self, x: Any, update: bool = True) -> Any:
        if isinstance(x, (np.ndarray, dict, tuple)):
            return x
        return np.asarray(x)

    def apply_changes(self, other: Any, with_buffer: bool = False) -> None:
        """Nothing to merge."""

    def copy(self) -> NoFilter:
        return self

    def sync(self, other: Any) -> None:
        """Nothing to sync."""

    def reset_buffer(self) -> None:
        """No buffer."""

    def as_serializable(self) -> NoFilter:
        return self

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to load."""

    def __repr__(self) -> str:
        return "NoFilter()"


class MeanStdFilter:
    """Normalises observations by a running mean and std (RLlib's ``MeanStdFilter``).

    ``__call__`` first pushes the observation(s) into ``running_stats`` and ``buffer`` (when
    ``update``), then returns ``clip((x - mean) / (std + 1e-6), -clip, clip)`` as float32,
    where ``mean`` is skipped if not ``demean``, the division if not ``destd``, and the
    clipping if ``clip`` is ``None`` or 0.

    Not thread-safe as a whole (use :class:`ConcurrentMeanStdFilter` to share one filter
    between threads); with the C++ backend each stat stays consistent regardless.

    Args:
        shape: Shape of one observation (an int means a 1-d shape).
        demean: Subtract the running mean.
        destd: Divide by the running std (+ 1e-6).
        clip: Clip the result to ``[-clip, clip]``; ``None`` or 0 disables clipping.
        passthrough: Columns of a 1-d observation returned as they came (as float32),
            neither normalised nor clipped; their statistics are still kept. The trainers
            pass the layout's :attr:`~rlblocks.layout.Layout.structure_columns` (list
            lengths, graph counts and links, a text's characters) and an ``action_mask``'s
            columns, which models read as counts, indices and flags.

    Raises:
        ValueError: A shape that is not an int/tuple of ints, a negative / NaN clip, or
            passthrough columns that are not distinct ints inside a 1-d shape.

    Examples:
        >>> import numpy as np
        >>> f = MeanStdFilter((3,), clip=1.0)
        >>> _ = f(np.zeros((4, 3)))
        >>> f(np.array([10.0, 0.0, -10.0]))  # clipped to [-1, 1]
        array([ 1.,  0., -1.], dtype=float32)
        >>> g = f.copy(); g.running_stats.n
        5
        >>> h = MeanStdFilter((3,), passthrough=[0])  # column 0: a list's length
        >>> _ = h(np.array([[2.0, 1.0, 1.0], [4.0, 3.0, 1.0]]))
        >>> h(np.array([4.0, 3.0, 1.0])).round(3)
        array([4.   , 0.577, 0.   ], dtype=float32)
    """

    is_concurrent = False

    def __init__(
        self,
        shape: ShapeLike,
        demean: bool = True,
        destd: bool = True,
        clip: float | None = 10.0,
        passthrough: Sequence[int] | np.ndarray | None = None,
    ) -> None:
        self.shape: tuple[int, ...] = normalise_shape(shape)
        self.demean = _checked_flag(demean, "demean")
        self.destd = _checked_flag(destd, "destd")
        self.clip = self._checked_clip(clip)
        self.passthrough = _checked_passthrough(passthrough, self.shape)
        self._native = _impl.native()
        self._running = RunningStat.on_backend(self.shape, self._native)
        self._buffer = RunningStat.on_backend(self.shape, self._native)

    @staticmethod
    def _checked_clip(clip: Any) -> float | None:
        if clip is None:
            return None
        if isinstance(clip, bool) or not isinstance(clip, (int, float, np.integer, np.floating)):
            raise ValueError(f"clip: expected a positive number, 0 or None, got {clip!r}")
        value = float(clip)
        if math.isnan(value) or value < 0:
            raise ValueError(f"clip: expected a positive number, 0 or None, got {clip!r}")
        return value

    def _clip_bound(self) -> float:
        return self.clip if self.clip else math.inf

    @property
    def running_stats(self) -> RunningStat:
        """Everything this filter has seen or merged."""
        return self._running

    @running_stats.setter
    def running_stats(self, stat: RunningStat) -> None:
        self._running = self._adopt(stat, "running_stats")

    @property
    def buffer(self) -> RunningStat:
        """What this filter has seen since the last :meth:`reset_buffer`."""
        return self._buffer

    @buffer.setter
    def buffer(self, stat: RunningStat) -> None:
        self._buffer = self._adopt(stat, "buffer")

    def _adopt(self, stat: Any, name: str) -> RunningStat:
        if not isinstance(stat, RunningStat):
            raise ValueError(f"{name}: expected a RunningStat, got {type(stat).__name__}")
        if stat.shape != self.shape:
            raise ValueError(f"{name}: shape {stat.shape} differs from the filter's {self.shape}")
        return stat.converted(self._native)

    def __call__(self, x: Any, update: bool = True, out: np.ndarray | None = None) -> Any:
        """Normalises one observation or a batch ``(B, *shape)``; returns float32.

        Args:
            x: One observation of ``self.shape`` or a batch of them.
            update: Push ``x`` into the stats first (RLlib's update-then-normalise).
            out: Optional float32 C-contiguous array of ``x``'s shape to write into (may be
                ``x`` itself when ``x`` is a float32 array).

        Returns:
            float32 array of ``x``'s shape (a numpy float32 scalar for shape ``()``).

        Raises:
            ValueError: Wrong shape, non-numeric or NaN/inf values, or a bad ``out``; the
                stats and ``out`` are then unchanged.
        """
        kept = self._kept_columns(x)
        fn = _core.mean_std_filter if self._native else _ref.mean_std_filter
        result = fn(
            self._running.backend,
            self._buffer.backend,
            x,
            _checked_flag(update, "update"),
            self.demean,
            self.destd,
            self._clip_bound(),
            out,
        )
        if kept is not None:
            result[..., self.passthrough] = kept
        if result.ndim == 0 and out is None:
            return result[()]
        return result

    def _kept_columns(self, x: Any) -> np.ndarray | None:
        """The passthrough columns of ``x`` as float32, taken before ``x`` may be
        overwritten (``out=x``); None without passthrough columns, or for an input the
        filter itself will refuse (wrong width or dtype: its message is the one raised)."""
        if self.passthrough is None:
            return None
        arr = np.asarray(x)
        if arr.ndim == 0 or arr.shape[-1] != self.shape[0] or arr.dtype.kind not in "biuf":
            return None
        return arr[..., self.passthrough].astype(np.float32)

    def apply_changes(self, other: MeanStdFilter, with_buffer: bool = False) -> None:
        """Merges ``other.buffer`` into ``running_stats`` (RLlib semantics).

        With ``with_buffer`` this filter's buffer becomes a copy of ``other.buffer``.
        Applying the same ``other`` twice counts its buffer twice, as RLlib documents.

        Examples:
            >>> a, b = MeanStdFilter(()), MeanStdFilter(())
            >>> _ = a(1.0); _ = b(2.0)
            >>> a.apply_changes(b); a.running_stats.n, float(a.running_stats.mean)
            (2, 1.5)
        """
        self._check_other(other)
        self._running.update(other.buffer)
        if with_buffer:
            self.buffer = other.buffer.copy()

    def _check_other(self, other: Any) -> None:
        if not isinstance(other, MeanStdFilter):
            raise ValueError(f"expected a MeanStdFilter, got {type(other).__name__}")
        if other.shape != self.shape:
            raise ValueError(f"other filter has shape {other.shape}, this one {self.shape}")

    def copy(self) -> MeanStdFilter:
        """A new filter (same class and backend) holding copies of these stats."""
        other = type(self).__new__(type(self))
        other._init_copy_of(self)
        return other

    def _init_copy_of(self, src: MeanStdFilter) -> None:
        self.shape = src.shape
        self.demean, self.destd, self.clip = src.demean, src.destd, src.clip
        self.passthrough = src.passthrough
        self._native = src._native
        self._running = src._running.copy()
        self._buffer = src._buffer.copy()

    def as_serializable(self) -> MeanStdFilter:
        """A copy to send to another process (RLlib's ``as_serializable``); picklable."""
        return self.copy()

    def sync(self, other: MeanStdFilter) -> None:
        """Takes ``other``'s settings, running stats and buffer (copies)."""
        self._check_other(other)
        self.demean, self.destd, self.clip = other.demean, other.destd, other.clip
        self.passthrough = other.passthrough
        self.running_stats = other.running_stats.copy()
        self.buffer = other.buffer.copy()

    def reset_buffer(self) -> None:
        """Starts a fresh, empty buffer."""
        self._buffer = RunningStat.on_backend(self.shape, self._native)

    clear_buffer = reset_buffer

    def state_dict(self) -> dict[str, Any]:
        """Settings and both stats, for checkpoints (numpy arrays and ints)."""
        return {
            "shape": list(self.shape),
            "demean": self.demean,
            "destd": self.destd,
            "clip": self.clip,
            "passthrough": None if self.passthrough is None else self.passthrough.tolist(),
            "running_stats": self._running.state(),
            "buffer": self._buffer.state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Loads :meth:`state_dict` output of a filter with the same shape.

        ``passthrough`` is optional (states written before it existed keep this filter's);
        given, it must equal this filter's: the columns follow from the observation's
        layout, so other columns mean another observation space.

        Raises:
            ValueError: Missing keys, another shape or other passthrough columns, or
                invalid stats (nothing is changed).
        """
        if not isinstance(state, dict):
            raise ValueError(f"state: expected a dict, got {type(state).__name__}")
        missing = [
            k
            for k in ("shape", "demean", "destd", "clip", "running_stats", "buffer")
            if k not in state
        ]
        if missing:
            raise ValueError(f"state: missing keys {missing}")
        if normalise_shape(state["shape"]) != self.shape:
            raise ValueError(f"state: shape {tuple(state['shape'])} differs from {self.shape}")
        clip = self._checked_clip(state["clip"])
        if "passthrough" in state:
            theirs = _checked_passthrough(state["passthrough"], self.shape, "state['passthrough']")
            if not _same_columns(theirs, self.passthrough):
                raise ValueError(
                    f"state['passthrough']: columns {_listed(theirs)} differ from this "
                    f"filter's {_listed(self.passthrough)} (another observation layout)"
                )
        running = RunningStat.on_backend(self.shape, self._native)
        buffer = RunningStat.on_backend(self.shape, self._native)
        for stat, key in ((running, "running_stats"), (buffer, "buffer")):
            try:
                stat.set_state(state[key])
            except (
                ValueError
            ) as err:  # "state['mean_array']: ..." -> "state['buffer']['mean_array']: ..."
                text = str(err)
                rest = text[len("state") :] if text.startswith("state") else ": " + text
                raise ValueError(f"state['{key}']{rest}") from None
        demean = _checked_flag(state["demean"], "state['demean']")
        destd = _checked_flag(state["destd"], "state['destd']")
        self.demean, self.destd, self.clip = demean, destd, clip
        self._running, self._buffer = running, buffer

    def __getstate__(self) -> dict[str, Any]:
        return {"native": self._native, **self.state_dict()}

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.shape = tuple(d["shape"])
        self._native = bool(d["native"])
        self.passthrough = _checked_passthrough(d.get("passthrough"), self.shape)
        self.load_state_dict(d)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(shape={self.shape}, demean={self.demean}, "
            f"destd={self.destd}, clip={self.clip}, "
            + (f"passthrough={_listed(self.passthrough)}, " if self.passthrough is not None else "")
            + f"n={self._running.n})"
        )


class ConcurrentMeanStdFilter(MeanStdFilter):
    """A :class:`MeanStdFilter` whose every method runs under one re-entrant lock.

    Examples:
        >>> import numpy as np
        >>> f = ConcurrentMeanStdFilter((2,))
        >>> f(np.ones((3, 2))).tolist()
        [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    """

    is_concurrent = True

    def __init__(
        self,
        shape: ShapeLike,
        demean: bool = True,
        destd: bool = True,
        clip: float | None = 10.0,
        passthrough: Sequence[int] | np.ndarray | None = None,
    ) -> None:
        super().__init__(shape, demean, destd, clip, passthrough)
        self._lock = threading.RLock()

    def _init_copy_of(self, src: MeanStdFilter) -> None:
        self._lock = threading.RLock()
        with src._lock if isinstance(src, ConcurrentMeanStdFilter) else _NULL_LOCK:
            super()._init_copy_of(src)

    def __call__(self, x: Any, update: bool = True, out: np.ndarray | None = None) -> Any:
        with self._lock:
            return super().__call__(x, update, out)

    def apply_changes(self, other: MeanStdFilter, with_buffer: bool = False) -> None:
        with self._lock:
            super().apply_changes(other, with_buffer)

    def sync(self, other: MeanStdFilter) -> None:
        with self._lock:
            super().sync(other)

    def reset_buffer(self) -> None:
        with self._lock:
            super().reset_buffer()

    clear_buffer = reset_buffer

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return super().state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            super().load_state_dict(state)

    def __setstate__(self, d: dict[str, Any]) -> None:
        self._lock = threading.RLock()
        super().__setstate__(d)


class _NullLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NULL_LOCK = _NullLock()


def get_filter(
    filter_config: str | Callable[[Any], Any],
    shape: ShapeLike,
    clip: float | None = None,
    passthrough: Sequence[int] | np.ndarray | None = None,
) -> Any:
    """The filter named by ``filter_config`` (RLlib's ``get_filter``).

    ``"MeanStdFilter"`` and ``"ConcurrentMeanStdFilter"`` give filters *without clipping*
    (``clip=None``, as RLlib) unless ``clip`` is given, leaving the ``passthrough`` columns
    as they are; ``"NoFilter"`` the identity; a callable is called with ``shape``.

    Raises:
        ValueError: An unknown name.

    Examples:
        >>> get_filter("MeanStdFilter", (4,)).clip is None
        True
        >>> get_filter("MeanStdFilter", (4,), clip=10.0).clip
        10.0
        >>> get_filter("NoFilter", (4,))
        NoFilter()
    """
    if filter_config == "MeanStdFilter":
        return MeanStdFilter(shape, clip=clip, passthrough=passthrough)
    if filter_config == "ConcurrentMeanStdFilter":
        return ConcurrentMeanStdFilter(shape, clip=clip, passthrough=passthrough)
    if filter_config == "NoFilter":
        return NoFilter()
    if callable(filter_config):
        return filter_config(shape)
    raise ValueError(
        f"Unknown observation_filter: {filter_config!r}; expected 'MeanStdFilter', "
        "'ConcurrentMeanStdFilter', 'NoFilter' or a callable taking the shape"
    )
