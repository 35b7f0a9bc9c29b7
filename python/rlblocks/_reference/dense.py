"""Numpy twin of ``rlblocks._core.dense_forward``: a stack of dense layers in one call.

For each ``(weight [out, in], bias [out], activation)`` of ``layers`` (activation None,
``"tanh"`` or ``"relu"``), ``x = activation(x @ weight.T + bias)``; the result is the last
``x`` (float32, a new array). The values agree with the kernel to float32 rounding (the
sums' order and tanh differ); it accepts and refuses the kernel's arguments with the
kernel's messages.

Examples:
    >>> import numpy as np
    >>> w, b = np.array([[1.0, -1.0]], np.float32), np.array([0.5], np.float32)
    >>> dense_forward(np.array([[2.0, 1.0]], np.float32), [(w, b, "relu")]).tolist()
    [[1.5]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlblocks._reference.arrays import describe, float32_array

__all__ = ["dense_forward"]

_FN = "dense_forward"


def _checked_layers(x: np.ndarray, layers: Any) -> list[tuple[np.ndarray, np.ndarray, Any]]:
    if not isinstance(layers, (list, tuple)):
        raise ValueError(
            f"{_FN}: layers must be a list of (weight, bias, activation) tuples, "
            f"got {describe(layers)}"
        )
    width = x.shape[1]
    checked = []
    for i, item in enumerate(layers):
        where = f"layers[{i}]"
        if not isinstance(item, tuple) or len(item) != 3:
            got = f"a tuple of length {len(item)}" if isinstance(item, tuple) else describe(item)
            raise ValueError(
                f"{_FN}: {where} must be a (weight, bias, activation) tuple, got {got}"
            )
        weight = float32_array(item[0], _FN, f"{where} weight")
        if weight.ndim != 2 or weight.shape[1] != width:
            raise ValueError(
                f"{_FN}: {where} weight must be [out, {width}] (its input's width), "
                f"got shape {weight.shape}"
            )
        bias = float32_array(item[1], _FN, f"{where} bias")
        if bias.shape != (weight.shape[0],):
            raise ValueError(
                f"{_FN}: {where} bias must be of shape ({weight.shape[0]},), got shape {bias.shape}"
            )
        activation = item[2]
        known = isinstance(activation, str) and activation in ("tanh", "relu")
        if not (activation is None or known):
            raise ValueError(
                f"{_FN}: {where} activation must be None, 'tanh' or 'relu', got {activation!r}"
            )
        checked.append((weight, bias, activation))
        width = weight.shape[0]
    return checked


def dense_forward(x: np.ndarray, layers: Any) -> np.ndarray:
    """The stack's output ``[B, out]`` (float32, a new array) for float32 ``x [B, in]``."""
    x = float32_array(x, _FN, "x")
    if x.ndim != 2:
        raise ValueError(f"{_FN}: x must be [B, in], got shape {x.shape}")
    y = np.array(x, np.float32, order="C")
    for weight, bias, activation in _checked_layers(x, layers):
        y = y @ weight.T
        y += bias
        if activation == "tanh":
            np.tanh(y, out=y)
        elif activation == "relu":
            np.maximum(y, np.float32(0.0), out=y)
    return np.ascontiguousarray(y, np.float32)
