"""Trajectory view API: what a model wants to see of a trajectory, and building it.

A :class:`ViewRequirement` names a data column and a time shift: ``0`` is the current step,
``-1`` the previous one, ``"-3:0"`` the last four steps (inclusive range, oldest first),
``[-2, 0]`` an explicit list. :func:`build_view_inputs` evaluates a model's view
requirements on a trajectory (a mapping of equally long columns, optionally several
episodes back to back with an ``eps_id`` column).

Steps before an episode's start are filled like RLlib's sample collector does: observation
columns (``repeat_first``, by default ``"obs"``) repeat the episode's first value, every
other column (actions, rewards, memories) is zeros.

Examples:
    >>> import numpy as np
    >>> traj = {"obs": np.arange(4.0), "rewards": np.array([1.0, 2.0, 3.0, 4.0])}
    >>> views = build_view_inputs(traj, {
    ...     "prev_n_obs": ViewRequirement("obs", shift="-2:0"),
    ...     "prev_rewards": ViewRequirement("rewards", shift=-1)})
    >>> views["prev_n_obs"].tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 2.0], [1.0, 2.0, 3.0]]
    >>> views["prev_rewards"].tolist()
    [0.0, 1.0, 2.0, 3.0]
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["ViewRequirement", "build_view_inputs"]


class ViewRequirement:
    """One input a model needs: a data column seen at a time shift.

    Args:
        data_col: the trajectory column to read; None means the view's own name.
        space: the space of one value of the column (default: an unbounded scalar Box).
        shift: an int, a list/tuple/array of ints, or a string ``"from:to"`` or
            ``"from:to:step"`` (inclusive of ``to``).
        index: an optional fixed row index (kept for RLlib compatibility; unused here).
        batch_repeat_value: in training batches the value is only needed every this many
            rows (attention memories use ``max_seq_len``).
        used_for_compute_actions: whether inference needs it.
        used_for_training: whether training needs it.

    Attributes:
        shift_from, shift_to, shift_step: the parsed range (None unless ``shift`` is a str).
        shift_arr: the shifts as an int64 array (one entry for an int shift).

    Raises:
        ValueError: a malformed shift string or non-integer shifts.

    Examples:
        >>> vr = ViewRequirement("actions", shift="-3:-1")
        >>> vr.shift_from, vr.shift_to, vr.shift_arr.tolist()
        (-3, -1, [-3, -2, -1])
        >>> ViewRequirement(shift="0:2").shift_arr.tolist()
        [0, 1, 2]
    """

    def __init__(
        self,
        data_col: str | None = None,
        space: gym.Space | None = None,
        shift: int | str | Iterable[int] | np.ndarray = 0,
        index: int | None = None,
        batch_repeat_value: int = 1,
        used_for_compute_actions: bool = True,
        used_for_training: bool = True,
    ) -> None:
        self.data_col = data_col
        self.space = space if space is not None else gym.spaces.Box(-np.inf, np.inf, shape=())
        self.index = index
        if int(batch_repeat_value) < 1:
            raise ValueError(f"batch_repeat_value must be >= 1, got {batch_repeat_value}")
        self.batch_repeat_value = int(batch_repeat_value)
        self.used_for_compute_actions = used_for_compute_actions
        self.used_for_training = used_for_training
        self.shift_from: int | None = None
        self.shift_to: int | None = None
        self.shift_step: int | None = None
        if isinstance(shift, str):
            parts = shift.split(":")
            try:
                if len(parts) not in (2, 3):
                    raise ValueError
                nums = [int(p) for p in parts]
            except ValueError:
                raise ValueError(
                    f"shift string must be 'from:to' or 'from:to:step' with integers, got {shift!r}"
                ) from None
            self.shift_from, self.shift_to = nums[0], nums[1]
            self.shift_step = nums[2] if len(nums) == 3 else 1
            if self.shift_step == 0 or (self.shift_to - self.shift_from) * self.shift_step < 0:
                raise ValueError(f"shift {shift!r} is an empty range")
            # RLlib tests `if self.shift_from:` and so mishandles "0:2"; any start works here.
            end = self.shift_to + (1 if self.shift_step > 0 else -1)
            self.shift_arr = np.arange(self.shift_from, end, self.shift_step, dtype=np.int64)
            self.shift: Any = shift
        elif isinstance(shift, (int, np.integer)) and not isinstance(shift, bool):
            self.shift = int(shift)
            self.shift_arr = np.array([self.shift], dtype=np.int64)
        else:
            arr = np.asarray(shift if isinstance(shift, np.ndarray) else list(shift))  # type: ignore[arg-type]
            if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu":
                raise ValueError(
                    f"shift must be an int, a non-empty list of ints or a 'from:to' string, "
                    f"got {shift!r}"
                )
            self.shift = arr.astype(np.int64)
            self.shift_arr = self.shift

    @property
    def has_time_axis(self) -> bool:
        """True when the view has a time axis (a range or list shift)."""
        return not isinstance(self.shift, int)

    def __repr__(self) -> str:
        return (
            f"ViewRequirement(data_col={self.data_col!r}, space={self.space}, "
            f"shift={self.shift!r}, batch_repeat_value={self.batch_repeat_value}, "
            f"used_for_compute_actions={self.used_for_compute_actions}, "
            f"used_for_training={self.used_for_training})"
        )


def _episode_bounds(eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(eps)
    change = np.flatnonzero(eps[1:] != eps[:-1]) + 1
    starts = np.concatenate(([0], change))
    ends = np.append(change, n)
    run = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
    return starts[run], ends[run]


def build_view_inputs(
    trajectory: Mapping[str, Any],
    view_requirements: Mapping[str, ViewRequirement],
    *,
    num_rows: int | None = None,
    names: Iterable[str] | None = None,
    episode_ids: Any = None,
    repeat_first: Collection[str] = ("obs",),
) -> dict[str, np.ndarray]:
    """Evaluates view requirements on a trajectory.

    Row ``t`` of view ``v`` is ``trajectory[v.data_col][t + shift]``; an int shift gives
    ``[R, *value_shape]``, a range or list gives ``[R, len(shifts), *value_shape]``.
    Shifts never cross episode boundaries: steps before an episode's start are filled with
    the episode's first value (columns in ``repeat_first``) or zeros.

    Args:
        trajectory: column name -> array whose first dimension is time.
        view_requirements: view name -> requirement (e.g. ``model.view_requirements``).
        num_rows: rows R to build (default: the length of the shortest column used). A
            column may be longer (e.g. ``obs`` with the final observation).
        names: only build these views (default: all).
        episode_ids: ``[R]`` episode ids when several episodes are back to back (default:
            ``trajectory["eps_id"]`` if present, else one episode).
        repeat_first: columns that repeat the episode's first value before its start.

    Returns:
        View name -> array.

    Raises:
        ValueError: a missing column, a positive shift running past the episode's end or
            the column, or episode ids of the wrong length.

    Examples:
        >>> traj = {"actions": np.array([2, 0, 1])}
        >>> build_view_inputs(traj, {"prev_a": ViewRequirement("actions", shift="-2:-1")},
        ...                   episode_ids=[7, 8, 8])["prev_a"].tolist()
        [[0, 0], [0, 0], [0, 0]]
    """
    wanted = list(view_requirements) if names is None else list(names)
    cols: dict[str, np.ndarray] = {}
    for name in wanted:
        if name not in view_requirements:
            raise ValueError(f"no view requirement named {name!r}; have {list(view_requirements)}")
        name_of_col = view_requirements[name].data_col or name
        if name_of_col not in trajectory:
            raise ValueError(
                f"view {name!r} reads column {name_of_col!r}, which the trajectory lacks "
                f"(columns: {sorted(trajectory)})"
            )
        cols[name_of_col] = np.asarray(trajectory[name_of_col])
        if cols[name_of_col].ndim < 1:
            raise ValueError(f"column {name_of_col!r} must have a time dimension, got a scalar")
    if num_rows is None:
        num_rows = min((len(c) for c in cols.values()), default=0)
    rows = int(num_rows)
    if episode_ids is None and "eps_id" in trajectory:
        episode_ids = trajectory["eps_id"]
    if episode_ids is not None:
        eps = np.asarray(episode_ids)
        if eps.ndim != 1 or len(eps) < rows:
            raise ValueError(f"episode_ids: expected {rows} rows, got shape {eps.shape}")
        eps = eps[:rows]
        ep_start, ep_end = _episode_bounds(eps) if rows else (np.zeros(0, int),) * 2
        bounded = True
    else:
        ep_start = np.zeros(rows, np.int64)
        ep_end = np.full(rows, rows, np.int64)
        bounded = False
    t = np.arange(rows)
    out: dict[str, np.ndarray] = {}
    for name in wanted:
        vr = view_requirements[name]
        col_name = vr.data_col or name
        col = cols[col_name]
        idx = t[:, None] + vr.shift_arr[None, :]
        before = idx < ep_start[:, None]
        limit = ep_end[:, None] if bounded else len(col)
        past = idx >= limit
        if past.any():
            r = int(np.argwhere(past)[0][0])
            raise ValueError(
                f"view {name!r}: shift {vr.shift!r} of column {col_name!r} at row {r} runs past "
                + ("the end of its episode" if bounded else f"the column's {len(col)} rows")
            )
        if col_name in repeat_first:
            src = np.where(before, ep_start[:, None], idx)
            vals = col[src]
        else:
            vals = (
                col[np.where(before, 0, idx)]
                if len(col)
                else np.zeros(idx.shape + col.shape[1:], col.dtype)
            )
            vals[before] = 0
        out[name] = vals if vr.has_time_axis else vals[:, 0]
    return out
