"""Numpy twin of the C++ flattening kernel (``cpp/include/rlblocks/flatten.hpp``).

It executes the same layout (``rlblocks.preprocessors.compile_layout``) with vectorised
numpy: every node receives the list of values found at its place in all observations and
the flat output offsets they go to, so each leaf costs one array conversion and one
fancy-indexed store for the whole batch. Results equal the C++ core bit for bit.
"""

from __future__ import annotations

import numbers
import operator
from typing import Any

import numpy as np

from rlblocks.spaces import format_path


class ReferenceFlattener:
    """Flattens observations along a compiled layout (see module docstring)."""

    def __init__(self, layout: list[dict[str, Any]]):
        self._nodes = layout
        self._root = len(layout) - 1
        self.size = int(layout[-1]["size"])
        self._offsets: dict[int, list[int]] = {}
        for i, node in enumerate(layout):
            if node["kind"] in ("dict", "tuple"):
                sizes = [layout[c]["size"] for c in node["children"]]
                self._offsets[i] = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int).tolist()

    # ------------------------------------------------------------------ entry points

    def transform(self, obs: Any) -> np.ndarray:
        buf = np.zeros(self.size, dtype=np.float32)
        self._fill(self._root, [obs], np.zeros(1, dtype=np.int64), buf, (), single=True)
        return buf

    def transform_list(self, obs_list: list, out: np.ndarray | None = None) -> np.ndarray:
        batch = len(obs_list)
        buf = np.zeros(batch * self.size, dtype=np.float32)
        self._fill(
            self._root, list(obs_list), np.arange(batch, dtype=np.int64) * self.size, buf, ()
        )
        return self._finish(buf, batch, out)

    def transform_batched(self, obs: Any, out: np.ndarray | None = None) -> np.ndarray:
        batch = self._batch_size(self._root, obs)
        buf = np.zeros(batch * self.size, dtype=np.float32)
        self._fill_batched(self._root, obs, np.arange(batch, dtype=np.int64) * self.size, buf, ())
        return self._finish(buf, batch, out)

    def _finish(self, buf: np.ndarray, batch: int, out: np.ndarray | None) -> np.ndarray:
        result = buf.reshape(batch, self.size)
        if out is None:
            return result
        if (
            not isinstance(out, np.ndarray)
            or out.dtype != np.float32
            or out.shape != result.shape
            or not out.flags.c_contiguous
            or not out.flags.writeable
        ):
            raise ValueError(
                "transform_batch: out must be a writeable C-contiguous float32 array of shape "
                f"{result.shape}, got {_describe(out)}"
            )
        out[...] = result
        return out

    # ------------------------------------------------------------------ walking

    def _has_leaf(self, node_id: int) -> bool:
        node = self._nodes[node_id]
        return node["kind"] not in ("dict", "tuple") or any(
            self._has_leaf(c) for c in node["children"]
        )

    def _batch_size(self, node_id: int, obj: Any, path: tuple = ()) -> int:
        """From the first leaf found depth-first (empty Dicts/Tuples skipped)."""
        node = self._nodes[node_id]
        if not self._has_leaf(node_id):
            raise ValueError(
                f"{format_path(path)}: cannot infer the batch size of {node['label']}: "
                "it holds no values"
            )
        if node["kind"] not in ("dict", "tuple"):
            return _leading_dim(obj, path)
        i = next(i for i, c in enumerate(node["children"]) if self._has_leaf(c))
        if node["kind"] == "dict":
            value = self._dict_values(node, [obj], path)[0][i]
            return self._batch_size(node["children"][i], value, path + (node["keys"][i],))
        value = self._tuple_values(node, [obj], path)[0][i]
        return self._batch_size(node["children"][i], value, path + (i,))

    def _fill_batched(
        self, node_id: int, obj: Any, bases: np.ndarray, buf: np.ndarray, path: tuple
    ) -> None:
        node = self._nodes[node_id]
        if node["kind"] == "dict":
            values = self._dict_values(node, [obj], path)[0]
            for i, (key, child) in enumerate(zip(node["keys"], node["children"], strict=False)):
                self._fill_batched(
                    child, values[i], bases + self._offsets[node_id][i], buf, path + (key,)
                )
        elif node["kind"] == "tuple":
            values = self._tuple_values(node, [obj], path)[0]
            for i, child in enumerate(node["children"]):
                self._fill_batched(
                    child, values[i], bases + self._offsets[node_id][i], buf, path + (i,)
                )
        elif node["kind"] == "callback":
            result = np.asarray(node["batch_fn"](obj), dtype=np.float32)
            result = result.reshape(len(bases), node["size"])
            buf[bases[:, None] + np.arange(node["size"])] = result
        else:  # leaves take the batch array itself; Repeated a sequence of per-env lists
            if _leading_dim(obj, path) != len(bases):
                raise ValueError(
                    f"{format_path(path)}: batch dimension {len(obj)} differs from the batch size "
                    f"{len(bases)} of the first leaf"
                )
            # paths name the leaf; a 0-row leaf still has its shape checked
            self._fill(node_id, obj, bases, buf, path, single=True, batched_leaf=True)

    def _fill(
        self,
        node_id: int,
        values: Any,
        bases: np.ndarray,
        buf: np.ndarray,
        path: tuple,
        single: bool = False,
        batched_leaf: bool = False,
    ) -> None:
        """Writes ``values[i]`` (all at this node) at flat offsets ``bases[i]``.

        ``batched_leaf``: ``values`` is a leaf's batch array (checked even with 0 rows, and
        taken as an array: no per-item Python objects)."""
        node = self._nodes[node_id]
        kind = node["kind"]
        if len(bases) == 0 and not batched_leaf:
            return
        where = format_path(path if single else ("*",) + path).replace('["*"]', "[*]")
        if kind == "dict":
            per_obs = self._dict_values(node, values, path, where)
            for i, (key, child) in enumerate(zip(node["keys"], node["children"], strict=False)):
                self._fill(
                    child,
                    [v[i] for v in per_obs],
                    bases + self._offsets[node_id][i],
                    buf,
                    path + (key,),
                    single,
                )
        elif kind == "tuple":
            per_obs = self._tuple_values(node, values, path, where)
            for i, child in enumerate(node["children"]):
                self._fill(
                    child,
                    [v[i] for v in per_obs],
                    bases + self._offsets[node_id][i],
                    buf,
                    path + (i,),
                    single,
                )
        elif kind == "repeated":
            for v in values:
                if not isinstance(v, (list, tuple, np.ndarray)) or (
                    isinstance(v, np.ndarray) and v.ndim == 0
                ):
                    raise ValueError(
                        f"{where}: expected a list for {node['label']}, got {type(v).__name__}"
                    )
            lengths = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
            if (lengths > node["max_len"]).any():
                raise ValueError(
                    f"{where}: list of length {int(lengths.max())} is longer than "
                    f"max_len={node['max_len']} of {node['label']}"
                )
            buf[bases] = lengths
            child = node["children"][0]
            child_size = self._nodes[child]["size"]
            starts = np.repeat(bases + 1, lengths)
            within = np.arange(len(starts)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            items = [item for v in values for item in v]
            try:
                self._fill(child, items, starts + within * child_size, buf, path + ("*",), single)
            except ValueError:
                if not single:
                    raise
                # one observation: name the item, as the native core does (error path only)
                scratch = np.zeros(child_size, np.float32)
                for i, item in enumerate(items):
                    self._fill(child, [item], np.zeros(1, np.int64), scratch, path + (i,), True)
                raise
        elif kind == "discrete":
            idx = self._indices(values, (len(bases),), node["label"], where, batched_leaf)
            self._check_range(idx[:, None], node["start"], node["n"], node["label"], where)
            buf[bases + (idx.astype(np.int64) - node["start"])] = 1.0
        elif kind == "multidiscrete":
            shape = tuple(node["shape"])
            idx = self._indices(values, (len(bases), *shape), node["label"], where, batched_leaf)
            idx = idx.reshape(len(bases), len(node["nvec"]))
            flat = idx.astype(np.int64)
            starts = np.asarray(node["starts"], dtype=np.int64)
            nvec = np.asarray(node["nvec"], dtype=np.int64)
            self._check_range(
                idx,
                starts,
                nvec,
                node["label"] + " component",
                where,
                component_shape=shape,
            )
            blocks = np.concatenate([[0], np.cumsum(nvec)[:-1]])
            buf[bases[:, None] + blocks + flat - starts] = 1.0
        elif kind == "box":
            shape = tuple(node["shape"])
            try:
                arr = np.asarray(values)
            except (ValueError, TypeError) as err:
                raise ValueError(
                    f"{where}: expected numbers of shape {shape} for {node['label']} ({err})"
                ) from None
            if arr.dtype.kind not in "biuf":  # no complex truncation, no parsed strings
                raise ValueError(
                    f"{where}: expected numbers of shape {shape} (real numbers) for "
                    f"{node['label']}, got dtype {arr.dtype}"
                )
            if node["map"] != "atari_ram":
                arr = arr.astype(np.float32)
            if arr.shape != (len(bases), *shape):
                got = arr.shape[1:] if arr.ndim and arr.shape[0] == len(bases) else arr.shape
                raise ValueError(f"{where}: expected shape {shape} for {node['label']}, got {got}")
            if node["map"] == "atari_ram":
                arr = (arr.astype(np.float32) - np.float32(128)) / np.float32(128)
            buf[bases[:, None] + np.arange(node["size"])] = arr.reshape(len(bases), node["size"])
        elif kind == "callback":
            result = np.stack([np.asarray(node["fn"](v), dtype=np.float32).ravel() for v in values])
            buf[bases[:, None] + np.arange(node["size"])] = result
        else:
            raise ValueError(f"unknown layout node kind {kind!r}")

    # ------------------------------------------------------------------ validation helpers

    @staticmethod
    def _dict_values(node: dict, values: Any, path: tuple, where: str | None = None) -> list[list]:
        where = where or format_path(path)
        keys = node["keys"]
        out = []
        for v in values:
            if not hasattr(v, "keys") or isinstance(v, (list, tuple, np.ndarray)):
                raise ValueError(
                    f"{where}: expected a dict with keys {keys} for {node['label']}, "
                    f"got {type(v).__name__}"
                )
            missing = [k for k in keys if k not in v]
            if missing:
                raise ValueError(
                    f"{where}: missing key {missing[0]!r}; {node['label']} needs keys {keys}"
                )
            if len(v) != len(keys):
                extra = [k for k in v.keys() if k not in keys]
                raise ValueError(
                    f"{where}: unexpected keys {extra}; {node['label']} has keys {keys}"
                )
            try:
                out.append([v[k] for k in keys])
            except KeyError as err:  # a mapping that changed while it was read
                raise ValueError(
                    f"{where}: missing key {err.args[0]!r}; {node['label']} needs keys {keys}"
                ) from None
        return out

    @staticmethod
    def _tuple_values(node: dict, values: Any, path: tuple, where: str | None = None) -> list:
        where = where or format_path(path)
        n = len(node["children"])
        for v in values:
            if not isinstance(v, (list, tuple)):
                raise ValueError(
                    f"{where}: expected a tuple of {n} items for {node['label']}, "
                    f"got {type(v).__name__}"
                )
            if len(v) != n:
                raise ValueError(f"{where}: expected {n} items for {node['label']}, got {len(v)}")
        return [tuple(v) for v in values]  # a snapshot: reading items may change a list

    @staticmethod
    def _indices(
        values: Any, shape: tuple, label: str, where: str, batched_leaf: bool = False
    ) -> np.ndarray:
        """The values as an integer array (int64, or uint64 for values above int64).

        ``values`` holds one value per observation; values of different dtypes (an int64
        beside a float32) are converted one by one where pooling them would round."""
        try:
            arr = np.asarray(values)
        except (ValueError, TypeError) as err:
            raise ValueError(f"{where}: expected integers for {label} ({err})") from None
        if arr.shape != shape:
            got = arr.shape[1:] if arr.ndim and arr.shape[0] == shape[0] else arr.shape
            raise ValueError(f"{where}: expected shape {shape[1:]} for {label}, got {got}")
        per_obs = not batched_leaf  # values holds one Python value per observation
        has_array = (
            per_obs and arr.dtype == object and any(isinstance(v, np.ndarray) for v in values)
        )
        if per_obs and arr.dtype == object and not has_array:
            arr = _object_indices(arr, label, where)
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
            parts = [
                ReferenceFlattener._indices([v], (1, *shape[1:]), label, where) for v in values
            ]
            for part in parts:
                if part.dtype == np.uint64:
                    ReferenceFlattener._check_range(part.reshape(1, -1), 0, 2**63 - 1, label, where)
            return np.concatenate([part.astype(np.int64) for part in parts])
        if arr.dtype == np.bool_:
            return arr.astype(np.int64)
        if np.issubdtype(arr.dtype, np.integer):
            return arr
        if np.issubdtype(arr.dtype, np.floating):
            arr = arr.astype(np.float64)  # exact for float16/32 (long double: as native)
            bad = ~np.isfinite(arr) | (arr != np.floor(arr))
            if bad.any():
                raise ValueError(
                    f"{where}: value {arr[bad].flat[0]} is not an integer; {label} needs integers"
                )
            beyond = (arr < -(2.0**63)) | (arr >= 2.0**63)  # exact: powers of two
            if beyond.any():
                raise ValueError(
                    f"{where}: value {arr[beyond].flat[0]:.0f} is out of range for {label}"
                )
            return arr.astype(np.int64)
        raise ValueError(f"{where}: expected integers for {label}, got dtype {arr.dtype}")

    @staticmethod
    def _check_range(
        idx: np.ndarray,
        start: Any,
        n: Any,
        label: str,
        where: str,
        component_shape: tuple = (),
    ) -> None:
        """``idx``: (rows, k) integers; the first one outside its range is reported, with
        its component's position appended to ``where``."""
        lo = np.broadcast_to(np.asarray(start, dtype=np.int64), idx.shape)
        hi = lo + (np.broadcast_to(np.asarray(n, dtype=np.int64), idx.shape) - 1)  # fits int64
        if idx.dtype == np.uint64:  # values above int64 are out of every range
            bad = (idx > np.iinfo(np.int64).max) | (idx.astype(np.int64) < lo)
            bad |= idx.astype(np.int64) > hi
        else:
            bad = (idx < lo) | (idx > hi)
        if bad.any():
            row, k = (int(p) for p in np.argwhere(bad)[0])
            if component_shape:
                where += "".join(f"[{int(p)}]" for p in np.unravel_index(k, component_shape))
            raise ValueError(
                f"{where}: value {idx[row, k]} is out of range for {label} "
                f"(allowed {lo[row, k]}..{hi[row, k]})"
            )


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
            f"{type(obj).__name__}"
        ) from None


