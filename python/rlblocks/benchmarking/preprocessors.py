"""Benchmark: observation preprocessors, rlblocks C++ against numpy and gymnasium.

Cases (defined in :mod:`rlblocks.benchmarking.preprocessor_cases`; every method measured in
this process, this run; times are µs per observation):

* ``Discrete(100)``: one-hot of 100.
* ``MultiDiscrete([10]*16)``: 16 one-hots of 10, concatenated (160 floats).
* ``nested Dict``: ``{"a": Discrete(5), "b": Box(16,), "c": Dict({"d": MultiDiscrete([3,4,5]),
  "e": Box(3,4)}), "f": Tuple(Discrete(2), Box(8,))}`` (6 leaves, 55 floats).
* ``Repeated(Dict(pos Box(3), kind Discrete(5)), max_len=32)``, list lengths uniform in
  0..32 (mean 16), 257 floats (slot 0 holds the length).
* ``Sequence(Box(2))`` (``stack=True``, an ``(n, 2)`` array per env) and ``Sequence(Dict(kind
  Discrete(3), pos Box(2)))`` (a tuple of item dicts), lengths uniform in 0..16, padded to
  ``sequence_max_len=16`` (33 and 81 floats).
* ``Graph(Box(8), Box(4))``: 5..32 nodes, about 3 edges per node, padded to
  ``graph_max_nodes=32`` / ``graph_max_edges=128`` (1026 floats); a ``GraphInstance`` per env.
  PyG's ``Batch.from_data_list`` on the same graphs: ``benchmarks/bench_structures.py``.

Each space is fed as a ``list`` of per-env observations and as a batched structure (a
dict/tuple of stacked arrays with leading dimension B; for Repeated, Sequence and Graph the
batched form *is* the list of per-env observations, so they have only the list case), at
B = 1, 64, 1024.

Methods:

* ``rlblocks t=1`` / ``rlblocks t=2``: ``prep.transform_batch(obs)`` after
  ``rlblocks.set_num_threads(t)``; at B=1 of the list cases also ``rlblocks transform``
  (``prep.transform(obs)``, one observation).
* ``numpy reference``: the same preprocessor with ``rlblocks._impl.use_numpy_reference(True)``
  (the general, layout-driven vectorised numpy twin); ``numpy reference transform`` at B=1.
* ``numpy hand-written``: the best vectorised numpy written for that space and input form.
  Several variants are timed (scatter into ``np.zeros`` vs ``np.take`` of ``np.eye`` rows;
  gathering per-env leaves with ``np.concatenate``/``np.fromiter`` vs ``b"".join`` of their
  buffers, which is 4-13x cheaper per leaf; column-wise vs row-wise for tiny batches) and
  the fastest is reported, every variant's time in ``extra``. Sequence and Graph: padding
  into a preallocated output with per-env slice stores, or every env's items gathered and
  stored with one boolean mask per block. Each variant must equal rlblocks' output exactly
  (asserted once, before timing).

All methods of a case are measured round-robin (``--rounds``, default 5) and each reports
the median of its rounds: the machines are shared, and a burst of load then hits every
method alike.
* ``gymnasium flatten loop``: ``np.stack([flatten(space, o) for o in obs]).astype(float32)``
  (list cases; gymnasium has no Repeated, and flattens a Sequence or Graph to no fixed size).
* ``memory-bandwidth bound`` (batched cases at B=1024): (bytes in + bytes out per item) /
  the copy bandwidth measured in this run (``np.copyto`` of 256 MiB, one thread, bytes read
  + written / time, the fastest of 7 copies). Its ``extra`` holds rlblocks' time / bound.

``ratio`` (rlblocks rows) = best alternative's time / rlblocks' time for the same case and B
(the bound row is not an alternative). A summary of the issue's targets is printed at the
end; nothing is asserted.

Run ``rlblocks bench preprocessors [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

import rlblocks
from rlblocks import _impl
from rlblocks.benchmarking.harness import (
    Result,
    add_ratios,
    emit_json,
    format_table,
    measure,
)
from rlblocks.benchmarking.preprocessor_cases import CASE_KEYS, BenchCase, build_cases

__all__ = ["main", "run"]

BOUND_METHOD = "memory-bandwidth bound"
BOUND_NOTE = (
    "DRAM copy bandwidth; at B=1024 input+output are < 1 MiB and stay in cache "
    "between calls, so a kernel can run below this bound"
)
NUMPY_METHODS = ("numpy reference", "numpy reference transform", "numpy hand-written")

# ------------------------------------------------------------------ measuring


def _with_reference(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` run with the numpy reference switched on (and switched back off after)."""

    def call() -> Any:
        _impl.use_numpy_reference(True)
        try:
            return fn()
        finally:
            _impl.use_numpy_reference(False)

    return call


