"""Self-play opponents of a turn-based game: frozen snapshots of the learning policy, the
pool that keeps the newest of them and the schedule that says who plays which seat.

The learning policy (one ``shared`` policy for every seat) plays itself by default. With
``selfplay_snapshot_every`` = N > 0, every N iterations a frozen copy of it (its weights and
observation filter, a :class:`Snapshot`) joins an :class:`OpponentPool` of at most
``selfplay_pool_size`` snapshots (the oldest leaves). The :class:`SelfPlaySchedule` decides,
per env copy and per episode (at each game's start):

* the learner's seat: the copy's games alternate it over the seats (game ``k`` of copy ``e``
  seats the learner at ``(e + k) % seats``), so every seat is learnt from;
* the opponent: with probability ``selfplay_random_prob`` a random legal player
  (:class:`RandomOpponent`, a uniform move inside the action mask) plays every other seat
  of that game; else with probability ``selfplay_opponent_prob`` (and a non-empty pool) one
  snapshot drawn uniformly from the pool does; otherwise the learning policy plays every
  seat (plain self-play) and every seat's moves train;
* the random opening: with ``selfplay_random_opening`` = K > 0, the game's first ``k``
  moves, ``k`` drawn uniformly from 0 to K, are random legal moves of whichever seat is to
  move (:meth:`SelfPlaySchedule.opening_lanes`), so that the policy also learns from (and
  is punished in) positions its own play never leads to, as a weak opponent's would.

An opponent's moves (a snapshot's, sampled from its own distribution, or the random legal
player's, opening moves included) are never trained on: the trainer marks them as no transitions
(:meth:`SelfPlaySchedule.frozen_lanes`), so only the learner's seat of such a game trains
(its moves outside the mask are still counted). Snapshots act through the native policy's actor (the
numpy path :mod:`rlblocks.train.fast.choice` picks for the FC model). The pool and the
schedule are saved in checkpoints and restored with them.

Examples:
    >>> import gymnasium as gym
    >>> from rlblocks.catalog import ModelCatalog
    >>> from rlblocks.filters import get_filter
    >>> from rlblocks.train.trainer_config import PPOConfig
    >>> space = gym.spaces.Box(-1, 1, (3,))
    >>> prep = ModelCatalog.get_preprocessor_for_space(space)
    >>> make = lambda: Policy(prep.observation_space, gym.spaces.Discrete(2), PPOConfig())
    >>> pool = OpponentPool(2, make, prep)
    >>> learner = make()
    >>> for it in (10, 20, 30):
    ...     _ = pool.add(it, learner.model, get_filter("NoFilter", prep.shape))
    >>> [s.iteration for s in pool.snapshots]  # the newest two
    [20, 30]
    >>> schedule = SelfPlaySchedule(num_envs=2, seats=2, opponent_prob=1.0, seed=0)
    >>> schedule.start_all(pool)
    >>> schedule.learner_seat.tolist(), schedule.frozen_lanes().tolist()
    ([0, 1], [False, True, True, False])
    >>> opening = SelfPlaySchedule(num_envs=2, seats=2, opponent_prob=0.0, seed=0,
    ...     random_opening=3)
    >>> opening.start_all(pool)
    >>> opening.opening.tolist(), opening.opening_lanes().tolist()  # random moves left
    ([2, 1], [True, True, True, True])
    >>> opening.advance()  # every copy made a move
    >>> opening.opening.tolist(), opening.opening_lanes().tolist()
    ([1, 0], [True, True, False, False])
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rlblocks.masks import MASK_KEY
from rlblocks.preprocessors import Preprocessor
from rlblocks.train.policy import Policy

__all__ = ["OpponentPool", "RandomOpponent", "SelfPlaySchedule", "Snapshot", "act_for"]

#: How a checkpoint names the random legal opponent (snapshots are named by iteration).
RANDOM_NAME = "random"


def act_for(
    policy: Policy,
    preprocessor: Preprocessor,
    obs_filter: Any,
    raw: list[Any],
    explore: bool,
) -> Any:
    """``policy``'s actions for the union values ``raw`` (one row each), through
    ``preprocessor`` and ``obs_filter`` (not updated); greedy unless ``explore``."""
    x = np.asarray(obs_filter(preprocessor.transform_batch(raw), update=False))
    state = policy.initial_state(len(raw))
    return policy.act(x, state, explore=explore, full=False)["actions"]


class Snapshot:
    """A frozen copy of the learning policy, taken after iteration ``iteration``.

    Args:
        iteration: The training iteration it was taken after.
        policy: Its own :class:`~rlblocks.train.policy.Policy` (weights copied, no gradients).
        obs_filter: Its own copy of the observation filter.
        preprocessor: The learning policy's preprocessor (stateless, shared).
    """

    def __init__(
        self, iteration: int, policy: Policy, obs_filter: Any, preprocessor: Preprocessor
    ) -> None:
        self.iteration = iteration
        self.policy = policy
        self.obs_filter = obs_filter
        self.preprocessor = preprocessor

    def act(self, raw: list[Any], explore: bool = True) -> Any:
        """Actions for the union values ``raw`` (sampled unless ``explore`` is False)."""
        return act_for(self.policy, self.preprocessor, self.obs_filter, raw, explore)


class RandomOpponent:
    """The random legal player of the schedule: a uniform move inside each observation's
    ``action_mask`` (mask form, as ``TurnBasedVectorEnv.lane_obs`` gives it).

    Args:
        seed: Seed of its own random numbers (saved in checkpoints with the schedule).
    """

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def moves(self, observations: list[Any]) -> np.ndarray:
        """One legal move per observation.

        Raises:
            ValueError: an observation without an action mask, or whose mask allows nothing.
        """
        out = np.zeros(len(observations), np.int64)
        for i, obs in enumerate(observations):
            mask = obs.get(MASK_KEY) if isinstance(obs, dict) else None
            legal = None if mask is None else np.flatnonzero(np.asarray(mask).reshape(-1) > 0)
            if legal is None or not legal.size:
                raise ValueError(
                    f"the random legal opponent needs an action mask allowing a move, got {obs!r}"
                )
            out[i] = legal[int(self.rng.integers(legal.size))]
        return out


class OpponentPool:
    """At most ``size`` snapshots of the learning policy, the newest kept.

    Args:
        size: The pool's capacity (``selfplay_pool_size``).
        make_policy: Builds a fresh policy of the learner's shape (weights loaded after).
        preprocessor: The learning policy's preprocessor.
    """

    def __init__(
        self, size: int, make_policy: Callable[[], Policy], preprocessor: Preprocessor
    ) -> None:
        self.size = size
        self._make = make_policy
        self.preprocessor = preprocessor
        self.snapshots: list[Snapshot] = []

    def __len__(self) -> int:
        return len(self.snapshots)

    def _frozen(self, state: dict[str, Any]) -> Policy:
        policy = self._make()
        policy.model.load_state_dict(state)
        policy.model.requires_grad_(False)
        policy.model.eval()
        return policy

    def add(self, iteration: int, model: torch.nn.Module, obs_filter: Any) -> Snapshot:
        """Freezes ``model`` (weights copied) and ``obs_filter`` (copied) as the snapshot of
        ``iteration``; the oldest snapshot leaves a full pool."""
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        snap = Snapshot(
            iteration, self._frozen(state), copy.deepcopy(obs_filter), self.preprocessor
        )
        self.snapshots.append(snap)
        del self.snapshots[: -self.size]
        return snap

    def find(self, iteration: int) -> Snapshot | None:
        """The snapshot of ``iteration`` (None when it left the pool)."""
        return next((s for s in self.snapshots if s.iteration == iteration), None)

    def state_dict(self) -> list[dict[str, Any]]:
        """Each snapshot's iteration, weights and filter state, oldest first."""
        return [
            {
                "iteration": s.iteration,
                "model": s.policy.model.state_dict(),
                "filter": s.obs_filter.state_dict(),
            }
            for s in self.snapshots
        ]

    def load_state_dict(self, state: list[dict[str, Any]], obs_filter: Any) -> None:
        """Restores :meth:`state_dict` (``obs_filter``: a filter of the learner's kind)."""
        self.snapshots = []
        for item in state:
            filt = copy.deepcopy(obs_filter)
            filt.load_state_dict(item["filter"])
            policy = self._frozen(item["model"])
            self.snapshots.append(Snapshot(int(item["iteration"]), policy, filt, self.preprocessor))


