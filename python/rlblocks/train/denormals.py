"""Float32 denormals flushed to zero while a trainer trains: :func:`flush_denormals`.

Adam's moment estimates of parameters whose gradient is zero or tiny (a ReLU unit that
rarely fires) decay geometrically through the float32 denormal range (below about
1.2e-38), where x86 cores take a microcode assist on every vector operation touching one.
On rlblocks' closed-form CPU updates they cost up to a third of a training step: after
2,500 SAC steps 83k of the actor's and critics' 203k first moments were denormal, and the
critics' fused Adam step (135k parameters) took 852 µs, 144 µs with them flushed; native
DQN on CartPole ran 1.3x-1.6x the env steps per second with flushing
(docs/benchmarks.md). Flushing (FTZ and DAZ, ``torch.set_flush_denormal``) turns
such values into zeros, which changes nothing a network computes at any meaningful
precision; TensorFlow does the same by default on CPU.

The setting is the calling thread's: the trainers enable it for the duration of each
``train()`` call (``flush_denormals`` in the trainer config, default True) and restore
the thread's previous setting afterwards, so the user's own code outside ``train()`` is
unaffected. Torch's other intra-op threads (``num_threads`` above 1) keep their own.

Examples:
    >>> before = denormals_flushed()
    >>> with flush_denormals():
    ...     inside = denormals_flushed()
    >>> inside or not hardware_flushes(), denormals_flushed() == before
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any, TypeVar

import numpy as np
import torch

__all__ = ["denormals_flushed", "flush_denormals", "flushing_denormals", "hardware_flushes"]

_SMALLEST_NORMAL = np.float32(np.finfo(np.float32).tiny)


def denormals_flushed() -> bool:
    """Whether this thread's float32 arithmetic flushes denormal results to zero."""
    return bool(_SMALLEST_NORMAL * np.float32(0.5) == 0.0)


def hardware_flushes() -> bool:
    """Whether this CPU lets torch flush denormals (x86 with SSE3, ARM64)."""
    return bool(torch.set_flush_denormal(denormals_flushed()))


@contextmanager
def flush_denormals(enabled: bool = True) -> Iterator[None]:
    """Runs the block with denormals flushed (``enabled``) or kept, then restores the
    thread's previous setting (also when the block raises). A CPU without the setting
    runs the block unchanged."""
    before = denormals_flushed()
    if enabled == before:
        yield
        return
    torch.set_flush_denormal(enabled)
    try:
        yield
    finally:
        torch.set_flush_denormal(before)


R = TypeVar("R")


def flushing_denormals(train: Callable[[Any], R]) -> Callable[[Any], R]:
    """Decorates a trainer's ``train(self)``: it runs under :func:`flush_denormals` with
    the trainer config's ``flush_denormals``."""

    @wraps(train)
    def wrapper(self: Any) -> R:
        with flush_denormals(self.config.flush_denormals):
            return train(self)

    return wrapper