def _describe(obj: Any) -> str:
    """As the native core's messages: ``read-only float64 array of shape (2, 3)``."""
    if not isinstance(obj, np.ndarray):
        return type(obj).__name__
    return (
        f"{'' if obj.flags.writeable else 'read-only '}"
        f"{'' if obj.flags.c_contiguous else 'non-contiguous '}{obj.dtype} array of shape "
        f"{obj.shape}"
    )


def _object_indices(arr: np.ndarray, label: str, where: str) -> np.ndarray:
    """Python objects (ints beyond int64, objects with ``__index__``, real numbers) as
    integers; values beyond int64 are out of every range."""
    out = np.empty(arr.shape, dtype=np.int64)
    for pos, v in np.ndenumerate(arr):
        if hasattr(type(v), "__index__"):
            i = operator.index(v)
        elif isinstance(v, numbers.Real) and not isinstance(v, bool):
            f = float(v)
            if not (np.isfinite(f) and f == np.floor(f)):
                raise ValueError(f"{where}: value {f} is not an integer; {label} needs integers")
            i = int(f)
        else:
            raise ValueError(f"{where}: expected integers for {label}, got {v!r}")
        if not -(2**63) <= i < 2**63:
            raise ValueError(f"{where}: value {i} is out of range for {label}")
        out[pos] = i
    return out
