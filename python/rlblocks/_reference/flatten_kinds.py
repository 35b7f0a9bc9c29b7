"""The numpy twin's walk of the newer space kinds (the twin of
``cpp/bindings/flatten_kinds.hpp``): Repeated lists and gymnasium Sequences (stacked forms
included), Graphs, Text and OneOf, checked in the native core's order with its messages.
``ReferenceFlattener`` (``flatten.py``) walks the rest and calls these for those kinds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from rlblocks._reference.arrays import tp_name as _tp_name
from rlblocks._reference.flatten_read import (
    _Attr,
    _box_rows,
    _check_stacked_tuple,
    _cut,
    _graph_count,
    _graph_links,
    _index_text,
    _is_stacked,
    _kept_length,
    _key,
    _scalar_index,
    _stacked_dict_values,
    _stacked_leaf_length,
    _whole,
)


class KindWalker(ABC):
    """The newer kinds' walk over a compiled layout; ``_fill`` walks any node."""

    _nodes: list[dict[str, Any]]

    @abstractmethod
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
        """Writes ``values[i]`` (all at this node) at flat offsets ``bases[i]``."""

    def _has_leaf(self, node_id: int) -> bool:
        node = self._nodes[node_id]
        return node["kind"] not in ("dict", "tuple") or any(
            self._has_leaf(c) for c in node["children"]
        )

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
