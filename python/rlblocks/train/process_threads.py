"""A run's CPU threads: torch's intra-op threads and numpy's BLAS threads, set together.

The fast paths (``rlblocks.train.fast``: PPO's closed-form update, the numpy actors and the
SAC / TD3 backprop) multiply small float32 matrices with numpy, whose BLAS (OpenBLAS) starts
one thread per core. At these sizes the threads' hand-offs cost more than the maths, and on
a machine with another busy process the waiting threads spin: a 400-step TD3 run took 31 s
of CPU with numpy's default of 2 threads on a loaded 2-core machine, 6.5 s with one. A
trainer's ``num_threads`` therefore sets both (threadpoolctl for the BLAS); None leaves
both as they are.

Examples:
    >>> import torch
    >>> from threadpoolctl import threadpool_info
    >>> set_process_threads(1)
    >>> torch.get_num_threads()
    1
    >>> {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"} <= {1}
    True
"""

from __future__ import annotations

import torch
from threadpoolctl import threadpool_limits

__all__ = ["set_process_threads"]


def set_process_threads(n: int | None) -> None:
    """``torch.set_num_threads(n)`` and the same limit on every BLAS library loaded in this
    process (numpy's); nothing when ``n`` is None. The limits stay for the process."""
    if n is None:
        return
    torch.set_num_threads(int(n))
    threadpool_limits(limits=int(n), user_api="blas")
