"""What the numpy replay twin (:mod:`rlblocks._reference.replay`) validates, with the native
binding's messages (``cpp/bindings/replay.cpp``, ``cpp/include/rlblocks/replay.hpp``): the
arguments, the bytes a buffer needs against this machine's memory, the stacks an add must
hold (frame-once storage), and every invariant of a loaded state."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_K = 256
STEP, TERM, TRUNC, SAMPLE = 1, 2, 4, 8
MAX_COUNT = 2**62  # the largest entry count of one env a state may hold
MAX_LEAF = 2.0**960  # the largest tree leaf: any int64 count of them sums to a finite float
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def shape_str(shape: tuple[int, ...]) -> str:
    """Python's tuple spelling of a shape: "(3,)", "(2, 3)", "()"."""
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ", ".join(str(d) for d in shape) + ")"


def tp_name(value: Any) -> str:
    """The C-level type name pybind11 reports (module-qualified for static C types)."""
    t = type(value)
    if t.__flags__ & (1 << 9) or t.__module__ == "builtins":  # a heap type, or a builtin
        return t.__name__
    return f"{t.__module__}.{t.__name__}"


def describe(value: Any) -> str:
    """ "read-only float64 array of shape (2, 3)", or the type name of a non-array."""
    if not isinstance(value, np.ndarray):
        return tp_name(value)
    ro = "" if value.flags.writeable else "read-only "
    nc = "" if value.flags.c_contiguous else "non-contiguous "
    return f"{ro}{nc}{value.dtype} array of shape {shape_str(value.shape)}"


def to_int(value: Any, name: str) -> int:
    """An int (anything with ``__index__``, no bool) that fits int64."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValueError(f"{name}: expected an int, got {value!r}")
    v = int(value)
    if not INT64_MIN <= v <= INT64_MAX:
        raise ValueError(f"{name}: expected an int in [{INT64_MIN}, {INT64_MAX}], got {value!r}")
    return v


def to_real(value: Any, name: str, allowed: str) -> float:
    """A real number (int or float, numpy's too, no bool) as a float (+-inf for huge ints)."""
    real = isinstance(value, (float, int, np.floating, np.integer)) and not isinstance(
        value, (bool, np.bool_)
    )
    if not real:
        raise ValueError(f"{name}: expected {allowed}, got {value!r}")
    try:
        return float(value)
    except OverflowError:
        return math.inf if int(value) > 0 else -math.inf


def to_bool(value: Any, name: str) -> bool:
    """A bool (Python's or numpy's)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name}: expected a bool, got {value!r}")
    return bool(value)


def to_shape(value: Any, name: str) -> tuple[int, ...]:
    """A tuple of ints >= 0."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name}: expected a tuple of ints >= 0, got {value!r}")
    shape = tuple(to_int(d, name) for d in value)
    if any(d < 0 for d in shape):
        raise ValueError(f"{name}: expected a tuple of ints >= 0, got {value!r}")
    return shape


def to_dtype(value: Any, name: str) -> np.dtype:
    """A native bool/int/uint/float dtype of 1, 2, 4 or 8 bytes."""
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


def _size_error(what: str, expr: str) -> ValueError:
    return ValueError(f"{what}: {expr} does not fit in int64 (the largest size is {INT64_MAX})")


def checked_product(dims: tuple[int, ...], what: str) -> int:
    """The product of dims as rlblocks/checked.hpp computes it (0 if any is 0, but the rest
    must fit int64)."""
    r, zero, overflow = 1, False, False
    for d in dims:
        if d == 0:
            zero = True
        elif not overflow:
            r *= d
            overflow = r > INT64_MAX
    if overflow:
        raise _size_error(what, " * ".join(str(d) for d in dims))
    return 0 if zero else r


def checked_mul(a: int, b: int, what: str) -> int:
    """a * b, refused when it does not fit int64."""
    if not INT64_MIN <= a * b <= INT64_MAX:
        raise _size_error(what, f"{a} * {b}")
    return a * b


@dataclass(frozen=True)
class Settings:
    """A replay buffer's validated settings and derived sizes."""

    capacity: int  # as given
    num_envs: int
    per_env: int
    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype
    action_shape: tuple[int, ...]
    action_dtype: np.dtype
    n_step: int
    gamma: float
    frame_stack: int
    stack_axis: int
    frame_shape: tuple[int, ...]
    prioritized: bool
    frame_bytes: int
    action_bytes: int

    def storage(self) -> dict[str, int]:
        """Bytes of each array the buffer allocates, and their ``total``."""
        entries = self.num_envs * self.per_env
        size = 1
        while size < entries:
            size *= 2
        parts = {
            "frames": entries * self.frame_bytes,
            "actions": entries * self.action_bytes,
            "small": entries * 6 + self.num_envs * 8,
            "trees": size * (24 if self.prioritized else 16),
        }
        parts["total"] = sum(parts.values())
        return parts


