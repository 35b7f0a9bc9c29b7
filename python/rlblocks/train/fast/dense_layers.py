"""``FCLayers``: a :class:`~rlblocks.models.fcnet.FullyConnectedNetwork` as plain tensors
(or a :class:`~rlblocks.models.complex_input.ComplexInputNetwork` that computes one: the
union model of agents whose spaces differ).

The network's layers read out once as ``(weight, bias, activation)`` triples (views of the
model's own parameters, so they follow every update), run without ``nn.Module`` calls:
at a rollout's batch of a few rows the module machinery (``ModelV2.__call__``, one call
per Linear and activation) takes longer than the arithmetic. The trainer uses it for
inference (:class:`~rlblocks.train.fast.FCActor`) and, through
:class:`~rlblocks.train.fast.FCBackprop`, for training.
:meth:`FCLayers.from_model` returns None for a network it cannot represent (a subclass,
another activation), and :meth:`FCLayers.matches_model` tells when hooks or a changed
layer mean a module-free pass would no longer equal calling the model.

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks.models.fcnet import FullyConnectedNetwork
    >>> m = FullyConnectedNetwork(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), 2,
    ...                           {"fcnet_hiddens": [8, 8]}, "fc")
    >>> layers = FCLayers.from_model(m)
    >>> x = torch.randn(5, 4)
    >>> out, values = layers.infer(x)
    >>> ref, _ = m({"obs": x})
    >>> bool(torch.allclose(out, ref)), bool(torch.allclose(values, m.value_function()))
    (True, True)
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn.utils.parametrize import is_parametrized

from rlblocks import _core
from rlblocks.activations import tanh
from rlblocks.models.complex_input import ComplexInputNetwork
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.models.misc import SlimFC, tanh_cpu

__all__ = [
    "BypassCheck",
    "Dense",
    "DenseViews",
    "FCLayers",
    "NumpyWeights",
    "NumpyGrads",
    "activate_",
    "activation_backward",
    "backward_numpy",
    "backward_stack",
    "clip_numpy_grads",
    "grad_hooks_set",
    "input_grad_numpy",
    "numpy_grads",
    "numpy_weights",
    "run_numpy",
    "run_stack",
]


def activate_(y: torch.Tensor, activation: str | None) -> torch.Tensor:
    """``activation`` (``None``, ``"tanh"`` or ``"relu"``) applied to ``y`` in place."""
    if activation == "tanh":
        return tanh_cpu(y, inplace=True) if y.device.type == "cpu" else torch.tanh_(y)
    if activation == "relu":
        return torch.relu_(y)
    return y


def activation_backward(dy: torch.Tensor, y: torch.Tensor, activation: str | None) -> torch.Tensor:
    """The gradient of an activation's input, from its output ``y`` and that output's
    gradient ``dy``."""
    if activation == "tanh":
        return torch.ops.aten.tanh_backward(dy, y)
    if activation == "relu":
        return torch.ops.aten.threshold_backward(dy, y, 0)
    return dy


@dataclass
class Dense:
    """One linear layer and its activation (``None``, ``"tanh"`` or ``"relu"``)."""

    weight: nn.Parameter
    bias: nn.Parameter
    activation: str | None
    linear: nn.Linear  # the module they came from

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``activation(x @ weight.T + bias)``; call under ``torch.no_grad()``."""
        return activate_(torch.addmm(self.bias, x, self.weight.t()), self.activation)

    def forward_graph(self, x: torch.Tensor) -> torch.Tensor:
        """What the module computes (``nn.Linear`` then the activation), autograd included,
        without the module calls."""
        y = torch.nn.functional.linear(x, self.weight, self.bias)
        if self.activation == "tanh":
            return tanh(y)
        if self.activation == "relu":
            return torch.relu(y)
        return y

    def backward(
        self, x: torch.Tensor, y: torch.Tensor, dy: torch.Tensor, need_dx: bool
    ) -> torch.Tensor | None:
        """Writes the weight and bias gradients for output gradient ``dy`` (``x``, ``y``:
        this layer's input and output); returns the input gradient when ``need_dx``."""
        dy = activation_backward(dy, y, self.activation)
        assert self.weight.grad is not None and self.bias.grad is not None
        torch.mm(dy.t(), x, out=self.weight.grad)
        torch.sum(dy, 0, out=self.bias.grad)
        return torch.mm(dy, self.weight) if need_dx else None

    @classmethod
    def from_module(cls, layer: nn.Module) -> Dense | None:
        """The layer of a SlimFC (a plain ``nn.Linear`` with a bias, not parametrized) with a
        tanh, ReLU or no activation, else None."""
        if not isinstance(layer, SlimFC):
            return None
        parts = list(layer._model)
        linear = parts[0]
        if (
            type(linear) is not nn.Linear
            or len(parts) > 2
            or is_parametrized(linear)
            or not isinstance(linear.weight, nn.Parameter)
            or not isinstance(linear.bias, nn.Parameter)
        ):
            return None
        activation = None
        if len(parts) == 2:
            act = parts[1]
            if isinstance(act, nn.Tanh):  # includes rlblocks' Tanh
                activation = "tanh"
            elif type(act) is nn.ReLU:
                activation = "relu"
            else:
                return None
        return cls(linear.weight, linear.bias, activation, linear)