def _gym_flatten_loop(space: gym.Space, obs: list) -> np.ndarray:
    flat: list[Any] = [gym.spaces.flatten(space, o) for o in obs]
    return np.stack(flat).astype(np.float32)


def _input_bytes(obj: Any) -> int:
    """Bytes of every array/scalar leaf of a (batched) observation structure."""
    if isinstance(obj, dict):
        return sum(_input_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_input_bytes(v) for v in obj)
    return int(np.asarray(obj).nbytes)


def measure_bandwidth(copies: int = 7, mib: int = 256) -> tuple[float, Result]:
    """Single-thread copy bandwidth in bytes/s: ``np.copyto`` of ``mib`` MiB, bytes read +
    written / time.

    The row reports the median copy; the bound uses the fastest one, since other processes
    on a shared machine can only slow a copy down (both are in ``extra``).
    """
    src = np.ones(mib << 20, np.uint8)
    dst = np.zeros_like(src)
    np.copyto(dst, src)  # fault the pages in
    times = []
    for _ in range(copies):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    moved = 2 * src.nbytes
    median = float(np.median(times))
    best = moved / min(times)
    res = Result(
        "copy bandwidth (np.copyto, 1 thr)",
        f"np.copyto {mib} MiB",
        median * 1e6,
        1.0 / median,
        1,
        1,
        {
            "GB_per_s_median": round(moved / median / 1e9, 3),
            "GB_per_s_best": round(best / 1e9, 3),
            "bytes_read_plus_written": moved,
            "copies": copies,
        },
    )
    return best, res


def _warn(message: str) -> None:
    print(f"WARNING {message}", file=sys.stderr)


def _check(ref: np.ndarray, got: np.ndarray) -> bool:
    return bool(got.shape == ref.shape and got.dtype == ref.dtype and np.array_equal(got, ref))


@dataclass
class _Job:
    """One method of one case: what to call, on how many items, with how many threads."""

    method: str
    fn: Callable[[], Any]
    items: int
    threads: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    rounds: list[Result] = field(default_factory=list)


