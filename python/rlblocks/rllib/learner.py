""":class:`RLBlocksPPOTorchLearner`: RLlib's PPO learner, with rlblocks' update for FC models
(and :class:`RLBlocksDQNTorchLearner` / :class:`RLBlocksSACTorchLearner`: RLlib's DQN / SAC
learners with fused optimizer steps).

RLlib's ``Learner.update`` spends most of a small minibatch outside the arithmetic: it
slices a ``SampleBatch`` per minibatch, runs the module's ``forward_train`` (switching it
to train mode, one call per layer), autograd, a finiteness check per gradient tensor, the
single-tensor Adam, and logs a dozen metrics per minibatch. For the catalog's fully
connected model with a Categorical or DiagGaussian head (what
:class:`~rlblocks.train.fast.FCBackprop` covers) this learner runs the same epochs over the
same minibatches (RLlib's cyclic iterator and its ``np.random`` shuffles, replayed on row
indices) with the loss of ``PPOTorchLearner.compute_loss_for_module`` and its gradient in
closed form (:meth:`~rlblocks.train.fast.FCBackprop.step_rllib`), fused Adam, and the
metrics RLlib keeps (window-1 values: the last minibatch's; sums: the totals) logged once
per update. Everything else (the learner connector and GAE, the KL coefficient update,
schedules, checkpoints) is RLlib's.

What the closed form does not cover runs RLlib's update unchanged: other models
(recurrent, vision, custom, action masks), other distributions, hooks on the model,
``grad_clip_by`` other than ``"global_norm"``, several modules, Ray Data iterators.

Example::

    from ray.rllib.algorithms.ppo import PPOConfig
    from rlblocks.rllib import RLBlocksPPOTorchLearner, rl_module_spec

    config = (PPOConfig().environment("CartPole-v1")
              .rl_module(rl_module_spec=rl_module_spec({"fcnet_hiddens": [64, 64]}))
              .learners(learner_class=RLBlocksPPOTorchLearner))
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from rlblocks.distributions import SquashedGaussian
from rlblocks.rllib._ray import (
    ALL_MODULES,
    DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY,
    ENTROPY_KEY,
    LAST_TARGET_UPDATE_TS,
    LEARNER_RESULTS_KL_KEY,
    LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY,
    LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY,
    LOGPS_KEY,
    MODULE_TRAIN_BATCH_SIZE_MEAN,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_TRAINED,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    NUM_TARGET_UPDATES,
    POLICY_LOSS_KEY,
    QF_LOSS_KEY,
    QF_MAX_KEY,
    QF_MEAN_KEY,
    QF_MIN_KEY,
    QF_TWIN_LOSS_KEY,
    TD_ERROR_KEY,
    TD_ERROR_MEAN_KEY,
    VF_LOSS_KEY,
    WEIGHTS_SEQ_NO,
    Columns,
    DQNLearner,
    DQNTorchLearner,
    Postprocessing,
    PPOTorchLearner,
    SACTorchLearner,
    TargetNetworkAPI,
    TorchLearner,
    TrainingData,
    explained_variance,
)
from rlblocks.rllib.module import RLBlocksAPPORLModule, RLBlocksRLModule
from rlblocks.rllib.qlearning import RLBlocksSACRLModule
from rlblocks.train.fast import FCBackprop, adam_step, make_adam
from rlblocks.train.fast.polyak import PolyakUpdate
from rlblocks.train.fast.sac_backprop import SACBackprop
from rlblocks.train.fast.unwritten import clear_unwritten

__all__ = ["RLBlocksPPOTorchLearner", "minibatch_rows"]


def minibatch_rows(
    n: int,
    minibatch_size: int | None,
    num_epochs: int,
    shuffle: bool,
    num_total_minibatches: int = 0,
) -> Iterator[np.ndarray]:
    """The rows of each minibatch RLlib's ``MiniBatchCyclicIterator`` yields over a batch of
    ``n`` rows: minibatches of ``minibatch_size`` rows that run on across epoch ends, the
    order reshuffled (``np.random.permutation``, as ``SampleBatch.shuffle``) after each
    epoch when ``shuffle``; ``num_epochs`` epochs, or ``num_total_minibatches`` minibatches
    when that is > 0. Without a ``minibatch_size`` an epoch is one minibatch.

    Examples:
        >>> [r.tolist() for r in minibatch_rows(5, 2, 2, shuffle=False)]
        [[0, 1], [2, 3], [4, 0], [1, 2], [3, 4]]
    """
    if n <= 0:
        raise ValueError("minibatch_rows: the batch is empty")
    size = int(minibatch_size) if minibatch_size else n
    order = np.arange(n)
    start = covered = count = 0
    while (covered < num_epochs) if num_total_minibatches <= 0 else (count < num_total_minibatches):
        need, parts = size, []
        while start + need >= n:
            parts.append(order[start:])
            need -= n - start
            start = 0
            covered += 1
            if shuffle:
                order = order[np.random.permutation(n)]  # noqa: NPY002  (RLlib shuffles with it)
        if need > 0:
            parts.append(order[start : start + need])
        start += need
        count += 1
        yield np.concatenate(parts) if len(parts) > 1 else parts[0]


def fused_adam_like(optimizer: Any) -> Any:
    """A plain ``torch.optim.Adam`` (one parameter group, no AMSGrad / maximize / foreach /
    fused choice) rebuilt with the same hyperparameters on the fused kernel
    (:func:`~rlblocks.train.fast.make_adam`); any other optimizer as it is."""
    if type(optimizer) is not torch.optim.Adam or len(optimizer.param_groups) != 1:
        return optimizer
    group = optimizer.param_groups[0]
    if any(group[k] for k in ("amsgrad", "maximize", "foreach", "fused", "capturable")):
        return optimizer
    if group["betas"] != (0.9, 0.999) or group["weight_decay"] != 0:
        return optimizer
    return make_adam(group["params"], lr=group["lr"], eps=group["eps"])


class FastOptimizerSteps(TorchLearner):  # type: ignore[misc]
    """RLlib's optimizer steps of a ``TorchLearner``, cheaper: every plain Adam the learner
    registers (PPO's and DQN's one, SAC's critic / twin critic / actor / temperature ones)
    runs on the fused kernel, and one finiteness check covers all gradients. Mixed in before
    RLlib's learner class (:class:`RLBlocksPPOTorchLearner`, :class:`RLBlocksDQNTorchLearner`,
    :class:`RLBlocksSACTorchLearner`)."""

    def register_optimizer(self, *, optimizer: Any, **kwargs: Any) -> None:
        super().register_optimizer(optimizer=fused_adam_like(optimizer), **kwargs)

    def apply_gradients(self, gradients_dict: dict[Any, Any]) -> None:
        """RLlib's ``apply_gradients`` with one finiteness check over all gradients (RLlib
        checks each tensor twice) and the fused Adam kernel called directly
        (:func:`~rlblocks.train.fast.adam_step`); non-finite gradients take RLlib's path."""
        grads = [g for g in gradients_dict.values() if g is not None]
        # a finite sum means every gradient is finite; a non-finite one (a non-finite
        # gradient, or an overflow of the sum) takes RLlib's path, which checks each
        if (
            self._grad_scalers is not None
            or self._lr_scheduler_classes is not None
            or (grads and not bool(torch.cat([g.reshape(-1) for g in grads]).sum().isfinite()))
        ):
            super().apply_gradients(gradients_dict)
            return
        for pid, grad in gradients_dict.items():
            self._params[pid].grad = grad
        for module_id, names in self._module_optimizers.items():
            for name in names:
                optimizer = self.get_optimizer(module_id, name)
                if not adam_step(optimizer):
                    optimizer.step()


