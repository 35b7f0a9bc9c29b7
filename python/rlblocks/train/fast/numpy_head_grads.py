"""The action heads' terms of the closed-form PPO update on numpy arrays.

:mod:`rlblocks.train.fast.head_grads` computes a minibatch's log-probabilities, entropy
and KL and their gradients with respect to the distribution inputs in torch; on a
minibatch of a few hundred rows every one of its few dozen tensor ops costs a few
microseconds of dispatch, more than its arithmetic, and a Tuple head pays them once per
child. When :class:`~rlblocks.train.fast.FCBackprop` runs its layers in numpy
(:mod:`rlblocks.train.fast.numpy_pass`), the head runs here instead: the same formulas
in the same order on the same float32 inputs (float64 works too: the tests' precision),
in fewer and cheaper numpy calls: one softmax per head over the padded ``[B * k, nmax]``
grid, row sums as BLAS products with a vector of ones and row maxima column by column
(numpy's reductions along a short last axis cost about 20x more), the taken actions'
log-probabilities by one flat index, no torch tensor in between.
:func:`numpy_head_grads` builds one from a torch head; :func:`mask_fill` is
:func:`rlblocks.masks.action_mask_fill` in numpy.

Only :meth:`FCBackprop.step` uses it (the mean over rows; RLlib's weighted loss stays on
the torch heads). The tests compare both with autograd through the torch distributions.

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks.distributions import Categorical
    >>> from rlblocks.train.fast.head_grads import head_grads
    >>> head = numpy_head_grads(head_grads(Categorical(torch.zeros(1, 3), None)))
    >>> out = np.zeros((2, 3), np.float32)
    >>> logp, d_logp, d_extra, entropy, kl = head.terms(out, np.array([0, 2]), out, 0, 0, False)
    >>> np.round(logp, 4).tolist(), d_extra is None
    ([-1.0986, -1.0986], True)
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import numpy as np
import torch

from rlblocks.distributions.base import _HALF_LOG_2PI, FLOAT_MIN, LOG_BOUND, MASK_THRESHOLD
from rlblocks.masks import MaskLayout
from rlblocks.train.fast.head_grads import (
    GaussianGrads,
    HeadGrads,
    LogitsGrads,
    MultiActionGrads,
)

__all__ = ["NumpyHead", "clip", "mask_fill", "numpy_head_grads", "ones", "row_max"]

#: ``(logp [B], d(logp)/d(inputs) [B, K], the entropy and KL terms' gradient [B, K] or None,
#: entropy, KL)``, arrays of the inputs' dtype (entropy and KL: 0-d).
Terms = tuple[np.ndarray, np.ndarray, "np.ndarray | None", np.ndarray, np.ndarray]

_F32_MIN = np.float32(FLOAT_MIN)
_ZERO = np.zeros((), np.float32)


class NumpyHead(Protocol):
    """What every numpy head answers."""

    width: int

    def terms(
        self,
        out: np.ndarray,
        actions: Any,
        old: np.ndarray,
        entropy_coeff: float,
        kl_coeff: float,
        record: bool,
    ) -> Terms:
        """:meth:`~rlblocks.train.fast.head_grads.HeadGrads.terms` on arrays (float32, or
        float64), the entropy and KL as means over the rows."""
        ...


def _array(x: Any) -> np.ndarray:
    """A leaf of the actions as a numpy array (torch tensors: a view)."""
    return x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


class NumpyLogits:
    """:class:`~rlblocks.train.fast.head_grads.LogitsGrads` in numpy."""

    def __init__(self, head: LogitsGrads) -> None:
        self.width, self.k, self.nmax = head.width, head.k, head.nmax
        self.offsets = None if head.offsets is None else head.offsets.numpy()
        self.illegal = None if head.illegal is None else head.illegal.numpy()
        self.masked, self.floored = head.masked, head.floored
        self.index = None if head.index is None else head.index.numpy()
        self.inverse = None  # the grid slot of every input column (each appears once)
        if self.index is not None:
            slots = np.flatnonzero(self.index < self.width)
            self.inverse = slots[np.argsort(self.index[slots])]

    def _log_probs(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(log_probs, probs)`` ``[B * k, nmax]`` as the distribution computes them (one
        row per component; masked, out-of-bounds and padding slots at ``FLOAT_MIN``)."""
        n = logits.shape[0]
        if self.masked:
            logits = np.where(logits <= MASK_THRESHOLD, _F32_MIN, logits)
        if self.illegal is not None:
            logits = np.where(self.illegal, _F32_MIN, logits)
        if self.index is not None:
            padded = np.empty((n, self.width + 1), logits.dtype)
            padded[:, : self.width] = logits
            padded[:, self.width] = _F32_MIN
            logits = padded[:, self.index]
        grid = logits.reshape(n * self.k, self.nmax)
        shifted = grid - row_max(grid)
        e = np.exp(shifted)
        total = e @ ones(self.nmax)
        log_probs = shifted - np.log(total)[:, None]
        if self.floored:
            np.maximum(log_probs, _F32_MIN, out=log_probs)
        return log_probs, e / total[:, None]

    def _flat(self, grid: np.ndarray, n: int) -> np.ndarray:
        """A gradient over the grid as one over the inputs ``[B, K]`` (padding dropped)."""
        flat = grid.reshape(n, self.k * self.nmax)
        return flat if self.inverse is None else flat[:, self.inverse]

    def terms(
        self,
        out: np.ndarray,
        actions: Any,
        old: np.ndarray,
        entropy_coeff: float,
        kl_coeff: float,
        record: bool,
    ) -> Terms:
        """See :meth:`NumpyHead.terms`."""
        n, k, nmax = out.shape[0], self.k, self.nmax
        log_probs, probs = self._log_probs(out)  # [n * k, nmax]
        index = _array(actions).reshape(n * k)
        if index.dtype != np.int64:
            index = np.round(index).astype(np.int64)
        if self.offsets is not None:
            index = (index.reshape(n, k) - self.offsets).reshape(n * k)
        picked = log_probs.reshape(-1)[_row_starts(n * k, nmax) + index]
        logp = picked if k == 1 else picked.reshape(n, k) @ ones(k)
        d_logp = (index[:, None] == _arange(nmax)).astype(out.dtype)
        d_logp -= probs
        entropy, kl, d_extra = _ZERO, _ZERO, None
        if entropy_coeff != 0.0 or record:
            comp_entropy = -((probs * log_probs) @ ones(nmax))  # [n * k]
            entropy = comp_entropy.sum() / n
            if entropy_coeff != 0.0:  # d(-c * mean H)/d(logits) = c/n * p (log p + H)
                d_extra = probs * (log_probs + comp_entropy[:, None])
                d_extra *= entropy_coeff / n
        if kl_coeff > 0.0 or record:
            old_log_probs, old_probs = self._log_probs(old)
            kl = (old_probs * (old_log_probs - log_probs)).sum() / n
            if kl_coeff > 0.0:  # d KL(old || new)/d(new logits) = p_new - p_old
                d_kl = (probs - old_probs) * (kl_coeff / n)
                d_extra = d_kl if d_extra is None else d_extra + d_kl
        return (
            logp,
            self._flat(d_logp, n),
            None if d_extra is None else self._flat(d_extra, n),
            entropy,
            kl,
        )


