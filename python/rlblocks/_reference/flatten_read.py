"""How the numpy twin of the flattening core reads one value (the twin of
``cpp/bindings/flatten_read.hpp``): error paths, scalars and indices, leaf arrays, with
the native core's checks in its order and its messages word for word.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

import numpy as np

from rlblocks._reference.arrays import tp_name as _tp_name


class _Attr:
    """An attribute step of an error path (``obs["g"].nodes``)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


def format_path(path: tuple | list) -> str:
    """``('c', 2, _Attr('nodes'))`` -> ``obs["c"][2].nodes`` (``"*"``: any observation), keys
    written as they are, as the native core does."""
    out = "obs"
    for p in path:
        if isinstance(p, _Attr):
            out += "." + p.name
        elif isinstance(p, str):
            out += "[*]" if p == "*" else f'["{p}"]'
        else:
            out += f"[{p}]"
    return out


def _leading_dim(obj: Any, path: tuple) -> int:
    """The batch dimension of a batched leaf; ValueError (as the native core) when it has none."""
    if isinstance(obj, np.ndarray):
        if obj.ndim == 0:
            raise ValueError(
                f"{format_path(path)}: expected a leading batch dimension, got a 0-d array"
            )
        return int(obj.shape[0])
    try:
        return len(obj)
    except TypeError:
        raise ValueError(
            f"{format_path(path)}: expected an array with a leading batch dimension, got "
            f"{_tp_name(obj)}"
        ) from None


def _describe(obj: Any) -> str:
    """As the native core's messages: ``read-only float64 array of shape (2, 3)``."""
    if not isinstance(obj, np.ndarray):
        return _tp_name(obj)
    return (
        f"{'' if obj.flags.writeable else 'read-only '}"
        f"{'' if obj.flags.c_contiguous else 'non-contiguous '}{obj.dtype} array of shape "
        f"{obj.shape}"
    )


def _index_error(
    value: float, pos: tuple, label: str, where: str, ranges: tuple | None, batched: bool
) -> ValueError:
    """As the native core's: the value (``%g``), the path of its row (``batched``) and
    component, and the integers its range allows (``pos``: the value's position, row
    first). A whole number beyond int64 is out of range, anything else not an integer."""
    whole = bool(np.isfinite(value) and value == np.floor(value))
    if ranges is None:
        if whole:
            return ValueError(f"{where}: value {value:g} is out of range for {label}")
        return ValueError(f"{where}: value {value:g} is not an integer; {label} needs integers")
    if batched:
        where += f"[{pos[0]}]"
    starts, sizes, component_shape = ranges
    if component_shape:
        k = int(np.ravel_multi_index(pos[1:], component_shape))
        start = int(np.asarray(starts).flat[k])
        size = int(np.asarray(sizes).flat[k])
        where += "".join(f"[{p}]" for p in pos[1:])
        label += " component"
    else:
        start, size = int(starts), int(sizes)
    allowed = f"{start}..{start + size - 1}"
    if whole:
        return ValueError(
            f"{where}: value {value:g} is out of range for {label} (allowed {allowed})"
        )
    return ValueError(
        f"{where}: value {value:g} is not an integer; {label} allows integers {allowed}"
    )


def _object_indices(
    arr: np.ndarray, label: str, where: str, ranges: tuple | None = None
) -> np.ndarray:
    """Python objects (ints beyond int64, objects with ``__index__``, real numbers) as
    integers; values beyond int64 are out of every range."""
    out = np.empty(arr.shape, dtype=np.int64)
    for pos, v in np.ndenumerate(arr):
        if hasattr(type(v), "__index__"):
            i = operator.index(v)
        elif isinstance(v, numbers.Real) and not isinstance(v, bool):
            f = float(v)
            if not (np.isfinite(f) and f == np.floor(f) and -(2.0**63) <= f < 2.0**63):
                raise _index_error(f, pos, label, where, ranges, False)
            i = int(f)
        else:
            raise ValueError(f"{where}: expected integers for {label}, got {v!r}")
        if not -(2**63) <= i < 2**63:
            raise ValueError(f"{where}: value {i} is out of range for {label}")
        out[pos] = i
    return out


