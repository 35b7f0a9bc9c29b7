"""``SACLearner``: soft actor-critic for Box (squashed Gaussian) and Discrete actions.

Continuous actions (Haarnoja et al. 2018, with automatic entropy tuning): the actor is the
catalog's model for ``config.model`` with ``2 * dim(A)`` outputs (means, then log standard
deviations: :class:`~rlblocks.distributions.SquashedGaussian`'s layout); the critics are
:class:`~rlblocks.models.heads.ContinuousActionQModel` heads over the catalog's base model
for ``config.q_model``, so nested and image observations work. For a flat observation whose
default model is the fully connected net, the base is the identity (``fcnet_hiddens=[]``)
and the critic is the usual MLP over ``concat(obs, action)``. All losses and entropies are
computed on the normalised action ``tanh(u)`` in ``[-1, 1]`` (critics read actions rescaled
from the Box bounds to ``[-1, 1]``), so the automatic target entropy is ``-dim(A)`` for any
bounds; :meth:`SACLearner.act` returns actions scaled to the Box bounds.

Discrete actions (Christodoulou 2019): a Categorical actor and critics that output one
Q-value per action (the catalog's model for ``config.q_model`` with ``n`` outputs, a plain
linear head; no dueling). Expectations over the actor's probabilities replace sampling::

    V(s')       = sum_a pi(a|s') * (min_i Qtarg_i(s', a) - alpha * log pi(a|s'))
    actor loss  = mean_s sum_a pi(a|s) * (alpha * log pi(a|s) - min_i Q_i(s, a))
    alpha loss  = -mean_s log_alpha * (H_target - H(pi(.|s)))

With an ``action_mask`` observation (RLlib's ``{"action_mask", "observations"}``) the actor
masks its logits (:class:`~rlblocks.models.action_mask.ActionMaskModel`), so masked actions have
probability exactly 0: never acted, and absent from the soft value and the losses. The
critics read the ``observations`` part only.

The update, for either kind (``y`` per row, ``d`` = ``batch.discounts``: ``gamma^n`` or 0 at
a terminal; the replay summed the n-step rewards)::

    y           = r + d * V(s')                         (Box: V from one draw a' ~ pi(s'))
    critic loss = 0.5 * sum_i mean(w * (Q_i(s, a) - y)^2)       (w: importance weights)
    actor loss  = mean(alpha * log pi(a~|s) - min_i Q_i(s, a~))  (a~ reparameterised)
    alpha loss  = -mean(log_alpha * (log pi(a~|s) + H_target))

in this order: the target (one draw of next actions), the critic step, the actor step
(one reparameterised draw, the critics just updated), the alpha step. Priorities are the
mean over critics of ``|Q_i(s, a) - y|``; the importance weights ``w`` weigh the critic loss
only (as in RLlib).

Examples:
    >>> import gymnasium as gym, numpy as np, torch
    >>> cfg = SACConfig(model={"fcnet_hiddens": [16]}, q_model={"fcnet_hiddens": [16]})
    >>> _ = torch.manual_seed(0)
    >>> learner = SACLearner(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,)), cfg)
    >>> learner.target_entropy
    -2.0
    >>> actions = learner.act(np.zeros((4, 3), np.float32), explore=True, timestep=0)
    >>> actions.shape, bool((np.abs(actions) <= 2).all())
    ((4, 2), True)
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box, Discrete
from torch import nn

from rlblocks.catalog import ModelCatalog
from rlblocks.distributions import FLOAT_MIN, SquashedGaussian
from rlblocks.masks import (
    is_mask_space,
)
from rlblocks.models.heads import ContinuousActionQModel
from rlblocks.models.misc import mode_dependent
from rlblocks.train.algo_spaces import check_action_space
from rlblocks.train.fast import adam_step, make_adam, set_learning_rate
from rlblocks.train.fast.polyak import PolyakUpdate
from rlblocks.train.fast.sac_backprop import SACBackprop, pairing_pays
from rlblocks.train.fast.unwritten import clear_unwritten
from rlblocks.train.gsde import build_sde, last_features
from rlblocks.train.learners.sac_batch import (
    TransitionBatch,
    _as_tensor,
    _host,
    _mean,
    _param_list,
    _Tensors,
)
from rlblocks.train.offpolicy_config import SACConfig
from rlblocks.train.policy import Policy
from rlblocks.train.sac_models import (
    build_critics,
    check_feedforward,
    checked_model_config,
    torch_init,
)

__all__ = ["SACLearner", "TransitionBatch"]

#: Christodoulou (2019)'s factor on the maximum entropy ``log n`` (discrete "auto" target).
DISCRETE_ENTROPY_FACTOR = 0.98


class SACLearner:
    """Soft actor-critic: actor, twin critics, target critics, ``log_alpha``, optimizers.

    Args:
        obs_space: The preprocessor's observation space (a Box, with ``original_space``
            for nested observations).
        action_space: A 1-D float ``Box`` with finite bounds, or a ``Discrete``.
        config: The validated :class:`~rlblocks.train.offpolicy_config.SACConfig` (reads
            ``model_config()``, ``q_model_config()``, ``actor_lr``, ``critic_lr``,
            ``alpha_lr``, ``tau``, ``initial_alpha``, ``target_entropy``, ``twin_q``,
            ``grad_clip``; ``gamma`` and ``n_step`` are already in ``batch.discounts``).
        device: The torch device of every model.

    Attributes:
        actor: The actor model. critics / target_critics: One or two critic models and
            their Polyak-averaged copies. log_alpha: The entropy temperature's log
            (a trained scalar parameter).
        target_entropy: The entropy target: the config's float, or for ``"auto"``
            ``-dim(A)`` (Box) / ``0.98 * log(n)`` (Discrete; with an action mask
            ``0.98 * log(k)`` per row for its ``k`` legal actions, the largest entropy
            that row can reach, and this attribute is the unmasked value).

    Raises:
        ValueError: Another action space kind, a Box that is not 1-D float with finite
            bounds, a mask with a Box action, a recurrent model or a custom action
            distribution.
    """

    #: The statistics :meth:`update` returns (``progress.csv`` columns).
    STATS = (
        "qf_loss",
        "actor_loss",
        "alpha_loss",
        "alpha",
        "q_mean",
        "td_error_mean",
        "entropy",
        "target_entropy",
    )

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        config: SACConfig,
        device: torch.device | str = "cpu",
    ) -> None:
        self.device = torch.device(device)
        self.obs_space = obs_space
        self.action_space = action_space
        self.config = config
        self.discrete = isinstance(action_space, Discrete)
        if not self.discrete:
            self._check_box(action_space)
        self.tau = float(config.tau)
        self.grad_clip = None if config.grad_clip is None else float(config.grad_clip)
        actor_cfg = checked_model_config(config.model_config(), "model")
        q_cfg = checked_model_config(config.q_model_config(), "q_model")
        original = getattr(obs_space, "original_space", obs_space)
        self.masked = is_mask_space(original)

        # --- actor ---------------------------------------------------------------------
        if self.discrete:
            self.dist_class, num_outputs = ModelCatalog.get_action_dist(action_space, actor_cfg)
        else:
            assert isinstance(action_space, Box)
            self.dist_class = partial(SquashedGaussian, action_space=action_space)
            num_outputs = 2 * int(action_space.shape[0])
        self.actor = ModelCatalog.get_model_v2(
            obs_space, action_space, num_outputs, actor_cfg, name="sac_actor"
        ).to(self.device)
        check_feedforward(self.actor, "actor")
        #: gSDE's noise (``use_sde``, :mod:`rlblocks.train.gsde`), else None.
        self.sde = (
            build_sde(self.actor, obs_space, action_space, config) if config.use_sde else None
        )
        self._actor_modal = mode_dependent(self.actor)
        self._policy = Policy(
            obs_space,
            action_space,
            config,
            self.device,
            model=self.actor,
            dist_class=self.dist_class,
        )

        # --- critics: over the observation (the "observations" part under a mask) -----------
        critics, self._critic_columns, self._critic_shape = build_critics(
            obs_space, action_space, q_cfg, 2 if config.twin_q else 1, self.masked
        )
        if config.network_init == "torch":
            torch_init(self.actor, *critics)
        self.critics = nn.ModuleList(critics).to(self.device)
        self.target_critics = copy.deepcopy(self.critics)
        self.target_critics.requires_grad_(False)
        self.target_critics.train(False)

        # --- entropy ------------------------------------------------------------------
        self.log_alpha = nn.Parameter(
            torch.tensor(math.log(config.initial_alpha), dtype=torch.float32, device=self.device)
        )
        self.auto_entropy = config.target_entropy == "auto"
        if self.auto_entropy:
            self.target_entropy = (
                DISCRETE_ENTROPY_FACTOR * math.log(int(action_space.n))
                if isinstance(action_space, Discrete)
                else -float(np.prod(action_space.shape or (1,)))
            )
        else:
            self.target_entropy = float(config.target_entropy)

        # --- optimizers ---------------------------------------------------------------
        def lr(value: float | None) -> float:
            return float(config.lr if value is None else value)

        # fused Adam (one kernel per step; torch's default runs one per tensor)
        self._actor_params = list(self.actor.parameters())
        if self.sde is not None:
            self._actor_params.append(self.sde.log_std)
        self.actor_optimizer = make_adam(self._actor_params, lr(config.actor_lr), 1e-8)
        self.critic_optimizer = make_adam(
            list(self.critics.parameters()), lr(config.critic_lr), 1e-8
        )
        self.alpha_optimizer = make_adam([self.log_alpha], lr(config.alpha_lr), 1e-8)
        self.fixed_alpha = lr(config.alpha_lr) == 0  # SB3's fixed ent_coef
        if not self.discrete:
            assert isinstance(action_space, Box)
            self._low = torch.as_tensor(action_space.low, dtype=torch.float32, device=self.device)
            self._high = torch.as_tensor(action_space.high, dtype=torch.float32, device=self.device)
            self._low_host = action_space.low.astype(np.float32)
            self._span_host = action_space.high.astype(np.float32) - self._low_host

    # --- construction helpers ---------------------------------------------------------------
    @staticmethod
    def _check_box(space: gym.Space) -> None:
        check_action_space("SAC", space)

    # --- tensors ----------------------------------------------------------------------------
    def _tensors(self, batch: TransitionBatch) -> _Tensors:
        dev = self.device
        actions = _as_tensor(batch.actions, dev)
        if self.discrete:
            start = int(getattr(self.action_space, "start", 0))
            actions = actions.reshape(-1).long() - start
        else:
            actions = actions.float().reshape(actions.shape[0], -1)
        return _Tensors(
            _as_tensor(batch.obs, dev),
            actions,
            _as_tensor(batch.rewards, dev).float().reshape(-1),
            _as_tensor(batch.next_obs, dev),
            _as_tensor(batch.discounts, dev).float().reshape(-1),
            _as_tensor(batch.weights, dev).float().reshape(-1),
        )

    def _normalize(self, actions: torch.Tensor) -> torch.Tensor:
        """Box-bounded actions -> ``[-1, 1]`` (on the CPU in numpy, the same float32
        operations at a fraction of four torch calls' overhead)."""
        if actions.device.type == "cpu" and not actions.requires_grad:
            host = actions.numpy()
            return torch.from_numpy((host - self._low_host) / self._span_host * 2.0 - 1.0)
        return (actions - self._low) / (self._high - self._low) * 2.0 - 1.0

    def _critic_obs(self, obs: torch.Tensor) -> torch.Tensor:
        if self._critic_columns is None:
            return obs
        return obs[:, self._critic_columns].reshape(-1, *self._critic_shape)

    def _q(
        self, critic: nn.Module, obs: torch.Tensor, actions: torch.Tensor | None
    ) -> torch.Tensor:
        """``[B]`` Q-values (``actions`` normalised) or, discrete, ``[B, n]``."""
        feats, _ = critic({"obs": obs}, [], None)
        if self.discrete:
            return feats
        assert isinstance(critic, ContinuousActionQModel) and actions is not None
        return critic.get_single_q_value(feats, actions).reshape(-1)

    def _actor_out(self, obs: torch.Tensor) -> torch.Tensor:
        out, _ = self.actor({"obs": obs}, [], None)
        return out

    def _draw(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised Box action in ``[-1, 1]`` and its log-density (gSDE: with the
        update's matrix ``W``)."""
        if self.sde is None:
            return SquashedGaussian(out).rsample_and_logp()
        return self.sde.sample(out, last_features(self.actor), self.__dict__.get("_sde_w"))

    @torch.no_grad()
    def _sde_act(self, obs: Any, timestep: int) -> np.ndarray:
        """Exploring actions under gSDE (:meth:`~rlblocks.train.gsde.StateDependentNoise.act`)
        scaled to the Box."""
        assert self.sde is not None
        out = self._actor_out(_as_tensor(obs, self.device).float())
        x = (self.sde.act(out, last_features(self.actor), timestep) + 1.0) / 2.0
        x = x * (self._high - self._low) + self._low
        return _host(torch.minimum(torch.maximum(x, self._low), self._high))

    def _discrete_policy(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(probs, log_probs)``; a masked (``FLOAT_MIN``) logit gives probability 0 and
        log-probability 0 in place of ``-inf`` (so ``probs * (... log_probs ...)`` is 0 there,
        gradients included)."""
        logp = torch.log_softmax(logits, dim=-1)
        probs = logp.exp()
        return probs, torch.where(probs > 0, logp, torch.zeros_like(logp))

    def _row_target_entropy(self, logits: torch.Tensor) -> torch.Tensor | float:
        """The entropy target, per row for an automatic target under an action mask."""
        if not (self.masked and self.auto_entropy):
            return self.target_entropy
        legal = (logits > FLOAT_MIN / 2).sum(-1).clamp(min=1).float()
        return DISCRETE_ENTROPY_FACTOR * torch.log(legal)

    def row_target_entropy(self, obs: Any) -> np.ndarray:
        """The entropy target of each row of ``[B, ...]`` observations (``float64 [B]``;
        differs from :attr:`target_entropy` only for an automatic target with a mask).

        Examples:
            >>> import gymnasium as gym, numpy as np
            >>> cfg = SACConfig(model={"fcnet_hiddens": [8]}, q_model={"fcnet_hiddens": [8]})
            >>> SACLearner(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(4), cfg
            ...            ).row_target_entropy(np.zeros((1, 2))).round(4).tolist()
            [1.3586]
        """
        with torch.no_grad():
            target = self._row_target_entropy(self._actor_out(_as_tensor(obs, self.device)))
        b = int(np.asarray(obs).shape[0]) if not isinstance(obs, torch.Tensor) else obs.shape[0]
        if isinstance(target, torch.Tensor):
            return target.cpu().numpy().astype(np.float64)
        return np.full(b, target, np.float64)

    @property
    def alpha(self) -> float:
        """The current entropy temperature ``exp(log_alpha)``."""
        return float(self.log_alpha.detach().exp())

    # --- the interface ----------------------------------------------------------------------
    def act(self, obs: np.ndarray, explore: bool, timestep: int) -> np.ndarray:
        """``[B, *action_shape]`` actions for ``[B, ...]`` preprocessed observations:
        sampled (``explore``) or greedy (the squashed mean / the most probable legal
        action). Box actions lie within the bounds; Discrete ones are int64 with the
        space's ``start``. ``timestep`` is read by gSDE (``use_sde``: which draw of its
        exploration matrices applies) only.

        Raises:
            ValueError: A row whose action mask leaves no legal action.
        """
        if getattr(obs, "dtype", None) in (np.float64, torch.float64):  # float32, as trained
            obs = obs.float() if isinstance(obs, torch.Tensor) else obs.astype(np.float32)
        if explore and self.sde is not None:
            return self._sde_act(obs, timestep)
        return self._policy.act(obs, [], explore=explore, full=False)["actions"]

    @torch.no_grad()
    def targets(self, batch: TransitionBatch) -> torch.Tensor:
        """The critics' target ``y = r + d * V(s')`` per row (``[B]``); for a Box action
        space ``V`` draws one next action per row (the update's first random draw)."""
        t = batch if isinstance(batch, _Tensors) else self._tensors(batch)
        return self._targets(t)

    def _targets(self, t: _Tensors) -> torch.Tensor:
        alpha = self.log_alpha.detach().exp()
        out = self._actor_out(t.next_obs)
        obs = self._critic_obs(t.next_obs)
        if self.discrete:
            probs, logp = self._discrete_policy(out)
            q = torch.stack([self._q(c, obs, None) for c in self.target_critics]).amin(0)
            value = (probs * (q - alpha * logp)).sum(-1)
        else:
            a_next, logp_next = self._draw(out)
            q = torch.stack([self._q(c, obs, a_next) for c in self.target_critics]).amin(0)
            value = q - alpha * logp_next
        return t.rewards + t.discounts * value

    def critic_loss(
        self, batch: TransitionBatch, targets: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``(0.5 * sum_i mean(w * (Q_i(s, a) - y)^2), [Q_i(s, a) per critic, [B] each])``."""
        t = batch if isinstance(batch, _Tensors) else self._tensors(batch)
        return self._critic_loss(t, targets)

    def _critic_loss(
        self, t: _Tensors, targets: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        obs = self._critic_obs(t.obs)
        if self.discrete:
            qs = [self._q(c, obs, None).gather(1, t.actions[:, None])[:, 0] for c in self.critics]
        else:
            a = self._normalize(t.actions)
            qs = [self._q(c, obs, a) for c in self.critics]
        loss = 0.5 * (t.weights * (qs[0] - targets) ** 2).mean()
        for q in qs[1:]:
            loss = loss + 0.5 * (t.weights * (q - targets) ** 2).mean()
        return loss, qs

    def _apply(self, optimizer: torch.optim.Optimizer, params: list[Any]) -> None:
        """Clips the gradients (``grad_clip``) and steps ``optimizer``."""
        if self.grad_clip is not None:
            nn.utils.clip_grad_norm_(params, self.grad_clip)
        if not adam_step(optimizer):
            optimizer.step()

    @staticmethod
    def _clear_grads(
        optimizer: torch.optim.Optimizer, params: list[Any], fast: SACBackprop | None
    ) -> None:
        """What ``optimizer.zero_grad(set_to_none=True)`` leaves before a gradient pass:
        with the closed form ``fast``, only the gradients it does not overwrite go
        (:func:`~rlblocks.train.fast.unwritten.clear_unwritten`)."""
        if fast is None:
            optimizer.zero_grad(set_to_none=True)
        else:
            clear_unwritten(params, fast)

    def _backprop(self) -> SACBackprop | None:
        """The closed-form update when the networks are the plain fully connected ones
        (:mod:`rlblocks.train.fast.sac_backprop`) and no hook is set, else None (gSDE:
        always None, as :func:`~rlblocks.train.gsde.build_sde` logs)."""
        if "_fast" not in self.__dict__:
            self._fast = (
                None
                if self.discrete or self.masked or self.sde is not None
                else SACBackprop.build(self.actor, list(self.critics), list(self.target_critics))
            )
            if self._fast is not None:
                self._fast.paired = pairing_pays(
                    self.config.parallel_critics, self._fast.critics, self.config.train_batch_size
                )
        return self._fast if self._fast is not None and self._fast.usable() else None

    def update(self, batch: TransitionBatch, timestep: int) -> tuple[dict[str, float], np.ndarray]:
        """One gradient step of the critics, the actor and ``log_alpha`` on ``batch``.

        Returns:
            ``(stats, priorities)``: ``qf_loss``, ``actor_loss``, ``alpha_loss``, ``alpha``
            (after the step), ``q_mean``, ``td_error_mean`` (mean ``|Q - y|``),
            ``entropy`` (the actor's, estimated from its draws for a Box),
            ``target_entropy``; priorities ``float64 [B]``: the mean over critics of
            ``|Q_i(s, a) - y|``.
        """
        t = self._tensors(batch)
        if not self.actor.training and self._actor_modal:
            self.actor.train(True)
        if not self.critics.training and mode_dependent(self.critics):
            self.critics.train(True)
        critic_params, actor_params = self._param_lists()
        fast = self._backprop()
        alpha = self.log_alpha.detach().exp()
        if self.sde is not None:  # one W for the update's draws (reparameterised)
            self.__dict__["_sde_w"] = self.sde.draw(1)[0]

        # critics (zero_grad(set_to_none=True) without the call on the closed form, which
        # overwrites the gradients it writes: the others, e.g. unused value branches, go)
        self._clear_grads(self.critic_optimizer, critic_params, fast)
        if fast is not None:
            alpha_value = float(alpha)
            targets, losses, qs = fast.critic_step(
                t.obs,
                self._normalize(t.actions),
                t.next_obs,
                t.rewards,
                t.discounts,
                t.weights,
                alpha_value,
            )
            qf_loss = sum(map(float, losses))
        else:
            targets = self.targets(t)
            loss, qs = self._critic_loss(t, targets)
            loss.backward(inputs=critic_params)
            qf_loss = float(loss.detach())
        self._apply(self.critic_optimizer, critic_params)
        y = _host(targets)
        td = sum(np.abs(_host(q) - y) for q in qs) / len(qs)

        # actor
        self._clear_grads(self.actor_optimizer, actor_params, fast)
        target_entropy: torch.Tensor | float = self.target_entropy
        if fast is not None:
            actor_loss, neg_entropy, _ = fast.actor_grads(t.obs, alpha_value)
        else:
            actor_loss, neg_entropy, target_entropy = self._actor_loss(t, alpha)
            actor_loss.backward(inputs=actor_params)
        self._apply(self.actor_optimizer, actor_params)

        # temperature: d/d log_alpha of -mean(log_alpha * (neg_entropy + target)), its only
        # gradient (the statistics in numpy: a handful of torch calls less per update)
        neg = _host(neg_entropy)
        target = _host(target_entropy) if torch.is_tensor(target_entropy) else target_entropy
        term = _mean(neg + target)
        log_alpha = float(self.log_alpha.detach())
        if self.log_alpha.grad is None:
            self.log_alpha.grad = torch.full_like(self.log_alpha, -term)
        else:
            self.log_alpha.grad.fill_(-term)
        if not self.fixed_alpha:
            self._apply(self.alpha_optimizer, [self.log_alpha])

        stats = {
            "qf_loss": qf_loss,
            "actor_loss": float(actor_loss.detach()),
            "alpha_loss": -log_alpha * term,
            "alpha": self.alpha,
            "q_mean": _mean(_host(qs[0])),
            "td_error_mean": _mean(td),
            "entropy": -_mean(neg),
            "target_entropy": target if isinstance(target, float) else _mean(target),
        }
        self.__dict__.pop("_sde_w", None)
        return stats, td.astype(np.float64)

    def _actor_loss(
        self, t: _Tensors, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | float]:
        """``(actor loss, minus each row's entropy estimate, the entropy target)`` through
        the modules (the graph reaches the actor's parameters)."""
        out = self._actor_out(t.obs)
        obs = self._critic_obs(t.obs)
        if self.discrete:
            probs, logp = self._discrete_policy(out)
            q_pi = torch.stack([self._q(c, obs, None) for c in self.critics]).amin(0)
            actor_loss = (probs * (alpha * logp - q_pi)).sum(-1).mean()
            neg_entropy = (probs * logp).sum(-1).detach()
            return actor_loss, neg_entropy, self._row_target_entropy(out.detach())
        a_pi, logp_pi = self._draw(out)
        q_pi = torch.stack([self._q(c, obs, a_pi) for c in self.critics]).amin(0)
        return (alpha * logp_pi - q_pi).mean(), logp_pi.detach(), self.target_entropy

    def _param_lists(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """The critics' and the actor's parameters, listed once (walking the modules on
        every update costs more than the small models' arithmetic)."""
        cached = self.__dict__.get("_param_cache")
        if cached is None:
            cached = self.__dict__["_param_cache"] = (
                _param_list(self.critics),
                self._actor_params,
            )
        return cached[0], cached[1]

    def set_lr(self, lr: float) -> None:
        """Sets the actor's, the critics' and (unless fixed: ``alpha_lr=0``) the entropy
        coefficient's learning rates (``lr_schedule``)."""
        set_learning_rate(lr, self.actor_optimizer, self.critic_optimizer)
        if not self.fixed_alpha:
            set_learning_rate(lr, self.alpha_optimizer)

    def sync_targets(self) -> None:
        """Polyak averaging: ``target <- (1 - tau) * target + tau * critic`` for every
        parameter (``tau = 1``: an exact copy); buffers are copied
        (:class:`~rlblocks.train.fast.polyak.PolyakUpdate`)."""
        update: PolyakUpdate | None = self.__dict__.get("_polyak")
        if update is None:
            update = self.__dict__["_polyak"] = PolyakUpdate.of_parameters(
                self.critics, self.target_critics
            )
        update(self.tau)

    def acting_policy(self) -> Policy:
        """The actor as a :class:`~rlblocks.train.policy.Policy` (shares the learner's
        model), what acting, evaluation and export call: its deterministic action is the
        greedy one (the squashed mean scaled to the Box bounds, or the most probable legal
        Discrete action). Its ``value_function()`` (``PolicyGraph``'s ``value``) is the
        catalog model's value branch, which SAC does not train; read Q-values from the
        learner instead."""
        return self._policy

    # --- state ------------------------------------------------------------------------------
    _STATE_KEYS = (
        "actor",
        "critics",
        "target_critics",
        "actor_optimizer",
        "critic_optimizer",
        "alpha_optimizer",
        "log_alpha",
    )

    def state_dict(self) -> dict[str, Any]:
        """Every model, target, optimizer and ``log_alpha`` (references to the live
        tensors, as ``torch``'s ``state_dict``: save or copy it before further updates)."""
        return {
            "actor": self.actor.state_dict(),
            "critics": self.critics.state_dict(),
            "target_critics": self.target_critics.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            **({} if self.sde is None else {"sde": self.sde.state()}),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`'s output exactly.

        Raises:
            ValueError: A missing entry (named), or models of other shapes.
        """
        keys = self._STATE_KEYS + (() if self.sde is None else ("sde",))
        missing = [k for k in keys if k not in state]
        if missing:
            raise ValueError(
                f"SAC state: missing {missing}; this SAC learner's state has {list(keys)}"
                + (" (use_sde=True: a state saved without gSDE lacks 'sde')" if self.sde else "")
            )
        if self.sde is None and "sde" in state:
            raise ValueError(
                "SAC state: it holds gSDE's 'sde' entry; this learner has use_sde=False "
                "(build it with use_sde=True)"
            )
        try:
            self.actor.load_state_dict(state["actor"])
            self.critics.load_state_dict(state["critics"])
            self.target_critics.load_state_dict(state["target_critics"])
        except RuntimeError as err:
            raise ValueError(f"SAC state: the models do not match this learner's: {err}") from err
        if self.sde is not None:
            self.sde.load(state["sde"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        with torch.no_grad():
            self.log_alpha.copy_(torch.as_tensor(state["log_alpha"], dtype=torch.float32))
