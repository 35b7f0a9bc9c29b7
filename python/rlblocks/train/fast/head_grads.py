"""The action heads' part of the closed-form PPO update: log-probabilities, entropy and KL of
a minibatch, and their gradients with respect to the distribution inputs.

:class:`~rlblocks.train.fast.FCBackprop` runs the model forward and backward; the head in
between is one of these, picked by :func:`head_grads` from a distribution instance:

* :class:`LogitsGrads`: Categorical (temperature 1), MultiCategorical (MultiDiscrete and
  integer Box actions) and their masked twins (MaskedCategorical, MaskedMultiCategorical):
  one softmax per component over a ``[B, k, nmax]`` grid of logits, blocks padded with
  ``FLOAT_MIN`` as the distribution pads them. A masked (or padded) slot has probability 0,
  so it adds nothing to entropy or KL and gets no gradient from them;
* :class:`GaussianGrads`: DiagGaussian (means then log-stds, or a model's free log-stds);
* :class:`MultiActionGrads`: MultiActionDistribution over Tuple / Dict actions whose
  children are the heads above: each child on its slice of the inputs, log-probs,
  entropies and KLs summed as the distribution sums them.

Every head answers :meth:`terms` with ``(logp [B], d logp / d inputs [B, K], the entropy and
KL terms' gradient [B, K] or None, entropy, KL)``: the entropy and KL are means over the
rows, or ``weights``-weighted sums (RLlib's loss mask). The tests compare each head with
autograd through the torch distribution.

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks.distributions import MultiCategorical
    >>> space = gym.spaces.MultiDiscrete([2, 3])
    >>> head = head_grads(MultiCategorical(torch.zeros(1, 5), None, action_space=space))
    >>> type(head).__name__, head.width
    ('LogitsGrads', 5)
    >>> head_grads(MultiCategorical(torch.zeros(1, 5), None, action_space=space), True)
    'MultiCategorical head with free_log_std'
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

from rlblocks.distributions import (
    Categorical,
    DiagGaussian,
    MaskedCategorical,
    MaskedMultiCategorical,
    MultiActionDistribution,
    MultiCategorical,
)
from rlblocks.distributions.base import _HALF_LOG_2PI, FLOAT_MIN, LOG_BOUND, MASK_THRESHOLD
from rlblocks.distributions.categorical import _multi_categorical_layout

__all__ = ["GaussianGrads", "HeadGrads", "LogitsGrads", "MultiActionGrads", "head_grads"]

#: ``(logp [B], d(logp)/d(inputs) [B, K], the entropy and KL terms' gradient [B, K] or None,
#: entropy, KL)``.
Terms = tuple[torch.Tensor, torch.Tensor, "torch.Tensor | None", torch.Tensor, torch.Tensor]


class HeadGrads(Protocol):
    """What every head answers."""

    width: int  # the distribution inputs it takes (the model's outputs for it)

    def terms(
        self,
        out: torch.Tensor,
        actions: Any,
        old: torch.Tensor,
        entropy_coeff: float,
        kl_coeff: float,
        weights: torch.Tensor | None,
        record: bool,
    ) -> Terms:
        """The terms for inputs ``out [B, K]``, the taken ``actions`` and the sampling
        policy's inputs ``old [B, K]``; entropy and KL are computed when their coefficient
        is on or with ``record`` (else 0), their gradient when the coefficient is on."""
        ...


def mean_rows(rows: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """The mean over the rows, or their ``weights``-weighted sum."""
    return rows.mean() if weights is None else (rows * weights).sum()


def row_scale(coeff: float, weights: torch.Tensor | None, n: int) -> Any:
    """``coeff`` times d(mean)/d(row): ``coeff / n``, or ``coeff * weights`` as a column."""
    return coeff / n if weights is None else (weights * coeff).unsqueeze(1)


class LogitsGrads:
    """Categorical / MultiCategorical and their masked twins (see the module docstring).

    Args:
        lens: Categories per component (one component for a Categorical).
        offsets: The lowest action of each component (a Discrete's ``start``).
        out_of_bounds: Float ``[K]``, 1.0 for a category outside its element's bounds (an
            integer Box with per-element bounds), else None.
        masked: A masked distribution: a logit ``<= -1e8`` marks a masked action.
        floored: Inputs may hold ``FLOAT_MIN`` logits (an action-mask model's): the
            log-probabilities are floored at ``FLOAT_MIN`` as the distribution floors them
            (otherwise no finite logit reaches the floor, and the clamp is skipped).
    """

    def __init__(
        self,
        lens: list[int],
        offsets: np.ndarray,
        out_of_bounds: np.ndarray | None,
        masked: bool,
        floored: bool = False,
    ) -> None:
        self.width = sum(lens)
        self.k, self.nmax = len(lens), max(lens)
        self.offsets = torch.as_tensor(offsets, dtype=torch.int64) if np.any(offsets) else None
        self.illegal = None if out_of_bounds is None else torch.as_tensor(out_of_bounds > 0)
        self.masked = masked
        self.floored = floored or masked or out_of_bounds is not None
        self.index: torch.Tensor | None = None  # gathers the blocks into the padded grid
        if any(n != self.nmax for n in lens):
            index = np.full((self.k, self.nmax), self.width, np.int64)
            start = 0
            for i, n in enumerate(lens):
                index[i, :n] = np.arange(start, start + n)
                start += n
            self.index = torch.as_tensor(index.ravel())

    def _log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Normalised log-probabilities ``[B, k, nmax]`` as the distribution computes them
        (masked, out-of-bounds and padding slots at ``FLOAT_MIN``)."""
        n = logits.shape[0]
        if self.masked:
            logits = logits.masked_fill(logits <= MASK_THRESHOLD, FLOAT_MIN)
        if self.illegal is not None:
            logits = logits.masked_fill(self.illegal, FLOAT_MIN)
        if self.index is not None:
            pad = logits.new_full((n, 1), FLOAT_MIN)
            logits = torch.cat([logits, pad], 1).index_select(1, self.index)
        log_probs = torch.log_softmax(logits.reshape(n, self.k, self.nmax), 2)
        return log_probs.clamp_min(FLOAT_MIN) if self.floored else log_probs

    def _flat(self, grid: torch.Tensor) -> torch.Tensor:
        """A gradient over the grid ``[B, k, nmax]`` as one over the inputs ``[B, K]``
        (padding slots dropped). A floored slot's gradient passes to its input, as through
        the distribution's ``clamp_min``; its probability is 0, so it is 0 unless the
        action taken there was masked."""
        n = grid.shape[0]
        flat = grid.reshape(n, self.k * self.nmax)
        if self.index is None:
            return flat
        return flat.new_zeros((n, self.width + 1)).index_add_(1, self.index, flat)[:, : self.width]

    def terms(
        self,
        out: torch.Tensor,
        actions: Any,
        old: torch.Tensor,
        entropy_coeff: float,
        kl_coeff: float,
        weights: torch.Tensor | None,
        record: bool,
    ) -> Terms:
        """See :meth:`HeadGrads.terms`."""
        n = out.shape[0]
        log_probs = self._log_probs(out)
        probs = torch.exp(log_probs)
        index = actions.reshape(n, self.k)
        if index.dtype != torch.int64:
            index = torch.round(index).long()
        if self.offsets is not None:
            index = index - self.offsets
        index = index.unsqueeze(2)
        picked = log_probs.gather(2, index)
        logp = picked.reshape(n) if self.k == 1 else picked.squeeze(2).sum(1)
        d_logp = torch.zeros_like(log_probs).scatter_(2, index, 1.0).sub_(probs)
        zero = out.new_zeros(())
        entropy, kl = zero, zero
        d_extra = None
        if entropy_coeff != 0.0 or record:
            comp_entropy = -(probs * log_probs).sum(2)  # [B, k]
            entropy = mean_rows(comp_entropy.sum(1), weights)
            if entropy_coeff != 0.0:  # d(-c * mean H)/d(logits) = c/n * p (log p + H)
                scale = row_scale(entropy_coeff, weights, n)
                if weights is not None:
                    scale = scale.unsqueeze(2)
                d_extra = probs * (log_probs + comp_entropy.unsqueeze(2)) * scale
        if kl_coeff > 0.0 or record:
            old_log_probs = self._log_probs(old)
            old_probs = torch.exp(old_log_probs)
            kl = mean_rows((old_probs * (old_log_probs - log_probs)).sum((1, 2)), weights)
            if kl_coeff > 0.0:  # d KL(old || new)/d(new logits) = p_new - p_old
                scale = row_scale(kl_coeff, weights, n)
                if weights is not None:
                    scale = scale.unsqueeze(2)
                d_kl = (probs - old_probs) * scale
                d_extra = d_kl if d_extra is None else d_extra + d_kl
        return (
            logp,
            self._flat(d_logp),
            None if d_extra is None else self._flat(d_extra),
            entropy,
            kl,
        )


class GaussianGrads:
    """DiagGaussian: inputs are means then log-stds (clamped to ``+-LOG_BOUND``), or the
    means alone when the model appends ``free_log_std`` (whose gradient the caller sums
    from the log-std columns this head returns).

    Args:
        dims: The action dimensions.
        free_log_std: The model's free log-std parameter, or None.
    """

    def __init__(self, dims: int, free_log_std: torch.nn.Parameter | None) -> None:
        self.dims = dims
        self.free_log_std = free_log_std
        self.width = 2 * dims

    def terms(
        self,
        out: torch.Tensor,
        actions: Any,
        old: torch.Tensor,
        entropy_coeff: float,
        kl_coeff: float,
        weights: torch.Tensor | None,
        record: bool,
    ) -> Terms:
        """See :meth:`HeadGrads.terms` (``d logp / d inputs`` always has ``2 * dims``
        columns: the log-stds' too)."""
        n, k = out.shape[0], self.dims
        if self.free_log_std is not None:
            mean = out
            raw_log_std = self.free_log_std.detach().unsqueeze(0).expand(n, -1)
        else:
            mean, raw_log_std = out[:, :k], out[:, k:]
        # the clamp to +-LOG_BOUND passes no gradient outside; inside (the usual case) it
        # is the identity, and the masks are skipped
        in_bounds: Any = 1.0
        log_std = raw_log_std
        if float(raw_log_std.abs().max()) > LOG_BOUND:
            log_std = raw_log_std.clamp(-LOG_BOUND, LOG_BOUND)
            in_bounds = ((raw_log_std >= -LOG_BOUND) & (raw_log_std <= LOG_BOUND)).float()
        std = torch.exp(log_std)
        z = (actions.reshape(n, k).float() - mean) / std
        logp = (-0.5 * z * z - log_std - _HALF_LOG_2PI).sum(1)
        # d logp / d mean = z / std, d logp / d log_std = z^2 - 1
        d_mean = z / std
        d_log_std = z * z - 1.0
        if isinstance(in_bounds, torch.Tensor):
            d_log_std = d_log_std * in_bounds
        d_extra_mean: torch.Tensor | None = None
        d_extra_log_std: torch.Tensor | None = None
        zero = out.new_zeros(())
        entropy, kl = zero, zero
        if entropy_coeff != 0.0 or record:
            entropy = mean_rows((log_std + (0.5 + _HALF_LOG_2PI)).sum(1), weights)
            if entropy_coeff != 0.0:
                d_extra_log_std = torch.as_tensor(in_bounds * row_scale(-entropy_coeff, weights, n))
        if kl_coeff > 0.0 or record:
            old_mean, old_raw = old[:, :k], old[:, k : 2 * k]
            old_log_std = old_raw.clamp(-LOG_BOUND, LOG_BOUND)
            var_ratio = torch.exp(2.0 * (old_log_std - log_std))
            t = ((old_mean - mean) / std) ** 2
            kl = mean_rows((0.5 * (var_ratio + t - 1.0) - (old_log_std - log_std)).sum(1), weights)
            if kl_coeff > 0.0:
                scale = row_scale(kl_coeff, weights, n)
                d_extra_mean = (mean - old_mean) / (std * std) * scale
                d_kl_log_std = (1.0 - var_ratio - t) * in_bounds * scale
                d_extra_log_std = (
                    d_kl_log_std if d_extra_log_std is None else d_extra_log_std + d_kl_log_std
                )
        d_logp_d_out = torch.cat([d_mean, d_log_std], 1)
        d_extra = None
        if d_extra_mean is not None or d_extra_log_std is not None:
            em = d_extra_mean if d_extra_mean is not None else torch.zeros_like(mean)
            el = (
                d_extra_log_std.expand(n, k)
                if d_extra_log_std is not None
                else torch.zeros_like(mean)
            )
            d_extra = torch.cat([em, el], 1)
        return logp, d_logp_d_out, d_extra, entropy, kl


class MultiActionGrads:
    """MultiActionDistribution: the children's heads over consecutive slices of the inputs,
    the actions taken leaf by leaf (flatten order, Dict keys sorted), every term summed.

    Args:
        children: One head per leaf, flatten order.
        paths: Each leaf's path in the action structure.
    """

    def __init__(self, children: list[HeadGrads], paths: list[tuple[Any, ...]]) -> None:
        self.children = children
        self.paths = paths
        self.lens = [c.width for c in children]
        self.width = sum(self.lens)

    def _leaf(self, actions: Any, path: tuple[Any, ...]) -> Any:
        for key in path:
            actions = actions[key]
        return actions

    def terms(
        self,
        out: torch.Tensor,
        actions: Any,
        old: torch.Tensor,
        entropy_coeff: float,
        kl_coeff: float,
        weights: torch.Tensor | None,
        record: bool,
    ) -> Terms:
        """See :meth:`HeadGrads.terms` (``actions``: the action space's structure)."""
        parts = torch.split(out, self.lens, 1)
        olds = torch.split(old, self.lens, 1)
        results = [
            head.terms(part, self._leaf(actions, path), o, entropy_coeff, kl_coeff, weights, record)
            for head, path, part, o in zip(self.children, self.paths, parts, olds, strict=True)
        ]
        logp = sum((r[0] for r in results[1:]), results[0][0])
        entropy = sum((r[3] for r in results[1:]), results[0][3])
        kl = sum((r[4] for r in results[1:]), results[0][4])
        d_logp = torch.cat([r[1] for r in results], 1)
        d_extra = None
        if any(r[2] is not None for r in results):
            d_extra = torch.cat(
                [r[2] if r[2] is not None else torch.zeros_like(r[1]) for r in results], 1
            )
        return logp, d_logp, d_extra, entropy, kl


def head_grads(
    dist: Any, free_log_std: torch.nn.Parameter | None = None, floored: bool = False
) -> HeadGrads | str:
    """The head for ``dist`` (a distribution instance, e.g. built on zeros) or why there is
    none (``"<class> head ..."``); ``free_log_std``: the model's free log-std parameter (only
    a lone DiagGaussian takes one); ``floored``: the inputs may hold ``FLOAT_MIN`` logits
    (an action-mask model)."""
    kind = type(dist)
    if free_log_std is not None and kind is not DiagGaussian:
        return f"{kind.__name__} head with free_log_std"
    if kind in (Categorical, MaskedCategorical):
        if dist.temperature != 1.0:
            return f"{kind.__name__} head with temperature {dist.temperature}"
        offsets = np.array([dist._start], np.int64)
        return LogitsGrads([dist.num_categories], offsets, None, kind is MaskedCategorical, floored)
    if kind in (MultiCategorical, MaskedMultiCategorical):
        lens, offsets, _, out_of_bounds = _multi_categorical_layout(
            dist.input_lens, dist.action_space
        )
        return LogitsGrads(lens, offsets, out_of_bounds, kind is MaskedMultiCategorical, floored)
    if kind is DiagGaussian:
        return GaussianGrads(int(dist.inputs.shape[-1]) // 2, free_log_std)
    if kind is MultiActionDistribution:
        children: list[HeadGrads] = []
        for child in dist.flat_child_distributions:
            head = head_grads(child, None, floored)
            if isinstance(head, str):
                return f"{kind.__name__} head (a child: {head})"
            children.append(head)
        return MultiActionGrads(children, [path for path, _ in dist._paths])
    return f"{kind.__name__} head"