class RLBlocksPPOTorchLearner(FastOptimizerSteps, PPOTorchLearner):  # type: ignore[misc]
    """``PPOTorchLearner`` with rlblocks' closed-form update (module docstring); use it as
    ``config.learners(learner_class=RLBlocksPPOTorchLearner)``. ``rlblocks train --backend
    rllib --algo PPO`` does."""

    # --- the update -----------------------------------------------------------------------------
    def _closed_form(self, module_id: str) -> FCBackprop | None:
        """The closed-form update of this module, or None (RLlib's update)."""
        cache: dict[str, FCBackprop | None] = self.__dict__.setdefault("_rlblocks_fast", {})
        if module_id not in cache:
            module = self.module[module_id]
            config = self.config.get_config_for_module(module_id)
            ok = (
                type(module) in (RLBlocksRLModule, RLBlocksAPPORLModule)
                and not module.keyed
                and not module.is_stateful()
                and config.use_critic
                and (not config.grad_clip or config.grad_clip_by == "global_norm")
            )
            chosen = FCBackprop.for_model(module.model, module.dist_fn) if ok else None
            cache[module_id] = chosen if isinstance(chosen, FCBackprop) else None
        fast = cache[module_id]
        return fast if fast is not None and fast.usable() else None

    def update(self, *args: Any, **kwargs: Any) -> Any:
        """RLlib's ``Learner.update``; with one module the closed form covers, its epochs
        run here (same minibatches, loss, optimizer and logged metrics)."""
        modules = list(self.module.keys())
        if (
            args
            or len(modules) != 1
            or kwargs.get("data_iterators")
            or kwargs.get("batches")
            or self._closed_form(modules[0]) is None
        ):
            return super().update(*args, **kwargs)
        return self._fast_update(modules[0], **kwargs)

    def _fast_update(
        self,
        module_id: str,
        *,
        batch: Any = None,
        batch_refs: Any = None,
        episodes: Any = None,
        episodes_refs: Any = None,
        training_data: Any = None,
        timesteps: dict[str, Any] | None = None,
        num_total_minibatches: int = 0,
        num_epochs: int = 1,
        minibatch_size: int | None = None,
        shuffle_batch_per_epoch: bool = False,
        _no_metrics_reduce: bool = False,
        **kwargs: Any,
    ) -> Any:
        self._check_is_built()
        self.before_gradient_based_update(timesteps=timesteps or {})
        if training_data is None:
            training_data = TrainingData(
                batch=batch,
                batch_refs=batch_refs,
                episodes=episodes,
                episodes_refs=episodes_refs,
            )
        training_data.validate()
        training_data.solve_refs()
        self._weights_seq_no += 1
        multi = self._make_batch_if_necessary(training_data=training_data)
        if module_id not in multi.policy_batches or not self.should_module_be_updated(
            module_id, multi
        ):
            self.after_gradient_based_update(timesteps=timesteps or {})
            return None if _no_metrics_reduce else self.metrics.reduce()
        columns = self._columns(multi.policy_batches[module_id])
        n = len(columns["advantages"])
        fast = self._closed_form(module_id)
        assert fast is not None
        config = self.config.get_config_for_module(module_id)
        entropy_coeff = float(
            self.entropy_coeff_schedulers_per_module[module_id].get_current_value()
        )
        kl_coeff = float(self.curr_kl_coeffs_per_module[module_id]) if config.use_kl_loss else 0.0
        shuffle = bool(shuffle_batch_per_epoch) and num_epochs > 1
        if not minibatch_size and num_epochs <= 1:
            num_epochs = 1  # RLlib's dummy iterator: the whole batch once
        params = list(self.module[module_id].parameters())
        trained = steps = 0
        total = stats = rows = None
        for rows in minibatch_rows(n, minibatch_size, num_epochs, shuffle, num_total_minibatches):
            index = torch.from_numpy(rows)
            data = {k: v.index_select(0, index) for k, v in columns.items() if k != "seq_no"}
            mask = data.pop("mask", None)
            weights = None if mask is None else mask / mask.sum()
            total, stats = fast.step_rllib(
                data,
                weights,
                clip_param=config.clip_param,
                vf_clip_param=config.vf_clip_param,
                vf_loss_coeff=config.vf_loss_coeff,
                entropy_coeff=entropy_coeff,
                kl_coeff=kl_coeff,
            )
            grads = {self.get_param_ref(p): p.grad for p in params}
            if config.grad_clip or config.log_gradients:
                grads = self.postprocess_gradients(grads)
            self.apply_gradients(grads)
            trained += len(rows)
            steps += 1
        assert stats is not None and rows is not None
        self._log_update(module_id, multi, columns, rows, total, stats, trained, steps)
        self.after_gradient_based_update(timesteps=timesteps or {})
        return None if _no_metrics_reduce else self.metrics.reduce()

    def _columns(self, module_batch: Any) -> dict[str, torch.Tensor]:
        """The train batch's columns the loss reads, as tensors on the learner's device."""
        names = {
            "obs": Columns.OBS,
            "actions": Columns.ACTIONS,
            "logp": Columns.ACTION_LOGP,
            "dist_inputs": Columns.ACTION_DIST_INPUTS,
            "advantages": Postprocessing.ADVANTAGES,
            "value_targets": Postprocessing.VALUE_TARGETS,
            "mask": Columns.LOSS_MASK,
            "seq_no": WEIGHTS_SEQ_NO,
        }
        out = {}
        for key, column in names.items():
            if column in module_batch:
                out[key] = torch.as_tensor(module_batch[column], device=self._device)
        if "mask" in out:
            out["mask"] = out["mask"].float()
        return out

    def _log_update(
        self,
        module_id: str,
        multi: Any,
        columns: dict[str, torch.Tensor],
        rows: np.ndarray,
        total: Any,
        stats: dict[str, torch.Tensor],
        trained: int,
        steps: int,
    ) -> None:
        """The metrics RLlib logs per minibatch, once: window-1 values of the last
        minibatch, sums over all of them."""
        log = self.metrics.log_value
        last = torch.from_numpy(rows)
        if "seq_no" in columns:  # RLlib's _compute_off_policyness, for the last minibatch
            lag = (self._weights_seq_no - columns["seq_no"].index_select(0, last)).float()
            mask = columns.get("mask")
            if mask is None:
                off = torch.mean(lag)
            else:
                m = mask.index_select(0, last).bool()
                off = torch.sum(lag[m]) / torch.sum(m)
            log((module_id, DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY), off, window=1)
        targets = columns["value_targets"].index_select(0, last)
        self.metrics.log_dict(
            {
                POLICY_LOSS_KEY: stats["policy_loss"],
                VF_LOSS_KEY: stats["vf_loss"],
                LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY: stats["vf_loss_unclipped"],
                LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY: explained_variance(targets, stats["values"]),
                ENTROPY_KEY: stats["entropy"],
                LEARNER_RESULTS_KL_KEY: stats["kl"],
            },
            key=module_id,
            window=1,
        )
        log((module_id, WEIGHTS_SEQ_NO), self._weights_seq_no, window=1)
        log((module_id, MODULE_TRAIN_BATCH_SIZE_MEAN), len(rows), reduce="mean")
        env_steps = multi.env_steps() * steps  # each RLlib minibatch counts the whole batch
        for key, value, reduce, throughput in (
            ((module_id, NUM_MODULE_STEPS_TRAINED), trained, "sum", False),
            ((module_id, NUM_MODULE_STEPS_TRAINED_LIFETIME), trained, "lifetime_sum", True),
            ((ALL_MODULES, NUM_MODULE_STEPS_TRAINED), trained, "sum", True),
            ((ALL_MODULES, NUM_MODULE_STEPS_TRAINED_LIFETIME), trained, "lifetime_sum", True),
            ((ALL_MODULES, NUM_ENV_STEPS_TRAINED), env_steps, "sum", True),
            ((ALL_MODULES, NUM_ENV_STEPS_TRAINED_LIFETIME), env_steps, "lifetime_sum", True),
        ):
            log(key, value, reduce=reduce, with_throughput=throughput)
        if env_steps > 0:
            self._metrics_all_modules_num_env_steps_trained.inc(value=env_steps)
            self._metrics_all_modules_num_module_steps_trained.inc(value=trained)
        log((module_id, self.TOTAL_LOSS_KEY), total, window=1)


