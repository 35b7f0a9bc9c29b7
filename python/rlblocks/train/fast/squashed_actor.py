"""The squashed Gaussian actor: SAC's Box actions for the default FC model in numpy.

:class:`SquashedActor` answers the :class:`~rlblocks.train.actor.Actor` door for the
catalog's FullyConnectedNetwork with a
:class:`~rlblocks.distributions.SquashedGaussian` head (float32, CPU, no action mask).
At a rollout's few rows the module and distribution objects cost several times the
arithmetic, so ``act`` without ``full`` on a numpy batch runs the layers in numpy on views
of the weights (:meth:`~rlblocks.train.fast.FCActor.policy_numpy`), then the
distribution's draw and squash. The normal draw is torch's, drawn as
``SquashedGaussian.sample`` draws it, and ``exp`` and ``tanh`` are torch's kernels, so the
actions equal the module path's bit for bit. Everything else (``full``, a tensor input, a
hook set or a layer replaced since the build) goes to the FC actor it wraps, which hands
what it does not cover to the module.

Examples:
    >>> import gymnasium as gym, numpy as np, torch
    >>> from rlblocks.train.offpolicy_config import SACConfig
    >>> from rlblocks.train.learners.sac import SACLearner
    >>> learner = SACLearner(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,)), SACConfig())
    >>> type(learner.acting_policy().actor).__name__
    'SquashedActor'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlblocks.distributions import SquashedGaussian
from rlblocks.distributions.base import MAX_LOG_NN_OUTPUT, MIN_LOG_NN_OUTPUT
from rlblocks.train.fast.fc_actor import FCActor

if TYPE_CHECKING:
    from rlblocks.train.actor import ActorInput, Forward

__all__ = ["SquashedActor"]


class SquashedActor:
    """A SquashedGaussian policy's actor for the default FC model; build it with
    :meth:`build` (None where it does not apply).

    Attributes:
        fc: The model's :class:`~rlblocks.train.fast.FCActor` (its head drawn by torch's
            SquashedGaussian on the numpy forward), which serves ``forward``, ``values``
            and the acting this one declines.
        low, high: The Box bounds the squashed actions are scaled to.
        description: What serves, for the policy's log line.
    """

    def __init__(self, fc: FCActor, low: np.ndarray, high: np.ndarray) -> None:
        self.fc, self.low, self.high = fc, low, high
        self.span = high - low
        self.description = f"fast numpy squashed Gaussian FC ({len(fc.layers.trunk)} hidden layers)"

    @classmethod
    def build(cls, fc: FCActor, dist_class: Any, masked: bool) -> SquashedActor | None:
        """The actor over ``fc`` when its head is a SquashedGaussian, the model is float32
        on the CPU and has no action mask; else None."""
        model = fc.layers.model
        if masked or any(
            p.device.type != "cpu" or p.dtype != torch.float32 for p in model.parameters()
        ):
            return None
        probe = dist_class(torch.zeros(1, int(model.num_outputs or 0)), model)
        if type(probe) is not SquashedGaussian:
            return None
        return cls(fc, probe.low.numpy().copy(), probe.high.numpy().copy())

    # --- the door -------------------------------------------------------------------------
    def forward(self, input_dict: dict[str, Any], state: list[Any], seq_lens: Any) -> Forward:
        """:meth:`Policy.forward <rlblocks.train.policy.Policy.forward>` (the FC actor's)."""
        return self.fc.forward(input_dict, state, seq_lens)

    def act(self, inputs: ActorInput, explore: bool, full: bool) -> dict[str, Any]:
        """:meth:`Policy.act <rlblocks.train.policy.Policy.act>`'s result: numpy actions
        without ``full`` for a numpy batch, else the FC actor's."""
        obs = inputs.obs
        if full or not isinstance(obs, np.ndarray) or not self.fc.layers.matches_model():
            return self.fc.act(inputs, explore, full)
        actions = self.squashed(obs, explore)
        return {"actions": actions.reshape(len(obs), *actions.shape[1:]), "state_out": []}

    def values(self, inputs: ActorInput) -> np.ndarray:
        """:meth:`Policy.values <rlblocks.train.policy.Policy.values>` (the FC actor's)."""
        return self.fc.values(inputs)

    def squashed(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """Sampled (``explore``) or deterministic squashed actions ``[B, d]``."""
        out = self.fc.policy_numpy(obs)
        d = out.shape[1] // 2
        mean = out[:, :d]
        if explore:
            log_std = torch.from_numpy(out[:, d:]).clamp(MIN_LOG_NN_OUTPUT, MAX_LOG_NN_OUTPUT)
            std = log_std.exp().numpy()
            z = mean + std * torch.randn(mean.shape, dtype=torch.float32).numpy()
        else:
            z = np.ascontiguousarray(mean)
        t = torch.from_numpy(z).tanh().numpy()
        x = (t + 1.0) / 2.0 * self.span + self.low
        return np.minimum(np.maximum(x, self.low), self.high)
