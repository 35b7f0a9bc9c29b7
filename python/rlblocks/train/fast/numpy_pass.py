"""``NumpyPass``: the closed-form PPO update's forward and backward matrix products in numpy.

:class:`~rlblocks.train.fast.FCBackprop` runs a minibatch of a few hundred rows through
the default fully connected model and back about forty times per update: every one of
those matrix products, activations and bias sums is a tensor op whose dispatch (a few
microseconds in torch, about one in numpy) costs as much as the arithmetic at CartPole's
sizes. For a CPU float32 model the layers run here instead, on numpy views of the model's
own parameters and of their ``.grad`` tensors (re-taken when a storage moves), with the
same products in the same order; the head's loss terms run in numpy too
(:mod:`rlblocks.train.fast.numpy_head_grads`, the twin of
:mod:`rlblocks.train.fast.head_grads`), so a minibatch step makes no torch call.

Examples:
    >>> import gymnasium as gym, numpy as np, torch
    >>> from rlblocks.models.fcnet import FullyConnectedNetwork
    >>> from rlblocks.train.fast.dense_layers import FCLayers
    >>> m = FullyConnectedNetwork(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), 2,
    ...                           {"fcnet_hiddens": [8, 8]}, "fc")
    >>> layers = FCLayers.from_model(m)
    >>> npass = NumpyPass.for_layers(layers)
    >>> x = np.ones((3, 4), np.float32)
    >>> fwd = npass.forward(x)
    >>> ref, _ = m({"obs": torch.from_numpy(x)})
    >>> bool(np.allclose(fwd.out, ref.detach().numpy(), atol=1e-6))
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rlblocks.train.fast.dense_layers import (
    Dense,
    FCLayers,
    NumpyGrads,
    NumpyWeights,
    backward_numpy,
    numpy_grads,
    numpy_weights,
    run_numpy,
)

__all__ = ["NumpyForward", "NumpyPass"]


@dataclass
class NumpyForward:
    """One forward pass: every layer's output, kept for :meth:`NumpyPass.backward`."""

    acts: list[np.ndarray]  # [x, trunk outputs...]
    out: np.ndarray  # the model's outputs (logits layer, or the trunk's features)
    head_acts: list[np.ndarray]  # [features, out] with a logits layer, else []
    vacts: list[np.ndarray]  # [x, value trunk outputs...] with separate value layers
    value_acts: list[np.ndarray]  # [value input, values [B, 1]]

    @property
    def values(self) -> np.ndarray:
        """The value estimates ``[B]``."""
        return self.value_acts[1][:, 0]


class NumpyPass:
    """The forward and backward passes of :class:`~rlblocks.train.fast.FCLayers` in numpy
    (see the module docstring). Build it with :meth:`for_layers`."""

    def __init__(self, layers: FCLayers) -> None:
        self.layers = layers
        self._groups: list[list[Dense]] = [
            layers.trunk,
            [layers.logits] if layers.logits is not None else [],
            layers.value_trunk or [],
            [layers.value_head],
        ]
        self._separate = layers.value_trunk is not None  # may be [] (no hidden layers)
        self._params = [p for group in self._groups for d in group for p in (d.weight, d.bias)]
        self._key: tuple[int, ...] = ()
        self._weights: list[NumpyWeights] = []
        self._grads: list[NumpyGrads] = []

    @classmethod
    def for_layers(cls, layers: FCLayers) -> NumpyPass | None:
        """The numpy pass when every layer is a CPU float32 tensor, else None (the caller
        keeps torch)."""
        dense = [*layers.trunk, *(layers.value_trunk or []), layers.value_head]
        if layers.logits is not None:
            dense.append(layers.logits)
        params = [p for d in dense for p in (d.weight, d.bias)]
        if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in params):
            return None
        return cls(layers)

    def _views(self) -> tuple[list[NumpyWeights], list[NumpyGrads]]:
        """Numpy views of the weights and gradients (taken again when a parameter's or a
        gradient's storage moved, or a gradient was freed)."""
        key = tuple(
            [p.data_ptr() for p in self._params]
            + [-1 if p.grad is None else p.grad.data_ptr() for p in self._params]
        )
        if key != self._key:
            self._weights = [numpy_weights(g) for g in self._groups]
            self._grads = [numpy_grads(g) for g in self._groups]
            self._key = tuple(
                [p.data_ptr() for p in self._params] + [p.grad.data_ptr() for p in self._params]  # type: ignore[union-attr]
            )
        return self._weights, self._grads

    def forward(self, x: np.ndarray) -> NumpyForward:
        """The model's outputs and values for the float32 rows ``x`` ``[B, n]``, keeping
        every layer's output."""
        (trunk, head, value_trunk, value_head), _ = self._views()
        acts = [x]
        features = run_numpy(trunk, x, acts)
        head_acts = [features] if head else []
        out = run_numpy(head, features, head_acts) if head else features
        vacts = [x] if self._separate else []
        vf_in = run_numpy(value_trunk, x, vacts) if self._separate else features
        value_acts = [vf_in]
        run_numpy(value_head, vf_in, value_acts)
        return NumpyForward(acts, out, head_acts, vacts, value_acts)

    def backward(self, fwd: NumpyForward, d_out: np.ndarray, d_values: np.ndarray) -> None:
        """Writes every layer's weight and bias gradient from d(loss)/d(outputs) ``[B, K]``
        and d(loss)/d(values) ``[B]``."""
        (trunk, head, value_trunk, value_head), (g_trunk, g_head, g_vtrunk, g_vhead) = self._views()
        d_out = np.asarray(d_out, np.float32)  # (no copy when it is float32 already)
        d_values = np.asarray(d_values, np.float32)
        d_features = (
            backward_numpy(head, g_head, fwd.head_acts, d_out, input_grad=True) if head else d_out
        )
        d_vf_in = backward_numpy(
            value_head, g_vhead, fwd.value_acts, d_values.reshape(-1, 1), input_grad=True
        )
        assert d_features is not None and d_vf_in is not None
        if self._separate:
            backward_numpy(value_trunk, g_vtrunk, fwd.vacts, d_vf_in)
        else:
            d_features = d_features + d_vf_in
        backward_numpy(trunk, g_trunk, fwd.acts, d_features)