class FastTargetUpdates(DQNLearner):  # type: ignore[misc]
    """``DQNLearner``'s target updates (same schedule, metrics and arithmetic) with a
    :class:`~rlblocks.train.fast.polyak.PolyakUpdate` per network pair (RLlib's arithmetic,
    :meth:`~rlblocks.train.fast.polyak.PolyakUpdate.of_state_dict`) in place of RLlib's
    state-dict round trip, which costs about a millisecond per update on SAC's four
    networks. The averagers are built again for a new module object and after a checkpoint
    restore."""

    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        # what DQNLearner.after_gradient_based_update does, past it in the MRO
        super(DQNLearner, self).after_gradient_based_update(timesteps=timesteps)
        timestep = timesteps.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0)
        for module_id, module in self.module._rl_modules.items():
            config = self.config.get_config_for_module(module_id)
            inner = module.unwrapped()
            if timestep - self.last_update_ts_by_mid[
                module_id
            ] < config.target_network_update_freq or not isinstance(inner, TargetNetworkAPI):
                continue
            for average in self._averagers(module_id, inner):
                average(config.tau)
            self.metrics.log_value((module_id, NUM_TARGET_UPDATES), 1, reduce="lifetime_sum")
            self.last_update_ts_by_mid[module_id] = timestep
            self.metrics.log_value((module_id, LAST_TARGET_UPDATE_TS), timestep, reduce="max")

    def _averagers(self, module_id: Any, inner: Any) -> list[PolyakUpdate]:
        """The module's averagers, built on first use and again for a new module object."""
        cache = self.__dict__.setdefault("_polyak_averagers", {})
        entry = cache.get(module_id)
        if entry is None or entry[0] is not inner:
            pairs = inner.get_target_network_pairs()
            entry = cache[module_id] = (inner, [PolyakUpdate.of_state_dict(m, t) for m, t in pairs])
        return entry[1]

    def set_state(self, state: Any) -> None:
        super().set_state(state)
        self.__dict__.pop("_polyak_averagers", None)


