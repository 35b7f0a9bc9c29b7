"""The policy's door: what every actor answers, however it computes it.

:class:`~rlblocks.train.policy.Policy` holds one :class:`Actor`, chosen when it is built,
and sends its ``forward``, ``act`` and ``values`` calls there (CleanRL's
``get_action_and_value``, SB3's ``predict``: one door). The interface lives below both the
policy and the fast paths, so each can name it without importing the other.

Examples:
    >>> import numpy as np
    >>> inputs = ActorInput(np.zeros((2, 4), np.float32), [], None, None)
    >>> inputs.obs.shape, inputs.state
    ((2, 4), [])
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import numpy as np
import torch

__all__ = ["Actor", "ActorInput", "Forward", "State"]

#: The recurrent state: one ``[B, ...]`` tensor per state input (empty without one).
State = list[torch.Tensor]
#: ``(distribution, values [B], state_out)``: what a forward pass gives.
Forward = tuple[Any, torch.Tensor, State]


class ActorInput(NamedTuple):
    """A batch of observations and what the model reads with them (the arguments of
    :meth:`~rlblocks.train.policy.Policy.act`)."""

    obs: Any
    state: State
    prev_actions: Any
    prev_rewards: Any


class Actor(Protocol):
    """The one door from observations to actions, chosen when the policy is built.

    :class:`~rlblocks.train.policy.ModuleActor` calls the torch module (every model, every
    input); :class:`~rlblocks.train.fast.FCActor` serves the default fully connected model
    without module calls and hands the rest to a ``ModuleActor``. Both give the same numbers.
    """

    description: str

    def forward(self, input_dict: dict[str, Any], state: list[Any], seq_lens: Any) -> Forward:
        """:meth:`~rlblocks.train.policy.Policy.forward`."""
        ...

    def act(self, inputs: ActorInput, explore: bool, full: bool) -> dict[str, Any]:
        """:meth:`~rlblocks.train.policy.Policy.act`."""
        ...

    def values(self, inputs: ActorInput) -> np.ndarray:
        """:meth:`~rlblocks.train.policy.Policy.values`."""
        ...
