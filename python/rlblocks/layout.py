"""One description of where every part of an observation lands in the flat float32 row.

``layout(space)`` walks a (nested) space once and returns a :class:`Layout`: a tree of
:class:`Node` objects with each node's kind, size, offset and the shape it unpacks to. The
C++ flattening plan and its numpy twin (:mod:`rlblocks.preprocessors`),
:func:`rlblocks.restore_original_dimensions`, the export sidecar, the action-mask columns
(:mod:`rlblocks.masks`) and the RLlib connectors all read it, so a new space kind is one
new entry here. Torch-free.

Kinds: ``discrete`` (one-hot of ``n`` slots, value ``v`` sets slot ``v - start``),
``multidiscrete`` (one one-hot block per component, row-major), ``box`` (copied as
float32; Atari RAM bytes mapped ``(x - 128) / 128``), ``pixels`` (a raw Atari frame
through RLlib's generic pixel pipeline), ``tuple`` and ``dict`` (children back to back,
Dict keys in the space's own order: gymnasium sorts the keys of a plain ``dict`` and keeps
an ``OrderedDict``'s), ``repeated`` (slot 0 holds the length, then
``max_len`` items, zero-padded), ``sequence`` (a gymnasium ``Sequence``, laid out as a
Repeated of ``sequence_max_len`` items), ``graph`` (``[n_nodes, n_edges, node features,
edge features, edge links]``, zero-padded to ``graph_max_nodes`` / ``graph_max_edges``),
``text`` (``[length, one block per character position]``: a one-hot over the charset, or
the character's id) and ``oneof`` (the branch's one-hot, then every branch's block, the
inactive ones zero). The sizes of the variable parts come from the model config
(:data:`LAYOUT_OPTIONS`).

Examples:
    >>> import gymnasium as gym
    >>> from rlblocks.spaces import Repeated
    >>> space = gym.spaces.Dict({
    ...     "kind": gym.spaces.Discrete(3),
    ...     "items": Repeated(gym.spaces.Box(-1, 1, (2,)), max_len=4),
    ... })
    >>> lay = layout(space)
    >>> lay.size                       # 1 length + 4 items of 2, then 3 one-hot slots
    12
    >>> [(path, offset, node.kind) for path, offset, node in lay.leaves()]
    [(('items',), 0, 'repeated'), (('items', 0), 1, 'box'), (('kind',), 9, 'discrete')]
    >>> lay.find(("kind",)).columns, lay.holds("repeated")
    (slice(9, 12, None), True)
    >>> layout(space) is lay           # built once per space
    True
"""

from __future__ import annotations

import functools
import math
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import (
    Box,
    Dict,
    Discrete,
    Graph,
    MultiBinary,
    MultiDiscrete,
    OneOf,
    Sequence,
    Text,
    Tuple,
)

from rlblocks.config import LAYOUT_DEFAULTS, PRINTABLE_ASCII
from rlblocks.config_fields import as_int
from rlblocks.spaces import Repeated, Simplex, format_path

__all__ = [
    "LAYOUT_OPTIONS",
    "PIXEL_OPTIONS",
    "Layout",
    "Node",
    "Slot",
    "check_supported",
    "checked_size",
    "is_atari_pixels",
    "is_atari_ram",
    "is_string_space",
    "layout",
    "pixel_options",
]

ATARI_OBS_SHAPE = (210, 160, 3)
ATARI_RAM_OBS_SHAPE = (128,)

#: The model-config keys that size and scale raw Atari frames, and their defaults.
PIXEL_OPTIONS: dict[str, Any] = {"dim": 84, "grayscale": False, "zero_mean": True}

#: Every model-config key the layout reads, and its default: the Atari frame options, and
#: the bounds and encodings of Sequence, Graph and string leaves.
LAYOUT_OPTIONS: dict[str, Any] = {**PIXEL_OPTIONS, **LAYOUT_DEFAULTS}

#: Flat sizes and offsets are int64 in the native core.
MAX_SIZE = 2**63 - 1

#: Node kinds whose children have a place of their own in the row.
CONTAINER_KINDS = ("tuple", "dict", "repeated", "sequence", "oneof")
#: Node kinds holding a variable-length list of items (length slot, then the items).
LIST_KINDS = ("repeated", "sequence")


