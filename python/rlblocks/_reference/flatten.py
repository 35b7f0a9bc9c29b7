"""Numpy twin of the C++ flattening kernel (``cpp/include/rlblocks/flatten.hpp``).

It executes the same layout (``rlblocks.preprocessors.compile_layout``) with vectorised
numpy: every node receives the list of values found at its place in all observations and
the flat output offsets they go to, so each leaf costs one array conversion and one
fancy-indexed store for the whole batch. Results equal the C++ core bit for bit.
"""

from __future__ import annotations

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
            got = (
                f"{out.dtype} array of shape {out.shape}"
                if isinstance(out, np.ndarray)
                else type(out).__name__
            )
            raise ValueError(
                "out: expected a writeable C-contiguous float32 array of shape "
                f"{result.shape}, got {got}"
            )
        out[...] = result
        return out

    # ------------------------------------------------------------------ walking

    def _batch_size(self, node_id: int, obj: Any) -> int:
        node = self._nodes[node_id]
        if node["kind"] in ("dict", "tuple") and node["children"]:
            first = obj[node["keys"][0]] if node["kind"] == "dict" else obj[0]
            return self._batch_size(node["children"][0], first)
        return len(obj)

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
            result = np.asarray(node["batch_fn"](obj), dtype=np.float32).reshape(len(bases), -1)
            buf[bases[:, None] + np.arange(node["size"])] = result
        else:  # leaves take the batch array itself; Repeated a sequence of per-env lists
            if len(obj) != len(bases):
                raise ValueError(
                    f"{format_path(path)}: batch dimension {len(obj)} differs from the batch size "
                    f"{len(bases)} of the first leaf"
                )
            self._fill(node_id, obj, bases, buf, path, single=True)  # paths name the leaf

    def _fill(
        self,
        node_id: int,
        values: Any,
        bases: np.ndarray,
        buf: np.ndarray,
        path: tuple,
        single: bool = False,
    ) -> None:
        """Writes ``values[i]`` (all at this node) at flat offsets ``bases[i]``."""
        node = self._nodes[node_id]
        kind = node["kind"]
        if len(bases) == 0:
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
            self._fill(child, items, starts + within * child_size, buf, path + ("*",), single)
        elif kind == "discrete":
            idx = self._indices(values, (len(bases),), node["label"], where)
            self._check_range(idx, node["start"], node["n"], node["label"], where)
            buf[bases + (idx.astype(np.int64) - node["start"])] = 1.0
        elif kind == "multidiscrete":
            shape = tuple(node["shape"])
            idx = self._indices(values, (len(bases), *shape), node["label"], where)
            flat = idx.reshape(len(bases), -1).astype(np.int64)
            starts = np.asarray(node["starts"], dtype=np.int64)
            nvec = np.asarray(node["nvec"], dtype=np.int64)
            self._check_range(
                idx.reshape(len(bases), -1), starts, nvec, node["label"] + " component", where
            )
            blocks = np.concatenate([[0], np.cumsum(nvec)[:-1]])
            buf[bases[:, None] + blocks + flat - starts] = 1.0
        elif kind == "box":
            shape = tuple(node["shape"])
            try:
                arr = (
                    np.asarray(values)
                    if node["map"] == "atari_ram"
                    else np.asarray(values, dtype=np.float32)
                )
            except (ValueError, TypeError) as err:
                raise ValueError(
                    f"{where}: expected numbers of shape {shape} for {node['label']} ({err})"
                ) from None
            if arr.shape != (len(bases), *shape):
                got = arr.shape[1:] if arr.ndim and arr.shape[0] == len(bases) else arr.shape
                raise ValueError(f"{where}: expected shape {shape} for {node['label']}, got {got}")
            if node["map"] == "atari_ram":
                arr = (arr.astype(np.float32) - np.float32(128)) / np.float32(128)
            buf[bases[:, None] + np.arange(node["size"])] = arr.reshape(len(bases), -1)
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
            out.append([v[k] for k in keys])
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
        return list(values)

    @staticmethod
    def _indices(values: Any, shape: tuple, label: str, where: str) -> np.ndarray:
        try:
            arr = np.asarray(values)
        except (ValueError, TypeError) as err:
            raise ValueError(f"{where}: expected integers for {label} ({err})") from None
        if arr.shape != shape:
            got = arr.shape[1:] if arr.ndim and arr.shape[0] == shape[0] else arr.shape
            raise ValueError(f"{where}: expected shape {shape[1:]} for {label}, got {got}")
        if arr.dtype == np.bool_:
            return arr.astype(np.int64)
        if np.issubdtype(arr.dtype, np.integer):
            return arr
        if np.issubdtype(arr.dtype, np.floating):
            bad = ~np.isfinite(arr) | (arr != np.floor(arr))
            if bad.any():
                raise ValueError(
                    f"{where}: value {arr[bad].flat[0]} is not an integer; {label} needs integers"
                )
            return arr.astype(np.int64)
        raise ValueError(f"{where}: expected integers for {label}, got dtype {arr.dtype}")

    @staticmethod
    def _check_range(idx: np.ndarray, start: Any, n: Any, label: str, where: str) -> None:
        lo = np.asarray(start)
        bad = (idx < lo) | (idx >= lo + np.asarray(n))
        if bad.any():
            pos = np.argwhere(bad)[0]
            lo_v = int(np.broadcast_to(lo, idx.shape)[tuple(pos)])
            hi_v = lo_v + int(np.broadcast_to(np.asarray(n), idx.shape)[tuple(pos)]) - 1
            raise ValueError(
                f"{where}: value {idx[tuple(pos)]} is out of range for {label} "
                f"(allowed {lo_v}..{hi_v})"
            )
