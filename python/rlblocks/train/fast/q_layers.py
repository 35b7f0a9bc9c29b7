"""``DenseQ``: a fully connected :class:`~rlblocks.models.qnetwork.QNetwork` as plain
tensors, with its head (one output per action, or dueling) and its backward pass.

DQN's update on CartPole-sized networks is mostly the cost of module calls and autograd's
graph: a batch of 64 rows through two layers of 64 units is a few microseconds of
arithmetic per layer. :class:`DenseQ` runs the trunk and the head as ``addmm`` calls
(:class:`~rlblocks.train.fast.dense_layers.Dense`), writes the gradients of a loss on the
Q-values in closed form, and answers acting calls in numpy on views of the weights.

The dueling head computes ``Q = V + A - mean_a(A)`` as
:class:`~rlblocks.models.heads.DuelingQModel` does; its gradient is
``dA = dQ - mean_a(dQ)``, ``dV = sum_a(dQ)``.

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks.models.qnetwork import QNetwork
    >>> net = QNetwork(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3),
    ...                {"fcnet_hiddens": [8]}, dueling=True)
    >>> fast = DenseQ.from_network(net)
    >>> x = torch.randn(5, 4)
    >>> with torch.no_grad():
    ...     _, q = fast.forward(x)
    ...     bool(torch.allclose(q, net.masked_q(x)))
    True
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from rlblocks.models.heads import DuelingQModel
from rlblocks.models.qnetwork import QNetwork
from rlblocks.train.fast.dense_layers import (
    Dense,
    FCLayers,
    NumpyWeights,
    backward_stack,
    numpy_weights,
    run_numpy,
    run_stack,
)

__all__ = ["DenseQ"]


class DenseQ:
    """The trunk and head of a fully connected Q-network (module docstring).

    Attributes:
        trunk: The hidden layers.
        logits: The plain head (one output per action), or None with a dueling head.
        advantage, value: The dueling head's ``A`` and ``V`` layers, or None.
        layers: Every layer with parameters (what the backward pass writes gradients to).
    """

    def __init__(
        self,
        trunk: list[Dense],
        logits: Dense | None,
        dueling: tuple[Dense, Dense] | None,
        checks: list[FCLayers],
        wrappers: list[nn.Module],
    ) -> None:
        self.trunk = trunk
        self.logits = logits
        self.advantage: Dense | None = dueling[0] if dueling is not None else None
        self.value: Dense | None = dueling[1] if dueling is not None else None
        head = [logits] if logits is not None else list(dueling or ())
        self.layers: list[Dense] = [*trunk, *head]
        self._checks = checks
        self._hook_dicts = [
            hooks
            for module in wrappers
            for m in module.modules()
            for hooks in (m._forward_hooks, m._forward_pre_hooks)
        ]
        self._backward_hook_dicts = [
            hooks
            for module in wrappers
            for m in module.modules()
            for hooks in (m._backward_hooks, m._backward_pre_hooks)
        ]
        self._numpy: tuple[tuple[int, ...], NumpyWeights, NumpyWeights] | None = None

    @classmethod
    def from_network(cls, net: QNetwork) -> DenseQ | None:
        """The plain tensors of ``net`` when it is a fully connected Q-network with one
        atom and no action mask (plain or dueling head, tanh / ReLU / linear layers), else
        None."""
        if net.masked or net.num_atoms != 1:
            return None
        return cls.from_body(net.body, net.dueling)

    @classmethod
    def from_body(cls, body: nn.Module, dueling: bool) -> DenseQ | None:
        """The plain tensors of a Q-network body with one atom: a :class:`DuelingQModel`
        over a fully connected model (``dueling``), or a fully connected model with one
        output per action; else None."""
        if not dueling:
            layers = FCLayers.from_model(body)
            if layers is None or layers.logits is None or layers.free_log_std is not None:
                return None
            return cls(layers.trunk, layers.logits, None, [layers], [])
        if type(body) is not DuelingQModel or body.num_atoms != 1:
            return None
        base = FCLayers.from_model(body.base_model)
        advantage, value = Dense.from_module(body.A), Dense.from_module(body.V)
        if (
            base is None
            or base.logits is not None
            or base.free_log_std is not None
            or advantage is None
            or value is None
            or advantage.activation is not None
            or value.activation is not None
        ):
            return None
        return cls(base.trunk, None, (advantage, value), [base], [body.A, body.V, body])

    def matches(self, training: bool) -> bool:
        """Whether a pass through the tensors still equals calling the modules (no hook
        set, no layer replaced; :meth:`FCLayers.matches_model`)."""
        if any(self._hook_dicts) or (training and any(self._backward_hook_dicts)):
            return False
        heads_intact = all(
            d.linear.weight is d.weight and d.linear.bias is d.bias
            for d in (self.advantage, self.value)
            if d is not None
        )
        return heads_intact and all(c.matches_model(training) for c in self._checks)

    # --- forward ------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """``(the trunk's activations [x, h1, ...], Q-values [B, n])``; call without
        autograd."""
        acts = run_stack(self.trunk, x)
        features = acts[-1]
        if self.logits is not None:
            return acts, self.logits.forward(features)
        assert self.advantage is not None and self.value is not None
        a = self.advantage.forward(features)
        return acts, self.value.forward(features) + a - a.mean(dim=1, keepdim=True)

    def forward_numpy(self, x: np.ndarray) -> np.ndarray:
        """Q-values ``[B, n]`` of a float32 numpy batch, on views of the weights."""
        key = tuple(d.weight.data_ptr() for d in self.layers)
        if self._numpy is None or self._numpy[0] != key:
            self._numpy = (
                key,
                numpy_weights(self.trunk),
                numpy_weights(self.layers[len(self.trunk) :]),
            )
        _, trunk, head = self._numpy
        features = run_numpy(trunk, x)
        if self.logits is not None:
            return run_numpy(head, features)
        a = run_numpy(head[:1], features)
        return run_numpy(head[1:], features) + a - a.mean(axis=1, keepdims=True)

    # --- backward -----------------------------------------------------------------------------
    def backward(self, acts: list[torch.Tensor], d_q: torch.Tensor) -> None:
        """Writes every layer's gradients for ``d_q`` (``[B, n]``, the loss's gradient of
        the Q-values of :meth:`forward`'s rows); allocates ``.grad`` where missing."""
        for layer in self.layers:
            if layer.weight.grad is None:
                layer.weight.grad = torch.empty_like(layer.weight)
            if layer.bias.grad is None:
                layer.bias.grad = torch.empty_like(layer.bias)
        features = acts[-1]
        need_dx = bool(self.trunk)
        if self.logits is not None:
            d_features = self.logits.backward(features, features, d_q, need_dx)
        else:
            assert self.advantage is not None and self.value is not None
            d_a = d_q - d_q.mean(dim=1, keepdim=True)
            d_v = d_q.sum(dim=1, keepdim=True)
            d_features = self.advantage.backward(features, features, d_a, need_dx)
            d_value = self.value.backward(features, features, d_v, need_dx)
            if d_features is not None and d_value is not None:
                d_features = d_features + d_value
        if d_features is not None:
            backward_stack(self.trunk, acts, d_features)
