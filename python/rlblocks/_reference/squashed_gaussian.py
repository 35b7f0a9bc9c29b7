"""Numpy twins of ``rlblocks._core.squashed_gaussian_sample`` / ``squashed_gaussian_grad``.

SAC's squashed Gaussian over ``[-1, 1]`` (:class:`~rlblocks.distributions.SquashedGaussian`
with ``low=-1, high=1``) for inputs ``[B, 2d]`` (means, then log-stds) and standard-normal
draws ``[B, d]``: the reparameterised action and its log-density, and the gradient with
respect to the inputs of ``sum(d_action * action) + coef * sum(logp)``, through every clamp
as torch differentiates it. float32, in the kernel's order of operations; the same
arguments accepted and refused as by the kernel, with its messages.

Examples:
    >>> import numpy as np
    >>> inputs = np.array([[0.0, 0.0]], np.float32)    # mean 0, log-std 0
    >>> action, logp = squashed_gaussian_sample(inputs, np.zeros((1, 1), np.float32), -5, 2)
    >>> action.tolist(), round(float(logp[0]), 4)    # tanh(0) = 0: the Normal's log-density
    ([[0.0]], -0.9189)
    >>> squashed_gaussian_grad(inputs, np.zeros((1, 1), np.float32),
    ...                        np.ones((1, 1), np.float32), 0.0, -5, 2).tolist()
    [[1.0, 0.0]]
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from rlblocks._reference.arrays import float32_array

__all__ = ["squashed_gaussian_grad", "squashed_gaussian_sample"]

# rlblocks.distributions.base's constants (the twin stays below the torch layer; the kernel
# tests check that they agree)
SMALL_NUMBER = 1e-6
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)

_DENSITY_BOUND = 100.0


class _Forward(NamedTuple):
    log_std: np.ndarray
    std: np.ndarray
    t: np.ndarray
    squashed: np.ndarray
    scaled: np.ndarray
    density: np.ndarray
    jacobian: np.ndarray


def _forward(inputs: np.ndarray, noise: np.ndarray, low: float, high: float) -> _Forward:
    d = inputs.shape[1] // 2
    mean, raw_log_std = inputs[:, :d], inputs[:, d:]
    log_std = np.clip(raw_log_std, np.float32(low), np.float32(high))
    std = np.exp(log_std)
    z = mean + std * noise
    t = np.tanh(z)
    squashed = (t + 1.0) / 2.0 * 2.0 + -1.0  # SquashedGaussian's squash into [-1, 1]
    scaled = (z - mean) / std
    density = -0.5 * scaled * scaled - log_std - _HALF_LOG_2PI
    jacobian = 1.0 - t * t + SMALL_NUMBER
    return _Forward(log_std, std, t, squashed, scaled, density, jacobian)


def _matrix(obj: object, fn: str, what: str, rows: int, cols: int) -> np.ndarray:
    """The binding's ``matrix``: a float32 ``[rows, cols]`` array; ``cols < 0`` accepts any
    even number of columns >= 2 (and any rows)."""
    a = float32_array(obj, fn, what)
    if cols < 0:
        ok = a.ndim == 2 and a.shape[1] >= 2 and a.shape[1] % 2 == 0
        want = "[B, 2d] (means, then log-stds; d >= 1)"
    else:
        ok = a.shape == (rows, cols)
        want = f"[{rows}, {cols}]"
    if not ok:
        raise ValueError(f"{fn}: {what} must be {want}, got shape {a.shape}")
    return a


def _checked(
    fn: str, inputs: object, noise: object, low: float, high: float
) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's checks, in its order: the bounds, then inputs, then noise."""
    if not low <= high:
        raise ValueError(
            f"{fn}: log_std bounds must satisfy low <= high (not NaN), got "
            f"[{float(low)!r}, {float(high)!r}]"
        )
    a = _matrix(inputs, fn, "inputs", -1, -1)
    rows, d = a.shape[0], a.shape[1] // 2
    return a, _matrix(noise, fn, "noise", rows, d)


def squashed_gaussian_sample(
    inputs: np.ndarray, noise: np.ndarray, log_std_low: float, log_std_high: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(action float32 [B, d], logp float32 [B])``: ``action = clamp(squash(mean + std *
    noise), -1, 1)`` with the log-std clamped to ``[log_std_low, log_std_high]``, ``logp``
    the clamped Normal log-density minus ``sum log(1 - tanh^2 + 1e-6)``."""
    inputs, noise = _checked("squashed_gaussian_sample", inputs, noise, log_std_low, log_std_high)
    f = _forward(inputs, noise, log_std_low, log_std_high)
    action = np.clip(f.squashed, -1.0, 1.0)
    bound = _DENSITY_BOUND
    logp = np.clip(f.density, -bound, bound).sum(-1) - np.log(f.jacobian).sum(-1)
    return action, logp


def squashed_gaussian_grad(
    inputs: np.ndarray,
    noise: np.ndarray,
    d_action: np.ndarray,
    coef: float,
    log_std_low: float,
    log_std_high: float,
) -> np.ndarray:
    """float32 ``[B, 2d]``: the gradient, with respect to ``inputs``, of ``sum(d_action *
    action) + coef * sum(logp)`` for :func:`squashed_gaussian_sample`'s draw. A clamp passes
    the gradient inside its bounds (bounds included); the action's clamp at exactly ``+-1``
    passes half (a tie of ``torch.maximum`` / ``torch.minimum``)."""
    fn = "squashed_gaussian_grad"
    inputs, noise = _checked(fn, inputs, noise, log_std_low, log_std_high)
    d_action = _matrix(d_action, fn, "d_action", inputs.shape[0], inputs.shape[1] // 2)
    coef = float(coef)  # the kernel's double, then float32 where it is used
    f = _forward(inputs, noise, log_std_low, log_std_high)
    at_bound = (f.squashed == 1.0) | (f.squashed == -1.0)
    d_t = np.where(at_bound, 0.5 * d_action, d_action)
    # the Jacobian term -sum log(1 - t^2 + eps) of coef * logp
    d_t = d_t + coef * 2.0 * f.t / f.jacobian
    d_z = d_t * (1.0 - f.t * f.t)
    # the clamped Normal density of z = mean + std * noise
    bound = _DENSITY_BOUND
    inside = ((f.density >= -bound) & (f.density <= bound)) * np.float32(coef)
    d_z = d_z - inside * f.scaled / f.std
    d_mean = d_z + inside * f.scaled / f.std
    d_std = d_z * noise + inside * f.scaled * f.scaled / f.std
    d_log_std = d_std * f.std - inside
    raw = inputs[:, inputs.shape[1] // 2 :]
    low, high = np.float32(log_std_low), np.float32(log_std_high)
    d_raw = d_log_std * ((raw >= low) & (raw <= high))
    return np.concatenate([d_mean, d_raw], 1).astype(np.float32, copy=False)
