"""``TD3Learner``: TD3 (and DDPG, its special case) for Box actions.

TD3 (Fujimoto, van Hoof and Meger 2018) keeps DDPG's deterministic actor and Q-learning
critic and adds three things against the critic's overestimation: two critics whose
smaller target value is bootstrapped (clipped double Q), noise on the target action so
that the target does not exploit a sharp peak of the critic (target policy smoothing),
and fewer actor and target updates than critic updates (delayed policy updates). DDPG
here is TD3 with those three turned off (:class:`~rlblocks.train.offpolicy_config.DDPGConfig`:
one critic, no smoothing, ``policy_delay=1``).

The actor is the catalog's model for ``config.model`` with ``2 * dim(A)`` outputs in
:class:`~rlblocks.distributions.SquashedGaussian`'s layout, of which TD3 reads the first
half: ``mu(s) = tanh(mean)`` in ``[-1, 1]``, scaled to the Box bounds for the env. The
second half (SAC's log standard deviations) is never read, so it gets no gradient; it
keeps the layout so that acting, evaluation and export (ONNX) are SAC's: the
deterministic action of a SquashedGaussian is exactly ``mu(s)`` scaled to the bounds, and
the numpy fast path (:class:`~rlblocks.train.fast.squashed_actor.SquashedActor`) serves it
for the default fully connected model. The critics are SAC's
(:func:`~rlblocks.train.sac_models.build_critics`), reading actions normalised to
``[-1, 1]``. One update, with ``d = batch.discounts`` (``gamma^n``, 0 at a terminal)::

    a'          = clip(mu_targ(s') + clip(N(0, target_noise^2), -c, c), -1, 1)
    y           = r + d * min_i Qtarg_i(s', a')
    critic loss = sum_i mean(w * (Q_i(s, a) - y)^2)
    every policy_delay-th update:
        actor loss = -mean(Q_1(s, mu(s)))
        targets   <- Polyak(tau) of the actor and the critics

For the default fully connected actor and critics (float32, on the CPU, no hook set) the
update runs in closed form without autograd
(:class:`~rlblocks.train.fast.td3_backprop.TD3Backprop`, the same update up to float
rounding, the same smoothing noise drawn); other networks go through autograd, and the
reason the closed form declined is logged once (SAC's rule and reasons).

Acting: uniformly at random in the Box before ``learning_starts`` (with
``warmup_noise``, plus the exploration noise, clipped, as Stable-Baselines3 acts), then
``mu(s)`` plus the exploration noise (:mod:`rlblocks.train.exploration_noise`), clipped to
``[-1, 1]`` and scaled.

Examples:
    >>> import gymnasium as gym, numpy as np, torch
    >>> from rlblocks.train.offpolicy_config import TD3Config
    >>> cfg = TD3Config(model={"fcnet_hiddens": [16]}, q_model={"fcnet_hiddens": [16]})
    >>> _ = torch.manual_seed(0)
    >>> learner = TD3Learner(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,)), cfg)
    >>> actions = learner.act(np.zeros((4, 3), np.float32), explore=True, timestep=0)
    >>> actions.shape, bool((np.abs(actions) <= 2).all()), len(learner.critics)
    ((4, 2), True, 2)
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box
from torch import nn

from rlblocks.catalog import ModelCatalog
from rlblocks.distributions import SquashedGaussian
from rlblocks.masks import is_mask_space
from rlblocks.models.heads import ContinuousActionQModel
from rlblocks.train.algo_spaces import check_action_space
from rlblocks.train.exploration_noise import make_noise
from rlblocks.train.fast import adam_step, make_adam, set_learning_rate
from rlblocks.train.fast.choice import log_once
from rlblocks.train.fast.polyak import PolyakUpdate
from rlblocks.train.fast.sac_backprop import pairing_pays
from rlblocks.train.fast.td3_backprop import TD3Backprop
from rlblocks.train.fast.unwritten import clear_unwritten
from rlblocks.train.offpolicy_config import TD3Config
from rlblocks.train.policy import Policy
from rlblocks.train.sac_models import (
    build_critics,
    check_feedforward,
    checked_model_config,
    torch_init,
)

__all__ = ["TD3Learner"]

logger = logging.getLogger(__name__)


def _tensor(x: Any, device: torch.device) -> torch.Tensor:
    t = x.to(device) if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    t = t.to(device)
    return t.float() if t.dtype == torch.float64 else t


def _np_host(x: torch.Tensor) -> np.ndarray:
    """A host numpy copy (a view on the CPU) of a tensor that needs no grad."""
    return x.detach().cpu().numpy()


class TD3Learner:
    """TD3's actor, critics, their Polyak targets and optimizers (module docstring).

    Args:
        obs_space: The preprocessor's observation space.
        action_space: A 1-D float ``Box`` with finite bounds.
        config: The validated :class:`~rlblocks.train.offpolicy_config.TD3Config` (or
            ``DDPGConfig``).
        device: The torch device of every model.

    Raises:
        ValueError: Another action space, an action-mask observation, a recurrent model
            or a custom action distribution.
    """

    #: The statistics :meth:`update` returns (``progress.csv`` columns; ``actor_loss`` is
    #: the mean over the iteration's delayed actor steps).
    STATS = ("qf_loss", "actor_loss", "q_mean", "td_error_mean")

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        config: TD3Config,
        device: torch.device | str = "cpu",
    ) -> None:
        name = config.ALGORITHM
        check_action_space(name, action_space)
        assert isinstance(action_space, Box)
        original = getattr(obs_space, "original_space", obs_space)
        if is_mask_space(original):
            raise ValueError(
                f"{name}: an 'action_mask' observation needs a Discrete action space; {name} "
                "acts in a Box"
            )
        self.device = torch.device(device)
        self.config = config
        self.action_space = action_space
        self.dim = int(action_space.shape[0])
        self.tau = float(config.tau)
        self.grad_clip = None if config.grad_clip is None else float(config.grad_clip)
        actor_cfg = checked_model_config(config.model_config(), "model")
        q_cfg = checked_model_config(config.q_model_config(), "q_model")

        dist_class = partial(SquashedGaussian, action_space=action_space)
        self.actor = ModelCatalog.get_model_v2(
            obs_space, action_space, 2 * self.dim, actor_cfg, name="td3_actor"
        ).to(self.device)
        check_feedforward(self.actor, "actor")
        critics, _, _ = build_critics(
            obs_space, action_space, q_cfg, 2 if config.twin_q else 1, False
        )
        if config.network_init == "torch":
            torch_init(self.actor, *critics)
        self.target_actor = copy.deepcopy(self.actor)
        self.target_actor.requires_grad_(False)
        self._policy = Policy(
            obs_space, action_space, config, self.device, model=self.actor, dist_class=dist_class
        )
        self.critics = nn.ModuleList(critics).to(self.device)
        self.target_critics = copy.deepcopy(self.critics)
        self.target_critics.requires_grad_(False)
        self.actor_optimizer = make_adam(
            list(self.actor.parameters()), float(config.actor_lr or config.lr), 1e-8
        )
        self.critic_optimizer = make_adam(
            list(self.critics.parameters()), float(config.critic_lr or config.lr), 1e-8
        )
        self.noise = make_noise(
            config.exploration_noise, config.exploration_sigma, config.ou_theta, config.ou_dt
        )
        self._low = action_space.low.astype(np.float32)
        self._span = action_space.high.astype(np.float32) - self._low
        #: Updates made so far (the actor steps on every ``policy_delay``-th).
        self.updates = 0
        self._polyak = [
            PolyakUpdate.of_parameters(self.actor, self.target_actor),
            PolyakUpdate.of_parameters(self.critics, self.target_critics),
        ]

    # --- the networks -----------------------------------------------------------------------
    def mu(self, actor: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        """``tanh`` of the first ``dim(A)`` outputs of ``actor``: ``[B, dim]`` in ``[-1, 1]``."""
        out, _ = actor({"obs": obs}, [], None)
        return torch.tanh(out[:, : self.dim])

    def q(self, critic: nn.Module, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``[B]`` Q-values of ``critic`` at normalised ``actions``."""
        feats, _ = critic({"obs": obs}, [], None)
        assert isinstance(critic, ContinuousActionQModel)
        return critic.get_single_q_value(feats, actions).reshape(-1)

    def normalize(self, actions: Any) -> torch.Tensor:
        """Box-bounded actions -> ``[-1, 1]``."""
        host = np.asarray(actions, np.float32).reshape(-1, self.dim)
        return torch.from_numpy((host - self._low) / self._span * 2.0 - 1.0).to(self.device)

    def _scale(self, unit: np.ndarray) -> np.ndarray:
        """``[-1, 1]`` actions -> the Box bounds (clipped to them)."""
        high = self._low + self._span
        return np.clip((unit + 1.0) / 2.0 * self._span + self._low, self._low, high)

    # --- acting -----------------------------------------------------------------------------
    def act(self, obs: np.ndarray, explore: bool, timestep: int) -> np.ndarray:
        """``float32 [B, dim]`` actions in the Box for ``[B, ...]`` preprocessed
        observations: ``mu(s)`` scaled (``explore=False``); exploring, uniform in the Box
        before ``learning_starts`` (``warmup_noise``: plus the exploration noise, clipped),
        else ``mu(s)`` plus the exploration noise."""
        if getattr(obs, "dtype", None) == np.float64:
            obs = obs.astype(np.float32)
        rows = len(obs)
        if explore and timestep < self.config.learning_starts:
            unit = torch.rand(rows, self.dim).numpy() * 2.0 - 1.0
            if self.config.warmup_noise:  # Stable-Baselines3's warm-up: noise on the uniform
                unit = np.clip(unit + self.noise.draw(rows, self.dim), -1.0, 1.0)
            return self._scale(unit).astype(np.float32)
        actions = np.asarray(self._policy.act(obs, [], explore=False, full=False)["actions"])
        if not explore:
            return actions.astype(np.float32)
        unit = (actions.reshape(rows, self.dim) - self._low) / self._span * 2.0 - 1.0
        unit = np.clip(unit + self.noise.draw(rows, self.dim), -1.0, 1.0)
        return self._scale(unit).astype(np.float32)

    def acting_policy(self) -> Policy:
        """The actor as a :class:`~rlblocks.train.policy.Policy` (shares the learner's
        model): its deterministic action, ``mu(s)`` scaled to the Box, is what evaluation
        and export use. Its ``value_function()`` is the catalog model's untrained value
        branch; read Q-values from the critics."""
        return self._policy

    # --- the update -------------------------------------------------------------------------
    @torch.no_grad()
    def targets(self, next_obs: torch.Tensor, rewards: Any, discounts: Any) -> torch.Tensor:
        """``y = r + d * min_i Qtarg_i(s', a')`` (``[B]``) at the smoothed target action."""
        a_next = self.mu(self.target_actor, next_obs)
        cfg = self.config
        if cfg.target_noise > 0:
            eps = torch.randn_like(a_next) * cfg.target_noise
            eps = eps.clamp(-cfg.target_noise_clip, cfg.target_noise_clip)
            a_next = (a_next + eps).clamp(-1.0, 1.0)
        q = torch.stack([self.q(c, next_obs, a_next) for c in self.target_critics]).amin(0)
        r = _tensor(rewards, self.device).float().reshape(-1)
        d = _tensor(discounts, self.device).float().reshape(-1)
        return r + d * q

    def _step(self, optimizer: torch.optim.Optimizer, params: list[nn.Parameter]) -> None:
        if self.grad_clip is not None:
            nn.utils.clip_grad_norm_(params, self.grad_clip)
        if not adam_step(optimizer):
            optimizer.step()

    def _backprop(self) -> TD3Backprop | None:
        """The closed-form update (:mod:`rlblocks.train.fast.td3_backprop`) when the
        networks are the plain fully connected ones and no hook is set, else None (the
        reason it declines is logged once per process)."""
        if "_fast" not in self.__dict__:
            chosen = TD3Backprop.choose(
                self.actor, self.target_actor, list(self.critics), list(self.target_critics)
            )
            if isinstance(chosen, str):
                name = self.config.ALGORITHM
                log_once(logger, f"{name} update", f"autograd: the closed form declined: {chosen}")
                self._fast: TD3Backprop | None = None
            else:
                chosen.paired = pairing_pays(
                    self.config.parallel_critics, chosen.critics, self.config.train_batch_size
                )
                self._fast = chosen
        return self._fast if self._fast is not None and self._fast.usable() else None

    def update(self, batch: Any, timestep: int) -> tuple[dict[str, float], np.ndarray]:
        """One critic step, and on every ``policy_delay``-th update an actor step and a
        Polyak step of the targets; on the closed form (:meth:`_backprop`) when it
        covers the networks, else through autograd (the same update up to rounding).

        Returns:
            ``(stats, priorities)``: ``qf_loss``, ``q_mean`` (the first critic),
            ``td_error_mean`` (mean over critics of ``|Q_i - y|``), ``actor_loss`` (actor
            steps only); priorities ``float64 [B]``, the per-row mean ``|Q_i - y|``.
        """
        dev = self.device
        obs = _tensor(batch.obs, dev)
        next_obs = _tensor(batch.next_obs, dev)
        actions = self.normalize(batch.actions)
        weights = _tensor(batch.weights, dev).float().reshape(-1)
        fast = self._backprop()
        cfg = self.config

        critic_params = self._params("_critic_params", self.critics)
        if fast is not None:
            clear_unwritten(critic_params, fast)
            r, d = _tensor(batch.rewards, dev), _tensor(batch.discounts, dev)
            y, qf_loss, q_rows = fast.critic_step(
                obs, actions, next_obs, r, d, weights, cfg.target_noise, cfg.target_noise_clip
            )
            y_host = _np_host(y)
        else:
            y = self.targets(next_obs, batch.rewards, batch.discounts)
            self.critic_optimizer.zero_grad(set_to_none=True)
            qs = [self.q(c, obs, actions) for c in self.critics]
            loss = sum((weights * (q - y) ** 2).mean() for q in qs)
            assert isinstance(loss, torch.Tensor)
            loss.backward(inputs=critic_params)
            qf_loss = float(loss.detach())
            q_rows = [_np_host(q.detach()) for q in qs]
            y_host = _np_host(y)
        self._step(self.critic_optimizer, critic_params)
        td = sum(np.abs(q - y_host) for q in q_rows) / len(q_rows)
        stats = {
            "qf_loss": qf_loss,
            "q_mean": float(np.mean(q_rows[0])),
            "td_error_mean": float(np.mean(td)),
        }
        self.updates += 1
        if self.updates % cfg.policy_delay == 0:
            actor_params = self._params("_actor_params", self.actor)
            if fast is not None:
                clear_unwritten(actor_params, fast)
                stats["actor_loss"] = fast.actor_grads(obs)
            else:
                self.actor_optimizer.zero_grad(set_to_none=True)
                actor_loss = -self.q(self.critics[0], obs, self.mu(self.actor, obs)).mean()
                actor_loss.backward(inputs=actor_params)
                stats["actor_loss"] = float(actor_loss.detach())
            self._step(self.actor_optimizer, actor_params)
            for polyak in self._polyak:
                polyak(self.tau)
        return stats, np.asarray(td, np.float64)

    def _params(self, key: str, module: nn.Module) -> list[nn.Parameter]:
        """``module``'s parameters, listed once (walking the modules on every update costs
        more than the small models' arithmetic)."""
        cached = self.__dict__.get(key)
        if cached is None:
            cached = self.__dict__[key] = list(module.parameters())
        return cached

    def sync_targets(self) -> None:
        """Nothing: TD3's targets move in :meth:`update`, with the delayed actor steps
        (``target_network_update_freq`` is 1, so the trainer calls this every step)."""

    def set_lr(self, lr: float) -> None:
        """Sets the actor's and the critics' learning rates (``lr_schedule``)."""
        set_learning_rate(lr, self.actor_optimizer, self.critic_optimizer)

    # --- state ------------------------------------------------------------------------------
    _STATE_KEYS = (
        "actor",
        "target_actor",
        "critics",
        "target_critics",
        "actor_optimizer",
        "critic_optimizer",
        "updates",
        "noise",
    )

    def state_dict(self) -> dict[str, Any]:
        """Every model, target and optimizer, the update count and the noise state."""
        return {
            "actor": self.actor.state_dict(),
            "target_actor": self.target_actor.state_dict(),
            "critics": self.critics.state_dict(),
            "target_critics": self.target_critics.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "updates": self.updates,
            "noise": self.noise.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`'s output exactly.

        Raises:
            ValueError: A missing entry (named), or models of other shapes.
        """
        name = self.config.ALGORITHM
        missing = [k for k in self._STATE_KEYS if k not in state]
        if missing:
            raise ValueError(
                f"{name} state: missing {missing}; a {name} learner state has "
                f"{list(self._STATE_KEYS)}"
            )
        try:
            self.actor.load_state_dict(state["actor"])
            self.target_actor.load_state_dict(state["target_actor"])
            self.critics.load_state_dict(state["critics"])
            self.target_critics.load_state_dict(state["target_critics"])
        except RuntimeError as err:
            raise ValueError(
                f"{name} state: the models do not match this learner's: {err}"
            ) from err
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.updates = int(state["updates"])
        self.noise.load_state_dict(state["noise"])
