"""Atari image kernel: the fused gray+resize (210x160x3 -> 84x84 gray, INTER_AREA) in C++
against its numpy twin, at B = 1, 64, 1024.

``gray_resize 1 thread`` compares rlblocks on one thread with the numpy twin and, when
``opencv-python-headless`` is installed, the OpenCV loop (cvtColor + resize,
``cv2.setNumThreads(1)``); ``gray_resize 2 threads`` compares rlblocks on two threads with
OpenCV spread over a 2-thread pool. The DQN preprocessing pipeline against gymnasium,
envpool and ale_py is ``benchmarks/bench_atari_pipeline.py``.

Run ``rlblocks bench atari [--quick]``; it prints JSON lines, a table and the kernel ratios.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from rlblocks import _impl, image
from rlblocks.benchmarking.harness import Result, add_ratios, emit_json, format_table, measure

KERNEL_1 = "gray_resize 1 thread"
KERNEL_2 = "gray_resize 2 threads"


def _set_threads(n: int) -> None:
    from rlblocks import _core

    _core.set_num_threads(n)


def _opencv() -> Any | None:
    """``cv2`` on one thread, or None when OpenCV is not installed."""
    try:
        import cv2
    except ImportError:
        return None
    cv2.setNumThreads(1)
    return cv2


def kernel_results(batches: list[int], min_time: float) -> list[Result]:
    """rlblocks on 1 and 2 threads, the numpy twin (B <= 64) and OpenCV when installed."""
    cv2: Any = _opencv()
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (max(batches), 210, 160, 3), dtype=np.uint8)
    out = np.empty((max(batches), 84, 84, 1), dtype=np.uint8)

    def cv_range(x: np.ndarray, o: np.ndarray) -> None:
        for i in range(len(x)):
            gray = cv2.cvtColor(x[i], cv2.COLOR_RGB2GRAY)
            o[i, :, :, 0] = cv2.resize(gray, (84, 84), interpolation=cv2.INTER_AREA)

    pool = ThreadPoolExecutor(2)
    results = []
    for b in batches:
        x, o = frames[:b], out[:b]

        def cv_pool(x: np.ndarray = x, o: np.ndarray = o) -> None:
            if len(x) == 1:
                cv_range(x, o)
                return
            h = len(x) // 2
            halves = [slice(0, h), slice(h, len(x))]
            list(pool.map(lambda part: cv_range(x[part], o[part]), halves))

        def ours(x: np.ndarray = x, o: np.ndarray = o) -> None:
            image.gray_resize(x, 84, out=o)

        def cv_loop(x: np.ndarray = x, o: np.ndarray = o) -> None:
            cv_range(x, o)

        for threads, case in ((1, KERNEL_1), (2, KERNEL_2)):
            _set_threads(threads)
            results.append(
                measure(case, "rlblocks C++", ours, b, batch=b, threads=threads, min_time=min_time)
            )
            if threads == 1:
                if cv2 is not None:
                    results.append(
                        measure(
                            case, "opencv loop", cv_loop, b, batch=b, threads=1, min_time=min_time
                        )
                    )
                if b <= 64:
                    _impl.use_numpy_reference(True)
                    try:
                        results.append(
                            measure(
                                case, "numpy twin", ours, b, batch=b, min_time=min_time, repeats=3
                            )
                        )
                    finally:
                        _impl.use_numpy_reference(False)
            elif cv2 is not None:
                results.append(
                    measure(
                        case,
                        "opencv 2-thread pool",
                        cv_pool,
                        b,
                        batch=b,
                        threads=2,
                        min_time=min_time,
                    )
                )
    pool.shutdown()
    _set_threads(2)
    return results


def summary(results: list[Result]) -> dict[str, float]:
    """The kernel ratios (> 1 means rlblocks is faster).

    Examples:
        >>> rows = [Result(KERNEL_1, "rlblocks C++", 2.0, 5e5, 64),
        ...         Result(KERNEL_1, "numpy twin", 20.0, 5e4, 64)]
        >>> summary(rows)
        {'kernel B=64 1 thread: numpy twin / rlblocks': 10.0}
    """

    def us(case: str, method: str, batch: int) -> float | None:
        for r in results:
            if r.case == case and r.method == method and r.batch == batch:
                return r.us_per_item
        return None

    out: dict[str, float] = {}
    for b in sorted({r.batch for r in results}):
        ours1, ours2 = us(KERNEL_1, "rlblocks C++", b), us(KERNEL_2, "rlblocks C++", b)
        for label, case, ours, other in (
            ("1 thread", KERNEL_1, ours1, "numpy twin"),
            ("1 thread", KERNEL_1, ours1, "opencv loop"),
            ("2 threads", KERNEL_2, ours2, "opencv 2-thread pool"),
        ):
            theirs = us(case, other, b)
            if ours and theirs:
                out[f"kernel B={b} {label}: {other} / rlblocks"] = theirs / ours
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small batches, short timings")
    args = parser.parse_args(argv)
    batches = [1, 64] if args.quick else [1, 64, 1024]
    results = kernel_results(batches, 0.05 if args.quick else 0.3)
    add_ratios(results)
    emit_json(results)
    print(format_table(results))
    for key, value in summary(results).items():
        print(json.dumps({"summary": key, "value": round(value, 3)}))
    if _opencv() is None:
        print("OpenCV columns skipped: pip install opencv-python-headless to compare with it")
    return 0
