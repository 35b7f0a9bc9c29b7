"""``TD3Backprop``: TD3's (and DDPG's) update for fully connected actor and critics,
without autograd.

The networks are SAC's (:mod:`rlblocks.train.fast.sac_backprop`): the actor is the
catalog's :class:`~rlblocks.models.fcnet.FullyConnectedNetwork` with ``2 * dim(A)``
outputs, of which TD3 reads the first half, and each critic a
:class:`~rlblocks.models.heads.ContinuousActionQModel` over a pass-through (or FC) base.
:class:`TD3Backprop` runs :class:`~rlblocks.train.learners.td3.TD3Learner`'s three
computations on plain arrays and writes the gradients in closed form:

* the target ``y = r + d * min_i Qtarg_i(s', a')`` at the smoothed target action
  ``a' = clip(tanh(mean_targ(s')) + clip(sigma * N(0, 1), -c, c), -1, 1)``; the normal
  draw is one ``torch.randn(B, dim(A))``, the draw ``torch.randn_like`` makes on the
  module path, so both paths smooth with the same numbers;
* the critic loss ``sum_i mean(w * (Q_i(s, a) - y)^2)`` and its weight gradients;
* the actor loss ``-mean(Q_1(s, tanh(mean(s))))`` and its weight gradients: through the
  first critic to the action (input gradients only), through ``tanh`` to the first half
  of the actor's outputs (the log-std half gets a zero gradient, as autograd gives it),
  then through the actor.

Each derivative is the one autograd takes through the learner's module path (ties of the
``min`` split as ``amin`` splits them), so both paths give the same update up to float
rounding (``tests/test_td3_backprop.py``). The layers' matrix products, bias sums and
activations run in numpy on views of the parameters and of their ``.grad`` tensors
(:class:`~rlblocks.train.fast.dense_layers.DenseViews`), as PPO's closed form runs them
(:mod:`rlblocks.train.fast.numpy_pass`): at ``[400, 300]`` nets and batches of 256 numpy's
BLAS takes less CPU time for the same products than torch's (docs/qlearning.md, "Wall
time"). The smoothing noise and the ``tanh`` of the actions stay torch's. The learner steps
the optimizers and the Polyak targets. The networks covered, and the reasons for declining
others, are SAC's (:func:`~rlblocks.train.fast.sac_backprop.decline_reason`);
:meth:`TD3Backprop.usable` is False while a hook is set or a layer was replaced.

Examples:
    >>> import gymnasium as gym
    >>> from rlblocks.train.offpolicy_config import TD3Config
    >>> from rlblocks.train.learners.td3 import TD3Learner
    >>> cfg = TD3Config(model={"fcnet_hiddens": [8]}, q_model={"fcnet_hiddens": [8]})
    >>> learner = TD3Learner(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,)), cfg)
    >>> fast = TD3Backprop.choose(learner.actor, learner.target_actor,
    ...                           list(learner.critics), list(learner.target_critics))
    >>> isinstance(fast, TD3Backprop) and fast.usable()
    True
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from rlblocks.train.fast.dense_layers import (
    Dense,
    DenseViews,
    FCLayers,
    backward_numpy,
    input_grad_numpy,
    run_numpy,
)
from rlblocks.train.fast.sac_backprop import (
    SACBackprop,
    _Critic,
    _mean,
    _np,
    critic_rounds,
    decline_reason,
    each_critic,
    written_params,
)

__all__ = ["TD3Backprop"]


class _NumpyCritic:
    """A :class:`~rlblocks.train.fast.sac_backprop._Critic`'s passes on numpy views of
    its parameters and gradients."""

    def __init__(self, critic: _Critic) -> None:
        self.critic = critic
        self.base = DenseViews(critic.base.trunk)
        self.head = DenseViews(critic.layers)
        self.action_dim = critic.module.action_dim

    def q(self, x: np.ndarray, action: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Every layer's output of the base for the observations ``x`` (``[x, ...]``) and
        of the head for ``concat(features, action)`` (its last, the Q-values ``[B, 1]``)."""
        base_acts = [x]
        features = run_numpy(self.base.weights(), x, base_acts)
        head_acts = [np.concatenate([features, action], 1)]
        run_numpy(self.head.weights(), head_acts[0], head_acts)
        return base_acts, head_acts

    def backward(
        self, base_acts: list[np.ndarray], head_acts: list[np.ndarray], d_q: np.ndarray
    ) -> None:
        """Writes the gradients of the critic's layers for ``d_q`` (``[B, 1]``)."""
        trunk = bool(self.critic.base.trunk)
        d_in = backward_numpy(
            self.head.weights(), self.head.grads(), head_acts, d_q, input_grad=trunk
        )
        if trunk:
            assert d_in is not None
            d_features = d_in[:, : base_acts[-1].shape[1]]
            backward_numpy(self.base.weights(), self.base.grads(), base_acts, d_features)

    def action_grad(self, head_acts: list[np.ndarray], d_q: np.ndarray) -> np.ndarray:
        """The gradient of the action for ``d_q`` (``[B, 1]``); no weight gradient."""
        d = input_grad_numpy(self.head.weights(), head_acts, d_q)
        return d[:, d.shape[1] - self.action_dim :]


