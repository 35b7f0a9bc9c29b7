"""Numpy twins of ``rlblocks._core.categorical_draw`` and ``masked_categorical_draw``: a
categorical draw per row of logits, plain or through an action mask.

Torch's ``Categorical.sample`` in numpy: log-softmax, then the inverse CDF of one uniform
per row (the first index whose cumulative probability exceeds ``u * total``); without
uniforms the first maximum. float32 in the kernel's order of operations, the normaliser
and the cumulative probabilities summed in float64 in index order (exact to float32 for
any number of categories). It accepts and refuses the kernel's arguments with the
kernel's messages. The masked draw sets the masked logits to ``FLOAT_MIN`` (the
distribution inputs), then draws as ``MaskedCategorical`` does: every value ``<= -1e8``
counts as masked.

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

__all__ = ["categorical_draw", "masked_categorical_draw"]

_FN = "categorical_draw"
_MASKED = "masked_categorical_draw"
#: ``torch.finfo(torch.float32).min`` and the masked rule's threshold (the kernel's).
_FLOAT_MIN = np.float32(np.finfo(np.float32).min)
_THRESHOLD = np.float32(-1e8)


def categorical_draw(
    logits: np.ndarray, uniforms: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(index int64 [B], logp float32 [B])`` for float32 ``logits`` ``[B, K]``."""
    logits = float32_array(logits, _FN, "logits")
    if logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError(f"{_FN}: logits must be [B, K] with K >= 1, got shape {logits.shape}")
    n, k = logits.shape
    uniforms = _uniforms(uniforms, n, _FN)
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


def _uniforms(uniforms: np.ndarray | None, n: int, fn: str) -> np.ndarray | None:
    if uniforms is None:
        return None
    uniforms = float32_array(uniforms, fn, "uniforms")
    if uniforms.shape != (n,):
        raise ValueError(f"{fn}: uniforms must be [B] = [{n}], got shape {uniforms.shape}")
    return uniforms


def masked_categorical_draw(
    logits: np.ndarray, mask: np.ndarray, uniforms: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(masked float32 [B, K], index int64 [B], logp float32 [B])`` for float32 ``logits``
    and ``mask`` ``[B, K]``: the logits with ``FLOAT_MIN`` where ``mask <= 0``, and
    :func:`categorical_draw` on them with every value ``<= -1e8`` at ``FLOAT_MIN``.
    Refuses (ValueError, nothing drawn) a mask row without an entry ``> 0``, then a row
    with no value above ``-1e8``, then non-finite logits."""
    logits = float32_array(logits, _MASKED, "logits")
    if logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError(f"{_MASKED}: logits must be [B, K] with K >= 1, got shape {logits.shape}")
    mask = float32_array(mask, _MASKED, "mask")
    if mask.shape != logits.shape:
        raise ValueError(
            f"{_MASKED}: mask must be shaped as the logits {logits.shape}, got shape {mask.shape}"
        )
    uniforms = _uniforms(uniforms, len(logits), _MASKED)
    no_entry = ~(mask > 0).any(1)
    if no_entry.any():
        row = int(np.argmax(no_entry))
        raise ValueError(f"{_MASKED}: mask row {row} has no entry > 0 (no legal action)")
    masked = np.where(mask <= 0, _FLOAT_MIN, logits)
    below = masked <= _THRESHOLD
    closed = below.all(1)
    if closed.any():
        raise ValueError(
            f"{_MASKED}: row {int(np.argmax(closed))} has no legal logit above -1e8 "
            "(a logit <= -1e8 counts as masked)"
        )
    floored = np.where(below, _FLOAT_MIN, masked)
    finite = np.isfinite(floored).all(1)
    if not finite.all():
        raise ValueError(
            f"{_MASKED}: the distribution inputs of row {int(np.argmin(finite))} are "
            "not all finite (NaN or inf logits)"
        )
    index, logp = categorical_draw(floored, uniforms)
    return masked, index, logp
