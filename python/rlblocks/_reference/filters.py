"""Pure-numpy twin of the native running statistics and MeanStdFilter step.

Same API and validation as ``rlblocks._core.RunningStat`` / ``rlblocks._core.mean_std_filter``:

* ``RunningStat.push`` is RLlib's one-observation Welford update, written literally; it is the
  oracle the tests compare batched updates against.
* ``RunningStat.push_batch`` is the best vectorised numpy we know: two-pass batch moments
  (``mean`` then the sum of squared deviations) merged with Chan's formula. It is the
  baseline the benchmarks measure the C++ core against.
* ``mean_std_filter`` pushes into the running stats and the buffer, then normalises with the
  stats after the push: ``clip((x - mean) / (std + 1e-6), -clip, clip)`` in float64, written as
  float32. ``std`` is RLlib's float32 ``sqrt(max(0, S / (n - 1)))``.

Examples:
    >>> import numpy as np
    >>> s = RunningStat((2,))
    >>> s.push_batch(np.array([[1.0, 2.0], [3.0, 6.0]]))
    >>> s.n, s.mean.tolist(), s.var.tolist()
    (2, [2.0, 4.0], [2.0, 8.0])
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_MAX_COUNT = 2**63 - 1  # counts are int64, as in the native core


def _check_count(n: int) -> None:
    if n > _MAX_COUNT:
        raise ValueError("x: the number of pushes would exceed int64; nothing was updated")


_STATE_ARRAYS = ("mean_array", "mean_delta_array", "sum_sq_diff_array", "sum_sq_diff_delta_array")


def _shape_str(shape: tuple[int, ...]) -> str:
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _batch_shape_str(shape: tuple[int, ...]) -> str:
    return "(B" + "".join(f", {d}" for d in shape) + (",)" if not shape else ")")


def parse_shape(shape: Any) -> tuple[int, ...]:
    """Validates a stat shape (a sequence of non-negative ints)."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise ValueError(f"shape: expected a tuple of non-negative ints, got {shape!r}")
    dims = []
    for d in shape:
        if isinstance(d, bool) or not hasattr(d, "__index__"):
            raise ValueError(f"shape: expected a tuple of non-negative ints, got {shape!r}")
        dims.append(int(d))
    if any(d < 0 for d in dims):
        raise ValueError(f"shape: dimensions must be >= 0, got {shape!r}")
    numel = checked_product(dims, "shape: number of elements")
    if numel > 2**40:
        raise ValueError(
            f"shape: {_shape_str(tuple(dims))} has {numel} elements; at most 2**40 are allowed"
        )
    return tuple(dims)


def checked_product(dims: Any, what: str) -> int:
    """The product of sizes as the native core computes it (``checked.hpp``): ValueError
    naming ``what`` and the factors when the product of the non-zero ones exceeds int64."""
    dims = [int(d) for d in dims]
    product = math.prod(d for d in dims if d != 0)
    if product > _MAX_COUNT:
        raise ValueError(
            f"{what}: {' * '.join(str(d) for d in dims)} does not fit in int64 (the largest "
            f"size is {_MAX_COUNT})"
        )
    return 0 if 0 in dims else product


def convert_input(
    x: Any, shape: tuple[int, ...], allow_single: bool, allow_batch: bool, name: str = "x"
) -> tuple[np.ndarray, bool]:
    """``x`` as a float32 or float64 array, and whether it is a batch; ValueError otherwise."""
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name}: expected an array of numbers, got {x!r}") from err
    if arr.dtype.kind not in "biuf":
        raise ValueError(
            f"{name}: expected real numbers (bool, int or float), got dtype {arr.dtype}"
        )
    single = allow_single and arr.shape == shape
    batch = allow_batch and arr.ndim == len(shape) + 1 and arr.shape[1:] == shape
    if not (single or batch):
        if allow_single and allow_batch:
            want = f"{_shape_str(shape)} or a batch {_batch_shape_str(shape)}"
        elif allow_single:
            want = _shape_str(shape)
        else:
            want = _batch_shape_str(shape)
        raise ValueError(f"{name}: expected shape {want}, got {_shape_str(arr.shape)}")
    if arr.dtype != np.float32:
        arr = arr.astype(np.float64, copy=False)
    return arr, not single


def check_finite(arr: np.ndarray, name: str = "x") -> None:
    """ValueError naming the first NaN/inf element of ``arr``."""
    bad = ~np.isfinite(arr)
    if bad.any():
        idx = np.unravel_index(int(np.argmax(bad)), arr.shape) if arr.ndim else ()
        where = "".join(f"[{int(i)}]" for i in idx)
        raise ValueError(
            f"{name}{where} is {float(arr[idx])}; observations must be finite (no NaN or "
            "infinity); nothing was updated"
        )