def run_case(
    case: BenchCase,
    batch: int,
    threads: Sequence[int],
    min_time: float,
    repeats: int,
    rounds: int = 1,
) -> list[Result]:
    """Every method of ``case`` at ``batch``, in the same place and time.

    The methods are measured round-robin ``rounds`` times (each a ``harness.measure`` of
    ``repeats`` samples over ``min_time`` seconds) and each reports the median of its rounds,
    so a burst of load from other processes hits all methods alike rather than one.
    """
    prep, obs = case.prep, case.inputs(batch)
    name = case.name
    single = case.observations[0]
    note = {"note": case.note} if case.note else {}

    rlblocks.set_num_threads(1)
    expected = prep.transform_batch(obs)
    jobs = [
        _Job(f"rlblocks t={t}", lambda: prep.transform_batch(obs), batch, t, dict(note))
        for t in threads
    ]
    if batch == 1 and case.form == "list":
        if not _check(expected[0], prep.transform(single)):
            _warn(f"{name}: rlblocks transform differs from transform_batch")
        jobs.append(_Job("rlblocks transform", lambda: prep.transform(single), 1))

    reference = _with_reference(lambda: prep.transform_batch(obs))
    ref_ok = _check(expected, reference())
    if not ref_ok:
        _warn(f"{name} B={batch}: the numpy reference differs from rlblocks")
    jobs.append(_Job("numpy reference", reference, batch, extra={"matches_rlblocks": ref_ok}))
    if batch == 1 and case.form == "list":
        ref_single = _with_reference(lambda: prep.transform(single))
        jobs.append(
            _Job(
                "numpy reference transform",
                ref_single,
                1,
                extra={"matches_rlblocks": _check(expected[0], ref_single())},
            )
        )

    def bind(fn: Callable[[Any], np.ndarray]) -> Callable[[], np.ndarray]:
        return lambda: fn(obs)

    variant_jobs: list[_Job] = []
    for variant, fn in case.variants.items():
        got = fn(obs)
        assert _check(expected, got), f"{name} B={batch}: hand-written {variant!r} != rlblocks"
        variant_jobs.append(_Job("numpy hand-written", bind(fn), batch, extra={"variant": variant}))
    jobs += variant_jobs

    if case.gymnasium and case.form == "list":
        gym_ok = _check(expected, _gym_flatten_loop(case.space, obs))
        jobs.append(
            _Job(
                "gymnasium flatten loop",
                lambda: _gym_flatten_loop(case.space, obs),
                batch,
                extra={"matches_rlblocks": gym_ok},
            )
        )

    for _ in range(rounds):
        for job in jobs:
            rlblocks.set_num_threads(job.threads)
            job.rounds.append(
                measure(
                    name,
                    job.method,
                    job.fn,
                    job.items,
                    batch=batch,
                    threads=job.threads,
                    min_time=min_time,
                    repeats=repeats,
                )
            )
    rlblocks.set_num_threads(1)

    def result(job: _Job) -> Result:
        us = float(np.median([r.us_per_item for r in job.rounds]))
        extra = dict(job.extra)
        if rounds > 1:
            extra["rounds_us_per_item"] = [round(r.us_per_item, 4) for r in job.rounds]
        return Result(
            name, job.method, us, 1e6 / us if us > 0 else float("inf"), batch, job.threads, extra
        )

    results = [result(j) for j in jobs if j not in variant_jobs]
    timed = [result(j) for j in variant_jobs]
    best = min(timed, key=lambda r: r.us_per_item)
    best.extra["variants_us_per_item"] = {
        r.extra["variant"]: round(r.us_per_item, 4) for r in timed
    }
    at = next(i for i, r in enumerate(results) if r.method.startswith("numpy reference")) + 1
    if batch == 1 and case.form == "list":
        at += 1
    results.insert(at, best)
    return results


def bound_row(case: BenchCase, batch: int, bandwidth: float, results: list[Result]) -> Result:
    """(bytes in + bytes out per item) / bandwidth, with rlblocks' time / bound in ``extra``."""
    bytes_in = _input_bytes(case.inputs(batch)) / batch
    bytes_out = case.prep.size * 4
    us = (bytes_in + bytes_out) / bandwidth * 1e6
    extra: dict[str, Any] = {
        "bytes_in_per_item": bytes_in,
        "bytes_out_per_item": bytes_out,
        "bandwidth_GB_per_s_best": round(bandwidth / 1e9, 3),
        "note": BOUND_NOTE,
    }
    for r in results:
        if r.case == case.name and r.batch == batch and r.method.startswith("rlblocks t="):
            extra[f"{r.method.replace(' ', '_')}_over_bound"] = round(r.us_per_item / us, 3)
    return Result(case.name, BOUND_METHOD, us, 1e6 / us, batch, 1, extra)


