"""The base class of every action distribution, the shared constants and input checks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

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


def _prod(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _sum(values: Any) -> torch.Tensor:
    """The sum of a non-empty iterable of tensors (no ``0 +`` start)."""
    it = iter(values)
    total = next(it)
    for v in it:
        total = total + v
    return total


def _batch_shape_check(x: torch.Tensor, expected: torch.Size, what: str) -> None:
    if x.shape != expected:
        raise ValueError(
            f"{what}: actions have shape {tuple(x.shape)}, expected {tuple(expected)} "
            "(the batch shape of the inputs followed by the action shape)"
        )


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