# ---------------------------------------------------------------------- new-kind helpers


def _real_array(value: Any, expected: str, where: str) -> np.ndarray:
    """``value`` as an array of real numbers, or the native core's refusal (its
    ``convert_array``: no complex truncation, no parsed strings)."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):
        raise ValueError(f"{where}: expected {expected}, got {_short_repr(value)}") from None
    if arr.dtype.kind not in "biuf":
        raise ValueError(
            f"{where}: expected {expected} (real numbers), got {_short_repr(value)} of dtype "
            f"{arr.dtype}"
        )
    return arr


def _leaf_value(value: Any, shape: tuple, label: str, where: str) -> np.ndarray:
    """One observation's Box value, checked as the native core checks it."""
    arr = _real_array(value, f"numbers of shape {shape}", where)
    if arr.shape != shape:
        raise ValueError(f"{where}: expected shape {shape} for {label}, got {arr.shape}")
    return arr


def _batch_leaf(value: Any, what: str, shape: tuple, batch: int, label: str, where: str) -> Any:
    """A leaf's batch array (``what``: numbers, integers), checked as the native core
    checks it: real numbers, then the batch dimension, then the shape."""
    arr = _real_array(value, f"a batch of {what}", where)
    if arr.ndim > 0 and arr.shape[0] != batch:
        raise ValueError(
            f"{where}: batch dimension {arr.shape[0]} differs from the batch size {batch} of "
            "the first leaf"
        )
    if arr.shape != (batch, *shape):
        raise ValueError(
            f"{where}: expected shape {(batch, *shape)} for a batch of {label}, got {arr.shape}"
        )
    return value if isinstance(value, np.ndarray) else arr


def _short_repr(obj: Any) -> str:
    """repr cut to 80 bytes, as the native core's messages."""
    text = repr(obj)
    raw = text.encode()
    return text if len(raw) <= 80 else raw[:77].decode(errors="ignore") + "..."


def _cut(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters (77 and ``...`` when longer)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _key(where: str, key: Any) -> str:
    return where + (f'["{key}"]' if isinstance(key, str) else f"[{key!r}]")


def _kept_length(node: dict, length: int, where: str) -> int:
    """How many items of a sequence of ``length`` are kept (ValueError when too long)."""
    if length <= node["max_len"]:
        return length
    if node["truncate"]:
        return int(node["max_len"])
    raise ValueError(
        f"{where}: sequence of length {length} is longer than sequence_max_len={node['max_len']} "
        "(raise sequence_max_len in the model config, or set sequence_truncate=True)"
    )


def _is_mapping(obj: Any) -> bool:
    return hasattr(obj, "keys") and not isinstance(obj, (list, tuple, np.ndarray))


def _is_stacked(child: dict, value: Any) -> bool:
    if child["kind"] == "dict":
        return _is_mapping(value)
    return child["kind"] == "tuple" and isinstance(value, tuple)


def _stacked_leaf_length(value: Any, where: str) -> int:
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            raise ValueError(
                f"{where}: expected stacked values with a leading length dimension, got a 0-d array"
            )
        return int(value.shape[0])
    if isinstance(value, (list, tuple)):
        return len(value)
    raise ValueError(
        f"{where}: expected stacked values with a leading length dimension, got {_tp_name(value)}"
    )


def _stacked_dict_values(node: dict, value: Any, where: str) -> list:
    keys = node["keys"]
    if not _is_mapping(value):
        raise ValueError(
            f"{where}: expected a dict of stacked values with keys {keys} for {node['label']}, "
            f"got {_tp_name(value)}"
        )
    fields = []
    for k in keys:
        try:
            fields.append(value[k])
        except KeyError:
            raise ValueError(
                f"{where}: missing key {k!r}; {node['label']} needs keys {keys}"
            ) from None
    if len(value) != len(keys):
        extra = [k for k in value.keys() if k not in keys]
        raise ValueError(f"{where}: unexpected keys {extra}; {node['label']} has keys {keys}")
    return fields


def _check_stacked_tuple(node: dict, value: Any, where: str) -> None:
    n = len(node["children"])
    if not isinstance(value, (tuple, list)):
        raise ValueError(
            f"{where}: expected a tuple of {n} stacked values for {node['label']}, got "
            f"{_tp_name(value)}"
        )
    if len(value) != n:
        raise ValueError(
            f"{where}: expected {n} stacked values for {node['label']}, got {len(value)}"
        )


def _box_rows(item: dict, value: Any, count: int, where: str) -> np.ndarray:
    """``count`` stacked values of a Box item, shape ``(count, *shape)``, as float32 (mapped)."""
    shape = tuple(item["shape"])
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):
        raise ValueError(
            f"{where}: expected numbers of shape {shape}, got {_short_repr(value)}"
        ) from None
    if arr.dtype.kind not in "biuf":
        raise ValueError(
            f"{where}: expected numbers of shape {shape} (real numbers), got {_short_repr(value)} "
            f"of dtype {arr.dtype}"
        )
    if arr.shape != (count, *shape):
        raise ValueError(
            f"{where}: expected shape {(count, *shape)} for {item['label']}, got {arr.shape}"
        )
    rows = arr.astype(np.float32)
    if item["map"] == "atari_ram":
        rows = (rows - np.float32(128)) / np.float32(128)
    return rows


