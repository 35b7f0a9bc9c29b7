"""The cases of ``rlblocks bench preprocessors``: spaces, sampled observations, input forms.

Each :class:`BenchCase` is one space fed in one input form (a ``list`` of per-env
observations or a batched structure of stacked arrays), with its rlblocks preprocessor and
the hand-written numpy variants (:mod:`rlblocks.benchmarking.numpy_baselines`) it is
compared against. Observations are sampled from seeded spaces, so every run times the same
inputs.

>>> case = build_cases(["discrete"], 4)[1]
>>> case.name, case.form, case.inputs(2).shape
('Discrete(100) batched', 'batched', (2,))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box, Dict, Discrete, Graph, GraphInstance, MultiDiscrete, Tuple
from gymnasium.spaces import Sequence as SequenceSpace

import rlblocks
from rlblocks.benchmarking.numpy_baselines import (
    JOIN,
    NUMPY,
    dict_batched_concat,
    dict_batched_scatter,
    dict_list_columns,
    dict_list_one_pass,
    dict_list_rows,
    discrete_variants,
    graph_variants,
    multidiscrete_variants,
    repeated_index,
    repeated_one_pass,
    repeated_rows,
    sequence_box_variants,
    sequence_dict_variants,
)
from rlblocks.preprocessors import Preprocessor
from rlblocks.spaces import Repeated

__all__ = [
    "CASE_KEYS",
    "BenchCase",
    "GRAPH_OPTIONS",
    "SEQUENCE_OPTIONS",
    "build_cases",
    "graph_space",
    "nested_dict_space",
    "repeated_space",
    "sample_graphs",
    "sample_sequences",
    "sequence_box_space",
    "sequence_dict_space",
    "stack_structure",
]

F32 = np.float32
CASE_KEYS = ("discrete", "multidiscrete", "dict", "repeated", "sequence", "graph")
REPEATED_NOTE = "input: list of per-env lists (this is also the batched form)"
SEQUENCE_NOTE = "input: list of per-env sequences (this is also the batched form)"
GRAPH_NOTE = "input: list of per-env GraphInstance (this is also the batched form)"
#: The model config of the Sequence and Graph cases (the layout's padding).
SEQUENCE_OPTIONS: dict[str, Any] = {"sequence_max_len": 16}
GRAPH_OPTIONS: dict[str, Any] = {"graph_max_nodes": 32, "graph_max_edges": 128}
Variants = dict[str, Callable[[Any], np.ndarray]]


@dataclass
class BenchCase:
    """One space in one input form, with its hand-written numpy variants."""

    key: str  # one of CASE_KEYS
    name: str  # the ``case`` column
    form: str  # "list" or "batched"
    space: gym.Space
    prep: Preprocessor
    observations: list  # per-env observations (the largest batch; slices give smaller ones)
    variants: Variants
    gymnasium: bool  # gymnasium.spaces.flatten is defined for the space
    bound: bool  # report the memory-bandwidth bound at B=1024
    note: str = ""
    _batched: dict[int, Any] = field(default_factory=dict)

    def inputs(self, batch: int) -> Any:
        """The input for ``batch`` environments in this case's form."""
        obs = self.observations[:batch]
        if self.form == "list":
            return obs
        if batch not in self._batched:
            self._batched[batch] = stack_structure(self.space, obs)
        return self._batched[batch]


def stack_structure(space: gym.Space, obs: list) -> Any:
    """Per-env observations -> a nested structure of arrays with leading dimension B.

    Dict -> dict, Tuple -> tuple, Repeated / Sequence / Graph -> the list of per-env
    observations (they have no rectangular batched form), anything else -> one stacked
    array in the space's dtype.
    """
    if isinstance(space, Dict):
        return {k: stack_structure(s, [o[k] for o in obs]) for k, s in space.spaces.items()}
    if isinstance(space, Tuple):
        return tuple(stack_structure(s, [o[i] for o in obs]) for i, s in enumerate(space.spaces))
    if isinstance(space, (Repeated, SequenceSpace, Graph)):
        return list(obs)
    return np.stack([np.asarray(o, dtype=space.dtype) for o in obs])


