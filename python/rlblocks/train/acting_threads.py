"""Torch's intra-op threads where a policy acts: picked from the work, the caller's restored.

At a rollout's batch of a few rows a small MLP's ops take microseconds, and torch's default
intra-op threads (one per core) only add the cost of waking them: on a 2-core machine with
another busy process every small op ran about 4x slower with the default than with one
thread. The acting doors (:meth:`rlblocks.train.policy.Policy.act` / ``values`` and RLlib's
:class:`~rlblocks.rllib.VectorEnvRunner` ``sample``) therefore run under
:func:`torch_threads` with :func:`acting_threads`' count: one thread when the model's
parameters times the batch rows stay under :data:`SMALL_WORK` multiply-adds, else the cap
(the caller's setting; on Ray a runner's ``num_cpus_per_env_runner``). The caller's setting
is restored on the way out, so a learner in the same process keeps its threads.

Examples:
    >>> import torch
    >>> before = torch.get_num_threads()
    >>> with torch_threads(1):
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    >>> acting_threads(torch.nn.Linear(64, 64), 8, cap=4)
    1
    >>> acting_threads(torch.nn.Linear(2048, 2048), 8, cap=4)
    4
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["SMALL_WORK", "acting_threads", "model_size", "runner_threads", "torch_threads"]

#: Multiply-adds per acting call (parameters x batch rows) up to which one thread is used.
SMALL_WORK = 2_000_000


def model_size(model: torch.nn.Module) -> int:
    """The number of parameters of ``model``."""
    return sum(p.numel() for p in model.parameters())


def acting_threads(model: torch.nn.Module | int, batch: int, cap: int | None = None) -> int:
    """Intra-op threads for acting with ``model`` (or its parameter count) on ``batch``
    rows: 1 for small work, else ``cap`` (default: torch's current setting), at least 1."""
    params = model if isinstance(model, int) else model_size(model)
    if params * max(int(batch), 1) <= SMALL_WORK:
        return 1
    return max(1, int(cap) if cap is not None else torch.get_num_threads())


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Runs the block with ``torch.set_num_threads(n)`` and restores the caller's count
    (nothing is set when they are equal)."""
    before = torch.get_num_threads()
    if n == before:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def runner_threads(module: object, num_envs: int, config: object) -> int:
    """:func:`acting_threads` for an RLlib env runner's ``module`` (a torch module, else
    the caller's count) on its ``num_envs``, capped by the config's
    ``num_cpus_per_env_runner`` (RLlib's default 1)."""
    if not isinstance(module, torch.nn.Module):
        return torch.get_num_threads()
    cap = getattr(config, "num_cpus_per_env_runner", None)
    return acting_threads(module, num_envs, max(1, int(cap or 1)))
