"""The distribution kernels' share of the differential fuzzer (tools/fuzz_flatten.py).

Random calls of ``categorical_draw``, ``masked_categorical_draw``, ``diag_gaussian_draw``,
of ``squashed_gaussian_sample`` / ``_grad`` and of the actor's ``dense_forward`` (random
stacks of layers, some with a wrong width, dtype, tuple or activation): random
shapes (B = 0 included) and dtypes, lists, 0-d and 1-d arrays, non-contiguous and read-only
arrays, NaN / inf / huge values, NaN and inverted log-std bounds, arguments of the wrong
size. Both implementations must accept the same calls, give the same values (to float32
rounding: the kernel's exp / tanh are libm's or its own, the twin's numpy's) and refuse
with the same message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

BAD_VALUES = (np.nan, np.inf, -np.inf, 1e30, -1e30, 3.4e38)
DTYPES = ("float32",) * 6 + ("float64", "float16", "int32", "int64", "bool")


def _array(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> Any:
    """A random argument: mostly a float32 array of ``shape``, sometimes the wrong dtype,
    shape or type, a strided or read-only view, or one holding a bad value."""
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    roll = rng.random()
    if roll < 0.08 and x.size:
        x.flat[int(rng.integers(x.size))] = BAD_VALUES[int(rng.integers(len(BAD_VALUES)))]
    elif roll < 0.14:
        x = x.astype(DTYPES[int(rng.integers(len(DTYPES)))])
    elif roll < 0.18:
        return x.tolist()
    elif roll < 0.22 and x.ndim:
        x = x[..., None] if rng.random() < 0.5 else x.reshape(-1)
    elif roll < 0.26:
        wide = np.repeat(x, 2, axis=-1) if x.ndim else x
        x = wide[..., ::2] if x.ndim else wide
    elif roll < 0.30:
        x.setflags(write=False)
    elif roll < 0.33:
        x = np.float32(1.0)
    return x


def _calm_log_stds(x: Any) -> Any:
    """``x`` with its finite log-stds (a float32 ``[B, 2d]``'s second half) within
    ``[-3, 0]``: a large std puts ``tanh(z)`` where one implementation rounds it to +-1
    and the other does not, and the action clamp then passes half the gradient in one only.
    NaN stays (NaN on both); huge means saturate both alike."""
    if not (isinstance(x, np.ndarray) and x.dtype == np.float32 and x.ndim == 2):
        return x
    if x.shape[1] % 2:
        return x
    read_only = not x.flags.writeable
    y = x.copy() if read_only else x
    d = x.shape[1] // 2
    log_std = y[:, d:]
    y[:, d:] = np.where(np.isnan(log_std), log_std, np.clip(log_std, -3.0, 0.0))
    if read_only:
        y.setflags(write=False)
    return y


def _bounds(rng: np.random.Generator) -> tuple[float, float]:
    roll = rng.random()
    if roll < 0.05:
        return float("nan"), 2.0
    if roll < 0.1:
        return 2.0, -5.0
    if roll < 0.15:
        return -float("inf"), float("inf")
    return -20.0, 2.0


# How far the two implementations' values may be apart: a categorical's log-probabilities
# to about an ulp; the squashed Gaussian's log(1 - tanh**2 + 1e-6) turns an ulp of tanh
# near +-1 into up to a percent of the log-density and of its gradient.
# The dense stack's sums run in another order than numpy's BLAS (a few ulps of the terms).
CATEGORICAL_TOL, SQUASHED_TOL, DENSE_TOL = 1e-5, 2e-2, 1e-4


def _dense_layers(rng: np.random.Generator, width: int) -> Any:
    """A random stack for ``dense_forward`` taking ``width`` inputs: mostly valid (1-3
    layers, widths across a block of 8), sometimes one layer wrong in one way."""
    layers: list[Any] = []
    for _ in range(int(rng.integers(0, 4))):
        out = int(rng.choice([1, 3, 8, 9, 17]))
        w = (rng.standard_normal((out, width)) / np.sqrt(max(width, 1))).astype(np.float32)
        b = (rng.standard_normal(out) * 0.1).astype(np.float32)
        act = [None, "tanh", "relu"][int(rng.integers(3))]
        layers.append((w, b, act))
        width = out
    if layers and rng.random() < 0.2:
        i = int(rng.integers(len(layers)))
        w, b, act = layers[i]
        roll = rng.random()
        if roll < 0.2:
            layers[i] = (w[:, :-1], b, act)
        elif roll < 0.35:
            layers[i] = (w.astype(np.float64), b, act)
        elif roll < 0.5:
            layers[i] = (w, b[:-1], act)
        elif roll < 0.65:
            layers[i] = (w, b, "elu")
        elif roll < 0.8:
            layers[i] = [w, b, act]
        else:
            layers[i] = (w, b)
    return layers if rng.random() < 0.95 else tuple(layers) if rng.random() < 0.5 else {}


def kernel_calls(seed: int) -> Iterator[tuple[str, Callable[[], Any], float]]:
    """Case ``seed``'s kernel calls with this process's implementation: (name, call, the
    tolerance of its values)."""
    from rlblocks import _core, _impl
    from rlblocks._reference import categorical, dense, diag_gaussian, squashed_gaussian

    native = _impl.native()
    draw = _core.categorical_draw if native else categorical.categorical_draw
    sample = (
        _core.squashed_gaussian_sample if native else squashed_gaussian.squashed_gaussian_sample
    )
    grad = _core.squashed_gaussian_grad if native else squashed_gaussian.squashed_gaussian_grad
    masked = _core.masked_categorical_draw if native else categorical.masked_categorical_draw
    gaussian = _core.diag_gaussian_draw if native else diag_gaussian.diag_gaussian_draw
    dense_fn = _core.dense_forward if native else dense.dense_forward
    rng = np.random.default_rng([seed, 3])
    for _ in range(4):
        b, k = int(rng.choice([0, 1, 2, 5])), int(rng.choice([1, 2, 3, 7]))
        if rng.random() < 0.05:
            k = 0
        logits = _array(rng, (b, k), float(rng.choice([1.0, 10.0, 100.0])))
        uniforms = None if rng.random() < 0.2 else _array(rng, (b,), 0.3)
        if isinstance(uniforms, np.ndarray) and uniforms.dtype == np.float32:
            uniforms = np.abs(uniforms) % np.float32(1.0)
        if rng.random() < 0.1:
            uniforms = _array(rng, (b + 1,), 0.3)
        yield "categorical_draw", lambda x=logits, u=uniforms: draw(x, u), CATEGORICAL_TOL
        mask = _array(rng, (b, k) if rng.random() < 0.9 else (b, k + 1), 1.0)
        yield (
            "masked_categorical_draw",
            lambda x=logits, m=mask, u=uniforms: masked(x, m, u),
            CATEGORICAL_TOL,
        )
    for _ in range(4):
        b, d = int(rng.choice([0, 1, 2, 5])), int(rng.choice([1, 2, 3]))
        cols = 2 * d + (1 if rng.random() < 0.05 else 0)
        inputs = _calm_log_stds(_array(rng, (b, cols), 0.3))  # |z| < ~5: tanh not near +-1
        noise = _array(rng, (b, d), 1.0)
        if rng.random() < 0.1:
            noise = _array(rng, (b + 1, d), 1.0)
        d_action = _array(rng, (b, d) if rng.random() < 0.9 else (2, 1), 1.0)
        low, high = _bounds(rng)
        coef = float(rng.choice([0.0, 0.2, -1.5]))
        bound = float(rng.choice([20.0, 2.0, 0.0, -1.0, np.nan]))
        yield (
            "diag_gaussian_draw",
            lambda i=inputs, n=noise, bd=bound: gaussian(i, n, bd),
            CATEGORICAL_TOL,
        )
        yield (
            "squashed_gaussian_sample",
            lambda i=inputs, n=noise, lo=low, hi=high: sample(i, n, lo, hi),
            SQUASHED_TOL,
        )
        yield (
            "squashed_gaussian_grad",
            lambda i=inputs, n=noise, a=d_action, c=coef, lo=low, hi=high: grad(i, n, a, c, lo, hi),
            SQUASHED_TOL,
        )

    for _ in range(2):
        b, width = int(rng.choice([0, 1, 2, 8, 13])), int(rng.choice([1, 4, 8, 11]))
        x = _array(rng, (b, width), float(rng.choice([1.0, 3.0])))
        layers = _dense_layers(rng, width)
        yield "dense_forward", lambda x=x, ls=layers: dense_fn(x, ls), DENSE_TOL


def flat_values(result: Any) -> tuple[np.ndarray, list[Any]]:
    """A kernel's result as one float64 vector, and its parts' (shape, dtype)."""
    parts = result if isinstance(result, tuple) else (result,)
    arrays = [np.asarray(p) for p in parts]
    meta = [[list(a.shape), str(a.dtype)] for a in arrays]
    values = np.concatenate([a.astype(np.float64).ravel() for a in arrays] or [np.zeros(0)])
    return values, meta