# Values beyond +-2**479 are refused (as natively, running_stat.hpp): inside it every
# deviation is at most 2**480, so S <= n * 2**960 stays finite for any int64 count; one
# value beyond it would become the mean and make every later ordinary value's squared
# deviation overflow.
MAX_TRACKED = 2.0**479


def check_tracked(arr: np.ndarray, shape: tuple[int, ...], name: str = "x") -> None:
    """ValueError naming the first (finite) value of ``arr`` beyond +-:data:`MAX_TRACKED`."""
    if arr.dtype == np.float32:  # finite float32 values are all within range
        return
    far = np.abs(arr.reshape(-1)) > MAX_TRACKED
    if far.any():
        i = int(np.argmax(far))
        dim = int(np.prod(shape, dtype=np.int64))
        raise ValueError(
            f"{name}{_column_str(i % dim, shape)} = {float(arr.reshape(-1)[i])!r} cannot be "
            "added to the running statistics: values beyond +-2**479 (about 1.6e+144) cannot "
            "be tracked (squared deviations from them overflow float64); nothing was updated"
        )


def _column_str(col: int, shape: tuple[int, ...]) -> str:
    """``[..., 1, 2]``: where feature ``col`` of a stat of ``shape`` sits in an input."""
    idx = np.unravel_index(col, shape) if shape else ()
    return "[..." + "".join(f", {int(i)}" for i in idx) + "]"


def _raise_overflow(
    arr: np.ndarray, shape: tuple[int, ...], col: int, ref: float, merge: bool, name: str = "x"
) -> None:
    """ValueError for a finite input the statistics cannot take: feature ``col``'s moments, or
    their merge with stats whose mean there is ``ref``, overflow float64. Names the column
    and its value farthest from ``ref`` (as the native core)."""
    column = arr.reshape(-1, int(np.prod(shape, dtype=np.int64)))[:, col].astype(np.float64)
    with np.errstate(over="ignore"):
        value = float(column[int(np.argmax(np.abs(column - ref)))])
    why = (
        f"its squared deviation from the running mean {ref!r} overflows float64"
        if merge
        else "the squared deviations of this column overflow float64"
    )
    raise ValueError(
        f"{name}{_column_str(col, shape)} = {value!r} cannot be added to the running "
        f"statistics: {why}; nothing was updated"
    )


def _scaled_moments(col: np.ndarray) -> tuple[float, float]:
    """Mean and M2 of one finite column, summed scaled by 2**-e (``2**e`` bounds its
    magnitude: no overflow, and the scaling is exact); either may be inf when the true value
    does not fit float64."""
    big = float(np.max(np.abs(col)))
    e = math.frexp(big)[1]  # big < 2**e; ldexp scales exactly (2**e itself may overflow)
    scaled = np.ldexp(col.astype(np.float64), -e)
    ms = 0.0
    for v in scaled:  # summed in order, as the native core
        ms += float(v)
    ms /= len(scaled)
    ss = 0.0
    for v in scaled:
        ss += (float(v) - ms) ** 2
    with np.errstate(over="ignore"):
        return float(np.ldexp(ms, e)), float(np.ldexp(ss, 2 * e))


