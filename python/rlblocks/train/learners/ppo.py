"""The PPO update: GAE, minibatches (rows or whole sequences), the clipped loss, SGD.

Loss per minibatch (masked means over real rows; padded sequence steps have weight 0)::

    ratio   = exp(logp_new - logp_old)
    policy  = -mean(min(A * ratio, A * clip(ratio, 1 - clip_param, 1 + clip_param)))
    value   = mean(max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2))   # c = vf_clip_param
    total   = policy + vf_loss_coeff * value - entropy_coeff * entropy + kl_coeff * KL(old||new)

then ``model.custom_loss(total, minibatch)``, backward, gradient-norm clipping, an Adam step.
After the epochs the KL coefficient adapts to ``kl_target`` (RLlib's rule).

Examples:
    >>> import numpy as np
    >>> adv, ret = compute_gae(np.ones((3, 1), np.float32), np.zeros((3, 1), np.float32),
    ...                        np.array([[False], [False], [True]]), np.zeros(1, np.float32),
    ...                        gamma=0.5, lambda_=1.0)
    >>> adv[:, 0].tolist()
    [1.75, 1.5, 1.0]
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import torch

from rlblocks.nest import tree_map
from rlblocks.train.fast import (
    FCBackprop,
    FlatParameters,
    adam_step,
    clip_grad_norm,
    make_adam,
    set_learning_rate,
)
from rlblocks.train.fast.choice import log_once
from rlblocks.train.policy import Policy
from rlblocks.train.runner import SampleBatch
from rlblocks.train.trainer_config import PPOConfig

__all__ = ["PPOLearner", "compute_gae", "explained_variance"]

logger = logging.getLogger(__name__)


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    dones: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    lambda_: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation over time-major ``[T, N]`` arrays.

    Every ``done`` is treated as terminal (truncations are bootstrapped in the rewards by
    the rollout). Vectorised over the N envs; one pass backwards over T.

    Returns:
        ``(advantages, value_targets)``, both ``[T, N]`` float32.
    """
    t_steps = rewards.shape[0]
    adv = np.zeros_like(rewards, dtype=np.float32)
    next_adv = np.zeros(rewards.shape[1:], np.float32)
    next_value = np.asarray(last_values, np.float32)
    for t in range(t_steps - 1, -1, -1):
        nonterminal = 1.0 - dones[t].astype(np.float32)
        delta = rewards[t] + gamma * next_value * nonterminal - values[t]
        next_adv = delta + gamma * lambda_ * nonterminal * next_adv
        adv[t] = next_adv
        next_value = values[t]
    return adv, (adv + values).astype(np.float32)


def explained_variance(targets: np.ndarray, predictions: np.ndarray) -> float:
    """``1 - Var(targets - predictions) / Var(targets)`` (nan when the targets are constant).

    Examples:
        >>> explained_variance(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0]))
        1.0
    """
    var = float(np.var(targets))
    if var == 0.0:
        return float("nan")
    return float(1.0 - np.var(targets - predictions) / var)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return x.mean()
    return (x * mask).sum() / mask.sum().clamp_min(1.0)


_STAT_NAMES = ("total_loss", "policy_loss", "vf_loss", "entropy", "kl", "approx_kl", "clipfrac")


