"""``RLBlocksDistribution``: an RLlib ``TorchDistribution`` over any rlblocks action distribution.

RLlib's learners and env runners only ever call ``from_logits`` on the class an RLModule
hands out, then ``sample`` / ``logp`` / ``entropy`` / ``kl`` / ``to_deterministic`` on the
instance. This adapter forwards each call to the wrapped rlblocks distribution, so every
rlblocks family works inside PPO, APPO and IMPALA: Categorical (masked too),
MultiCategorical, DiagGaussian, SquashedGaussian, Beta, Dirichlet, nested
MultiActionDistribution and autoregressive distributions (which need the model: the class
returned by :meth:`RLBlocksDistribution.bind` carries it).

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks.distributions import Categorical
    >>> cls = RLBlocksDistribution.bind(Categorical, 3)
    >>> d = cls.from_logits(torch.tensor([[0.0, 1.0, 2.0]]))
    >>> d.to_deterministic().sample()
    tensor([2])
    >>> round(float(d.logp(torch.tensor([2]))), 4)
    -0.4076
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
import torch

from rlblocks.catalog import ModelCatalog
from rlblocks.distributions import (
    ActionDistribution,
    Beta,
    DiagGaussian,
    Dirichlet,
    SquashedGaussian,
)
from rlblocks.nest import tree_map
from rlblocks.rllib._ray import TorchDistribution

__all__ = ["RLBlocksDistribution"]

DistFn = Callable[..., ActionDistribution]


class RLBlocksDistribution(TorchDistribution):  # type: ignore[misc]
    """An RLlib distribution whose maths is an rlblocks :class:`ActionDistribution`.

    Build one from model outputs with ``cls.from_logits(logits)`` on a class from
    :meth:`bind` (or pass ``dist_fn=`` / ``model=`` yourself). ``self.inner`` is the
    rlblocks distribution.

    Args:
        logits: Model outputs ``[*batch, n]``.
        dist_fn: The rlblocks distribution class (or partial), called ``dist_fn(logits, model)``.
        model: The model handed to the distribution (autoregressive ones need it).

    Raises:
        ValueError: No ``dist_fn`` (neither given nor bound).
    """

    dist_fn: ClassVar[DistFn | None] = None
    input_dim: ClassVar[int | None] = None
    model: ClassVar[Any] = None

    def __init__(self, logits: Any, *, dist_fn: DistFn | None = None, model: Any = None):
        fn = dist_fn if dist_fn is not None else type(self).dist_fn
        if fn is None:
            raise ValueError(
                "RLBlocksDistribution needs an rlblocks distribution: pass dist_fn= or use a "
                "class from RLBlocksDistribution.bind(dist_fn, input_dim, model)"
            )
        self._model = model if model is not None else type(self).model
        self._deterministic = False
        super().__init__(logits, fn)

    def _get_torch_distribution(self, logits: Any, dist_fn: DistFn) -> Any:
        """The wrapped rlblocks distribution (RLlib keeps it in ``self._dist``)."""
        self.inner: ActionDistribution = dist_fn(logits, self._model)
        return self.inner

    # --- class-level construction -------------------------------------------------------------
    @classmethod
    def bind(cls, dist_fn: DistFn, input_dim: int, model: Any = None) -> type[RLBlocksDistribution]:
        """A subclass whose ``from_logits(logits)`` builds ``dist_fn(logits, model)``.

        Args:
            dist_fn: rlblocks distribution class or partial (e.g. from
                ``ModelCatalog.get_action_dist``).
            input_dim: The number of model outputs it takes (``required_input_dim``).
            model: The model passed to the distribution.
        """
        if not callable(dist_fn):
            raise ValueError(f"bind: dist_fn must be a distribution class, got {dist_fn!r}")
        name = getattr(getattr(dist_fn, "func", dist_fn), "__name__", "Distribution")
        return type(
            f"RLBlocks{name}",
            (cls,),
            {
                "dist_fn": dist_fn,
                "input_dim": int(input_dim),
                "model": model,
                "__module__": cls.__module__,
            },
        )

    @classmethod
    def from_logits(cls, logits: Any, **kwargs: Any) -> RLBlocksDistribution:
        """The distribution for ``logits`` (RLlib's constructor of choice)."""
        return cls(logits, **kwargs)

    @classmethod
    def required_input_dim(cls, space: gym.Space, **kwargs: Any) -> int:
        """Model outputs needed for ``space``: the bound size, else the catalog's choice
        for ``space`` and ``kwargs.get("model_config")``."""
        if cls.input_dim is not None:
            return int(cls.input_dim)
        return int(ModelCatalog.get_action_dist(space, kwargs.get("model_config"))[1])

    # --- the Distribution API -------------------------------------------------------------------
    def sample(self, *, sample_shape: Any = None) -> Any:
        """One action per batch entry (``sample_shape`` draws stack in front)."""
        draw = self.inner.deterministic_sample if self._deterministic else self.inner.sample
        shape = tuple(sample_shape or ())
        if not shape:
            return draw()
        n = 1
        for s in shape:
            n *= int(s)
        draws = [draw() for _ in range(n)]
        return tree_map(lambda *xs: torch.stack(xs).reshape(*shape, *xs[0].shape), *draws)

    def rsample(self, *, sample_shape: Any = None) -> Any:
        """A reparameterised sample (gradients flow to the logits).

        Raises:
            NotImplementedError: The family has no reparameterised sample (discrete ones).
        """
        shape = torch.Size(tuple(sample_shape or ()))
        d = self.inner
        if self._deterministic:
            return d.deterministic_sample()
        if isinstance(d, (DiagGaussian, SquashedGaussian, Beta, Dirichlet)):
            return d.rsample(shape)
        raise NotImplementedError(
            f"{type(d).__name__} has no reparameterised sample (rsample); use sample()"
        )

    def rsample_and_logp(self, *, sample_shape: Any = None) -> tuple[Any, torch.Tensor]:
        """A reparameterised sample and its log-likelihood (a SquashedGaussian scores its
        pre-squash draw, never ``atanh`` of the squashed action)."""
        if (
            isinstance(self.inner, SquashedGaussian)
            and not sample_shape
            and not self._deterministic
        ):
            return self.inner.rsample_and_logp()
        sample = self.rsample(sample_shape=sample_shape)
        return sample, self.logp(sample)

    def sample_and_logp(self, *, sample_shape: Any = None) -> tuple[Any, torch.Tensor]:
        """A sample (no gradient) and its log-likelihood."""
        if (
            isinstance(self.inner, SquashedGaussian)
            and not sample_shape
            and not self._deterministic
        ):
            with torch.no_grad():
                return self.inner.rsample_and_logp()
        sample = self.sample(sample_shape=sample_shape)
        return sample, self.logp(sample)

    def logp(self, value: Any, **kwargs: Any) -> torch.Tensor:
        """Log-likelihood of ``value`` under the wrapped distribution."""
        return self.inner.logp(value)

    def entropy(self, **kwargs: Any) -> torch.Tensor:
        """Entropy of the wrapped distribution."""
        return self.inner.entropy()

    def kl(self, other: Any, **kwargs: Any) -> torch.Tensor:
        """KL(self || other).

        Raises:
            ValueError: ``other`` is not an RLBlocksDistribution.
        """
        if not isinstance(other, RLBlocksDistribution):
            raise ValueError(
                f"RLBlocksDistribution.kl needs another RLBlocksDistribution, got "
                f"{type(other).__name__}"
            )
        return self.inner.kl(other.inner)

    def to_deterministic(self) -> RLBlocksDistribution:
        """The same distribution whose ``sample`` is the deterministic (greedy/mean) action;
        ``logp`` still scores under the full distribution."""
        det = copy.copy(self)
        det._deterministic = True
        return det

    def __repr__(self) -> str:
        kind = "deterministic " if self._deterministic else ""
        return f"RLBlocksDistribution({kind}{type(self.inner).__name__})"
