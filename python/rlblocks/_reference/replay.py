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
import threading
from typing import Any

import numpy as np

from rlblocks._reference import replay_checks as _chk
from rlblocks._reference.replay_checks import SAMPLE, STEP, TERM, TRUNC, describe, shape_str

MAX_K = _chk.MAX_K


def _converted(
    value: Any, name: str, shape: tuple[int, ...], dtype: np.dtype, casting: Any
) -> np.ndarray:
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"{name}: expected an array of shape {shape_str(shape)}, got {value!r}"
        ) from err
    if raw.shape != shape:
        raise ValueError(f"{name}: expected shape {shape_str(shape)}, got {shape_str(raw.shape)}")
    if raw.dtype != dtype and not np.can_cast(raw.dtype, dtype, casting):
        raise ValueError(f"{name}: expected dtype {dtype} ({casting} cast), got {raw.dtype}")
    return np.ascontiguousarray(raw, dtype=dtype)


def _bool(value: Any, name: str, n: int) -> np.ndarray:
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError):
        raw = None
    if raw is None or raw.dtype.kind != "b" or raw.shape != (n,):
        got = (
            f"{raw.dtype} array of shape {shape_str(raw.shape)}" if raw is not None else repr(value)
        )
        raise ValueError(f"{name}: expected a bool array of shape ({n},), got {got}")
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
        st = _chk.settings(
            capacity,
            num_envs,
            obs_shape,
            obs_dtype,
            action_shape,
            action_dtype,
            n_step,
            gamma,
            frame_stack,
            stack_axis,
            prioritized,
        )
        _chk.check_memory(st)
        self._settings = st
        self._obs_shape, self._obs_dtype = st.obs_shape, st.obs_dtype
        self._action_shape, self._action_dtype = st.action_shape, st.action_dtype
        self._stack_axis, self._frame_shape = st.stack_axis, st.frame_shape
        self._num_envs, self._n_step, self._gamma = st.num_envs, st.n_step, st.gamma
        self._frame_stack, self._k = st.frame_stack, max(st.frame_stack, 1)
        self._prioritized = st.prioritized
        self._L = st.per_env
        # held while the storage is read or written, as the native buffer's mutex
        self._lock = threading.Lock()
        self._fresh_storage()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

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
        with self._lock:
            bad = self._stack_mismatch(o, te, tr, nx, va)
            if bad is not None:
                raise ValueError(_chk.stack_message(*bad, self._k))
            for e in range(ne):
                if va is not None and not va[e]:
                    continue
                f = STEP | (TERM if te[e] else (TRUNC if tr[e] else 0))
                s = self._write_entry(e, f, a[e], r[e])
                self.frames[e, s] = self._newest(o[e])
                if te[e] or tr[e]:
                    s2 = self._write_entry(e, 0, None, np.float32(0.0))
                    self.frames[e, s2] = self._newest(nx[e])

    def _frame(self, stacked: np.ndarray, j: int) -> bytes:
        return np.ascontiguousarray(
            stacked[j] if self._stack_axis == 0 else stacked[..., j]
        ).tobytes()

    def _stack_mismatch(
        self,
        o: np.ndarray,
        te: np.ndarray,
        tr: np.ndarray,
        nx: np.ndarray,
        va: np.ndarray | None,
    ) -> tuple[int, bool, int] | None:
        """The first (env, in next_obs, frame) whose stacked frame is not the frame the
        buffer holds for it (``ReplayCore::find_stack_mismatch``)."""
        k, L = self._k, self._L
        if k < 2 or self.frames[0, 0].nbytes == 0:
            return None
        for e in range(self._num_envs):
            if va is not None and not va[e]:
                continue
            cnt = int(self.counts[e])
            first = cnt == 0 or not self.flags[e, (cnt - 1) % L] & STEP
            off = 0 if first else min(int(self.offs[e, (cnt - 1) % L]) + 1, k - 1)
            newest_o = self._frame(o[e], k - 1)
            for j in range(k - 1):
                a = max(cnt - (k - 1 - j), cnt - off)
                want = newest_o if a == cnt else self.frames[e, a % L].tobytes()
                if self._frame(o[e], j) != want:
                    return e, False, j
            if not (te[e] or tr[e]):
                continue
            x, off_final = cnt + 1, min(off + 1, k - 1)
            for j in range(k - 1):
                a = max(x - (k - 1 - j), x - off_final)
                if a == x:
                    want = self._frame(nx[e], k - 1)
                else:
                    want = newest_o if a == cnt else self.frames[e, a % L].tobytes()
                if self._frame(nx[e], j) != want:
                    return e, True, j
        return None

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
        try:
            raw = np.asarray(u)
        except (TypeError, ValueError):
            raw = None
        if raw is None or raw.ndim != 1 or raw.dtype.kind != "f":
            raise ValueError(f"u: expected a 1-d float64 array of uniform numbers, got {u!r}")
        uu = raw.astype(np.float64)
        B = uu.shape[0]
        with self._lock:
            N = self.sampleable
            if not 1 <= B <= N:
                raise ValueError(
                    f"batch_size: expected 1 <= batch_size <= {N} (the sampleable steps, "
                    f"len(buffer)), got {B}"
                )
            if not float(self.tree.sum[1]) > 0.0:
                raise ValueError(
                    "priorities: every sampleable step has priority 0 (nothing to sample; use "
                    "priority_eps > 0)"
                )
            bad = np.flatnonzero(~((uu >= 0.0) & (uu < 1.0)))
            if bad.size:
                i = int(bad[0])
                raise ValueError(f"u[{i}] = {float(uu[i])!r}: expected a number in [0, 1)")
            if out is not None:
                self._check_out(out, B)
            return self._sample(uu, B, N, out)

    def _sample(self, uu: np.ndarray, B: int, N: int, out: Any) -> tuple[Any, ...]:
        total = float(self.tree.sum[1])
        if self._prioritized:
            v = (np.arange(B, dtype=np.float64) + uu) * (total / float(B))
        else:
            v = uu * total
        idx = self.tree.find(v)
        leaves = self.tree.sum[self.tree.size + idx].copy()
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
        arrays = [
            np.ascontiguousarray(self._gather(e, a)),
            np.ascontiguousarray(self.actions[e, a % L]),
            acc.astype(np.float32),
            np.ascontiguousarray(self._gather(e, nxt)),
            disc.astype(np.float32),
            idx.astype(np.int64),
        ]
        if out is not None:
            for dst, src in zip(out, arrays, strict=False):
                dst[...] = src
            arrays = list(out[:6])
        return (*arrays, leaves, N, self.tree.min_positive())

    def _check_out(self, out: Any, B: int) -> None:
        """``out`` as the binding checks it: six arrays of the batch's exact layout."""
        is_seq = not isinstance(out, (str, dict)) and hasattr(type(out), "__getitem__")
        if not is_seq or len(out) != 6:
            raise ValueError(f"out: expected None or a ReplaySample, got {out!r}")
        obs_s, act_s = (B, *self._obs_shape), (B, *self._action_shape)
        f32, i64 = np.dtype(np.float32), np.dtype(np.int64)
        specs = (
            ("obs", self._obs_dtype, obs_s),
            ("actions", self._action_dtype, act_s),
            ("rewards", f32, (B,)),
            ("next_obs", self._obs_dtype, obs_s),
            ("discounts", f32, (B,)),
            ("indices", i64, (B,)),
        )
        for i, (name, dt, shape) in enumerate(specs):
            dst = out[i]
            ok = (
                isinstance(dst, np.ndarray)
                and dst.dtype == dt
                and dst.flags.c_contiguous
                and dst.flags.writeable
                and dst.flags.aligned
                and dst.shape == shape
            )
            if not ok:
                raise ValueError(
                    f"sample: out.{name}: out must be a writeable C-contiguous {dt} array of "
                    f"shape {shape_str(shape)}, got {describe(dst)}"
                )

    def set_leaves(self, indices: Any, values: Any) -> None:
        if not self._prioritized:
            raise ValueError("set_leaves: this buffer is uniform (prioritized=False)")
        try:
            ri = np.asarray(indices)
        except (TypeError, ValueError):
            ri = None
        if ri is None or ri.ndim != 1 or not (ri.dtype.kind in "iu" or ri.size == 0):
            raise ValueError(f"indices: expected a 1-d int array, got {indices!r}")
        n = ri.shape[0]
        try:
            rv = np.asarray(values)
        except (TypeError, ValueError):
            rv = None
        if rv is None or rv.shape != (n,) or rv.dtype.kind not in "fiu":
            got = describe(rv) if rv is not None else repr(values)
            raise ValueError(f"priorities: expected a real-valued array of shape ({n},), got {got}")
        idx = ri.astype(np.int64)
        val = rv.astype(np.float64)
        with self._lock:
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
                if val[i] > _chk.MAX_LEAF:
                    raise ValueError(
                        f"priorities[{i}] = {float(val[i])!r}: a tree leaf must be <= 2**960 (so "
                        "that the sum tree stays finite)"
                    )
            for i in range(n):
                self.tree.set(int(idx[i]), float(val[i]))
                self.max_leaf = max(self.max_leaf, float(val[i]))

    def get_state(self) -> dict[str, Any]:
        with self._lock:
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

    def set_state(self, state: Any) -> None:
        if not isinstance(state, dict):
            raise ValueError(f"state: expected a dict from get_state(), got {_chk.tp_name(state)}")
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
            v = state[key]
            try:
                arr = np.asarray(v)
            except (TypeError, ValueError):
                arr = None
            if arr is None or arr.dtype != dt or arr.shape != shape:
                got_s = describe(arr) if arr is not None else repr(v)
                want = f"a {dt} array of shape {shape_str(shape)}"
                raise ValueError(f"state['{key}']: expected {want}, got {got_s}")
            got[key] = np.array(arr, copy=True)
        if "max_leaf" not in state:
            raise ValueError("state: missing 'max_leaf'")
        m = state["max_leaf"]
        max_leaf = _chk.to_real(m, "state['max_leaf']", "a float in [1, 2**960]")
        if not 1.0 <= max_leaf <= _chk.MAX_LEAF:
            raise ValueError(f"state['max_leaf']: expected a float in [1, 2**960], got {m!r}")
        if not self._prioritized and max_leaf != 1.0:
            raise ValueError(f"state['max_leaf']: expected 1.0 (a uniform buffer), got {m!r}")
        values, sampleable = _chk.validate_state(
            self._settings, got["flags"], got["offs"], got["counts"], got["leaves"], max_leaf
        )
        tree = _SumTree(ne * L, self._prioritized)
        tree.sum[tree.size : tree.size + ne * L] = values
        tree.rebuild()
        with self._lock:
            self.frames, self.actions, self.rewards = got["frames"], got["actions"], got["rewards"]
            self.flags, self.offs, self.counts = got["flags"], got["offs"], got["counts"]
            self.tree, self.sampleable, self.max_leaf = tree, sampleable, max_leaf
