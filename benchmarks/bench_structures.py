"""Benchmark: padded Sequence and Graph batches, rlblocks against numpy and PyG.

The observations are those of ``rlblocks bench preprocessors`` (the same seeded samples,
from :mod:`rlblocks.benchmarking.preprocessor_cases`), a list of B per-env observations:

* ``Sequence(Box(2))``: ``stack=True``, an ``(n, 2)`` float32 array per env, n uniform in
  0..16, padded to ``sequence_max_len=16`` (33 floats).
* ``Sequence(Dict)``: a tuple of n ``{kind: Discrete(3), pos: Box(2)}`` items per env, n
  uniform in 0..16 (81 floats).
* ``Graph(F=8,E=4)``: a ``GraphInstance`` per env, 5..32 nodes with 8 features, about 3
  edges per node with 4 features, padded to ``graph_max_nodes=32``, ``graph_max_edges=128``
  (1026 floats).

Methods (µs per observation, each the median of ``--rounds`` round-robin rounds, so a burst
of load on a shared machine hits every method alike; ``extra`` also holds the thread-CPU
time, which leaves out the time other processes hold the core):

* ``rlblocks C++ t=1``: ``prep.transform_batch(obs)`` with ``rlblocks.set_num_threads(1)``.
* ``numpy twin (IMPL=numpy)``: the same call on rlblocks' numpy twin (what
  ``RLBLOCKS_IMPL=numpy`` runs); checked equal to the C++ output.
* ``numpy <variant>``: hand-written padding into a preallocated output, each checked equal to
  rlblocks' output before timing (the run stops on a mismatch): ``per-row slices`` (one slice
  store per block and env), ``concatenate + mask`` / ``bytes-join + mask`` (every env's items
  gathered into one array, then one boolean-mask store per block). They validate nothing.
  ``bytes-join + mask`` of ``Sequence(Dict)`` builds a tuple per item, so at B=1024 the
  cyclic garbage collector it sets off costs more the more objects the process holds.
* ``torch pad_sequence`` (``Sequence(Box(2))``): ``torch.nn.utils.rnn.pad_sequence`` of the
  arrays (``torch.from_numpy`` included); pads the items only, to the longest in the batch.
* ``PyG from_data_list``: ``torch_geometric.data.Batch.from_data_list`` of the graphs built
  beforehand as ``Data(x, edge_index, edge_attr)`` from the same numpy arrays (zero-copy
  ``torch.from_numpy``); ``PyG Data + from_data_list`` builds the ``Data`` objects inside
  the timing (what a batch of ``GraphInstance`` costs). PyG's batch is not padded: nodes
  and edges of all graphs concatenated, links offset by each graph's first node; it is
  checked to hold the same graphs as rlblocks' rows. Skipped with a note without PyG.

``ratio`` (rlblocks row) = the best alternative's time / rlblocks' time. Nothing is asserted
on timings.

Run ``python benchmarks/bench_structures.py [--quick] [--batches 64,1024]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import rlblocks
from _harness import available, emit, format_rows, skip_note
from rlblocks import _impl
from rlblocks.benchmarking import harness
from rlblocks.benchmarking.preprocessor_cases import GRAPH_OPTIONS, BenchCase, build_cases

__all__ = ["main", "methods"]

CASES = ("sequence", "graph")
Method = tuple[str, Callable[[], Any], dict[str, Any]]


def _warn(message: str) -> None:
    print(f"WARNING {message}", file=sys.stderr)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b))


def _twin(prep: Any, obs: list) -> Callable[[], np.ndarray]:
    def call() -> np.ndarray:
        _impl.use_numpy_reference(True)
        try:
            return prep.transform_batch(obs)
        finally:
            _impl.use_numpy_reference(False)

    return call


def _pad_sequence(expected: np.ndarray, obs: list, width: int) -> Method:
    """torch's padding of ``(n, width)`` arrays, checked against rlblocks' item block."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    def fn() -> Any:
        return pad_sequence([torch.from_numpy(a) for a in obs], batch_first=True)

    got = fn().numpy()
    items = expected[:, 1:].reshape(len(obs), -1, width)[:, : got.shape[1]]
    assert _same(items, got), "torch pad_sequence holds other items than rlblocks"
    return "torch pad_sequence", fn, {"note": "items only, padded to the longest in the batch"}


