"""Private torch kernels called directly for speed, each with its public fallback.

PPO's CartPole update runs about 160 optimizer steps per iteration on a model of a dozen
small tensors (one flat buffer, :mod:`rlblocks.train.fast.flat_params`); there the Python
around ``Optimizer.step`` and ``clip_grad_norm_`` costs more than the arithmetic.
:func:`adam_step` calls the fused Adam kernel and :func:`clip_grad_norm` the multi-tensor
norm directly. A torch without those private kernels, or one whose kernels refuse these
arguments, gets ``Optimizer.step`` / ``torch.nn.utils.clip_grad_norm_`` from then on
(tests force both fallbacks).
"""

from __future__ import annotations

import operator
import weakref
from typing import Any

import torch
from torch.optim import optimizer as _optimizer_module

__all__ = ["adam_step", "clip_grad_norm", "make_adam", "set_learning_rate"]


def make_adam(params: list[torch.nn.Parameter], lr: float, eps: float = 1e-5) -> torch.optim.Adam:
    """Adam (eps 1e-5 as PPO implementations use, by default); the fused kernel where the
    device has one (CPU and CUDA: several times faster for the many small tensors of an RL
    model) and this torch has it."""
    if hasattr(torch, "_fused_adam_"):
        try:
            return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
        except RuntimeError:
            pass
    return torch.optim.Adam(params, lr=lr, eps=eps, foreach=True)


def set_learning_rate(lr: float, *optimizers: torch.optim.Optimizer) -> None:
    """Sets the learning rate of every parameter group of ``optimizers`` (a schedule's step;
    :func:`adam_step` reads it on each call)."""
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["lr"] = lr


def adam_step(optimizer: torch.optim.Optimizer) -> bool:
    """``optimizer.step()`` for a fused, single-group Adam, calling the fused kernel
    directly on the parameters that have gradients (a parameter's first step starts its
    state as ``step()`` would: a float32 step count and zero moments); False (nothing done)
    when that would differ from ``step()``: hooks are set, the tensors differ in device or
    dtype, or an option the direct call skips is on. Never calling ``step()`` also spares a
    process the import of torch's compiler, which ``step()`` does on its first call.

    ``Optimizer.step`` spends much more time in Python per call (grouping tensors by
    device, hooks, profiling) than the kernel takes on a small model's tensors
    (docs/benchmarks.md); PPO calls it once per minibatch, SAC four times per update. A
    torch without the private kernel, or one whose kernel refuses these arguments, gets
    ``Optimizer.step``.
    """
    kernel = getattr(torch, "_fused_adam_", None)
    if (
        kernel is None
        or not _PRIVATE_KERNELS_WORK["fused_adam"]
        or type(optimizer) is not torch.optim.Adam
        or len(optimizer.param_groups) != 1
        or optimizer._optimizer_step_pre_hooks
        or optimizer._optimizer_step_post_hooks
        or _global_optimizer_hooks()
    ):
        return False
    group = optimizer.param_groups[0]
    if (
        not group.get("fused")
        or group["amsgrad"]
        or group["maximize"]
        or group.get("differentiable")
        or group.get("capturable")
        or group.get("decoupled_weight_decay")
        or isinstance(group["lr"], torch.Tensor)
    ):
        return False
    params = [p for p in group["params"] if p.grad is not None]
    if not params:
        return False
    first = params[0]
    if any(p.grad.is_sparse or p.device != first.device or p.dtype != first.dtype for p in params):
        return False
    states = [optimizer.state[p] for p in params]
    for p, state in zip(params, states, strict=True):
        if not state:  # as Adam._init_group starts a fused group's state
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    steps = _count_step(optimizer, states)  # type: ignore[arg-type]
    beta1, beta2 = group["betas"]
    try:
        kernel(
            params,
            [p.grad for p in params],
            [s["exp_avg"] for s in states],  # type: ignore[index]
            [s["exp_avg_sq"] for s in states],  # type: ignore[index]
            [],
            steps,
            amsgrad=False,
            lr=float(group["lr"]),
            beta1=beta1,
            beta2=beta2,
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=False,
            grad_scale=None,
            found_inf=None,
        )
    except (TypeError, RuntimeError):
        # A torch release whose private kernel takes other arguments: it failed while
        # checking them, before writing anything. Use Optimizer.step from now on.
        torch._foreach_sub_(steps, 1)
        _PRIVATE_KERNELS_WORK["fused_adam"] = False
        return False
    return True


def _count_step(
    optimizer: torch.optim.Optimizer, states: list[dict[str, Any]]
) -> list[torch.Tensor]:
    """Adds 1 to the step counts of the parameters being updated (``states``) and returns
    them. The first call for a set of parameters moves their counts into one tensor (each
    state's ``"step"`` becomes a view of one of its elements: ``Optimizer.step``,
    ``state_dict`` and loading see ordinary 0-d tensors), so that later calls are one
    ``add_`` instead of a per-tensor ``_foreach_add_``, which costs several times more on
    CPU."""
    steps = [s["step"] for s in states]
    counter = _STEP_COUNTERS.get(optimizer)
    if counter is not None and len(counter[1]) == len(steps):
        if all(map(operator.is_, steps, counter[1])):
            counter[0].add_(1)
            return steps
    if any(t.dim() != 0 or t.dtype != steps[0].dtype or t.device != steps[0].device for t in steps):
        torch._foreach_add_(steps, 1)
        return steps
    joined = torch.stack(steps).add_(1)
    views = list(joined.unbind())
    for state, view in zip(states, views, strict=True):
        state["step"] = view
    _STEP_COUNTERS[optimizer] = (joined, views)
    return views


#: optimizer -> (its step counts joined in one tensor, the views its states hold)
_STEP_COUNTERS: weakref.WeakKeyDictionary[
    torch.optim.Optimizer, tuple[torch.Tensor, list[torch.Tensor]]
] = weakref.WeakKeyDictionary()


#: Private torch kernels that the trainer calls directly (for speed) and that turned out to
#: fail on this torch release; the public API is used instead from then on.
_PRIVATE_KERNELS_WORK = {"fused_adam": True, "foreach_norm": True}


def _global_optimizer_hooks() -> bool:
    return bool(
        getattr(_optimizer_module, "_global_optimizer_pre_hooks", None)
        or getattr(_optimizer_module, "_global_optimizer_post_hooks", None)
    )


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """Scales the gradients so their global L2 norm is at most ``max_norm`` and returns the
    norm before clipping: what ``torch.nn.utils.clip_grad_norm_`` computes, with the same
    multi-tensor kernels but without its per-call grouping and checks (PPO's CartPole update
    step and DQN's update are faster; docs/benchmarks.md). Without those private kernels (or
    if they fail), the public ``clip_grad_norm_`` runs."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    norms, scale = getattr(torch, "_foreach_norm", None), getattr(torch, "_foreach_mul_", None)
    if norms is not None and scale is not None and _PRIVATE_KERNELS_WORK["foreach_norm"]:
        try:
            total = torch.linalg.vector_norm(torch.stack(norms(grads)))
            scale(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
            return total
        except (TypeError, RuntimeError):
            _PRIVATE_KERNELS_WORK["foreach_norm"] = False
    return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False)
