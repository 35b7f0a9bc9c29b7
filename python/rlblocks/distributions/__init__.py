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

from rlblocks.distributions.autoregressive import (
    AutoregressiveDistribution,
    BinaryAutoregressiveDistribution,
)
from rlblocks.distributions.base import FLOAT_MIN, ActionDistribution, UnsupportedSpaceError
from rlblocks.distributions.categorical import Categorical, MultiCategorical
from rlblocks.distributions.continuous import (
    Beta,
    Deterministic,
    DiagGaussian,
    Dirichlet,
    SquashedGaussian,
)
from rlblocks.distributions.masked import MaskedCategorical, MaskedMultiCategorical
from rlblocks.distributions.multi_action import MultiActionDistribution, select_action_dist

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