def _pyg(expected: np.ndarray, obs: list, node_size: int, edge_size: int) -> list[Method]:
    """PyG's batching of the same graphs, checked to hold what rlblocks' rows hold."""
    import torch
    from torch_geometric.data import Batch, Data

    def data(g: Any) -> Any:
        return Data(
            x=torch.from_numpy(g.nodes),
            edge_index=torch.from_numpy(g.edge_links.T),
            edge_attr=torch.from_numpy(g.edges),
        )

    graphs = [data(g) for g in obs]
    batch = Batch.from_data_list(graphs)

    b = len(obs)
    max_nodes, max_edges = GRAPH_OPTIONS["graph_max_nodes"], GRAPH_OPTIONS["graph_max_edges"]
    at_edges = 2 + max_nodes * node_size
    at_links = at_edges + max_edges * edge_size
    n, m = expected[:, 0].astype(np.int64), expected[:, 1].astype(np.int64)
    node_mask = np.arange(max_nodes) < n[:, None]
    edge_mask = np.arange(max_edges) < m[:, None]
    nodes = expected[:, 2:at_edges].reshape(b, max_nodes, node_size)[node_mask]
    edges = expected[:, at_edges:at_links].reshape(b, max_edges, edge_size)[edge_mask]
    links = expected[:, at_links:].reshape(b, max_edges, 2)[edge_mask]
    ptr = batch.ptr.numpy()
    local = batch.edge_index.numpy().T - np.repeat(ptr[:-1], m)[:, None]
    ok = (
        np.array_equal(np.diff(ptr), n)
        and _same(batch.x.numpy(), nodes)
        and _same(batch.edge_attr.numpy(), edges)
        and np.array_equal(local, links)
    )
    assert ok, "PyG's batch holds other graphs than rlblocks' rows"
    return [
        ("PyG from_data_list", lambda: Batch.from_data_list(graphs), {"note": "Data prebuilt"}),
        (
            "PyG Data + from_data_list",
            lambda: Batch.from_data_list([data(g) for g in obs]),
            {"note": "Data(x, edge_index, edge_attr) built from the numpy arrays in the timing"},
        ),
    ]


def methods(case: BenchCase, batch: int, pyg: bool) -> list[Method]:
    """Every method of ``case`` at ``batch``, each output checked against rlblocks' once."""
    obs = case.inputs(batch)
    prep = case.prep
    rlblocks.set_num_threads(1)
    expected = prep.transform_batch(obs)
    twin = _twin(prep, obs)
    twin_ok = _same(expected, twin())
    if not twin_ok:
        _warn(f"{case.name} B={batch}: the numpy twin differs from rlblocks' C++")
    out: list[Method] = [
        ("rlblocks C++ t=1", lambda: prep.transform_batch(obs), {"note": case.note}),
        ("numpy twin (IMPL=numpy)", twin, {"matches_rlblocks": twin_ok}),
    ]
    for variant, fn in case.variants.items():
        assert _same(expected, fn(obs)), f"{case.name} B={batch}: numpy {variant!r} != rlblocks"
        out.append((f"numpy {variant}", partial(fn, obs), {"matches_rlblocks": True}))
    if case.name.startswith("Sequence(Box") and available("torch"):
        out.append(_pad_sequence(expected, obs, 2))
    if case.key == "graph" and pyg:
        out += _pyg(expected, obs, 8, 4)
    return out


def measure(
    fn: Callable[[], Any], items: int, min_time: float, repeats: int
) -> tuple[float, float]:
    """Median wall and thread-CPU µs per item of ``fn`` (``items`` per call) over ``repeats``
    samples of about ``min_time / repeats`` seconds each.

    The CPU time (``time.thread_time``) leaves out the time other processes hold this core
    on a shared machine; every method here runs in the calling thread (one thread each).

    Examples:
        >>> wall, cpu = measure(lambda: sum(range(100)), 1, 0.001, 3)
        >>> wall > 0 and cpu >= 0
        True
    """
    fn()  # warm up (allocations, caches, lazy imports)
    calls = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time / repeats or calls >= 1 << 20:
            break
        calls *= max(2, min(100, int(min_time / repeats / max(dt, 1e-9)) + 1))
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(calls):
            fn()
        c1, w1 = time.thread_time(), time.perf_counter()
        wall.append((w1 - w0) / (calls * items) * 1e6)
        cpu.append((c1 - c0) / (calls * items) * 1e6)
    return float(np.median(wall)), float(np.median(cpu))


