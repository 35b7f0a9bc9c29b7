"""Numpy twin of ``rlblocks._core.categorical_draw``: a categorical draw per row of logits.

Torch's ``Categorical.sample`` in numpy: log-softmax, then the inverse CDF of one uniform
per row (the first index whose cumulative probability exceeds ``u * total``); without
uniforms the first maximum. float32 in the kernel's order of operations.

Examples:
    >>> import numpy as np
    >>> logits = np.log(np.array([[0.25, 0.75]], np.float32))
    >>> index, logp = categorical_draw(logits, np.array([0.5], np.float32))
    >>> int(index[0]), round(float(np.exp(logp[0])), 2)
    (1, 0.75)
"""

from __future__ import annotations

import numpy as np

__all__ = ["categorical_draw"]


def categorical_draw(
    logits: np.ndarray, uniforms: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(index int64 [B], logp float32 [B])`` for float32 ``logits`` ``[B, K]``."""
    logits = np.asarray(logits)
    if logits.dtype != np.float32 or logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError(
            f"categorical_draw: logits must be float32 [B, K], got {logits.dtype} {logits.shape}"
        )
    finite = np.isfinite(logits).all(1)
    if not finite.all():
        raise ValueError(
            f"categorical_draw: the distribution inputs of row {int(np.argmin(finite))} are "
            "not all finite (NaN or inf logits)"
        )
    n, k = logits.shape
    shifted = logits - logits.max(1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    if uniforms is None:
        index = logits.argmax(1)
    else:
        cdf = np.cumsum(np.exp(log_probs), 1)
        total = cdf[:, -1]
        u = np.asarray(uniforms, np.float32) * total
        u = np.minimum(u, np.nextafter(total, np.float32(0.0)))
        index = np.minimum(np.count_nonzero(cdf <= u[:, None], axis=1), k - 1)
    return index.astype(np.int64), log_probs[np.arange(n), index].astype(np.float32)
