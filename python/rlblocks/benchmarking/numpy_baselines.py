"""Hand-written numpy baselines for :mod:`rlblocks.benchmarking.preprocessors`.

For each benchmark space and input form, the vectorised numpy a careful user would write
(several variants each: scatter into ``np.zeros`` vs ``np.take`` of ``np.eye`` rows,
gathering per-env leaves with ``np.concatenate`` / ``np.fromiter`` vs ``b"".join`` of
their buffers, column-wise vs row-wise); the benchmark times them all and reports the
fastest. They hard-code the benchmark spaces' layouts.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

F32 = np.float32
Variants = dict[str, Callable[[Any], np.ndarray]]

# ------------------------------------------------------------------ small numpy helpers

_ARANGE: dict[int, np.ndarray] = {}


def _arange(n: int) -> np.ndarray:
    """A cached read-only ``np.arange(n)`` (row indices for fancy-indexed one-hot stores)."""
    ar = _ARANGE.get(n)
    if ar is None:
        ar = np.arange(n, dtype=np.int64)
        ar.flags.writeable = False
        _ARANGE[n] = ar
    return ar


def _rows(arrays: list[np.ndarray], width: int) -> np.ndarray:
    """Stacks equally shaped per-env arrays into ``(B, width)``: ``np.concatenate`` for
    larger lists (the faster numpy call), ``np.array`` for a handful (less overhead)."""
    if len(arrays) >= 8:
        return np.concatenate(arrays).reshape(len(arrays), width)
    return np.array(arrays).reshape(len(arrays), width)


def _ints(values: Any, n: int) -> np.ndarray:
    """Python or numpy integer scalars -> int64 array of length ``n``."""
    return np.fromiter(values, np.int64, n)


class Gather:
    """How per-env leaves become one batch array (the hand-written variants use both).

    ``numpy``: ``np.concatenate``/``np.array`` for arrays, ``np.fromiter`` for scalars.
    ``bytes-join``: ``np.frombuffer(b"".join(leaves))``: every leaf is a C-contiguous numpy
    array or numpy scalar of the space's dtype (what gymnasium samples are), so joining
    their buffers is a gather at ~10-40 ns per leaf, 4-13x cheaper than ``np.concatenate``.
    Each variant is checked against rlblocks' output, so a leaf of another dtype would fail
    loudly rather than be misread.
    """

    def __init__(self, how: str):
        if how not in ("numpy", "bytes-join"):
            raise ValueError(f"unknown gather {how!r}")
        self.how = how

    def rows(self, arrays: Any, dtype: Any, width: int) -> np.ndarray:
        """Per-env arrays (an iterable) -> ``(B, width)``."""
        if self.how == "bytes-join":
            return np.frombuffer(b"".join(arrays), dtype).reshape(-1, width)
        return _rows(list(arrays), width)

    def ints(self, values: Any, n: int) -> np.ndarray:
        """Per-env integer scalars (numpy int64 for the joined variant) -> int64 ``(n,)``."""
        if self.how == "bytes-join":
            return np.frombuffer(b"".join(values), np.int64)
        return _ints(values, n)


NUMPY, JOIN = Gather("numpy"), Gather("bytes-join")


# ------------------------------------------------------------------ hand-written numpy


def discrete_variants(n: int, form: str) -> Variants:
    """One-hot of Discrete(n): scatter into zeros, gather rows of eye, or per-row stores."""
    eye = np.eye(n, dtype=F32)

    def scatter(gather: Gather) -> Callable[[Any], np.ndarray]:
        def fn(obs: Any) -> np.ndarray:
            i = gather.ints(obs, len(obs)) if form == "list" else obs
            out = np.zeros((len(i), n), F32)
            out[_arange(len(i)), i] = 1.0
            return out

        return fn

    def eye_take(gather: Gather) -> Callable[[Any], np.ndarray]:
        def fn(obs: Any) -> np.ndarray:
            return np.take(eye, gather.ints(obs, len(obs)) if form == "list" else obs, axis=0)

        return fn

    if form != "list":
        return {"zeros+scatter": scatter(NUMPY), "eye-take": eye_take(NUMPY)}

    def rows(obs: Any) -> np.ndarray:
        out = np.zeros((len(obs), n), F32)
        for r, v in enumerate(obs):
            out[r, v] = 1.0
        return out

    return {
        "zeros+scatter, fromiter": scatter(NUMPY),
        "eye-take, fromiter": eye_take(NUMPY),
        "zeros+scatter, bytes-join": scatter(JOIN),
        "eye-take, bytes-join": eye_take(JOIN),
        "per-row": rows,
    }


def multidiscrete_variants(k: int, n: int, form: str) -> Variants:
    """``k`` one-hots of ``n`` (``MultiDiscrete([n]*k)``)."""
    width = k * n
    offsets = np.arange(k, dtype=np.int64) * n
    eye = np.eye(n, dtype=F32)

    def scatter(gather: Gather) -> Callable[[Any], np.ndarray]:
        def fn(obs: Any) -> np.ndarray:
            i = gather.rows(obs, np.int64, k) if form == "list" else obs
            b = len(i)
            out = np.zeros((b, width), F32)
            out[_arange(b)[:, None], i + offsets] = 1.0
            return out

        return fn

    def flat_put(gather: Gather) -> Callable[[Any], np.ndarray]:
        def fn(obs: Any) -> np.ndarray:
            i = gather.rows(obs, np.int64, k) if form == "list" else obs
            b = len(i)
            out = np.zeros((b, width), F32)
            flat = i + offsets
            flat += (_arange(b) * width)[:, None]
            out.put(flat, 1.0)
            return out

        return fn

    def eye_take(gather: Gather) -> Callable[[Any], np.ndarray]:
        def fn(obs: Any) -> np.ndarray:
            i = gather.rows(obs, np.int64, k) if form == "list" else obs
            return np.take(eye, i, axis=0).reshape(len(i), width)

        return fn

    if form != "list":
        return {
            "zeros+scatter": scatter(NUMPY),
            "zeros+flat-put": flat_put(NUMPY),
            "eye-take": eye_take(NUMPY),
        }
    return {
        "zeros+flat-put, concatenate": flat_put(NUMPY),
        "eye-take, concatenate": eye_take(NUMPY),
        "zeros+flat-put, bytes-join": flat_put(JOIN),
        "eye-take, bytes-join": eye_take(JOIN),
    }


# nested Dict layout (keys in space order a, b, c{d, e}, f(0, 1)):
# a 0:5 | b 5:21 | c.d 21:33 (21, 24, 28) | c.e 33:45 | f[0] 45:47 | f[1] 47:55
_DICT_SIZE = 55
_D_OFF = np.array([21, 24, 28], dtype=np.int64)
_get_a, _get_b, _get_c, _get_f = (itemgetter(k) for k in "abcf")
_get_d, _get_e = itemgetter("d"), itemgetter("e")
_get_0, _get_1 = itemgetter(0), itemgetter(1)


def dict_list_columns(gather: Gather) -> Callable[[list], np.ndarray]:
    """List of nested dicts: gather each leaf over the batch into one column block; the three
    one-hot leaves (5 indices per row) go in with a single flat store."""

    def fn(obs: list) -> np.ndarray:
        b = len(obs)
        out = np.zeros((b, _DICT_SIZE), F32)
        cs = list(map(_get_c, obs))
        fs = list(map(_get_f, obs))
        hot = np.empty((b, 5), np.int64)
        hot[:, 0] = gather.ints(map(_get_a, obs), b)
        np.add(gather.rows(map(_get_d, cs), np.int64, 3), _D_OFF, out=hot[:, 1:4])
        hot[:, 4] = gather.ints(map(_get_0, fs), b)
        hot[:, 4] += 45
        hot += (_arange(b) * _DICT_SIZE)[:, None]
        out.put(hot, 1.0)
        out[:, 5:21] = gather.rows(map(_get_b, obs), F32, 16)
        out[:, 33:45] = gather.rows(map(_get_e, cs), F32, 12)
        out[:, 47:55] = gather.rows(map(_get_1, fs), F32, 8)
        return out

    return fn


def dict_list_one_pass(obs: list) -> np.ndarray:
    """List of nested dicts: one comprehension pulls all six leaves of every env, ``zip``
    transposes them into columns, and each column is gathered with ``b"".join``."""
    b = len(obs)
    leaves = [
        (o["a"], o["b"], c["d"], c["e"], f[0], f[1]) for o in obs for c, f in ((o["c"], o["f"]),)
    ]
    a, bb, d, e, f0, f1 = map(b"".join, zip(*leaves, strict=True))
    out = np.zeros((b, _DICT_SIZE), F32)
    hot = np.empty((b, 5), np.int64)
    hot[:, 0] = np.frombuffer(a, np.int64)
    np.add(np.frombuffer(d, np.int64).reshape(b, 3), _D_OFF, out=hot[:, 1:4])
    np.add(np.frombuffer(f0, np.int64), 45, out=hot[:, 4])
    hot += (_arange(b) * _DICT_SIZE)[:, None]
    out.put(hot, 1.0)
    out[:, 5:21] = np.frombuffer(bb, F32).reshape(b, 16)
    out[:, 33:45] = np.frombuffer(e, F32).reshape(b, 12)
    out[:, 47:55] = np.frombuffer(f1, F32).reshape(b, 8)
    return out


def dict_list_rows(obs: list) -> np.ndarray:
    """List of nested dicts, one row at a time (fewest numpy calls for tiny batches)."""
    out = np.zeros((len(obs), _DICT_SIZE), F32)
    for row, o in zip(out, obs, strict=True):
        c, f = o["c"], o["f"]
        row[o["a"]] = 1.0
        row[5:21] = o["b"]
        row[_D_OFF + c["d"]] = 1.0
        row[33:45] = c["e"].reshape(-1)
        row[45 + f[0]] = 1.0
        row[47:55] = f[1]
    return out


def dict_batched_scatter(obs: dict) -> np.ndarray:
    """Dict of (B, ...) arrays: column copies plus one flat store for the five one-hots."""
    a, c, f = obs["a"], obs["c"], obs["f"]
    b = len(a)
    out = np.zeros((b, _DICT_SIZE), F32)
    out[:, 5:21] = obs["b"]
    out[:, 33:45] = c["e"].reshape(b, 12)
    out[:, 47:55] = f[1]
    hot = np.empty((b, 5), np.int64)
    hot[:, 0] = a
    np.add(c["d"], _D_OFF, out=hot[:, 1:4])
    np.add(f[0], 45, out=hot[:, 4])
    hot += (_arange(b) * _DICT_SIZE)[:, None]
    out.put(hot, 1.0)
    return out


_EYES = {n: np.eye(n, dtype=F32) for n in (2, 3, 4, 5)}


def dict_batched_concat(obs: dict) -> np.ndarray:
    """Dict of (B, ...) arrays: one-hots gathered from ``np.eye`` rows, then one concatenate."""
    c, f = obs["c"], obs["f"]
    d = c["d"]
    b = len(d)
    return np.concatenate(
        [
            _EYES[5][obs["a"]],
            obs["b"],
            _EYES[3][d[:, 0]],
            _EYES[4][d[:, 1]],
            _EYES[5][d[:, 2]],
            c["e"].reshape(b, 12),
            _EYES[2][f[0]],
            f[1],
        ],
        axis=1,
    )


# Repeated(Dict(kind Discrete(5), pos Box(3)), 32): row = [len, item0 (kind one-hot 5, pos 3), ...]
_REP_MAX, _REP_ITEM = 32, 8
_REP_SIZE = 1 + _REP_MAX * _REP_ITEM
_REP_POS = np.arange(5, 8, dtype=np.int64)
_get_kind, _get_pos = itemgetter("kind"), itemgetter("pos")


def repeated_index(gather: Gather) -> Callable[[list], np.ndarray]:
    """Per-env lists flattened into one item list; each item's flat offset by repeat/cumsum
    index arithmetic, then one store for the kinds and one for the positions."""

    def fn(obs: list) -> np.ndarray:
        b = len(obs)
        lengths = _ints(map(len, obs), b)
        out = np.zeros((b, _REP_SIZE), F32)
        out[:, 0] = lengths
        items = list(chain.from_iterable(obs))
        n = len(items)
        if n:
            starts = np.cumsum(lengths) - lengths
            base = np.repeat(_arange(b) * _REP_SIZE + 1 - starts * _REP_ITEM, lengths)
            base += _arange(n) * _REP_ITEM
            flat = out.reshape(-1)
            flat[base + gather.ints(map(_get_kind, items), n)] = 1.0
            flat[base[:, None] + _REP_POS] = gather.rows(map(_get_pos, items), F32, 3)
        return out

    return fn


def repeated_one_pass(obs: list) -> np.ndarray:
    """As ``repeated_index``, with both leaves of every item pulled in one comprehension
    and gathered with ``b"".join``."""
    b = len(obs)
    lengths = _ints(map(len, obs), b)
    out = np.zeros((b, _REP_SIZE), F32)
    out[:, 0] = lengths
    pairs = [(it["kind"], it["pos"]) for items in obs for it in items]
    n = len(pairs)
    if n:
        kinds, pos = map(b"".join, zip(*pairs, strict=True))
        starts = np.cumsum(lengths) - lengths
        base = np.repeat(_arange(b) * _REP_SIZE + 1 - starts * _REP_ITEM, lengths)
        base += _arange(n) * _REP_ITEM
        flat = out.reshape(-1)
        flat[base + np.frombuffer(kinds, np.int64)] = 1.0
        flat[base[:, None] + _REP_POS] = np.frombuffer(pos, F32).reshape(n, 3)
    return out


def repeated_rows(obs: list) -> np.ndarray:
    """Per-env lists, one env at a time (fewest numpy calls for tiny batches)."""
    out = np.zeros((len(obs), _REP_SIZE), F32)
    for row, items in zip(out, obs, strict=True):
        n = len(items)
        row[0] = n
        if n:
            block = row[1 : 1 + n * _REP_ITEM].reshape(n, _REP_ITEM)
            block[_arange(n), JOIN.ints(map(_get_kind, items), n)] = 1.0
            block[:, 5:8] = JOIN.rows(map(_get_pos, items), F32, 3)
    return out


# ------------------------------------------------------------------ padded structures
# A gymnasium Sequence or Graph arrives one observation per env (a list is its only batched
# form) and is padded into a preallocated output. Two ways of writing that by hand:
# "per-row slices" stores each env's arrays into its row with one slice assignment per block
# (the loop a user writes first; fewest numpy calls for small batches), "concatenate + mask"
# concatenates every env's items and stores each block with one boolean-mask assignment
# (``mask[env, slot] = slot < length``: row-major mask order is the concatenation order).
# Neither validates its input (lengths, links); rlblocks does.


def _lengths(arrays: Any, n: int) -> np.ndarray:
    return np.fromiter(map(len, arrays), np.int64, n)


def _items(join: bool, arrays: Any, dtype: Any, width: int) -> np.ndarray:
    """Every env's ``(n_i, width)`` item array stacked into ``(sum n_i, width)``:
    ``np.concatenate``, or ``b"".join`` of their buffers (C-contiguous arrays of ``dtype``)."""
    if join:
        return np.frombuffer(b"".join(arrays), dtype).reshape(-1, width)
    return np.concatenate(arrays).reshape(-1, width)


def _slots(lengths: np.ndarray, width: int) -> np.ndarray:
    """The ``(B, width)`` mask of the slots below each env's length."""
    return _arange(width) < lengths[:, None]


