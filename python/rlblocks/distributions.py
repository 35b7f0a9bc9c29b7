"""Action distributions: RLlib's torch action-distribution layer, fast and numerically safe.

A distribution is built from a model's output vector (``inputs``, shape ``[*batch, n]``)
and the model itself, exactly as in RLlib: ``dist = cls(model_out, model)``. Every class
works for any number of leading batch dims, keeps float32 maths, and returns int64 for
discrete actions. :func:`select_action_dist` implements the catalog table (which class for
which action space, and how many model outputs it needs).

Behaviour matches RLlib (``docs/rllib_behavior.md`` section 8) except for the
departures listed in ``docs/differences.md`` (7-13), which each class documents where it
applies, and
these safeguards, which only act in regimes where float32 maths breaks down or where RLlib
silently returns wrong values:

* DiagGaussian clamps ``log_std`` to ``[-20, 20]`` and Dirichlet clamps its log-concentrations
  to ``[-20, 20]`` (beyond that float32 ``exp``, squared z-scores or ``lgamma`` overflow or
  lose all precision).
* Beta clamps actions to ``[1e-6, 1 - 1e-6]`` of the unit interval before ``log_prob``, so
  actions at or beyond the bounds have a finite log-likelihood (RLlib: ``-inf``/NaN).
* Categorical log-probabilities are floored at ``FLOAT_MIN`` (masked and ``-inf`` logits
  have probability exactly 0), so the KL ``sum p (log p - log q)`` stays finite where ``q``
  underflows (torch: ``inf``).
* Categorical sampling uses the inverse CDF (the same distribution as ``torch.multinomial``,
  several times faster, a different random stream).
* Actions are validated: out-of-range integer actions and action shapes that do not match
  the batch raise ``ValueError`` (RLlib broadcasts a ``[B]`` action against ``[B, 1]``).
* Integer actions honour the space's offset (``Discrete.start``, ``MultiDiscrete.start``,
  an integer Box's ``low``); RLlib always counts from 0.

Examples:
    >>> import torch
    >>> import gymnasium as gym
    >>> cls, n = select_action_dist(gym.spaces.Discrete(3), {})
    >>> cls.__name__, n
    ('Categorical', 3)
    >>> dist = cls(torch.tensor([[0.0, 1.0, 2.0]]), None)
    >>> dist.deterministic_sample()
    tensor([2])
    >>> round(float(dist.logp(torch.tensor([2]))), 4)
    -0.4076
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property, partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box, Dict, Discrete, MultiDiscrete, Tuple

from rlblocks.spaces import Simplex, format_path, space_path_items

__all__ = [
    "FLOAT_MIN",
    "ActionDistribution",
    "AutoregressiveDistribution",
    "BinaryAutoregressiveDistribution",
    "Beta",
    "Categorical",
    "Deterministic",
    "DiagGaussian",
    "Dirichlet",
    "MaskedCategorical",
    "MaskedMultiCategorical",
    "MultiActionDistribution",
    "MultiCategorical",
    "SquashedGaussian",
    "UnsupportedSpaceError",
    "select_action_dist",
]

SMALL_NUMBER = 1e-6
MIN_LOG_NN_OUTPUT = -5.0
MAX_LOG_NN_OUTPUT = 2.0
#: The most negative float32: the logit that masked (and padded) actions get.
FLOAT_MIN = float(torch.finfo(torch.float32).min)
#: Input logits at or below this are read as masked by the masked distributions.
MASK_THRESHOLD = -1e8
#: Clamp for DiagGaussian log-stds and Dirichlet log-concentrations (float32 exp stays finite).
LOG_BOUND = 20.0
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)

TensorLike = torch.Tensor | np.ndarray


class UnsupportedSpaceError(ValueError):
    """The action space has no action distribution (and none was given explicitly)."""


# --------------------------------------------------------------------------------------------
# small helpers


def _float_tensor(x: Any, what: str) -> torch.Tensor:
    """``x`` as a float32 tensor (numpy and lists are converted; gradients are kept)."""
    if isinstance(x, torch.Tensor):
        t = x
    else:
        try:
            t = torch.as_tensor(np.asarray(x, dtype=np.float32))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{what} must be a tensor or array of numbers, got {x!r}") from err
    if t.dtype != torch.float32:
        t = t.float()
    return t


def _index_tensor(x: Any, what: str, device: torch.device) -> torch.Tensor:
    """``x`` as an int64 tensor (floats holding whole numbers are rounded)."""
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{what} must hold integer actions, got dtype {t.dtype}")
    if t.is_floating_point():
        t = torch.round(t)
    return t.to(device=device, dtype=torch.int64)


def _check_batch_inputs(inputs: torch.Tensor, cls_name: str) -> None:
    if inputs.dim() < 1:
        raise ValueError(
            f"{cls_name}: inputs need shape [*batch, n] (at least one dim), got a scalar"
        )


def _check_range(actions: torch.Tensor, high: torch.Tensor | int, what: str) -> None:
    """Raises ValueError unless ``0 <= actions < high`` (elementwise ``high`` allowed)."""
    if actions.numel() == 0:
        return
    bad = (actions < 0) | (actions >= high)
    if bool(bad.any()):
        first = actions[bad][0].item()
        raise ValueError(
            f"{what}: action index {first} is out of range; allowed are 0 <= a < n "
            f"(n = {high.tolist() if isinstance(high, torch.Tensor) else high}, after "
            "subtracting the space's start/low)"
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


def _prod(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _batch_shape_check(x: torch.Tensor, expected: torch.Size, what: str) -> None:
    if x.shape != expected:
        raise ValueError(
            f"{what}: actions have shape {tuple(x.shape)}, expected {tuple(expected)} "
            "(the batch shape of the inputs followed by the action shape)"
        )


# --------------------------------------------------------------------------------------------
# base class


class ActionDistribution:
    """Base class: a distribution over actions parameterised by a model's outputs.

    Subclasses implement ``sample``, ``deterministic_sample``, ``logp``, ``entropy``, ``kl``
    and the static ``required_model_output_shape`` (the number of model outputs they need).
    ``sample`` stores ``last_sample`` so that ``sampled_action_logp`` can score it.

    Args:
        inputs: Model outputs, shape ``[*batch, n]`` (numpy is converted to float32 torch).
        model: The model that produced them (custom distributions may use it, e.g. its
            ``model_config`` or an ``action_model``); may be None for built-in classes.

    Examples:
        >>> import torch
        >>> class Coin(ActionDistribution):
        ...     @staticmethod
        ...     def required_model_output_shape(action_space, model_config):
        ...         return 1
        ...     def deterministic_sample(self):
        ...         return (self.inputs[..., 0] > 0).long()
        >>> Coin(torch.tensor([[0.3], [-2.0]]), None).deterministic_sample()
        tensor([1, 0])
    """

    def __init__(self, inputs: TensorLike, model: Any = None):
        self.inputs = _float_tensor(inputs, f"{type(self).__name__} inputs")
        _check_batch_inputs(self.inputs, type(self).__name__)
        self.model = model
        self.last_sample: Any = None

    # The methods below define the interface; a subclass that lacks one says so clearly.
    def _missing(self, method: str) -> NotImplementedError:
        return NotImplementedError(f"{type(self).__name__} does not implement {method}()")

    def sample(self) -> Any:
        """Draws one action per batch entry (and stores it in ``last_sample``)."""
        raise self._missing("sample")

    def deterministic_sample(self) -> Any:
        """The most likely (or mean) action per batch entry."""
        raise self._missing("deterministic_sample")

    def logp(self, actions: Any) -> torch.Tensor:
        """Log-likelihood of ``actions``, shape ``[*batch]``."""
        raise self._missing("logp")

    def entropy(self) -> torch.Tensor:
        """Entropy, shape ``[*batch]``."""
        raise self._missing("entropy")

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        """KL(self || other), shape ``[*batch]``."""
        raise self._missing("kl")

    def multi_kl(self, other: ActionDistribution) -> torch.Tensor:
        """Per-component KL; the plain KL for single-component distributions."""
        return self.kl(other)

    def multi_entropy(self) -> torch.Tensor:
        """Per-component entropy; the plain entropy for single-component distributions."""
        return self.entropy()

    def sampled_action_logp(self) -> torch.Tensor:
        """``logp`` of the action drawn by the last ``sample()`` call."""
        if self.last_sample is None:
            raise RuntimeError(
                f"{type(self).__name__}.sampled_action_logp() needs a previous sample() call"
            )
        return self.logp(self.last_sample)

    @staticmethod
    def required_model_output_shape(action_space: gym.Space, model_config: Any) -> int:
        """Number of model outputs this distribution needs for ``action_space``."""
        raise NotImplementedError(
            "ActionDistribution subclasses must define required_model_output_shape"
        )

    def _same_class(self, other: Any) -> None:
        if not isinstance(other, type(self)):
            raise ValueError(
                f"{type(self).__name__}.kl needs another {type(self).__name__}, "
                f"got {type(other).__name__}"
            )


# --------------------------------------------------------------------------------------------
# categorical family


class Categorical(ActionDistribution):
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
        >>> d.entropy().shape
        torch.Size([1])
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

    @cached_property
    def _normalized(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``_normalize(logits)``: log-probs, probs and row maxima, computed once."""
        return _normalize(self.logits)

    @property
    def log_probs(self) -> torch.Tensor:
        """Normalised log-probabilities ``[*batch, n]``, floored at the float32 minimum."""
        return self._normalized[0]

    @property
    def probs(self) -> torch.Tensor:
        """Probabilities ``[*batch, n]``."""
        return self._normalized[1]

    @property
    def dist(self) -> torch.distributions.Categorical:
        """The equivalent ``torch.distributions.Categorical`` (for code that wants one)."""
        return torch.distributions.Categorical(logits=self.log_probs, validate_args=False)

    def sample(self) -> torch.Tensor:
        with torch.no_grad():
            a = _inverse_cdf_sample(self.probs)
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
        return self.log_probs.gather(-1, a.unsqueeze(-1)).squeeze(-1)

    def sampled_action_logp(self) -> torch.Tensor:
        if self.last_sample is None:
            return super().sampled_action_logp()  # raises the clear error
        # The sample is this distribution's own: in range and of the right shape already.
        a = self.last_sample - self._start if self._start else self.last_sample
        return self.log_probs.gather(-1, a.unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.probs * self.log_probs).sum(-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        self._same_class(other)
        assert isinstance(other, Categorical)
        return (self.probs * (self.log_probs - other.log_probs)).sum(-1)

    @staticmethod
    def required_model_output_shape(action_space: gym.Space, model_config: Any) -> int:
        if not isinstance(action_space, Discrete):
            raise ValueError(f"Categorical needs a Discrete action space, got {action_space}")
        return int(action_space.n)


def _illegal_from(inputs: torch.Tensor, mask: TensorLike | None, who: str) -> torch.Tensor:
    """Float ``[*batch, n]``, 1.0 where masked: ``mask <= 0``, or logits ``<= -1e8``."""
    if mask is None:
        return _float_compare(torch.le, inputs.detach(), MASK_THRESHOLD)
    m = mask if isinstance(mask, torch.Tensor) else torch.as_tensor(np.asarray(mask))
    m = m.to(inputs.device)
    try:
        m = torch.broadcast_to(m, inputs.shape)
        illegal = _float_compare(torch.le, m if m.dtype != torch.bool else m.float(), 0.0)
    except RuntimeError as err:
        raise ValueError(
            f"{who}: mask of shape {tuple(m.shape)} does not broadcast to the inputs' shape "
            f"{tuple(inputs.shape)}"
        ) from err
    return illegal


class MaskedCategorical(Categorical):
    """Categorical restricted to legal actions (action masking, parametric action spaces).

    Legality comes from ``mask`` (``[*batch, n]``, nonzero = legal) or, when no mask is
    given, from the logits: a logit ``<= -1e8`` marks a masked action, as produced by
    ``logits + max(log(mask), FLOAT_MIN)`` in RLlib's parametric-actions model. Masked
    actions get the logit ``FLOAT_MIN`` (a safe floor: finite, and its probability is
    exactly zero), so they are never sampled, and entropy and KL sum over legal actions
    only. ``logp`` of a masked action is a huge negative finite number, and so is the KL
    term of an action that ``self`` allows but ``other`` masks (mathematically infinite).
    Every batch entry needs at least one legal action (ValueError otherwise).

    Args:
        inputs: Logits ``[*batch, n]``.
        model: The model (unused).
        temperature: Logits of legal actions are divided by it (> 0).
        mask: Optional legality mask broadcastable to ``[*batch, n]``.
        action_space: Optional ``Discrete`` space (its ``start`` offsets the actions).

    Examples:
        >>> import torch
        >>> d = MaskedCategorical(torch.zeros(2, 3), mask=torch.tensor([[1, 0, 1], [0, 0, 1]]))
        >>> d.probs
        tensor([[0.5000, 0.0000, 0.5000],
                [0.0000, 0.0000, 1.0000]])
        >>> d.entropy()
        tensor([0.6931, 0.0000])
    """

    def __init__(
        self,
        inputs: TensorLike,
        model: Any = None,
        temperature: float = 1.0,
        *,
        mask: TensorLike | None = None,
        action_space: Discrete | None = None,
    ):
        self._mask_arg = mask
        super().__init__(inputs, model, temperature, action_space=action_space)
        self._normalized = self._checked

    def _masked_logits(self) -> torch.Tensor:
        self._illegal = _illegal_from(self.inputs, self._mask_arg, "MaskedCategorical")
        logits = _floor_illegal(self.inputs, self._illegal)
        if self.temperature != 1.0:
            logits = (logits / self.temperature).clamp_min(FLOAT_MIN)
        self._checked = _normalize(logits)  # its row max tells fully masked rows
        if not bool((self._checked[2] > FLOAT_MIN).all()):
            raise ValueError(
                "MaskedCategorical: every batch entry needs at least one legal action; "
                "some rows are fully masked"
            )
        return logits

    @property
    def legal(self) -> torch.Tensor:
        """Boolean ``[*batch, n]``: which actions are legal."""
        return self._illegal == 0


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


class MultiCategorical(ActionDistribution):
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

    @cached_property
    def _normalized(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``_normalize(logits)``: log-probs, probs and row maxima, computed once."""
        return _normalize(self.logits)

    @property
    def log_probs(self) -> torch.Tensor:
        """Per-component log-probabilities ``[*batch, k, max(input_lens)]`` (padding: floor)."""
        return self._normalized[0]

    @property
    def probs(self) -> torch.Tensor:
        """Per-component probabilities ``[*batch, k, max(input_lens)]`` (padding: 0)."""
        return self._normalized[1]

    def _to_actions(self, idx: torch.Tensor) -> torch.Tensor:
        if self._has_offsets:
            idx = idx + self._offsets
        return idx.reshape(*self._batch, *self.action_shape)

    def sample(self) -> torch.Tensor:
        with torch.no_grad():
            a = self._to_actions(_inverse_cdf_sample(self.probs))
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
        return self.log_probs.gather(-1, a.unsqueeze(-1)).squeeze(-1).sum(-1)

    def multi_entropy(self) -> torch.Tensor:
        # masked and padded slots have probability exactly 0 (and a finite log-probability),
        # so they add nothing: the sums run over legal actions only
        return -(self.probs * self.log_probs).sum(-1)

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
        return (self.probs * (self.log_probs - other.log_probs)).sum(-1)

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


class MaskedMultiCategorical(MultiCategorical):
    """MultiCategorical with per-component action masking.

    Legality comes from ``mask`` (``[*batch, sum(input_lens)]``, nonzero = legal) or from
    logits ``<= -1e8``. Masked actions are never sampled; entropy and KL sum over legal
    actions only; every component of every batch entry needs a legal action.

    Args:
        inputs: Logits ``[*batch, sum(input_lens)]``.
        model: The model (unused).
        input_lens: Categories per component (from ``action_space`` when omitted).
        action_space: Optional MultiDiscrete or integer Box.
        mask: Optional legality mask broadcastable to the inputs.

    Examples:
        >>> import torch
        >>> d = MaskedMultiCategorical(torch.zeros(1, 5), None, [2, 3],
        ...                            mask=torch.tensor([[1, 1, 0, 0, 1]]))
        >>> d.deterministic_sample()
        tensor([[0, 2]])
        >>> d.multi_entropy()
        tensor([[0.6931, 0.0000]])
    """

    def __init__(
        self,
        inputs: TensorLike,
        model: Any = None,
        input_lens: Sequence[int] | np.ndarray | None = None,
        action_space: gym.Space | None = None,
        *,
        mask: TensorLike | None = None,
    ):
        self._mask_arg = mask
        super().__init__(inputs, model, input_lens, action_space)
        self._normalized = _normalize(self.logits)
        if not bool((self._normalized[2] > FLOAT_MIN).all()):
            raise ValueError(
                "MaskedMultiCategorical: every component of every batch entry needs at least "
                "one legal action; some are fully masked"
            )

    def _flat_illegal(self) -> torch.Tensor | None:
        self._illegal = _illegal_from(self.inputs, self._mask_arg, "MaskedMultiCategorical")
        return self._illegal

    @property
    def legal(self) -> torch.Tensor:
        """Boolean ``[*batch, sum(input_lens)]``: which actions are legal."""
        return self._illegal == 0


# --------------------------------------------------------------------------------------------
# continuous distributions


def _box_bounds(
    low: Any, high: Any, action_space: gym.Space | None, dim: int, who: str, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Finite ``low < high`` bounds as float32 tensors broadcastable to ``[dim]``."""
    if action_space is not None:
        if not isinstance(action_space, Box):
            raise ValueError(f"{who}: action_space must be a Box, got {action_space}")
        low, high = action_space.low.ravel(), action_space.high.ravel()
    lo = torch.as_tensor(np.asarray(low, dtype=np.float32), device=device)
    hi = torch.as_tensor(np.asarray(high, dtype=np.float32), device=device)
    if lo.dim() > 1 or hi.dim() > 1 or lo.numel() not in (1, dim) or hi.numel() not in (1, dim):
        raise ValueError(f"{who}: low/high must be scalars or have {dim} entries")
    if not (bool(torch.isfinite(lo).all()) and bool(torch.isfinite(hi).all())):
        raise ValueError(f"{who}: low/high must be finite, got low={low}, high={high}")
    if not bool((hi > lo).all()):
        raise ValueError(f"{who}: needs low < high, got low={low}, high={high}")
    return lo, hi


def _check_even(inputs: torch.Tensor, who: str, action_space: gym.Space | None) -> int:
    n = int(inputs.shape[-1])
    if n % 2:
        raise ValueError(f"{who}: inputs need an even last dim (means then log-stds), got {n}")
    if action_space is not None and isinstance(action_space, Box):
        want = 2 * _prod(action_space.shape)
        if n != want:
            raise ValueError(f"{who}: {action_space} needs {want} inputs, got {n}")
    return n // 2


class DiagGaussian(ActionDistribution):
    """Diagonal Gaussian: inputs ``[*batch, 2d]`` are means then log-stds (RLlib TorchDiagGaussian).

    ``logp``, ``entropy`` and ``kl`` are summed over the ``d`` action dims (closed forms).
    ``deterministic_sample`` is the mean. ``log_std`` is clamped to ``[-20, 20]`` (RLlib has
    no clamp; beyond that float32 ``exp`` breaks down).

    Differences from RLlib (differences.md 8): for a ``Box(())`` action space both ``sample`` and
    ``deterministic_sample`` return ``[*batch]``, and ``logp`` takes ``[*batch]`` or
    ``[*batch, 1]`` actions. Any other action shape mismatch raises ``ValueError`` (RLlib
    broadcasts a ``[B]`` action against ``[B, 1]`` into a silently wrong ``[B, B]``).

    Args:
        inputs: ``[*batch, 2d]``: means, then log standard deviations.
        model: The model (unused).
        action_space: Optional Box (``Box(())`` switches to scalar actions).

    Examples:
        >>> import torch
        >>> d = DiagGaussian(torch.tensor([[0.0, 1.0, 0.0, 0.0]]), None)
        >>> d.deterministic_sample()
        tensor([[0., 1.]])
        >>> d.logp(torch.tensor([[0.0, 1.0]]))
        tensor([-1.8379])
    """

    def __init__(
        self, inputs: TensorLike, model: Any = None, *, action_space: gym.Space | None = None
    ):
        super().__init__(inputs, model)
        _check_even(self.inputs, "DiagGaussian", action_space)
        mean, log_std = torch.chunk(self.inputs, 2, dim=-1)
        self.mean = mean
        self.log_std = log_std.clamp(-LOG_BOUND, LOG_BOUND)
        self.std = self.log_std.exp()
        self.action_space = action_space
        self._scalar = action_space is not None and tuple(action_space.shape or ()) == ()

    @property
    def dist(self) -> torch.distributions.Normal:
        """The equivalent ``torch.distributions.Normal`` (per dim)."""
        return torch.distributions.Normal(self.mean, self.std, validate_args=False)

    def _out(self, x: torch.Tensor) -> torch.Tensor:
        return x.squeeze(-1) if self._scalar else x

    def sample(self) -> torch.Tensor:
        with torch.no_grad():
            x = self.mean + self.std * torch.randn_like(self.mean)
        self.last_sample = self._out(x)
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        return self._out(self.mean)

    def logp(self, actions: TensorLike) -> torch.Tensor:
        x = _float_tensor(actions, "DiagGaussian.logp actions").to(self.mean.device)
        if self._scalar and x.shape == self.mean.shape[:-1]:
            x = x.unsqueeze(-1)
        _batch_shape_check(x, self.mean.shape, "DiagGaussian.logp")
        z = (x - self.mean) / self.std
        return (-0.5 * z * z - self.log_std - _HALF_LOG_2PI).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + (0.5 + _HALF_LOG_2PI)).sum(-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        self._same_class(other)
        assert isinstance(other, DiagGaussian)
        var_ratio = (self.std / other.std) ** 2
        t = ((self.mean - other.mean) / other.std) ** 2
        return (0.5 * (var_ratio + t - 1.0) - (self.log_std - other.log_std)).sum(-1)

    @staticmethod
    def required_model_output_shape(action_space: gym.Space, model_config: Any) -> int:
        return 2 * _prod(action_space.shape or ())


class SquashedGaussian(ActionDistribution):
    """Gaussian squashed by ``tanh`` into ``[low, high]`` (RLlib TorchSquashedGaussian).

    ``log_std`` is clamped to ``[-5, 2]``; the per-dim Normal log-density is clamped to
    ``[-100, 100]``; actions are un-squashed with a ``1e-6`` margin, as in RLlib.
    ``entropy`` and ``kl`` have no closed form and raise ``ValueError`` (as in RLlib).

    Differences from RLlib: ``logp`` includes the ``-sum log((high - low) / 2)`` Jacobian of
    the affine rescale, so it is a true density on ``[low, high]`` (differences.md 9; identical for
    ``[-1, 1]``); bounds may come from a Box ``action_space`` (per dim); the tanh Jacobian
    ``log(1 - tanh(u)^2 + 1e-6)`` uses the normalised action itself instead of
    ``tanh(atanh(.))``; ``sampled_action_logp`` scores the pre-squash draw directly (no
    round trip through ``atanh``).

    Args:
        inputs: ``[*batch, 2d]``: means, then log standard deviations.
        model: The model (unused).
        low: Lower bound(s), scalar or ``d`` values.
        high: Upper bound(s), scalar or ``d`` values.
        action_space: Optional Box whose bounds replace ``low`` / ``high``.

    Examples:
        >>> import torch
        >>> d = SquashedGaussian(torch.tensor([[0.0, 0.0]]), None, low=0.0, high=4.0)
        >>> d.deterministic_sample()
        tensor([[2.]])
        >>> d.logp(torch.tensor([[2.0]]))  # N(0,1) at 0, minus log(2)
        tensor([-1.6121])
    """

    def __init__(
        self,
        inputs: TensorLike,
        model: Any = None,
        low: Any = -1.0,
        high: Any = 1.0,
        *,
        action_space: gym.Space | None = None,
    ):
        super().__init__(inputs, model)
        d = _check_even(self.inputs, "SquashedGaussian", action_space)
        self.low, self.high = _box_bounds(
            low, high, action_space, d, "SquashedGaussian", self.inputs.device
        )
        mean, log_std = torch.chunk(self.inputs, 2, dim=-1)
        self.mean = mean
        self.log_std = log_std.clamp(MIN_LOG_NN_OUTPUT, MAX_LOG_NN_OUTPUT)
        self.std = self.log_std.exp()
        self._log_half_range = torch.log((self.high - self.low) / 2.0).expand(d).sum()
        self._last_z: torch.Tensor | None = None

    def _squash(self, z: torch.Tensor) -> torch.Tensor:
        x = (torch.tanh(z) + 1.0) / 2.0 * (self.high - self.low) + self.low
        return torch.minimum(torch.maximum(x, self.low), self.high)

    def _normal_logp(self, u: torch.Tensor) -> torch.Tensor:
        z = (u - self.mean) / self.std
        return (-0.5 * z * z - self.log_std - _HALF_LOG_2PI).clamp(-100.0, 100.0).sum(-1)

    def sample(self) -> torch.Tensor:
        with torch.no_grad():
            z = self.mean + self.std * torch.randn_like(self.mean)
        self._last_z = z
        self.last_sample = self._squash(z)
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        return self._squash(self.mean)

    def logp(self, actions: TensorLike) -> torch.Tensor:
        x = _float_tensor(actions, "SquashedGaussian.logp actions").to(self.mean.device)
        _batch_shape_check(x, self.mean.shape, "SquashedGaussian.logp")
        n = (x - self.low) / (self.high - self.low) * 2.0 - 1.0
        n = n.clamp(-1.0 + SMALL_NUMBER, 1.0 - SMALL_NUMBER)
        u = torch.atanh(n)
        jac = torch.log(1.0 - n * n + SMALL_NUMBER).sum(-1)
        return self._normal_logp(u) - jac - self._log_half_range

    def sampled_action_logp(self) -> torch.Tensor:
        if self._last_z is None:
            raise RuntimeError("SquashedGaussian.sampled_action_logp() needs a sample() call")
        z = self._last_z
        t = torch.tanh(z)
        jac = torch.log(1.0 - t * t + SMALL_NUMBER).sum(-1)
        return self._normal_logp(z) - jac - self._log_half_range

    def entropy(self) -> torch.Tensor:
        raise ValueError(
            "Entropy/KL not defined for SquashedGaussian! (no closed form; estimate it from "
            "-sampled_action_logp() if you need it)"
        )

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        raise ValueError(
            "Entropy/KL not defined for SquashedGaussian! (no closed form; estimate it from "
            "samples if you need it)"
        )

    @staticmethod
    def required_model_output_shape(action_space: gym.Space, model_config: Any) -> int:
        return 2 * _prod(action_space.shape or ())


def _log_beta_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.lgamma(a) + torch.lgamma(b) - torch.lgamma(a + b)


class Beta(ActionDistribution):
    """Beta distribution rescaled to ``[low, high]`` (RLlib TorchBeta).

    Inputs ``[*batch, 2d]`` are clamped to ``[log(1e-6), -log(1e-6)]`` and mapped through
    ``softplus(x) + 1`` (so every concentration is >= 1): first half ``alpha``, second half
    ``beta``. ``self.inputs`` holds these concentrations, as in RLlib. ``logp(x)`` is the
    unit-interval Beta log-density of ``(x - low) / (high - low)`` summed over dims (no
    ``log(high - low)`` Jacobian, as in RLlib); that unit value is clamped to
    ``[1e-6, 1 - 1e-6]`` so actions at or beyond the bounds stay finite.

    Differences from RLlib (differences.md 10): ``entropy`` and ``kl`` are summed over action dims
    (shape ``[*batch]``; RLlib returns ``[B, d]``). Bounds may come from a Box
    ``action_space``.

    Args:
        inputs: ``[*batch, 2d]`` raw model outputs.
        model: The model (unused).
        low: Lower bound(s).
        high: Upper bound(s).
        action_space: Optional Box whose bounds replace ``low`` / ``high``.

    Examples:
        >>> import torch
        >>> d = Beta(torch.zeros(1, 2), None, low=-1.0, high=1.0)
        >>> d.deterministic_sample()
        tensor([[0.]])
        >>> d.entropy().shape
        torch.Size([1])
    """

    def __init__(
        self,
        inputs: TensorLike,
        model: Any = None,
        low: Any = 0.0,
        high: Any = 1.0,
        *,
        action_space: gym.Space | None = None,
    ):
        super().__init__(inputs, model)
        d = _check_even(self.inputs, "Beta", action_space)
        self.low, self.high = _box_bounds(low, high, action_space, d, "Beta", self.inputs.device)
        bound = -math.log(SMALL_NUMBER)
        conc = torch.nn.functional.softplus(self.inputs.clamp(-bound, bound)) + 1.0
        self.inputs = conc
        self.alpha, self.beta = torch.chunk(conc, 2, dim=-1)
        self._lbeta: torch.Tensor | None = None

    @property
    def log_beta(self) -> torch.Tensor:
        """``log B(alpha, beta)`` per dim (computed once, shared by logp/entropy/kl)."""
        if self._lbeta is None:
            self._lbeta = _log_beta_fn(self.alpha, self.beta)
        return self._lbeta

    @property
    def dist(self) -> torch.distributions.Beta:
        """The equivalent unit-interval ``torch.distributions.Beta``."""
        return torch.distributions.Beta(self.alpha, self.beta, validate_args=False)

    def sample(self) -> torch.Tensor:
        unit = self.dist.rsample()
        self.last_sample = unit * (self.high - self.low) + self.low
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        mean = self.alpha / (self.alpha + self.beta)
        return mean * (self.high - self.low) + self.low

    def logp(self, actions: TensorLike) -> torch.Tensor:
        x = _float_tensor(actions, "Beta.logp actions").to(self.alpha.device)
        _batch_shape_check(x, self.alpha.shape, "Beta.logp")
        u = ((x - self.low) / (self.high - self.low)).clamp(SMALL_NUMBER, 1.0 - SMALL_NUMBER)
        a, b = self.alpha, self.beta
        lp = (a - 1.0) * torch.log(u) + (b - 1.0) * torch.log1p(-u) - self.log_beta
        return lp.sum(-1)

    def entropy(self) -> torch.Tensor:
        a, b = self.alpha, self.beta
        dg = torch.digamma
        h = self.log_beta - (a - 1.0) * dg(a) - (b - 1.0) * dg(b) + (a + b - 2.0) * dg(a + b)
        return h.sum(-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        self._same_class(other)
        assert isinstance(other, Beta)
        a1, b1, a2, b2 = self.alpha, self.beta, other.alpha, other.beta
        dg = torch.digamma
        k = (
            other.log_beta
            - self.log_beta
            + (a1 - a2) * dg(a1)
            + (b1 - b2) * dg(b1)
            + (a2 - a1 + b2 - b1) * dg(a1 + b1)
        )
        return k.sum(-1)

    @staticmethod
    def required_model_output_shape(action_space: gym.Space, model_config: Any) -> int:
        return 2 * _prod(action_space.shape or ())


class Deterministic(ActionDistribution):
    """A point mass at the model output (RLlib TorchDeterministic; DDPG/TD3 actors).

    ``sample`` and ``deterministic_sample`` return the inputs; ``sampled_action_logp`` is
    zeros ``[*batch]``. A point mass has no density, entropy or KL, so ``logp``,
    ``entropy`` and ``kl`` raise ``NotImplementedError`` with an explanation (differences.md 11;
    RLlib raises an ``AttributeError`` about a missing ``.dist``).

    Examples:
        >>> import torch
        >>> d = Deterministic(torch.tensor([[0.5, -1.0]]), None)
        >>> d.sample()
        tensor([[ 0.5000, -1.0000]])
        >>> d.sampled_action_logp()
        tensor([0.])
    """

    def sample(self) -> torch.Tensor:
        self.last_sample = self.inputs
        return self.inputs

    def deterministic_sample(self) -> torch.Tensor:
        return self.inputs

    def sampled_action_logp(self) -> torch.Tensor:
        return torch.zeros(self.inputs.shape[:-1], dtype=torch.float32, device=self.inputs.device)

    def _undefined(self, what: str) -> NotImplementedError:
        return NotImplementedError(
            f"Deterministic.{what} is undefined: a deterministic policy is a point mass with "
            "no density, entropy or KL. Use a stochastic distribution (e.g. DiagGaussian) if "
            "your algorithm needs it."
        )

    def logp(self, actions: Any) -> torch.Tensor:
        raise self._undefined("logp")

    def entropy(self) -> torch.Tensor:
        raise self._undefined("entropy")

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        raise self._undefined("kl")

    @staticmethod
    def required_model_output_shape(action_space: gym.Space, model_config: Any) -> int:
        return _prod(action_space.shape or ())


class Dirichlet(ActionDistribution):
    """Dirichlet over the simplex (RLlib TorchDirichlet; a ``Simplex`` action space).

    ``concentration = exp(inputs) + 1e-7`` (inputs clamped to ``[-20, 20]``); ``self.inputs``
    holds the concentration, as in RLlib. ``logp(x)`` floors ``x`` at ``1e-7`` and
    renormalises it to sum 1. With a ``Simplex`` of rank > 1 each row of the last axis is
    its own Dirichlet and ``logp``/``entropy``/``kl`` are summed over the leading axes.

    Differences from RLlib (differences.md 12): ``deterministic_sample`` is the Dirichlet mean
    ``c / sum(c)`` (RLlib returns ``softmax(c)``), and ``kl`` works.

    Args:
        inputs: ``[*batch, prod(shape)]`` log-concentrations.
        model: The model (unused).
        action_space: Optional Simplex (sets the action shape).

    Examples:
        >>> import torch
        >>> d = Dirichlet(torch.log(torch.tensor([[1.0, 3.0]])), None)
        >>> d.deterministic_sample()
        tensor([[0.2500, 0.7500]])
    """

    def __init__(
        self, inputs: TensorLike, model: Any = None, *, action_space: gym.Space | None = None
    ):
        super().__init__(inputs, model)
        raw = self.inputs
        self._batch = raw.shape[:-1]
        shape: tuple[int, ...] = (int(raw.shape[-1]),)
        if action_space is not None:
            shape = tuple(action_space.shape or ())
            if len(shape) == 0 or _prod(shape) != int(raw.shape[-1]):
                raise ValueError(
                    f"Dirichlet: {action_space} needs {_prod(shape)} inputs, got {raw.shape[-1]}"
                )
        self.action_shape = shape
        self._extra = len(shape) - 1
        conc = torch.exp(raw.clamp(-LOG_BOUND, LOG_BOUND)) + 1e-7
        self.inputs = conc
        self.concentration = conc.reshape(*self._batch, *shape)
        self._total = self.concentration.sum(-1)
        self._lnorm: torch.Tensor | None = None

    @property
    def log_normalizer(self) -> torch.Tensor:
        """``log B(c) = sum lgamma(c_i) - lgamma(sum c)`` per simplex row (computed once)."""
        if self._lnorm is None:
            self._lnorm = torch.lgamma(self.concentration).sum(-1) - torch.lgamma(self._total)
        return self._lnorm

    @property
    def dist(self) -> torch.distributions.Dirichlet:
        """The equivalent ``torch.distributions.Dirichlet``."""
        return torch.distributions.Dirichlet(self.concentration, validate_args=False)

    def _reduce(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(tuple(range(-self._extra, 0))) if self._extra else x

    def sample(self) -> torch.Tensor:
        self.last_sample = self.dist.sample()
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        c = self.concentration
        return c / c.sum(-1, keepdim=True)

    def logp(self, actions: TensorLike) -> torch.Tensor:
        x = _float_tensor(actions, "Dirichlet.logp actions").to(self.concentration.device)
        _batch_shape_check(x, self.concentration.shape, "Dirichlet.logp")
        x = x.clamp_min(1e-7)
        x = x / x.sum(-1, keepdim=True)
        lp = ((self.concentration - 1.0) * torch.log(x)).sum(-1) - self.log_normalizer
        return self._reduce(lp)

    def entropy(self) -> torch.Tensor:
        c, c0 = self.concentration, self._total
        k = c.shape[-1]
        h = (
            self.log_normalizer
            + (c0 - k) * torch.digamma(c0)
            - ((c - 1.0) * torch.digamma(c)).sum(-1)
        )
        return self._reduce(h)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        self._same_class(other)
        assert isinstance(other, Dirichlet)
        return self._reduce(torch.distributions.kl_divergence(self.dist, other.dist))

    @staticmethod
    def required_model_output_shape(action_space: gym.Space, model_config: Any) -> int:
        return _prod(action_space.shape or ())


# --------------------------------------------------------------------------------------------
# structured actions


def _is_discrete_leaf(space: gym.Space) -> bool:
    return isinstance(space, (Discrete, MultiDiscrete)) or (
        isinstance(space, Box) and np.issubdtype(space.dtype, np.integer)
    )


def _leaf_action_shape(space: gym.Space, path: tuple = ()) -> tuple[int, ...]:
    """Shape of one action of a leaf space (``()`` for Discrete)."""
    if isinstance(space, Discrete):
        return ()
    if isinstance(space, (MultiDiscrete, Box, Simplex)):
        return tuple(space.shape or ())
    raise UnsupportedSpaceError(
        f"action space {format_path(path, 'action_space')} = {space!r} is not supported; "
        "leaves must be Discrete, MultiDiscrete, Box or Simplex"
    )


def _leaf_tensor(
    value: Any, space: gym.Space, batch: torch.Size, device: torch.device, what: str
) -> torch.Tensor:
    if _is_discrete_leaf(space):
        t = _index_tensor(value, what, device)
        if isinstance(space, Discrete) and t.dim() == len(batch) + 1 and t.shape[-1] == 1:
            t = t.squeeze(-1)
        return t
    return _float_tensor(value, what).to(device)


def _flatten_actions(
    paths: list[tuple[tuple, gym.Space]],
    actions: Any,
    batch: torch.Size,
    device: torch.device,
    who: str,
) -> list[torch.Tensor]:
    """Per-leaf action tensors from a structure (tuple/dict) or one flat ``[*batch, w]`` array.

    A flat array is split by the widths the action space defines (1 per Discrete, else the
    product of the leaf's shape), in flatten order (Dict keys sorted): no sampling needed.
    """
    if isinstance(actions, (torch.Tensor, np.ndarray)):
        x = actions if isinstance(actions, torch.Tensor) else torch.as_tensor(actions)
        shapes = [_leaf_action_shape(leaf, path) for path, leaf in paths]
        widths = [_prod(s) for s in shapes]
        if x.dim() != len(batch) + 1 or x.shape[-1] != sum(widths):
            raise ValueError(
                f"{who}: a flat action tensor needs shape {(*batch, sum(widths))} (leaf widths "
                f"{widths} in flatten order), got {tuple(x.shape)}"
            )
        out = []
        for (path, leaf), part, shape in zip(
            paths, torch.split(x, widths, -1), shapes, strict=True
        ):
            part = part.reshape(*batch, *shape)
            out.append(
                _leaf_tensor(part, leaf, batch, device, f"{who} {format_path(path, 'actions')}")
            )
        return out
    out = []
    for path, leaf in paths:
        node = actions
        for key in path:
            try:
                node = node[key]
            except (KeyError, IndexError, TypeError) as err:
                raise ValueError(
                    f"{who}: actions have no entry {format_path(path, 'actions')}; pass a "
                    "structure shaped like the action space or one flat tensor"
                ) from err
        out.append(_leaf_tensor(node, leaf, batch, device, f"{who} {format_path(path, 'actions')}"))
    return out


def _unflatten(space: gym.Space, values: Any) -> Any:
    """Rebuilds the action space's structure from leaf values in flatten order."""
    if isinstance(space, Tuple):
        return tuple(_unflatten(s, values) for s in space.spaces)
    if isinstance(space, Dict):
        built = {k: _unflatten(space.spaces[k], values) for k in sorted(space.spaces)}
        return {k: built[k] for k in space.spaces}
    return next(values)


class _class_or_instance_method:
    """A method that receives the instance when called on one and the class otherwise."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj: Any, owner: type) -> Callable[..., Any]:
        return partial(self.fn, owner if obj is None else obj)


class MultiActionDistribution(ActionDistribution):
    """Independent child distributions over a nested Tuple/Dict action space.

    Inputs are split by ``input_lens`` (flatten order, Dict keys sorted) and each child is
    built as ``child(slice, model)``. ``sample`` and ``deterministic_sample`` return the
    action space's structure (tuples and dicts); ``logp`` takes that structure or one flat
    tensor; ``logp``, ``entropy``, ``kl`` and ``sampled_action_logp`` sum the children.

    Differences from RLlib (differences.md 13): a flat action tensor is split by widths read from
    the action space (1 per Discrete, else ``prod(shape)``), never by drawing a sample;
    discrete parts are int64; ``sampled_action_logp`` does not write into a child's tensor.

    Args:
        inputs: ``[*batch, sum(input_lens)]``.
        model: The model, passed on to the children.
        child_distributions: One distribution class (or partial) per leaf, flatten order.
        input_lens: Model outputs per leaf.
        action_space: The Tuple/Dict action space.

    Examples:
        >>> import torch, gymnasium as gym
        >>> space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (1,))))
        >>> cls, n = select_action_dist(space, {})
        >>> d = cls(torch.zeros(3, n), None)
        >>> a = d.sample()
        >>> type(a).__name__, a[0].shape, a[1].shape
        ('tuple', torch.Size([3]), torch.Size([3, 1]))
        >>> torch.allclose(d.logp(a), d.logp(torch.cat([a[0][:, None].float(), a[1]], 1)))
        True
    """

    def __init__(
        self,
        inputs: TensorLike,
        model: Any = None,
        *,
        child_distributions: Sequence[Callable[..., ActionDistribution]],
        input_lens: Sequence[int],
        action_space: gym.Space,
    ):
        super().__init__(inputs, model)
        self.action_space = action_space
        self._paths = space_path_items(action_space, sort_dict_keys=True)
        lens = [int(n) for n in input_lens]
        if not (len(child_distributions) == len(lens) == len(self._paths)):
            raise ValueError(
                f"MultiActionDistribution: {len(self._paths)} leaves in {action_space}, but "
                f"{len(child_distributions)} child distributions and {len(lens)} input_lens"
            )
        if int(self.inputs.shape[-1]) != sum(lens):
            raise ValueError(
                f"MultiActionDistribution: inputs have {int(self.inputs.shape[-1])} entries in "
                f"the last dim, input_lens {lens} need {sum(lens)}"
            )
        self.input_lens = lens
        self._batch = self.inputs.shape[:-1]
        parts = torch.split(self.inputs, lens, dim=-1)
        self.flat_child_distributions = [
            cls(part, model) for cls, part in zip(child_distributions, parts, strict=True)
        ]

    def sample(self) -> Any:
        self.last_sample = _unflatten(
            self.action_space, iter([c.sample() for c in self.flat_child_distributions])
        )
        return self.last_sample

    def deterministic_sample(self) -> Any:
        return _unflatten(
            self.action_space,
            iter([c.deterministic_sample() for c in self.flat_child_distributions]),
        )

    def logp(self, actions: Any) -> torch.Tensor:
        flat = _flatten_actions(
            self._paths, actions, self._batch, self.inputs.device, "MultiActionDistribution.logp"
        )
        return _sum(c.logp(a) for c, a in zip(self.flat_child_distributions, flat, strict=True))

    def sampled_action_logp(self) -> torch.Tensor:
        if self.last_sample is None:
            raise RuntimeError("MultiActionDistribution.sampled_action_logp() needs sample()")
        return _sum(c.sampled_action_logp() for c in self.flat_child_distributions)

    def entropy(self) -> torch.Tensor:
        return _sum(c.entropy() for c in self.flat_child_distributions)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        self._same_class(other)
        assert isinstance(other, MultiActionDistribution)
        if len(other.flat_child_distributions) != len(self.flat_child_distributions):
            raise ValueError("MultiActionDistribution.kl: the two have different children")
        return _sum(
            c.kl(o)
            for c, o in zip(
                self.flat_child_distributions, other.flat_child_distributions, strict=True
            )
        )

    @_class_or_instance_method
    def required_model_output_shape(  # type: ignore[override]
        self_or_cls: Any, action_space: gym.Space | None = None, model_config: Any = None
    ) -> int:
        """The model outputs the distribution needs: on an instance ``sum(input_lens)`` (as
        in RLlib, which takes and ignores ``action_space`` and ``model_config``); on the
        class, the sum over the leaves of ``action_space``.

        Examples:
            >>> space = gym.spaces.Tuple((Discrete(3), Box(-1, 1, (2,))))
            >>> MultiActionDistribution.required_model_output_shape(space, {})
            7
        """
        if isinstance(self_or_cls, MultiActionDistribution):
            return sum(self_or_cls.input_lens)
        if action_space is None:
            raise ValueError("MultiActionDistribution.required_model_output_shape needs the "
                             "action space when called on the class")
        return int(select_action_dist(action_space, dict(model_config or {}))[1])


def _sum(values: Any) -> torch.Tensor:
    it = iter(values)
    total = next(it)
    for v in it:
        total = total + v
    return total


class AutoregressiveDistribution(ActionDistribution):
    """Components of a Tuple/Dict action drawn in order, each conditioned on the previous ones.

    Driven by the model's ``action_model(context, actions)``: given the distribution inputs
    (the model's context output) and a list with one action tensor per leaf (flatten order,
    Dict keys sorted), it returns one input tensor per leaf for that leaf's child
    distribution. Output ``i`` may depend only on ``actions[:i]``; leaves not drawn yet are
    passed as zeros of the right shape and dtype. Sampling calls ``action_model`` once per
    leaf; ``logp`` calls it once, with all actions (teacher forcing), and returns the sum of
    the conditional log-likelihoods.

    ``entropy`` and ``kl`` use the chain rule with one action drawn from ``self``:
    ``H = sum_i H(p_i | a_<i)`` and ``KL = sum_i KL(p_i || q_i | a_<i)``. The first term is
    exact; the rest are single-sample (unbiased) estimates, as in RLlib's autoregressive
    example.

    The child classes come from :func:`select_action_dist` on each leaf unless given. The
    model output size is ``model_config["custom_model_config"]["context_size"]`` (default
    ``context_size``, 16).

    Args:
        inputs: ``[*batch, context]`` context from the model.
        model: A model with an ``action_model`` method (and ``action_space``).
        action_space: The Tuple/Dict action space (default ``model.action_space``).
        child_distributions: Optional distribution class per leaf.

    Examples:
        >>> import torch, gymnasium as gym
        >>> class Toy:  # a2 copies a1 with high probability
        ...     action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(2)))
        ...     def action_model(self, ctx, actions):
        ...         a1 = actions[0].float()[..., None]
        ...         return [ctx[..., :2], torch.cat([1 - a1, a1], -1) * 10]
        >>> d = AutoregressiveDistribution(torch.zeros(1000, 2), Toy())
        >>> a1, a2 = d.sample()
        >>> bool((a1 == a2).float().mean() > 0.99)
        True
    """

    context_size: int = 16

    def __init__(
        self,
        inputs: TensorLike,
        model: Any,
        *,
        action_space: gym.Space | None = None,
        child_distributions: Sequence[Callable[..., ActionDistribution]] | None = None,
    ):
        super().__init__(inputs, model)
        name = type(self).__name__
        if not callable(getattr(model, "action_model", None)):
            raise ValueError(
                f"{name} needs a model with an action_model(context, actions) method, got "
                f"{type(model).__name__}"
            )
        space = action_space if action_space is not None else getattr(model, "action_space", None)
        if not isinstance(space, (Tuple, Dict)):
            raise ValueError(f"{name} needs a Tuple or Dict action space, got {space!r}")
        self.action_space = space
        self._paths = space_path_items(space, sort_dict_keys=True)
        if child_distributions is None:
            cfg = dict(getattr(model, "model_config", None) or {})
            cfg.pop("custom_action_dist", None)
            child_distributions = [select_action_dist(leaf, cfg)[0] for _, leaf in self._paths]
        if len(child_distributions) != len(self._paths):
            raise ValueError(
                f"{name}: {len(self._paths)} leaves but {len(child_distributions)} child "
                "distributions"
            )
        self.child_distributions = list(child_distributions)
        self._batch = self.inputs.shape[:-1]

    def _zero_actions(self) -> list[torch.Tensor]:
        out = []
        for path, leaf in self._paths:
            dtype = torch.int64 if _is_discrete_leaf(leaf) else torch.float32
            shape = (*self._batch, *_leaf_action_shape(leaf, path))
            out.append(torch.zeros(shape, dtype=dtype, device=self.inputs.device))
        return out

    def _child_inputs(self, actions: list[torch.Tensor]) -> list[torch.Tensor]:
        outs = list(self.model.action_model(self.inputs, actions))
        if len(outs) != len(self._paths):
            raise ValueError(
                f"{type(self).__name__}: action_model returned {len(outs)} outputs, expected "
                f"one per leaf ({len(self._paths)})"
            )
        return outs

    def _children(self, actions: list[torch.Tensor]) -> list[ActionDistribution]:
        outs = self._child_inputs(actions)
        return [cls(o, self.model) for cls, o in zip(self.child_distributions, outs, strict=True)]

    def _draw(self, deterministic: bool) -> list[torch.Tensor]:
        actions = self._zero_actions()  # filled in order, each conditioned on the earlier ones
        for i, cls in enumerate(self.child_distributions):
            child = cls(self._child_inputs(actions)[i], self.model)
            actions[i] = child.deterministic_sample() if deterministic else child.sample()
        return actions

    def sample(self) -> Any:
        self.last_sample = _unflatten(self.action_space, iter(self._draw(False)))
        return self.last_sample

    def deterministic_sample(self) -> Any:
        return _unflatten(self.action_space, iter(self._draw(True)))

    def logp(self, actions: Any) -> torch.Tensor:
        flat = _flatten_actions(
            self._paths, actions, self._batch, self.inputs.device, f"{type(self).__name__}.logp"
        )
        return _sum(c.logp(a) for c, a in zip(self._children(flat), flat, strict=True))

    def entropy(self) -> torch.Tensor:
        with torch.no_grad():
            actions = self._draw(False)
        return _sum(c.entropy() for c in self._children(actions))

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        self._same_class(other)
        assert isinstance(other, AutoregressiveDistribution)
        with torch.no_grad():
            actions = self._draw(False)
        return _sum(
            p.kl(q) for p, q in zip(self._children(actions), other._children(actions), strict=True)
        )

    @classmethod
    def required_model_output_shape(  # type: ignore[override]
        cls, action_space: gym.Space, model_config: Any
    ) -> int:
        custom = (model_config or {}).get("custom_model_config") or {}
        return int(custom.get("context_size", cls.context_size))


class BinaryAutoregressiveDistribution(AutoregressiveDistribution):
    """The models guide's binary example: ``P(a1, a2) = P(a1) P(a2 | a1)`` over two ``Discrete(2)``.

    Pairs with :class:`rlblocks.models.autoregressive.AutoregressiveActionModel` (16 context
    outputs). ``logp`` also takes a ``[*batch, 2]`` tensor of ``(a1, a2)`` pairs.

    Examples:
        >>> BinaryAutoregressiveDistribution.required_model_output_shape(None, {})
        16
    """

    ACTION_SPACE = Tuple((Discrete(2), Discrete(2)))

    def __init__(self, inputs: TensorLike, model: Any, **kwargs: Any):
        space = kwargs.pop("action_space", None) or getattr(model, "action_space", None)
        if space is not None and space != self.ACTION_SPACE:
            raise ValueError(
                f"BinaryAutoregressiveDistribution only supports {self.ACTION_SPACE}, got {space}"
            )
        kwargs.setdefault("child_distributions", [Categorical, Categorical])
        super().__init__(inputs, model, action_space=self.ACTION_SPACE, **kwargs)

    @classmethod
    def required_model_output_shape(  # type: ignore[override]
        cls, action_space: gym.Space, model_config: Any
    ) -> int:
        return 16


# --------------------------------------------------------------------------------------------
# catalog table


def _accepts_action_space(cls: Any) -> bool:
    try:
        return "action_space" in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


def _resolve(
    cls: Any,
    action_space: gym.Space,
    config: dict,
    custom_action_dists: Mapping[str, type] | None,
) -> tuple[Callable[..., ActionDistribution], int]:
    """(class bound to the space where it takes one, model outputs) for an explicit class."""
    if isinstance(cls, type) and issubclass(cls, MultiActionDistribution):
        if not isinstance(action_space, (Tuple, Dict)):
            raise ValueError(
                f"{cls.__name__} needs a Tuple or Dict action space, got {action_space}"
            )
        pairs = [
            select_action_dist(leaf, config, None, custom_action_dists)
            for _, leaf in space_path_items(action_space, sort_dict_keys=True)
        ]
        lens = [n for _, n in pairs]
        return (
            partial(
                cls,
                child_distributions=[c for c, _ in pairs],
                input_lens=lens,
                action_space=action_space,
            ),
            sum(lens),
        )
    size = int(cls.required_model_output_shape(action_space, config))
    if _accepts_action_space(cls):
        return partial(cls, action_space=action_space), size
    return cls, size


def select_action_dist(
    action_space: gym.Space,
    model_config: Mapping[str, Any] | None = None,
    dist_type: str | type | None = None,
    custom_action_dists: Mapping[str, type] | None = None,
) -> tuple[Callable[..., ActionDistribution], int]:
    """The action distribution for a space and how many model outputs it needs (RLlib table).

    ``ModelCatalog.get_action_dist`` delegates here. The table: Discrete -> Categorical (n);
    MultiDiscrete -> MultiCategorical (sum(nvec)); integer Box -> MultiCategorical
    (prod(shape) * (max(high) - min(low) + 1)); float Box of rank <= 1 -> DiagGaussian
    (2 * prod(shape)), or Deterministic (prod(shape)) with ``dist_type="deterministic"``;
    Simplex -> Dirichlet (prod(shape)); Tuple/Dict -> MultiActionDistribution over the
    flattened leaves (Dict keys sorted; sum of the children).

    Args:
        action_space: The action space.
        model_config: The model config dict; its ``custom_action_dist`` (a registered name or
            a class) overrides the table. Children of a Tuple/Dict get this config without
            ``custom_action_dist``.
        dist_type: None, ``"deterministic"``, or an ActionDistribution subclass to use.
        custom_action_dists: Registered custom distributions by name.

    A class chosen through ``custom_action_dist`` or ``dist_type`` whose constructor takes an
    ``action_space`` keyword comes back as ``partial(cls, action_space=action_space)`` (so
    e.g. ``SquashedGaussian`` and ``Beta`` take their bounds from the space); other classes
    come back unchanged, as in RLlib.

    Returns:
        ``(dist_class_or_partial, required_num_model_outputs)``; call the first with
        ``(model_outputs, model)``.

    Raises:
        UnsupportedSpaceError: The space has no distribution (float Box of rank >= 2, or a
            space type other than those above).
        ValueError: Unknown ``custom_action_dist`` name or bad ``dist_type``.

    Examples:
        >>> import gymnasium as gym
        >>> cls, n = select_action_dist(gym.spaces.Box(-1, 1, (3,)), {})
        >>> cls.func.__name__, n
        ('DiagGaussian', 6)
        >>> select_action_dist(gym.spaces.Box(-1, 1, (3,)), {}, "deterministic")[1]
        3
        >>> select_action_dist(gym.spaces.MultiDiscrete([2, 3]), {})[1]
        5
    """
    config = dict(model_config or {})
    custom = config.pop("custom_action_dist", None)
    if custom:
        if isinstance(custom, str):
            registry = dict(custom_action_dists or {})
            if custom not in registry:
                raise ValueError(
                    f"custom_action_dist {custom!r} is not registered; registered names: "
                    f"{sorted(registry)}"
                )
            cls = registry[custom]
        elif callable(custom):
            cls = custom
        else:
            raise ValueError(
                f"custom_action_dist must be a registered name or a distribution class, "
                f"got {custom!r}"
            )
        return _resolve(cls, action_space, config, custom_action_dists)

    if isinstance(dist_type, type):
        if not issubclass(dist_type, ActionDistribution):
            raise ValueError(
                f"dist_type must be an ActionDistribution subclass, got {dist_type.__name__}"
            )
        return _resolve(dist_type, action_space, config, custom_action_dists)
    if dist_type is not None and dist_type != "deterministic":
        raise ValueError(
            f"dist_type must be None, 'deterministic' or an ActionDistribution subclass, "
            f"got {dist_type!r}"
        )

    if isinstance(action_space, Box) and not isinstance(action_space, Simplex):
        if np.issubdtype(action_space.dtype, np.integer):
            lo, hi = int(np.min(action_space.low)), int(np.max(action_space.high))
            k = _prod(action_space.shape)
            return (
                partial(MultiCategorical, input_lens=[hi - lo + 1] * k, action_space=action_space),
                k * (hi - lo + 1),
            )
        if not np.issubdtype(action_space.dtype, np.floating):
            raise UnsupportedSpaceError(
                f"Box action space of dtype {action_space.dtype} is not supported; use an "
                "integer or float Box"
            )
        if len(action_space.shape) > 1:
            raise UnsupportedSpaceError(
                f"Action space has multiple dimensions {action_space.shape}. Consider reshaping "
                "this into a single dimension, using a custom action distribution, using a "
                "Tuple action space, or the multi-agent API."
            )
        if dist_type == "deterministic":
            return Deterministic, Deterministic.required_model_output_shape(action_space, config)
        return (
            partial(DiagGaussian, action_space=action_space),
            DiagGaussian.required_model_output_shape(action_space, config),
        )
    if isinstance(action_space, Discrete):
        if int(action_space.start) != 0:
            return partial(Categorical, action_space=action_space), int(action_space.n)
        return Categorical, int(action_space.n)
    if isinstance(action_space, (Tuple, Dict)):
        return _resolve(MultiActionDistribution, action_space, config, custom_action_dists)
    if isinstance(action_space, Simplex):
        shape = tuple(action_space.shape or ())
        if len(shape) > 1:
            return partial(Dirichlet, action_space=action_space), _prod(shape)
        return Dirichlet, _prod(shape)
    if isinstance(action_space, MultiDiscrete):
        nvec = [int(v) for v in np.asarray(action_space.nvec).ravel()]
        return partial(MultiCategorical, input_lens=nvec, action_space=action_space), sum(nvec)
    raise UnsupportedSpaceError(
        f"Unsupported action space {action_space!r}: no action distribution for "
        f"{type(action_space).__name__}. Supported: Discrete, MultiDiscrete, Box (integer, or "
        "float of rank <= 1), Simplex, and Tuple/Dict of these; or set custom_action_dist."
    )