class SelfPlaySchedule:
    """Who plays each game of each env copy: the learner's seat and the opponent (module
    docstring).

    Args:
        num_envs: Env copies.
        seats: The game's seats (agents; lane ``e * seats + j`` is seat ``j`` of copy ``e``).
        opponent_prob: Probability that a game is against a pool snapshot.
        seed: Seed of the schedule's own random numbers.
        random_prob: Probability that a game is against the random legal player (drawn
            before the pool's chance).
        random_opening: The most random legal moves a game opens with (drawn after the
            opponent; 0: none).

    Attributes:
        learner_seat: ``[num_envs]`` the learner's seat in each copy's current game.
        opponent: Per copy, the :class:`Snapshot` or the :class:`RandomOpponent` playing the
            other seats (None: the learning policy plays every seat).
        opening: ``[num_envs]`` the random opening moves left in each copy's current game.
    """

    def __init__(
        self,
        num_envs: int,
        seats: int,
        opponent_prob: float,
        seed: int,
        random_prob: float = 0.0,
        random_opening: int = 0,
    ) -> None:
        self.num_envs, self.seats, self.opponent_prob = num_envs, seats, opponent_prob
        self.random_prob = random_prob
        self.random_opening = random_opening
        self.opening = np.zeros(num_envs, np.int64)
        self._rng = np.random.default_rng(seed)
        self.random = RandomOpponent(seed + 1)
        self.games = np.zeros(num_envs, np.int64)
        self.learner_seat = np.zeros(num_envs, np.int64)
        self.opponent: list[Snapshot | RandomOpponent | None] = [None] * num_envs

    def start(self, e: int, pool: OpponentPool) -> None:
        """Copy ``e`` starts a game: its learner seat and opponent are drawn."""
        self.learner_seat[e] = (e + self.games[e]) % self.seats
        self.games[e] += 1
        self.opponent[e] = None
        if self.random_prob and self._rng.random() < self.random_prob:
            self.opponent[e] = self.random
        elif len(pool) and self._rng.random() < self.opponent_prob:
            self.opponent[e] = pool.snapshots[int(self._rng.integers(len(pool)))]
        if self.random_opening:
            self.opening[e] = self._rng.integers(self.random_opening + 1)

    def start_all(self, pool: OpponentPool) -> None:
        """Every copy starts a game."""
        for e in range(self.num_envs):
            self.start(e, pool)

    def frozen_lanes(self) -> np.ndarray:
        """Bool per lane: its seat is played by an opponent in the current game, or its
        copy's game is still in its random opening."""
        seat = np.arange(self.seats)[None, :]
        against = np.array([o is not None for o in self.opponent])[:, None]
        return (against & (seat != self.learner_seat[:, None])).reshape(-1) | self.opening_lanes()

    def opening_lanes(self) -> np.ndarray:
        """Bool per lane: its copy's game has random opening moves left (every seat)."""
        return np.repeat(self.opening > 0, self.seats)

    def advance(self) -> None:
        """Every copy made one move: one random opening move fewer where some are left."""
        np.maximum(self.opening - 1, 0, out=self.opening)

    def state_dict(self) -> dict[str, Any]:
        """The games played, current seats and opponents (snapshots by iteration, the random
        player as ``"random"``) and the RNGs."""
        return {
            "games": self.games.copy(),
            "learner_seat": self.learner_seat.copy(),
            "opponent": [_opponent_name(o) for o in self.opponent],
            "opening": self.opening.copy(),
            "rng": self._rng.bit_generator.state,
            "random_rng": self.random.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any], pool: OpponentPool) -> None:
        """Restores :meth:`state_dict` (opponents looked up in the restored ``pool``)."""
        self.games = np.asarray(state["games"], np.int64).copy()
        self.learner_seat = np.asarray(state["learner_seat"], np.int64).copy()
        self.opponent = [self._named(it, pool) for it in state["opponent"]]
        self.opening = np.asarray(state.get("opening", np.zeros(self.num_envs)), np.int64).copy()
        self._rng.bit_generator.state = state["rng"]
        if "random_rng" in state:
            self.random.rng.bit_generator.state = state["random_rng"]

    def _named(self, name: Any, pool: OpponentPool) -> Snapshot | RandomOpponent | None:
        if name is None:
            return None
        return self.random if name == RANDOM_NAME else pool.find(int(name))


def _opponent_name(opponent: Snapshot | RandomOpponent | None) -> int | str | None:
    if opponent is None:
        return None
    return RANDOM_NAME if isinstance(opponent, RandomOpponent) else opponent.iteration