def _graph_count(label: str, value: Any, attr: str, where: str) -> int:
    """The leading count of a graph's nodes / edges / edge_links."""
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            raise ValueError(
                f"{where}.{attr}: expected an array of {attr} for {label}, got a 0-d array"
            )
        return int(value.shape[0])
    if isinstance(value, (list, tuple)):
        return len(value)
    raise ValueError(
        f"{where}.{attr}: expected an array of {attr} for {label}, got {_tp_name(value)}"
    )


def _graph_links(label: str, links: Any, n_nodes: int, n_edges: int, where: str) -> np.ndarray:
    """The (n_edges, 2) links, every one a node index below ``n_nodes``, flat as float32."""
    expected = (n_edges, 2)
    try:
        arr = np.asarray(links)
    except (ValueError, TypeError):
        raise ValueError(
            f"{where}: expected integers of shape {expected}, got {_short_repr(links)}"
        ) from None
    if arr.dtype.kind not in "biuf":
        raise ValueError(
            f"{where}: expected integers of shape {expected} (real numbers), got "
            f"{_short_repr(links)} of dtype {arr.dtype}"
        )
    if arr.shape != expected:
        raise ValueError(
            f"{where}: expected shape {expected} for the edge links of {label}, got {arr.shape}"
        )
    if arr.dtype.kind == "f" and arr.dtype.itemsize == 2:
        arr = arr.astype(np.float32)
    flat = arr.reshape(-1)
    if flat.dtype.kind == "f":
        f = flat.astype(np.float64)
        with np.errstate(invalid="ignore"):
            integral = np.isfinite(f) & (f == np.floor(f)) & (f >= -(2.0**63)) & (f < 2.0**63)
            ok = integral & (f >= 0) & (f < n_nodes)
    elif flat.dtype.kind == "u":
        integral = flat <= np.iinfo(np.int64).max
        ok = flat < n_nodes
    else:
        integral = np.ones(flat.shape, bool)
        ok = (flat >= 0) & (flat < n_nodes)
    bad = np.flatnonzero(~ok)
    if bad.size:
        k = int(bad[0])
        shown = str(int(flat[k])) if integral[k] else f"{float(flat[k]):g}"
        allowed = f" (allowed 0..{n_nodes - 1})" if n_nodes > 0 else ""
        raise ValueError(
            f"{where}[{k // 2}]: edge {k // 2} links node {shown}, but the graph has {n_nodes} "
            f"nodes{allowed}"
        )
    return flat.astype(np.float32)