def batch_moments(arr: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """Count, mean and sum of squared deviations of a finite batch (two passes). A column
    whose plain sums overflow is summed again scaled by a power of two.

    Raises:
        ValueError: A column's moments do not fit float64 (naming it and its largest value).
    """
    nb = arr.shape[0]
    if nb == 0:
        return 0, np.zeros(arr.shape[1:]), np.zeros(arr.shape[1:])
    if nb == 1:  # finite float32/float64 values: the mean is the row, nothing overflows
        # (+ 0.0: a sum that starts at 0, as natively, so a -0.0 row has mean +0.0)
        return 1, arr[0].astype(np.float64) + 0.0, np.zeros(arr.shape[1:])
    with np.errstate(over="ignore", invalid="ignore"):
        bmean = arr.mean(axis=0, dtype=np.float64)
        dev = arr - bmean
        bm2 = np.einsum("i...,i...->...", dev, dev)
    bad = ~(np.isfinite(bmean) & np.isfinite(bm2))
    if bad.any():
        flat = arr.reshape(nb, -1)
        mean_flat, m2_flat = bmean.reshape(-1), bm2.reshape(-1)
        for col in np.flatnonzero(bad.reshape(-1)):
            mean_flat[col], m2_flat[col] = _scaled_moments(flat[:, col])
            if not (math.isfinite(mean_flat[col]) and math.isfinite(m2_flat[col])):
                _raise_overflow(arr, arr.shape[1:], int(col), 0.0, False)
    return nb, bmean, bm2


class RunningStat:
    """Running mean / variance in float64 with RLlib's delta fields (numpy twin).

    Args:
        shape: Shape of one observation.
    """

    def __init__(self, shape: Any = ()) -> None:
        self._shape = parse_shape(shape)
        self._n = 0
        self._n_delta = 0
        self._mean = np.zeros(self._shape)
        self._mean_delta = np.zeros(self._shape)
        self._ssd = np.zeros(self._shape)
        self._ssd_delta = np.zeros(self._shape)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def n(self) -> int:
        return self._n

    @property
    def n_delta(self) -> int:
        return self._n_delta

    @property
    def mean(self) -> np.ndarray:
        return self._mean.copy()

    @property
    def var(self) -> np.ndarray:
        if self._n > 1:
            with np.errstate(over="ignore"):  # a spread beyond float32 is inf, as natively
                return (self._ssd / (self._n - 1)).astype(np.float32)
        return np.zeros(self._shape, dtype=np.float32)

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(np.maximum(np.float32(0), self.var))

    def push(self, x: Any) -> None:
        """RLlib's one-observation Welford update."""
        arr, _ = convert_input(x, self._shape, True, False)
        check_finite(arr)
        check_tracked(arr, self._shape)
        x64 = arr.astype(np.float64)
        n = self._n + 1
        _check_count(n)
        _check_count(self._n_delta + 1)
        if n == 1:
            self._mean[...] = x64
            self._mean_delta[...] = x64
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                d = x64 - self._mean
                mean = self._mean + d / n
                mean_delta = self._mean_delta + d / n
                s_inc = d * (x64 - mean)
                ssd, ssd_delta = self._ssd + s_inc, self._ssd_delta + s_inc
            fields = (d, mean, mean_delta, s_inc, ssd, ssd_delta)
            bad = ~np.logical_and.reduce([np.isfinite(f) for f in fields])
            if bad.any():  # refused before anything changes
                col = int(np.argmax(bad.reshape(-1)))
                _raise_overflow(arr, self._shape, col, float(self._mean.reshape(-1)[col]), True)
            self._mean, self._mean_delta = mean, mean_delta
            self._ssd, self._ssd_delta = ssd, ssd_delta
        self._n = n
        self._n_delta += 1

    def push_batch(self, x: Any) -> None:
        """Adds a batch ``(B, *shape)``: two-pass moments, then one Chan merge."""
        arr, _ = convert_input(x, self._shape, False, True)
        check_finite(arr)
        check_tracked(arr, self._shape)
        moments = batch_moments(arr)
        bad = self.check_merge(*moments)
        if bad is not None:
            _raise_overflow(arr, self._shape, bad, self._ref_mean(bad), True)
        self.merge_moments(*moments)

    def _ref_mean(self, col: int) -> float:
        """The mean of feature ``col`` an overflow message measures deviations from."""
        return float(self._mean.reshape(-1)[col]) if self._n > 0 else 0.0

    def check_merge(self, nb: int, bmean: np.ndarray, bm2: np.ndarray) -> int | None:
        """None when :meth:`merge_moments` keeps every field finite; otherwise the first
        feature (flat index) that would overflow float64.

        Raises:
            ValueError: The number of pushes would exceed int64.
        """
        if nb == 0:
            return None
        _check_count(self._n + nb)
        _check_count(self._n_delta + nb)
        with np.errstate(over="ignore", invalid="ignore"):
            if self._n == 0:
                fields = [bmean, bm2, self._ssd + bm2, self._ssd_delta + bm2]
            else:
                n1, n2 = float(self._n), float(nb)
                delta = bmean - self._mean
                inc = delta * (n2 / (n1 + n2))
                s_inc = bm2 + delta * delta * (n1 * n2 / (n1 + n2))
                fields = [
                    delta,
                    s_inc,
                    self._mean + inc,
                    self._mean_delta + inc,
                    self._ssd + s_inc,
                    self._ssd_delta + s_inc,
                ]
        bad = ~np.logical_and.reduce([np.isfinite(f) for f in fields]).reshape(-1)
        return int(np.argmax(bad)) if bad.any() else None

    def merge_moments(self, nb: int, bmean: np.ndarray, bm2: np.ndarray) -> None:
        """Merges a batch given by its count, mean and sum of squared deviations (checked by
        :meth:`check_merge`)."""
        if nb == 0:
            return
        if self._n == 0:
            self._mean[...] = bmean
            self._mean_delta[...] = bmean
            self._ssd += bm2
            self._ssd_delta += bm2
        else:
            n1, n2 = float(self._n), float(nb)
            delta = bmean - self._mean
            inc = delta * (n2 / (n1 + n2))
            s_inc = bm2 + delta * delta * (n1 * n2 / (n1 + n2))
            self._mean += inc
            self._mean_delta += inc
            self._ssd += s_inc
            self._ssd_delta += s_inc
        self._n += nb
        self._n_delta += nb

    def update(self, other: RunningStat) -> None:
        """Merges ``other``'s delta state into self (RLlib's ``update``)."""
        if other.shape != self._shape:
            raise ValueError(
                f"update: other has shape {_shape_str(other.shape)}, expected "
                f"{_shape_str(self._shape)}"
            )
        n1, n2 = self._n, other._n_delta
        if n2 == 0:
            return
        if n1 + n2 > _MAX_COUNT:
            raise ValueError("update: the number of pushes would exceed int64; nothing was updated")
        o_mean, o_ssd = other._mean_delta.copy(), other._ssd_delta.copy()
        with np.errstate(over="ignore", invalid="ignore"):
            if n1 == 0:
                delta = np.zeros(self._shape)
                mean, ssd = o_mean, self._ssd + o_ssd
            else:
                a, b = float(n1), float(n2)
                delta = o_mean - self._mean
                mean = self._mean + delta * (b / (a + b))
                ssd = self._ssd + (o_ssd + delta * delta * (a * b / (a + b)))
        bad = ~(np.isfinite(delta) & np.isfinite(mean) & np.isfinite(ssd)).reshape(-1)
        if bad.any():
            col = int(np.argmax(bad))
            raise ValueError(
                f"update: merging other's statistics overflows float64 at "
                f"{_column_str(col, self._shape)} (mean {float(o_mean.reshape(-1)[col])!r}); "
                "nothing was updated"
            )
        self._mean, self._ssd = np.array(mean, dtype=np.float64), ssd
        self._n = n1 + n2

    def copy(self) -> RunningStat:
        other = RunningStat(self._shape)
        other.set_state(self.get_state())
        return other

    def reset(self) -> None:
        self.__init__(self._shape)  # type: ignore[misc]

    def get_state(self) -> dict[str, Any]:
        return {
            "num_pushes": self._n,
            "num_pushes_delta": self._n_delta,
            "mean_array": self._mean.copy(),
            "mean_delta_array": self._mean_delta.copy(),
            "sum_sq_diff_array": self._ssd.copy(),
            "sum_sq_diff_delta_array": self._ssd_delta.copy(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Loads :meth:`get_state` output after checking every invariant of it (the native
        checks, in their order, with their messages); nothing changes on a ValueError."""
        if not isinstance(state, dict):
            raise ValueError(f"state: expected a dict, got {type(state).__name__}")
        counts: dict[str, int] = {}
        for key in ("num_pushes", "num_pushes_delta"):
            if key not in state:
                raise ValueError(f"state: missing key '{key}'")
            v = state[key]
            if isinstance(v, bool) or not hasattr(v, "__index__"):
                raise ValueError(f"state['{key}']: expected a non-negative int, got {v!r}")
            if not 0 <= int(v) <= _MAX_COUNT:
                raise ValueError(
                    f"state['{key}']: expected a non-negative int below 2**63, got {v!r}"
                )
            counts[key] = int(v)
        arrays = {}
        for key in _STATE_ARRAYS:
            if key not in state:
                raise ValueError(f"state: missing key '{key}'")
            a = np.asarray(state[key])
            if a.dtype.kind not in "iuf":
                raise ValueError(f"state['{key}']: expected numbers, got dtype {a.dtype}")
            if a.shape != self._shape:
                raise ValueError(
                    f"state['{key}']: expected shape {_shape_str(self._shape)}, got "
                    f"{_shape_str(a.shape)}"
                )
            a = a.astype(np.float64)
            if not np.isfinite(a).all():
                raise ValueError(f"state['{key}']: values must be finite")
            arrays[key] = a
        # the native checks, in their order (RLlib's delta fields are drift, not moments)
        for key, count, tracked, sums in (
            ("mean_array", "num_pushes", True, False),
            ("mean_delta_array", "num_pushes_delta", False, False),
            ("sum_sq_diff_array", "num_pushes", False, True),
            ("sum_sq_diff_delta_array", "num_pushes_delta", False, True),
        ):
            _check_field(arrays[key], key, counts[count], count, tracked, sums)
        self._n = counts["num_pushes"]
        self._n_delta = counts["num_pushes_delta"]
        self._mean = arrays["mean_array"]
        self._mean_delta = arrays["mean_delta_array"]
        self._ssd = arrays["sum_sq_diff_array"]
        self._ssd_delta = arrays["sum_sq_diff_delta_array"]


def _check_field(
    values: np.ndarray, key: str, n: int, count_key: str, tracked: bool, sums: bool
) -> None:
    """The native ``check_field``: all 0 while ``n`` is 0, within +-2**479 when ``tracked``
    (the running mean), >= 0 when ``sums``; the first bad value in C order is named."""
    flat = values.reshape(-1)
    bad = (n == 0) & (flat != 0.0)
    if tracked:
        bad |= ~(np.abs(flat) <= MAX_TRACKED)
    if sums:
        bad |= ~(flat >= 0.0)
    if not bad.any():
        return
    v = float(flat[int(np.argmax(bad))])
    if tracked and not abs(v) <= MAX_TRACKED:
        raise ValueError(
            f"state['{key}']: values must lie within +-2**479 (the range of tracked values), "
            f"got {v!r}"
        )
    if sums and not v >= 0.0:
        raise ValueError(f"state['{key}']: values must be >= 0 (sums of squares), got {v!r}")
    raise ValueError(f"state['{key}']: must be 0 while state['{count_key}'] is 0, got {v!r}")


def _denominator(stat: RunningStat) -> np.ndarray:
    """``std + 1e-6`` in float32 (RLlib); where the spread is beyond float32 (std inf), the
    float64 std, so the feature is still normalised."""
    denom = np.array(stat.std + np.float32(1e-6), dtype=np.float64)
    wide = ~np.isfinite(denom)
    if wide.any():
        denom[wide] = np.sqrt(stat._ssd[wide] / (stat.n - 1))
    return denom


def _checked_out(out: Any, arr: np.ndarray) -> np.ndarray:
    if out is None:
        return np.empty(arr.shape, dtype=np.float32)
    ok = (
        isinstance(out, np.ndarray)
        and out.dtype == np.float32
        and out.flags.c_contiguous
        and out.flags.writeable
        and out.shape == arr.shape
    )
    if not ok:
        if isinstance(out, np.ndarray):
            got = f"{out.dtype} array of shape {_shape_str(out.shape)}"
            got += "" if out.flags.writeable else " (read-only)"
        else:
            got = repr(type(out))
        raise ValueError(
            f"out: expected a writeable C-contiguous float32 array of shape "
            f"{_shape_str(arr.shape)}, got {got}"
        )
    same = out.dtype == arr.dtype and out.ctypes.data == arr.ctypes.data
    if out.size and np.shares_memory(out, arr) and not same:
        raise ValueError(
            "out: overlaps the input; pass the float32 input itself (in place) or a separate array"
        )
    return out


def mean_std_filter(
    running: RunningStat,
    buffer: RunningStat,
    x: Any,
    update: bool,
    demean: bool,
    destd: bool,
    clip: float,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Pushes ``x`` (one observation or a batch) into ``running`` and ``buffer``, then
    normalises it with the running stats after the push. ``clip=inf`` means no clipping."""
    if running.shape != buffer.shape:
        raise ValueError(
            f"buffer: shape {_shape_str(buffer.shape)} differs from the running stats' "
            f"{_shape_str(running.shape)}"
        )
    if np.isnan(clip) or clip <= 0:
        raise ValueError(f"clip: expected a positive number or inf (no clipping), got {clip}")
    arr, batch = convert_input(x, running.shape, True, True)
    result = _checked_out(out, arr)
    check_finite(arr)
    if update:
        check_tracked(arr, running.shape)
        moments = batch_moments(arr if batch else arr[None])
        for stat in (running, buffer) if buffer is not running else (running,):
            bad = stat.check_merge(*moments)
            if bad is not None:  # neither stat changes
                _raise_overflow(arr, running.shape, bad, stat._ref_mean(bad), True)
        if buffer is not running:
            buffer.merge_moments(*moments)
        running.merge_moments(*moments)
    mean = running.mean if demean else 0.0
    denom = _denominator(running) if destd else 1.0
    v = (arr.astype(np.float64) - mean) / denom
    if clip != np.inf:
        v = np.clip(v, -clip, clip)
    result[...] = v
    return result
