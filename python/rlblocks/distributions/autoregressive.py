"""Autoregressive action distributions: each action component conditioned on the ones
before it through the model's ``action_model``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import torch
from gymnasium.spaces import Dict, Discrete, Tuple

from rlblocks.distributions.base import (
    ActionDistribution,
    TensorLike,
    _sum,
)
from rlblocks.distributions.categorical import Categorical
from rlblocks.distributions.multi_action import (
    _flatten_actions,
    _is_discrete_leaf,
    _leaf_action_shape,
    _space_order,
    _unflatten,
    select_action_dist,
)
from rlblocks.spaces import space_path_items


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
        self._space_order = _space_order(space)
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
        self.last_sample = _unflatten(self._space_order, self._draw(False))
        return self.last_sample

    def deterministic_sample(self) -> Any:
        return _unflatten(self._space_order, self._draw(True))

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