def _stack(seq: Iterable[nn.Module] | None) -> list[Dense] | None:
    layers = []
    for module in seq if seq is not None else []:
        dense = Dense.from_module(module)
        if dense is None:
            return None
        layers.append(dense)
    return layers


def run_stack(layers: list[Dense], x: torch.Tensor) -> list[torch.Tensor]:
    """``[x, output of layer 0, output of layer 1, ...]``."""
    acts = [x]
    for layer in layers:
        acts.append(layer.forward(acts[-1]))
    return acts


#: ``(weight, bias, activation)`` per layer, the weights as numpy views of the parameters.
NumpyWeights = list[tuple[np.ndarray, np.ndarray, str | None]]


def numpy_weights(layers: list[Dense] | None) -> NumpyWeights:
    """Numpy views of CPU float32 layers' parameters (they follow every in-place update;
    take them again if a parameter's storage moves)."""
    return [
        (d.weight.detach().numpy(), d.bias.detach().numpy(), d.activation) for d in layers or []
    ]


def run_numpy(
    layers: NumpyWeights, x: np.ndarray, acts: list[np.ndarray] | None = None
) -> np.ndarray:
    """:func:`run_stack`'s output for a float32 numpy batch (a new array): at a few rows,
    numpy's dispatch costs a fraction of torch's. Every layer's output is appended to
    ``acts`` when given (for :func:`backward_numpy`)."""
    for weight, bias, activation in layers:
        x = x @ weight.T
        x += bias
        if activation == "tanh":
            _core.tanh(x, out=x)
        elif activation == "relu":
            np.maximum(x, 0.0, out=x)
        if acts is not None:
            acts.append(x)
    return x


#: ``(weight gradient, bias gradient)`` per layer, numpy views of the parameters' ``.grad``.
NumpyGrads = list[tuple[np.ndarray, np.ndarray]]


def numpy_grads(layers: list[Dense]) -> NumpyGrads:
    """Numpy views of CPU float32 layers' gradients, allocated where missing."""
    for d in layers:
        for p in (d.weight, d.bias):
            if p.grad is None:
                p.grad = torch.empty_like(p)
    return [(d.weight.grad.numpy(), d.bias.grad.numpy()) for d in layers]  # type: ignore[union-attr]


