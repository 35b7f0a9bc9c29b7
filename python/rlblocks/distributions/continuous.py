"""Continuous actions: DiagGaussian, SquashedGaussian, Beta, Deterministic, Dirichlet."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box

from rlblocks.distributions.base import (
    _HALF_LOG_2PI,
    LOG_BOUND,
    MAX_LOG_NN_OUTPUT,
    MIN_LOG_NN_OUTPUT,
    SMALL_NUMBER,
    ActionDistribution,
    TensorLike,
    _batch_shape_check,
    _float_tensor,
    _prod,
)


def _box_bounds(
    low: Any, high: Any, action_space: gym.Space | None, dim: int, who: str, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Finite ``low < high`` bounds as float32 tensors broadcastable to ``[dim]``."""
    if action_space is not None:
        if not isinstance(action_space, Box):
            raise ValueError(f"{who}: action_space must be a Box, got {action_space}")
        low, high = action_space.low.ravel(), action_space.high.ravel()
    # Checked in numpy: the bounds are constants, and torch.export cannot trace bool(tensor).
    lo = np.asarray(low, dtype=np.float32)
    hi = np.asarray(high, dtype=np.float32)
    if lo.ndim > 1 or hi.ndim > 1 or lo.size not in (1, dim) or hi.size not in (1, dim):
        raise ValueError(f"{who}: low/high must be scalars or have {dim} entries")
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        raise ValueError(f"{who}: low/high must be finite, got low={low}, high={high}")
    if not (hi > lo).all():
        raise ValueError(f"{who}: needs low < high, got low={low}, high={high}")
    return torch.as_tensor(lo, device=device), torch.as_tensor(hi, device=device)


def _check_even(inputs: torch.Tensor, who: str, action_space: gym.Space | None) -> int:
    n = int(inputs.shape[-1])
    if n % 2:
        raise ValueError(f"{who}: inputs need an even last dim (means then log-stds), got {n}")
    if action_space is not None and isinstance(action_space, Box):
        want = 2 * _prod(action_space.shape)
        if n != want:
            raise ValueError(f"{who}: {action_space} needs {want} inputs, got {n}")
    return n // 2


def _normal_draw(mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """One draw from ``N(mean, std)`` per element, outside the autograd graph."""
    with torch.no_grad():
        return mean + std * torch.randn_like(mean)


def _normal_rsample(
    mean: torch.Tensor, std: torch.Tensor, sample_shape: Sequence[int]
) -> torch.Tensor:
    """Draws of ``N(mean, std)`` of shape ``sample_shape + mean.shape``, differentiable in
    ``mean`` and ``std`` (the reparameterisation trick)."""
    noise = torch.randn(torch.Size(sample_shape) + mean.shape, device=mean.device, dtype=mean.dtype)
    return mean + std * noise


def _normal_log_density(
    x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, log_std: torch.Tensor
) -> torch.Tensor:
    """Per-element log-density of ``x`` under ``N(mean, std)``."""
    z = (x - mean) / std
    return -0.5 * z * z - log_std - _HALF_LOG_2PI


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
        self.last_sample = self._out(_normal_draw(self.mean, self.std))
        return self.last_sample

    def rsample(self, sample_shape: Sequence[int] = ()) -> torch.Tensor:
        """Reparameterised draws of shape ``sample_shape + batch + action`` (gradients
        reach the inputs)."""
        return self._out(_normal_rsample(self.mean, self.std, sample_shape))

    def deterministic_sample(self) -> torch.Tensor:
        return self._out(self.mean)

    def logp(self, actions: TensorLike) -> torch.Tensor:
        x = _float_tensor(actions, "DiagGaussian.logp actions").to(self.mean.device)
        if self._scalar and x.shape == self.mean.shape[:-1]:
            x = x.unsqueeze(-1)
        _batch_shape_check(x, self.mean.shape, "DiagGaussian.logp")
        return _normal_log_density(x, self.mean, self.std, self.log_std).sum(-1)

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
        density = _normal_log_density(u, self.mean, self.std, self.log_std)
        return density.clamp(-100.0, 100.0).sum(-1)

    def sample(self) -> torch.Tensor:
        z = _normal_draw(self.mean, self.std)
        self._last_z = z
        self.last_sample = self._squash(z)
        return self.last_sample

    def rsample(self, sample_shape: Sequence[int] = ()) -> torch.Tensor:
        """Reparameterised squashed draws of shape ``sample_shape + batch + action``."""
        return self._squash(_normal_rsample(self.mean, self.std, sample_shape))

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

    def _presquash_logp(self, z: torch.Tensor) -> torch.Tensor:
        t = torch.tanh(z)
        jac = torch.log(1.0 - t * t + SMALL_NUMBER).sum(-1)
        return self._normal_logp(z) - jac - self._log_half_range

    def sampled_action_logp(self) -> torch.Tensor:
        if self._last_z is None:
            raise RuntimeError("SquashedGaussian.sampled_action_logp() needs a sample() call")
        return self._presquash_logp(self._last_z)

    def rsample_and_logp(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised sample (gradients reach the inputs) and its log-density, scored
        on the pre-squash draw (SAC's actor loss).

        Examples:
            >>> d = SquashedGaussian(torch.zeros(3, 4, requires_grad=True))
            >>> x, logp = d.rsample_and_logp()
            >>> x.shape, logp.shape, logp.requires_grad
            (torch.Size([3, 2]), torch.Size([3]), True)
        """
        z = _normal_rsample(self.mean, self.std, ())
        return self._squash(z), self._presquash_logp(z)

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
        self.last_sample = self.rsample()
        return self.last_sample

    def rsample(self, sample_shape: Sequence[int] = ()) -> torch.Tensor:
        """Reparameterised draws of shape ``sample_shape + batch + action``, in [low, high]."""
        unit = self.dist.rsample(torch.Size(sample_shape))
        return unit * (self.high - self.low) + self.low

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

    def _missing(self, method: str) -> NotImplementedError:
        """What ``logp``, ``entropy`` and ``kl`` (left to the base class) raise."""
        return NotImplementedError(
            f"Deterministic.{method} is undefined: a deterministic policy is a point mass with "
            "no density, entropy or KL. Use a stochastic distribution (e.g. DiagGaussian) if "
            "your algorithm needs it."
        )

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

    def rsample(self, sample_shape: Sequence[int] = ()) -> torch.Tensor:
        """Reparameterised draws of shape ``sample_shape + batch + simplex``."""
        return self.dist.rsample(torch.Size(sample_shape))

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