def run(
    keys: Sequence[str], batches: Sequence[int], min_time: float, repeats: int, rounds: int
) -> list[harness.Result]:
    """Measures every case at every batch size; the rows of all methods."""
    pyg = available("torch_geometric")
    if not pyg:
        print(skip_note("torch_geometric (PyG's Batch.from_data_list)", "torch_geometric"))
    if available("torch"):
        import torch

        torch.set_num_threads(1)
    old_threads = rlblocks.get_num_threads()
    rows: list[harness.Result] = []
    try:
        for case in build_cases(keys, max(batches)):
            for batch in batches:
                print(f"  measuring {case.name} B={batch} ...", file=sys.stderr, flush=True)
                jobs = methods(case, batch, pyg)
                rlblocks.set_num_threads(1)
                wall: dict[str, list[float]] = {name: [] for name, _, _ in jobs}
                cpu: dict[str, list[float]] = {name: [] for name, _, _ in jobs}
                for _ in range(rounds):
                    for name, fn, _ in jobs:
                        w, c = measure(fn, batch, min_time, repeats)
                        wall[name].append(w)
                        cpu[name].append(c)
                for name, _, extra in jobs:
                    us = float(np.median(wall[name]))
                    extra = dict(
                        extra,
                        cpu_us_per_item=round(float(np.median(cpu[name])), 4),
                        rounds_us_per_item=[round(t, 4) for t in wall[name]],
                    )
                    rows.append(harness.Result(case.name, name, us, 1e6 / us, batch, 1, extra))
    finally:
        rlblocks.set_num_threads(old_threads)
        _impl.use_numpy_reference(False)
    harness.add_ratios(rows)
    return rows


def pivot(rows: Sequence[harness.Result], batches: Sequence[int]) -> str:
    """One line per case and method, µs per observation at each batch size: wall time, then
    thread-CPU time (``-`` when a row has none).

    Examples:
        >>> r = [harness.Result("G", "m", 2.5, 4e5, 64), harness.Result("G", "m", 1.25, 8e5, 1024)]
        >>> print(pivot(r, [64, 1024]))
        case method   B=64 B=1024   cpu B=64 cpu B=1024
        G    m       2.500  1.250          -          -
    """
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        line = table.setdefault((r.case, r.method), {"case": r.case, "method": r.method})
        line[f"B={r.batch}"] = r.us_per_item
        line[f"cpu B={r.batch}"] = r.extra.get("cpu_us_per_item")
    case_w = max(len("case"), *(len(c) for c, _ in table))
    method_w = max(len("method"), *(len(m) for _, m in table))
    columns = [("case", "case", f"<{case_w}"), ("method", "method", f"<{method_w}")]
    columns += [(f"B={b}", f"B={b}", ">6.3f") for b in batches]
    columns += [(f"cpu B={b}", f"cpu B={b}", ">10.3f") for b in batches]
    return format_rows(list(table.values()), columns)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main(argv: Sequence[str] | None = None) -> list[harness.Result]:
    """Runs every case in this process and prints JSON lines and two tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short timings (smoke test)")
    parser.add_argument("--batches", type=_ints, default=[64, 1024], help="e.g. 64,1024")
    parser.add_argument("--cases", default=",".join(CASES), help="subset of sequence,graph")
    parser.add_argument("--min-time", type=float, default=None, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=None, help="round-robin rounds (median)")
    args = parser.parse_args(argv)
    keys = [k for k in args.cases.split(",") if k]
    for k in keys:
        if k not in CASES:
            parser.error(f"unknown case {k!r}; choose from {','.join(CASES)}")
    min_time = args.min_time if args.min_time is not None else (0.02 if args.quick else 0.1)
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 5)
    repeats = 3 if args.quick else 5
    t0 = time.perf_counter()
    load_start = os.getloadavg()[0]
    rows = run(keys, args.batches, min_time, repeats, rounds)
    for row in rows:
        emit(row)
    print(harness.format_table(rows))
    print("\n== µs per observation (median wall time; cpu: this thread's CPU time) ==")
    print(pivot(rows, args.batches))
    meta = {
        "loadavg_1min_start_end": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
        "threads": 1,
        "numpy": np.__version__,
        "rlblocks": rlblocks.__version__,
        "min_time": min_time,
        "repeats": repeats,
        "rounds": rounds,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(f"run: {json.dumps(meta)}")
    return rows


if __name__ == "__main__":
    main()
