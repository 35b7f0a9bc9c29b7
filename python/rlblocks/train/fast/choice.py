"""Which fast actor serves a model: the one decision the native ``Policy`` and RLlib's
``VectorEnvRunner`` share.

:func:`fast_actor` takes the model, its distribution class and where an action mask comes
from, and returns the actor that acts without the torch module
(:class:`~rlblocks.train.fast.squashed_actor.SquashedActor` for a SquashedGaussian head,
else :class:`~rlblocks.train.fast.FCActor`, whose ``numpy`` says whether ``act`` runs in
numpy and ``declined`` why not), or a reason string when the model has no module-free
path. :func:`numpy_acting` reduces that to "the numpy actor, or why not" for callers that
only act (the RLlib runner); :func:`log_once` says so once per process and reason
(autoregressive and custom heads keep the module path and say why).

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks.catalog import ModelCatalog
    >>> space = gym.spaces.MultiDiscrete([4, 2])
    >>> dist, n = ModelCatalog.get_action_dist(space, {})
    >>> model = ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (3,)), space, n, {})
    >>> type(numpy_acting(model, dist)).__name__
    'FCActor'
    >>> from rlblocks.distributions import Categorical
    >>> class MyHead(Categorical):  # a custom head: the module path, and why
    ...     pass
    >>> numpy_acting(model, MyHead)
    'numpy declined: MyHead head'
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlblocks.masks import MaskLayout
from rlblocks.train.fast.fc_actor import FCActor
from rlblocks.train.fast.squashed_actor import SquashedActor

if TYPE_CHECKING:
    from rlblocks.models.modelv2 import ModelV2
    from rlblocks.train.actor import Actor

__all__ = ["fast_actor", "log_once", "numpy_acting"]

_said: set[tuple[str, str]] = set()


def fast_actor(
    model: ModelV2,
    dist_class: Callable[..., Any],
    fallback: Actor | None,
    mask_layout: MaskLayout | None = None,
    sampled_logp: bool = True,
) -> FCActor | SquashedActor | str:
    """The module-free actor for ``model`` with ``dist_class`` (``fallback`` serves what it
    declines), or why there is none.

    ``mask_layout``: the layout of an action mask the caller hands the actor next to the
    observation (RLlib's module); an :class:`~rlblocks.models.action_mask.ActionMaskModel`
    brings its own. ``sampled_logp``: a head drawn by torch scores its draw with
    ``sampled_action_logp`` (the policy's module path), else with ``logp(actions)``
    (RLlib's ``GetActions``).
    """
    fc = FCActor.build(model, dist_class, fallback, mask_layout, sampled_logp)  # type: ignore[arg-type]
    if isinstance(fc, str):
        return fc
    squashed = SquashedActor.build(fc, dist_class, fc.mask_layout is not None)
    return fc if squashed is None else squashed


def numpy_acting(
    model: ModelV2,
    dist_class: Callable[..., Any],
    fallback: Actor | None = None,
    mask_layout: MaskLayout | None = None,
) -> FCActor | str:
    """:func:`fast_actor` for RLlib's runner, which wants actions with ``logp(actions)``
    and the raw distribution inputs: the :class:`~rlblocks.train.fast.FCActor` when it
    acts in numpy, else why not."""
    actor = fast_actor(model, dist_class, fallback, mask_layout, sampled_logp=False)
    if isinstance(actor, str):
        return actor
    if isinstance(actor, SquashedActor):  # its FC actor scores the draws
        actor = actor.fc
    return actor if actor.numpy else f"numpy declined: {actor.declined}"


def log_once(logger: logging.Logger, who: str, what: str) -> None:
    """``logger.info("<who>: <what>")`` the first time this process sees the pair."""
    if (who, what) in _said:
        return
    _said.add((who, what))
    logger.info("%s: %s", who, what)
