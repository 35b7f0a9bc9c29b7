"""Hand-written backpropagation of the PPO loss through the default fully connected model.

PPO's minibatches are small (CartPole: 256 rows through two tanh layers of 64), so a
training step is a few dozen tiny tensor ops, and autograd's bookkeeping (building the
graph, the engine, one Python module call per layer) costs more than the arithmetic.
:class:`FCBackprop` computes the same loss and the same gradients in closed form: one
forward pass that keeps the activations, then the backward pass as explicit matrix
products written straight into the parameters' ``.grad`` tensors.

It covers the catalog's :class:`~rlblocks.models.fcnet.FullyConnectedNetwork` (any
hidden sizes, ``tanh`` / ``relu`` / linear activations, shared or separate value layers,
``no_final_linear``, ``free_log_std``), alone or inside an
:class:`~rlblocks.models.action_mask.ActionMaskModel` (masked logits get no gradient), with
every head of :mod:`rlblocks.train.fast.head_grads`: Categorical, MultiCategorical, their
masked twins, DiagGaussian, and Tuple / Dict multi-action heads made of those; and every
term of the PPO loss (clipped surrogate, clipped or plain value loss, entropy bonus, KL
penalty, advantage standardisation). :meth:`FCBackprop.choose` says why not for anything
else (other models or distributions, ``custom_loss``, frozen parameters, and any config
field it does not know: see :data:`LOSS_FIELDS`), :meth:`FCBackprop.build` then returns
None, and the learner uses autograd and logs the reason once (as it uses autograd while a
module hook is set). Tests compare
both paths' gradients and updates. RLlib's learner (:meth:`for_model` with
``every_head=False``) keeps to the Categorical and DiagGaussian heads of a bare network.

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

import numpy as np
import torch

from rlblocks.distributions import Categorical, DiagGaussian
from rlblocks.distributions.base import FLOAT_MIN
from rlblocks.masks import MaskLayout, action_mask_fill
from rlblocks.models.action_mask import ActionMaskModel
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.models.modelv2 import ModelV2
from rlblocks.train.fast.dense_layers import BypassCheck, FCLayers, backward_stack, run_stack
from rlblocks.train.fast.head_grads import GaussianGrads, HeadGrads, LogitsGrads, head_grads
from rlblocks.train.fast.numpy_head_grads import NumpyHead, clip, mask_fill, numpy_head_grads
from rlblocks.train.fast.numpy_pass import NumpyForward, NumpyPass

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
        "num_env_workers",
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
        "observation_clip",
        "evaluation_interval",
        "evaluation_episodes",
        # self-play: who plays the other seats, and the evaluation games
        "selfplay_snapshot_every",
        "selfplay_pool_size",
        "selfplay_opponent_prob",
        "selfplay_random_prob",
        "selfplay_random_opening",
        "selfplay_eval_interval",
        "selfplay_eval_games",
        "selfplay_eval_exact",
    }
)

__all__ = ["FCBackprop"]

_FLOAT_MIN_32 = np.float32(FLOAT_MIN)


def _array(x: Any) -> np.ndarray:
    """A column of the minibatch as a numpy array (a CPU tensor: a view)."""
    return x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


class FCBackprop:
    """The PPO loss and its gradients for a fully connected model, without autograd.

    Build it with :meth:`build`; :meth:`step` computes one minibatch's loss, writes every
    parameter's ``.grad`` and returns the loss (and with ``record`` the statistics the
    learner reports). The caller clips the gradients and steps the optimizer.
    """

    def __init__(
        self,
        layers: FCLayers,
        head: HeadGrads,
        config: PPOConfig | None,
        mask_model: ActionMaskModel | None = None,
    ) -> None:
        self.layers = layers
        self.head = head
        self.config = config
        self.free_log_std = layers.free_log_std
        self.params = list(layers.model.parameters())
        self.mask_model = mask_model
        self._mask: tuple[slice, slice, MaskLayout] | None = None
        self._wrapper: BypassCheck | None = None
        # a CPU float32 model: the layers' products run in numpy (NumpyPass), and the
        # head's terms and the loss too (numpy_head_grads; a free_log_std of another dtype
        # keeps them in torch)
        self._numpy = NumpyPass.for_layers(layers)
        self._numpy_head: NumpyHead | None = None
        fls = self.free_log_std
        if fls is None or (fls.device.type == "cpu" and fls.dtype == torch.float32):
            self._numpy_head = numpy_head_grads(head)
        if mask_model is not None:
            self._mask = (mask_model.mask_columns, mask_model.obs_columns, mask_model.layout)
            self._wrapper = BypassCheck([mask_model], [])

    @classmethod
    def build(
        cls, model: ModelV2, dist_class: Callable[..., Any], config: PPOConfig
    ) -> FCBackprop | None:
        """The fast path for ``model`` with ``dist_class``, or None when the model, the
        distribution or a config field is not covered (the learner then uses autograd)."""
        chosen = cls.choose(model, dist_class, config)
        return None if isinstance(chosen, str) else chosen

    @classmethod
    def choose(
        cls, model: ModelV2, dist_class: Callable[..., Any], config: PPOConfig
    ) -> FCBackprop | str:
        """:meth:`build`, or why not (one line: the config field, model or head)."""
        unknown = {f.name for f in dataclasses.fields(config)} - LOSS_FIELDS - OUTSIDE_THE_LOSS
        if unknown:
            return f"config fields the closed form does not implement: {sorted(unknown)}"
        return cls.for_model(model, dist_class, config, every_head=True)

    @classmethod
    def for_model(
        cls,
        model: ModelV2,
        dist_class: Callable[..., Any],
        config: PPOConfig | None = None,
        every_head: bool = False,
    ) -> FCBackprop | str:
        """The closed form for ``model`` with ``dist_class`` (no config check: for
        :meth:`step_rllib`, whose coefficients are arguments), or why not.
        ``every_head``: every head of :func:`~rlblocks.train.fast.head_grads.head_grads`
        and action-mask models; else a bare network with a Categorical or DiagGaussian."""
        mask_model = None
        inner = model
        if every_head and type(model) is ActionMaskModel and not model.full_obs:
            mask_model, inner = model, model.inner
            if "custom_loss" in vars(model):
                return "a custom_loss"
        layers = FCLayers.from_model(inner, complex_input=every_head)
        if layers is None:
            if type(inner) is FullyConnectedNetwork:
                return "a FullyConnectedNetwork layer it does not cover (activation, value head)"
            return f"a {type(inner).__name__} model"
        if type(inner).custom_loss is not ModelV2.custom_loss or "custom_loss" in vars(inner):
            return "a custom_loss"
        if any(not p.requires_grad for p in model.parameters()):
            return "frozen parameters"
        try:
            probe = dist_class(torch.zeros(1, int(model.num_outputs or 0)), model)
        except (ValueError, TypeError) as err:
            return f"a head that does not build on zeros ({err})"
        head = head_grads(probe, layers.free_log_std, mask_model is not None)
        if isinstance(head, str):
            return head
        if not every_head and not (
            (type(probe) is Categorical and isinstance(head, LogitsGrads))
            or (type(probe) is DiagGaussian and isinstance(head, GaussianGrads))
        ):
            return f"{type(probe).__name__} head"
        return cls(layers, head, config, mask_model)

    def usable(self) -> bool:
        """False while the fast path would differ from autograd (a hook is set, a layer was
        replaced or parametrized): the learner then uses autograd."""
        if self._wrapper is not None and not self._wrapper.intact(training=True):
            return False
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
        if self._numpy is not None and self._numpy_head is not None:
            return self._step_numpy(data, kl_coeff, normalize_advantages, record)
        with torch.no_grad():
            fwd = self._forward(data["obs"])
            out, values, n = fwd.masked_out, fwd.values, fwd.n

            # loss terms and d(loss)/d(out) [n, k], d(loss)/d(log_std) for free_log_std
            logp, d_out, d_extra, entropy, kl = self.head.terms(
                out,
                data["actions"],
                data["dist_inputs"],
                cfg.entropy_coeff,
                kl_coeff,
                None,
                record,
            )
            adv = data["advantages"]
            if normalize_advantages:
                mean = adv.mean()
                adv = (adv - mean) / (torch.sqrt(((adv - mean) ** 2).mean()) + 1e-8)
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

    def _step_numpy(
        self, data: dict[str, Any], kl_coeff: float, normalize_advantages: bool, record: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`step` for a CPU float32 model: the layers (:class:`NumpyPass`), the head's
        terms (:mod:`~rlblocks.train.fast.numpy_head_grads`), the surrogate and value terms
        and their gradients, all the same arithmetic in float32 numpy, whose per-op
        dispatch costs a fraction of torch's on a minibatch's vectors."""
        cfg, npass, head = self.config, self._numpy, self._numpy_head
        assert cfg is not None and npass is not None and head is not None
        x = _array(data["obs"])
        x = x.reshape(x.shape[0], -1)
        if x.dtype != np.float32:
            x = x.astype(np.float32)
        fill = None
        if self._mask is not None:
            mask_cols, obs_cols, layout = self._mask
            fill = mask_fill(x[:, mask_cols], layout)
            x = x[:, obs_cols]
        n = x.shape[0]
        fwd = npass.forward(x)
        out = fwd.out if fill is None else np.where(fill, _FLOAT_MIN_32, fwd.out)
        logp, d_out, d_extra, entropy, kl = head.terms(
            out, data["actions"], _array(data["dist_inputs"]), cfg.entropy_coeff, kl_coeff, record
        )
        adv = _array(data["advantages"])
        if normalize_advantages:
            mean = adv.sum() / n  # (x.sum() / n: a fifth of x.mean()'s cost)
            centred = adv - mean
            adv = centred / (np.sqrt(np.vdot(centred, centred) / n) + 1e-8)
        log_ratio = logp - _array(data["logp"])
        ratio = np.exp(log_ratio)
        s1 = adv * ratio
        s2 = adv * clip(ratio, 1.0 - cfg.clip_param, 1.0 + cfg.clip_param)
        policy_loss = -np.minimum(s1, s2).sum() / n
        d_logp = adv * (s1 <= s2) * ratio * np.float32(-1.0 / n)  # see step()
        d_out_total = d_out * d_logp[:, None]
        if d_extra is not None:
            d_out_total += d_extra
        if self.free_log_std is not None:  # its gradient: the log-std columns' sum
            k = self.free_log_std.shape[0]
            assert self.free_log_std.grad is not None
            self.free_log_std.grad.numpy()[...] = d_out_total[:, k:].sum(0)
            d_out_total = d_out_total[:, :k]
        if fill is not None:  # masked logits are constants: no gradient
            d_out_total[fill] = 0.0

        values, targets = fwd.values, _array(data["value_targets"])
        err = values - targets
        vf_err = err * err
        d_values = 2.0 * err
        if cfg.vf_clip_param is not None:
            old = _array(data["vf_preds"])
            delta = values - old
            c = cfg.vf_clip_param
            err_c = old + clip(delta, -c, c) - targets
            vf_err_c = err_c * err_c
            w_plain = (vf_err > vf_err_c).astype(np.float32)
            w_plain += np.float32(0.5) * (vf_err == vf_err_c)
            in_clip = ((delta >= -c) & (delta <= c)).astype(np.float32)
            d_values = w_plain * d_values + (1.0 - w_plain) * in_clip * 2.0 * err_c
            vf_err = np.maximum(vf_err, vf_err_c)
        vf_loss = vf_err.sum() / n
        d_values = (d_values * (cfg.vf_loss_coeff / n)).astype(np.float32, copy=False)

        total = policy_loss + np.float32(cfg.vf_loss_coeff) * vf_loss
        if cfg.entropy_coeff != 0.0:
            total = total - np.float32(cfg.entropy_coeff) * entropy
        if kl_coeff > 0.0:
            total = total + np.float32(kl_coeff) * kl
        npass.backward(fwd, d_out_total, d_values)
        total_t = torch.from_numpy(np.asarray(total, np.float32))  # (torch.tensor: ~30x slower)
        if not record:
            return total_t, None
        approx_kl = ((ratio - 1.0) - log_ratio).sum() / n
        clipfrac = np.count_nonzero(np.abs(ratio - 1.0) > cfg.clip_param) / n
        parts = [total, policy_loss, vf_loss, entropy, kl, approx_kl, clipfrac]
        return total_t, torch.from_numpy(np.array(parts, np.float32))

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
            out, values = fwd.masked_out, fwd.values
            logp, d_out, d_extra, entropy, kl = self.head.terms(
                out, data["actions"], data["dist_inputs"], entropy_coeff, kl_coeff, weights, True
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
        """The forward pass, keeping every layer's output for the backward pass (an
        action-mask model's masked logits at ``FLOAT_MIN``)."""
        layers = self.layers
        x = layers.flat_input(obs)
        fill = None
        if self._mask is not None:
            mask_cols, obs_cols, layout = self._mask
            fill = action_mask_fill(x[:, mask_cols], layout)
            x = x[:, obs_cols]
        if self._numpy is not None:
            npf = self._numpy.forward(x.numpy())
            out = torch.from_numpy(npf.out)
            values = torch.from_numpy(npf.values)
            masked_out = out if fill is None else out.masked_fill(fill, FLOAT_MIN)
            return _Forward(x.shape[0], [], out, out, [], out, values, masked_out, fill, npf)
        acts = run_stack(layers.trunk, x)
        features = acts[-1]
        out = layers.logits.forward(features) if layers.logits is not None else features
        vacts = run_stack(layers.value_trunk, x) if layers.value_trunk is not None else []
        vf_in = vacts[-1] if vacts else features
        values = layers.value_head.forward(vf_in).reshape(-1)
        masked_out = out if fill is None else out.masked_fill(fill, FLOAT_MIN)
        return _Forward(x.shape[0], acts, features, out, vacts, vf_in, values, masked_out, fill)

    def _backward(self, fwd: _Forward, d_out: torch.Tensor, d_values: torch.Tensor) -> None:
        """Writes every parameter's gradient from d(loss)/d(distribution inputs) and
        d(loss)/d(values)."""
        layers = self.layers
        if fwd.fill is not None:  # masked logits are constants: no gradient
            d_out = d_out.masked_fill(fwd.fill, 0.0)
        if fwd.numpy is not None:
            assert self._numpy is not None
            self._numpy.backward(fwd.numpy, d_out.numpy(), d_values.numpy())
            return
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
    masked_out: torch.Tensor  # the distribution inputs: out, masked logits at FLOAT_MIN
    fill: torch.Tensor | None  # bool [B, K]: the masked logits, without a mask: None
    numpy: NumpyForward | None = None  # the numpy pass's activations (the lists above empty)
