"""Pure-numpy twin of the native replay storage (``rlblocks._core.ReplayCore``).

Same layout, validation, messages and results (bit for bit) as ``cpp/include/rlblocks/
replay.hpp``: per-env rings of ``capacity // num_envs`` entries, a STEP entry per env and
add plus a FINAL entry (the final observation) when the episode ended, a float64 sum tree
over the entries (+ a min tree when prioritized), n-step returns and frame stacks assembled
at sample time. It is the oracle of the tests and the "numpy" row of the benchmark.

Examples:
    >>> import numpy as np
    >>> core = ReplayCore(4, 1, (2,), np.float32, (), np.int64, 1, 0.5, 0, -1, False)
    >>> o = np.zeros((1, 2), np.float32)
    >>> core.add(o, [1], [2.0], [True], [False], o + 1)
    >>> len(core)
    1
    >>> s = core.sample(np.array([0.3]))
    >>> s[1].tolist(), s[2].tolist(), s[3].tolist(), s[4].tolist()
    ([1], [2.0], [[1.0, 1.0]], [0.0])
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

MAX_K = 256
STEP, TERM, TRUNC, SAMPLE = 1, 2, 4, 8


def _shape_str(shape: tuple[int, ...]) -> str:
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValueError(f"{name}: expected an int, got {value!r}")
    return int(value)


def _shape(value: Any, name: str) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name}: expected a tuple of ints >= 0, got {value!r}")
    shape = tuple(_int(d, name) for d in value)
    if any(d < 0 for d in shape):
        raise ValueError(f"{name}: expected a tuple of ints >= 0, got {value!r}")
    return shape


def _dtype(value: Any, name: str) -> np.dtype:
    try:
        dt = np.dtype(value)
    except TypeError as err:
        raise ValueError(f"{name}: expected a numpy dtype, got {value!r}") from err
    native = dt.byteorder != ">" or dt.itemsize == 1
    if dt.kind not in "biuf" or dt.itemsize not in (1, 2, 4, 8) or not native:
        raise ValueError(
            f"{name}: expected a native bool/int/uint/float dtype of 1, 2, 4 or 8 bytes, got {dt}"
        )
    return dt


def _converted(
    value: Any, name: str, shape: tuple[int, ...], dtype: np.dtype, casting: Any
) -> np.ndarray:
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"{name}: expected an array of shape {_shape_str(shape)}, got {value!r}"
        ) from err
    if raw.shape != shape:
        raise ValueError(f"{name}: expected shape {_shape_str(shape)}, got {_shape_str(raw.shape)}")
    if raw.dtype != dtype and not np.can_cast(raw.dtype, dtype, casting):
        raise ValueError(f"{name}: expected dtype {dtype} ({casting} cast), got {raw.dtype}")
    return np.ascontiguousarray(raw, dtype=dtype)


def _bool(value: Any, name: str, n: int) -> np.ndarray:
    raw = np.asarray(value)
    if raw.dtype.kind != "b" or raw.shape != (n,):
        raise ValueError(
            f"{name}: expected a bool array of shape ({n},), got {raw.dtype} array of shape "
            f"{_shape_str(raw.shape)}"
        )
    return raw


class _SumTree:
    """Sum tree over ``n`` leaves padded to a power of two; optional min over positive leaves."""

    def __init__(self, n: int, with_min: bool) -> None:
        size = 1
        while size < n:
            size *= 2
        self.size = size
        self.sum = np.zeros(2 * size, np.float64)
        self.min = np.full(size, np.inf, np.float64) if with_min else None

    def nbytes(self) -> int:
        return self.sum.nbytes + (self.min.nbytes if self.min is not None else 0)

    def _child_min(self, c: int) -> float:
        if c >= self.size:
            v = float(self.sum[c])
            return v if v > 0.0 else math.inf
        assert self.min is not None
        return float(self.min[c])

    def _update(self, p: int) -> None:
        self.sum[p] = self.sum[2 * p] + self.sum[2 * p + 1]
        if self.min is not None:
            self.min[p] = min(self._child_min(2 * p), self._child_min(2 * p + 1))

    def set(self, i: int, v: float) -> None:
        p = self.size + i
        self.sum[p] = v
        p //= 2
        while p >= 1:
            self._update(p)
            p //= 2

    def rebuild(self) -> None:
        for p in range(self.size - 1, 0, -1):
            self._update(p)

    def min_positive(self) -> float:
        return math.inf if self.min is None else float(self.min[1])

    def find(self, v: np.ndarray) -> np.ndarray:
        idx = np.ones(v.shape, np.int64)
        for _ in range(self.size.bit_length() - 1):
            left = 2 * idx
            lv = self.sum[left]
            right = (v >= lv) & (self.sum[left + 1] > 0.0)
            v = np.where(right, v - lv, v)
            idx = np.where(right, left + 1, left)
        return idx - self.size


class ReplayCore:
    """The numpy twin of ``rlblocks._core.ReplayCore`` (same constructor and methods)."""

    def __init__(
        self,
        capacity: Any,
        num_envs: Any,
        obs_shape: Any,
        obs_dtype: Any,
        action_shape: Any,
        action_dtype: Any,
        n_step: Any,
        gamma: float,
        frame_stack: Any,
        stack_axis: Any,
        prioritized: bool,
    ) -> None:
        ne = _int(num_envs, "num_envs")
        if ne < 1:
            raise ValueError(f"num_envs: expected an int >= 1, got {ne}")
        cap = _int(capacity, "capacity")
        if cap < 2 * ne:
            raise ValueError(
                f"capacity: expected an int >= 2 * num_envs = {2 * ne} (each env keeps "
                f"capacity // num_envs >= 2 steps), got {cap}"
            )
        self._obs_shape = _shape(obs_shape, "obs_shape")
        self._obs_dtype = _dtype(obs_dtype, "obs_dtype")
        self._action_shape = _shape(action_shape, "action_shape")
        self._action_dtype = _dtype(action_dtype, "action_dtype")
        n = _int(n_step, "n_step")
        if n < 1:
            raise ValueError(f"n_step: expected an int >= 1, got {n}")
        g = float(gamma)
        if not 0.0 <= g <= 1.0:
            raise ValueError(f"gamma: expected a float in [0, 1], got {g!r}")
        fs = _int(frame_stack, "frame_stack")
        if not 0 <= fs <= MAX_K:
            raise ValueError(f"frame_stack: expected 0 (no stacking) or 1..{MAX_K}, got {fs}")
        axis = _int(stack_axis, "stack_axis")
        nd = len(self._obs_shape)
        if axis not in (0, -1) and not (nd >= 1 and axis == nd - 1):
            raise ValueError(f"stack_axis: expected 0 or -1, got {axis}")
        self._stack_axis = 0 if axis == 0 and nd != 1 else -1
        frame_shape = self._obs_shape
        if fs > 0:
            ax = 0 if self._stack_axis == 0 else nd - 1
            if nd == 0 or self._obs_shape[ax] != fs:
                raise ValueError(
                    f"obs_shape: frame_stack={fs} needs obs_shape[{self._stack_axis}] == {fs} "
                    f"(the stack axis), got {_shape_str(self._obs_shape)}"
                )
            frame_shape = self._obs_shape[:ax] + self._obs_shape[ax + 1 :]
        self._frame_shape = frame_shape
        self._num_envs, self._n_step, self._gamma = ne, n, g
        self._frame_stack, self._k = fs, max(fs, 1)
        self._prioritized = bool(prioritized)
        self._L = cap // ne
        entries = ne * self._L
        frame_bytes = int(np.prod(frame_shape, dtype=np.int64)) * self._obs_dtype.itemsize
        action_bytes = (
            int(np.prod(self._action_shape, dtype=np.int64)) * self._action_dtype.itemsize
        )
        if entries * (frame_bytes + action_bytes) > 2**42:
            raise ValueError(
                f"capacity: the storage would take {entries * (frame_bytes + action_bytes)} bytes "
                "(at most 2**42 bytes)"
            )
        self._fresh_storage()

    def _fresh_storage(self) -> None:
        ne, L = self._num_envs, self._L
        self.frames = np.zeros((ne, L, *self._frame_shape), self._obs_dtype)
        self.actions = np.zeros((ne, L, *self._action_shape), self._action_dtype)
        self.rewards = np.zeros((ne, L), np.float32)
        self.flags = np.zeros((ne, L), np.uint8)
        self.offs = np.zeros((ne, L), np.uint8)
        self.counts = np.zeros(ne, np.int64)
        self.tree = _SumTree(ne * L, self._prioritized)
        self.sampleable = 0
        self.max_leaf = 1.0

    # -- properties -------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self._num_envs * self._L

    @property
    def num_envs(self) -> int:
        return self._num_envs

    @property
    def nbytes(self) -> int:
        arrays = (self.frames, self.actions, self.rewards, self.flags, self.offs, self.counts)
        return sum(a.nbytes for a in arrays) + self.tree.nbytes()

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return self._obs_shape

    @property
    def obs_dtype(self) -> np.dtype:
        return self._obs_dtype

    @property
    def action_shape(self) -> tuple[int, ...]:
        return self._action_shape

    @property
    def action_dtype(self) -> np.dtype:
        return self._action_dtype

    @property
    def n_step(self) -> int:
        return self._n_step

    @property
    def gamma(self) -> float:
        return self._gamma

    @property
    def frame_stack(self) -> int:
        return self._frame_stack

    @property
    def stack_axis(self) -> int:
        return self._stack_axis

    @property
    def prioritized(self) -> bool:
        return self._prioritized

    def __len__(self) -> int:
        return self.sampleable

    # -- bookkeeping ------------------------------------------------------------------------
    def _sampleable_now(self, e: int, x: int, cnt: int) -> bool:
        s = x % self._L
        oldest = max(0, cnt - self._L)
        return bool(self.flags[e, s] & STEP) and x + 1 < cnt and x - int(self.offs[e, s]) >= oldest

    def _drop(self, e: int, x: int) -> None:
        s = x % self._L
        if self.flags[e, s] & SAMPLE:
            self.flags[e, s] &= ~np.uint8(SAMPLE)
            self.tree.set(e * self._L + s, 0.0)
            self.sampleable -= 1

    def _write_entry(self, e: int, f: int, action: Any, reward: np.float32) -> int:
        L, k = self._L, self._k
        cnt = int(self.counts[e])
        if cnt >= L:
            gone = cnt - L
            self._drop(e, gone)
            for x in range(gone + 1, min(gone + k - 1, cnt - 1) + 1):
                if int(self.offs[e, x % L]) >= x - gone:
                    self._drop(e, x)
        first = cnt == 0 or not self.flags[e, (cnt - 1) % L] & STEP
        off = 0 if first else min(int(self.offs[e, (cnt - 1) % L]) + 1, k - 1)
        s = cnt % L
        self.flags[e, s] = f
        self.offs[e, s] = off
        self.rewards[e, s] = reward
        self.actions[e, s] = 0 if action is None else action
        self.counts[e] = cnt + 1
        if cnt >= 1 and self._sampleable_now(e, cnt - 1, cnt + 1):
            ps = (cnt - 1) % L
            self.flags[e, ps] |= SAMPLE
            self.tree.set(e * L + ps, self.max_leaf if self._prioritized else 1.0)
            self.sampleable += 1
        return s

    def _newest(self, stacked: np.ndarray) -> np.ndarray:
        if self._frame_stack == 0:
            return stacked
        return stacked[-1] if self._stack_axis == 0 else stacked[..., -1]

    # -- API --------------------------------------------------------------------------------
    def add(
        self,
        obs: Any,
        actions: Any,
        rewards: Any,
        terminated: Any,
        truncated: Any,
        next_obs: Any,
        valid: Any = None,
    ) -> None:
        ne = self._num_envs
        want = (ne, *self._obs_shape)
        obs_cast = "same_kind" if self._obs_dtype.kind == "f" else "safe"
        o = _converted(obs, "obs", want, self._obs_dtype, obs_cast)
        a = _converted(
            actions, "actions", (ne, *self._action_shape), self._action_dtype, "same_kind"
        )
        try:
            r_raw = np.asarray(rewards)
        except (TypeError, ValueError):
            r_raw = None
        if r_raw is not None and r_raw.dtype.kind not in "iuf":
            raise ValueError(
                f"rewards: expected a real-valued (int or float) array, got dtype {r_raw.dtype}"
            )
        r = _converted(rewards, "rewards", (ne,), np.dtype(np.float32), "unsafe")
        te = _bool(terminated, "terminated", ne)
        tr = _bool(truncated, "truncated", ne)
        nx = _converted(next_obs, "next_obs", want, self._obs_dtype, obs_cast)
        va = None if valid is None else _bool(valid, "valid", ne)
        for e in range(ne):
            if va is not None and not va[e]:
                continue
            f = STEP | (TERM if te[e] else (TRUNC if tr[e] else 0))
            s = self._write_entry(e, f, a[e], r[e])
            self.frames[e, s] = self._newest(o[e])
            if te[e] or tr[e]:
                s2 = self._write_entry(e, 0, None, np.float32(0.0))
                self.frames[e, s2] = self._newest(nx[e])

    def _gather(self, e: np.ndarray, x: np.ndarray) -> np.ndarray:
        L, k = self._L, self._k
        start = x - self.offs[e, x % L].astype(np.int64)
        frames = []
        for j in range(k):
            a = np.maximum(x - (k - 1 - j), start)
            frames.append(self.frames[e, a % L])
        if self._frame_stack == 0:
            return frames[0]
        axis = 1 if self._stack_axis == 0 else -1
        return np.stack(frames, axis=axis)

    def sample(self, u: Any, out: Any = None) -> tuple[Any, ...]:
        raw = np.asarray(u)
        if raw.ndim != 1 or raw.dtype.kind != "f":
            raise ValueError(f"u: expected a 1-d float64 array of uniform numbers, got {u!r}")
        uu = raw.astype(np.float64)
        B, N = uu.shape[0], self.sampleable
        if not 1 <= B <= N:
            raise ValueError(
                f"batch_size: expected 1 <= batch_size <= {N} (the sampleable steps, len(buffer)), "
                f"got {B}"
            )
        total = float(self.tree.sum[1])
        if not total > 0.0:
            raise ValueError(
                "priorities: every sampleable step has priority 0 (nothing to sample; use "
                "priority_eps > 0)"
            )
        bad = np.flatnonzero(~((uu >= 0.0) & (uu < 1.0)))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"u[{i}] = {float(uu[i])!r}: expected a number in [0, 1)")
        if self._prioritized:
            v = (np.arange(B, dtype=np.float64) + uu) * total / float(B)
        else:
            v = uu * total
        idx = self.tree.find(v)
        probs = self.tree.sum[self.tree.size + idx] / total
        L = self._L
        e, slot = idx // L, idx % L
        cnt = self.counts[e]
        oldest = np.maximum(cnt - L, 0)
        a = oldest + ((slot - oldest % L) % L + L) % L
        acc = np.zeros(B, np.float64)
        g = np.ones(B, np.float64)
        disc = np.zeros(B, np.float64)
        nxt = a + 1
        active = np.ones(B, bool)
        for j in range(self._n_step):
            x = a + j
            f = self.flags[e, x % L]
            r = self.rewards[e, x % L].astype(np.float64)
            acc = np.where(active, acc + g * r, acc)
            g = np.where(active, g * self._gamma, g)
            term = (f & TERM) != 0
            stop = active & (term | ((f & TRUNC) != 0) | (j + 1 == self._n_step) | (x + 2 >= cnt))
            nxt = np.where(stop, x + 1, nxt)
            disc = np.where(stop, np.where(term, 0.0, g), disc)
            active &= ~stop
        obs = self._gather(e, a)
        next_obs = self._gather(e, nxt)
        actions = self.actions[e, a % L]
        min_prob = self.tree.min_positive() / total
        arrays = [
            np.ascontiguousarray(obs),
            np.ascontiguousarray(actions),
            acc.astype(np.float32),
            np.ascontiguousarray(next_obs),
            disc.astype(np.float32),
            idx.astype(np.int64),
        ]
        if out is not None:
            arrays = self._write_out(out, arrays)
        return (*arrays, probs, N, min_prob)

    @staticmethod
    def _write_out(out: Any, arrays: list[np.ndarray]) -> list[np.ndarray]:
        if isinstance(out, (str, bytes)) or not hasattr(out, "__len__") or len(out) != 6:
            raise ValueError(f"out: expected None or a ReplaySample, got {out!r}")
        names = ("obs", "actions", "rewards", "next_obs", "discounts", "indices")
        for name, dst, src in zip(names, out, arrays, strict=False):
            ok = (
                isinstance(dst, np.ndarray)
                and dst.dtype == src.dtype
                and dst.shape == src.shape
                and dst.flags.c_contiguous
                and dst.flags.writeable
                and dst.flags.aligned
            )
            if not ok:
                got = (
                    f"{dst.dtype} array of shape {_shape_str(dst.shape)}"
                    if isinstance(dst, np.ndarray)
                    else type(dst).__name__
                )
                raise ValueError(
                    f"sample: out.{name}: out must be a writeable C-contiguous {src.dtype} array "
                    f"of shape {_shape_str(src.shape)}, got {got}"
                )
        for dst, src in zip(out, arrays, strict=False):
            dst[...] = src
        return list(out[:6])

    def set_leaves(self, indices: Any, values: Any) -> None:
        ri = np.asarray(indices)
        if ri.ndim != 1 or not (ri.dtype.kind in "iu" or ri.size == 0):
            raise ValueError(f"indices: expected a 1-d int array, got {indices!r}")
        n = ri.shape[0]
        rv = np.asarray(values)
        if rv.shape != (n,) or rv.dtype.kind not in "fiu":
            raise ValueError(
                f"priorities: expected a real-valued array of shape ({n},), got "
                f"{rv.dtype} array of shape {_shape_str(rv.shape)}"
            )
        idx = ri.astype(np.int64)
        val = rv.astype(np.float64)
        entries = self.capacity
        for i in range(n):
            j = int(idx[i])
            if not 0 <= j < entries:
                raise ValueError(f"indices[{i}] = {j} is out of range [0, {entries})")
            if not self.flags.reshape(-1)[j] & SAMPLE:
                raise ValueError(
                    f"indices[{i}] = {j} is not a sampleable step (overwritten since it was "
                    "sampled, or not complete)"
                )
            if not (math.isfinite(val[i]) and val[i] >= 0.0):
                raise ValueError(
                    f"priorities[{i}] = {float(val[i])!r}: expected a finite value >= 0"
                )
        for i in range(n):
            self.tree.set(int(idx[i]), float(val[i]))
            self.max_leaf = max(self.max_leaf, float(val[i]))

    def get_state(self) -> dict[str, Any]:
        return {
            "frames": self.frames.copy(),
            "actions": self.actions.copy(),
            "rewards": self.rewards.copy(),
            "flags": self.flags.copy(),
            "offs": self.offs.copy(),
            "counts": self.counts.copy(),
            "leaves": self.tree.sum[self.tree.size : self.tree.size + self.capacity].copy(),
            "max_leaf": float(self.max_leaf),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        ne, L = self._num_envs, self._L
        specs = {
            "frames": (self._obs_dtype, (ne, L, *self._frame_shape)),
            "actions": (self._action_dtype, (ne, L, *self._action_shape)),
            "rewards": (np.dtype(np.float32), (ne, L)),
            "flags": (np.dtype(np.uint8), (ne, L)),
            "offs": (np.dtype(np.uint8), (ne, L)),
            "counts": (np.dtype(np.int64), (ne,)),
            "leaves": (np.dtype(np.float64), (ne * L,)),
        }
        got: dict[str, np.ndarray] = {}
        for key, (dt, shape) in specs.items():
            if key not in state:
                raise ValueError(f"state: missing '{key}'")
            arr = np.asarray(state[key])
            if arr.dtype != dt or arr.shape != shape:
                raise ValueError(
                    f"state['{key}']: expected a {dt} array of shape {_shape_str(shape)}, got "
                    f"{arr.dtype} array of shape {_shape_str(arr.shape)}"
                )
            got[key] = arr.copy()
        leaves = got["leaves"]
        bad = np.flatnonzero(~(np.isfinite(leaves) & (leaves >= 0.0)))
        if bad.size:
            raise ValueError(f"state['leaves'][{int(bad[0])}]: expected a finite value >= 0")
        if "max_leaf" not in state:
            raise ValueError("state: missing 'max_leaf'")
        max_leaf = float(state["max_leaf"])
        if not (math.isfinite(max_leaf) and max_leaf > 0.0):
            raise ValueError("state['max_leaf']: expected a finite value > 0")
        counts = got["counts"]
        if (counts < 0).any():
            raise ValueError(f"state['counts']: expected counts >= 0, got {int(counts.min())}")
        flags = got["flags"] & np.uint8(STEP | TERM | TRUNC)
        offs = got["offs"]
        values = np.zeros(ne * L, np.float64)
        sampleable = 0
        for e in range(ne):
            cnt = int(counts[e])
            oldest = max(0, cnt - L)
            for x in range(oldest, cnt):
                off = int(offs[e, x % L])
                if off > self._k - 1 or off > x:
                    raise ValueError(
                        "state['offs']: an offset reaches before the env's first entry"
                    )
                s = x % L
                if flags[e, s] & STEP and x + 1 < cnt and x - off >= oldest:
                    flags[e, s] |= SAMPLE
                    values[e * L + s] = leaves[e * L + s] if self._prioritized else 1.0
                    sampleable += 1
        self.frames, self.actions, self.rewards = got["frames"], got["actions"], got["rewards"]
        self.flags, self.offs, self.counts = flags, offs, counts
        self.tree = _SumTree(ne * L, self._prioritized)
        self.tree.sum[self.tree.size : self.tree.size + ne * L] = values
        self.tree.rebuild()
        self.sampleable, self.max_leaf = sampleable, max_leaf
