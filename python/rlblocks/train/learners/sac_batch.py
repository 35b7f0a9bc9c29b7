"""The batch side of :class:`~rlblocks.train.learners.sac.SACLearner`: what it reads from a
replay sample, that sample as tensors, and the small host conversions of its statistics.

Examples:
    >>> import numpy as np, torch
    >>> _mean(np.array([1.0, 2.0, 6.0], np.float32))
    3.0
    >>> _as_tensor(np.zeros(2), torch.device("cpu")).dtype
    torch.float32
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch
from torch import nn

__all__ = ["TransitionBatch"]


class TransitionBatch(Protocol):
    """What :meth:`SACLearner.update` reads from a replay sample
    (``rlblocks.replay.ReplaySample`` has these fields and more)."""

    @property
    def obs(self) -> Any: ...
    @property
    def actions(self) -> Any: ...
    @property
    def rewards(self) -> Any: ...
    @property
    def next_obs(self) -> Any: ...
    @property
    def discounts(self) -> Any: ...
    @property
    def weights(self) -> Any: ...


class _Tensors(NamedTuple):
    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    discounts: torch.Tensor
    weights: torch.Tensor


def _param_list(modules: Iterable[nn.Module]) -> list[nn.Parameter]:
    return [p for m in modules for p in m.parameters()]


def _host(x: torch.Tensor) -> np.ndarray:
    """``x`` as a numpy array (a view on the CPU)."""
    return x.detach().cpu().numpy()


def _mean(x: np.ndarray) -> float:
    """``float(np.mean(x))``, without ``np.mean``'s Python overhead (more than the sum of a
    batch of a few hundred floats)."""
    return float(np.add.reduce(x, None) / x.size)


def _as_tensor(x: Any, device: torch.device) -> torch.Tensor:
    """A tensor on ``device``; float64 becomes float32, other dtypes stay."""
    t = (
        x.to(device)
        if isinstance(x, torch.Tensor)
        else torch.as_tensor(np.asarray(x), device=device)
    )
    return t.float() if t.dtype == torch.float64 else t
