"""``SACBackprop``: SAC's update for fully connected actor and critics, without autograd.

For a flat Box observation and a Box action, SAC's default networks are three MLPs per
critic pair: the actor (the catalog's
:class:`~rlblocks.models.fcnet.FullyConnectedNetwork`, ``2 * dim(A)`` outputs) and each
critic (a :class:`~rlblocks.models.heads.ContinuousActionQModel` whose base passes the
observation through and whose ``q_head`` MLP reads ``concat(obs, action)``). On CPU,
autograd's graph building, the module calls and the three backward passes of an update
cost more than the arithmetic of such networks at SAC's batch sizes. :class:`SACBackprop`
runs the same three computations as plain tensors and writes the gradients in closed
form:

* the target ``y = r + d * (min_i Qtarg_i(s', a') - alpha * log pi(a'|s'))``, one draw
  ``a' ~ pi(s')``;
* the critic loss ``0.5 * sum_i mean(w * (Q_i(s, a) - y)^2)`` and its weight gradients;
* the actor loss ``mean(alpha * log pi(a~|s) - min_i Q_i(s, a~))`` and its weight
  gradients: through the critics to the action (input gradients only), through the
  ``tanh`` squash and :class:`~rlblocks.distributions.SquashedGaussian`'s log-density
  (clamped ``log_std``, clamped density, the ``log(1 - tanh^2 + 1e-6)`` Jacobian), then
  through the actor.

Each derivative is the one autograd takes through ``SACLearner``'s module path, ties of the
``min`` and of the squash's clamp included, and the random draws are the same (one
``torch.randn`` per call, in the same order), so both paths give the same update up to
float rounding (``tests/test_sac_learner.py`` compares them). ``SACLearner`` steps the
optimizers. The matrix products run in torch. The squashed Gaussian's draw, log-density and
gradient (some forty element-wise steps on ``[B, dim(A)]`` arrays) are one native call
each (``rlblocks._core.squashed_gaussian_sample`` / ``_grad``, whose numpy twin is
``rlblocks._reference.squashed_gaussian``), and the rest of the element-wise work (the
losses, the ``min`` of the critics) runs in numpy on views of the same memory, where an
operation costs a fraction of a torch call. Hence CPU float32 only:
:meth:`SACBackprop.build` returns None for any other model, device or dtype, and
:meth:`SACBackprop.usable` is False while a hook is set or a layer was replaced.

Examples:
    >>> import gymnasium as gym
    >>> from rlblocks.train.offpolicy_config import SACConfig
    >>> from rlblocks.train.learners.sac import SACLearner
    >>> cfg = SACConfig(model={"fcnet_hiddens": [8]}, q_model={"fcnet_hiddens": [8]})
    >>> learner = SACLearner(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,)), cfg)
    >>> fast = SACBackprop.build(learner.actor, list(learner.critics),
    ...                          list(learner.target_critics))
    >>> fast is not None and fast.usable()
    True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

import numpy as np
import torch
from torch import nn

from rlblocks import _core
from rlblocks.distributions.base import MAX_LOG_NN_OUTPUT, MIN_LOG_NN_OUTPUT
from rlblocks.models.heads import ContinuousActionQModel
from rlblocks.train.fast.dense_layers import Dense, FCLayers, backward_stack, run_stack
from rlblocks.train.fast.side_thread import run_pair, worth_pairing

__all__ = [
    "SACBackprop",
    "critic_rounds",
    "decline_reason",
    "each_critic",
    "pairing_pays",
    "written_params",
]

C = TypeVar("C")
P = TypeVar("P")
R = TypeVar("R")
Y = TypeVar("Y")

#: SquashedGaussian's clamp of the log-stds.
_LOG_STD_BOUNDS = (MIN_LOG_NN_OUTPUT, MAX_LOG_NN_OUTPUT)


class _Draw(NamedTuple):
    """The actor's pass (``acts``, the torch activations; ``inputs``, a numpy view of its
    output) and one draw per row: the standard-normal ``noise``, the ``action`` in
    ``[-1, 1]`` and its ``logp``."""

    acts: list[torch.Tensor]
    inputs: np.ndarray
    noise: np.ndarray
    action: torch.Tensor
    logp: np.ndarray


def _np(x: torch.Tensor) -> np.ndarray:
    """A numpy view of a CPU tensor that does not require grad (the closed form's own, a
    batch's)."""
    return x.numpy()


def _mean(x: np.ndarray, scale: float = 1.0) -> torch.Tensor:
    """``scale * np.mean(x)`` (float32 ``x``) as a 0-d tensor, without ``np.mean``'s and
    ``torch.tensor``'s Python overhead (several times the sum of a batch)."""
    return torch.from_numpy(np.asarray(scale * (np.add.reduce(x, None) / x.size)))


def _column(x: np.ndarray) -> torch.Tensor:
    """``x`` (``[B]``) as a ``[B, 1]`` tensor sharing its memory."""
    return torch.from_numpy(x.reshape(-1, 1))


def _hooked(module: nn.Module) -> bool:
    return bool(
        module._forward_hooks
        or module._forward_pre_hooks
        or module._backward_hooks
        or module._backward_pre_hooks
    )


class _Critic:
    """A ContinuousActionQModel as dense layers: the base's hidden layers (none for a
    pass-through base) make the features, the ``q_head`` reads ``concat(features, action)``."""

    def __init__(self, module: ContinuousActionQModel, base: FCLayers, head: FCLayers) -> None:
        assert head.logits is not None
        self.module = module
        self.base = base
        self.head = head
        self.layers: list[Dense] = [*head.trunk, head.logits]

    @classmethod
    def build(cls, module: nn.Module) -> _Critic | None:
        if type(module) is not ContinuousActionQModel:
            return None
        base = FCLayers.from_model(module.base_model)
        head = FCLayers.from_model(module.q_head)
        if (
            base is None
            or base.logits is not None
            or base.free_log_std is not None
            or head is None
            or head.logits is None
            or head.free_log_std is not None
        ):
            return None
        return cls(module, base, head)

    def usable(self, training: bool) -> bool:
        return (
            not _hooked(self.module)
            and self.base.matches_model(training)
            and self.head.matches_model(training)
        )

    def q(
        self, x: torch.Tensor, action: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """:func:`run_stack`'s activations of the base for the observations ``x`` and of
        the head for ``concat(features, action)``."""
        base_acts = run_stack(self.base.trunk, x)
        return base_acts, run_stack(self.layers, torch.cat([base_acts[-1], action], 1))

    def backward(
        self, base_acts: list[torch.Tensor], head_acts: list[torch.Tensor], d_q: torch.Tensor
    ) -> None:
        """Writes the gradients of the critic's layers for ``d_q`` (``[B, 1]``)."""
        _fresh_grads(self.layers)
        if not self.base.trunk:
            backward_stack(self.layers, head_acts, d_q)
            return
        d_in = backward_stack(self.layers, head_acts, d_q, input_grad=True)
        assert d_in is not None
        _fresh_grads(self.base.trunk)
        backward_stack(self.base.trunk, base_acts, d_in[:, : base_acts[-1].shape[1]])

    def action_grad(self, head_acts: list[torch.Tensor], d_q: torch.Tensor) -> torch.Tensor:
        """The gradient of the action for ``d_q`` (``[B, 1]``); no weight gradient."""
        d = d_q
        for i in range(len(self.layers) - 1, -1, -1):
            layer, y = self.layers[i], head_acts[i + 1]
            if layer.activation == "relu":
                d = torch.ops.aten.threshold_backward(d, y, 0)
            elif layer.activation == "tanh":
                d = torch.ops.aten.tanh_backward(d, y)
            d = torch.mm(d, layer.weight)
        return d[:, head_acts[0].shape[1] - self.module.action_dim :]


class SACBackprop:
    """SAC's targets and gradients for FC actor and critics (module docstring).

    Args:
        actor: The actor's layers (a logits layer of ``2 * dim(A)`` units, no free log-std).
        critics, target_critics: One or two critics and their target copies.
    """

    def __init__(
        self, actor: FCLayers, critics: list[_Critic], target_critics: list[_Critic]
    ) -> None:
        assert actor.logits is not None
        self.actor = actor
        self.actor_layers: list[Dense] = [*actor.trunk, actor.logits]
        self.critics = critics
        self.target_critics = target_critics
        #: Twin critics' passes side by side (:func:`each_critic`); the learner sets it.
        self.paired = False

    @classmethod
    def build(
        cls,
        actor: nn.Module,
        critics: Sequence[nn.Module],
        target_critics: Sequence[nn.Module],
    ) -> SACBackprop | None:
        """The fast path for these networks, or None when one of them is not covered
        (another model class or activation, a free log-std, frozen parameters, parameters
        off the CPU or not float32)."""
        layers = FCLayers.from_model(actor)
        built = [_Critic.build(m) for m in [*critics, *target_critics]]
        if layers is None or decline_reason(layers, built, actor, critics, target_critics):
            return None
        n = len(critics)
        ok = [c for c in built if c is not None]
        return cls(layers, ok[:n], ok[n:])

    def written_params(self) -> list[nn.Parameter]:
        """The parameters whose ``.grad`` :meth:`critic_grads` and :meth:`actor_grads`
        write, in full, on every call (others they leave as they are)."""
        return written_params(self.actor_layers, self.critics)

    def usable(self) -> bool:
        """False while a pass through the tensors would differ from calling the modules
        (a hook set, a layer replaced or parametrized since :meth:`build`)."""
        return (
            self.actor.matches_model(training=True)
            and all(c.usable(training=True) for c in self.critics)
            and all(c.usable(training=False) for c in self.target_critics)
        )

    # --- the policy ---------------------------------------------------------------------------
    def _draw(self, x: torch.Tensor) -> _Draw:
        """The actor's outputs and one reparameterised draw per row."""
        acts = run_stack(self.actor_layers, x)
        inputs = _np(acts[-1])
        noise = _np(torch.randn(inputs.shape[0], inputs.shape[1] // 2))
        action, logp = _core.squashed_gaussian_sample(inputs, noise, *_LOG_STD_BOUNDS)
        return _Draw(acts, inputs, noise, torch.from_numpy(action), logp)

    @staticmethod
    def _flat(obs: torch.Tensor) -> torch.Tensor:
        return obs.reshape(obs.shape[0], -1).float()

    @staticmethod
    def _min(qs: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """``min_i(q_i)`` and ``d min / d q_i``: 1 for the smaller, a half each on a tie
        (as ``amin``)."""
        if len(qs) == 1:
            return qs[0], [np.ones_like(qs[0])]
        first = (qs[0] < qs[1]).astype(np.float32) + np.float32(0.5) * (qs[0] == qs[1])
        return np.minimum(qs[0], qs[1]), [first, 1.0 - first]

    # --- the three computations ---------------------------------------------------------------
    @torch.no_grad()
    def targets(
        self,
        next_obs: torch.Tensor,
        rewards: torch.Tensor,
        discounts: torch.Tensor,
        alpha: torch.Tensor | float,
        paired: bool | None = None,
    ) -> torch.Tensor:
        """``y = r + d * (min_i Qtarg_i(s', a') - alpha * log pi(a'|s'))`` (``[B]``); the
        target critics side by side when ``paired`` (None: :attr:`paired`)."""
        x = self._flat(next_obs)
        draw = self._draw(x)
        pair = self.paired if paired is None else paired
        qs = each_critic(lambda c: _np(c.q(x, draw.action)[1][-1])[:, 0], self.target_critics, pair)
        q = self._min(qs)[0]
        y = _np(rewards) + _np(discounts) * (q - float(alpha) * draw.logp)
        return torch.from_numpy(y.astype(np.float32, copy=False))

    @torch.no_grad()
    def critic_grads(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        targets: torch.Tensor,
        weights: torch.Tensor,
        huber: bool = False,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """``([loss_i], [Q_i(s, a)])`` for normalised ``actions``: per critic
        ``0.5 * mean(w * (Q_i - y)^2)``, or with ``huber`` ``mean(w * huber(Q_i - y))``
        (delta 1, RLlib's SAC loss); writes the gradients of the critics' layers (``.grad``
        of the other parameters is left as is)."""
        x = self._flat(obs)
        y = _np(targets).astype(np.float32, copy=False)
        w = _np(weights).astype(np.float32, copy=False)
        losses, qs = zip(
            *each_critic(
                lambda c: self._critic_backward(c, c.q(x, actions), y, w, huber),
                self.critics,
                self.paired,
            ),
            strict=True,
        )
        return list(losses), list(qs)

    @torch.no_grad()
    def critic_step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        next_obs: torch.Tensor,
        rewards: torch.Tensor,
        discounts: torch.Tensor,
        weights: torch.Tensor,
        alpha: torch.Tensor | float,
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        """:meth:`targets`, then :meth:`critic_grads` at them (squared losses):
        ``(y, [loss_i], [Q_i(s, a)])``, on :func:`critic_rounds`' schedule."""
        x = self._flat(obs)
        w = _np(weights).astype(np.float32, copy=False)
        y, out = critic_rounds(
            lambda paired: self.targets(next_obs, rewards, discounts, alpha, paired),
            lambda c: c.q(x, actions),
            lambda c, passes, y: self._critic_backward(c, passes, _np(y), w, False),
            self.critics,
            self.paired,
        )
        return y, [loss for loss, _ in out], [q for _, q in out]

    @staticmethod
    def _critic_backward(
        critic: _Critic,
        passes: tuple[list[torch.Tensor], list[torch.Tensor]],
        y: np.ndarray,
        w: np.ndarray,
        huber: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, Q)`` of one critic from its forward ``passes`` (:meth:`_Critic.q`):
        ``0.5 * mean(w * (Q - y)^2)``, or ``mean(w * huber(Q - y))``; writes its layers'
        gradients."""
        base_acts, head_acts = passes
        q = head_acts[-1][:, 0]
        b = len(y)
        diff = _np(q) - y
        if huber:
            err = np.abs(diff)
            per_row = np.where(err < 1.0, 0.5 * diff * diff, err - 0.5)
            loss = _mean(w * per_row)
            d_q = w * np.clip(diff, -1.0, 1.0) / b
        else:
            loss = _mean(w * diff * diff, scale=0.5)
            d_q = w * diff / b
        critic.backward(base_acts, head_acts, _column(d_q))
        return loss, q

    @torch.no_grad()
    def actor_grads(
        self, obs: torch.Tensor, alpha: torch.Tensor | float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(actor loss, log pi(a~|s) [B], min_i Q_i(s, a~) [B])`` for one
        reparameterised draw per row; writes the gradients of the actor's layers."""
        x = self._flat(obs)
        b = x.shape[0]
        alpha = float(alpha)
        draw = self._draw(x)
        critic_acts = each_critic(lambda c: c.q(x, draw.action)[1], self.critics, self.paired)
        q_min, min_weights = self._min([_np(acts[-1])[:, 0] for acts in critic_acts])
        logp = draw.logp
        loss = _mean(alpha * logp - q_min)

        # d loss / d action, through min_i Q_i(s, a~) (the critics' input gradients)
        def action_grad(i: int) -> np.ndarray:
            return _np(self.critics[i].action_grad(critic_acts[i], _column(-min_weights[i] / b)))

        d_action = sum(each_critic(action_grad, range(len(self.critics)), self.paired))
        # through the squash, its clamps and alpha * logp / B to the actor's outputs
        d_out = _core.squashed_gaussian_grad(
            draw.inputs, draw.noise, d_action, alpha / b, *_LOG_STD_BOUNDS
        )
        _fresh_grads(self.actor_layers)
        backward_stack(self.actor_layers, draw.acts, torch.from_numpy(d_out))
        return loss, torch.from_numpy(logp), torch.from_numpy(q_min)


def each_critic(fn: Callable[[C], R], critics: Sequence[C], paired: bool) -> list[R]:
    """``[fn(c) for c in critics]``; with ``paired`` and two critics, the second on the side
    thread while the first runs here (:func:`~rlblocks.train.fast.side_thread.run_pair`:
    the same results)."""
    if paired and len(critics) == 2:
        first, second = critics
        return list(run_pair(lambda: fn(first), lambda: fn(second)))
    return [fn(c) for c in critics]


def critic_rounds(
    targets: Callable[[bool], Y],
    forward: Callable[[C], P],
    backward: Callable[[C, P, Y], R],
    critics: Sequence[C],
    paired: bool,
) -> tuple[Y, list[R]]:
    """A critic step's schedule: ``y = targets(paired)``, then ``backward(c, forward(c), y)``
    per critic. Paired (two critics), in two rounds on the two threads: the targets here
    (their target critics one after the other) while the side thread runs both critics'
    ``forward`` (which does not need ``y``), then each ``backward`` on a thread of its own.
    The same results either way."""
    if not (paired and len(critics) == 2):
        y = targets(paired)
        return y, [backward(c, forward(c), y) for c in critics]
    first, second = critics
    y, (pass1, pass2) = run_pair(lambda: targets(False), lambda: (forward(first), forward(second)))
    out1, out2 = run_pair(lambda: backward(first, pass1, y), lambda: backward(second, pass2, y))
    return y, [out1, out2]


def pairing_pays(setting: bool | str, critics: Sequence[_Critic], batch_size: int) -> bool:
    """Whether the closed forms run twin critics side by side: ``parallel_critics`` of the
    config (True / False, or ``"auto"``:
    :func:`~rlblocks.train.fast.side_thread.worth_pairing` of one critic's multiply-adds
    over a batch)."""
    if len(critics) != 2 or setting is False:
        return False
    if setting is True:
        return True
    layers = [*critics[0].base.trunk, *critics[0].layers]
    return worth_pairing(batch_size * sum(d.weight.numel() for d in layers))


def decline_reason(
    actor: FCLayers | None,
    critics_built: Sequence[_Critic | None],
    actor_module: nn.Module,
    critics: Sequence[nn.Module],
    target_critics: Sequence[nn.Module],
) -> str | None:
    """Why the closed forms of SAC and TD3 do not cover these networks (None when they
    do): the rule both learners choose by, so both say the same reasons.

    ``actor`` is :meth:`FCLayers.from_model` of ``actor_module``; ``critics_built`` is
    :meth:`_Critic.build` of each of ``critics`` then ``target_critics``."""
    if actor is None or actor.logits is None or actor.free_log_std is not None:
        return "the actor is not the plain fully connected network (tanh/ReLU, no free log-std)"
    if any(c is None for c in critics_built):
        return "a critic is not an FC Q head over a pass-through or FC base"
    if not 1 <= len(critics) <= 2:
        return f"{len(critics)} critics (one or two are covered)"
    trained = [actor_module, *critics]
    if any(not p.requires_grad for m in trained for p in m.parameters()):
        return "a trained parameter is frozen"
    if any(
        p.device.type != "cpu" or p.dtype != torch.float32
        for m in [*trained, *target_critics]
        for p in m.parameters()
    ):
        return "parameters off the CPU or not float32"
    return None


def written_params(actor_layers: Sequence[Dense], critics: Sequence[_Critic]) -> list[nn.Parameter]:
    """The weights and biases of the actor's layers and of every critic's (head and trunk):
    what a closed-form update (SAC's, TD3's) writes the ``.grad`` of, in full, on every call."""
    layers = [*actor_layers]
    for critic in critics:
        layers += [*critic.layers, *critic.base.trunk]
    return [p for layer in layers for p in (layer.weight, layer.bias)]


def _fresh_grads(layers: list[Dense]) -> None:
    """Gives each layer's weight and bias a ``.grad`` to write into (kept if it has one)."""
    for layer in layers:
        if layer.weight.grad is None:
            layer.weight.grad = torch.empty_like(layer.weight)
        if layer.bias.grad is None:
            layer.bias.grad = torch.empty_like(layer.bias)
