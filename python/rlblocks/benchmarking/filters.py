"""Benchmarks: MeanStdFilter update+normalise and frame stacking, C++ against numpy.

Cases (every method measured in this process, this run):

* ``meanstd <B>x<D>``: one filter call (push the batch into the running stats and the buffer,
  then normalise it, float32 out) per item batch. Alternatives: the vectorised numpy Welford
  twin (two-pass batch moments + Chan merge + normalise), and RLlib's way (its filter takes
  one observation at a time: a Python loop of Welford pushes and normalisations).
* ``framestack k x HxW``: one vector-env step (append one frame per env, write every env's
  stack, channel-last like RLlib's FrameStack unless the case says NCHW, where
  ``copy=False`` returns the stacks in place instead). Alternatives: the
  numpy twin (a batched ring and ``np.concatenate`` of the k slots into a reused output),
  plain numpy (``np.concatenate`` of the stack without its oldest frame and the new frame,
  a new array per step) and RLlib's per-env deque + ``np.concatenate(frames, axis=2)``.

Times are per item (per observation for filters, per env-step for frame stacking); ratio =
best alternative / rlblocks.

Run ``rlblocks bench filters [--quick]``.
"""

from __future__ import annotations

import argparse
import sys
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

import rlblocks
from rlblocks import _core
from rlblocks._reference import filters as ref_filters
from rlblocks._reference import framestack as ref_framestack
from rlblocks.benchmarking.harness import Result, measure, report
from rlblocks.filters import MeanStdFilter
from rlblocks.framestack import FrameStacker


def _rllib_style_filter_call(
    running: ref_filters.RunningStat,
    buffer: ref_filters.RunningStat,
    batch: np.ndarray,
    clip: float,
) -> np.ndarray:
    """RLlib's MeanStdFilter on a batch: one push + normalise per observation."""
    out = np.empty(batch.shape, np.float32)
    for i, x in enumerate(batch):
        running.push(x)
        buffer.push(x)
        v = (x - running.mean) / (running.std + 1e-6)
        out[i] = np.clip(v, -clip, clip)
    return out


def _uint32_shift_step(batch: int, h: int, w: int, frames: np.ndarray) -> Callable[[], None]:
    """Another numpy way for k=4 uint8 channel-last stacks: keep the stacks, view each pixel's
    4 frames as one little-endian uint32, and shift the oldest out (valid only for k=4)."""
    stacks = np.zeros((batch, h, w, 4), np.uint8)
    words = stacks.view(np.uint32)[..., 0]
    tmp = np.empty((batch, h, w), np.uint32)
    out = np.empty_like(stacks)
    shift = 24 if sys.byteorder == "little" else 0
    down = 8 if sys.byteorder == "little" else -8

    def step() -> None:
        if down > 0:
            np.right_shift(words, down, out=words)
        else:
            np.left_shift(words, -down, out=words)
        np.left_shift(frames, shift, out=tmp, dtype=np.uint32)
        np.bitwise_or(words, tmp, out=words)
        np.copyto(out, stacks)

    return step


def bench_filters(quick: bool, threads: int) -> list[Result]:
    results: list[Result] = []
    rng = np.random.default_rng(0)
    min_time = 0.1 if quick else 0.3
    dims = [64]
    batches = [1, 64, 1024] if quick else [1, 64, 1024, 8192]
    for dim in dims:
        for batch in batches:
            x = rng.normal(1.0, 2.0, size=(batch, dim)).astype(np.float32)
            case = f"meanstd {batch}x{dim} f32"
            if batch == 1:
                x = x[0]
            rlblocks.set_num_threads(1)
            f = MeanStdFilter((dim,))
            out = np.empty(x.shape, np.float32)
            results.append(
                measure(
                    case,
                    "rlblocks MeanStdFilter(out=)",
                    partial(f, x, out=out),
                    batch,
                    batch=batch,
                    threads=1,
                    min_time=min_time,
                )
            )
            results.append(
                measure(
                    case,
                    "rlblocks MeanStdFilter",
                    partial(f, x),
                    batch,
                    batch=batch,
                    threads=1,
                    min_time=min_time,
                )
            )
            if threads > 1 and batch >= 1024:
                rlblocks.set_num_threads(threads)
                results.append(
                    measure(
                        case,
                        "rlblocks MeanStdFilter(out=)",
                        partial(f, x, out=out),
                        batch,
                        batch=batch,
                        threads=threads,
                        min_time=min_time,
                    )
                )
                rlblocks.set_num_threads(1)
            running, buffer = ref_filters.RunningStat((dim,)), ref_filters.RunningStat((dim,))
            results.append(
                measure(
                    case,
                    "numpy vectorised Welford",
                    partial(
                        ref_filters.mean_std_filter, running, buffer, x, True, True, True, 10.0, out
                    ),
                    batch,
                    batch=batch,
                    threads=1,
                    min_time=min_time,
                )
            )
            if batch <= 1024:
                running, buffer = ref_filters.RunningStat((dim,)), ref_filters.RunningStat((dim,))
                xb = x if batch > 1 else x[None]
                results.append(
                    measure(
                        case,
                        "RLlib-style per-row push",
                        partial(_rllib_style_filter_call, running, buffer, xb, 10.0),
                        batch,
                        batch=batch,
                        threads=1,
                        min_time=min_time,
                        repeats=3,
                    )
                )
    return results


