"""Rollout actions of the default fully connected model, computed in numpy.

A rollout step asks the policy for 8 or so actions: at that size each torch op costs
several microseconds of dispatch, numpy's about one, so the policy call (two small MLPs,
a softmax and an inverse-CDF draw) runs about three times faster in numpy than through
the torch modules, and still clearly faster than the module-free torch path
(:meth:`~rlblocks.models.fc_layers.FCLayers.infer`), which is why both exist: a whole
``Policy.act`` call on CartPole's 2x64 tanh model, one torch thread, 2-core AMD EPYC,
takes 38.6 µs with this actor against 68.3 µs through ``FCLayers.infer`` at 8 envs
(1.8x), 58.8 against 89.5 µs at 64 envs (1.5x), 36.0 against 70.6 µs for a Box action
(2.0x). ``docs/benchmarks.md`` has the method.
:class:`FCActor` does that for the catalog's FullyConnectedNetwork on CPU with a
:class:`~rlblocks.distributions.Categorical` or
:class:`~rlblocks.distributions.DiagGaussian` head.

The random numbers come from torch's generator, drawn exactly as the torch distributions
draw them (one uniform per row for Categorical, one normal per action dimension for
DiagGaussian), so seeding, checkpoints and ``fork_rng`` work as before, and both paths
give the same actions for the same seed. The weights are numpy views of the model's
parameters, so every optimizer step is seen.

Examples:
    >>> import gymnasium as gym, numpy as np, torch
    >>> from rlblocks.train.config import PPOConfig
    >>> from rlblocks.train.policy import Policy
    >>> pol = Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), PPOConfig())
    >>> actor = FCActor.build(pol.model, pol.dist_class)
    >>> obs = np.zeros((5, 4), np.float32)
    >>> _ = torch.manual_seed(0)
    >>> fast = actor.act(obs, explore=True)
    >>> _ = torch.manual_seed(0)
    >>> with torch.no_grad():
    ...     dist, _, _ = pol.forward(pol.input_dict(obs), [], None)
    ...     ref = dist.sample()
    >>> bool((fast["actions"] == ref.numpy()).all())
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlblocks import _core
from rlblocks.distributions import Categorical, DiagGaussian
from rlblocks.distributions.base import _HALF_LOG_2PI, LOG_BOUND
from rlblocks.models.fc_layers import Dense, FCLayers

if TYPE_CHECKING:
    from rlblocks.models.modelv2 import ModelV2

__all__ = ["FCActor"]

_Weights = list[tuple[np.ndarray, np.ndarray, str | None]]


class FCActor:
    """Numpy inference for a :class:`~rlblocks.models.fc_layers.FCLayers` policy; build it
    with :meth:`build` (None when the model, device or distribution is not covered)."""

    def __init__(self, layers: FCLayers, gaussian: bool, action_start: int,
                 scalar_action: bool) -> None:
        self.layers = layers
        self.gaussian = gaussian
        self.action_start = action_start
        self.scalar_action = scalar_action  # Box(()) actions: [B], not [B, 1]
        self._params = list(layers.model.parameters())
        self._key: tuple[int, ...] = ()
        self._weights: tuple[_Weights, _Weights, _Weights, _Weights] | None = None

    @classmethod
    def build(cls, model: ModelV2, dist_class: Callable[..., Any]) -> FCActor | None:
        """The numpy actor for ``model`` with ``dist_class``, or None (not the default FC
        model, not float32 on the CPU, or another distribution)."""
        layers = FCLayers.from_model(model)
        if layers is None or any(p.device.type != "cpu" or p.dtype != torch.float32
                                 for p in model.parameters()):
            return None
        probe = dist_class(torch.zeros(1, int(model.num_outputs or 0)), model)
        if type(probe) is Categorical and probe.temperature == 1.0:
            return cls(layers, False, probe._start, False)
        if type(probe) is DiagGaussian:
            return cls(layers, True, 0, probe._scalar)
        return None

    # --- weights --------------------------------------------------------------------------
    def _arrays(self) -> tuple[_Weights, _Weights, _Weights, _Weights]:
        """Numpy views of the weights (re-taken if a parameter's storage moved)."""
        key = tuple(p.data_ptr() for p in self._params)
        if key != self._key or self._weights is None:
            def views(stack: list[Dense] | None) -> _Weights:
                return [(d.weight.detach().numpy(), d.bias.detach().numpy(), d.activation)
                        for d in stack or []]

            lay = self.layers
            self._weights = (views(lay.trunk), views([lay.logits] if lay.logits else []),
                             views(lay.value_trunk), views([lay.value_head]))
            self._key = key
        return self._weights

    # --- forward --------------------------------------------------------------------------
    def forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(distribution inputs [B, K], values [B])`` as float32 arrays."""
        trunk, head, value_trunk, value_head = self._arrays()
        x = np.asarray(obs).reshape(len(obs), -1).astype(np.float32, copy=False)
        features = _run(trunk, x)
        out = _run(head, features)
        if self.layers.free_log_std is not None:
            log_std = self.layers.free_log_std.detach().numpy()
            out = np.concatenate([out, np.broadcast_to(log_std, (len(x), len(log_std)))], 1)
        vf_in = _run(value_trunk, x) if self.layers.value_trunk is not None else features
        return out, _run(value_head, vf_in)[:, 0]

    def act(self, obs: np.ndarray, explore: bool = True) -> dict[str, Any]:
        """``Policy.act``'s result (``actions``, ``state_out``, ``logp``, ``vf_preds``,
        ``dist_inputs``) for a batch of observations."""
        out, values = self.forward(obs)
        if self.gaussian:
            actions, logp = self._gaussian(out, explore)
        else:
            actions, logp = self._categorical(out, explore)
        return {"actions": actions, "state_out": [], "logp": logp,
                "vf_preds": values, "dist_inputs": out}

    def _categorical(self, logits: np.ndarray, explore: bool) -> tuple[np.ndarray, np.ndarray]:
        n, k = logits.shape
        shifted = logits - logits.max(1, keepdims=True)
        exp = np.exp(shifted)
        log_probs = shifted - np.log(exp.sum(1, keepdims=True))
        if explore:  # inverse CDF, as Categorical.sample (same uniforms from torch's RNG)
            probs = np.exp(log_probs)
            cdf = np.cumsum(probs, 1)
            total = cdf[:, -1]
            u = torch.rand(n, 1).numpy()[:, 0] * total
            u = np.minimum(u, np.nextafter(total, np.float32(0.0)))
            index = np.minimum((cdf <= u[:, None]).sum(1), k - 1)
        else:
            index = logits.argmax(1)
        logp = log_probs[np.arange(n), index]
        return index.astype(np.int64) + self.action_start, logp.astype(np.float32, copy=False)

    def _gaussian(self, out: np.ndarray, explore: bool) -> tuple[np.ndarray, np.ndarray]:
        k = out.shape[1] // 2
        mean = out[:, :k]
        log_std = np.clip(out[:, k:], -LOG_BOUND, LOG_BOUND)
        std = np.exp(log_std)
        if explore:
            noise = torch.randn(mean.shape).numpy()
            actions = mean + std * noise
            z = (actions - mean) / std
            logp = (-0.5 * z * z - log_std - _HALF_LOG_2PI).sum(1)
        else:
            actions = mean.copy()
            logp = (-log_std - _HALF_LOG_2PI).sum(1)
        if self.scalar_action:
            actions = actions[:, 0]
        return actions.astype(np.float32, copy=False), logp.astype(np.float32, copy=False)


def _run(layers: _Weights, x: np.ndarray) -> np.ndarray:
    for weight, bias, activation in layers:
        x = x @ weight.T
        x += bias
        if activation == "tanh":
            _core.tanh(x, out=x)
        elif activation == "relu":
            np.maximum(x, 0.0, out=x)
    return x
