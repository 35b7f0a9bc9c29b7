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
``max_len`` items, zero-padded).

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

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple

from rlblocks.spaces import Repeated, Simplex, format_path

__all__ = [
    "PIXEL_OPTIONS",
    "Layout",
    "Node",
    "Slot",
    "check_supported",
    "checked_size",
    "is_atari_pixels",
    "is_atari_ram",
    "layout",
    "pixel_options",
]

ATARI_OBS_SHAPE = (210, 160, 3)
ATARI_RAM_OBS_SHAPE = (128,)

#: The model-config keys the layout reads (size and scaling of raw Atari frames), defaults.
PIXEL_OPTIONS: dict[str, Any] = {"dim": 84, "grayscale": False, "zero_mean": True}

#: Flat sizes and offsets are int64 in the native core.
MAX_SIZE = 2**63 - 1

_UNSUPPORTED = tuple(
    getattr(gym.spaces, name)
    for name in ("Text", "Graph", "Sequence", "OneOf")
    if hasattr(gym.spaces, name)
)


def is_atari_pixels(space: gym.Space) -> bool:
    """A raw Atari frame: ``uint8`` of shape ``(210, 160, 3)``."""
    return isinstance(space, Box) and space.shape == ATARI_OBS_SHAPE and space.dtype == np.uint8


def is_atari_ram(space: gym.Space) -> bool:
    """Atari RAM: ``uint8`` of shape ``(128,)``."""
    return isinstance(space, Box) and space.shape == ATARI_RAM_OBS_SHAPE and space.dtype == np.uint8


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

    @property
    def is_leaf(self) -> bool:
        return self.kind not in ("tuple", "dict", "repeated")

    @property
    def dtype(self) -> np.dtype | None:
        """The dtype a leaf's observation arrives in (``None`` for containers)."""
        return np.dtype(self.space.dtype) if self.is_leaf and self.space.dtype else None


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

    def find(self, path: tuple[Any, ...]) -> Slot:
        """The node at ``path`` (dict keys / tuple indices) and its offset in the row.

        Raises:
            KeyError: No such path (the message names the path and what exists).
        """
        node, offset = self.root, 0
        for depth, key in enumerate(path):
            if node.kind == "repeated":
                raise KeyError(
                    f"{format_path(path[:depth])} is a Repeated list: its items "
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
        ``repeated_length`` (the list's length, followed by ``max_len`` items of
        ``item_size`` floats each, then zeros; the item's own leaves follow it, with the
        first item's offsets) and ``atari_pixels`` (a raw frame through RLlib's generic
        pixel preprocessor; ``shape`` is what it writes).
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
    if node.kind == "repeated":
        yield path, offset, node
        yield from _leaves(node.children[0], (*path, 0), offset + 1)
    elif node.children:
        for key, off, child in zip(node.keys, node.offsets, node.children, strict=True):
            yield from _leaves(child, (*path, key), offset + off)
    else:
        yield path, offset, node


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
    elif node.kind == "repeated":
        entry.update(
            kind="repeated_length", size=1, max_len=node.max_len, item_size=node.children[0].size
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
    if _UNSUPPORTED and isinstance(space, _UNSUPPORTED):
        raise ValueError(
            f"{path}: rlblocks has no preprocessor for {type(space).__name__} spaces ({space}). "
            "Supported: Box, Discrete, MultiDiscrete, MultiBinary, Tuple, Dict, Repeated, Simplex; "
            "encode this observation into one of them (e.g. text as a MultiDiscrete of token ids)."
        )
    if isinstance(space, Tuple):
        for i, child in enumerate(space.spaces):
            check_supported(child, f"{path}[{i}]")
    elif isinstance(space, Dict):
        for key, child in space.spaces.items():
            check_supported(child, f"{path}[{key!r}]")
    elif isinstance(space, Repeated):
        check_supported(space.child_space, f"{path}.child_space")
    elif (
        not isinstance(space, (Box, Discrete, MultiDiscrete, MultiBinary, Simplex))
        and space.shape is None
    ):
        raise ValueError(
            f"{path}: {type(space).__name__} has no shape, so rlblocks cannot preprocess it "
            f"({space})."
        )


def pixel_options(options: Mapping[str, Any] | None) -> tuple[int, bool, bool]:
    """``(dim, grayscale, zero_mean)`` from a model config (defaults as RLlib's)."""
    opts = {**PIXEL_OPTIONS, **{k: v for k, v in (options or {}).items() if k in PIXEL_OPTIONS}}
    dim = int(opts["dim"])
    if dim < 1:
        raise ValueError(f"GenericPixelPreprocessor: dim must be >= 1, got {dim}")
    return dim, bool(opts["grayscale"]), bool(opts["zero_mean"])


def _build(space: gym.Space, options: Mapping[str, Any]) -> Node:
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
        offsets = tuple(int(o) for o in np.cumsum([0] + [c.size for c in children[:-1]]))
        size = checked_size(sum(c.size for c in children), label)
        kind = "dict" if isinstance(space, Dict) else "tuple"
        return Node(kind, space, size, (size,), children, keys, offsets)
    if isinstance(space, Repeated):
        child = _build(space.child_space, options)
        size = checked_size(1 + space.max_len * child.size, label)
        return Node(
            "repeated", space, size, (size,), (child,), (0,), (1,), max_len=int(space.max_len)
        )
    if is_atari_pixels(space):
        pixels = pixel_options(options)
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


# Each space keeps its layouts (one per pixel-option set) in its own __dict__: the cache
# lives and dies with the space, and a recycled id() can never serve another space's layout.
_CACHE_ATTR = "_rlblocks_layouts"


def layout(space: gym.Space, options: Mapping[str, Any] | None = None) -> Layout:
    """The :class:`Layout` of ``space`` (built once per space object and options).

    Args:
        space: Any supported space (Box, Discrete, MultiDiscrete, MultiBinary, Simplex,
            Tuple, Dict, Repeated, nested).
        options: The model config; only ``dim``, ``grayscale`` and ``zero_mean`` are read
            (raw Atari frames).

    Raises:
        ValueError: An unsupported space (its path named), or a size beyond int64.
    """
    options = dict(options or {})
    key = tuple(options.get(k, v) for k, v in PIXEL_OPTIONS.items())
    cache = vars(space).setdefault(_CACHE_ATTR, {}) if hasattr(space, "__dict__") else {}
    try:
        hit = cache.get(key)
    except TypeError:  # an unhashable option value: build without the cache
        hit, cache = None, {}
    if hit is None:
        check_supported(space)
        hit = cache[key] = Layout(space, _build(space, options))
    return hit
