"""Numpy twin of ``rlblocks._core.diag_gaussian_draw``: the diagonal Gaussian's draw.

``DiagGaussian.sample`` / ``deterministic_sample`` and the log-density of the action, in
numpy: the inputs are rows of ``2d`` floats (``d`` means, then ``d`` log-stds clamped to
``[-bound, bound]``); with standard-normal ``noise [B, d]`` the action is
``mean + exp(log_std) * noise``, without it the mean. float32 in the kernel's order of
operations, the log-density summed in index order. It accepts and refuses the kernel's
arguments with the kernel's messages.

Examples:
    >>> import numpy as np
    >>> inputs = np.array([[0.5, 0.0]], np.float32)  # mean 0.5, log-std 0
    >>> actions, logp = diag_gaussian_draw(inputs, np.array([[2.0]], np.float32))
    >>> actions.tolist(), round(float(logp[0]), 4)
    ([[2.5]], -2.9189)
"""

from __future__ import annotations

import math

import numpy as np

from rlblocks._reference.arrays import float32_array

__all__ = ["diag_gaussian_draw"]

_FN = "diag_gaussian_draw"
_HALF_LOG_2PI = np.float32(0.5 * math.log(2.0 * math.pi))


def diag_gaussian_draw(
    inputs: np.ndarray, noise: np.ndarray | None = None, bound: float = 20.0
) -> tuple[np.ndarray, np.ndarray]:
    """``(actions float32 [B, d], logp float32 [B])`` for float32 ``inputs`` ``[B, 2d]``."""
    inputs = float32_array(inputs, _FN, "inputs")
    if inputs.ndim != 2 or inputs.shape[1] % 2:
        raise ValueError(
            f"{_FN}: inputs must be [B, 2 * d] (d means, then d log-stds), got shape {inputs.shape}"
        )
    bound = float(bound)
    if not (bound >= 0.0 and math.isfinite(bound)):
        raise ValueError(f"{_FN}: bound must be finite and >= 0, got {bound!r}")
    rows, d = inputs.shape[0], inputs.shape[1] // 2
    if noise is not None:
        noise = float32_array(noise, _FN, "noise")
        if noise.shape != (rows, d):
            raise ValueError(
                f"{_FN}: noise must be [B, d] = ({rows}, {d}), got shape {noise.shape}"
            )
    mean = inputs[:, :d]
    limit = np.float32(bound)
    # np.clip's values, without its dispatch cost at a rollout's few rows
    log_std = np.minimum(np.maximum(inputs[:, d:], -limit), limit)
    if noise is not None:
        std = np.exp(log_std)
        actions = mean + std * noise
        z = (actions - mean) / std
        terms = -0.5 * z * z - log_std - _HALF_LOG_2PI
    else:
        actions = mean.copy()
        terms = -log_std - _HALF_LOG_2PI
    logp = np.zeros(rows, np.float32)
    for j in range(d):  # in index order, as the kernel sums
        logp = terms[:, j] if j == 0 else logp + terms[:, j]
    return np.ascontiguousarray(actions, np.float32), np.ascontiguousarray(logp, np.float32)
