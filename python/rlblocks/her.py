"""Hindsight experience replay (HER): a sampler over :class:`rlblocks.replay.ReplayBuffer`
that relabels goals at sample time (Andrychowicz et al. 2017).

A goal-conditioned env observes a ``Dict`` with ``observation``, ``achieved_goal`` and
``desired_goal`` (gymnasium-robotics' ``GoalEnv``); the buffer stores each observation once
as its flat preprocessed row. :meth:`HindsightSampler.sample` draws a batch as the buffer
does, then, for the first ``n_sampled_goal / (n_sampled_goal + 1)`` of its rows (the HER
paper's k, Stable-Baselines3's ``her_ratio``), replaces the desired goal in ``obs`` and
``next_obs`` by a goal the same episode achieved, and recomputes their rewards:

* **Which goal.** A goal is an index of a stored step g of the same episode of the same env
  (never stored twice; never across an episode end or an overwritten slot): ``future``: g
  uniform among the sampled step t and the steps after it; ``final``: the episode's last
  step; ``episode``: g uniform over the episode's steps still in the ring. The still-running
  episode of an env offers only the steps already added whose next observation is stored.
* **What goal.** The achieved goal of step g is ``achieved_goal`` of the observation after
  g's action (g's next observation: the next step's observation, or the stored final one).
  So ``future`` with g = t relabels the transition with the goal it reached.
* **Rewards** are recomputed batched by ``reward_fn(achieved_goal, desired_goal, info)``
  (the env's ``compute_reward``; achieved goals of the rows' next observations, goals shaped
  as the space's ``achieved_goal``, float32; ``info`` an object array of empty dicts, one
  per row: infos are not stored). The other rows keep the env's rewards.
* **Discounts** (terminated flags) are the stored ones: gymnasium-robotics envs never
  terminate on success, so a relabelled success does not end the transition.

The choice of rows and goals draws from the buffer's generator (after the buffer's own
draws), so the native kernel and its numpy twin (:mod:`rlblocks._reference.her`) relabel
the same batch bit for bit and a buffer's state restores the sampler's exactly. HER needs
``n_step=1``, no frame stacking and uniform replay (each refused with one line otherwise).

Examples:
    >>> import gymnasium as gym
    >>> import numpy as np
    >>> from rlblocks.layout import layout
    >>> space = gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (3,)),
    ...     "achieved_goal": gym.spaces.Box(-1, 1, (2,)),
    ...     "desired_goal": gym.spaces.Box(-1, 1, (2,))})
    >>> cols = goal_columns(layout(space))  # keys sorted: achieved, desired, observation
    >>> cols.achieved, cols.desired, cols.shape
    (slice(0, 2, None), slice(2, 4, None), (2,))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from rlblocks import _core
from rlblocks._reference import her as _ref
from rlblocks.layout import Layout
from rlblocks.replay import ReplayBuffer, ReplaySample

__all__ = [
    "GOAL_KEYS",
    "HER_STRATEGIES",
    "GoalColumns",
    "HindsightSampler",
    "goal_columns",
    "is_goal_space",
]

#: The keys of a goal-conditioned observation (gymnasium-robotics' GoalEnv).
GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
#: The relabelling strategies.
HER_STRATEGIES = ("future", "final", "episode")

RewardFn = Callable[[np.ndarray, np.ndarray, Any], Any]


def is_goal_space(space: gym.Space) -> bool:
    """Whether ``space`` is a goal Dict (``observation``, ``achieved_goal``, ``desired_goal``).

    Examples:
        >>> is_goal_space(gym.spaces.Box(0, 1, (2,)))
        False
    """
    return isinstance(space, gym.spaces.Dict) and all(k in space.spaces for k in GOAL_KEYS)


@dataclass(frozen=True)
class GoalColumns:
    """Where the goals land in the flat preprocessed row."""

    achieved: slice  #: the ``achieved_goal`` columns
    desired: slice  #: the ``desired_goal`` columns
    shape: tuple[int, ...]  #: one goal's shape in the space (what ``compute_reward`` gets)


def goal_columns(lay: Layout) -> GoalColumns:
    """The goal columns of a goal Dict's layout (computed once per space).

    Raises:
        ValueError: Not a goal Dict, goals that are not plain Boxes, or achieved and desired
            goals of different shapes (one line naming the space).
    """
    space = lay.space
    if not isinstance(space, gym.spaces.Dict) or not is_goal_space(space):
        raise ValueError(
            "her: hindsight relabelling needs a goal Dict observation (keys 'observation', "
            f"'achieved_goal', 'desired_goal'), got {space}"
        )
    ag, dg = lay.find(("achieved_goal",)), lay.find(("desired_goal",))
    sa, sd = space["achieved_goal"], space["desired_goal"]
    for name, slot, sp in (("achieved_goal", ag, sa), ("desired_goal", dg, sd)):
        if slot.node.kind != "box" or slot.node.value_map != "identity":
            raise ValueError(
                f"her: the observation's {name!r} must be a Box (its values are the goal), got {sp}"
            )
    if sa.shape != sd.shape:
        raise ValueError(
            f"her: 'achieved_goal' {sa} and 'desired_goal' {sd} differ in shape; relabelling "
            "writes one into the other"
        )
    return GoalColumns(ag.columns, dg.columns, tuple(int(d) for d in (sa.shape or ())))


class HindsightSampler:
    """Samples a :class:`~rlblocks.replay.ReplayBuffer` with hindsight goals (module docstring).

    Args:
        replay: A uniform buffer of flat rows with ``n_step=1`` and no frame stacking.
        columns: :func:`goal_columns` of the observation space.
        reward_fn: ``reward_fn(achieved_goal, desired_goal, info)`` -> one reward per row.
        strategy: ``"future"``, ``"final"`` or ``"episode"``.
        n_sampled_goal: k >= 1: ``batch_size * k // (k + 1)`` rows of a batch are relabelled.

    Raises:
        ValueError: A prioritized buffer, n-step or stacked buffer, a bad strategy or k.
    """

    def __init__(
        self,
        replay: ReplayBuffer,
        columns: GoalColumns,
        reward_fn: RewardFn,
        strategy: str = "future",
        n_sampled_goal: int = 4,
    ) -> None:
        if replay.prioritized:
            raise ValueError(
                "her: hindsight relabelling samples uniformly; prioritized replay is not "
                "supported with it (set prioritized_replay=False or her=false)"
            )
        if strategy not in HER_STRATEGIES:
            raise ValueError(f"her_strategy: expected one of {HER_STRATEGIES}, got {strategy!r}")
        if isinstance(n_sampled_goal, bool) or not isinstance(n_sampled_goal, int):
            raise ValueError(f"her_n_sampled_goal: expected an int >= 1, got {n_sampled_goal!r}")
        if n_sampled_goal < 1:
            raise ValueError(f"her_n_sampled_goal: expected an int >= 1, got {n_sampled_goal!r}")
        core = replay.storage
        if int(core.n_step) != 1:
            raise ValueError(
                f"her: hindsight relabelling needs n_step=1 (a relabelled reward is one "
                f"step's), got n_step={int(core.n_step)}"
            )
        if int(core.frame_stack) != 0:
            raise ValueError("her: hindsight relabelling needs observations stored whole")
        self.replay = replay
        self.columns = columns
        self.reward_fn = reward_fn
        self.strategy = strategy
        self.n_sampled_goal = n_sampled_goal
        #: The goal leaves of the last batch (-1: a row left alone), for inspection.
        self.last_goals: np.ndarray = np.empty(0, np.int64)

    def n_relabel(self, batch_size: int) -> int:
        """Rows of a batch of ``batch_size`` that get a hindsight goal: ``B * k // (k + 1)``.

        Examples:
            >>> import numpy as np
            >>> from rlblocks.replay import ReplayBuffer
            >>> rb = ReplayBuffer(8, 1, (4,), np.float32)
            >>> cols = GoalColumns(slice(0, 2), slice(2, 4), (2,))
            >>> HindsightSampler(rb, cols, lambda a, d, i: 0.0, n_sampled_goal=4).n_relabel(256)
            204
        """
        k = self.n_sampled_goal
        return batch_size * k // (k + 1)

    def sample(
        self, batch_size: int, beta: float = 0.4, *, out: ReplaySample | None = None
    ) -> ReplaySample:
        """:meth:`ReplayBuffer.sample`, then the first :meth:`n_relabel` rows relabelled and
        their rewards recomputed (in place in the returned arrays).

        Raises:
            ValueError: As :meth:`ReplayBuffer.sample`; a reward function that returns other
                than one finite reward per row.
        """
        batch = self.replay.sample(batch_size, beta, out=out)
        b = batch.obs.shape[0]
        n = self.n_relabel(b)
        u = self.replay.uniforms(b)
        c = self.columns
        fn = _core.her_relabel if self.replay.native else _ref.her_relabel
        goals = fn(
            self.replay.storage,
            self.strategy,
            c.achieved.start,
            c.desired.start,
            c.desired.stop - c.desired.start,
            batch.indices,
            u,
            n,
            batch.obs,
            batch.next_obs,
        )
        self.last_goals = goals
        if n:
            achieved = batch.next_obs[:n, c.achieved].reshape(n, *c.shape)
            desired = batch.obs[:n, c.desired].reshape(n, *c.shape)
            info = np.empty(n, object)
            info[:] = [{} for _ in range(n)]
            batch.rewards[:n] = self._rewards(achieved, desired, info, n)
        return batch

    def _rewards(self, achieved: np.ndarray, desired: np.ndarray, info: Any, n: int) -> np.ndarray:
        try:
            r = np.asarray(self.reward_fn(achieved, desired, info), np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"her: compute_reward(achieved_goal, desired_goal, info) failed on a batch of "
                f"{n} goals: {err}"
            ) from err
        if r.shape != (n,):
            raise ValueError(
                f"her: compute_reward returned shape {r.shape} for a batch of {n} goals; "
                f"expected ({n},) (it must be batched: goals of shape ({n}, ...))"
            )
        if not np.isfinite(r).all():
            raise ValueError("her: compute_reward returned a non-finite reward")
        return r.astype(np.float32)
