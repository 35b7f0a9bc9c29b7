"""How the numpy twin of the flattening core takes a batch of values apart and checks it:
Dict and Tuple values (one list per observation), integer index arrays and their ranges,
with the native core's messages (``cpp/bindings/flatten_walk.hpp``, ``flatten_batched.hpp``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlblocks._reference.arrays import tp_name as _tp_name
from rlblocks._reference.flatten_read import _index_error, _object_indices, format_path


def dict_values(node: dict, values: Any, path: tuple, where: str | None = None) -> list[list]:
    """Each observation's values of a Dict node, in key order (all keys, no others)."""
    where = where or format_path(path)
    keys = node["keys"]
    out = []
    for v in values:
        if not hasattr(v, "keys") or isinstance(v, (list, tuple, np.ndarray)):
            raise ValueError(
                f"{where}: expected a dict with keys {keys} for {node['label']}, got {_tp_name(v)}"
            )
        missing = [k for k in keys if k not in v]
        if missing:
            raise ValueError(
                f"{where}: missing key {missing[0]!r}; {node['label']} needs keys {keys}"
            )
        if len(v) != len(keys):
            extra = [k for k in v.keys() if k not in keys]
            raise ValueError(f"{where}: unexpected keys {extra}; {node['label']} has keys {keys}")
        try:
            out.append([v[k] for k in keys])
        except KeyError as err:  # a mapping that changed while it was read
            raise ValueError(
                f"{where}: missing key {err.args[0]!r}; {node['label']} needs keys {keys}"
            ) from None
    return out


def tuple_values(node: dict, values: Any, path: tuple, where: str | None = None) -> list:
    """Each observation's items of a Tuple node (a snapshot of each tuple or list)."""
    where = where or format_path(path)
    n = len(node["children"])
    for v in values:
        if not isinstance(v, (list, tuple)):
            raise ValueError(
                f"{where}: expected a tuple of {n} items for {node['label']}, got {_tp_name(v)}"
            )
        if len(v) != n:
            raise ValueError(f"{where}: expected {n} items for {node['label']}, got {len(v)}")
    return [tuple(v) for v in values]  # a snapshot: reading items may change a list


def indices(
    values: Any,
    shape: tuple,
    label: str,
    where: str,
    batched_leaf: bool = False,
    ranges: tuple | None = None,
) -> np.ndarray:
    """The values as an integer array (int64, or uint64 for values above int64).

    ``values`` holds one value per observation; values of different dtypes (an int64
    beside a float32) are converted one by one where pooling them would round.
    ``ranges`` (starts, sizes, component shape) lets a non-integer's message name the
    range its component allows, as the native core's does."""
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as err:
        raise ValueError(f"{where}: expected integers for {label} ({err})") from None
    if arr.shape != shape:
        got = arr.shape[1:] if arr.ndim and arr.shape[0] == shape[0] else arr.shape
        raise ValueError(f"{where}: expected shape {shape[1:]} for {label}, got {got}")
    per_obs = not batched_leaf  # values holds one Python value per observation
    has_array = per_obs and arr.dtype == object and any(isinstance(v, np.ndarray) for v in values)
    if per_obs and arr.dtype == object and not has_array:
        arr = _object_indices(arr, label, where, ranges)
    elif (
        per_obs
        and len(values) > 1
        and (
            has_array
            or (
                arr.dtype.kind == "f"
                and np.nanmax(np.abs(arr.astype(np.float64)), initial=0) >= 2**53
            )
        )
    ):
        # pooling would round (floats beside int64) or mix Python objects with arrays
        # (a list of __index__ objects beside an array): each value on its own
        parts = [indices([v], (1, *shape[1:]), label, where, False, ranges) for v in values]
        for part in parts:
            if part.dtype == np.uint64:
                check_range(part.reshape(1, -1), 0, 2**63 - 1, label, where)
        return np.concatenate([part.astype(np.int64) for part in parts])
    if arr.dtype == np.bool_:
        return arr.astype(np.int64)
    if np.issubdtype(arr.dtype, np.integer):
        return arr
    if np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)  # exact for float16/32 (long double: as native)
        # not integers, or whole numbers beyond int64 (2**63 is exact)
        bad = ~np.isfinite(arr) | (arr != np.floor(arr)) | (arr < -(2.0**63)) | (arr >= 2.0**63)
        if bad.any():
            pos = tuple(int(p) for p in np.argwhere(bad)[0])
            raise _index_error(float(arr[pos]), pos, label, where, ranges, batched_leaf)
        return arr.astype(np.int64)
    raise ValueError(f"{where}: expected integers for {label}, got dtype {arr.dtype}")


def check_range(
    idx: np.ndarray,
    start: Any,
    n: Any,
    label: str,
    where: str,
    component_shape: tuple = (),
    batched: bool = False,
) -> None:
    """``idx``: (rows, k) integers; the first one outside its range is reported, with
    its row's (``batched``) and component's position appended to ``where``."""
    lo = np.broadcast_to(np.asarray(start, dtype=np.int64), idx.shape)
    hi = lo + (np.broadcast_to(np.asarray(n, dtype=np.int64), idx.shape) - 1)  # fits int64
    if idx.dtype == np.uint64:  # values above int64 are out of every range
        bad = (idx > np.iinfo(np.int64).max) | (idx.astype(np.int64) < lo)
        bad |= idx.astype(np.int64) > hi
    else:
        bad = (idx < lo) | (idx > hi)
    if bad.any():
        row, k = (int(p) for p in np.argwhere(bad)[0])
        if batched:
            where += f"[{row}]"
        if component_shape:
            where += "".join(f"[{int(p)}]" for p in np.unravel_index(k, component_shape))
        raise ValueError(
            f"{where}: value {idx[row, k]} is out of range for {label} "
            f"(allowed {lo[row, k]}..{hi[row, k]})"
        )