class PPOLearner:
    """Owns the optimizer and the adaptive KL coefficient; :meth:`update` runs one iteration.

    Args:
        policy: The policy whose model is trained.
        config: The PPO config.
    """

    def __init__(self, policy: Policy, config: PPOConfig) -> None:
        self.policy = policy
        self.config = config
        self._params = [p for p in policy.model.parameters() if p.requires_grad]
        self._flat: FlatParameters | None = None
        self._backprop: FCBackprop | None = None
        if config.fast_paths:
            try:  # one buffer: Adam and the gradient norm run as one kernel each
                self._flat = FlatParameters(self._params)
            except ValueError:  # mixed devices or dtypes
                pass
            chosen = FCBackprop.choose(policy.model, policy.dist_class, config)
            if isinstance(chosen, str):  # autograd, and why (once per process and reason)
                log_once(logger, "PPO update", f"autograd: the closed form declined {chosen}")
            else:
                self._backprop = chosen
            self.optimizer = make_adam(
                self._params if self._flat is None else [self._flat.param], config.lr
            )
        else:
            self.optimizer = torch.optim.Adam(self._params, lr=config.lr, eps=1e-5)
        self.kl_coeff = float(config.kl_coeff)
        self._fast: FCBackprop | None = None  # the fast path, when usable this update

    def set_lr(self, lr: float) -> None:
        """Sets the learning rate of every parameter group."""
        set_learning_rate(lr, self.optimizer)

    # --- batch layout ---------------------------------------------------------------------
    def _columns(self, batch: SampleBatch, adv: np.ndarray, targets: np.ndarray) -> dict[str, Any]:
        """Flat env-major rows (row ``e * T + t``), as tensors on the policy's device."""

        def flat(x: np.ndarray) -> torch.Tensor:
            x = np.swapaxes(x, 0, 1)  # [N, T, ...]
            x = np.ascontiguousarray(x.reshape(-1, *x.shape[2:]))
            return torch.as_tensor(x, device=self.policy.device)

        cols: dict[str, Any] = {
            "obs": flat(batch.obs),
            "actions": tree_map(flat, batch.actions),
            "logp": flat(batch.logp),
            "vf_preds": flat(batch.vf_preds),
            "dist_inputs": flat(batch.dist_inputs),
            "advantages": flat(adv),
            "value_targets": flat(targets),
        }
        if batch.prev_actions is not None:
            cols["prev_actions"] = flat(batch.prev_actions)
        if batch.prev_rewards is not None:
            cols["prev_rewards"] = flat(batch.prev_rewards)
        return cols

    def _sequence_index(self, batch: SampleBatch) -> tuple[np.ndarray, np.ndarray, int]:
        """``(row index [S, L], lengths [S], L)`` of the recorded sequences (pads -> -1)."""
        t_steps, n = batch.rewards.shape
        starts = batch.seq_starts
        order = np.lexsort((starts[:, 0], starts[:, 1]))  # by env, then time
        if not np.array_equal(order, np.arange(len(starts))):
            raise AssertionError("sequence starts must be recorded in (env, time) order")
        rows = starts[:, 1] * t_steps + starts[:, 0]
        ends = np.append(rows[1:], n * t_steps)
        lens = (ends - rows).astype(np.int64)
        max_len = self.policy.max_seq_len
        if lens.max(initial=0) > max_len:
            raise AssertionError("a recorded sequence is longer than max_seq_len")
        index = rows[:, None] + np.arange(max_len)[None, :]
        index[np.arange(max_len)[None, :] >= lens[:, None]] = -1
        return index, lens, max_len

    def _order_sequences(self, batch: SampleBatch) -> SampleBatch:
        """Sorts ``seq_starts`` (recorded time-major) into (env, time) order."""
        starts = batch.seq_starts
        order = np.lexsort((starts[:, 0], starts[:, 1]))
        batch.seq_starts = starts[order]
        batch.seq_states = [s[order] for s in batch.seq_states]
        return batch

    # --- the update -----------------------------------------------------------------------
    def update(self, batch: SampleBatch, rng: np.random.Generator) -> dict[str, float]:
        """``num_sgd_iter`` epochs of minibatch SGD on one rollout.

        Returns the losses and statistics of the last epoch, averaged over its minibatches
        (RLlib's choice; the adaptive KL coefficient follows that epoch's KL).
        """
        cfg, pol = self.config, self.policy
        adv, targets = compute_gae(
            batch.rewards, batch.vf_preds, batch.dones, batch.last_values, cfg.gamma, cfg.lambda_
        )
        cols = self._columns(batch, adv, targets)
        total_rows = batch.num_steps
        valid = None if batch.valid is None else np.swapaxes(batch.valid, 0, 1).reshape(-1)
        if valid is not None and not pol.recurrent:  # drop NEXT_STEP reset steps
            keep = torch.as_tensor(np.flatnonzero(valid), device=pol.device)
            cols = tree_map(lambda c: c.index_select(0, keep), cols)
        stats: list[torch.Tensor] = []
        last = cfg.num_sgd_iter - 1
        # target_kl: every minibatch records its statistics (its approx KL decides the early
        # stop); the epoch that ran last is the one reported.
        early = cfg.target_kl is not None
        epochs_run = 0
        pol.set_training(True)
        self._fast = (
            self._backprop if (self._backprop is not None and self._backprop.usable()) else None
        )
        if pol.recurrent:
            batch = self._order_sequences(batch)
            index, lens, max_len = self._sequence_index(batch)
            states = [torch.as_tensor(s, device=pol.device) for s in batch.seq_states]
            num_seqs = len(lens)
            n_mb = max(1, min(num_seqs, round(total_rows / cfg.sgd_minibatch_size)))
            for epoch in range(cfg.num_sgd_iter):
                epochs_run, stop = epoch + 1, False
                if early:
                    stats.clear()
                for mb in np.array_split(rng.permutation(num_seqs), n_mb):
                    idx = index[mb].reshape(-1)
                    used = idx >= 0 if valid is None else (idx >= 0) & valid[np.maximum(idx, 0)]
                    mask = torch.as_tensor(used, device=pol.device, dtype=torch.float32)
                    rows = torch.as_tensor(np.maximum(idx, 0), device=pol.device)
                    data = tree_map(lambda c, r=rows: c[r], cols)
                    seq_lens = torch.as_tensor(lens[mb], device=pol.device)
                    state = [s[torch.as_tensor(mb, device=pol.device)] for s in states]
                    if self._step(data, state, seq_lens, mask, stats, epoch == last or early):
                        stop = True
                        break
                if stop:
                    break
        else:
            n_mb = max(1, total_rows // cfg.sgd_minibatch_size)
            if n_mb == 1:  # one minibatch of every row: no shuffling, standardise once
                if cfg.normalize_advantages:
                    cols["advantages"] = _standardized(cols["advantages"], None)
                for epoch in range(cfg.num_sgd_iter):
                    epochs_run = epoch + 1
                    if early:
                        stats.clear()
                    if self._step(
                        cols,
                        [],
                        None,
                        None,
                        stats,
                        epoch == last or early,
                        normalize_advantages=False,
                    ):
                        break
            else:
                for epoch in range(cfg.num_sgd_iter):
                    epochs_run, stop = epoch + 1, False
                    if early:
                        stats.clear()
                    for mb in np.array_split(rng.permutation(total_rows), n_mb):
                        rows = torch.as_tensor(mb, device=pol.device)
                        # index_select: rows copied whole (c[r]'s gather is ~6x slower
                        # on wide rows: a union observation of 907 floats)
                        data = tree_map(lambda c, r=rows: c.index_select(0, r), cols)
                        if self._step(data, [], None, None, stats, epoch == last or early):
                            stop = True
                            break
                    if stop:
                        break
        pol.set_training(False)
        means = torch.stack(stats).mean(0).tolist()
        result = dict(zip(_STAT_NAMES, means, strict=True))
        kl = result["kl"]
        if kl > 2.0 * cfg.kl_target:
            self.kl_coeff *= 1.5
        elif kl < 0.5 * cfg.kl_target:
            self.kl_coeff *= 0.5
        result["kl_coeff"] = self.kl_coeff
        result["sgd_epochs"] = epochs_run
        real = slice(None) if batch.valid is None else batch.valid
        result["explained_variance"] = explained_variance(targets[real], batch.vf_preds[real])
        result["advantage_mean"] = float(adv[real].mean())
        result["value_target_mean"] = float(targets[real].mean())
        return result

    def _step(
        self,
        data: dict[str, Any],
        state: list[torch.Tensor],
        seq_lens: torch.Tensor | None,
        mask: torch.Tensor | None,
        stats: list[torch.Tensor],
        record: bool,
        normalize_advantages: bool | None = None,
    ) -> bool:
        """One minibatch step; True when ``target_kl`` stops the epochs (the step is then
        not applied: the approx KL is measured before it, as Stable-Baselines3 does)."""
        cfg, pol = self.config, self.policy
        if normalize_advantages is None:
            normalize_advantages = cfg.normalize_advantages
        if self._fast is not None:
            if self._flat is not None:  # re-link gradients someone set to None or replaced
                self._flat.sync_grads()
            total, step_stats = self._fast.step(data, self.kl_coeff, normalize_advantages, record)
            _as_loss(total)
            if step_stats is not None:
                stats.append(step_stats)
                if self._kl_exceeded(step_stats[_STAT_NAMES.index("approx_kl")]):
                    return True
            self._apply_gradients()
            return False
        obs = data["obs"]
        if mask is not None:
            keep = mask.reshape(-1, *([1] * (obs.dim() - 1))).to(obs.dtype)
            obs = obs * keep
        input_dict = pol.input_dict(
            obs, data.get("prev_actions"), data.get("prev_rewards"), is_training=True
        )
        dist, values, _ = pol.forward(input_dict, state, seq_lens)
        logp = dist.logp(data["actions"])
        log_ratio = logp - data["logp"]
        ratio = torch.exp(log_ratio)
        adv = data["advantages"]
        if normalize_advantages:
            adv = _standardized(adv, mask)
        surrogate = torch.min(
            adv * ratio, adv * torch.clamp(ratio, 1.0 - cfg.clip_param, 1.0 + cfg.clip_param)
        )
        policy_loss = -_masked_mean(surrogate, mask)
        vf_err = (values - data["value_targets"]) ** 2
        if cfg.vf_clip_param is not None:
            old = data["vf_preds"]
            clipped = old + torch.clamp(values - old, -cfg.vf_clip_param, cfg.vf_clip_param)
            vf_err = torch.max(vf_err, (clipped - data["value_targets"]) ** 2)
        vf_loss = _masked_mean(vf_err, mask)
        # Entropy and KL enter the graph only when their coefficients do; otherwise they are
        # statistics of the recorded (last) epoch, computed outside the graph.
        use_entropy, use_kl = cfg.entropy_coeff != 0.0, self.kl_coeff > 0.0
        total = policy_loss + cfg.vf_loss_coeff * vf_loss
        if use_entropy or record:
            with torch.set_grad_enabled(use_entropy):
                entropy = _masked_mean(dist.entropy(), mask)
            if use_entropy:
                total = total - cfg.entropy_coeff * entropy
        if use_kl or record:
            old_dist = pol.dist_class(data["dist_inputs"], pol.model)
            with torch.set_grad_enabled(use_kl):
                kl = _masked_mean(old_dist.kl(dist), mask)
            if use_kl:
                total = total + self.kl_coeff * kl
        loss_inputs = dict(data)
        loss_inputs["seq_lens"] = seq_lens
        total = _as_loss(pol.model.custom_loss(total, loss_inputs))
        if self._flat is not None:
            self._flat.attach_grads()
            total.backward()
            self._flat.sync_grads()
        else:
            self.optimizer.zero_grad(set_to_none=True)
            total.backward()
        if record:
            with torch.no_grad():
                approx_kl = _masked_mean((ratio - 1.0) - log_ratio, mask)
                clipfrac = _masked_mean(((ratio - 1.0).abs() > cfg.clip_param).float(), mask)
                stats.append(
                    torch.stack(
                        [total, policy_loss, vf_loss, entropy, kl, approx_kl, clipfrac]
                    ).detach()
                )
            if self._kl_exceeded(approx_kl):
                return True
        self._apply_gradients()
        return False

    def _kl_exceeded(self, approx_kl: torch.Tensor) -> bool:
        """Whether ``target_kl`` is set and this approx KL is above ``1.5 * target_kl``."""
        target = self.config.target_kl
        return target is not None and float(approx_kl) > 1.5 * target

    def _apply_gradients(self) -> None:
        """Gradient-norm clipping, then the optimizer step."""
        if not self.config.fast_paths:
            if self.config.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(self._params, self.config.grad_clip)
            self.optimizer.step()
            return
        if self.config.grad_clip is not None:
            if self._flat is not None:
                self._flat.clip_grad_norm_(self.config.grad_clip)
            else:
                clip_grad_norm(self._params, self.config.grad_clip)
        if not adam_step(self.optimizer):
            self.optimizer.step()


def _standardized(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``(x - mean) / (std + 1e-8)`` over the rows ``mask`` keeps (all when None)."""
    mean = _masked_mean(x, mask)
    std = torch.sqrt(_masked_mean((x - mean) ** 2, mask))
    return (x - mean) / (std + 1e-8)


def _as_loss(value: Any) -> torch.Tensor:
    """``custom_loss`` may return a tensor or (RLlib's form) a list of one loss per optimizer."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise ValueError(
                f"custom_loss returned {len(value)} losses; PPO has one optimizer, so return a "
                "single loss (or a list of one)"
            )
        value = value[0]
    if not isinstance(value, torch.Tensor) or value.dim() != 0:
        raise ValueError(f"custom_loss must return a scalar tensor, got {value!r}")
    if not math.isfinite(float(value.detach())):
        raise ValueError(f"the PPO loss is not finite ({float(value.detach())})")
    return value