def run(
    keys: Sequence[str],
    batches: Sequence[int],
    threads: Sequence[int],
    min_time: float,
    repeats: int,
    rounds: int = 1,
    progress: bool = True,
) -> list[Result]:
    """Measures every case; returns the rows (bandwidth row first when a bound is needed)."""
    cases = build_cases(keys, max(batches))
    rows: list[Result] = []
    bandwidth = None
    if 1024 in batches and any(c.bound for c in cases):
        bandwidth, bw_row = measure_bandwidth(3 if repeats < 5 else 7)
        rows.append(bw_row)
    old_threads = rlblocks.get_num_threads()
    try:
        for case in cases:
            for batch in batches:
                if progress:
                    print(f"  measuring {case.name} B={batch} ...", file=sys.stderr, flush=True)
                case_rows = run_case(case, batch, threads, min_time, repeats, rounds)
                rows.extend(case_rows)
                if case.bound and batch == 1024 and bandwidth is not None:
                    rows.append(bound_row(case, batch, bandwidth, case_rows))
    finally:
        rlblocks.set_num_threads(old_threads)
        _impl.use_numpy_reference(False)
    return rows


# ------------------------------------------------------------------ report


def _find(rows: list[Result], case: str, batch: int, method: str) -> Result | None:
    return next(
        (r for r in rows if r.case == case and r.batch == batch and r.method == method), None
    )


def _best_numpy(rows: list[Result], case: str, batch: int) -> Result | None:
    cands = [r for r in rows if r.case == case and r.batch == batch and r.method in NUMPY_METHODS]
    return min(cands, key=lambda r: r.us_per_item) if cands else None


def _best_classic_numpy(rows: list[Result], case: str, batch: int) -> tuple[str, float] | None:
    """The fastest numpy that gathers with ``np.concatenate``/``np.fromiter`` (no bytes-join)."""
    cands: list[tuple[str, float]] = []
    for r in rows:
        if r.case != case or r.batch != batch:
            continue
        if r.method == "numpy reference":
            cands.append((r.method, r.us_per_item))
        elif r.method == "numpy hand-written":
            cands += [
                (f"hand-written [{k}]", float(v))
                for k, v in r.extra.get("variants_us_per_item", {}).items()
                if "bytes-join" not in k
            ]
    return min(cands, key=lambda c: c[1]) if cands else None


def summary(rows: list[Result]) -> list[str]:
    """The issue's target checks, computed from ``rows`` (printed only, never asserted)."""
    lines: list[str] = []
    ours = sorted({r.method for r in rows if r.method.startswith("rlblocks t=")})

    def mark(ok: bool) -> str:
        return "met" if ok else "NOT met"

    for case in ("nested Dict list", "Repeated(Dict) len~U(0,32) list"):
        best = _best_numpy(rows, case, 64)
        if best is None:
            continue
        parts = []
        for m in ours:
            r = _find(rows, case, 64, m)
            if r is not None:
                x = best.us_per_item / r.us_per_item
                parts.append(f"{m.split()[-1]} {x:.1f}x ({r.us_per_item:.3f} us) [{mark(x >= 5)}]")
        variant = best.extra.get("variant")
        lines.append(
            f"{case} B=64: "
            + ", ".join(parts)
            + f" vs best numpy ({best.method}"
            + (f" [{variant}]" if variant else "")
            + f", {best.us_per_item:.3f} us)"
            " (target >= 5x)"
        )
        classic = _best_classic_numpy(rows, case, 64)
        if classic is not None and classic[1] > best.us_per_item:
            parts = []
            for m in ours:
                r = _find(rows, case, 64, m)
                if r is not None:
                    parts.append(f"{m.split()[-1]} {classic[1] / r.us_per_item:.1f}x")
            lines.append(
                f"  same without the b''.join gather (best: {classic[0]}, "
                f"{classic[1]:.3f} us): " + ", ".join(parts)
            )
    r = _find(rows, "nested Dict list", 1, "rlblocks transform")
    if r is not None:
        alts = [
            o
            for o in rows
            if o.case == r.case and o.batch == 1 and not o.method.startswith("rlblocks")
        ]
        best_alt = min(alts, key=lambda o: o.us_per_item) if alts else None
        vs = (
            (
                f"; {best_alt.us_per_item / r.us_per_item:.1f}x vs {best_alt.method} "
                f"({best_alt.us_per_item:.2f} us)"
            )
            if best_alt
            else ""
        )
        lines.append(
            f"nested Dict transform (one observation): {r.us_per_item:.2f} us "
            f"[{mark(r.us_per_item <= 1.5)}] (target <= 1.5 us; RLlib ~30 us){vs}"
        )
    for r in rows:
        if r.method != BOUND_METHOD:
            continue
        parts = []
        for m in ours:
            o = _find(rows, r.case, r.batch, m)
            if o is not None:
                x = o.us_per_item / r.us_per_item
                parts.append(
                    f"{m.split()[-1]} {o.us_per_item:.4f} us = {x:.2f}x bound [{mark(x <= 2)}]"
                )
        lines.append(
            f"{r.case} B={r.batch}: "
            + ", ".join(parts)
            + f" (bound {r.us_per_item:.4f} us; target <= 2x)"
        )
    slower = [r for r in rows if r.ratio is not None and r.ratio < 1.0]
    for r in slower:
        lines.append(
            f"rlblocks slower than an alternative: {r.case} B={r.batch} {r.method} {r.ratio:.2f}x"
        )
    ratios = [r for r in rows if r.ratio is not None]
    if ratios:
        lo = min(ratios, key=lambda r: r.ratio or 0.0)
        lines.append(
            f"lowest ratio vs best alternative: {lo.ratio:.2f}x ({lo.case}, B={lo.batch}, "
            f"{lo.method})"
        )
    return lines