def nested_dict_space() -> Dict:
    """The issue's nested Dict (6 leaves, 55 floats)."""
    return Dict(
        {
            "a": Discrete(5),
            "b": Box(-1.0, 1.0, (16,), F32),
            "c": Dict({"d": MultiDiscrete([3, 4, 5]), "e": Box(-1.0, 1.0, (3, 4), F32)}),
            "f": Tuple((Discrete(2), Box(-1.0, 1.0, (8,), F32))),
        }
    )


def repeated_space() -> Repeated:
    """The issue's Repeated(Dict(pos Box(3), kind Discrete(5)), max_len=32)."""
    return Repeated(Dict({"pos": Box(-1.0, 1.0, (3,), F32), "kind": Discrete(5)}), max_len=32)


def sequence_box_space() -> SequenceSpace:
    """``Sequence(Box(-1, 1, (2,)), stack=True)``: an observation is an ``(n, 2)`` array."""
    return SequenceSpace(Box(-1.0, 1.0, (2,), F32), stack=True)


def sequence_dict_space() -> SequenceSpace:
    """``Sequence(Dict(kind=Discrete(3), pos=Box(-1, 1, (2,))))``: a tuple of item dicts."""
    return SequenceSpace(Dict({"kind": Discrete(3), "pos": Box(-1.0, 1.0, (2,), F32)}))


def graph_space() -> Graph:
    """``Graph(Box(-1, 1, (8,)), Box(-1, 1, (4,)))``: node features F=8, edge features E=4."""
    return Graph(Box(-1.0, 1.0, (8,), F32), Box(-1.0, 1.0, (4,), F32))


def sample_sequences(space: SequenceSpace, count: int, max_len: int) -> list:
    """Sequences with lengths uniform in ``0..max_len`` from a seeded Generator: an
    ``(n, *shape)`` array each when ``space.stack``, else a tuple of ``n`` items.

    >>> [len(s) for s in sample_sequences(sequence_box_space(), 3, 16)]
    [14, 10, 8]
    """
    rng = np.random.default_rng(0)
    child = space.feature_space
    child.seed(0)
    lengths = rng.integers(0, max_len + 1, size=count)
    if space.stack:
        assert isinstance(child, Box)
        return [
            rng.uniform(child.low, child.high, (int(n), *child.shape)).astype(child.dtype)
            for n in lengths
        ]
    return [tuple(child.sample() for _ in range(int(n))) for n in lengths]


def sample_graphs(
    space: Graph, count: int, min_nodes: int = 5, max_nodes: int = 32, max_edges: int = 128
) -> list[GraphInstance]:
    """Graphs with ``min_nodes..max_nodes`` nodes (uniform) and about 3 edges per node
    (uniform in ``2N..4N``, at most ``max_edges``), links uniform over the nodes, features
    uniform in the Box bounds, from a seeded Generator.

    >>> g = sample_graphs(graph_space(), 1)[0]
    >>> g.nodes.shape, g.edges.shape, g.edge_links.shape, g.edge_links.dtype
    ((28, 8), (92, 4), (92, 2), dtype('int64'))
    """
    rng = np.random.default_rng(0)
    node_space, edge_space = space.node_space, space.edge_space
    assert isinstance(node_space, Box) and isinstance(edge_space, Box)
    graphs = []
    for _ in range(count):
        n = int(rng.integers(min_nodes, max_nodes + 1))
        m = min(int(rng.integers(2 * n, 4 * n + 1)), max_edges)
        nodes = rng.uniform(node_space.low, node_space.high, (n, *node_space.shape))
        edges = rng.uniform(edge_space.low, edge_space.high, (m, *edge_space.shape))
        links = rng.integers(0, n, (m, 2), dtype=np.int64)
        graphs.append(GraphInstance(nodes.astype(F32), edges.astype(F32), links))
    return graphs


def _sample(space: gym.Space, count: int) -> list:
    space.seed(0)
    return [space.sample() for _ in range(count)]


def _sample_repeated(space: Repeated, count: int) -> list:
    """Per-env lists with lengths uniform in 0..max_len from a seeded Generator."""
    rng = np.random.default_rng(0)
    child = space.child_space
    child.seed(0)
    lengths = rng.integers(0, space.max_len + 1, size=count)
    return [[child.sample() for _ in range(int(n))] for n in lengths]