class TD3Backprop:
    """TD3's targets and gradients for FC actor and critics (module docstring); build it
    with :meth:`choose`.

    Args:
        actor, target_actor: The actor's layers and its Polyak copy's.
        critics, target_critics: One or two critics and their target copies.
    """

    def __init__(
        self,
        actor: FCLayers,
        target_actor: FCLayers,
        critics: list[_Critic],
        target_critics: list[_Critic],
    ) -> None:
        assert actor.logits is not None and target_actor.logits is not None
        self.actor, self.target_actor = actor, target_actor
        self.actor_layers: list[Dense] = [*actor.trunk, actor.logits]
        self.target_layers: list[Dense] = [*target_actor.trunk, target_actor.logits]
        self.critics = critics
        self.target_critics = target_critics
        self._actor = DenseViews(self.actor_layers)
        self._target = DenseViews(self.target_layers)
        self._critics = [_NumpyCritic(c) for c in critics]
        self._target_critics = [_NumpyCritic(c) for c in target_critics]
        #: Twin critics' passes side by side (:func:`~rlblocks.train.fast.sac_backprop.
        #: each_critic`); the learner sets it.
        self.paired = False

    @classmethod
    def choose(
        cls,
        actor: nn.Module,
        target_actor: nn.Module,
        critics: Sequence[nn.Module],
        target_critics: Sequence[nn.Module],
    ) -> TD3Backprop | str:
        """The closed form for these networks, or why it does not cover them (SAC's
        reasons, :func:`~rlblocks.train.fast.sac_backprop.decline_reason`)."""
        layers = FCLayers.from_model(actor)
        built = [_Critic.build(m) for m in [*critics, *target_critics]]
        reason = decline_reason(layers, built, actor, critics, target_critics)
        if reason is not None:
            return reason
        target = FCLayers.from_model(target_actor)
        if target is None or target.logits is None or target.free_log_std is not None:
            return "the target actor is not the plain fully connected network"
        if any(
            p.device.type != "cpu" or p.dtype != torch.float32 for p in target_actor.parameters()
        ):
            return "parameters off the CPU or not float32"
        assert layers is not None
        n = len(critics)
        ok = [c for c in built if c is not None]
        return cls(layers, target, ok[:n], ok[n:])

    def written_params(self) -> list[nn.Parameter]:
        """The parameters whose ``.grad`` :meth:`critic_step` and :meth:`actor_grads`
        write, in full, on every call (others they leave as they are)."""
        return written_params(self.actor_layers, self.critics)

    def usable(self) -> bool:
        """False while a pass through the tensors would differ from calling the modules
        (a hook set, a layer replaced or parametrized since :meth:`choose`)."""
        return (
            self.actor.matches_model(training=True)
            and self.target_actor.matches_model(training=False)
            and all(c.usable(training=True) for c in self.critics)
            and all(c.usable(training=False) for c in self.target_critics)
        )

    @staticmethod
    def _mu(views: DenseViews, x: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """The actor's outputs (``[x, ...]``) and ``tanh`` of the first ``dim(A)``."""
        acts = [x]
        out = run_numpy(views.weights(), x, acts)
        return acts, _np(torch.tanh(torch.from_numpy(out[:, : out.shape[1] // 2])))

    @torch.no_grad()
    def targets(
        self,
        next_obs: torch.Tensor,
        rewards: torch.Tensor,
        discounts: torch.Tensor,
        target_noise: float,
        noise_clip: float,
        paired: bool | None = None,
    ) -> torch.Tensor:
        """``y = r + d * min_i Qtarg_i(s', a')`` (``[B]``) at the smoothed target action
        (no draw when ``target_noise`` is 0); the target critics side by side when
        ``paired`` (None: :attr:`paired`)."""
        x = _np(SACBackprop._flat(next_obs))
        a_next = self._mu(self._target, x)[1]
        if target_noise > 0:
            eps = _np(torch.randn(a_next.shape)) * np.float32(target_noise)
            np.clip(eps, -noise_clip, noise_clip, out=eps)
            np.clip(a_next + eps, -1.0, 1.0, out=a_next)
        pair = self.paired if paired is None else paired
        qs = each_critic(lambda c: c.q(x, a_next)[1][-1][:, 0], self._target_critics, pair)
        q = SACBackprop._min(qs)[0]
        r = _np(rewards.reshape(-1).float())
        d = _np(discounts.reshape(-1).float())
        return torch.from_numpy((r + d * q).astype(np.float32, copy=False))

    @torch.no_grad()
    def critic_step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        next_obs: torch.Tensor,
        rewards: torch.Tensor,
        discounts: torch.Tensor,
        weights: torch.Tensor,
        target_noise: float,
        noise_clip: float,
    ) -> tuple[torch.Tensor, float, list[np.ndarray]]:
        """``(y, sum_i mean(w * (Q_i - y)^2), [Q_i(s, a)])`` for normalised ``actions``, ``y``
        from :meth:`targets`; writes the gradients of the critics' layers, on
        :func:`~rlblocks.train.fast.sac_backprop.critic_rounds`' schedule."""
        x, a = _np(SACBackprop._flat(obs)), _np(actions.float())
        w = _np(weights.reshape(-1).float())
        y, out = critic_rounds(
            lambda paired: self.targets(
                next_obs, rewards, discounts, target_noise, noise_clip, paired
            ),
            lambda c: c.q(x, a),
            lambda c, passes, y: self._critic_backward(c, passes, _np(y), w),
            self._critics,
            self.paired,
        )
        return y, sum((loss for loss, _ in out), 0.0), [q for _, q in out]

    @staticmethod
    def _critic_backward(
        critic: _NumpyCritic,
        passes: tuple[list[np.ndarray], list[np.ndarray]],
        y: np.ndarray,
        w: np.ndarray,
    ) -> tuple[float, np.ndarray]:
        """``(mean(w * (Q - y)^2), Q)`` of one critic from its forward ``passes``
        (:meth:`_NumpyCritic.q`); writes its layers' gradients."""
        base_acts, head_acts = passes
        q = head_acts[-1][:, 0]
        diff = q - y
        d_q = (np.float32(2.0 / len(q)) * w * diff).reshape(-1, 1)
        critic.backward(base_acts, head_acts, d_q)
        return float(_mean(w * diff * diff)), q

    @torch.no_grad()
    def actor_grads(self, obs: torch.Tensor) -> float:
        """``-mean(Q_1(s, mu(s)))``; writes the gradients of the actor's layers."""
        x = _np(SACBackprop._flat(obs))
        b = x.shape[0]
        acts, mu = self._mu(self._actor, x)
        critic = self._critics[0]
        head_acts = critic.q(x, mu)[1]
        loss = -float(_mean(head_acts[-1]))
        d_mu = critic.action_grad(head_acts, np.full((b, 1), -1.0 / b, np.float32))
        d_out = np.zeros_like(acts[-1])
        d_out[:, : mu.shape[1]] = d_mu * (np.float32(1.0) - mu * mu)  # tanh's derivative
        backward_numpy(self._actor.weights(), self._actor.grads(), acts, d_out)
        return loss