def sequence_box_variants(max_len: int, width: int) -> Variants:
    """``Sequence(Box(width,), stack=True)``: each observation an ``(n, width)`` float32
    array; row = ``[n, item_0, ..., item_{max_len-1}]``, unused items zero."""
    size = 1 + max_len * width

    def rows(obs: list) -> np.ndarray:
        out = np.zeros((len(obs), size), F32)
        for row, items in zip(out, obs, strict=True):
            row[0] = len(items)
            row[1 : 1 + items.size] = items.reshape(-1)
        return out

    def masked(join: bool) -> Callable[[list], np.ndarray]:
        def fn(obs: list) -> np.ndarray:
            b = len(obs)
            out = np.zeros((b, size), F32)
            lengths = _lengths(obs, b)
            out[:, 0] = lengths
            block = out[:, 1:].reshape(b, max_len, width)  # a view: only the last axis splits
            block[_slots(lengths, max_len)] = _items(join, obs, F32, width)
            return out

        return fn

    return {
        "per-row slices": rows,
        "concatenate + mask": masked(False),
        "bytes-join + mask": masked(True),
    }


def sequence_dict_variants(max_len: int, kinds: int, width: int) -> Variants:
    """``Sequence(Dict(kind=Discrete(kinds), pos=Box(width,)))``: each observation a tuple of
    item dicts (gymnasium sorts the keys: kind, then pos); item = ``[one-hot kind, pos]``."""
    item = kinds + width
    size = 1 + max_len * item

    def rows(obs: list) -> np.ndarray:
        out = np.zeros((len(obs), size), F32)
        for row, items in zip(out, obs, strict=True):
            n = len(items)
            row[0] = n
            if n:
                block = row[1 : 1 + n * item].reshape(n, item)
                block[_arange(n), JOIN.ints(map(_get_kind, items), n)] = 1.0
                block[:, kinds:] = JOIN.rows(map(_get_pos, items), F32, width)
        return out

    def masked(obs: list) -> np.ndarray:
        b = len(obs)
        out = np.zeros((b, size), F32)
        lengths = _lengths(obs, b)
        out[:, 0] = lengths
        pairs = [(it["kind"], it["pos"]) for items in obs for it in items]
        if pairs:
            kind, pos = map(b"".join, zip(*pairs, strict=True))
            env, slot = np.nonzero(_slots(lengths, max_len))
            block = out[:, 1:].reshape(b, max_len, item)
            block[env, slot, np.frombuffer(kind, np.int64)] = 1.0
            block[env, slot, kinds:] = np.frombuffer(pos, F32).reshape(-1, width)
        return out

    return {"per-row slices": rows, "bytes-join + mask": masked}