def is_atari_pixels(space: gym.Space) -> bool:
    """A raw Atari frame: ``uint8`` of shape ``(210, 160, 3)``."""
    return isinstance(space, Box) and space.shape == ATARI_OBS_SHAPE and space.dtype == np.uint8


def is_atari_ram(space: gym.Space) -> bool:
    """Atari RAM: ``uint8`` of shape ``(128,)``."""
    return isinstance(space, Box) and space.shape == ATARI_RAM_OBS_SHAPE and space.dtype == np.uint8


def is_string_space(space: gym.Space) -> bool:
    """A space whose values are ``str``: gymnasium ``Text``, or any ``Space[str]`` subclass
    (MiniGrid's ``MissionSpace``).

    Examples:
        >>> is_string_space(gym.spaces.Text(5)), is_string_space(gym.spaces.Discrete(2))
        (True, False)
    """
    if isinstance(space, Text):
        return True
    for cls in type(space).__mro__:
        for base in getattr(cls, "__orig_bases__", ()):
            origin = typing.get_origin(base)
            if isinstance(origin, type) and issubclass(origin, gym.Space):
                if typing.get_args(base) == (str,):
                    return True
    return False


@dataclass(frozen=True, eq=False)
class Node:
    """One space of the tree and the floats it writes.

    ``size``: floats per item; ``shape``: what the slice unpacks to (a leaf's preprocessed
    shape, ``(size,)`` for containers); ``offsets``: each child's offset inside this node
    (a Repeated's child starts at 1, the first item). Kind-specific fields are zero/empty
    where they do not apply.
    """

    kind: str
    space: gym.Space
    size: int
    shape: tuple[int, ...]
    children: tuple[Node, ...] = ()
    keys: tuple[Any, ...] = ()
    offsets: tuple[int, ...] = ()
    n: int = 0
    start: int = 0
    nvec: tuple[int, ...] = ()
    starts: tuple[int, ...] = ()
    max_len: int = 0
    value_map: str = "identity"
    pixel_options: tuple[int, bool, bool] = (84, False, True)  # dim, grayscale, zero_mean
    truncate: bool = False  # sequence / text: keep the first max_len items instead of failing
    stack: bool = False  # sequence: gymnasium's stack=True (items stacked along a leading dim)
    max_nodes: int = 0  # graph
    max_edges: int = 0  # graph
    min_len: int = 0  # text
    charset: tuple[str, ...] = ()  # text: character i has id i
    encoding: str = ""  # text: "one_hot" or "ids"
    length_key: str = ""  # sequence / text: the model-config key that sets max_len, if any

    @property
    def is_leaf(self) -> bool:
        return self.kind not in CONTAINER_KINDS

    @property
    def dtype(self) -> np.dtype | None:
        """The dtype a leaf's observation arrives in (``None`` for containers, graphs and
        text)."""
        if not self.is_leaf or self.kind in ("graph", "text") or not self.space.dtype:
            return None
        return np.dtype(self.space.dtype)

    @property
    def item(self) -> Node:
        """The item of a repeated / sequence node (its only child)."""
        return self.children[0]

    @property
    def graph_offsets(self) -> tuple[int, int, int]:
        """A graph node's ``(nodes, edges, links)`` block offsets inside the node."""
        nodes = 2
        edges = nodes + self.max_nodes * self.children[0].size
        edge_size = self.children[1].size if len(self.children) > 1 else 0
        return nodes, edges, edges + self.max_edges * edge_size


