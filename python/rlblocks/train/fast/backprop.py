"""Hand-written backpropagation of the PPO loss through the default fully connected model.

PPO's minibatches are small (CartPole: 256 rows through two tanh layers of 64), so a
training step is a few dozen tiny tensor ops, and autograd's bookkeeping (building the
graph, the engine, one Python module call per layer) costs more than the arithmetic.
:class:`FCBackprop` computes the same loss and the same gradients in closed form: one
forward pass that keeps the activations, then the backward pass as explicit matrix
products written straight into the parameters' ``.grad`` tensors.

It covers the catalog's :class:`~rlblocks.models.fcnet.FullyConnectedNetwork` (any
hidden sizes, ``tanh`` / ``relu`` / linear activations, shared or separate value layers,
``no_final_linear``, ``free_log_std``) with a :class:`~rlblocks.distributions.Categorical`
or :class:`~rlblocks.distributions.DiagGaussian` head, and every term of the PPO loss
(clipped surrogate, clipped or plain value loss, entropy bonus, KL penalty, advantage
standardisation). :meth:`FCBackprop.build` returns None for anything else (other models
or distributions, ``custom_loss``, frozen parameters, module hooks, and any config field
it does not know: see :data:`LOSS_FIELDS`) and the learner uses autograd. Tests compare
both paths' gradients and updates.

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks.train.trainer_config import PPOConfig
    >>> from rlblocks.train.policy import Policy
    >>> cfg = PPOConfig()
    >>> pol = Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), cfg)
    >>> FCBackprop.build(pol.model, pol.dist_class, cfg) is not None
    True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from rlblocks.distributions import Categorical, DiagGaussian
from rlblocks.distributions.base import _HALF_LOG_2PI, LOG_BOUND
from rlblocks.models.modelv2 import ModelV2
from rlblocks.train.fast.dense_layers import FCLayers, backward_stack, run_stack

if TYPE_CHECKING:
    from rlblocks.train.trainer_config import PPOConfig

#: The PPOConfig fields that reach the loss or its gradient, all implemented here (``model``
#: through the layer check, ``kl_coeff`` / ``kl_target`` through the coefficient the
#: learner passes in).
LOSS_FIELDS = frozenset(
    {
        "model",
        "clip_param",
        "vf_clip_param",
        "vf_loss_coeff",
        "entropy_coeff",
        "kl_coeff",
        "kl_target",
        "normalize_advantages",
    }
)
#: The fields that do not: the environment, sampling, advantages (computed before the
#: loss), the optimizer, bookkeeping. A field in neither set (a new loss term, say) makes
#: :meth:`FCBackprop.build` decline, so autograd runs until it is implemented here.
OUTSIDE_THE_LOSS = frozenset(
    {
        "env",
        "env_config",
        "num_envs",
        "vector_mode",
        "preprocessor_pref",
        "train_batch_size",
        "rollout_fragment_length",
        "sgd_minibatch_size",
        "num_sgd_iter",
        "lr",
        "lr_schedule",
        "gamma",
        "lambda_",
        "grad_clip",
        "observation_filter",
        "clip_actions",
        "seed",
        "device",
        "num_threads",
        "flush_denormals",
        "checkpoint_freq",
        "keep_checkpoints",
        "tensorboard",
        "metrics_smoothing_episodes",
        "framework",
        "fast_paths",
        "rllib",
        "multiagent",  # which agents a policy serves; its loss is the single-agent one
        # the learner's epoch loop (target_kl), the rollout's rewards, evaluation
        "target_kl",
        "normalize_reward",
        "clip_reward",
        "evaluation_interval",
        "evaluation_episodes",
    }
)

__all__ = ["FCBackprop"]


class FCBackprop:
    """The PPO loss and its gradients for a fully connected model, without autograd.

    Build it with :meth:`build`; :meth:`step` computes one minibatch's loss, writes every
    parameter's ``.grad`` and returns the loss (and with ``record`` the statistics the
    learner reports). The caller clips the gradients and steps the optimizer.
    """

    def __init__(
        self, layers: FCLayers, gaussian: bool, action_start: int, config: PPOConfig | None
    ) -> None:
        self.layers = layers
        self.gaussian = gaussian
        self.action_start = action_start
        self.config = config
        self.free_log_std = layers.free_log_std
        self.params = list(layers.model.parameters())
        # (logp of the actions, d(logp)/d(out), the entropy and KL terms' gradient (None
        # when neither is in the loss), entropy, KL): means over the rows, or weighted sums
        self._dist_terms = self._gaussian if gaussian else self._categorical

    @classmethod
    def build(
        cls, model: ModelV2, dist_class: Callable[..., Any], config: PPOConfig
    ) -> FCBackprop | None:
        """The fast path for ``model`` with ``dist_class``, or None when the model, the
        distribution or a config field is not covered (the learner then uses autograd)."""
        unknown = {f.name for f in dataclasses.fields(config)} - LOSS_FIELDS - OUTSIDE_THE_LOSS
        if unknown:
            return None
        return cls.for_model(model, dist_class, config)

    @classmethod
    def for_model(
        cls, model: ModelV2, dist_class: Callable[..., Any], config: PPOConfig | None = None
    ) -> FCBackprop | None:
        """The closed form for ``model`` with ``dist_class`` (no config check: for
        :meth:`step_rllib`, whose coefficients are arguments), or None when the model or
        the distribution is not covered."""
        layers = FCLayers.from_model(model)
        if layers is None:
            return None
        if type(model).custom_loss is not ModelV2.custom_loss or "custom_loss" in vars(model):
            return None
        if any(not p.requires_grad for p in model.parameters()):
            return None
        try:
            probe = dist_class(torch.zeros(1, int(model.num_outputs or 0)), model)
        except (ValueError, TypeError):
            return None
        if type(probe) is Categorical and probe.temperature == 1.0 and layers.free_log_std is None:
            return cls(layers, False, probe._start, config)
        if type(probe) is DiagGaussian:
            return cls(layers, True, 0, config)
        return None

    def usable(self) -> bool:
        """False while the fast path would differ from autograd (a hook is set, a layer was
        replaced or parametrized): the learner then uses autograd."""
        return self.layers.matches_model(training=True)

    # --- one minibatch ----------------------------------------------------------------------
    def step(
        self, data: dict[str, Any], kl_coeff: float, normalize_advantages: bool, record: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Loss of one minibatch; every parameter's ``.grad`` is overwritten with its gradient.

        Returns:
            ``(total_loss, stats)``; ``stats`` (with ``record``) is ``[total, policy_loss,
            vf_loss, entropy, kl, approx_kl, clipfrac]``.
        """
        cfg = self.config
        assert cfg is not None, "step() needs the PPOConfig (build the path with build())"
        for p in self.params:  # (autograd's zero_grad(set_to_none=True) may have freed them)
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        with torch.no_grad():
            fwd = self._forward(data["obs"])
            out, values, n = fwd.out, fwd.values, fwd.n

            # loss terms and d(loss)/d(out) [n, k], d(loss)/d(log_std) for free_log_std
            adv = data["advantages"]
            if normalize_advantages:
                mean = adv.mean()
                adv = (adv - mean) / (torch.sqrt(((adv - mean) ** 2).mean()) + 1e-8)
            logp, d_out, d_extra, entropy, kl = self._dist_terms(
                out, data, cfg.entropy_coeff, kl_coeff, None, record
            )
            log_ratio = logp - data["logp"]
            ratio = torch.exp(log_ratio)
            lo, hi = 1.0 - cfg.clip_param, 1.0 + cfg.clip_param
            clipped_ratio = ratio.clamp(lo, hi)
            s1, s2 = adv * ratio, adv * clipped_ratio
            policy_loss = -torch.minimum(s1, s2).mean()
            # d min(s1, s2)/d ratio is adv where s1 <= s2: inside the clip range s1 == s2 and
            # autograd's two halves (minimum splits ties, clamp passes) add up to adv;
            # outside it only the unclipped side carries a gradient.
            d_logp = adv * (s1 <= s2) * ratio * (-1.0 / n)
            d_out_total = self._combine(d_out, d_logp, d_extra)

            targets = data["value_targets"]
            err = values - targets
            vf_err = err * err
            d_values = 2.0 * err
            if cfg.vf_clip_param is not None:
                old = data["vf_preds"]
                delta = values - old
                c = cfg.vf_clip_param
                err_c = old + delta.clamp(-c, c) - targets
                vf_err_c = err_c * err_c
                w_plain = (vf_err > vf_err_c).float() + 0.5 * (vf_err == vf_err_c).float()
                in_clip = ((delta >= -c) & (delta <= c)).float()
                d_values = w_plain * d_values + (1.0 - w_plain) * in_clip * 2.0 * err_c
                vf_err = torch.maximum(vf_err, vf_err_c)
            vf_loss = vf_err.mean()
            d_values = d_values * (cfg.vf_loss_coeff / n)

            total = policy_loss + cfg.vf_loss_coeff * vf_loss
            if cfg.entropy_coeff != 0.0:
                total = total - cfg.entropy_coeff * entropy
            if kl_coeff > 0.0:
                total = total + kl_coeff * kl

            self._backward(fwd, d_out_total, d_values)
            if not record:
                return total, None
            approx_kl = ((ratio - 1.0) - log_ratio).mean()
            clipfrac = ((ratio - 1.0).abs() > cfg.clip_param).float().mean()
            stats = torch.stack([total, policy_loss, vf_loss, entropy, kl, approx_kl, clipfrac])
            return total, stats

    def step_rllib(
        self,
        data: dict[str, Any],
        weights: torch.Tensor | None,
        *,
        clip_param: float,
        vf_clip_param: float,
        vf_loss_coeff: float,
        entropy_coeff: float,
        kl_coeff: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """RLlib's new-stack PPO loss (``PPOTorchLearner.compute_loss_for_module``) of one
        minibatch; every parameter's ``.grad`` is overwritten with its gradient.

        Its terms differ from :meth:`step`'s: the squared value error is clamped at
        ``vf_clip_param`` (not the value's change), every mean is over the rows of
        ``weights`` (RLlib's loss mask: ``mask / mask.sum()``; None: all rows), and the KL
        term is on when ``kl_coeff > 0`` (RLlib's ``use_kl_loss``).

        Args:
            data: ``obs``, ``actions``, ``logp`` and ``dist_inputs`` (of the sampling
                policy), ``advantages``, ``value_targets``.

        Returns:
            ``(total_loss, stats)``: ``policy_loss``, ``vf_loss``, ``vf_loss_unclipped``,
            ``entropy``, ``kl`` and the ``values`` of every row (the terms RLlib logs).
        """
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        with torch.no_grad():
            fwd = self._forward(data["obs"])
            out, values = fwd.out, fwd.values
            logp, d_out, d_extra, entropy, kl = self._dist_terms(
                out, data, entropy_coeff, kl_coeff, weights, True
            )
            w = weights if weights is not None else out.new_full((fwd.n,), 1.0 / fwd.n)
            adv = data["advantages"]
            ratio = torch.exp(logp - data["logp"])
            s1 = adv * ratio
            s2 = adv * ratio.clamp(1.0 - clip_param, 1.0 + clip_param)
            policy_loss = -(torch.minimum(s1, s2) * w).sum()
            d_logp = adv * (s1 <= s2) * ratio * -w  # as in step(): ties give adv * ratio
            d_out_total = self._combine(d_out, d_logp, d_extra)
            err = values - data["value_targets"]
            vf = err * err
            # clamp(vf, 0, c) passes the gradient where 0 <= vf <= c (vf >= 0 always)
            d_values = 2.0 * err * (vf <= vf_clip_param) * (vf_loss_coeff * w)
            vf_loss = (vf.clamp(0.0, vf_clip_param) * w).sum()
            total = policy_loss + vf_loss_coeff * vf_loss - entropy_coeff * entropy
            if kl_coeff > 0.0:
                total = total + kl_coeff * kl
            self._backward(fwd, d_out_total, d_values)
            stats = {
                "policy_loss": policy_loss,
                "vf_loss": vf_loss,
                "vf_loss_unclipped": (vf * w).sum(),
                "entropy": entropy,
                "kl": kl if kl_coeff > 0.0 else torch.zeros(()),
                "values": values,
            }
            return total, stats

    # --- shared pieces --------------------------------------------------------------------
    def _forward(self, obs: torch.Tensor) -> _Forward:
        """The forward pass, keeping every layer's output for the backward pass."""
        layers = self.layers
        x = layers.flat_input(obs)
        acts = run_stack(layers.trunk, x)
        features = acts[-1]
        out = layers.logits.forward(features) if layers.logits is not None else features
        vacts = run_stack(layers.value_trunk, x) if layers.value_trunk is not None else []
        vf_in = vacts[-1] if vacts else features
        values = layers.value_head.forward(vf_in).reshape(-1)
        return _Forward(x.shape[0], acts, features, out, vacts, vf_in, values)

    def _backward(self, fwd: _Forward, d_out: torch.Tensor, d_values: torch.Tensor) -> None:
        """Writes every parameter's gradient from d(loss)/d(distribution inputs) and
        d(loss)/d(values)."""
        layers = self.layers
        d_features = (
            layers.logits.backward(fwd.features, fwd.out, d_out, need_dx=True)
            if layers.logits is not None
            else d_out
        )
        d_vf_in = layers.value_head.backward(
            fwd.vf_in, fwd.values.unsqueeze(1), d_values.unsqueeze(1), need_dx=True
        )
        assert d_features is not None and d_vf_in is not None
        if layers.value_trunk is None:
            d_features = d_features + d_vf_in
        else:
            backward_stack(layers.value_trunk, fwd.vacts, d_vf_in)
        backward_stack(layers.trunk, fwd.acts, d_features)

    def _combine(
        self, d_logp_d_out: torch.Tensor, d_logp: torch.Tensor, d_extra: torch.Tensor | None
    ) -> torch.Tensor:
        """d(loss)/d(distribution inputs): ``d_logp * d(logp)/d(inputs)`` plus the entropy
        and KL terms. With ``free_log_std`` the log-std columns' sum goes to that parameter's
        gradient and the model output's gradient (the means) is returned."""
        d_out = d_logp_d_out * d_logp.unsqueeze(1)
        if d_extra is not None:
            d_out = d_out + d_extra
        if self.free_log_std is None:
            return d_out
        k = self.free_log_std.shape[0]
        assert self.free_log_std.grad is not None
        torch.sum(d_out[:, k:], 0, out=self.free_log_std.grad)
        return d_out[:, :k]

    def _categorical(
        self,
        logits: torch.Tensor,
        data: dict[str, Any],
        entropy_coeff: float,
        kl_coeff: float,
        weights: torch.Tensor | None,
        record: bool,
    ) -> tuple[Any, ...]:
        """The distribution's terms (``_dist_terms``) for a Categorical."""
        n = logits.shape[0]
        log_probs = torch.log_softmax(logits, 1)
        probs = torch.exp(log_probs)
        actions = data["actions"].reshape(-1, 1)
        if self.action_start:
            actions = actions - self.action_start
        logp = log_probs.gather(1, actions).squeeze(1)
        d_logp_d_logits = torch.zeros_like(logits).scatter_(1, actions, 1.0).sub_(probs)
        zero = logits.new_zeros(())
        entropy, kl = zero, zero
        d_extra = None
        if entropy_coeff != 0.0 or record:
            row_entropy = -(probs * log_probs).sum(1)
            entropy = _mean(row_entropy, weights)
            if entropy_coeff != 0.0:  # d(-c * mean H)/d(logits) = c/n * p (log p + H)
                d_extra = (
                    probs
                    * (log_probs + row_entropy.unsqueeze(1))
                    * _scale(entropy_coeff, weights, n)
                )
        if kl_coeff > 0.0 or record:
            old_log_probs = torch.log_softmax(data["dist_inputs"], 1)
            old_probs = torch.exp(old_log_probs)
            kl = _mean((old_probs * (old_log_probs - log_probs)).sum(1), weights)
            if kl_coeff > 0.0:  # d KL(old || new)/d(new logits) = p_new - p_old
                d_kl = (probs - old_probs) * _scale(kl_coeff, weights, n)
                d_extra = d_kl if d_extra is None else d_extra + d_kl
        return logp, d_logp_d_logits, d_extra, entropy, kl

    def _gaussian(
        self,
        out: torch.Tensor,
        data: dict[str, Any],
        entropy_coeff: float,
        kl_coeff: float,
        weights: torch.Tensor | None,
        record: bool,
    ) -> tuple[Any, ...]:
        """The distribution's terms (``_dist_terms``) for a diagonal Gaussian (inputs: means,
        then log-stds)."""
        n = out.shape[0]
        if self.free_log_std is not None:
            k = out.shape[1]
            mean = out
            raw_log_std = self.free_log_std.detach().unsqueeze(0).expand(n, -1)
        else:
            k = out.shape[1] // 2
            mean, raw_log_std = out[:, :k], out[:, k:]
        log_std = raw_log_std.clamp(-LOG_BOUND, LOG_BOUND)
        in_bounds = ((raw_log_std >= -LOG_BOUND) & (raw_log_std <= LOG_BOUND)).float()
        std = torch.exp(log_std)
        actions = data["actions"].reshape(n, k).float()
        z = (actions - mean) / std
        logp = (-0.5 * z * z - log_std - _HALF_LOG_2PI).sum(1)
        # d logp / d mean = z / std, d logp / d log_std = z^2 - 1
        d_mean = z / std
        d_log_std = (z * z - 1.0) * in_bounds
        d_extra_mean: torch.Tensor | None = None
        d_extra_log_std: torch.Tensor | None = None
        zero = out.new_zeros(())
        entropy, kl = zero, zero
        if entropy_coeff != 0.0 or record:
            entropy = _mean((log_std + (0.5 + _HALF_LOG_2PI)).sum(1), weights)
            if entropy_coeff != 0.0:
                d_extra_log_std = in_bounds * _scale(-entropy_coeff, weights, n)
        if kl_coeff > 0.0 or record:
            old_mean, old_raw = data["dist_inputs"].chunk(2, dim=1)
            old_log_std = old_raw.clamp(-LOG_BOUND, LOG_BOUND)
            var_ratio = torch.exp(2.0 * (old_log_std - log_std))
            t = ((old_mean - mean) / std) ** 2
            kl = _mean((0.5 * (var_ratio + t - 1.0) - (old_log_std - log_std)).sum(1), weights)
            if kl_coeff > 0.0:
                scale = _scale(kl_coeff, weights, n)
                d_kl_mean = (mean - old_mean) / (std * std) * scale
                d_kl_log_std = (1.0 - var_ratio - t) * in_bounds * scale
                d_extra_mean = d_kl_mean
                d_extra_log_std = (
                    d_kl_log_std if d_extra_log_std is None else d_extra_log_std + d_kl_log_std
                )
        d_logp_d_out = torch.cat([d_mean, d_log_std], 1)
        d_extra = None
        if d_extra_mean is not None or d_extra_log_std is not None:
            em = d_extra_mean if d_extra_mean is not None else torch.zeros_like(mean)
            el = (
                d_extra_log_std.expand(n, k)
                if d_extra_log_std is not None
                else torch.zeros_like(mean)
            )
            d_extra = torch.cat([em, el], 1)
        return logp, d_logp_d_out, d_extra, entropy, kl


@dataclasses.dataclass
class _Forward:
    """One forward pass: every layer's output, kept for the backward pass."""

    n: int
    acts: list[torch.Tensor]
    features: torch.Tensor
    out: torch.Tensor
    vacts: list[torch.Tensor]
    vf_in: torch.Tensor
    values: torch.Tensor


def _mean(rows: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """The mean over the rows, or their ``weights``-weighted sum."""
    return rows.mean() if weights is None else (rows * weights).sum()


def _scale(coeff: float, weights: torch.Tensor | None, n: int) -> Any:
    """``coeff`` times d(mean)/d(row): ``coeff / n``, or ``coeff * weights`` as a column."""
    return coeff / n if weights is None else (weights * coeff).unsqueeze(1)