class NumpyGaussian:
    """:class:`~rlblocks.train.fast.head_grads.GaussianGrads` in numpy (the model's
    ``free_log_std``, when it has one, read from its parameter)."""

    def __init__(self, head: GaussianGrads) -> None:
        self.dims, self.width = head.dims, head.width
        self.free_log_std = head.free_log_std

    def terms(
        self,
        out: np.ndarray,
        actions: Any,
        old: np.ndarray,
        entropy_coeff: float,
        kl_coeff: float,
        record: bool,
    ) -> Terms:
        """See :meth:`NumpyHead.terms` (``d logp / d inputs`` has ``2 * dims`` columns)."""
        n, k = out.shape[0], self.dims
        if self.free_log_std is not None:
            mean = out
            raw_log_std = np.broadcast_to(self.free_log_std.detach().numpy(), (n, k))
        else:
            mean, raw_log_std = out[:, :k], out[:, k:]
        in_bounds: Any = None  # the clamp to +-LOG_BOUND: the identity inside (the usual case)
        log_std = raw_log_std
        if np.abs(raw_log_std).max() > LOG_BOUND:
            log_std = clip(raw_log_std, -LOG_BOUND, LOG_BOUND)
            in_bounds = (np.abs(raw_log_std) <= LOG_BOUND).astype(out.dtype)
        # (each formula in head_grads' and the distribution's order of rounding)
        std = np.exp(log_std)
        z = (_array(actions).reshape(n, k).astype(out.dtype, copy=False) - mean) / std
        z2 = z * z
        d_logp = np.empty((n, 2 * k), out.dtype)
        np.divide(z, std, out=d_logp[:, :k])  # d logp / d mean = z / std
        np.subtract(z2, 1.0, out=d_logp[:, k:])  # d logp / d log_std = z^2 - 1
        if in_bounds is not None:
            d_logp[:, k:] *= in_bounds
        logp = -0.5 * z2 - log_std - _HALF_LOG_2PI
        logp = logp[:, 0] if k == 1 else logp @ ones(k)
        entropy, kl, d_extra = _ZERO, _ZERO, None
        if entropy_coeff != 0.0 or record:
            entropy = (log_std + (0.5 + _HALF_LOG_2PI)).sum() / n
            if entropy_coeff != 0.0:
                d_extra = np.zeros((n, 2 * k), out.dtype)
                d_extra[:, k:] = (
                    -entropy_coeff / n if in_bounds is None else in_bounds * (-entropy_coeff / n)
                )
        if kl_coeff > 0.0 or record:
            old_mean = old[:, :k]
            old_log_std = clip(old[:, k : 2 * k], -LOG_BOUND, LOG_BOUND)
            diff = old_log_std - log_std
            var_ratio = np.exp(2.0 * diff)
            t = (old_mean - mean) / std
            t *= t
            kl = (0.5 * (var_ratio + t - 1.0) - diff).sum() / n
            if kl_coeff > 0.0:
                scale = kl_coeff / n
                if d_extra is None:
                    d_extra = np.zeros((n, 2 * k), out.dtype)
                d_extra[:, :k] += (mean - old_mean) / (std * std) * scale
                d_kl_log_std = (1.0 - var_ratio - t) * scale
                if in_bounds is not None:
                    d_kl_log_std *= in_bounds
                d_extra[:, k:] += d_kl_log_std
        return logp, d_logp, d_extra, entropy, kl


