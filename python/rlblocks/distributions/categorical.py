"""The categorical family: Categorical and MultiCategorical over logits."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box, Discrete, MultiDiscrete

from rlblocks.distributions.base import (
    FLOAT_MIN,
    ActionDistribution,
    TensorLike,
    _batch_shape_check,
    _check_range,
    _index_tensor,
    _prod,
)


def _inverse_cdf_sample(probs: torch.Tensor) -> torch.Tensor:
    """One category per row of ``probs [..., n]`` (int64 ``[...]``), by inverse CDF.

    A category with probability exactly zero is never drawn: the uniform draw is scaled to
    the row's total and kept strictly below it, and ``searchsorted(right=True)`` returns the
    first index whose cumulative sum exceeds the draw (a zero-probability category never
    raises the cumulative sum).
    """
    cdf = probs.cumsum(-1)
    total = cdf[..., -1:]
    u = torch.rand_like(total) * total
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_max_(probs.shape[-1] - 1)


def _normalize(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(log_softmax, softmax, row_max)`` over the last dim.

    Log-probabilities are floored at ``FLOAT_MIN`` (finite for ``-inf`` / masked logits,
    whose probabilities are then exactly 0).
    """
    row_max = logits.detach().amax(-1, keepdim=True)
    log_probs = torch.log_softmax(logits, -1).clamp_min(FLOAT_MIN)
    return log_probs, torch.exp(log_probs), row_max


def _float_compare(op: Callable[..., torch.Tensor], x: torch.Tensor, value: float) -> torch.Tensor:
    """``op(x, value)`` as a float32 0/1 tensor (writing floats directly is several times
    faster on CPU than a bool result followed by a conversion)."""
    return op(x, value, out=torch.empty(x.shape, dtype=torch.float32, device=x.device))


def _floor_illegal(logits: torch.Tensor, illegal: torch.Tensor) -> torch.Tensor:
    """Logits with illegal slots (``illegal == 1.0``) set to ``FLOAT_MIN``."""
    return torch.add(logits, illegal, alpha=FLOAT_MIN).clamp_min(FLOAT_MIN)


