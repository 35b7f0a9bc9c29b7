"""Start-of-run notes about model keys the user gave that the built model does not read.

RLlib's vision net (like rlblocks', which matches it) is shaped by ``conv_filters`` and
``post_fcnet_hiddens``; it never reads ``fcnet_hiddens`` or ``fcnet_activation``. A run
on an image observation with ``--set model.fcnet_hiddens=[...]`` would otherwise train a
model the user did not ask for without a word. Only keys the user gave (``--set``, a
config file or a tuned config) are named: an algorithm's own default (DQN's ``[64, 64]``)
is not the user's choice.

Examples:
    >>> import gymnasium as gym
    >>> from rlblocks.catalog import ModelCatalog
    >>> image = gym.spaces.Box(0, 255, (10, 10, 3))
    >>> m = ModelCatalog.get_model_v2(image, gym.spaces.Discrete(2), 2, {}, framework="torch")
    >>> unread_model_keys_note(m, {"fcnet_hiddens": [32]})[:47]
    'model.fcnet_hiddens=[32] is not used: the model'
    >>> unread_model_keys_note(m, {"conv_filters": None}) is None
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch loads with the trainer, not with the CLI's --help
    import torch

__all__ = ["unread_model_keys_note", "unread_model_keys_notes"]

#: Keys of the fully connected stack that a model made only of conv stacks never reads.
FCNET_KEYS = ("fcnet_hiddens", "fcnet_activation")


def unread_model_keys_note(
    model: torch.nn.Module, given: Mapping[str, Any], *others: torch.nn.Module
) -> str | None:
    """One line naming the ``FCNET_KEYS`` in ``given`` (the model keys the user gave) that
    ``model`` and ``others`` (a learner's critics) do not read: a vision net, alone or in a
    memory wrapper, with no fully connected network or complex-input network in any of them
    (those read the keys). None when every given key is read."""
    from rlblocks.models.complex_input import ComplexInputNetwork
    from rlblocks.models.fcnet import FullyConnectedNetwork
    from rlblocks.models.visionnet import VisionNetwork, resolved_conv_filters

    unread = [k for k in FCNET_KEYS if given.get(k) is not None]
    if not unread:
        return None
    modules = [m for net in (model, *others) for m in net.modules()]
    if not any(isinstance(m, VisionNetwork) for m in modules) or any(
        isinstance(m, FullyConnectedNetwork | ComplexInputNetwork) for m in modules
    ):
        return None
    keys = ", ".join(f"model.{k}={given[k]!r}" for k in unread)
    return (
        f"{keys} {'is' if len(unread) == 1 else 'are'} not used: the model is the vision net "
        f"(an image observation), shaped by conv_filters={resolved_conv_filters(model)}; "
        "set model.post_fcnet_hiddens for dense layers after the conv stack, or "
        "model.conv_filters to change it (RLlib's vision net reads no fcnet key either)"
    )


def unread_model_keys_notes(trainer: Any, given: Mapping[str, Any]) -> Iterable[str]:
    """:func:`unread_model_keys_note` for each model of a native ``trainer`` (one per
    policy of a multi-agent trainer, named; the keys of a policy's own ``model`` block in
    ``multiagent.policies`` win there)."""
    policies = getattr(trainer, "policies", None)
    if isinstance(policies, Mapping):
        blocks = (getattr(trainer.config, "multiagent", None) or {}).get("policies") or {}
        for pid, parts in policies.items():
            own = {**given, **((blocks.get(pid) or {}).get("model") or {})}
            note = unread_model_keys_note(parts.policy.model, own)
            if note:
                yield f"policy {pid}: {note}"
    elif hasattr(trainer, "policy") and hasattr(trainer.policy, "model"):
        import torch

        learner = vars(getattr(trainer, "learner", None) or object())
        nets = [v for v in learner.values() if isinstance(v, torch.nn.Module)]
        note = unread_model_keys_note(trainer.policy.model, given, *nets)
        if note:
            yield note