class RLBlocksDQNTorchLearner(FastOptimizerSteps, FastTargetUpdates, DQNTorchLearner):  # type: ignore[misc]
    """``DQNTorchLearner`` (its loss) with :class:`FastOptimizerSteps` and
    :class:`FastTargetUpdates`; ``rlblocks train --backend rllib --algo DQN`` uses it."""


class RLBlocksSACTorchLearner(FastOptimizerSteps, FastTargetUpdates, SACTorchLearner):  # type: ignore[misc]
    """``SACTorchLearner`` with :class:`FastOptimizerSteps`, :class:`FastTargetUpdates` and,
    for rlblocks' SAC module with the catalog's FC actor and critics and a squashed-Gaussian
    head, RLlib's continuous SAC loss (Huber critic losses with the replay weights, the
    actor loss on the current critics, the temperature loss) with its gradients in closed
    form (:class:`~rlblocks.train.fast.sac_backprop.SACBackprop`): the same random draws
    in the same order, the same metrics, RLlib's gradient postprocessing and optimizers.
    Everything else runs RLlib's update. ``rlblocks train --backend rllib --algo SAC`` uses
    it."""

    def _update(self, batch: dict[str, Any]) -> tuple[Any, Any, Any]:
        closed_form = self._closed_form(batch)
        if closed_form is None:
            return super()._update(batch)
        module_id, fast = closed_form
        self._compute_off_policyness(batch)
        loss = self._closed_form_step(module_id, fast, batch[module_id])
        self.apply_gradients(self.postprocess_gradients(self._module_grads(module_id)))
        return {}, {module_id: loss}, {}

    def _closed_form(self, batch: dict[str, Any]) -> tuple[Any, SACBackprop] | None:
        """``(module id, the closed form)`` when it applies to this update, else None."""
        if len(batch) != 1 or self._torch_compile_complete_update or self._grad_scalers:
            return None
        (module_id,) = batch
        module = self.module[module_id].unwrapped()
        columns = batch[module_id]
        if (
            type(module) is not RLBlocksSACRLModule
            or module.discrete
            or len(module.action_space.shape) != 1  # the closed form's actions are [B, A]
            or module.dist_fn is not SquashedGaussian
            or "weights" not in columns
            or "n_step" not in columns
        ):
            return None
        critics = [module.qf, *([module.qf_twin] if module.twin_q else [])]
        targets = [module.target_qf, *([module.target_qf_twin] if module.twin_q else [])]
        cache = self.__dict__.setdefault("_sac_closed_forms", {})
        key = (module_id, id(module.pi), *map(id, critics), *map(id, targets))
        if key not in cache:
            cache[key] = SACBackprop.build(module.pi, critics, targets)
        fast = cache[key]
        return (module_id, fast) if fast is not None and fast.usable() else None

    def _closed_form_step(self, module_id: Any, fast: SACBackprop, batch: dict[str, Any]) -> Any:
        """``SACTorchLearner._compute_loss_for_module_continuous`` and its ``backward``s:
        writes the gradients of the actor, critics and temperature and logs the same
        metrics; returns the total loss."""
        config = self.config.get_config_for_module(module_id)
        # what zero_grad(set_to_none=True) would leave: the closed form overwrites the
        # gradients it writes; the others (e.g. the critics' unused value branches) go
        clear_unwritten(self._optimizer_params(module_id)[1], fast)
        log_alpha = self.curr_log_alpha[module_id]
        alpha = torch.exp(log_alpha.detach())
        obs = batch[Columns.OBS]
        # RLlib's module draws the current observations' actions first, then the next ones
        actor_loss, logp, q_curr = fast.actor_grads(obs, alpha)
        discounts = (config.gamma ** batch["n_step"]) * (1.0 - batch[Columns.TERMINATEDS].float())
        targets = fast.targets(batch[Columns.NEXT_OBS], batch[Columns.REWARDS], discounts, alpha)
        (critic_loss, *twin), qs = fast.critic_grads(
            obs, batch[Columns.ACTIONS], targets, batch["weights"], huber=True
        )
        td_error = torch.abs(qs[0] - targets)
        if twin:
            td_error += torch.abs(qs[1] - targets)
            td_error *= 0.5
        entropy_term = logp + self.target_entropy[module_id]
        alpha_loss = -torch.mean(log_alpha.detach() * entropy_term)
        log_alpha.grad = -entropy_term.mean().expand_as(log_alpha).clone()

        self.metrics.log_value(key=(module_id, TD_ERROR_KEY), value=td_error, reduce="item_series")
        self.metrics.log_dict(
            {
                POLICY_LOSS_KEY: actor_loss,
                QF_LOSS_KEY: critic_loss,
                "alpha_loss": alpha_loss,
                "alpha_value": alpha[0],
                "log_alpha_value": torch.log(alpha)[0],
                "target_entropy": self.target_entropy[module_id],
                LOGPS_KEY: torch.mean(logp),
                QF_MEAN_KEY: torch.mean(q_curr),
                QF_MAX_KEY: torch.max(q_curr),
                QF_MIN_KEY: torch.min(q_curr),
                TD_ERROR_MEAN_KEY: torch.mean(td_error),
            },
            key=module_id,
            window=1,
        )
        total = actor_loss + critic_loss + alpha_loss
        if twin:
            self.metrics.log_value(key=(module_id, QF_TWIN_LOSS_KEY), value=twin[0], window=1)
            total += twin[0]
        return total

    def _module_grads(self, module_id: Any) -> dict[Any, Any]:
        """``{param ref: .grad}`` of the module's optimizers' parameters, as RLlib's
        ``compute_gradients`` collects them (None where the loss does not reach)."""
        return {ref: param.grad for ref, param in self._optimizer_params(module_id)[0]}

    def _optimizer_params(self, module_id: Any) -> tuple[list[tuple[Any, Any]], list[Any]]:
        """``([(param ref, param)], [param])`` of the module's optimizers, as RLlib's
        ``filter_param_dict_for_optimizer`` finds them; built again when the module's
        optimizers or the learner's parameters change."""
        optimizers = [opt for _, opt in self.get_optimizers_for_module(module_id)]
        key = (*map(id, optimizers), id(self._params), len(self._params))
        cache = self.__dict__.setdefault("_sac_optimizer_params", {})
        entry = cache.get(module_id)
        if entry is None or entry[0] != key:
            pairs = [
                pair
                for opt in optimizers
                for pair in self.filter_param_dict_for_optimizer(self._params, opt).items()
            ]
            entry = cache[module_id] = (key, (pairs, [p for _, p in pairs]))
        return entry[1]