def settings(
    capacity: Any,
    num_envs: Any,
    obs_shape: Any,
    obs_dtype: Any,
    action_shape: Any,
    action_dtype: Any,
    n_step: Any,
    gamma: Any,
    frame_stack: Any,
    stack_axis: Any,
    prioritized: Any,
) -> Settings:
    """Validates the constructor's arguments in the native binding's order and messages."""
    ne = to_int(num_envs, "num_envs")
    if ne < 1:
        raise ValueError(f"num_envs: expected an int >= 1, got {ne}")
    cap = to_int(capacity, "capacity")
    if cap < 2 * ne:
        raise ValueError(
            f"capacity: expected an int >= 2 * num_envs = {2 * ne} (each env keeps "
            f"capacity // num_envs >= 2 steps), got {cap}"
        )
    oshape = to_shape(obs_shape, "obs_shape")
    odt = to_dtype(obs_dtype, "obs_dtype")
    ashape = to_shape(action_shape, "action_shape")
    adt = to_dtype(action_dtype, "action_dtype")
    n = to_int(n_step, "n_step")
    if n < 1:
        raise ValueError(f"n_step: expected an int >= 1, got {n}")
    g = to_real(gamma, "gamma", "a float in [0, 1]")
    if not 0.0 <= g <= 1.0:
        raise ValueError(f"gamma: expected a float in [0, 1], got {gamma!r}")
    fs = to_int(frame_stack, "frame_stack")
    if not 0 <= fs <= MAX_K:
        raise ValueError(f"frame_stack: expected 0 (no stacking) or 1..{MAX_K}, got {fs}")
    axis = to_int(stack_axis, "stack_axis")
    nd = len(oshape)
    if axis not in (0, -1) and not (nd >= 1 and axis == nd - 1):
        raise ValueError(f"stack_axis: expected 0 or -1, got {axis}")
    axis = 0 if axis == 0 and nd != 1 else -1
    frame_shape = oshape
    if fs > 0:
        ax = 0 if axis == 0 else nd - 1
        if nd == 0 or oshape[ax] != fs:
            raise ValueError(
                f"obs_shape: frame_stack={fs} needs obs_shape[{axis}] == {fs} "
                f"(the stack axis), got {shape_str(oshape)}"
            )
        frame_shape = oshape[:ax] + oshape[ax + 1 :]
    prio = to_bool(prioritized, "prioritized")
    per_env = cap // ne
    if fs > 1 and per_env < fs + 1:
        raise ValueError(
            f"capacity: frame_stack={fs} needs capacity // num_envs >= frame_stack + 1 = {fs + 1} "
            "(a stack's frames and its successor must all be kept, else nothing is ever "
            f"sampleable), got capacity={cap} with num_envs={ne}; use capacity >= {ne * (fs + 1)}"
        )
    fb = checked_mul(
        checked_product(frame_shape, "ReplayBuffer: frame size"),
        odt.itemsize,
        "ReplayBuffer: frame bytes",
    )
    ab = checked_mul(
        checked_product(ashape, "ReplayBuffer: action size"),
        adt.itemsize,
        "ReplayBuffer: action bytes",
    )
    s = Settings(
        cap, ne, per_env, oshape, odt, ashape, adt, n, g, fs, axis, frame_shape, prio, fb, ab
    )
    return s


def machine_memory() -> int:
    """This machine's physical memory in bytes."""
    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return INT64_MAX
    return pages * page if pages > 0 and page > 0 else INT64_MAX


