"""Pure-numpy twin of the native hindsight relabelling (``rlblocks._core.her_relabel``).

Same validation, messages and results (bit for bit) as ``cpp/include/rlblocks/her.hpp`` on
the twin replay storage (:class:`rlblocks._reference.replay.ReplayCore`): a sampled step t of
env e gets the achieved goal of a step g of its own episode (``future``: g uniform in
[t, last]; ``final``: g = last; ``episode``: g uniform in [first, last]), read from the frame
of entry g + 1 (the observation after g's action), written into the desired-goal columns of
its obs and next_obs rows. Rows b >= ``n_relabel`` are left alone (goal -1).

Examples:
    >>> import numpy as np
    >>> from rlblocks._reference.replay import ReplayCore
    >>> core = ReplayCore(8, 1, (2,), np.float32, (), np.int64, 1, 0.9, 0, -1, False)
    >>> for t in range(3):  # column 0: achieved goal, column 1: desired goal (9)
    ...     o = np.array([[t, 9]], np.float32)
    ...     core.add(o, [0], [-1.0], [False], [t == 2], o + [[1, 0]])
    >>> obs, _, _, nxt, _, idx, *_ = core.sample(np.array([0.0]))
    >>> her_relabel(core, "final", 0, 1, 1, idx, np.array([0.5]), 1, obs, nxt).tolist()
    [2]
    >>> obs.tolist(), nxt.tolist()  # step 0's goal: what step 2 achieved (its next obs, 3)
    ([[0.0, 3.0]], [[1.0, 3.0]])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlblocks._reference.replay import ReplayCore
from rlblocks._reference.replay_checks import (
    SAMPLE,
    STEP,
    TERM,
    TRUNC,
    describe,
    shape_str,
    tp_name,
)

__all__ = ["her_relabel"]

_ENDED = TERM | TRUNC


def _int_in(value: Any, name: str, lo: int, hi: int, why: str = "") -> int:
    msg = f"{name}: expected an int in [{lo}, {hi}]{why}, got {value!r}"
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValueError(msg)
    v = int(value)
    if not lo <= v <= hi:
        raise ValueError(msg)
    return v


def _out(value: Any, dtype: np.dtype, shape: tuple[int, ...], fn: str) -> np.ndarray:
    ok = (
        isinstance(value, np.ndarray)
        and value.dtype == dtype
        and value.flags.c_contiguous
        and value.flags.writeable
        and value.flags.aligned
        and value.shape == shape
    )
    if not ok:
        raise ValueError(
            f"{fn}: out must be a writeable C-contiguous {dtype} array of shape "
            f"{shape_str(shape)}, got {describe(value)}"
        )
    return value


def _array(value: Any) -> np.ndarray | None:
    try:
        return np.asarray(value)
    except (TypeError, ValueError):
        return None


def her_relabel(
    replay: Any,
    strategy: Any,
    achieved_offset: Any,
    desired_offset: Any,
    goal_size: Any,
    indices: Any,
    u: Any,
    n_relabel: Any,
    obs: Any,
    next_obs: Any,
) -> np.ndarray:
    """Relabels rows ``b < n_relabel`` of ``obs`` / ``next_obs`` in place (module docstring);
    returns the goal steps' leaves (``env * per_env + slot``; -1: row left alone)."""
    if not isinstance(replay, ReplayCore):
        raise ValueError(f"replay: expected a ReplayCore, got {tp_name(replay)}")
    if replay.n_step != 1:
        raise ValueError(
            "replay: hindsight relabelling needs n_step=1 (a relabelled reward is one step's), "
            f"got n_step={replay.n_step}"
        )
    if replay.frame_stack != 0:
        raise ValueError(
            "replay: hindsight relabelling needs observations stored whole (frame_stack=0), "
            f"got frame_stack={replay.frame_stack}"
        )
    shape = tuple(replay.obs_shape)
    if len(shape) != 1:
        raise ValueError(
            "replay: hindsight relabelling needs flat observations (an obs_shape of one "
            f"dimension), got {shape_str(shape)}"
        )
    D = int(shape[0])
    if not isinstance(strategy, str) or strategy not in ("future", "final", "episode"):
        raise ValueError(f"strategy: expected 'future', 'final' or 'episode', got {strategy!r}")
    G = _int_in(goal_size, "goal_size", 1, D, f" (the goal's columns; observations have {D})")
    where = f" (the goal's first column; observations have {D})"
    ag = _int_in(achieved_offset, "achieved_offset", 0, D - G, where)
    dg = _int_in(desired_offset, "desired_offset", 0, D - G, where)
    ri = _array(indices)
    if ri is None or ri.ndim != 1 or ri.dtype != np.int64:
        raise ValueError(f"indices: expected a 1-d int64 array, got {describe(indices)}")
    B = ri.shape[0]
    ru = _array(u)
    if ru is None or ru.dtype != np.float64 or ru.shape != (B,):
        raise ValueError(f"u: expected a float64 array of shape ({B},), got {describe(u)}")
    bad = np.flatnonzero(~((ru >= 0.0) & (ru < 1.0)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"u[{i}] = {float(ru[i])!r}: expected a number in [0, 1)")
    n = _int_in(n_relabel, "n_relabel", 0, B, " (the batch's rows)")
    dt = np.dtype(replay.obs_dtype)
    o = _out(obs, dt, (B, D), "her_relabel: obs")
    no = _out(next_obs, dt, (B, D), "her_relabel: next_obs")
    if np.may_share_memory(o, no):
        raise ValueError("her_relabel: next_obs must not overlap obs")
    with replay._lock:
        L = replay._L
        entries = replay.num_envs * L
        ok = (ri >= 0) & (ri < entries)
        flags = replay.flags.reshape(-1)
        ok[ok] = (flags[ri[ok]] & SAMPLE) != 0
        bad = np.flatnonzero(~ok)
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"indices[{i}] = {int(ri[i])}: not a sampleable step of the buffer (leaves are in "
                f"[0, {entries}); overwritten since it was sampled, or not complete)"
            )
        goals = np.full(B, -1, np.int64)
        if n == 0:
            return goals
        idx = ri[:n]
        e, slot = idx // L, idx % L
        cnt = replay.counts[e]
        oldest = np.maximum(cnt - L, 0)
        a = oldest + ((slot - oldest % L) % L + L) % L
        hi, active = a.copy(), np.ones(n, bool)
        while active.any():
            stop = ((replay.flags[e, hi % L] & _ENDED) != 0) | (hi + 2 >= cnt)
            active &= ~stop
            hi = np.where(active, hi + 1, hi)
        lo, active = a.copy(), np.ones(n, bool)
        while active.any():
            prev = lo - 1
            f = replay.flags[e, np.where(prev >= 0, prev, 0) % L]
            go = active & (prev >= oldest) & ((f & STEP) != 0) & ((f & _ENDED) == 0)
            lo = np.where(go, prev, lo)
            active = go
        if strategy == "final":
            g = hi
        else:
            start = a if strategy == "future" else lo
            span = hi - start + 1
            j = (ru[:n] * span.astype(np.float64)).astype(np.int64)
            g = start + np.minimum(j, span - 1)
        goals[:n] = e * L + g % L
        frames = replay.frames.reshape(replay.num_envs, L, D)
        achieved = frames[e, (g + 1) % L, ag : ag + G]
        o[:n, dg : dg + G] = achieved
        no[:n, dg : dg + G] = achieved
    return goals
