"""Two independent computations at once: :func:`run_pair` runs one on the calling thread
and the other on a persistent side thread.

SAC's and TD3's twin critics are two networks of the same shape whose passes (forward,
backward, input gradients) do not depend on each other. The closed-form updates run them in
numpy's BLAS or torch's matrix products, which release the GIL, so on a machine with two
free cores the pair takes about 0.55x-0.65x of the time of one after the other (measured
on the 2-core development machine: two ``[400, 300]`` critic passes of a batch of 256, 7.0
ms one after the other, 3.3-4.2 ms side by side). A hand-off costs about 35 µs, so the
learners pair only passes large enough to gain (:func:`worth_pairing`).

The results are the same bits as one after the other: each pass runs the same code, the
BLAS stays on one thread (:mod:`rlblocks.train.process_threads`), and the side thread takes
the caller's denormal flushing and autograd mode for the call.

Examples:
    >>> run_pair(lambda: 1 + 1, lambda: "side")
    (2, 'side')
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

import torch

from rlblocks.train.denormals import denormals_flushed, flush_denormals

__all__ = ["MIN_PAIRED_MACS", "cpus_available", "run_pair", "worth_pairing"]

#: The smallest pass (multiply-adds of one critic's forward over the batch) worth sending to
#: the side thread: about 2 M multiply-adds take some 40 µs at this machine's single-thread
#: rate, the cost of the hand-off.
MIN_PAIRED_MACS = 2_000_000

A = TypeVar("A")
B = TypeVar("B")

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None


def cpus_available() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def worth_pairing(macs: int) -> bool:
    """Whether passes of ``macs`` multiply-adds each gain from :func:`run_pair`: two CPUs
    free for this process and at least :data:`MIN_PAIRED_MACS` per pass."""
    return cpus_available() >= 2 and macs >= MIN_PAIRED_MACS


def _side() -> ThreadPoolExecutor:
    """The process's side thread (started on first use, again in a forked child)."""
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="rlblocks-side"))
        return _pool[1]


def run_pair(first: Callable[[], A], second: Callable[[], B]) -> tuple[A, B]:
    """``(first(), second())``, ``second`` on the side thread while ``first`` runs here;
    an exception of either is raised here (``first``'s when both raise), after both ended."""
    flushed, grad = denormals_flushed(), torch.is_grad_enabled()

    def side() -> B:
        with flush_denormals(flushed), torch.set_grad_enabled(grad):
            return second()

    future = _side().submit(side)
    try:
        a = first()
    except BaseException:
        wait([future])
        raise
    return a, future.result()