def _concatenate_step(
    batch: int, k: int, frames: np.ndarray, channels_last: bool
) -> Callable[[], None]:
    """The plain numpy step: drop the oldest frame, concatenate the new one (a new array
    every step), as a per-step ``np.concatenate`` frame stack does."""
    axis = -1 if channels_last else 1
    new = frames[..., None] if channels_last else frames[:, None]
    state = {"stack": np.repeat(new, k, axis=axis)}

    def step() -> None:
        old = state["stack"]
        kept = old[..., 1:] if channels_last else old[:, 1:]
        state["stack"] = np.concatenate([kept, new], axis=axis)

    return step


def bench_framestack(quick: bool, threads: int) -> list[Result]:
    results: list[Result] = []
    rng = np.random.default_rng(1)
    min_time = 0.1 if quick else 0.3
    k, h, w = 4, 84, 84
    configs = [(True, b) for b in ([1, 16, 256] if quick else [1, 16, 256, 1024])]
    configs.append((False, 256 if quick else 1024))
    for channels_last, batch in configs:
        case = f"framestack {k}x{h}x{w} u8" + ("" if channels_last else " NCHW")
        frames = rng.integers(0, 256, size=(batch, h, w), dtype=np.uint8)
        for t in [1, threads] if threads > 1 and batch >= 16 else [1]:
            rlblocks.set_num_threads(t)
            fs = FrameStacker(batch, k, (h, w), channels_last=channels_last)
            fs.reset(frames)
            out = np.empty((batch, *fs.observation_shape), np.uint8)
            variants = [("rlblocks FrameStacker(out=)", partial(fs.push, frames, out=out))]
            if t == 1:
                variants.append(("rlblocks FrameStacker", partial(fs.push, frames)))
            if not channels_last:
                variants.append(
                    ("rlblocks FrameStacker(copy=False)", partial(fs.push, frames, copy=False))
                )
            for label, step in variants:
                results.append(
                    measure(case, label, step, batch, batch=batch, threads=t, min_time=min_time)
                )
        rlblocks.set_num_threads(1)
        twin = ref_framestack.FrameStacker(batch, k, (h, w), np.uint8, channels_last)
        twin.reset(frames)
        out = np.empty((batch, *twin.observation_shape), np.uint8)
        results.append(
            measure(
                case,
                "numpy ring+concatenate(out=)",
                partial(twin.push, frames, out=out),
                batch,
                batch=batch,
                min_time=min_time,
            )
        )
        results.append(
            measure(
                case,
                "numpy concatenate (new stack)",
                _concatenate_step(batch, k, frames, channels_last),
                batch,
                batch=batch,
                min_time=min_time,
            )
        )
        if channels_last:
            results.append(
                measure(
                    case,
                    "numpy uint32 shift (k=4 only)",
                    _uint32_shift_step(batch, h, w, frames),
                    batch,
                    batch=batch,
                    min_time=min_time,
                )
            )
            stacks = [deque([frames[e][:, :, None]] * k, maxlen=k) for e in range(batch)]

            def rllib_step(stacks: Any = stacks, frames: Any = frames) -> list[np.ndarray]:
                obs = []
                for e, d in enumerate(stacks):
                    d.append(frames[e][:, :, None])
                    obs.append(np.concatenate(d, axis=2))
                return obs

            results.append(
                measure(
                    case,
                    "RLlib deque+concatenate",
                    rllib_step,
                    batch,
                    batch=batch,
                    min_time=min_time,
                )
            )
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer cases, shorter timings")
    parser.add_argument("--only", choices=["filters", "framestack"], default=None)
    args = parser.parse_args(argv)
    if not hasattr(_core, "FrameStacker"):
        raise SystemExit("rlblocks._core was built without the frame stacker; rebuild it")
    threads = rlblocks.get_num_threads()
    results: list[Result] = []
    try:
        if args.only in (None, "filters"):
            results += bench_filters(args.quick, threads)
        if args.only in (None, "framestack"):
            results += bench_framestack(args.quick, threads)
    finally:
        rlblocks.set_num_threads(threads)
    report(results)


if __name__ == "__main__":  # pragma: no cover
    main()