def backward_numpy(
    layers: NumpyWeights,
    grads: NumpyGrads,
    acts: list[np.ndarray],
    d_out: np.ndarray,
    input_grad: bool = False,
) -> np.ndarray | None:
    """:func:`backward_stack` in numpy: ``acts`` is ``[x, output of layer 0, ...]`` (as
    :func:`run_numpy` appends them), ``d_out`` the last output's float32 gradient; writes
    every layer's gradients into ``grads`` and returns the input's gradient when
    ``input_grad``."""
    d: np.ndarray | None = d_out
    for i in range(len(layers) - 1, -1, -1):
        assert d is not None
        weight, _, activation = layers[i]
        if activation is not None:  # (a linear last layer's output may be left out of acts)
            d = _activation_backward_numpy(d, acts[i + 1], activation)
        grad_w, grad_b = grads[i]
        np.matmul(d.T, acts[i], out=grad_w)
        np.matmul(_ones(len(d)), d, out=grad_b)  # the column sums (BLAS: faster than sum)
        d = _times_weight(d, weight) if i > 0 or input_grad else None
    return d


def input_grad_numpy(layers: NumpyWeights, acts: list[np.ndarray], d_out: np.ndarray) -> np.ndarray:
    """The input's gradient through ``layers`` (:func:`backward_numpy`'s last return)
    without any weight gradient."""
    d = d_out
    for i in range(len(layers) - 1, -1, -1):
        weight, _, activation = layers[i]
        if activation is not None:
            d = _activation_backward_numpy(d, acts[i + 1], activation)
        d = _times_weight(d, weight)
    return d


def _activation_backward_numpy(d: np.ndarray, y: np.ndarray, activation: str | None) -> np.ndarray:
    if activation == "relu":
        return d * (y > 0.0)
    if activation == "tanh":
        return d * (1.0 - y * y)
    return d


