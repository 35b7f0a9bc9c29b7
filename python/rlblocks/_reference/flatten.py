"""Numpy twin of the C++ flattening kernel (``cpp/include/rlblocks/flatten.hpp``).

It executes the same layout (``rlblocks.preprocessors.compile_layout``) with vectorised
numpy: every node receives the list of values found at its place in all observations and
the flat output offsets they go to, so each leaf costs one array conversion and one
fancy-indexed store for the whole batch. Results equal the C++ core bit for bit.

Split as the native side is: ``flatten_read`` reads one value, ``flatten_values`` takes a
batch of Dict / Tuple / index values apart, ``flatten_kinds`` walks the newer kinds
(sequences, graphs, text, OneOf); this module holds the entry points and the core walk.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlblocks._reference import flatten_values as _values
from rlblocks._reference.arrays import tp_name as _tp_name
from rlblocks._reference.flatten_kinds import KindWalker
from rlblocks._reference.flatten_read import (
    _batch_leaf,
    _describe,
    _discrete_index,
    _leading_dim,
    _leaf_value,
    _multidiscrete_offsets,
    _real_array,
    format_path,
)

# kinds whose batched form is a sequence of per-env values, walked env by env
_PER_ENV_KINDS = {
    "repeated": "lists",
    "sequence": "sequences",
    "graph": "graphs",
    "text": "str",
    "oneof": "(branch index, value) pairs",
}


class ReferenceFlattener(KindWalker):
    """Flattens observations along a compiled layout (see module docstring)."""

    def __init__(self, layout: list[dict[str, Any]]):
        self._nodes = layout
        self._root = len(layout) - 1
        self.size = int(layout[-1]["size"])
        self._offsets: dict[int, list[int]] = {}
        for i, node in enumerate(layout):
            if node["kind"] in ("dict", "tuple", "oneof"):
                sizes = [layout[c]["size"] for c in node["children"]]
                first = len(sizes) if node["kind"] == "oneof" else 0  # after the branch one-hot
                self._offsets[i] = (
                    (first + np.concatenate([[0], np.cumsum(sizes)[:-1]])).astype(int).tolist()
                )
            elif node["kind"] == "graph":  # nodes, edges, links
                edges = 2 + node["max_nodes"] * node["node_size"]
                self._offsets[i] = [2, edges, edges + node["max_edges"] * node["edge_size"]]
        self._charsets = {
            i: {ch: k for k, ch in enumerate(node["charset"])}
            for i, node in enumerate(layout)
            if node["kind"] == "text"
        }

    # ------------------------------------------------------------------ entry points

    def transform(self, obs: Any) -> np.ndarray:
        buf = np.zeros(self.size, dtype=np.float32)
        self._fill(self._root, [obs], np.zeros(1, dtype=np.int64), buf, (), single=True)
        return buf

    def transform_list(self, obs_list: list, out: np.ndarray | None = None) -> np.ndarray:
        batch = len(obs_list)
        buf = np.zeros(batch * self.size, dtype=np.float32)
        obs_list = list(obs_list)
        try:
            self._fill(self._root, obs_list, np.arange(batch, dtype=np.int64) * self.size, buf, ())
        except ValueError:
            # name the first bad observation as the native core does (error path only)
            scratch = np.zeros(self.size, np.float32)
            for i, obs in enumerate(obs_list):
                self._fill(self._root, [obs], np.zeros(1, np.int64), scratch, (i,), single=True)
            raise
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
            value = _values.dict_values(node, [obj], path)[0][i]
            return self._batch_size(node["children"][i], value, path + (node["keys"][i],))
        value = _values.tuple_values(node, [obj], path)[0][i]
        return self._batch_size(node["children"][i], value, path + (i,))

    def _fill_batched(
        self, node_id: int, obj: Any, bases: np.ndarray, buf: np.ndarray, path: tuple
    ) -> None:
        node = self._nodes[node_id]
        if node["kind"] == "dict":
            values = _values.dict_values(node, [obj], path)[0]
            for i, (key, child) in enumerate(zip(node["keys"], node["children"], strict=False)):
                self._fill_batched(
                    child, values[i], bases + self._offsets[node_id][i], buf, path + (key,)
                )
        elif node["kind"] == "tuple":
            values = _values.tuple_values(node, [obj], path)[0]
            for i, child in enumerate(node["children"]):
                self._fill_batched(
                    child, values[i], bases + self._offsets[node_id][i], buf, path + (i,)
                )
        elif node["kind"] in _PER_ENV_KINDS:  # a sequence of B per-env values
            where, batch = format_path(path), len(bases)
            if node["kind"] == "text":
                if isinstance(obj, str):
                    raise ValueError(
                        f"{where}: expected a sequence of {batch} str for {node['label']}, "
                        "got a str"
                    )
                if isinstance(obj, np.ndarray) and obj.ndim != 1:
                    raise ValueError(
                        f"{where}: expected shape ({batch},) for a batch of {node['label']}, got "
                        f"{obj.shape}"
                    )
            try:
                per_env = tuple(obj)
            except TypeError:
                raise ValueError(
                    f"{where}: expected a sequence of {batch} {_PER_ENV_KINDS[node['kind']]} for "
                    f"{node['label']}"
                ) from None
            if len(per_env) != batch:
                raise ValueError(
                    f"{where}: batch dimension {len(per_env)} differs from the batch size {batch} "
                    "of the first leaf"
                )
            for r, value in enumerate(per_env):
                self._fill(node_id, [value], bases[r : r + 1], buf, path + (r,), single=True)
        elif node["kind"] == "callback":
            result = np.asarray(node["batch_fn"](obj), dtype=np.float32)
            result = result.reshape(len(bases), node["size"])
            buf[bases[:, None] + np.arange(node["size"])] = result
        else:  # leaves take the batch array itself (checked as the native core does)
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
            per_obs = _values.dict_values(node, values, path, where)
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
            per_obs = _values.tuple_values(node, values, path, where)
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
            for v in values:  # the native walk's checks and messages
                if not isinstance(v, (list, tuple, np.ndarray)):
                    raise ValueError(
                        f"{where}: expected a list of at most {node['max_len']} items for "
                        f"{node['label']}, got {_tp_name(v)}"
                    )
                if isinstance(v, np.ndarray) and v.ndim == 0:
                    raise ValueError(
                        f"{where}: expected a list for {node['label']}, got a 0-d array"
                    )
            lengths = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
            if (lengths > node["max_len"]).any():
                raise ValueError(
                    f"{where}: list of length {int(lengths.max())} is longer than "
                    f"max_len={node['max_len']} of {node['label']}"
                )
            child = self._nodes[node["children"][0]]
            for v in values:  # an array of Box items: checked whole, as the native core does
                if child["kind"] == "box" and isinstance(v, np.ndarray) and len(v) > 0:
                    shape = tuple(child["shape"])
                    arr = _real_array(v, f"numbers of shape {shape}", where)
                    if arr.shape[1:] != shape:
                        raise ValueError(
                            f"{where}: expected shape {(len(v), *shape)} for {child['label']}, "
                            f"got {arr.shape}"
                        )
            self._fill_items(node, [list(v) for v in values], bases, buf, path, single)
        elif kind == "sequence":
            self._fill_sequence(node, values, bases, buf, path, where, single)
        elif kind == "graph":
            for value, base in zip(values, bases, strict=True):
                self._fill_graph(node, value, int(base), buf, path, where, single)
        elif kind == "text":
            table = self._charsets[node_id]
            for value, base in zip(values, bases, strict=True):
                self._fill_text(node, table, value, int(base), buf, where)
        elif kind == "oneof":
            for value, base in zip(values, bases, strict=True):
                branch, item = self._oneof_branch(node, value, where)
                buf[base + branch] = 1.0
                self._fill(
                    node["children"][branch],
                    [item],
                    np.array([base + self._offsets[node_id][branch]], np.int64),
                    buf,
                    path + (1,),
                    single,
                )
        elif kind == "discrete" and not batched_leaf:  # one value per observation
            start, n, label = node["start"], node["n"], node["label"]
            offsets = [_discrete_index(v, start, n, label, where) - start for v in values]
            buf[bases + np.asarray(offsets, dtype=np.int64)] = 1.0
        elif kind == "discrete":
            values = _batch_leaf(values, "integers", (), len(bases), node["label"], where)
            idx = _values.indices(
                values,
                (len(bases),),
                node["label"],
                where,
                batched_leaf,
                (node["start"], node["n"], ()),
            )
            _values.check_range(
                idx[:, None], node["start"], node["n"], node["label"], where, (), batched_leaf
            )
            buf[bases + (idx.astype(np.int64) - node["start"])] = 1.0
        elif kind == "multidiscrete" and not batched_leaf:  # one value per observation
            within = np.stack([_multidiscrete_offsets(node, v, where) for v in values])
            nvec = np.asarray(node["nvec"], dtype=np.int64)
            blocks = np.concatenate([[0], np.cumsum(nvec)[:-1]])
            buf[bases[:, None] + blocks + within.reshape(len(bases), len(nvec))] = 1.0
        elif kind == "multidiscrete":
            shape = tuple(node["shape"])
            if batched_leaf:
                values = _batch_leaf(values, "integers", shape, len(bases), node["label"], where)
            idx = _values.indices(
                values,
                (len(bases), *shape),
                node["label"],
                where,
                batched_leaf,
                (node["starts"], node["nvec"], shape),
            )
            idx = idx.reshape(len(bases), len(node["nvec"]))
            flat = idx.astype(np.int64)
            starts = np.asarray(node["starts"], dtype=np.int64)
            nvec = np.asarray(node["nvec"], dtype=np.int64)
            _values.check_range(
                idx,
                starts,
                nvec,
                node["label"] + " component",
                where,
                component_shape=shape,
                batched=batched_leaf,
            )
            blocks = np.concatenate([[0], np.cumsum(nvec)[:-1]])
            buf[bases[:, None] + blocks + flat - starts] = 1.0
        elif kind == "box":
            shape = tuple(node["shape"])
            if batched_leaf:
                arr = _batch_leaf(values, "numbers", shape, len(bases), node["label"], where)
            else:  # one value per observation, each checked as the native core does
                arr = np.stack(
                    [_leaf_value(v, shape, node["label"], where) for v in values]
                ).reshape(len(bases), *shape)
            if node["map"] != "atari_ram":
                arr = arr.astype(np.float32)
            if node["map"] == "atari_ram":
                arr = (arr.astype(np.float32) - np.float32(128)) / np.float32(128)
            buf[bases[:, None] + np.arange(node["size"])] = arr.reshape(len(bases), node["size"])
        elif kind == "callback":
            result = np.stack([np.asarray(node["fn"](v), dtype=np.float32).ravel() for v in values])
            buf[bases[:, None] + np.arange(node["size"])] = result
        else:
            raise ValueError(f"unknown layout node kind {kind!r}")
