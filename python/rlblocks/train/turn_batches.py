"""Turn-based rollouts: :func:`stitch_turns` makes one policy's rollout of a
:class:`~rlblocks.multiagent.turns.TurnBasedVectorEnv` a batch PPO reads as it reads any
other.

A lane of a turn-based game acts on some steps only (``valid``); what its agent receives
while others move arrives on steps where it did not act (the hub's ``info["late"]``). Here
(1) each late reward and terminated / truncated flag is added to the lane's last move
(truncated: bootstrapped from the value of the observation that move was made on, the
agent's last observation), and (2) each lane's moves are brought together at the front of
its column, in order, so that GAE runs from one move of an agent to its next (the other
agents' turns in between are no steps of its own). The rest of each column is padding that
is not valid: its first row carries the lane's bootstrap value (``last_values``) so that
the lane's last move is bootstrapped as the runner's rollout end would be, every padding row
has a zero advantage and the learner drops them all. A move whose outcome arrives in the
next rollout is bootstrapped at this one's end, as any rollout cut is.

Examples:
    >>> from rlblocks.train.runner import SampleBatch
    >>> z = np.zeros((3, 1), np.float32)
    >>> valid = np.array([[True], [False], [True]])  # the lane moves at steps 0 and 2
    >>> batch = SampleBatch(obs=np.arange(3.0).reshape(3, 1, 1), actions=np.zeros((3, 1)),
    ...     logp=z, vf_preds=z + 0.5, dist_inputs=z[..., None], rewards=z.copy(),
    ...     dones=np.zeros((3, 1), bool), prev_actions=None, prev_rewards=None,
    ...     last_values=np.array([0.25], np.float32), seq_starts=np.zeros((0, 2), np.int64),
    ...     seq_states=[], episode_returns=[], episode_lengths=[], valid=valid)
    >>> late = TurnSteps(1)
    >>> for t in range(3):  # at step 1 the other agent's move wins: the lane gets -1, done
    ...     late.add(np.array([t == 1]), np.array([-1.0 * (t == 1)]),
    ...              np.array([t == 1]), np.array([False]))
    >>> out = stitch_turns(batch, late, gamma=0.9)
    >>> out.obs[:, 0, 0].tolist(), out.rewards[:, 0].tolist(), out.dones[:, 0].tolist()
    ([0.0, 2.0, 1.0], [-1.0, 0.0, 0.25], [True, False, True])
    >>> out.valid[:, 0].tolist()
    [True, True, False]
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from rlblocks.nest import tree_map
from rlblocks.train.runner import SampleBatch

__all__ = ["TurnSteps", "stitch_turns"]


class TurnSteps:
    """The late outcomes of one policy's lanes, step by step over a rollout.

    Args:
        num_lanes: The policy's lanes.
    """

    def __init__(self, num_lanes: int) -> None:
        self.num_lanes = num_lanes
        self.late: list[np.ndarray] = []
        self.rewards: list[np.ndarray] = []
        self.terminated: list[np.ndarray] = []
        self.truncated: list[np.ndarray] = []

    def add(
        self, late: np.ndarray, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> None:
        """One step: the lanes whose outcome is late and each lane's reward and flags."""
        self.late.append(np.asarray(late, bool))
        self.rewards.append(np.asarray(rewards, np.float32))
        self.terminated.append(np.asarray(terminated, bool))
        self.truncated.append(np.asarray(truncated, bool))


def stitch_turns(batch: SampleBatch, steps: TurnSteps, gamma: float) -> SampleBatch:
    """``batch`` with the late outcomes of ``steps`` on each lane's moves and each lane's
    moves first in its column (module docstring).

    Raises:
        ValueError: ``batch`` has no ``valid`` rows, recurrent columns, or another length
            than ``steps``.
    """
    if batch.valid is None or batch.prev_actions is not None or batch.prev_rewards is not None:
        raise ValueError("a turn-based rollout needs valid rows and no recurrent columns")
    valid = np.asarray(batch.valid, bool)
    t_steps, n = valid.shape
    if len(steps.late) != t_steps or steps.num_lanes != n:
        raise ValueError(
            f"the rollout has {t_steps} steps of {n} lanes, its late outcomes "
            f"{len(steps.late)} of {steps.num_lanes}"
        )
    rewards = np.array(batch.rewards, np.float32)
    dones = np.array(batch.dones, bool)
    vf = np.asarray(batch.vf_preds, np.float32)
    lanes = np.arange(n)
    last = np.full(n, -1, np.int64)  # each lane's last open move in this rollout
    for t in range(t_steps):
        take = steps.late[t] & (last >= 0)
        if take.any():
            idx = lanes[take]
            rows = last[take]
            rewards[rows, idx] += steps.rewards[t][take]
            term, trunc = steps.terminated[t][take], steps.truncated[t][take]
            cut = trunc & ~term
            rewards[rows[cut], idx[cut]] += gamma * vf[rows[cut], idx[cut]]
            ended = term | trunc
            dones[rows, idx] |= ended
            last[idx[ended]] = -1
        moved = valid[t]
        last[moved] = t
        last[moved & dones[t]] = -1
    order = np.argsort(~valid, axis=0, kind="stable")  # each lane's moves first, in order
    counts = valid.sum(axis=0)

    def gather(a: Any) -> Any:
        return np.asarray(a)[order, lanes[None, :]]

    new_rewards, new_dones, new_vf = gather(rewards), gather(dones), gather(vf).copy()
    pad = np.arange(t_steps)[:, None] >= counts[None, :]
    new_rewards[pad], new_vf[pad], new_dones[pad] = 0.0, 0.0, True
    first = np.flatnonzero(counts < t_steps)
    if first.size:  # the lane's bootstrap value, with a zero advantage of its own
        boot = np.asarray(batch.last_values, np.float32)[first]
        new_vf[counts[first], first] = boot
        new_rewards[counts[first], first] = boot
    return dataclasses.replace(
        batch,
        obs=gather(batch.obs),
        actions=tree_map(gather, batch.actions),
        logp=gather(batch.logp),
        vf_preds=new_vf,
        dist_inputs=gather(batch.dist_inputs),
        rewards=new_rewards,
        dones=new_dones,
        valid=~pad,
    )