def _times_weight(d: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``d @ weight``; for a one-unit layer (``[B, 1] @ [1, n]``) the outer product, the
    same numbers (one product per entry) without numpy's slow K=1 matmul."""
    return d * weight if weight.shape[0] == 1 else d @ weight


@functools.lru_cache(maxsize=8)
def _ones(n: int) -> np.ndarray:
    ones = np.ones(n, np.float32)
    ones.flags.writeable = False
    return ones


class DenseViews:
    """Numpy views of CPU float32 layers' weights (:func:`numpy_weights`) and gradients
    (:func:`numpy_grads`), kept between calls and taken again when a parameter's or a
    gradient's storage moved or a gradient was freed.

    Args:
        layers: The layers (views of a model's own parameters).
    """

    def __init__(self, layers: list[Dense]) -> None:
        self.layers = layers
        self._params = [p for d in layers for p in (d.weight, d.bias)]
        self._wkey: list[int] = []
        self._gkey: list[int] = []
        self._weights: NumpyWeights = []
        self._grads: NumpyGrads = []

    def weights(self) -> NumpyWeights:
        """``(weight, bias, activation)`` per layer, numpy views of the parameters."""
        key = [p.data_ptr() for p in self._params]
        if key != self._wkey:
            self._weights, self._wkey = numpy_weights(self.layers), key
        return self._weights

    def grads(self) -> NumpyGrads:
        """``(weight gradient, bias gradient)`` per layer, numpy views of the ``.grad``
        tensors (allocated where missing)."""
        key = [-1 if p.grad is None else p.grad.data_ptr() for p in self._params]
        if key != self._gkey:
            self._grads = numpy_grads(self.layers)
            self._gkey = [p.grad.data_ptr() for p in self._params]  # type: ignore[union-attr]
        return self._grads


def clip_numpy_grads(grads: NumpyGrads, max_norm: float) -> float:
    """Scales ``grads`` so their global L2 norm is at most ``max_norm`` and returns the
    norm before clipping (``torch.nn.utils.clip_grad_norm_``'s rule: a factor of
    ``max_norm / (norm + 1e-6)`` where that is below 1)."""
    norm = float(np.sqrt(sum(float(np.vdot(g, g)) for pair in grads for g in pair)))
    scale = max_norm / (norm + 1e-6)
    if scale < 1.0:
        for pair in grads:
            for g in pair:
                g *= np.float32(scale)
    return norm


def backward_stack(
    layers: list[Dense], acts: list[torch.Tensor], d_out: torch.Tensor, input_grad: bool = False
) -> torch.Tensor | None:
    """Backward through ``layers`` given :func:`run_stack`'s ``acts`` and the output's
    gradient; writes every layer's parameter gradients and returns the input's gradient
    when ``input_grad``."""
    d: torch.Tensor | None = d_out
    for i in range(len(layers) - 1, -1, -1):
        assert d is not None
        d = layers[i].backward(acts[i], acts[i + 1], d, need_dx=i > 0 or input_grad)
    return d


#: A parameter's gradient hooks (None, or a dict of them): ``register_hook``'s and
#: ``register_post_accumulate_grad_hook``'s (a torch without the latter has none).
_GRAD_HOOKS = operator.attrgetter("_backward_hooks")
_POST_ACCUMULATE_HOOKS = (
    operator.attrgetter("_post_accumulate_grad_hooks")
    if hasattr(torch.Tensor, "_post_accumulate_grad_hooks")
    else lambda p: None
)


def grad_hooks_set(params: Sequence[torch.Tensor]) -> bool:
    """Whether any of ``params`` has a gradient hook (which a closed-form backward pass
    would skip)."""
    return any(map(_GRAD_HOOKS, params)) or any(map(_POST_ACCUMULATE_HOOKS, params))


class BypassCheck:
    """Whether a module-free pass over ``layers`` still equals calling ``modules``: no
    forward hook is set (nor, for training, a backward or gradient hook), globally or on
    the modules or their parameters, and every layer still holds the parameters it was
    read from (no parametrization or replaced weight since). Each check is a few C-level
    passes over lists gathered once (acting calls it on every env step).

    Args:
        modules: The modules whose calls the pass replaces (their submodules included).
        layers: The layers read from them.
    """

    def __init__(self, modules: list[nn.Module], layers: list[Dense]) -> None:
        unique = list({id(m): m for module in modules for m in module.modules()}.values())
        self._forward_hooks = [h for m in unique for h in (m._forward_hooks, m._forward_pre_hooks)]
        self._backward_hooks = [
            h for m in unique for h in (m._backward_hooks, m._backward_pre_hooks)
        ]
        self._params = list(
            {id(p): p for m in unique for p in m.parameters(recurse=False)}.values()
        )
        self._slots = [d.linear._parameters for d in layers for _ in range(2)]
        self._names = ["weight", "bias"] * len(layers)
        self._held = [p for d in layers for p in (d.weight, d.bias)]

    def intact(self, training: bool = False) -> bool:
        """True while the module-free pass equals calling the modules (see the class)."""
        glob = nn.modules.module
        if glob._global_forward_hooks or glob._global_forward_pre_hooks:
            return False
        if any(self._forward_hooks):
            return False
        if not all(map(operator.is_, map(dict.get, self._slots, self._names), self._held)):
            return False
        if not training:
            return True
        return not (
            glob._global_backward_hooks
            or glob._global_backward_pre_hooks
            or any(self._backward_hooks)
            or grad_hooks_set(self._params)
        )


@dataclass
class FCLayers:
    """The layers of a FullyConnectedNetwork (see the module docstring).

    Attributes:
        model: The network the tensors belong to.
        trunk: The hidden layers (``_hidden_layers``), in order.
        logits: The logits layer, None with ``no_final_linear``.
        value_trunk: The value branch's own hidden layers, None when it shares the trunk.
        value_head: The one-unit value layer.
        free_log_std: The learned log-stds appended to the outputs, or None.
    """

    model: FullyConnectedNetwork | ComplexInputNetwork
    trunk: list[Dense]
    logits: Dense | None
    value_trunk: list[Dense] | None
    value_head: Dense
    free_log_std: nn.Parameter | None

    @classmethod
    def from_model(cls, model: nn.Module, complex_input: bool = False) -> FCLayers | None:
        """The layers of ``model`` if it is a FullyConnectedNetwork (not a subclass) with a
        value head, linear layers with biases and tanh / ReLU / no activations; else None.
        ``complex_input``: also a ComplexInputNetwork that computes such a network
        (:meth:`~rlblocks.models.complex_input.ComplexInputNetwork.dense_layers`)."""
        if complex_input and type(model) is ComplexInputNetwork:
            return cls._from_complex_input(model)
        if type(model) is not FullyConnectedNetwork or model._value_branch is None:
            return None
        trunk = _stack(model._hidden_layers)
        logits = Dense.from_module(model._logits) if model._logits is not None else None
        value_trunk = _stack(model._value_branch_separate)
        value_head = Dense.from_module(model._value_branch)
        if (
            trunk is None
            or value_trunk is None
            or value_head is None
            or (model._logits is not None and logits is None)
        ):
            return None
        free = model._append_free_log_std
        return cls(
            model,
            trunk,
            logits,
            value_trunk if model._value_branch_separate is not None else None,
            value_head,
            free.log_std if free is not None else None,
        )

    @classmethod
    def _from_complex_input(cls, model: ComplexInputNetwork) -> FCLayers | None:
        found = model.dense_layers()
        if found is None or model.logits_layer is None or model.value_layer is None:
            return None
        trunk = _stack(found[0])
        value_trunk = None if found[1] is None else _stack(found[1])
        logits = Dense.from_module(model.logits_layer)
        value_head = Dense.from_module(model.value_layer)
        if (
            trunk is None
            or logits is None
            or value_head is None
            or (found[1] is not None and value_trunk is None)
        ):
            return None
        return cls(model, trunk, logits, value_trunk, value_head, None)

    def __post_init__(self) -> None:
        dense = [
            *self.trunk,
            *([self.logits] if self.logits else []),
            *(self.value_trunk or []),
            self.value_head,
        ]
        self._check = BypassCheck([self.model], dense)

    def matches_model(self, training: bool = False) -> bool:
        """Whether a pass through these tensors still equals calling the model: no forward
        hook is set (nor, for ``training``, a backward or gradient hook), globally or on the
        model's modules or parameters, and every layer still holds the parameters it was
        read from (no parametrization or replaced weight since)."""
        return self._check.intact(training)

    def flat_input(self, obs: torch.Tensor) -> torch.Tensor:
        """The network's input ``[B, n]`` (float) for a batch of flat observations."""
        return obs.reshape(obs.shape[0], -1).float()

    def forward_graph(self, obs: torch.Tensor) -> torch.Tensor:
        """The model's outputs ``[B, num_outputs]`` (its features without a logits layer),
        autograd included: gradients reach the model's parameters as through calling it.
        Check :meth:`matches_model` with ``training=True`` first."""
        x = self.flat_input(obs)
        for layer in self.trunk:
            x = layer.forward_graph(x)
        if self.logits is not None:
            x = self.logits.forward_graph(x)
        if self.free_log_std is not None:
            x = torch.cat([x, self.free_log_std.expand(x.shape[0], -1)], 1)
        return x

    def infer(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(outputs [B, num_outputs], values [B])``: the model's forward and
        ``value_function()``, without autograd."""
        with torch.no_grad():
            x = self.flat_input(obs)
            features = run_stack(self.trunk, x)[-1]
            out = self.logits.forward(features) if self.logits is not None else features
            if self.free_log_std is not None:
                out = torch.cat([out, self.free_log_std.detach().expand(out.shape[0], -1)], 1)
            vf_in = run_stack(self.value_trunk, x)[-1] if self.value_trunk is not None else features
            return out, self.value_head.forward(vf_in).reshape(-1)