class NumpyMultiAction:
    """:class:`~rlblocks.train.fast.head_grads.MultiActionGrads` in numpy: the children on
    consecutive column slices, the terms summed, the gradients side by side."""

    def __init__(self, head: MultiActionGrads) -> None:
        self.children = [numpy_head_grads(c) for c in head.children]
        self.paths = head.paths
        self.width = head.width
        bounds = np.cumsum([0, *head.lens])
        self.slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def terms(
        self,
        out: np.ndarray,
        actions: Any,
        old: np.ndarray,
        entropy_coeff: float,
        kl_coeff: float,
        record: bool,
    ) -> Terms:
        """See :meth:`NumpyHead.terms` (``actions``: the action space's structure)."""
        n = out.shape[0]
        d_logp = np.empty((n, self.width), out.dtype)
        d_extra: np.ndarray | None = None
        logp, entropy, kl = None, _ZERO, _ZERO
        for head, path, cols in zip(self.children, self.paths, self.slices, strict=True):
            leaf = actions
            for key in path:
                leaf = leaf[key]
            lp, dl, de, ent, kl_part = head.terms(
                out[:, cols], leaf, old[:, cols], entropy_coeff, kl_coeff, record
            )
            logp = lp if logp is None else logp + lp
            entropy, kl = entropy + ent, kl + kl_part
            d_logp[:, cols] = dl
            if de is not None:
                if d_extra is None:
                    d_extra = np.zeros((n, self.width), out.dtype)
                d_extra[:, cols] = de
        assert logp is not None
        return logp, d_logp, d_extra, entropy, kl


@functools.lru_cache(maxsize=32)
def ones(n: int) -> np.ndarray:
    """A read-only float32 vector of ``n`` ones: ``x @ ones(c)`` sums the rows of ``x``
    ``[m, c]`` (BLAS: several times faster than ``x.sum(1)`` for a few columns)."""
    v = np.ones(n, np.float32)
    v.flags.writeable = False
    return v


@functools.lru_cache(maxsize=32)
def _arange(n: int) -> np.ndarray:
    v = np.arange(n)
    v.flags.writeable = False
    return v


@functools.lru_cache(maxsize=32)
def _row_starts(rows: int, width: int) -> np.ndarray:
    """The flat index of the first entry of each row of a ``[rows, width]`` array."""
    v = np.arange(rows) * width
    v.flags.writeable = False
    return v


def clip(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``np.clip(x, lo, hi)`` (the same values, NaN passing through) without its dispatch,
    which costs more than the arithmetic on a minibatch."""
    return np.minimum(np.maximum(x, lo), hi)


def row_max(x: np.ndarray) -> np.ndarray:
    """The maximum of each row of ``x`` ``[m, c]`` as a column ``[m, 1]`` (for a few
    columns one elementwise maximum per column: numpy's reduction along a short last axis
    costs about 20x more)."""
    c = x.shape[1]
    if c > 16:
        return x.max(1, keepdims=True)
    m = x[:, :1].copy()
    for j in range(1, c):
        np.maximum(m, x[:, j : j + 1], out=m)
    return m


def numpy_head_grads(head: HeadGrads) -> NumpyHead:
    """The numpy twin of a :func:`~rlblocks.train.fast.head_grads.head_grads` head."""
    if isinstance(head, LogitsGrads):
        return NumpyLogits(head)
    if isinstance(head, GaussianGrads):
        return NumpyGaussian(head)
    if isinstance(head, MultiActionGrads):
        return NumpyMultiAction(head)
    raise TypeError(f"no numpy terms for {type(head).__name__}")


def mask_fill(mask: np.ndarray, layout: MaskLayout) -> np.ndarray:
    """:func:`rlblocks.masks.action_mask_fill` in numpy: bool ``[B, num_outputs]``, the
    outputs set to ``FLOAT_MIN`` for the mask rows ``mask [B, size]`` (a component with no
    legal entry left open)."""
    legal, illegal = mask > 0, mask <= 0
    for start, end in layout.segments:
        some = legal[:, start].copy()  # any legal entry in the block (column by column: see
        for j in range(start + 1, end):  # row_max)
            some |= legal[:, j]
        if not some.all():
            illegal[~some, start:end] = False
    if layout.size == layout.num_outputs and all(p[0] == "mask" for p in layout.pieces):
        return illegal  # every output is a mask entry, in order
    parts = []
    for kind, a, b in layout.pieces:
        parts.append(illegal[:, a:b] if kind == "mask" else np.zeros((len(mask), a), bool))
    return np.concatenate(parts, 1)
