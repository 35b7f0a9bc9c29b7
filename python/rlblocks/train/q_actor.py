"""The Q-argmax actor: DQN's greedy and epsilon-greedy actions behind the policy's door.

:class:`QArgmaxActor` serves a :class:`~rlblocks.train.policy.Policy` whose model is a
:class:`~rlblocks.train.qnetwork.QNetwork`
(:func:`~rlblocks.train.policy.build_actor` picks it). ``act`` without ``full`` takes the
argmax of the (masked) Q-values, and with ``explore`` replaces each row's action, with
probability :attr:`QArgmaxActor.epsilon`, by a uniform draw over the legal actions. For a
fully connected Q-network (plain or dueling head, one atom, no mask, no hook) the
Q-values are computed without module calls: in numpy on views of the weights for a numpy
batch on the CPU, else as plain tensors. The random numbers are torch's, drawn as the
tensor path draws them, so every path gives the same actions. ``forward``, ``values`` and
``act`` with ``full`` go to the module actor (the Categorical over the Q-values: its
deterministic action is the greedy one, what export writes).

Examples:
    >>> import gymnasium as gym, numpy as np
    >>> from rlblocks.train.learners.dqn import DQNLearner
    >>> from rlblocks.train.offpolicy_config import DQNConfig
    >>> space = gym.spaces.Box(-1, 1, (4,))
    >>> learner = DQNLearner(space, gym.spaces.Discrete(2), DQNConfig(), "cpu")
    >>> policy = learner.acting_policy()
    >>> type(policy.actor).__name__
    'QArgmaxActor'
    >>> policy.act(np.zeros((3, 4), np.float32), [], explore=False, full=False)["actions"].shape
    (3,)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlblocks.distributions import FLOAT_MIN
from rlblocks.masks import MASK_KEY
from rlblocks.models.misc import mode_dependent
from rlblocks.train.fast.q_layers import DenseQ
from rlblocks.train.qnetwork import QNetwork

if TYPE_CHECKING:
    from rlblocks.train.actor import Actor, ActorInput, Forward

__all__ = ["QArgmaxActor"]


class QArgmaxActor:
    """Greedy / epsilon-greedy actions of a Q-network (module docstring).

    Args:
        q: The Q-network.
        module: The actor that calls the module (``forward``, ``values``, ``full`` acting).
        device: The Q-network's device.

    Attributes:
        epsilon: The probability that an exploring row acts at random (the DQN learner
            sets it from ``config.epsilon_at(timestep)`` before each call).
        description: What serves, for the policy's log line.
    """

    def __init__(self, q: QNetwork, module: Actor, device: torch.device) -> None:
        self.q, self.module, self.device = q, module, device
        self.start = int(getattr(q.action_space, "start", 0))
        self.epsilon = 0.0
        # the FC Q-network as plain tensors (None: the module path)
        self.layers = None if mode_dependent(q) else DenseQ.from_network(q)
        kind = "module" if self.layers is None else "fully connected, without module calls"
        self.description = f"Q-argmax ({kind})"

    # --- the door -------------------------------------------------------------------------
    def forward(self, input_dict: dict[str, Any], state: list[Any], seq_lens: Any) -> Forward:
        """:meth:`Policy.forward <rlblocks.train.policy.Policy.forward>` (the module's)."""
        return self.module.forward(input_dict, state, seq_lens)

    def values(self, inputs: ActorInput) -> np.ndarray:
        """:meth:`Policy.values <rlblocks.train.policy.Policy.values>` (the module's)."""
        return self.module.values(inputs)

    def act(self, inputs: ActorInput, explore: bool, full: bool) -> dict[str, Any]:
        """:meth:`Policy.act <rlblocks.train.policy.Policy.act>`'s result: the argmax
        actions (epsilon-greedy with ``explore``), or with ``full`` the module actor's.

        Raises:
            ValueError: A row whose ``action_mask`` allows no action.
        """
        if full:
            return self.module.act(inputs, explore, full)
        return {"actions": self.actions(inputs.obs, explore), "state_out": []}

    # --- the actions ------------------------------------------------------------------------
    def actions(self, obs: Any, explore: bool) -> np.ndarray:
        """Greedy actions, or with ``explore`` epsilon-greedy ones (the random action is
        uniform over the legal ones), as int64 with the space's ``start``."""
        fast = self.layers if self.layers is not None and self.layers.matches(False) else None
        if fast is not None and isinstance(obs, np.ndarray) and self.device.type == "cpu":
            return self._numpy(fast, obs, explore)
        if fast is not None:  # the FC Q-network as tensors (no module calls)
            with torch.inference_mode():
                x = torch.as_tensor(obs, device=self.device)
                q = fast.forward(x.reshape(len(obs), -1).float())[1]
        else:
            with torch.no_grad():
                q = self.q.masked_q(torch.as_tensor(obs, device=self.device))
        legal = q > FLOAT_MIN if self.q.masked else None
        if legal is not None and not bool(legal.any(dim=1).all()):
            row = int((~legal.any(dim=1)).nonzero()[0, 0])
            raise ValueError(f"observation {row}: its {MASK_KEY!r} allows no action")
        actions = q.argmax(dim=1)
        if explore:
            # which rows act at random: torch's generator (the numpy path draws the same)
            rows = torch.rand(len(obs), device=q.device) < self.epsilon
            k = int(rows.sum())
            if k:
                actions = actions.clone()
                actions[rows] = (
                    torch.multinomial(legal[rows].float(), 1).squeeze(1)
                    if legal is not None
                    else torch.randint(q.shape[1], (k,), device=q.device)
                )
        return actions.cpu().numpy().astype(np.int64) + self.start

    def _numpy(self, fast: DenseQ, obs: np.ndarray, explore: bool) -> np.ndarray:
        """:meth:`actions` for the FC Q-network (no mask) in numpy, on views of its
        weights: at a few rows, torch's per-op dispatch costs more than the arithmetic."""
        q = fast.forward_numpy(obs.reshape(len(obs), -1).astype(np.float32, copy=False))
        actions = q.argmax(1)
        if explore:
            rows = torch.rand(len(obs)).numpy() < self.epsilon
            k = int(np.count_nonzero(rows))
            if k:
                actions[rows] = torch.randint(q.shape[1], (k,)).numpy()
        return actions.astype(np.int64) + self.start
