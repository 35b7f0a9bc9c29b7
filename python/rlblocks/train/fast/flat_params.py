"""The model's parameters and gradients as views into two flat buffers.

An RL model has a dozen small tensors; optimizer steps and gradient clipping over them
run one small kernel per tensor, and on CPU each of those costs more than the arithmetic
(CartPole's 2x64 MLP: the multi-tensor Adam step, gradient norm and step counters take
about as long as the network's whole backward pass). With every parameter a view of one
buffer, and every gradient a view of another, Adam and the norm are one kernel each.

The model keeps its own ``nn.Parameter`` objects (``state_dict``, ``parameters()`` and
hooks are unchanged): only their storage moves. The optimizer is given :attr:`param`,
the buffer as one leaf tensor whose ``.grad`` is the gradient buffer.

Examples:
    >>> import torch
    >>> model = torch.nn.Linear(3, 2)
    >>> flat = FlatParameters(list(model.parameters()))
    >>> flat.param.shape, model.weight.data_ptr() == flat.param.data_ptr()
    (torch.Size([8]), True)
    >>> model(torch.ones(1, 3)).sum().backward()
    >>> flat.sync_grads()
    >>> flat.param.grad[-2:].tolist()   # the bias gradients
    [1.0, 1.0]
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["FlatParameters"]


class FlatParameters:
    """Moves ``params`` (same device and dtype) into one buffer; see the module docstring.

    Args:
        params: The parameters, in the order they are laid out.

    Raises:
        ValueError: No parameters, or parameters on different devices or of different
            dtypes.
    """

    def __init__(self, params: list[nn.Parameter]) -> None:
        if not params:
            raise ValueError("FlatParameters: no parameters")
        kinds = {(p.device, p.dtype) for p in params}
        if len(kinds) != 1:
            raise ValueError(f"FlatParameters: parameters differ in device or dtype: {kinds}")
        self.params = params
        total = sum(p.numel() for p in params)
        device, dtype = next(iter(kinds))
        self.param = nn.Parameter(torch.empty(total, device=device, dtype=dtype))
        self.param.grad = torch.zeros_like(self.param)
        self._grad_views: list[torch.Tensor] = []
        offset = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                view = self.param.data[offset : offset + n].view_as(p)
                view.copy_(p.data)
                p.data = view
                self._grad_views.append(self.param.grad[offset : offset + n].view_as(p))
                offset += n
        self.attach_grads()

    def attach_grads(self) -> None:
        """Makes every parameter's ``.grad`` its view of the gradient buffer (zeroed)."""
        assert self.param.grad is not None
        self.param.grad.zero_()
        for p, g in zip(self.params, self._grad_views, strict=True):
            p.grad = g

    def sync_grads(self) -> None:
        """Copies any ``.grad`` that autograd (or a user) replaced into the gradient buffer
        (a missing gradient counts as zero); afterwards every ``.grad`` is its view again."""
        for p, g in zip(self.params, self._grad_views, strict=True):
            if p.grad is g:
                continue
            if p.grad is None:
                g.zero_()
            else:
                g.copy_(p.grad)
            p.grad = g

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Scales the gradients so their global L2 norm is at most ``max_norm`` (as
        ``torch.nn.utils.clip_grad_norm_``); returns the norm before clipping."""
        grad = self.param.grad
        assert grad is not None
        total = torch.linalg.vector_norm(grad)
        grad.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
        return total
