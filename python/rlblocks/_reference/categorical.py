"""Numpy twin of ``rlblocks._core.categorical_draw``: a categorical draw per row of logits.

Torch's ``Categorical.sample`` in numpy: log-softmax, then the inverse CDF of one uniform
per row (the first index whose cumulative probability exceeds ``u * total``); without
uniforms the first maximum. float32 in the kernel's order of operations, the normaliser
and the cumulative probabilities summed in float64 in index order (exact to float32 for
any number of categories). It accepts and refuses the kernel's arguments with the
kernel's messages.

Examples:
    >>> import numpy as np
    >>> logits = np.log(np.array([[0.25, 0.75]], np.float32))
    >>> index, logp = categorical_draw(logits, np.array([0.5], np.float32))
    >>> int(index[0]), round(float(np.exp(logp[0])), 2)
    (1, 0.75)
"""

from __future__ import annotations

import numpy as np

from rlblocks._reference.arrays import float32_array

__all__ = ["categorical_draw"]

_FN = "categorical_draw"


def categorical_draw(
    logits: np.ndarray, uniforms: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(index int64 [B], logp float32 [B])`` for float32 ``logits`` ``[B, K]``."""
    logits = float32_array(logits, _FN, "logits")
    if logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError(f"{_FN}: logits must be [B, K] with K >= 1, got shape {logits.shape}")
    n, k = logits.shape
    if uniforms is not None:
        uniforms = float32_array(uniforms, _FN, "uniforms")
        if uniforms.shape != (n,):
            raise ValueError(f"{_FN}: uniforms must be [B] = [{n}], got shape {uniforms.shape}")
    finite = np.isfinite(logits).all(1)
    if not finite.all():
        raise ValueError(
            f"{_FN}: the distribution inputs of row {int(np.argmin(finite))} are "
            "not all finite (NaN or inf logits)"
        )
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    shifted = logits - logits.max(1, keepdims=True)
    # float64 sums in index order (cumsum is sequential, as the kernel's loop)
    total = np.cumsum(np.exp(shifted), 1, dtype=np.float64)[:, -1:]
    log_probs = shifted - np.log(total).astype(np.float32)
    del shifted
    if uniforms is None:
        index = logits.argmax(1)
    else:
        cdf = np.cumsum(np.exp(log_probs), 1, dtype=np.float64)
        last = cdf[:, -1]
        u = uniforms.astype(np.float64) * last
        u = np.minimum(u, np.nextafter(last, 0.0))
        index = np.minimum(np.count_nonzero(cdf <= u[:, None], axis=1), k - 1)
    return index.astype(np.int64), log_probs[np.arange(n), index].astype(np.float32)