def graph_variants(max_nodes: int, max_edges: int, node_size: int, edge_size: int) -> Variants:
    """``Graph(Box(node_size,), Box(edge_size,))``: each observation a ``GraphInstance``
    (float32 nodes ``(N, node_size)``, float32 edges ``(M, edge_size)``, int64 edge_links
    ``(M, 2)``); row = ``[N, M, nodes, edges, links]``, each block zero-padded."""
    at_edges = 2 + max_nodes * node_size
    at_links = at_edges + max_edges * edge_size
    size = at_links + 2 * max_edges

    def rows(obs: list) -> np.ndarray:
        out = np.zeros((len(obs), size), F32)
        for row, (nodes, edges, links) in zip(out, obs, strict=True):
            row[0] = len(nodes)
            row[1] = len(links)
            row[2 : 2 + nodes.size] = nodes.reshape(-1)
            row[at_edges : at_edges + edges.size] = edges.reshape(-1)
            row[at_links : at_links + links.size] = links.reshape(-1)
        return out

    def masked(join: bool) -> Callable[[list], np.ndarray]:
        def fn(obs: list) -> np.ndarray:
            b = len(obs)
            nodes, edges, links = zip(*obs, strict=True)
            n, m = _lengths(nodes, b), _lengths(links, b)
            out = np.zeros((b, size), F32)
            out[:, 0] = n
            out[:, 1] = m
            node_slots, edge_slots = _slots(n, max_nodes), _slots(m, max_edges)
            blocks = (
                (2, max_nodes, node_size, node_slots, nodes, F32),
                (at_edges, max_edges, edge_size, edge_slots, edges, F32),
                (at_links, max_edges, 2, edge_slots, links, np.int64),
            )
            for at, slots, width, mask, arrays, dtype in blocks:
                view = out[:, at : at + slots * width].reshape(b, slots, width)
                view[mask] = _items(join, arrays, dtype, width)
            return out

        return fn

    return {
        "per-row slices": rows,
        "concatenate + mask": masked(False),
        "bytes-join + mask": masked(True),
    }