def check_memory(s: Settings) -> None:
    """Refuses a buffer whose storage exceeds this machine's memory (the binding's message)."""
    parts, mem = s.storage(), machine_memory()
    if parts["total"] <= mem:
        return
    per_step = s.frame_bytes + s.action_bytes + 6 + (48 if s.prioritized else 32)
    fit = (mem // 2) // per_step // s.num_envs * s.num_envs
    advice = (
        f"use capacity <= {fit}"
        if fit >= 2 * s.num_envs
        else "no capacity fits: use a smaller obs_shape or fewer num_envs"
    )
    raise ValueError(
        f"capacity: {s.capacity} steps need {parts['total']} bytes (frames {parts['frames']}, "
        f"actions {parts['actions']}, rewards, flags, offsets and counts {parts['small']}, sum "
        f"trees {parts['trees']}), more than this machine's memory ({mem} bytes); {advice}"
    )


def stack_message(env: int, next_obs: bool, frame: int, k: int) -> str:
    """The message of an add whose stack disagrees with the stored frames."""
    where = "next_obs" if next_obs else "obs"
    return (
        f"{where}[{env}]: frame {frame} of the stack is not the frame the env's earlier steps "
        f"hold (frame_stack={k}: a stack's older frames are the newest frames of the env's "
        "previous steps, and a new episode's stack repeats its first frame, as FrameStacker "
        "makes them); nothing was stored"
    )


def validate_state(
    s: Settings,
    flags: np.ndarray,
    offs: np.ndarray,
    counts: np.ndarray,
    leaves: np.ndarray,
    max_leaf: float,
) -> tuple[np.ndarray, int]:
    """Every invariant of a loaded state, in the order and with the messages of
    ``ReplayCore::restore``; returns the tree leaves and the number of sampleable steps."""
    L, k = s.per_env, max(s.frame_stack, 1)
    for e in range(s.num_envs):
        cnt = int(counts[e])
        if not 0 <= cnt <= MAX_COUNT:
            raise ValueError(f"state['counts'][{e}] = {cnt}: expected an int in [0, {MAX_COUNT}]")
    values = np.zeros(s.num_envs * L, np.float64)
    sampleable = 0
    for e in range(s.num_envs):
        cnt = int(counts[e])
        oldest = max(0, cnt - L)
        for slot in range(cnt, L):
            i = e * L + slot
            why = f": slot {slot} of env {e} was never written (counts[{e}] = {cnt}), expected 0"
            if flags[e, slot] != 0:
                raise ValueError(f"state['flags'][{e}, {slot}] = {int(flags[e, slot])}{why}")
            if offs[e, slot] != 0:
                raise ValueError(f"state['offs'][{e}, {slot}] = {int(offs[e, slot])}{why}")
            if leaves[i] != 0.0:
                raise ValueError(f"state['leaves'][{i}]{why}")
        for x in range(oldest, cnt):
            slot = x % L
            i = e * L + slot
            f = int(flags[e, slot])
            base = f & ~SAMPLE
            fl = f"state['flags'][{e}, {slot}] = {f}: "
            if base not in (0, STEP, STEP | TERM, STEP | TRUNC):
                raise ValueError(
                    fl + "expected 0 (a final observation) or 1, 3, 5 (a step; 3 terminated, 5 "
                    "truncated), plus 8 when sampleable"
                )
            ended = base in (STEP | TERM, STEP | TRUNC)
            if x == 0 and base == 0:
                raise ValueError(fl + f"entry 0 of env {e} is a final observation")
            if x > oldest:
                prev = int(flags[e, (x - 1) % L]) & ~SAMPLE
                if (prev in (STEP | TERM, STEP | TRUNC)) != (base == 0):
                    raise ValueError(
                        fl + "a final observation (0) must follow each terminated or truncated "
                        "step, and nothing else"
                    )
            if x == cnt - 1 and ended:
                raise ValueError(
                    fl + f"the newest entry of env {e} is a terminated or truncated step "
                    "without its final observation"
                )
            off = int(offs[e, slot])
            where = f"state['offs'][{e}, {slot}] = {off}: expected "
            place = " (the entry's place in its episode, at most frame_stack - 1)"
            if x > oldest:
                cont = bool(flags[e, (x - 1) % L] & STEP)
                want = min(int(offs[e, (x - 1) % L]) + 1, k - 1) if cont else 0
                if off != want:
                    raise ValueError(f"{where}{want}{place}")
            elif off > min(k - 1, x):
                raise ValueError(f"{where}at most {min(k - 1, x)}{place}")
            can = bool(f & STEP) and x + 1 < cnt and x - off >= oldest
            if can != bool(f & SAMPLE):
                raise ValueError(
                    fl + "the sample bit (8) must be set exactly on the steps that can be "
                    "sampled (a step whose successor is stored and whose stack's frames are kept)"
                )
            lf = f"state['leaves'][{i}]: "
            v = float(leaves[i])
            if not can:
                if v != 0.0:
                    raise ValueError(lf + "expected 0 (an entry that cannot be sampled)")
            elif not s.prioritized:
                if v != 1.0:
                    raise ValueError(lf + "expected 1 (a sampleable step of a uniform buffer)")
            elif not 0.0 <= v <= max_leaf:
                raise ValueError(lf + "expected a value in [0, max_leaf]")
            if can:
                values[i] = v
                sampleable += 1
    return values, sampleable
