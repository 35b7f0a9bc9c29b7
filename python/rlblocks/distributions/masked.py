"""Action masking: MaskedCategorical and MaskedMultiCategorical (parametric action spaces)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.distributions.base import (
    FLOAT_MIN,
    MASK_THRESHOLD,
    TensorLike,
)
from rlblocks.distributions.categorical import (
    Categorical,
    MultiCategorical,
    _float_compare,
    _floor_illegal,
    _Logits,
)


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


class _MaskKeyword(_Logits):
    """The masked distributions' constructor: the ``mask`` keyword (read by the masking
    hook of the distribution it is mixed into), the rest passed on (``action_space`` by
    name, so the catalog sees it); every row needs a legal action.
    """

    _fully_masked: str
    _illegal: torch.Tensor

    def __init__(
        self,
        *args: Any,
        mask: TensorLike | None = None,
        action_space: gym.Space | None = None,
        **kwargs: Any,
    ) -> None:
        self._mask_arg = mask
        super().__init__(*args, action_space=action_space, **kwargs)  # type: ignore[call-arg]
        if not bool((self._normalized[2] > FLOAT_MIN).all()):  # a row max at the floor
            raise ValueError(self._fully_masked)

    @property
    def legal(self) -> torch.Tensor:
        """Boolean, shaped like the inputs: which actions are legal."""
        return self._illegal == 0


class MaskedCategorical(_MaskKeyword, Categorical):
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

    _fully_masked = (
        "MaskedCategorical: every batch entry needs at least one legal action; "
        "some rows are fully masked"
    )

    def _masked_logits(self) -> torch.Tensor:
        self._illegal = _illegal_from(self.inputs, self._mask_arg, "MaskedCategorical")
        logits = _floor_illegal(self.inputs, self._illegal)
        if self.temperature != 1.0:
            logits = (logits / self.temperature).clamp_min(FLOAT_MIN)
        return logits


class MaskedMultiCategorical(_MaskKeyword, MultiCategorical):
    """MultiCategorical with per-component action masking.

    Legality comes from ``mask`` (``[*batch, sum(input_lens)]``, nonzero = legal) or from
    logits ``<= -1e8``. Masked actions are never sampled; entropy and KL sum over legal
    actions only; every component of every batch entry needs a legal action.

    Args:
        inputs: Logits ``[*batch, sum(input_lens)]``.
        model: The model (unused).
        input_lens: Categories per component (from ``action_space`` when omitted).
        action_space: Optional MultiDiscrete or integer Box (by name).
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

    _fully_masked = (
        "MaskedMultiCategorical: every component of every batch entry needs at "
        "least one legal action; some are fully masked"
    )

    def _flat_illegal(self) -> torch.Tensor | None:
        self._illegal = _illegal_from(self.inputs, self._mask_arg, "MaskedMultiCategorical")
        return self._illegal
