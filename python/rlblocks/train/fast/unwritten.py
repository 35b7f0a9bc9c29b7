"""``clear_unwritten``: what ``optimizer.zero_grad(set_to_none=True)`` leaves before a
closed-form gradient pass.

A closed form (:class:`~rlblocks.train.fast.q_layers.DenseQ`,
:class:`~rlblocks.train.fast.sac_backprop.SACBackprop`) overwrites, in full, the
gradients of the parameters it writes, so zeroing them first is wasted work; the
optimizer's other parameters (an unused value branch, say) must lose theirs, as
``zero_grad`` would take them. The native DQN and SAC learners and the RLlib backend's SAC
learner call this one helper.

Examples:
    >>> import torch
    >>> class WritesFirst:
    ...     def __init__(self, net): self.net = net
    ...     def written_params(self): return [self.net[0].weight, self.net[0].bias]
    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    >>> net(torch.ones(1, 2)).sum().backward()
    >>> clear_unwritten(list(net.parameters()), WritesFirst(net))
    >>> [p.grad is None for p in net.parameters()]
    [False, False, True, True]
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Protocol

import torch

__all__ = ["WritesGradients", "clear_unwritten", "unwritten_params"]


class WritesGradients(Protocol):
    """A closed-form gradient pass: it names the parameters whose ``.grad`` it writes."""

    def written_params(self) -> list[torch.nn.Parameter]:
        """The parameters whose ``.grad`` every pass writes in full."""
        ...


# the ids of each closed form's written parameters (fixed when it is built)
_WRITTEN: weakref.WeakKeyDictionary[WritesGradients, frozenset[int]] = weakref.WeakKeyDictionary()


def _written_ids(fast: WritesGradients) -> frozenset[int]:
    written = _WRITTEN.get(fast)
    if written is None:
        written = _WRITTEN[fast] = frozenset(id(p) for p in fast.written_params())
    return written


def unwritten_params(params: Sequence[torch.Tensor], fast: WritesGradients) -> list[torch.Tensor]:
    """The tensors of ``params`` whose ``.grad`` ``fast`` does not write, in order.

    Examples:
        >>> import torch
        >>> class Writes:
        ...     def __init__(self, p): self.p = p
        ...     def written_params(self): return [self.p]
        >>> a, b = torch.nn.Parameter(torch.ones(1)), torch.nn.Parameter(torch.ones(1))
        >>> unwritten_params([a, b], Writes(a)) == [b]
        True
    """
    written = _written_ids(fast)
    return [p for p in params if id(p) not in written]


def clear_unwritten(params: Sequence[torch.Tensor], fast: WritesGradients) -> None:
    """Sets ``.grad = None`` on the tensors of ``params`` that ``fast`` does not write, as
    ``zero_grad(set_to_none=True)`` would before a pass that overwrites the others (module
    docstring)."""
    written = _written_ids(fast)
    for p in params:
        if id(p) not in written:
            p.grad = None
