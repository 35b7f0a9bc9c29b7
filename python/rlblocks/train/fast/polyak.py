"""``PolyakUpdate``: moves a target network towards its online network by ``tau``, the one
target update of the native DQN and SAC learners and of the RLlib backend's learners.

The tensors are listed once, when the update is built, and each update is a few foreach
kernel calls over them (walking the modules, or a state-dict round trip, costs more than
the arithmetic of small networks). ``load_state_dict`` and ``.to()`` on the same device
keep the tensors; a network whose tensors were replaced needs a new update. Two kinds:

* :meth:`PolyakUpdate.of_parameters` (the native learners): every parameter
  ``target + tau * (online - target)`` in one pass (``tau >= 1``: an exact copy); buffers
  are copied.
* :meth:`PolyakUpdate.of_state_dict` (the RLlib learners): every state-dict tensor
  ``tau * online + (1 - tau) * target``, bit for bit RLlib's ``update_target_network``
  (the same two products and their sum; integer tensors by the same formula, copied back
  as a state-dict load does).

Examples:
    >>> import torch
    >>> online, target = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    >>> with torch.no_grad():
    ...     want = 0.75 * target.weight + 0.25 * online.weight
    >>> PolyakUpdate.of_parameters(online, target)(0.25)
    >>> torch.allclose(target.weight, want)
    True
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["PolyakUpdate"]


class PolyakUpdate:
    """``target <- target + tau * (online - target)`` over tensors listed once (module
    docstring); build it with :meth:`of_parameters` or :meth:`of_state_dict`.

    Args:
        online: The online network's tensors that are averaged.
        target: The target network's matching tensors (same shapes, in the same order).
        copied: ``(online, target)`` pairs copied on every update (buffers).
        rllib_formula: ``tau * online + (1 - tau) * target`` as RLlib writes it (two
            products and a sum, also for ``tau = 1``), instead of one interpolation.
    """

    def __init__(
        self,
        online: list[torch.Tensor],
        target: list[torch.Tensor],
        copied: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
        *,
        rllib_formula: bool = False,
    ) -> None:
        if len(online) != len(target) or any(
            o.shape != t.shape for o, t in zip(online, target, strict=True)
        ):
            raise ValueError(
                "PolyakUpdate: the online and target tensors differ in number or shape "
                f"({[tuple(o.shape) for o in online]} vs {[tuple(t.shape) for t in target]})"
            )
        self._online = online
        self._target = target
        self._copied = list(copied or [])
        self._rllib = rllib_formula
        self._integers: list[tuple[torch.Tensor, torch.Tensor]] = []

    @classmethod
    def of_parameters(cls, online: nn.Module, target: nn.Module) -> PolyakUpdate:
        """The native learners' update: parameters interpolated, buffers copied.

        Raises:
            ValueError: Networks with different parameters or buffers.
        """
        online_buffers, target_buffers = list(online.buffers()), list(target.buffers())
        if len(online_buffers) != len(target_buffers):
            raise ValueError(
                f"PolyakUpdate: the networks have {len(online_buffers)} and "
                f"{len(target_buffers)} buffers"
            )
        return cls(
            list(online.parameters()),
            list(target.parameters()),
            list(zip(online_buffers, target_buffers, strict=True)),
        )

    @classmethod
    def of_state_dict(cls, online: nn.Module, target: nn.Module) -> PolyakUpdate:
        """RLlib's ``update_target_network`` over every state-dict tensor (module docstring).

        Raises:
            ValueError: State dicts with different keys.
        """
        mains, targets = online.state_dict(keep_vars=True), target.state_dict(keep_vars=True)
        if list(mains) != list(targets):
            raise ValueError("PolyakUpdate: the two networks' state dicts have different keys")
        pairs = [(mains[k], t) for k, t in targets.items()]
        floats = [(m, t) for m, t in pairs if t.is_floating_point()]
        update = cls([m for m, _ in floats], [t for _, t in floats], rllib_formula=True)
        update._integers = [(m, t) for m, t in pairs if not t.is_floating_point()]
        return update

    @torch.no_grad()
    def __call__(self, tau: float) -> None:
        """Moves the target tensors by ``tau`` in ``(0, 1]``."""
        if self._rllib:
            if self._target:
                main_part = torch._foreach_mul(self._online, tau)
                torch._foreach_mul_(self._target, 1 - tau)
                torch._foreach_add_(self._target, main_part)
            for m, t in self._integers:
                t.copy_(tau * m + (1 - tau) * t)
        elif self._target:
            if tau >= 1.0:
                torch._foreach_copy_(self._target, self._online)
            else:
                torch._foreach_lerp_(self._target, self._online, tau)
        for m, t in self._copied:
            t.copy_(m)