def _whole(value: Any) -> bool:
    """Whether an index read by ``_scalar_index`` is a whole number (maybe beyond int64)."""
    return isinstance(value, int) or (math.isfinite(value) and value == math.floor(value))


def _index_text(value: Any) -> str:
    """An index as the native core prints it: an integer exactly, a float as ``%g``."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _discrete_index(value: Any, start: int, n: int, label: str, where: str) -> int:
    """One observation's Discrete value, validated as the native core does it."""
    integral, v = _scalar_index(value, label, where)
    if integral and start <= v < start + n:
        return int(v)
    allowed = f"{start}..{start + n - 1}"
    if not _whole(v):
        raise ValueError(
            f"{where}: value {v:g} is not an integer; {label} allows integers {allowed}"
        )
    raise ValueError(
        f"{where}: value {_index_text(v)} is out of range for {label} (allowed {allowed})"
    )


def _multidiscrete_offsets(node: dict, value: Any, where: str) -> np.ndarray:
    """One observation's MultiDiscrete value as offsets into its components' ranges,
    checked in the native core's order (a flat list item by item, else the array's
    elements in C order, each bad one named by its path)."""
    shape, label = tuple(node["shape"]), node["label"]
    starts = np.asarray(node["starts"], dtype=np.int64).ravel()
    nvec = np.asarray(node["nvec"], dtype=np.int64).ravel()
    component = label + " component"
    if isinstance(value, (list, tuple)) and len(shape) == 1 and len(value) == shape[0] > 0:
        items = list(value)  # a snapshot: reading an item may change the list
        return np.array(
            [
                _discrete_index(v, int(a), int(n), component, f"{where}[{k}]") - int(a)
                for k, (v, a, n) in enumerate(zip(items, starts, nvec, strict=True))
            ],
            dtype=np.int64,
        )
    arr = _real_array(value, f"integers of shape {shape}", where)
    if arr.shape != shape:
        raise ValueError(f"{where}: expected shape {shape} for {label}, got {arr.shape}")
    out = np.empty(len(nvec), dtype=np.int64)
    for k, v in enumerate(arr.flat):
        pos = "".join(f"[{int(p)}]" for p in np.unravel_index(k, shape))
        a, n = int(starts[k]), int(nvec[k])
        out[k] = _discrete_index(v, a, n, component, where + pos) - a
    return out


def _scalar_index(value: Any, label: str, where: str) -> tuple[bool, Any]:
    """(integral, value) of one index, read as the native core reads it: Python and numpy
    integers and floats, 0-d arrays, objects with ``__index__``, real numbers; a value
    that is not integral is a float, or an int above int64 (a uint64)."""
    if isinstance(value, int):  # bool too
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"{where}: value {_short_repr(value)} is out of range for {label}")
        return True, int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if math.isfinite(f) and f == math.floor(f) and -(2.0**63) <= f < 2.0**63:
            return True, int(f)
        return False, f
    if isinstance(value, (np.integer, np.bool_)):
        if isinstance(value, np.unsignedinteger) and int(value) > np.iinfo(np.int64).max:
            return False, int(value)  # whole, beyond int64
        return True, int(value)
    if isinstance(value, np.ndarray):
        if value.ndim != 0:
            raise ValueError(
                f"{where}: expected a single integer for {label}, got an array of shape "
                f"{value.shape} and dtype {value.dtype}"
            )
        if value.dtype.kind not in "biuf":
            raise ValueError(
                f"{where}: expected a single integer for {label} (real numbers), got "
                f"{_short_repr(value)} of dtype {value.dtype}"
            )
        return _scalar_index(value[()], label, where)
    if hasattr(type(value), "__index__"):
        return _scalar_index(operator.index(value), label, where)
    if isinstance(value, numbers.Real):
        return _scalar_index(float(value), label, where)
    raise ValueError(
        f"{where}: expected an integer for {label}, got {_short_repr(value)} ({_tp_name(value)})"
    )
