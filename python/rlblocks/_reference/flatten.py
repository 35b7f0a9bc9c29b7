"""Numpy twin of the C++ flattening kernel (``cpp/include/rlblocks/flatten.hpp``).

It executes the same layout (``rlblocks.preprocessors.compile_layout``) with vectorised
numpy: every node receives the list of values found at its place in all observations and
the flat output offsets they go to, so each leaf costs one array conversion and one
fancy-indexed store for the whole batch. Results equal the C++ core bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlblocks._reference.arrays import tp_name as _tp_name
from rlblocks._reference.flatten_read import (  # noqa: F401 (format_path: re-exported)
    _Attr,
    _batch_leaf,
    _box_rows,
    _check_stacked_tuple,
    _cut,
    _describe,
    _discrete_index,
    _graph_count,
    _graph_links,
    _index_error,
    _index_text,
    _is_stacked,
    _kept_length,
    _key,
    _leading_dim,
    _leaf_value,
    _multidiscrete_offsets,
    _object_indices,
    _real_array,
    _scalar_index,
    _stacked_dict_values,
    _stacked_leaf_length,
    _whole,
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


class ReferenceFlattener:
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
            idx = self._indices(
                values,
                (len(bases),),
                node["label"],
                where,
                batched_leaf,
                (node["start"], node["n"], ()),
            )
            self._check_range(
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
            idx = self._indices(
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
            self._check_range(
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

    # ------------------------------------------------------------------ lists and sequences

    def _fill_items(
        self,
        node: dict,
        items_per_obs: list[list],
        bases: np.ndarray,
        buf: np.ndarray,
        path: tuple,
        single: bool,
    ) -> None:
        """Slot 0 of each list (at ``bases``) gets its length, then the items follow."""
        lengths = np.fromiter(
            (len(v) for v in items_per_obs), dtype=np.int64, count=len(items_per_obs)
        )
        buf[bases] = lengths
        child = node["children"][0]
        child_size = self._nodes[child]["size"]
        starts = np.repeat(bases + 1, lengths)
        within = np.arange(len(starts)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        items = [item for v in items_per_obs for item in v]
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

    def _fill_sequence(
        self,
        node: dict,
        values: list,
        bases: np.ndarray,
        buf: np.ndarray,
        path: tuple,
        where: str,
        single: bool,
    ) -> None:
        """A gymnasium Sequence: a list, an array of items, or (``stack``) a dict / tuple of
        arrays with a leading length dim; kept items as in :meth:`_kept_length`."""
        child = self._nodes[node["children"][0]]
        listed: list[list] = []
        listed_bases: list[int] = []
        for value, base in zip(values, bases, strict=True):
            if node["stack"] and _is_stacked(child, value):
                length = self._stacked_length(node["children"][0], value, where)
                used = _kept_length(node, length, where)
                listed.append(self._split_stacked(node["children"][0], value, length, used, where))
                listed_bases.append(int(base))
                continue
            if not isinstance(value, (list, tuple, np.ndarray)):
                raise ValueError(
                    f"{where}: expected a sequence of at most {node['max_len']} items for "
                    f"{node['label']}, got {_tp_name(value)}"
                )
            if isinstance(value, np.ndarray) and value.ndim == 0:
                raise ValueError(
                    f"{where}: expected a sequence for {node['label']}, got a 0-d array"
                )
            length = len(value)
            used = _kept_length(node, length, where)
            if isinstance(value, np.ndarray) and child["kind"] == "box" and length > 0:
                rows = _box_rows(child, value, length, where)  # (len, *shape) in one piece
                buf[base] = used
                flat = rows[:used].reshape(-1)
                buf[int(base) + 1 + np.arange(flat.size)] = flat
                continue
            listed.append([value[i] for i in range(used)])
            listed_bases.append(int(base))
        if listed:
            self._fill_items(node, listed, np.array(listed_bases, np.int64), buf, path, single)

    def _stacked_length(self, node_id: int, value: Any, where: str) -> int:
        """The item count of a stacked value: its first leaf's leading dim."""
        node = self._nodes[node_id]
        if not self._has_leaf(node_id):
            raise ValueError(
                f"{where}: cannot infer the length of stacked {node['label']}: it holds no values"
            )
        if node["kind"] not in ("dict", "tuple"):
            return _stacked_leaf_length(value, where)
        i = next(i for i, c in enumerate(node["children"]) if self._has_leaf(c))
        if node["kind"] == "dict":
            fields = _stacked_dict_values(node, value, where)
            return self._stacked_length(
                node["children"][i], fields[i], _key(where, node["keys"][i])
            )
        _check_stacked_tuple(node, value, where)
        return self._stacked_length(node["children"][i], value[i], f"{where}[{i}]")

    def _split_stacked(self, node_id: int, value: Any, length: int, used: int, where: str) -> list:
        """The first ``used`` items of a stacked value of ``length`` items."""
        node = self._nodes[node_id]
        if node["kind"] in ("dict", "tuple"):
            if node["kind"] == "dict":
                fields = _stacked_dict_values(node, value, where)
                places = [_key(where, k) for k in node["keys"]]
            else:
                _check_stacked_tuple(node, value, where)
                fields = list(value)
                places = [f"{where}[{j}]" for j in range(len(fields))]
            parts = [
                self._split_stacked(c, f, length, used, w)
                for c, f, w in zip(node["children"], fields, places, strict=True)
            ]
            if node["kind"] == "dict":
                keys = node["keys"]
                return [{k: p[i] for k, p in zip(keys, parts, strict=True)} for i in range(used)]
            return [tuple(p[i] for p in parts) for i in range(used)]
        got = _stacked_leaf_length(value, where)
        if got != length:
            raise ValueError(
                f"{where}: expected {length} stacked items (the length of the first field), "
                f"got {got}"
            )
        return [value[i] for i in range(used)]

    # ------------------------------------------------------------------ graphs, text, oneof

    def _fill_graph(
        self,
        node: dict,
        value: Any,
        base: int,
        buf: np.ndarray,
        path: tuple,
        where: str,
        single: bool,
    ) -> None:
        """Counts, then links, nodes and edges, in the native core's order of checks."""
        label = node["label"]
        if isinstance(value, (tuple, list)):
            if len(value) != 3:
                raise ValueError(
                    f"{where}: expected a GraphInstance(nodes, edges, edge_links) for {label}, "
                    f"got a {_tp_name(value)} of {len(value)} items"
                )
            nodes, edges, links = value
        elif all(hasattr(value, a) for a in ("nodes", "edges", "edge_links")):
            nodes, edges, links = value.nodes, value.edges, value.edge_links
        else:
            raise ValueError(
                f"{where}: expected a GraphInstance(nodes, edges, edge_links) for {label}, "
                f"got {_tp_name(value)}"
            )
        has_edges = len(node["children"]) == 2
        n_nodes = _graph_count(label, nodes, "nodes", where)
        if n_nodes > node["max_nodes"]:
            raise ValueError(
                f"{where}: graph has {n_nodes} nodes, more than graph_max_nodes={node['max_nodes']}"
            )
        n_edges = 0
        if has_edges:  # gymnasium gives edges=None for a graph without edges
            n_edges = 0 if edges is None else _graph_count(label, edges, "edges", where)
        elif edges is not None:
            raise ValueError(
                f"{where}.edges: expected None for {label} (it has no edge space), got "
                f"{_tp_name(edges)}"
            )
        elif links is not None:
            n_edges = _graph_count(label, links, "edge_links", where)
        if n_edges > node["max_edges"]:
            raise ValueError(
                f"{where}: graph has {n_edges} edges, more than graph_max_edges={node['max_edges']}"
            )
        if has_edges:
            n_links = 0 if links is None else _graph_count(label, links, "edge_links", where)
            if n_links != n_edges:
                raise ValueError(f"{where}: graph has {n_edges} edges but {n_links} edge_links")
        nodes_at, edges_at, links_at = (base + off for off in self._graph_offsets(node))
        if links is not None:
            flat = _graph_links(label, links, n_nodes, n_edges, f"{where}.edge_links")
            buf[links_at + np.arange(flat.size)] = flat
        self._fill_graph_items(
            node["children"][0], nodes, n_nodes, nodes_at, buf, path, "nodes", where, single
        )
        if has_edges and n_edges > 0:
            self._fill_graph_items(
                node["children"][1], edges, n_edges, edges_at, buf, path, "edges", where, single
            )
        buf[base] = n_nodes
        buf[base + 1] = n_edges

    def _graph_offsets(self, node: dict) -> list[int]:
        edges = 2 + node["max_nodes"] * node["node_size"]
        return [2, edges, edges + node["max_edges"] * node["edge_size"]]

    def _fill_graph_items(
        self,
        item_id: int,
        value: Any,
        count: int,
        at: int,
        buf: np.ndarray,
        path: tuple,
        attr: str,
        where: str,
        single: bool,
    ) -> None:
        item = self._nodes[item_id]
        if item["kind"] == "box":  # (count, *shape) in one piece
            flat = _box_rows(item, value, count, f"{where}.{attr}").reshape(-1)
            buf[at + np.arange(flat.size)] = flat
            return
        for i in range(count):
            self._fill(
                item_id,
                [value[i]],
                np.array([at + i * item["size"]], np.int64),
                buf,
                path + (_Attr(attr), i),
                single,
            )

    @staticmethod
    def _fill_text(
        node: dict, table: dict[str, int], value: Any, base: int, buf: np.ndarray, where: str
    ) -> None:
        label = node["label"]
        if not isinstance(value, str):
            raise ValueError(f"{where}: expected a str for {label}, got {_tp_name(value)}")
        length = used = len(value)
        if length > node["max_len"]:
            if not node["truncate"]:
                hint = (
                    f"(raise {node['length_key']} in the model config, or set text_truncate=True)"
                    if node["length_key"]
                    else "(set text_truncate=True)"
                )
                raise ValueError(
                    f"{where}: string of length {length} is longer than "
                    f"max_length={node['max_len']} of {label} {hint}"
                )
            used = node["max_len"]
        if length < node["min_len"]:
            raise ValueError(
                f"{where}: string of length {length} is shorter than "
                f"min_length={node['min_len']} of {label}"
            )
        ids = np.empty(used, np.int64)
        for i, ch in enumerate(value[:used]):
            k = table.get(ch)
            if k is None:
                raise ValueError(
                    f"{where}: character {_cut(repr(ch))} at position {i} is not in the charset "
                    f"of {label} (allowed: {_cut(repr(node['charset']))})"
                )
            ids[i] = k
        buf[base] = used
        positions = np.arange(used, dtype=np.int64)
        if node["encoding"] == "one_hot":
            buf[base + 1 + positions * len(table) + ids] = 1.0
        else:
            buf[base + 1 + positions] = ids

    @staticmethod
    def _oneof_branch(node: dict, value: Any, where: str) -> tuple[int, Any]:
        """The (branch, value) of a OneOf observation, the branch validated."""
        label, k = node["label"], len(node["children"])
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            got = (
                f"a {_tp_name(value)} of {len(value)} items"
                if isinstance(value, (tuple, list))
                else _tp_name(value)
            )
            raise ValueError(f"{where}: expected (branch index, value) for {label}, got {got}")
        integral, index = _scalar_index(value[0], f"the branch index of {label}", where)
        if not integral and not _whole(index):
            raise ValueError(
                f"{where}: branch index {index:g} is not an integer; {label} allows branch "
                f"indices 0..{k - 1}"
            )
        if not integral or not 0 <= index < k:
            raise ValueError(
                f"{where}: branch index {_index_text(index)} is out of range for {label} "
                f"(allowed 0..{k - 1})"
            )
        return int(index), value[1]

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
                    f"got {_tp_name(v)}"
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
                    f"{where}: expected a tuple of {n} items for {node['label']}, got {_tp_name(v)}"
                )
            if len(v) != n:
                raise ValueError(f"{where}: expected {n} items for {node['label']}, got {len(v)}")
        return [tuple(v) for v in values]  # a snapshot: reading items may change a list

    @staticmethod
    def _indices(
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
        has_array = (
            per_obs and arr.dtype == object and any(isinstance(v, np.ndarray) for v in values)
        )
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
            parts = [
                ReferenceFlattener._indices([v], (1, *shape[1:]), label, where, False, ranges)
                for v in values
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
            # not integers, or whole numbers beyond int64 (2**63 is exact)
            bad = ~np.isfinite(arr) | (arr != np.floor(arr)) | (arr < -(2.0**63)) | (arr >= 2.0**63)
            if bad.any():
                pos = tuple(int(p) for p in np.argwhere(bad)[0])
                raise _index_error(float(arr[pos]), pos, label, where, ranges, batched_leaf)
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