def report_rows(rows: list[Result], json_path: str | None = None) -> None:
    """Ratios (the bound row is not an alternative), JSON lines, table, target summary."""
    add_ratios([r for r in rows if r.method != BOUND_METHOD])
    emit_json(rows, sys.stdout)  # the stream as it is now (the default is bound at import)
    if json_path:
        with open(json_path, "w", encoding="utf-8") as fh:
            emit_json(rows, fh)
    print(format_table(rows))
    print("\n== target checks (printed, not asserted) ==")
    for line in summary(rows):
        print(line)


def _int_list(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: ``[--quick] [--json FILE]`` (plus ``--cases``/``--batches``/... for
    smoke tests and focused runs)."""
    parser = argparse.ArgumentParser(
        prog="rlblocks bench preprocessors", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="short run (< 60 s)")
    parser.add_argument("--json", metavar="FILE", help="also write the JSON lines to FILE")
    parser.add_argument(
        "--cases",
        default=",".join(CASE_KEYS),
        help=f"comma-separated subset of {','.join(CASE_KEYS)}",
    )
    parser.add_argument("--batches", type=_int_list, default=[1, 64, 1024], help="e.g. 1,64,1024")
    parser.add_argument("--threads", type=_int_list, default=[1, 2], help="e.g. 1,2")
    parser.add_argument(
        "--min-time",
        type=float,
        default=None,
        help="seconds per measurement round (default 0.04; --quick 0.03)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="round-robin rounds per case, median reported (default 5; --quick 1)",
    )
    args = parser.parse_args(argv)
    keys = [k for k in args.cases.split(",") if k]
    for k in keys:
        if k not in CASE_KEYS:
            parser.error(f"unknown case {k!r}; choose from {','.join(CASE_KEYS)}")
    min_time = args.min_time if args.min_time is not None else (0.03 if args.quick else 0.04)
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 5)
    repeats = 3 if args.quick else 5
    t0 = time.perf_counter()
    load_start = os.getloadavg()[0]
    rows = run(keys, args.batches, args.threads, min_time, repeats, rounds)
    report_rows(rows, args.json)
    meta = {
        "loadavg_1min_start_end": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
        "gymnasium": gym.__version__,
        "rlblocks": rlblocks.__version__,
        "min_time": min_time,
        "repeats": repeats,
        "rounds": rounds,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(f"run: {json.dumps(meta)}")


if __name__ == "__main__":  # pragma: no cover
    main()