class Layout:
    """The layout of one space (see the module docstring); build it with :func:`layout`."""

    def __init__(self, space: gym.Space, root: Node):
        self.space = space
        self.root = root

    @property
    def size(self) -> int:
        """Floats in one flat row."""
        return self.root.size

    def leaves(self) -> Iterator[tuple[tuple[Any, ...], int, Node]]:
        """``(path, offset, node)`` per leaf in row order; a Repeated yields itself (its
        length slot) and then its item's leaves at the first item's offsets (path index 0).
        """
        yield from _leaves(self.root, (), 0)

    def nodes(self) -> Iterator[Node]:
        """Every node, parents before children."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def holds(self, kind: str) -> bool:
        """Whether any node of the tree has ``kind``."""
        return any(node.kind == kind for node in self.nodes())

    @functools.cached_property
    def structure_columns(self) -> np.ndarray:
        """The columns that describe the row's structure rather than hold values, ascending
        (int64, read-only): every list's length (Repeated, Sequence, Text, at every item
        position of an enclosing list), a graph's node and edge counts and its edge links,
        and a Text's characters (their ids, or their one-hot blocks: the text encoder looks
        each character up in its embedding, and a normalised one-hot row would look up a
        blend of characters that drifts with the running statistics).

        Models and :func:`rlblocks.restore_original_dimensions` read these as counts and
        indices, so an observation filter passes them through unchanged
        (:class:`rlblocks.filters.MeanStdFilter`'s ``passthrough``).

        Examples:
            >>> import gymnasium as gym
            >>> from rlblocks.spaces import Repeated
            >>> inner = Repeated(gym.spaces.Box(-1, 1, (1,)), max_len=2)  # 3 floats
            >>> space = gym.spaces.Tuple((gym.spaces.Discrete(2), Repeated(inner, max_len=2)))
            >>> layout(space).structure_columns.tolist()  # one-hot 0-1, length 2, 2 items
            [2, 3, 6]
        """
        columns = _structure_columns(self.root)
        columns.setflags(write=False)
        return columns

    def find(self, path: tuple[Any, ...]) -> Slot:
        """The node at ``path`` (dict keys / tuple indices) and its offset in the row.

        Raises:
            KeyError: No such path (the message names the path and what exists).
        """
        node, offset = self.root, 0
        for depth, key in enumerate(path):
            if node.kind in LIST_KINDS:
                raise KeyError(
                    f"{format_path(path[:depth])} is a variable-length list: its items "
                    "have no fixed place in the row"
                )
            if key not in node.keys:
                raise KeyError(
                    f"{format_path(path[: depth + 1])}: no such entry (have {list(node.keys)})"
                )
            i = node.keys.index(key)
            node, offset = node.children[i], offset + node.offsets[i]
        return Slot(offset, node)

    def describe(self) -> list[dict[str, Any]]:
        """The JSON-able form (the export sidecar's ``layout``): one entry per leaf with
        ``path`` (``obs["a"][0]``), ``offset``, ``size``, ``dtype`` (the leaf's input dtype)
        and ``kind``:

        ``one_hot`` (``n``, ``start``: value ``v`` sets slot ``v - start``),
        ``multi_one_hot`` (``nvec``, ``starts``: one block per component, row-major),
        ``box`` (``shape``, copied as float32; Atari RAM with ``map`` ``(x - 128) / 128``),
        ``repeated_length`` / ``sequence_length`` (the list's length, followed by
        ``max_len`` items of ``item_size`` floats each, then zeros; the item's own leaves
        follow it, with the first item's offsets), ``atari_pixels`` (a raw frame through
        RLlib's generic pixel preprocessor; ``shape`` is what it writes), ``graph``
        (``max_nodes``, ``max_edges``, ``node`` / ``edge``: the item's own entry, offset 0,
        or None; ``nodes_offset``, ``edges_offset``, ``links_offset``: absolute), ``text``
        (``max_len``, ``min_len``, ``charset``, ``encoding``) and ``one_of_branch`` (the
        ``branches``-slot one-hot of the branch; the branches' leaves follow it).
        """
        return [_describe(path, offset, node) for path, offset, node in self.leaves()]

    def __repr__(self) -> str:
        return f"Layout({self.space}, size={self.size})"


@dataclass(frozen=True)
class Slot:
    """A node and its offset in the flat row (:meth:`Layout.find`)."""

    offset: int
    node: Node

    @property
    def columns(self) -> slice:
        return slice(self.offset, self.offset + self.node.size)


def _leaves(
    node: Node, path: tuple[Any, ...], offset: int
) -> Iterator[tuple[tuple[Any, ...], int, Node]]:
    if node.is_leaf:
        yield path, offset, node
        return
    if node.kind in ("repeated", "sequence", "oneof"):
        yield path, offset, node  # the length slot / the branch one-hot
    for key, off, child in zip(node.keys, node.offsets, node.children, strict=True):
        yield from _leaves(child, (*path, key), offset + off)


def _structure_columns(node: Node) -> np.ndarray:
    """:attr:`Layout.structure_columns` of ``node``'s block, relative to its start."""
    none = np.empty(0, np.int64)
    if node.kind in LIST_KINDS:  # [length, item 0, item 1, ...]
        inner = _structure_columns(node.item)
        starts = 1 + node.item.size * np.arange(node.max_len, dtype=np.int64)
        return np.concatenate([[0], (starts[:, None] + inner[None, :]).ravel()]).astype(np.int64)
    if node.kind == "text":  # [length, per position: a one-hot block or the character's id]
        return np.arange(node.size, dtype=np.int64)
    if node.kind == "graph":  # [n_nodes, n_edges, nodes, edges, links]
        nodes, edges, links = node.graph_offsets
        parts = [np.array([0, 1], np.int64)]
        blocks = ((nodes, node.max_nodes), (edges, node.max_edges))[: len(node.children)]
        for (at, count), item in zip(blocks, node.children, strict=True):
            inner = _structure_columns(item)
            starts = at + item.size * np.arange(count, dtype=np.int64)
            parts.append((starts[:, None] + inner[None, :]).ravel())
        parts.append(np.arange(links, links + 2 * node.max_edges, dtype=np.int64))
        return np.concatenate(parts).astype(np.int64)
    parts = [
        off + _structure_columns(c) for off, c in zip(node.offsets, node.children, strict=True)
    ]
    return np.concatenate([none, *parts]).astype(np.int64)


def _describe(path: tuple[Any, ...], offset: int, node: Node) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": format_path(path), "offset": offset, "size": node.size}
    if node.dtype is not None:
        entry["dtype"] = str(node.dtype)
    if node.kind == "discrete":
        entry.update(kind="one_hot", n=node.n, start=node.start)
    elif node.kind == "multidiscrete":
        entry.update(
            kind="multi_one_hot",
            shape=list(node.space.shape or ()),
            nvec=list(node.nvec),
            starts=list(node.starts),
        )
    elif node.kind in LIST_KINDS:
        entry.update(
            kind=f"{node.kind}_length", size=1, max_len=node.max_len, item_size=node.item.size
        )
    elif node.kind == "oneof":
        entry.update(kind="one_of_branch", size=len(node.children), branches=len(node.children))
    elif node.kind == "graph":
        nodes, edges, links = node.graph_offsets
        items = [_describe((), 0, child) for child in node.children]
        for item in items:
            del item["path"], item["offset"]
        entry.update(
            kind="graph",
            max_nodes=node.max_nodes,
            max_edges=node.max_edges,
            node=items[0],
            edge=items[1] if len(items) > 1 else None,
            nodes_offset=offset + nodes,
            edges_offset=offset + edges,
            links_offset=offset + links,
        )
    elif node.kind == "text":
        entry.update(
            kind="text",
            max_len=node.max_len,
            min_len=node.min_len,
            charset="".join(node.charset),
            encoding=node.encoding,
        )
    elif node.kind == "pixels":
        entry.update(kind="atari_pixels", shape=list(node.shape))
    else:
        entry.update(kind="box", shape=list(node.shape))
        if node.value_map == "atari_ram":
            entry["map"] = "(x - 128) / 128"
    return entry


def checked_size(size: int, label: str) -> int:
    """A flat size as an exact Python int, refused when it does not fit int64 (the native
    core's sizes and offsets; numpy's int64 sums and products would wrap silently)."""
    if size > MAX_SIZE:
        raise ValueError(f"{label}: flat size {size} does not fit in int64 (at most {MAX_SIZE})")
    return int(size)


def check_supported(space: gym.Space, path: str = "space") -> None:
    """Raises a clear ValueError for a space no layout can describe (anywhere in the tree)."""
    if isinstance(space, (Tuple, OneOf)):
        for i, child in enumerate(space.spaces):
            check_supported(child, f"{path}[{i}]")
    elif isinstance(space, Dict):
        for key, child in space.spaces.items():
            check_supported(child, f"{path}[{key!r}]")
    elif isinstance(space, Repeated):
        check_supported(space.child_space, f"{path}.child_space")
    elif isinstance(space, Sequence):
        check_supported(space.feature_space, f"{path}.feature_space")
    elif isinstance(space, Graph):
        for part in ("node_space", "edge_space"):
            child = getattr(space, part)
            if child is not None and not isinstance(child, (Box, Discrete)):
                raise ValueError(f"{path}.{part}: a Graph's {part} must be Box or Discrete")
    elif is_string_space(space):
        return
    elif (
        not isinstance(space, (Box, Discrete, MultiDiscrete, MultiBinary, Simplex))
        and space.shape is None
    ):
        raise ValueError(
            f"{path}: {type(space).__name__} has no shape, so rlblocks cannot preprocess it "
            f"({space}). Supported: Box, Discrete, MultiDiscrete, MultiBinary, Simplex, Tuple, "
            "Dict, Repeated, Sequence, Graph, OneOf, Text and other spaces of str values."
        )


def pixel_options(options: Mapping[str, Any] | None) -> tuple[int, bool, bool]:
    """``(dim, grayscale, zero_mean)`` from a model config (defaults as RLlib's)."""
    opts = {**PIXEL_OPTIONS, **{k: v for k, v in (options or {}).items() if k in PIXEL_OPTIONS}}
    dim = int(opts["dim"])
    if dim < 1:
        raise ValueError(f"GenericPixelPreprocessor: dim must be >= 1, got {dim}")
    return dim, bool(opts["grayscale"]), bool(opts["zero_mean"])


@dataclass(frozen=True)
class _Options:
    """The layout's model-config keys, validated (see :data:`LAYOUT_OPTIONS`)."""

    pixels: tuple[int, bool, bool]
    sequence_max_len: int
    sequence_truncate: bool
    graph_max_nodes: int
    graph_max_edges: int
    text_max_length: int
    text_charset: tuple[str, ...]
    text_encoding: str
    text_truncate: bool

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> _Options:
        opts = {**LAYOUT_OPTIONS, **{k: v for k, v in options.items() if k in LAYOUT_OPTIONS}}

        def count(key: str) -> int:
            return as_int(opts[key], key)

        charset = opts["text_charset"]
        if charset is None:
            charset = PRINTABLE_ASCII
        if not isinstance(charset, str) or not charset or len(set(charset)) != len(charset):
            raise ValueError(
                "text_charset must be a non-empty str of distinct characters (its order gives "
                f"the ids) or None for printable ASCII, got {charset!r}"
            )
        _check_characters(charset, "text_charset")
        if opts["text_encoding"] not in ("one_hot", "ids"):
            raise ValueError(
                f"text_encoding must be 'one_hot' or 'ids', got {opts['text_encoding']!r}"
            )
        return cls(
            pixel_options(opts),
            count("sequence_max_len"),
            bool(opts["sequence_truncate"]),
            count("graph_max_nodes"),
            count("graph_max_edges"),
            count("text_max_length"),
            tuple(charset),
            str(opts["text_encoding"]),
            bool(opts["text_truncate"]),
        )


def _printable(text: str) -> str:
    """``text`` with lone surrogates written as escapes (it can then be encoded)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _check_characters(charset: Any, where: str) -> None:
    """ValueError naming ``where`` and the character if ``charset`` holds a lone surrogate
    (U+D800..U+DFFF: half of a UTF-16 pair, not a character; no str holding it can be
    encoded, so no observation could carry it)."""
    for c in charset:
        if 0xD800 <= ord(c) <= 0xDFFF:
            raise ValueError(
                f"{where}: the charset holds the lone surrogate {c!r} (U+{ord(c):04X}), which "
                "is not a character (it cannot be encoded as UTF-8); remove it from the charset"
            )


def _build(space: gym.Space, options: _Options) -> Node:
    label = str(space)
    if isinstance(space, Discrete):
        n = int(space.n)
        return Node("discrete", space, n, (n,), n=n, start=int(space.start))
    if isinstance(space, MultiDiscrete):
        nvec = np.asarray(space.nvec, dtype=np.int64)
        starts = np.broadcast_to(np.asarray(space.start, dtype=np.int64), nvec.shape)
        size = checked_size(sum(int(v) for v in nvec.ravel()), label)
        return Node(
            "multidiscrete",
            space,
            size,
            (size,),
            nvec=tuple(int(v) for v in nvec.ravel()),
            starts=tuple(int(v) for v in starts.ravel()),
        )
    if isinstance(space, (Tuple, Dict)):
        keys: tuple[Any, ...] = (
            tuple(space.spaces) if isinstance(space, Dict) else tuple(range(len(space.spaces)))
        )
        children = tuple(_build(space.spaces[k], options) for k in keys)
        offsets = _offsets(0, children)
        size = checked_size(sum(c.size for c in children), label)
        kind = "dict" if isinstance(space, Dict) else "tuple"
        return Node(kind, space, size, (size,), children, keys, offsets)
    if isinstance(space, OneOf):
        branches = tuple(_build(child, options) for child in space.spaces)
        k = len(branches)
        size = checked_size(k + sum(c.size for c in branches), label)
        return Node("oneof", space, size, (size,), branches, tuple(range(k)), _offsets(k, branches))
    if isinstance(space, Repeated):
        item = _build(space.child_space, options)
        size = checked_size(1 + space.max_len * item.size, label)
        return Node(
            "repeated", space, size, (size,), (item,), (0,), (1,), max_len=int(space.max_len)
        )
    if isinstance(space, Sequence):
        item = _build(space.feature_space, options)
        max_len = options.sequence_max_len
        size = checked_size(1 + max_len * item.size, label)
        return Node(
            "sequence",
            space,
            size,
            (size,),
            (item,),
            (0,),
            (1,),
            max_len=max_len,
            truncate=options.sequence_truncate,
            stack=bool(space.stack),
            length_key="sequence_max_len",
        )
    if isinstance(space, Graph):
        parts = [space.node_space] + ([space.edge_space] if space.edge_space is not None else [])
        items = tuple(_build(part, options) for part in parts)
        max_nodes, max_edges = options.graph_max_nodes, options.graph_max_edges
        edge_size = items[1].size if len(items) > 1 else 0
        size = checked_size(2 + max_nodes * items[0].size + max_edges * (edge_size + 2), label)
        return Node(
            "graph",
            space,
            size,
            (size,),
            items,
            ("nodes", "edges")[: len(items)],
            max_nodes=max_nodes,
            max_edges=max_edges,
        )
    if is_string_space(space):
        if isinstance(space, Text):
            charset = tuple(space.character_list)
            _check_characters(charset, _printable(label))
            max_len, min_len, key = int(space.max_length), int(space.min_length), ""
        else:
            charset, max_len, min_len = options.text_charset, options.text_max_length, 0
            key = "text_max_length"
        per_position = len(charset) if options.text_encoding == "one_hot" else 1
        size = checked_size(1 + max_len * per_position, label)
        return Node(
            "text",
            space,
            size,
            (size,),
            max_len=max_len,
            min_len=min_len,
            charset=charset,
            encoding=options.text_encoding,
            truncate=options.text_truncate,
            length_key=key,
        )
    if is_atari_pixels(space):
        pixels = options.pixels
        frame = (pixels[0], pixels[0], 1 if pixels[1] else 3)
        return Node("pixels", space, math.prod(frame), frame, pixel_options=pixels)
    if space.shape is None:
        raise ValueError(f"cannot flatten {space}: it has no shape")
    shape = tuple(int(d) for d in space.shape)
    return Node(
        "box",
        space,
        checked_size(math.prod(shape), label),
        shape,
        value_map="atari_ram" if is_atari_ram(space) else "identity",
    )


def _offsets(first: int, children: tuple[Node, ...]) -> tuple[int, ...]:
    """Each child's offset when the children follow each other from ``first``."""
    return tuple(int(o) for o in np.cumsum([first] + [c.size for c in children[:-1]]))


# Each space keeps its layouts (one per option set) in its own __dict__: the cache lives
# and dies with the space, and a recycled id() can never serve another space's layout.
_CACHE_ATTR = "_rlblocks_layouts"


def layout(space: gym.Space, options: Mapping[str, Any] | None = None) -> Layout:
    """The :class:`Layout` of ``space`` (built once per space object and options).

    Args:
        space: Any supported space (Box, Discrete, MultiDiscrete, MultiBinary, Simplex,
            Tuple, Dict, Repeated, gymnasium Sequence, Graph, OneOf, Text and other spaces
            of str values, nested).
        options: The model config; only the :data:`LAYOUT_OPTIONS` keys are read.

    Raises:
        ValueError: An unsupported space (its path named), a bad option value, or a size
            beyond int64.
    """
    parsed = _Options.parse(dict(options or {}))
    cache = vars(space).setdefault(_CACHE_ATTR, {}) if hasattr(space, "__dict__") else {}
    hit = cache.get(parsed)
    if hit is None:
        check_supported(space)
        hit = cache[parsed] = Layout(space, _build(space, parsed))
    return hit