def build_cases(keys: Sequence[str], max_batch: int) -> list[BenchCase]:
    """The benchmark cases for ``keys`` (subset of CASE_KEYS), both input forms each."""
    cases: list[BenchCase] = []
    for key in keys:
        if key == "discrete":
            space: gym.Space = Discrete(100)
            obs = _sample(space, max_batch)
            for form in ("list", "batched"):
                cases.append(
                    BenchCase(
                        key,
                        f"Discrete(100) {form}",
                        form,
                        space,
                        _prep(space),
                        obs,
                        discrete_variants(100, form),
                        form == "list",
                        form == "batched",
                    )
                )
        elif key == "multidiscrete":
            space = MultiDiscrete([10] * 16)
            obs = _sample(space, max_batch)
            for form in ("list", "batched"):
                cases.append(
                    BenchCase(
                        key,
                        f"MultiDiscrete([10]*16) {form}",
                        form,
                        space,
                        _prep(space),
                        obs,
                        multidiscrete_variants(16, 10, form),
                        form == "list",
                        form == "batched",
                    )
                )
        elif key == "dict":
            space = nested_dict_space()
            obs = _sample(space, max_batch)
            cases.append(
                BenchCase(
                    key,
                    "nested Dict list",
                    "list",
                    space,
                    _prep(space),
                    obs,
                    {
                        "columns, concatenate": dict_list_columns(NUMPY),
                        "columns, bytes-join": dict_list_columns(JOIN),
                        "one pass, bytes-join": dict_list_one_pass,
                        "per-row": dict_list_rows,
                    },
                    True,
                    False,
                )
            )
            cases.append(
                BenchCase(
                    key,
                    "nested Dict batched",
                    "batched",
                    space,
                    _prep(space),
                    obs,
                    {"zeros+put": dict_batched_scatter, "eye+concatenate": dict_batched_concat},
                    False,
                    True,
                )
            )
        elif key == "repeated":
            space = repeated_space()
            obs = _sample_repeated(space, max_batch)
            cases.append(
                BenchCase(
                    key,
                    "Repeated(Dict) len~U(0,32) list",
                    "list",
                    space,
                    _prep(space),
                    obs,
                    {
                        "index-arith, concatenate": repeated_index(NUMPY),
                        "index-arith, bytes-join": repeated_index(JOIN),
                        "index-arith, one pass, bytes-join": repeated_one_pass,
                        "per-row": repeated_rows,
                    },
                    False,
                    False,
                    note=REPEATED_NOTE,
                )
            )
        elif key == "sequence":
            max_len = SEQUENCE_OPTIONS["sequence_max_len"]
            box = sequence_box_space()
            cases.append(
                BenchCase(
                    key,
                    f"Sequence(Box(2)) len~U(0,{max_len}) list",
                    "list",
                    box,
                    _prep(box, SEQUENCE_OPTIONS),
                    sample_sequences(box, max_batch, max_len),
                    sequence_box_variants(max_len, 2),
                    False,
                    False,
                    note=SEQUENCE_NOTE + "; stack=True: an (n, 2) array each",
                )
            )
            items = sequence_dict_space()
            cases.append(
                BenchCase(
                    key,
                    f"Sequence(Dict) len~U(0,{max_len}) list",
                    "list",
                    items,
                    _prep(items, SEQUENCE_OPTIONS),
                    sample_sequences(items, max_batch, max_len),
                    sequence_dict_variants(max_len, 3, 2),
                    False,
                    False,
                    note=SEQUENCE_NOTE + "; a tuple of {kind, pos} dicts each",
                )
            )
        elif key == "graph":
            space = graph_space()
            max_nodes, max_edges = (
                GRAPH_OPTIONS["graph_max_nodes"],
                GRAPH_OPTIONS["graph_max_edges"],
            )
            cases.append(
                BenchCase(
                    key,
                    f"Graph(F=8,E=4) N~U(5,{max_nodes}) list",
                    "list",
                    space,
                    _prep(space, GRAPH_OPTIONS),
                    sample_graphs(space, max_batch, 5, max_nodes, max_edges),
                    graph_variants(max_nodes, max_edges, 8, 4),
                    False,
                    False,
                    note=GRAPH_NOTE + "; about 3 edges per node",
                )
            )
        else:
            raise ValueError(f"unknown case {key!r}; choose from {CASE_KEYS}")
    return cases


def _prep(space: gym.Space, options: dict[str, Any] | None = None) -> Preprocessor:
    return rlblocks.get_preprocessor(space)(space, options)