class _Logits:
    """What Categorical and MultiCategorical share: normalised logits over the last dim
    (``logits [..., n]``; MultiCategorical's ``n`` is its largest block, padded), drawn by
    inverse CDF, scored by gathering, with entropy and KL summed over the last dim.

    Masked and padded slots have probability exactly 0 and a finite log-probability, so
    they add nothing to entropy or KL: the sums run over legal actions only.
    """

    logits: torch.Tensor

    @cached_property
    def _normalized(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``_normalize(logits)``: log-probs, probs and row maxima, computed once."""
        return _normalize(self.logits)

    @property
    def log_probs(self) -> torch.Tensor:
        """Normalised log-probabilities ``[..., n]``, floored at the float32 minimum."""
        return self._normalized[0]

    @property
    def probs(self) -> torch.Tensor:
        """Probabilities ``[..., n]`` (masked and padding slots: exactly 0)."""
        return self._normalized[1]

    def _draw(self) -> torch.Tensor:
        """One index per row of ``probs``, without gradient."""
        with torch.no_grad():
            return _inverse_cdf_sample(self.probs)

    def _logp_of(self, index: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of in-range indices ``[...]`` (one per row)."""
        return self.log_probs.gather(-1, index.unsqueeze(-1)).squeeze(-1)

    def _row_entropy(self) -> torch.Tensor:
        return -(self.probs * self.log_probs).sum(-1)

    def _row_kl(self, other: _Logits) -> torch.Tensor:
        return (self.probs * (self.log_probs - other.log_probs)).sum(-1)


class Categorical(_Logits, ActionDistribution):
    """Categorical over ``n`` actions from logits ``[*batch, n]`` (RLlib TorchCategorical).

    Differences from RLlib: ``temperature`` divides a *copy* of the inputs (RLlib divides the
    caller's tensor in place, differences 7); sampling uses the inverse CDF (same distribution,
    faster than ``torch.multinomial``); a ``Discrete(n, start=s)`` action space shifts
    actions by ``s``.

    Args:
        inputs: Logits ``[*batch, n]``.
        model: The model (unused).
        temperature: Logits are divided by it (> 0).
        action_space: Optional ``Discrete`` space (its ``start`` offsets the actions).

    Examples:
        >>> import torch
        >>> logits = torch.tensor([[1.0, 2.0, 3.0]])
        >>> d = Categorical(logits, None, temperature=2.0)
        >>> logits      # untouched
        tensor([[1., 2., 3.]])
        >>> d.logp(torch.tensor([0])).exp()
        tensor([0.1863])
        >>> d.entropy()
        tensor([1.0202])
    """

    def __init__(
        self,
        inputs: TensorLike,
        model: Any = None,
        temperature: float = 1.0,
        *,
        action_space: Discrete | None = None,
    ):
        super().__init__(inputs, model)
        temperature = float(temperature)
        if not (temperature > 0.0 and math.isfinite(temperature)):
            raise ValueError(f"Categorical: temperature must be > 0 and finite, got {temperature}")
        self.temperature = temperature
        self.num_categories = int(self.inputs.shape[-1])
        if self.num_categories < 1:
            raise ValueError("Categorical: inputs need at least one logit in the last dim")
        self._start = 0
        if action_space is not None:
            if not isinstance(action_space, Discrete):
                raise ValueError(f"Categorical: action_space must be Discrete, got {action_space}")
            if int(action_space.n) != self.num_categories:
                raise ValueError(
                    f"Categorical: {action_space} needs {int(action_space.n)} logits, got "
                    f"{self.num_categories}"
                )
            self._start = int(action_space.start)
        self.logits = self._masked_logits()

    def _masked_logits(self) -> torch.Tensor:
        if self.temperature == 1.0:
            return self.inputs
        return (self.inputs / self.temperature).clamp_min(FLOAT_MIN)

    @property
    def dist(self) -> torch.distributions.Categorical:
        """The equivalent ``torch.distributions.Categorical`` (for code that wants one)."""
        return torch.distributions.Categorical(logits=self.log_probs, validate_args=False)

    def sample(self) -> torch.Tensor:
        a = self._draw()
        if self._start:
            a = a + self._start
        self.last_sample = a
        return a

    def deterministic_sample(self) -> torch.Tensor:
        a = self.logits.argmax(-1)
        return a + self._start if self._start else a

    def logp(self, actions: TensorLike) -> torch.Tensor:
        a = _index_tensor(actions, "Categorical.logp", self.inputs.device)
        _batch_shape_check(a, self.inputs.shape[:-1], "Categorical.logp")
        if self._start:
            a = a - self._start
        _check_range(a, self.num_categories, "Categorical.logp")
        return self._logp_of(a)

    def sampled_action_logp(self) -> torch.Tensor:
        if self.last_sample is None:
            return super().sampled_action_logp()  # raises the clear error
        # The sample is this distribution's own: in range and of the right shape already.
        a = self.last_sample - self._start if self._start else self.last_sample
        return self._logp_of(a)

    def entropy(self) -> torch.Tensor:
        return self._row_entropy()

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        self._same_class(other)
        assert isinstance(other, Categorical)
        return self._row_kl(other)

    @staticmethod
    def required_model_output_shape(action_space: gym.Space, model_config: Any) -> int:
        if not isinstance(action_space, Discrete):
            raise ValueError(f"Categorical needs a Discrete action space, got {action_space}")
        return int(action_space.n)


def _multi_categorical_layout(
    input_lens: Sequence[int] | np.ndarray | None, action_space: gym.Space | None
) -> tuple[list[int], np.ndarray, tuple[int, ...], np.ndarray | None]:
    """``(lens, offsets, action_shape, out_of_bounds)`` of a MultiCategorical.

    ``out_of_bounds`` (float ``[sum(lens)]``, 1.0 = the category lies outside that
    element's own ``[low, high]``) is set only for integer Boxes with per-element bounds.
    """
    out_of_bounds: np.ndarray | None = None
    offsets: np.ndarray | None = None
    shape: tuple[int, ...] | None = None
    derived: list[int] | None = None
    if action_space is not None:
        if isinstance(action_space, MultiDiscrete):
            derived = [int(v) for v in np.asarray(action_space.nvec).ravel()]
            offsets = np.asarray(action_space.start, dtype=np.int64).ravel()
            shape = tuple(action_space.shape)
        elif isinstance(action_space, Box) and np.issubdtype(action_space.dtype, np.integer):
            lo, hi = int(np.min(action_space.low)), int(np.max(action_space.high))
            k = _prod(action_space.shape)
            derived = [hi - lo + 1] * k
            offsets = np.full(k, lo, dtype=np.int64)
            shape = tuple(action_space.shape)
            lows = np.asarray(action_space.low, dtype=np.int64).ravel()
            highs = np.asarray(action_space.high, dtype=np.int64).ravel()
            if (lows != lo).any() or (highs != hi).any():
                values = lo + np.arange(hi - lo + 1)
                outside = (values[None, :] < lows[:, None]) | (values[None, :] > highs[:, None])
                out_of_bounds = outside.astype(np.float32).ravel()
        else:
            raise ValueError(
                f"MultiCategorical: action_space must be MultiDiscrete or an integer Box, "
                f"got {action_space}"
            )
    if input_lens is None:
        if derived is None:
            raise ValueError("MultiCategorical needs input_lens or an action_space")
        lens = derived
    else:
        lens = [int(v) for v in np.asarray(input_lens).ravel()]
        if derived is not None and lens != derived:
            raise ValueError(
                f"MultiCategorical: input_lens {lens} do not match {action_space} ({derived})"
            )
    if not lens or min(lens) < 1:
        raise ValueError(f"MultiCategorical: input_lens must be >= 1 each, got {lens}")
    if offsets is None:
        offsets = np.zeros(len(lens), dtype=np.int64)
    if shape is None:
        shape = (len(lens),)
    return lens, offsets, shape, out_of_bounds


class MultiCategorical(_Logits, ActionDistribution):
    """Independent Categoricals over consecutive blocks of logits (RLlib TorchMultiCategorical).

    Serves MultiDiscrete spaces (including multi-dimensional ``nvec``) and integer Boxes.
    Samples have shape ``[*batch, *action_shape]`` (int64); ``logp``, ``entropy`` and ``kl``
    are summed over components (``multi_entropy`` / ``multi_kl`` give ``[*batch, k]``).
    All components are evaluated in one vectorised pass (blocks are padded to the largest
    with zero-probability slots).

    Differences from RLlib: actions are offset by the space's ``start`` (MultiDiscrete) or
    ``low`` (integer Box: the categories of ``Box(lo, hi)`` are ``lo..hi``; RLlib returns
    ``0..hi-lo``, which lies outside the space whenever ``lo != 0``). Like RLlib, an integer
    Box gets ``max(high) - min(low) + 1`` logits per element; where elements have their own
    bounds, categories outside an element's ``[low, high]`` are masked (probability 0), so
    samples always lie in the space.

    Args:
        inputs: Logits ``[*batch, sum(input_lens)]``.
        model: The model (unused).
        input_lens: Categories per component (from ``action_space`` when omitted).
        action_space: Optional MultiDiscrete or integer Box (action shape and offsets).

    Examples:
        >>> import torch, gymnasium as gym
        >>> space = gym.spaces.MultiDiscrete([2, 3])
        >>> d = MultiCategorical(torch.zeros(4, 5), None, action_space=space)
        >>> d.sample().shape
        torch.Size([4, 2])
        >>> round(d.entropy()[0].item(), 4) == round(math.log(6), 4)
        True
    """

    def __init__(
        self,
        inputs: TensorLike,
        model: Any = None,
        input_lens: Sequence[int] | np.ndarray | None = None,
        action_space: gym.Space | None = None,
    ):
        super().__init__(inputs, model)
        name = type(self).__name__
        lens, offsets, shape, out_of_bounds = _multi_categorical_layout(input_lens, action_space)
        if int(self.inputs.shape[-1]) != sum(lens):
            raise ValueError(
                f"{name}: inputs have {int(self.inputs.shape[-1])} logits in the last dim, "
                f"input_lens {lens} need {sum(lens)}"
            )
        self.input_lens = lens
        self.action_space = action_space
        self.action_shape = shape
        device = self.inputs.device
        self._batch = self.inputs.shape[:-1]
        k, nmax = len(lens), max(lens)
        self._k, self._nmax = k, nmax
        self._lens_t = torch.tensor(lens, dtype=torch.int64, device=device)
        self._offsets = torch.as_tensor(offsets, dtype=torch.int64, device=device)
        self._has_offsets = bool(np.any(offsets))

        flat_illegal = self._flat_illegal()
        if out_of_bounds is not None:
            static = torch.as_tensor(out_of_bounds, device=device)
            flat_illegal = static if flat_illegal is None else torch.maximum(flat_illegal, static)
        logits = self.inputs
        if flat_illegal is not None:
            logits = _floor_illegal(logits, flat_illegal)
        if all(n == nmax for n in lens):
            self.logits = logits.reshape(*self._batch, k, nmax)
        else:
            # Gather each block into a [k, nmax] grid; padding slots read a FLOAT_MIN column.
            index = np.full((k, nmax), sum(lens), dtype=np.int64)
            start = 0
            for i, n in enumerate(lens):
                index[i, :n] = np.arange(start, start + n)
                start += n
            idx = torch.as_tensor(index.ravel(), device=device)
            pad = logits.new_full((*self._batch, 1), FLOAT_MIN)
            self.logits = torch.cat([logits, pad], -1).index_select(-1, idx)
            self.logits = self.logits.reshape(*self._batch, k, nmax)

    def _flat_illegal(self) -> torch.Tensor | None:
        return None

    def _to_actions(self, idx: torch.Tensor) -> torch.Tensor:
        if self._has_offsets:
            idx = idx + self._offsets
        return idx.reshape(*self._batch, *self.action_shape)

    def sample(self) -> torch.Tensor:
        a = self._to_actions(self._draw())
        self.last_sample = a
        return a

    def deterministic_sample(self) -> torch.Tensor:
        return self._to_actions(self.logits.argmax(-1))

    def logp(self, actions: TensorLike) -> torch.Tensor:
        name = f"{type(self).__name__}.logp"
        a = _index_tensor(actions, name, self.inputs.device)
        if a.shape[len(self._batch) :] not in (torch.Size(self.action_shape), (self._k,)):
            raise ValueError(
                f"{name}: actions have shape {tuple(a.shape)}, expected "
                f"{(*self._batch, *self.action_shape)} or {(*self._batch, self._k)}"
            )
        a = a.reshape(*a.shape[: len(self._batch)], self._k)
        _batch_shape_check(a, torch.Size((*self._batch, self._k)), name)
        if self._has_offsets:
            a = a - self._offsets
        _check_range(a, self._lens_t, name)
        return self._logp_of(a).sum(-1)

    def multi_entropy(self) -> torch.Tensor:
        return self._row_entropy()

    def entropy(self) -> torch.Tensor:
        return self.multi_entropy().sum(-1)

    def multi_kl(self, other: ActionDistribution) -> torch.Tensor:
        self._same_class(other)
        assert isinstance(other, MultiCategorical)
        if other.input_lens != self.input_lens:
            raise ValueError(
                f"{type(self).__name__}.kl: input_lens differ ({self.input_lens} vs "
                f"{other.input_lens})"
            )
        return self._row_kl(other)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        return self.multi_kl(other).sum(-1)

    @staticmethod
    def required_model_output_shape(action_space: gym.Space, model_config: Any) -> int:
        if isinstance(action_space, MultiDiscrete):
            return int(np.sum(action_space.nvec))
        if isinstance(action_space, Box) and np.issubdtype(action_space.dtype, np.integer):
            lo, hi = int(np.min(action_space.low)), int(np.max(action_space.high))
            return _prod(action_space.shape) * (hi - lo + 1)
        raise ValueError(
            f"MultiCategorical needs a MultiDiscrete or integer Box space, got {action_space}"
        )
