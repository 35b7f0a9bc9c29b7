"""Start-up time of the ``rlblocks`` process (the console script, ``python -m rlblocks.cli``):
nothing here changes what a command computes.

torch.optim's ``Optimizer`` methods ``add_param_group``, ``zero_grad``, ``state_dict`` and
``load_state_dict`` are wrapped by ``torch._disable_dynamo``, whose first call imports
``torch._dynamo`` (torch's compiler) only to mark the method as one ``torch.compile`` must
not trace. Every optimizer's construction calls ``add_param_group``: that import was 3.7 s of
a one-step ``rlblocks train`` (12.6 s) and of an ``rlblocks evaluate`` (8.0 s) on a 2-core
machine. The command line compiles no code that calls these methods, so in its own process
(:func:`rlblocks.cli.console_main` sets :data:`standalone`) a command that is about to build
a trainer resolves each wrapper to its method first (the wrapper's cache, filled as torch
itself fills it). Library users' processes, and ``rlblocks.cli.main`` called from Python,
are left as torch makes them; commands that need no trainer import no torch for this.
"""

from __future__ import annotations

__all__ = ["before_trainer", "resolve_optimizer_wrappers", "standalone"]

#: True in the ``rlblocks`` process itself (set by :func:`rlblocks.cli.console_main`).
standalone = False

_WRAPPED = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")


def resolve_optimizer_wrappers() -> None:
    """Fills the ``_disable_dynamo`` cache of torch.optim's wrapped ``Optimizer`` methods
    with the methods themselves; a no-op where torch wraps them differently."""
    import torch

    for name in _WRAPPED:
        method = getattr(torch.optim.Optimizer, name, None)
        raw = getattr(method, "__wrapped__", None)
        if raw is not None and not hasattr(raw, "__dynamo_disable"):
            setattr(raw, "__dynamo_disable", raw)


def before_trainer() -> None:
    """Called by the commands just before they build or restore a native trainer:
    :func:`resolve_optimizer_wrappers` in the ``rlblocks`` process itself."""
    if standalone:
        resolve_optimizer_wrappers()
