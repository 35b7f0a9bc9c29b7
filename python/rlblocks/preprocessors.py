"""Observation preprocessors for every gymnasium space (RLlib's choice rules and layouts).

``get_preprocessor(space)`` returns a class; an instance turns one observation (or a batch)
into the flat float32 vector a model consumes. Composite spaces are compiled once into a
layout plan that the C++ core executes: it walks the Python observation, validates every
value, then writes the batch with the GIL released, split over threads.

Examples:
    >>> import gymnasium as gym
    >>> import numpy as np
    >>> space = gym.spaces.Dict(
    ...     {"pos": gym.spaces.Box(-1, 1, (2,)), "kind": gym.spaces.Discrete(3)}
    ... )
    >>> prep = get_preprocessor(space)(space)
    >>> prep.shape   # Dict keys in space order: "kind" (one-hot, 3) then "pos" (2)
    (5,)
    >>> prep.transform({"kind": 2, "pos": np.array([0.5, -0.5], np.float32)})
    array([ 0. ,  0. ,  1. ,  0.5, -0.5], dtype=float32)
    >>> prep.transform_batch([{"kind": 0, "pos": np.zeros(2)}] * 3).shape
    (3, 5)
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
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
    Tuple,
)
from gymnasium.spaces import Sequence as SequenceSpace

from rlblocks import _core, _impl
from rlblocks._reference import flatten as _ref
from rlblocks.layout import (
    Layout,
    Node,
    check_supported,
    checked_size,
    is_atari_pixels,
    is_atari_ram,
    is_string_space,
    layout,
    pixel_options,
)
from rlblocks.spaces import Repeated

__all__ = [
    "AtariRamPreprocessor",
    "DictFlatteningPreprocessor",
    "GenericPixelPreprocessor",
    "GraphPreprocessor",
    "MultiBinaryPreprocessor",
    "NoPreprocessor",
    "OneHotPreprocessor",
    "OneOfPreprocessor",
    "Preprocessor",
    "RepeatedValuesPreprocessor",
    "SequencePreprocessor",
    "TextPreprocessor",
    "TupleFlatteningPreprocessor",
    "compile_layout",
    "get_preprocessor",
]


def get_preprocessor(space: gym.Space, include_multi_binary: bool = False) -> type[Preprocessor]:
    """The preprocessor class for ``space`` (RLlib's rules, first match wins).

    Discrete/MultiDiscrete -> one-hot; uint8 (210, 160, 3) -> Atari pixels; uint8 (128,) ->
    Atari RAM; Tuple/Dict -> flattening; Repeated -> zero-padded list; MultiBinary ->
    float cast only when ``include_multi_binary``; then rlblocks' own: gymnasium Sequence ->
    zero-padded list, Graph -> padded nodes, edges and links, OneOf -> branch one-hot and
    blocks, Text (and any space of str) -> characters one-hot or ids; anything else passes
    through unchanged.

    Examples:
        >>> import gymnasium as gym
        >>> get_preprocessor(gym.spaces.Discrete(3)).__name__
        'OneHotPreprocessor'
        >>> get_preprocessor(gym.spaces.Box(-1, 1, (128,))).__name__   # float: not Atari RAM
        'NoPreprocessor'
    """
    check_supported(space)
    if isinstance(space, (Discrete, MultiDiscrete)):
        return OneHotPreprocessor
    if is_atari_pixels(space):
        return GenericPixelPreprocessor
    if is_atari_ram(space):
        return AtariRamPreprocessor
    if isinstance(space, Tuple):
        return TupleFlatteningPreprocessor
    if isinstance(space, Dict):
        return DictFlatteningPreprocessor
    if isinstance(space, Repeated):
        return RepeatedValuesPreprocessor
    if isinstance(space, MultiBinary) and include_multi_binary:
        return MultiBinaryPreprocessor
    if isinstance(space, SequenceSpace):
        return SequencePreprocessor
    if isinstance(space, Graph):
        return GraphPreprocessor
    if isinstance(space, OneOf):
        return OneOfPreprocessor
    if is_string_space(space):
        return TextPreprocessor
    return NoPreprocessor


def _check_passthrough_out(out: Any, arr: np.ndarray, name: str = "out") -> None:
    """The ``out=`` of a pass-through batch: a writeable ndarray of ``arr``'s shape whose dtype
    holds the values. The rule is numpy's ``same_kind`` casting with one restriction: a
    float out takes any real values (a narrower float rounds), an integer or bool out only
    what it holds exactly (``safe``), so 0.7 never becomes 0 and 300 never wraps."""
    if not isinstance(out, np.ndarray):
        raise ValueError(
            f"{name}: expected a writeable numpy array of shape {arr.shape}, got "
            f"{type(out).__name__}"
        )
    if out.shape != arr.shape:
        raise ValueError(f"{name}: expected shape {arr.shape}, got {out.shape}")
    if not out.flags.writeable:
        raise ValueError(f"{name}: expected a writeable array, got a read-only one")
    kind_ok = out.dtype.kind == "f" and arr.dtype.kind in "biuf"
    if not (kind_ok or np.can_cast(arr.dtype, out.dtype, casting="safe")):
        raise ValueError(
            f"{name}: dtype {out.dtype} cannot hold {arr.dtype} values without changing them "
            "(allowed: a float dtype, or an integer/bool dtype that holds every "
            f"{arr.dtype} value)"
        )


def _check_write_bounds(offset: int, size: int, array: np.ndarray) -> None:
    if isinstance(offset, (bool, np.bool_)) or not isinstance(offset, (int, np.integer)):
        raise ValueError(f"write: offset must be an int, got {offset!r}")
    if not isinstance(array, np.ndarray):
        raise ValueError(f"write: array must be a numpy array, got {type(array).__name__}")
    if offset < 0 or offset + size > np.size(array):
        raise ValueError(
            f"write: offset {offset} + size {size} exceeds the array's {np.size(array)} elements"
        )


class Preprocessor(ABC):
    """Base class: ``shape``, ``size``, ``observation_space``, ``transform``, ``write`` and
    ``transform_batch``.

    Args:
        obs_space: The environment's observation space.
        options: The model config (only the layout's keys are read: ``dim``, ``grayscale``,
            ``zero_mean`` for Atari frames, ``sequence_max_len``, ``graph_max_nodes``,
            ``text_encoding``, ... for the variable-size spaces; see
            :data:`rlblocks.layout.LAYOUT_OPTIONS`). Building a preprocessor never draws from
            the space's RNG.
    """

    def __init__(self, obs_space: gym.Space, options: Mapping[str, Any] | None = None):
        check_supported(obs_space)
        self._obs_space = obs_space
        self._options: dict[str, Any] = dict(options) if options else {}
        self.shape: tuple[int, ...] = tuple(
            int(d) for d in self._init_shape(obs_space, self._options)
        )
        self._size = checked_size(math.prod(self.shape), str(obs_space))
        self._out_space: gym.Space | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles (and ``copy.deepcopy``) as the space and options: the copy compiles its
        own plan (a native plan holds C++ state that does not pickle)."""
        return (type(self), (self._obs_space, self._options))

    @abstractmethod
    def _init_shape(self, obs_space: gym.Space, options: dict[str, Any]) -> Sequence[int]:
        """The output shape (called once by ``__init__``)."""

    @property
    def size(self) -> int:
        return self._size

    @property
    def layout(self) -> Layout:
        """Where each part of the input space lands in the flat row (:mod:`rlblocks.layout`)."""
        return layout(self._obs_space, self._options)

    @property
    def observation_space(self) -> gym.Space:
        """``Box(-1, 1, shape, float32)`` carrying ``.original_space`` (the input space) and
        ``.layout`` (what :func:`rlblocks.restore_original_dimensions` unpacks with)."""
        if self._out_space is None:
            self._out_space = self._output_box(-1.0, 1.0)
        return self._out_space

    def _output_box(self, low: float, high: float) -> Box:
        space = Box(low, high, self.shape, dtype=np.float32)
        space.original_space = self._obs_space  # type: ignore[attr-defined]
        space.layout = self.layout  # type: ignore[attr-defined]
        return space

    def check_shape(self, observation: Any) -> None:
        """Raises ValueError if ``observation`` does not fit the space (every call validates)."""
        self.transform(observation)

    @abstractmethod
    def transform(self, observation: Any) -> np.ndarray:
        """One observation -> a new float32 array of ``shape``."""

    def write(self, observation: Any, array: np.ndarray, offset: int) -> None:
        """Writes the flat transform into ``array[offset:offset + size]``."""
        array[offset : offset + self.size] = np.asarray(self.transform(observation)).ravel()

    @abstractmethod
    def transform_batch(self, obs_batch: Any, out: np.ndarray | None = None) -> np.ndarray:
        """A batch -> ``(B, size)`` float32 (``(B, *shape)`` for pass-through spaces).

        ``obs_batch`` is either a ``list`` of per-env observations or a batched nested
        structure whose leaves have a leading batch dimension (a dict of arrays, a tuple of
        arrays, an array). ``out``, if given, must be a writeable C-contiguous float32 array
        of shape ``(B, size)``; it is left untouched when the batch is invalid. Leaves may be
        views of ``out`` itself (e.g. last step's rows): they are read before anything is
        written, so the result is the same as with a separate buffer. Pass-through spaces
        take an ``out`` of shape ``(B, *shape)`` whose dtype holds the values: a float dtype,
        or an integer/bool dtype the values cast to safely (``np.can_cast(..., "safe")``).
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._obs_space}, shape={self.shape})"


# --------------------------------------------------------------------------- layout plan


def compile_layout(
    space: gym.Space, options: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The plan the C++ core and the numpy reference execute, from :func:`rlblocks.layout`.

    Returns a list of node dicts, children before parents; the last one is the root. Leaf
    kinds: ``discrete``, ``multidiscrete``, ``box`` (``map``: ``identity`` or
    ``atari_ram``), ``text`` (``max_len``, ``min_len``, ``charset``, ``encoding``,
    ``truncate``, ``length_key``) and ``callback`` (raw Atari frames, through the pixel
    preprocessor); containers: ``dict``, ``tuple``, ``repeated``, ``sequence``
    (``max_len``, ``truncate``, ``stack``), ``graph`` (``max_nodes``, ``max_edges``,
    ``node_size``, ``edge_size``; children: the node item, then the edge item if any) and
    ``oneof`` (children: the branches).
    """
    nodes: list[dict[str, Any]] = []
    _plan_node(layout(space, options).root, dict(options or {}), nodes)
    return nodes


def _plan_node(node: Node, options: dict[str, Any], nodes: list[dict[str, Any]]) -> int:
    entry: dict[str, Any] = {
        "kind": node.kind,
        "size": node.size,
        "label": str(node.space),
        "children": [_plan_node(child, options, nodes) for child in node.children],
    }
    if node.kind == "discrete":
        entry.update(n=node.n, start=node.start)
    elif node.kind == "multidiscrete":
        entry.update(
            shape=[int(d) for d in node.space.shape or ()],
            nvec=list(node.nvec),
            starts=list(node.starts),
        )
    elif node.kind == "dict":
        entry["keys"] = list(node.keys)
    elif node.kind == "repeated":
        entry["max_len"] = node.max_len
    elif node.kind == "sequence":
        entry.update(max_len=node.max_len, truncate=node.truncate, stack=node.stack)
    elif node.kind == "graph":
        entry.update(
            max_nodes=node.max_nodes,
            max_edges=node.max_edges,
            node_size=node.children[0].size,
            edge_size=node.children[1].size if len(node.children) > 1 else 0,
        )
    elif node.kind == "text":
        entry.update(
            max_len=node.max_len,
            min_len=node.min_len,
            charset="".join(node.charset),
            encoding=node.encoding,
            truncate=node.truncate,
            length_key=node.length_key,
        )
    elif node.kind == "oneof":
        pass
    elif node.kind == "pixels":
        pixel = GenericPixelPreprocessor(node.space, options)
        entry.update(
            kind="callback",
            fn=pixel._flat_transform,
            batch_fn=pixel._flat_transform_batch,
            preprocessor=pixel,
        )
    else:
        entry.update(shape=list(node.shape), map=node.value_map)
    nodes.append(entry)
    return len(nodes) - 1


class _FlatteningPreprocessor(Preprocessor):
    """A preprocessor executed through a compiled layout (C++ plan or numpy reference)."""

    def __init__(self, obs_space: gym.Space, options: Mapping[str, Any] | None = None):
        super().__init__(obs_space, options)  # compiles self._plan_nodes through _init_shape
        self._plan = _core.FlattenPlan(self._plan_nodes, len(self._plan_nodes) - 1)
        self._reference = _ref.ReferenceFlattener(self._plan_nodes)
        self._flat_shape = len(self.shape) == 1

    def _init_shape(self, obs_space: gym.Space, options: dict[str, Any]) -> Sequence[int]:
        self._plan_nodes = compile_layout(obs_space, options)
        return self._layout_shape(obs_space)

    def _layout_shape(self, obs_space: gym.Space) -> Sequence[int]:
        return (self._plan_nodes[-1]["size"],)

    def transform(self, observation: Any) -> np.ndarray:
        out = (
            self._plan.transform(observation)
            if _impl.native()
            else self._reference.transform(observation)
        )
        return out if self._flat_shape else out.reshape(self.shape)

    def write(self, observation: Any, array: np.ndarray, offset: int) -> None:
        _check_write_bounds(offset, self.size, array)  # Python ints: offset + size never wraps
        if (
            _impl.native()
            and isinstance(array, np.ndarray)
            and array.dtype == np.float32
            and array.flags.c_contiguous
            and array.ndim == 1
        ):
            self._plan.write(observation, array, int(offset))
        else:
            super().write(observation, array, offset)

    def transform_batch(self, obs_batch: Any, out: np.ndarray | None = None) -> np.ndarray:
        if isinstance(obs_batch, list):
            if _impl.native():
                return self._plan.transform_list(obs_batch, out)
            return self._reference.transform_list(obs_batch, out)
        if _impl.native():
            return self._plan.transform_batched(obs_batch, out)
        return self._reference.transform_batched(obs_batch, out)


class OneHotPreprocessor(_FlatteningPreprocessor):
    """One-hot of a Discrete (with ``start``) or of every MultiDiscrete component (row-major).

    Examples:
        >>> import gymnasium as gym
        >>> space = gym.spaces.MultiDiscrete([3, 4])
        >>> OneHotPreprocessor(space).transform([1, 3])
        array([0., 1., 0., 0., 0., 0., 1.], dtype=float32)
    """


class TupleFlatteningPreprocessor(_FlatteningPreprocessor):
    """Concatenates the children's preprocessed values, in tuple order."""


class DictFlatteningPreprocessor(_FlatteningPreprocessor):
    """Concatenates the children's preprocessed values in the space's key order.

    Observations are matched to children by key (never by position), so a plain dict, an
    OrderedDict in any order, or any Mapping gives the same result.
    """


class RepeatedValuesPreprocessor(_FlatteningPreprocessor):
    """A variable-length list: slot 0 holds the length, then the items, then zeros.

    Examples:
        >>> import gymnasium as gym
        >>> from rlblocks.spaces import Repeated
        >>> space = Repeated(gym.spaces.Discrete(2), max_len=3)
        >>> RepeatedValuesPreprocessor(space).transform([1, 0])
        array([2., 0., 1., 1., 0., 0., 0.], dtype=float32)
    """


class SequencePreprocessor(_FlatteningPreprocessor):
    """A gymnasium ``Sequence``: laid out as a Repeated of ``sequence_max_len`` items (slot 0
    the length, then the items, then zeros); a longer sequence is a ValueError, or cut to its
    first ``sequence_max_len`` items with ``sequence_truncate=True``.

    Examples:
        >>> import gymnasium as gym
        >>> space = gym.spaces.Sequence(gym.spaces.Discrete(2))
        >>> SequencePreprocessor(space, {"sequence_max_len": 3}).transform([1, 0])
        array([2., 0., 1., 1., 0., 0., 0.], dtype=float32)
    """


class GraphPreprocessor(_FlatteningPreprocessor):
    """A gymnasium ``Graph``: ``[n_nodes, n_edges, node features (graph_max_nodes rows),
    edge features (graph_max_edges rows), edge links (graph_max_edges pairs)]``, zero-padded.

    Examples:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> space = gym.spaces.Graph(gym.spaces.Box(0, 1, (1,)), None)
        >>> prep = GraphPreprocessor(space, {"graph_max_nodes": 3, "graph_max_edges": 2})
        >>> g = gym.spaces.GraphInstance(np.ones((2, 1)), None, np.array([[0, 1]]))
        >>> prep.transform(g)   # 2 nodes, 1 edge; features 1, 1, 0; links (0, 1), (0, 0)
        array([2., 1., 1., 1., 0., 0., 1., 0., 0.], dtype=float32)
    """


class TextPreprocessor(_FlatteningPreprocessor):
    """A string (gymnasium ``Text``, MiniGrid's ``MissionSpace``, any ``Space[str]``):
    ``[length, one-hot of each character over the charset]`` (``text_encoding="ids"``: the
    characters' ids instead), zero-padded to the maximum length.

    Examples:
        >>> import gymnasium as gym
        >>> space = gym.spaces.Text(3, charset="ab")
        >>> TextPreprocessor(space).transform("ba")
        array([2., 0., 1., 1., 0., 0., 0.], dtype=float32)
        >>> TextPreprocessor(space, {"text_encoding": "ids"}).transform("ba")
        array([2., 1., 0., 0.], dtype=float32)
    """


class OneOfPreprocessor(_FlatteningPreprocessor):
    """A gymnasium ``OneOf``: a one-hot of the branch, then every branch's block (the
    inactive ones zero). Observations are ``(branch index, value)``.

    Examples:
        >>> import gymnasium as gym
        >>> space = gym.spaces.OneOf((gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (1,))))
        >>> OneOfPreprocessor(space).transform((1, [0.5]))
        array([0. , 1. , 0. , 0. , 0.5], dtype=float32)
    """


class AtariRamPreprocessor(_FlatteningPreprocessor):
    """Atari RAM bytes ``uint8 (128,)`` -> ``(x - 128) / 128`` as float32."""


class MultiBinaryPreprocessor(_FlatteningPreprocessor):
    """MultiBinary -> float32 of the same shape (only with ``include_multi_binary=True``)."""

    def _layout_shape(self, obs_space: gym.Space) -> Sequence[int]:
        return tuple(obs_space.shape or ())

    @property
    def observation_space(self) -> gym.Space:
        if self._out_space is None:
            self._out_space = self._output_box(0.0, 1.0)
        return self._out_space


class NoPreprocessor(Preprocessor):
    """Pass-through (Box, MultiBinary, Simplex): ``transform`` returns the observation itself.

    As in RLlib the value keeps its shape and dtype; ``transform_batch`` stacks a batch into
    ``(B, *shape)`` in the space's dtype, and ``write`` copies the raveled value. An ``out=``
    (or ``write`` array) whose dtype would change the values (0.7 into int8, 300 into uint8)
    is refused with ValueError: floats take any real values, integers only a safe cast.
    """

    def _init_shape(self, obs_space: gym.Space, options: dict[str, Any]) -> Sequence[int]:
        return tuple(obs_space.shape or ())

    @property
    def observation_space(self) -> gym.Space:
        return self._obs_space

    def _check(self, observation: Any, batch: bool, where: str = "obs") -> np.ndarray:
        try:
            arr = np.asarray(observation)
        except (ValueError, TypeError) as err:
            raise ValueError(f"{where}: expected numbers for {self._obs_space} ({err})") from None
        want = self.shape if not batch else (arr.shape[:1] + self.shape if arr.ndim else None)
        if arr.shape != want:
            what = "a batch (B, *shape) with shape" if batch else "shape"
            raise ValueError(
                f"{where}: expected {what} {self.shape if not batch else ('B', *self.shape)} "
                f"for {self._obs_space}, got {arr.shape}"
            )
        if arr.dtype.kind not in "biuf":  # real numbers: no complex, strings or objects
            raise ValueError(
                f"{where}: expected real numbers for {self._obs_space}, got dtype {arr.dtype}"
            )
        return arr

    def transform(self, observation: Any) -> Any:
        self._check(observation, batch=False)
        return observation

    def write(self, observation: Any, array: np.ndarray, offset: int) -> None:
        arr = self._check(observation, batch=False)
        _check_write_bounds(offset, self.size, array)
        flat = arr.ravel()
        _check_passthrough_out(array[offset : offset + self.size], flat, "write: array")
        array[offset : offset + self.size] = flat

    def transform_batch(self, obs_batch: Any, out: np.ndarray | None = None) -> np.ndarray:
        dtype = self._obs_space.dtype or np.float32
        if isinstance(obs_batch, list):
            items = [self._check(o, False, f"obs[{i}]") for i, o in enumerate(obs_batch)]
            obs_batch = np.stack(items) if items else np.zeros((0, *self.shape), dtype)
        arr = self._check(obs_batch, batch=True)
        if out is None:
            return np.asarray(arr, dtype=dtype)
        _check_passthrough_out(out, arr)
        # copyto reads a view of `out` correctly (numpy buffers overlapping operands)
        np.copyto(out, arr, casting="same_kind")
        return out


class GenericPixelPreprocessor(Preprocessor):
    """RLlib's "rllib" Atari pipeline for uint8 (210, 160, 3) frames.

    Crop rows 25:-25, INTER_AREA resize to ``dim`` (through 84 first when ``dim < 84``),
    optional grayscale as the channel mean, then ``(x - 128) / 128`` (``zero_mean``) or
    ``x / 255``. Unlike RLlib, every combination gives correct float32 values (no uint8
    wrap-around, no in-place error).
    """

    def _init_shape(self, obs_space: gym.Space, options: dict[str, Any]) -> Sequence[int]:
        self._dim, self._grayscale, self._zero_mean = pixel_options(options)
        return (self._dim, self._dim, 1 if self._grayscale else 3)

    def _pixels(self, frames: Any) -> np.ndarray:
        from rlblocks import image

        return image.generic_pixel(frames, self._dim, self._grayscale, self._zero_mean)

    def transform(self, observation: Any) -> np.ndarray:
        return self._pixels(observation)

    def transform_batch(self, obs_batch: Any, out: np.ndarray | None = None) -> np.ndarray:
        result = self._pixels(np.stack(obs_batch) if isinstance(obs_batch, list) else obs_batch)
        if out is None:
            return result
        ok = (
            isinstance(out, np.ndarray)
            and out.shape == result.shape
            and out.dtype == np.float32
            and out.flags.writeable
        )
        if not ok:
            got = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
            raise ValueError(
                f"out: expected a writeable float32 array of shape {result.shape}, got {got}"
            )
        out[...] = result
        return out

    def _flat_transform(self, observation: Any) -> np.ndarray:
        return np.ascontiguousarray(self.transform(observation), dtype=np.float32).reshape(-1)

    def _flat_transform_batch(self, obs_batch: Any) -> np.ndarray:
        result = self._pixels(obs_batch)
        return np.ascontiguousarray(result, dtype=np.float32).reshape(len(result), -1)
