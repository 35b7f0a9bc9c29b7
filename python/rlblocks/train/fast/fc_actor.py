"""The default fully connected model's actor: the policy's door when that model serves.

:class:`FCActor` answers :class:`~rlblocks.train.actor.Actor`'s three calls for the
catalog's FullyConnectedNetwork without ``nn.Module`` calls:

* ``act`` / ``values`` on numpy observations run in numpy: at a rollout's batch of a few
  rows each torch op costs several times numpy's dispatch, so two small MLPs, a softmax
  and an inverse-CDF draw are cheaper in numpy. This covers float32 CPU models with a
  :class:`~rlblocks.distributions.Categorical` or
  :class:`~rlblocks.distributions.DiagGaussian` head (``docs/benchmarks.md`` has figures);
* ``forward`` without autograd runs the layers as plain tensors
  (:meth:`~rlblocks.train.fast.dense_layers.FCLayers.infer`), for any head and device.

Everything else (a graph for the loss, a tensor input, a hook set or a layer replaced
since the build: :meth:`~rlblocks.train.fast.dense_layers.FCLayers.matches_model`) goes
to the ``fallback`` actor, which calls the module.

The random numbers come from torch's generator, drawn exactly as the torch distributions
draw them (one uniform per row for Categorical, one normal per action dimension for
DiagGaussian), so seeding, checkpoints and ``fork_rng`` work as before, and both paths
give the same actions for the same seed. The weights are numpy views of the model's
parameters, so every optimizer step is seen.

Examples:
    >>> import gymnasium as gym, numpy as np, torch
    >>> from rlblocks.train.trainer_config import PPOConfig
    >>> from rlblocks.train.policy import Policy
    >>> pol = Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), PPOConfig())
    >>> isinstance(pol.actor, FCActor), pol.actor.description
    (True, 'fast numpy FC (2 hidden layers)')
    >>> obs = np.zeros((5, 4), np.float32)
    >>> _ = torch.manual_seed(0)
    >>> fast = pol.act(obs, [], explore=True)
    >>> _ = torch.manual_seed(0)
    >>> with torch.no_grad():
    ...     dist, _, _ = pol.actor.fallback.forward(pol.input_dict(obs), [], None)
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
from rlblocks._impl import native
from rlblocks._reference import categorical as reference
from rlblocks.distributions import Categorical, DiagGaussian
from rlblocks.distributions.base import _HALF_LOG_2PI, LOG_BOUND
from rlblocks.train.fast.dense_layers import FCLayers, NumpyWeights, numpy_weights, run_numpy

if TYPE_CHECKING:
    from rlblocks.models.modelv2 import ModelV2
    from rlblocks.train.actor import Actor, ActorInput, Forward

__all__ = ["FCActor"]


class FCActor:
    """The FC model's actor; build it with :meth:`build` (a reason string when the model
    is not the default fully connected network).

    Attributes:
        layers: The model's layers as tensors.
        fallback: The actor that calls the module, for what this one does not cover.
        numpy: Whether ``act`` / ``values`` run in numpy (float32 CPU model, a
            Categorical or DiagGaussian head).
        description: What serves, for the policy's log line.
    """

    def __init__(
        self,
        layers: FCLayers,
        dist_class: Callable[..., Any],
        fallback: Actor,
        numpy_declined: str | None,
    ) -> None:
        self.layers = layers
        self.dist_class = dist_class
        self.fallback = fallback
        self.numpy = numpy_declined is None
        self.gaussian = False
        self.action_start = 0
        self.scalar_action = False  # Box(()) actions: [B], not [B, 1]
        hidden = f"{len(layers.trunk)} hidden layers"
        self.description = (
            f"fast numpy FC ({hidden})"
            if self.numpy
            else f"module-free torch FC ({hidden}; numpy declined: {numpy_declined})"
        )
        self._params = list(layers.model.parameters())
        self._key: tuple[int, ...] = ()
        self._weights: tuple[NumpyWeights, NumpyWeights, NumpyWeights, NumpyWeights] | None = None

    @classmethod
    def build(
        cls, model: ModelV2, dist_class: Callable[..., Any], fallback: Actor
    ) -> FCActor | str:
        """The actor for ``model`` with ``dist_class``, or why there is none (not the
        default FC model)."""
        layers = FCLayers.from_model(model)
        if layers is None:
            return "not the default fully connected model"
        if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in model.parameters()):
            return cls(layers, dist_class, fallback, "not float32 on the CPU")
        probe = dist_class(torch.zeros(1, int(model.num_outputs or 0)), model)
        if type(probe) is Categorical and probe.temperature == 1.0:
            actor = cls(layers, dist_class, fallback, None)
            actor.action_start = probe._start
            return actor
        if type(probe) is DiagGaussian:
            actor = cls(layers, dist_class, fallback, None)
            actor.gaussian, actor.scalar_action = True, probe._scalar
            return actor
        return cls(layers, dist_class, fallback, f"{type(probe).__name__} head")

    # --- the door -------------------------------------------------------------------------
    def forward(self, input_dict: dict[str, Any], state: list[Any], seq_lens: Any) -> Forward:
        """``(distribution, values [B], state_out)``: the layers as tensors when no graph
        is needed, else the module."""
        if torch.is_grad_enabled() or not self.layers.matches_model():
            return self.fallback.forward(input_dict, state, seq_lens)
        out, values = self.layers.infer(input_dict["obs"])
        return self.dist_class(out, self.layers.model), values, state

    def act(self, inputs: ActorInput, explore: bool, full: bool) -> dict[str, Any]:
        """:meth:`Policy.act <rlblocks.train.policy.Policy.act>`'s result."""
        if not self._serves(inputs.obs):
            return self.fallback.act(inputs, explore, full)
        out, values = self.forward_numpy(inputs.obs)
        actions, logp = self.draw(out, explore)
        if not full:
            return {"actions": actions, "state_out": []}
        return {
            "actions": actions,
            "state_out": [],
            "logp": logp,
            "vf_preds": values,
            "dist_inputs": out,
        }

    def values(self, inputs: ActorInput) -> np.ndarray:
        """Value estimates ``[B]`` (float32)."""
        if not self._serves(inputs.obs):
            return self.fallback.values(inputs)
        return self.forward_numpy(inputs.obs)[1]

    def _serves(self, obs: Any) -> bool:
        return self.numpy and isinstance(obs, np.ndarray) and self.layers.matches_model()

    # --- weights --------------------------------------------------------------------------
    def _arrays(self) -> tuple[NumpyWeights, NumpyWeights, NumpyWeights, NumpyWeights]:
        """Numpy views of the weights (re-taken if a parameter's storage moved)."""
        key = tuple(p.data_ptr() for p in self._params)
        if key != self._key or self._weights is None:
            views = numpy_weights
            lay = self.layers
            self._weights = (
                views(lay.trunk),
                views([lay.logits] if lay.logits else []),
                views(lay.value_trunk),
                views([lay.value_head]),
            )
            self._key = key
        return self._weights

    # --- forward --------------------------------------------------------------------------
    def forward_numpy(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(distribution inputs [B, K], values [B])`` as float32 arrays."""
        trunk, head, value_trunk, value_head = self._arrays()
        x = np.asarray(obs).reshape(len(obs), -1).astype(np.float32, copy=False)
        features = run_numpy(trunk, x)
        out = self._with_log_std(run_numpy(head, features))
        vf_in = run_numpy(value_trunk, x) if self.layers.value_trunk is not None else features
        return out, run_numpy(value_head, vf_in)[:, 0]

    def policy_numpy(self, obs: np.ndarray) -> np.ndarray:
        """The distribution inputs ``[B, K]`` alone (float32; no value branch)."""
        trunk, head, _, _ = self._arrays()
        x = np.asarray(obs).reshape(len(obs), -1).astype(np.float32, copy=False)
        return self._with_log_std(run_numpy(head, run_numpy(trunk, x)))

    def _with_log_std(self, out: np.ndarray) -> np.ndarray:
        if self.layers.free_log_std is None:
            return out
        log_std = self.layers.free_log_std.detach().numpy()
        return np.concatenate([out, np.broadcast_to(log_std, (len(out), len(log_std)))], 1)

    def draw(self, out: np.ndarray, explore: bool) -> tuple[np.ndarray, np.ndarray]:
        """``(actions, logp)`` for the distribution inputs ``out``: a draw (``explore``) or
        the deterministic action, scored under the full distribution; the random numbers
        are torch's, drawn as the torch distribution draws them."""
        return self._gaussian(out, explore) if self.gaussian else self._categorical(out, explore)

    def _categorical(self, logits: np.ndarray, explore: bool) -> tuple[np.ndarray, np.ndarray]:
        # Categorical.sample's inverse CDF, on the same uniforms from torch's RNG
        uniforms = torch.rand(len(logits)).numpy() if explore else None
        draw = _core.categorical_draw if native() else reference.categorical_draw
        index, logp = draw(np.ascontiguousarray(logits, np.float32), uniforms)
        return index + self.action_start if self.action_start else index, logp

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
