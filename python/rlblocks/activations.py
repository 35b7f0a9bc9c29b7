"""Activations as RLlib names them, and rlblocks' fast CPU ``Tanh``.

``get_activation_fn`` resolves RLlib's activation descriptors (names, callables, ``None``);
the model config validates its activation keys with it, and every built-in layer builds
its activation through ``make_activation``.

Examples:
    >>> import torch
    >>> make_activation("tanh")
    Tanh()
    >>> make_activation("linear") is None
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from rlblocks import _core

__all__ = [
    "FAST_TANH_MIN_NUMEL",
    "Tanh",
    "get_activation_fn",
    "is_symbolic",
    "make_activation",
    "tanh",
    "tanh_cpu",
]


def is_symbolic() -> bool:
    """True while TorchScript-tracing, compiling or exporting (no data-dependent branches)."""
    compiler = getattr(torch, "compiler", None)
    exporting = getattr(compiler, "is_exporting", None)
    compiling = getattr(compiler, "is_compiling", None)
    return bool(
        torch.jit.is_tracing()
        or (exporting is not None and exporting())
        or (compiling is not None and compiling())
    )


#: From this many elements on, :class:`Tanh` evaluates CPU tensors with a vectorised tanh.
FAST_TANH_MIN_NUMEL = 2048


def tanh_cpu(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """``tanh`` of a CPU float tensor: rlblocks' AVX2 kernel for float32 (about 1 ulp),
    numpy's for float64. ``inplace`` (contiguous ``x`` only) writes into ``x``.

    Examples:
        >>> x = torch.tensor([-1.0, 0.0, 2.0])
        >>> bool(torch.allclose(tanh_cpu(x), torch.tanh(x)))
        True
    """
    a = x.detach().numpy()
    out = a if inplace else None
    y = _core.tanh(a, out=out) if a.dtype == np.float32 else np.tanh(a, out=out)
    return x if inplace else torch.from_numpy(y)


class _FastTanh(torch.autograd.Function):
    """tanh through :func:`tanh_cpu` (forward) and ``aten::tanh_backward`` (backward); a
    backward that builds a graph (second derivatives) recomputes tanh with torch so it stays
    exact."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = tanh_cpu(x)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        x, y = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True
            t = torch.tanh(x)
            return grad * (1 - t * t)
        return torch.ops.aten.tanh_backward(grad, y)


class Tanh(nn.Tanh):
    """``nn.Tanh`` (a subclass) with the same results (to about 1 ulp), faster on CPU for
    large tensors.

    The CPU builds of torch evaluate float32 tanh element by element without AVX-512 (the
    most expensive op of a tanh MLP's training step); rlblocks' AVX2 kernel is faster
    (figures: docs/benchmarks.md). CPU float tensors of at least ``FAST_TANH_MIN_NUMEL`` elements
    go through :func:`tanh_cpu` (the gradient through ``aten::tanh_backward``);
    everything else, and tracing, compiling or exporting, uses ``torch.tanh``.

    Examples:
        >>> x = torch.linspace(-5, 5, 4096)
        >>> bool((Tanh()(x) - torch.tanh(x)).abs().max() < 1e-6)
        True
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tanh(x)


def tanh(x: torch.Tensor) -> torch.Tensor:
    """:class:`Tanh`'s forward as a function (autograd included).

    Examples:
        >>> x = torch.linspace(-3, 3, 5000, requires_grad=True)
        >>> bool(torch.equal(tanh(x), Tanh()(x)))
        True
    """
    # is_symbolic() first: under torch.export a numel test on a dynamic batch would
    # specialise the batch size
    if (
        is_symbolic()
        or x.device.type != "cpu"
        or x.dtype not in (torch.float32, torch.float64)
        or x.numel() < FAST_TANH_MIN_NUMEL
    ):
        return torch.tanh(x)
    if torch.is_grad_enabled() and x.requires_grad:
        return _FastTanh.apply(x)
    return tanh_cpu(x)


_ALIASES: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": Tanh,
    "elu": nn.ELU,
    "swish": nn.SiLU,
    "silu": nn.SiLU,
    "softmax": nn.Softmax,
}


def get_activation_fn(name: Any = None, framework: str = "torch") -> Any:
    """An activation class (not an instance) for a name, as RLlib resolves it.

    ``None`` and ``"linear"`` give ``None``; a callable comes back unchanged; a name of a
    ``torch.nn`` module class (``"ReLU"``, ``"GELU"``, ...) gives that class; the lower-case
    aliases are ``relu``, ``tanh``, ``elu``, ``swish``/``silu`` and ``softmax``.

    Args:
        name: The activation descriptor.
        framework: Only ``"torch"`` is supported.

    Raises:
        ValueError: An unknown name (the message lists the accepted ones).

    Examples:
        >>> get_activation_fn("relu"), get_activation_fn("linear")
        (<class 'torch.nn.modules.activation.ReLU'>, None)
        >>> get_activation_fn("GELU")
        <class 'torch.nn.modules.activation.GELU'>
    """
    if framework != "torch":
        raise ValueError(
            f"get_activation_fn: only framework='torch' is supported, got {framework!r}"
        )
    if name is None or callable(name):
        return name
    if not isinstance(name, str):
        raise ValueError(f"activation must be a name, a callable or None, got {name!r}")
    if name == "linear":
        return None
    cls = getattr(nn, name, None)
    if isinstance(cls, type) and issubclass(cls, nn.Module):
        return cls
    if name in _ALIASES:
        return _ALIASES[name]
    raise ValueError(
        f"Unknown activation ({name!r}) for framework=torch: use one of "
        f"{sorted(_ALIASES)}, 'linear', None, or a torch.nn class name such as 'ReLU', 'GELU', "
        "'Sigmoid', 'LeakyReLU'"
    )


class _Lambda(nn.Module):
    """Wraps a plain function (e.g. ``torch.tanh``) used as an activation."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def make_activation(activation_fn: Any) -> nn.Module | None:
    """A module for an activation descriptor: a name, a class, an instance or a plain
    function (wrapped); ``None`` for linear."""
    act = get_activation_fn(activation_fn) if isinstance(activation_fn, str) else activation_fn
    if act is None:
        return None
    if isinstance(act, nn.Module):
        return act
    if isinstance(act, type) and issubclass(act, nn.Module):
        return act()
    return _Lambda(act)
