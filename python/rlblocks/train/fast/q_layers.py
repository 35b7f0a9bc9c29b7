"""``DenseQ``: a fully connected :class:`~rlblocks.train.qnetwork.QNetwork` as plain
tensors, with its head (one output per action, or dueling) and its backward pass.

DQN's update on CartPole-sized networks is mostly the cost of module calls, autograd's
graph and per-op dispatch: a batch of 64 rows through two layers of 64 units is a few
microseconds of arithmetic per layer, and a torch op costs about as much again. On CPU
:class:`DenseQ` runs the trunk and the head in numpy on views of the weights (acting and
training) and writes the gradients of a loss on the Q-values in closed form into views of
the ``.grad`` tensors; :meth:`DenseQ.forward` is the same pass as torch ``addmm`` calls,
for tensors on any device.

The dueling head computes ``Q = V + A - mean_a(A)`` as
:class:`~rlblocks.models.heads.DuelingQModel` does; its gradient is
``dA = dQ - mean_a(dQ)``, ``dV = sum_a(dQ)``.

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks.train.qnetwork import QNetwork
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

import operator

import numpy as np
import torch
from torch import nn

from rlblocks.models.heads import DuelingQModel
from rlblocks.train.fast.dense_layers import (
    BypassCheck,
    Dense,
    FCLayers,
    NumpyGrads,
    NumpyWeights,
    backward_numpy,
    numpy_grads,
    numpy_weights,
    run_numpy,
    run_stack,
)
from rlblocks.train.qnetwork import QNetwork

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
        modules: list[nn.Module],
    ) -> None:
        self.trunk = trunk
        self.logits = logits
        self.advantage: Dense | None = dueling[0] if dueling is not None else None
        self.value: Dense | None = dueling[1] if dueling is not None else None
        head = [logits] if logits is not None else list(dueling or ())
        self.layers: list[Dense] = [*trunk, *head]
        self._check = BypassCheck(modules, self.layers)
        self._numpy: tuple[tuple[int, ...], NumpyWeights, NumpyWeights] | None = None
        self._grads: tuple[list[torch.Tensor], NumpyGrads] | None = None

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
            if (
                layers is None
                or layers.logits is None
                or layers.logits.activation is not None
                or layers.free_log_std is not None
            ):
                return None
            return cls(layers.trunk, layers.logits, None, [body])
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
        return cls(base.trunk, None, (advantage, value), [body])

    def matches(self, training: bool) -> bool:
        """Whether a pass through the tensors still equals calling the modules (no hook
        set, no layer replaced; :class:`~rlblocks.train.fast.dense_layers.BypassCheck`)."""
        return self._check.intact(training)

    def written_params(self) -> list[nn.Parameter]:
        """The parameters whose ``.grad`` :meth:`backward_numpy` writes, in full, on every
        call (every layer's weight and bias; the network's others it leaves as they are)."""
        return [p for layer in self.layers for p in (layer.weight, layer.bias)]

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

    def forward_numpy(self, x: np.ndarray, acts: list[np.ndarray] | None = None) -> np.ndarray:
        """Q-values ``[B, n]`` of a float32 numpy batch, on views of the weights; the
        trunk's outputs are appended to ``acts`` when given (``[x]``: then it holds what
        :meth:`backward_numpy` needs)."""
        trunk, head = self._numpy_views()
        features = run_numpy(trunk, x, acts)
        if self.logits is not None:
            return run_numpy(head, features)
        a = run_numpy(head[:1], features)
        return run_numpy(head[1:], features) + a - a.mean(axis=1, keepdims=True)

    def _numpy_views(self) -> tuple[NumpyWeights, NumpyWeights]:
        """Numpy views of the trunk's and the head's weights (taken again when a
        parameter's storage moved)."""
        key = tuple(d.weight.data_ptr() for d in self.layers)
        if self._numpy is None or self._numpy[0] != key:
            self._numpy = (
                key,
                numpy_weights(self.trunk),
                numpy_weights(self.layers[len(self.trunk) :]),
            )
        return self._numpy[1], self._numpy[2]

    def _grad_views(self) -> NumpyGrads:
        """Numpy views of the layers' gradients (allocated where missing; taken again when
        a gradient tensor was replaced)."""
        current = [p.grad for d in self.layers for p in (d.weight, d.bias)]
        if self._grads is None or not all(map(operator.is_, current, self._grads[0])):
            views = numpy_grads(self.layers)
            self._grads = ([p.grad for d in self.layers for p in (d.weight, d.bias)], views)  # type: ignore[misc]
        return self._grads[1]

    # --- backward -----------------------------------------------------------------------------
    def backward_numpy(self, acts: list[np.ndarray], d_q: np.ndarray) -> NumpyGrads:
        """Writes every layer's gradients for ``d_q`` (float32 ``[B, n]``, the loss's
        gradient of the Q-values of :meth:`forward_numpy`'s rows; ``acts`` its trunk
        outputs for those rows) and returns numpy views of them; allocates ``.grad`` where
        missing."""
        trunk, head = self._numpy_views()
        grads = self._grad_views()
        n = len(trunk)
        features = acts[-1]
        if self.logits is not None:
            d_features = backward_numpy(head, grads[n:], [features], d_q, input_grad=n > 0)
        else:
            d_a = d_q - d_q.mean(axis=1, keepdims=True)
            d_v = d_q.sum(axis=1, keepdims=True)
            d_features = backward_numpy(head[:1], grads[n : n + 1], [features], d_a, n > 0)
            d_value = backward_numpy(head[1:], grads[n + 1 :], [features], d_v, n > 0)
            if d_features is not None and d_value is not None:
                d_features += d_value
        if d_features is not None:
            backward_numpy(trunk, grads[:n], acts, d_features)
        return grads
