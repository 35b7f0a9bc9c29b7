"""Self-play in a multi-agent PPO run on a turn-based game: the opponent pool in the
rollouts and the win / draw / loss columns of ``progress.csv``.

:class:`SelfPlay` is what :class:`~rlblocks.train.multiagent.MultiAgentPPOTrainer` holds for a
turn-based game (:class:`~rlblocks.multiagent.turns.TurnBasedVectorEnv`):

* with ``selfplay_snapshot_every``, ``selfplay_random_prob`` or
  ``selfplay_random_opening`` > 0 (one ``shared`` policy for every seat), the pool and
  schedule of :mod:`rlblocks.train.opponents`: before each step the seats an opponent (a
  snapshot or the random legal player, which also plays the random opening moves) plays
  get its moves (:meth:`SelfPlay.before_step`), after it those moves are marked
  as no transitions (:meth:`SelfPlay.after_step`), and each game that starts draws its
  learner seat and opponent;
* with ``selfplay_eval_interval`` > 0 and an ``action_mask`` in every agent's observation,
  every that many iterations ``selfplay_eval_games`` games against a random legal player
  and as many against the pool (split evenly over its snapshots), the learner's seat
  alternating, the learner greedy and the snapshots sampling their own moves:
  ``selfplay/win_rate_random``, ``selfplay/draw_rate_random``, ``selfplay/loss_rate_random``
  and the same ending ``_pool`` (:func:`~rlblocks.train.matches.game_outcome` says what a
  win is); NaN in the other iterations and, for the pool, while it is empty.
  ``selfplay/pool_size`` counts the snapshots. The games against the random player score
  the policy for the run directory's ``best/`` checkpoint (:func:`games_score`, kept by
  :class:`~rlblocks.train.multiagent.MultiAgentPPOTrainer`), in two steps: a policy whose
  evaluation games score better than ``best/``'s score plays ``selfplay_eval_games`` fresh
  confirmation games against the random player (``selfplay/win_rate_confirm``,
  ``draw_rate_confirm``, ``loss_rate_confirm``; NaN in the other iterations), and only
  their score is compared with ``best/``'s and kept as it. One sample of games picks a
  policy partly for its luck; the fresh sample scores it without that luck;
* with ``selfplay_eval_exact`` (a game :func:`~rlblocks.train.exact_games.exact_refusal`
  admits: small, deterministic given its seed and moves), the evaluation against the random
  player is exact instead: :func:`~rlblocks.train.exact_games.exact_versus_random` from every
  seat, the seats' chances averaged into the ``selfplay/..._rate_random`` columns (the rates
  of infinitely many games, seats alternating), no confirmation games (an exact score has no
  luck to confirm away), and ``best/`` keeps the lowest exact loss, then the highest win
  (:func:`exact_score`). A score of 0 loss is a policy that loses no game to the random
  player, where 500 played games cannot tell it from one that loses one line in 945.

The evaluation games run on env copies of their own, with the RNG streams of training
left as they were.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from rlblocks.masks import MASK_KEY
from rlblocks.multiagent.turns import TurnBasedVectorEnv
from rlblocks.train.exact_games import exact_refusal, exact_versus_random
from rlblocks.train.matches import Mover, play_games, random_legal, wdl_rates
from rlblocks.train.opponents import (
    OpponentPool,
    RandomOpponent,
    SelfPlaySchedule,
    Snapshot,
    act_for,
)
from rlblocks.train.policy import Policy
from rlblocks.wrappers.vector_steps import StepResult

__all__ = [
    "CONFIRM_SEED",
    "SelfPlay",
    "exact_score",
    "games_score",
    "has_masks",
    "policy_mover",
    "snapshot_counts",
]

#: The ``progress.csv`` columns of a self-play evaluation.
RATE_COLUMNS = tuple(
    f"selfplay/{what}_rate_{vs}"
    for vs in ("random", "pool", "confirm")
    for what in ("win", "draw", "loss")
)

#: What the confirmation games' seeds start from (+ the run's seed + the iteration): games
#: the in-training evaluation (+ 10,000) and ``rlblocks evaluate`` (+ 1,000,003) never play.
CONFIRM_SEED = 20_000


def games_score(result: Mapping[str, Any], games: int, vs: str = "random") -> float | None:
    """The score ``run_dir/best`` keeps the policy by in a turn-based run: fewest losses to
    the random legal player, then most wins (``win_rate - (games + 1) * loss_rate``: one
    loss fewer in ``games`` games outweighs any number of wins), of the evaluation games
    (``vs="random"``) or of the confirmation games (``vs="confirm"``, :class:`SelfPlay`);
    None in an iteration without those games.

    Examples:
        >>> r = {"selfplay/win_rate_random": 0.9, "selfplay/loss_rate_random": 0.0}
        >>> games_score(r, 10) > games_score({**r, "selfplay/loss_rate_random": 0.1}, 10)
        True
        >>> games_score(r, 10, "confirm") is None
        True
    """
    win = float(result.get(f"selfplay/win_rate_{vs}", math.nan))
    loss = float(result.get(f"selfplay/loss_rate_{vs}", math.nan))
    if math.isnan(win) or math.isnan(loss):
        return None
    return win - (games + 1) * loss


def exact_score(result: Mapping[str, Any]) -> float | None:
    """The score ``run_dir/best`` keeps the policy by where the evaluation is exact
    (``selfplay_eval_exact``): lowest loss probability against the random legal player, then
    highest win probability (``win_rate - 1e9 * loss_rate``: losses closer than 1e-9 count
    as equal, a lower one outweighs any win); None in an iteration without the evaluation.

    Examples:
        >>> r = {"selfplay/win_rate_random": 0.9, "selfplay/loss_rate_random": 0.0}
        >>> exact_score(r) > exact_score({"selfplay/win_rate_random": 0.99,
        ...                               "selfplay/loss_rate_random": 1 / 945 / 2})
        True
    """
    return games_score(result, EXACT_GAMES)


#: :func:`exact_score` is :func:`games_score` of this many games (``games + 1`` the weight of
#: a loss).
EXACT_GAMES = 10**9 - 1


def has_masks(hub: Any) -> bool:
    """Whether ``hub`` is a turn-based game whose every agent observes an action mask."""
    if not isinstance(hub, TurnBasedVectorEnv):
        return False
    return all(
        isinstance(getattr(s, "spaces", None), Mapping) and MASK_KEY in getattr(s, "spaces", {})
        for s in hub.obs_spaces.values()
    )


def policy_mover(parts: Mapping[str, Any], hub: TurnBasedVectorEnv, explore: bool) -> Mover:
    """A :data:`~rlblocks.train.matches.Mover` of a run's policies (``parts``: each policy id's
    ``policy``, ``preprocessor`` and ``obs_filter``), greedy unless ``explore``."""

    def move(pid: str, agents: list[Any], obs: list[Any]) -> Any:
        spec, p = hub.specs[pid], parts[pid]
        raw = [spec.value(a, o) for a, o in zip(agents, obs, strict=True)]
        return act_for(p.policy, p.preprocessor, p.obs_filter, raw, explore)

    return move


def _snapshot_mover(snap: Snapshot, hub: TurnBasedVectorEnv) -> Mover:
    def move(pid: str, agents: list[Any], obs: list[Any]) -> Any:
        spec = hub.specs[pid]
        return snap.act([spec.value(a, o) for a, o in zip(agents, obs, strict=True)])

    return move


def snapshot_counts(
    hub: TurnBasedVectorEnv,
    learner: Mover,
    snapshots: list[Snapshot],
    games: int,
    seed: int | None,
) -> dict[str, int]:
    """:func:`~rlblocks.train.matches.play_games` against ``snapshots``, the ``games``
    split as evenly as they go (the first snapshots one more), counts summed."""
    total = {"games": 0, "wins": 0, "draws": 0, "losses": 0}
    for i, snap in enumerate(snapshots):
        n = games // len(snapshots) + (i < games % len(snapshots))
        if n:
            counts = play_games(hub, learner, _snapshot_mover(snap, hub), n, seed)
            for key in total:
                total[key] += counts[key]
    return total


class SelfPlay:
    """The self-play side of a turn-based multi-agent PPO run (module docstring).

    Args:
        hub: The training envs.
        parts: Each policy id's parts (``policy``, ``preprocessor``, ``obs_filter``, ``config``).
        config: The run's :class:`~rlblocks.train.trainer_config.PPOConfig`.
        seed: The run's seed.
        make_hub: Builds ``n`` fresh env copies for evaluation games.
        make_policy: Builds a fresh policy of the shared policy's shape.

    Raises:
        ValueError: A pool or random opponent asked of a game that is not turn-based or has
            more than one policy, or whose actions are not Discrete; a random opponent asked
            of a game whose agents do not all observe an action mask.
    """

    def __init__(
        self,
        hub: Any,
        parts: Mapping[str, Any],
        config: Any,
        seed: int,
        make_hub: Callable[[int], TurnBasedVectorEnv],
        make_policy: Callable[[], Policy],
    ) -> None:
        self.hub, self.parts, self.config = hub, parts, config
        self._make_hub = make_hub
        self._eval_hub: TurnBasedVectorEnv | None = None
        every = config.selfplay_snapshot_every
        self.pool: OpponentPool | None = None
        self.schedule: SelfPlaySchedule | None = None
        if every or config.selfplay_random_prob or config.selfplay_random_opening:
            self._check_pool(hub, config)
            (pid,) = hub.policy_ids
            self.policy_id = pid
            self.pool = OpponentPool(
                config.selfplay_pool_size, make_policy, parts[pid].preprocessor
            )
            self.schedule = SelfPlaySchedule(
                hub.num_envs,
                len(hub.agents),
                config.selfplay_opponent_prob,
                seed + 7919,
                config.selfplay_random_prob,
                config.selfplay_random_opening,
            )
            self.schedule.start_all(self.pool)
        self.evaluating = bool(config.selfplay_eval_interval) and has_masks(hub)
        self._seed = seed
        self._exact_hub: TurnBasedVectorEnv | None = None
        self.exact = bool(config.selfplay_eval_exact) and self.evaluating
        if config.selfplay_eval_exact:
            self._check_exact(hub, config, make_hub, seed)

    def _check_exact(
        self,
        hub: Any,
        config: Any,
        make_hub: Callable[[int], TurnBasedVectorEnv],
        seed: int,
    ) -> None:
        """Refuses ``selfplay_eval_exact`` where the game cannot be scored exactly; keeps the
        env copy the exact walks replay on."""
        where = f"selfplay_eval_exact=True: env {config.env_name!r}"
        if not isinstance(hub, TurnBasedVectorEnv) or not has_masks(hub):
            raise ValueError(
                f"{where} is not a turn-based game whose every agent observes an "
                "action_mask; exact scores are for such games (set false)"
            )
        self._exact_hub = make_hub(1)
        why = exact_refusal(self._exact_hub.envs[0], seed)
        if why is not None:
            self.close()
            raise ValueError(f"{where} cannot be scored exactly: {why} (set false)")

    @staticmethod
    def _check_pool(hub: Any, config: Any) -> None:
        where = (
            f"selfplay_snapshot_every={config.selfplay_snapshot_every}"
            if config.selfplay_snapshot_every
            else f"selfplay_random_prob={config.selfplay_random_prob}"
            if config.selfplay_random_prob
            else f"selfplay_random_opening={config.selfplay_random_opening}"
        )
        if not isinstance(hub, TurnBasedVectorEnv):
            raise ValueError(
                f"{where}: env {config.env_name!r} is not a turn-based game (a PettingZoo "
                "AECEnv); the opponent pool plays seats of turn-based games only (set 0)"
            )
        if len(hub.policy_ids) != 1:
            raise ValueError(
                f"{where}: the opponent pool needs one shared policy for every seat; "
                f"multiagent.policy_mapping={config.multiagent.get('policy_mapping')!r} gives "
                f"policies {list(hub.policy_ids)} (use 'shared')"
            )
        space = hub.specs[hub.policy_ids[0]].action_space
        if not hasattr(space, "n"):
            raise ValueError(f"{where}: the opponent pool needs Discrete actions, got {space}")
        for key in ("selfplay_random_prob", "selfplay_random_opening"):
            if getattr(config, key) and not has_masks(hub):
                raise ValueError(
                    f"{key}={getattr(config, key)}: the random legal player needs an "
                    f"action_mask in every agent's observation; env {config.env_name!r} has "
                    "none (set 0)"
                )

    @property
    def active(self) -> bool:
        """Whether the run has a pool or evaluates against opponents."""
        return self.pool is not None or self.evaluating

    # --- rollouts -----------------------------------------------------------------------------
    def before_step(self, actions: dict[str, Any]) -> np.ndarray | None:
        """Puts the opponents' and random opening moves into ``actions`` (a copy of the
        shared policy's); the lanes they played (None without a schedule)."""
        if self.schedule is None:
            return None
        pid = self.policy_id
        frozen = self.hub.live_lanes(pid) & self.schedule.frozen_lanes()
        lanes = np.flatnonzero(frozen)
        if lanes.size:
            out = np.array(actions[pid], copy=True)
            seats = len(self.hub.agents)
            groups: dict[int, list[int]] = {}
            for i in lanes.tolist():
                groups.setdefault(i // seats, []).append(i)
            by_snap: dict[int, tuple[Snapshot | RandomOpponent, list[int]]] = {}
            for e, rows in groups.items():
                if self.schedule.opening[e] > 0:  # the random opening: every seat
                    snap: Snapshot | RandomOpponent | None = self.schedule.random
                else:
                    snap = self.schedule.opponent[e]
                assert snap is not None
                by_snap.setdefault(id(snap), (snap, []))[1].extend(rows)
            spec = self.hub.specs[pid]
            for snap, rows in by_snap.values():
                seen = [self.hub.lane_obs(pid, row) for row in rows]
                if isinstance(snap, RandomOpponent):
                    moves = snap.moves([obs for _, obs in seen])
                else:
                    moves = snap.act([spec.value(agent, obs) for agent, obs in seen])
                out[rows] = np.asarray(moves).reshape(len(rows), *out.shape[1:])
            actions[pid] = out
        return frozen

    def after_step(self, results: dict[str, StepResult], frozen: np.ndarray | None) -> None:
        """Marks the snapshots' moves as no transitions and draws the seats and opponents
        of the games that start (``results`` changed in place)."""
        if self.schedule is None or frozen is None:
            return
        pid = self.policy_id
        res = results[pid]
        if res.valid is not None and frozen.any():
            results[pid] = res._replace(valid=res.valid & ~frozen)
        self.schedule.advance()  # every copy moved once
        if res.starts is not None and res.starts.any():
            assert self.pool is not None
            started = res.starts.reshape(self.hub.num_envs, -1).any(axis=1)
            for e in np.flatnonzero(started):
                self.schedule.start(int(e), self.pool)

    # --- iterations ---------------------------------------------------------------------------
    def end_iteration(self, iteration: int, best_score: float | None = None) -> dict[str, float]:
        """Adds a snapshot when one is due and plays the evaluation games when due, and the
        confirmation games when those score better than ``best_score`` (``best/``'s score;
        None: no ``best/`` is kept); the iteration's ``selfplay/...`` columns."""
        out: dict[str, float] = {}
        if self.pool is not None:
            every = self.config.selfplay_snapshot_every
            if every and iteration % every == 0:
                p = self.parts[self.policy_id]
                self.pool.add(iteration, p.policy.model, p.obs_filter)
            out["selfplay/pool_size"] = float(len(self.pool))
        if self.evaluating:
            out.update(dict.fromkeys(RATE_COLUMNS, math.nan))
            if iteration % self.config.selfplay_eval_interval == 0:
                games = self.config.selfplay_eval_games
                if self.exact:  # no luck to confirm away
                    out.update(self.exact_rates())
                    out.update(self.evaluate(games, random=False))
                    return out
                out.update(self.evaluate(games))
                score = games_score(out, games)
                if best_score is not None and score is not None and score > best_score:
                    out.update(self.confirm(games, self._seed + CONFIRM_SEED + iteration))
        return out

    def confirm(self, games: int, seed: int) -> dict[str, float]:
        """``games`` greedy games against a random legal player, reset with ``seed``: the
        ``selfplay/..._rate_confirm`` columns."""
        return {
            k.replace("_random", "_confirm"): v
            for k, v in self.evaluate(games, seed, pool=False).items()
        }

    def exact_rates(self) -> dict[str, float]:
        """The greedy policy's exact chances against a random legal player, averaged over
        the seats: the ``selfplay/..._rate_random`` columns of an exact evaluation."""
        hub = self._exact_hub
        assert hub is not None
        env = hub.envs[0]
        owner = {a: pid for pid, spec in hub.specs.items() for a in spec.agents}
        with torch.random.fork_rng(devices=[]):
            learner = policy_mover(self.parts, hub, explore=False)
            seats = [
                exact_versus_random(env, learner, seat, self._seed, owner.__getitem__)
                for seat in env.possible_agents
            ]
        return {
            f"selfplay/{k}_rate_random": float(np.mean([s[k] for s in seats]))
            for k in ("win", "draw", "loss")
        }

    def evaluate(
        self, games: int, seed: int | None = None, pool: bool = True, random: bool = True
    ) -> dict[str, float]:
        """``games`` greedy games against a random legal player (with ``random``) and, with
        ``pool``, as many against the pool (when it has snapshots): the ``selfplay/...``
        rate columns."""
        if self._eval_hub is None:
            self._eval_hub = self._make_hub(min(games, 8))
        hub = self._eval_hub
        seed = self._seed + 10_000 if seed is None else seed
        out: dict[str, float] = {}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            learner = policy_mover(self.parts, hub, explore=False)
            if random:
                rng = np.random.default_rng(seed)
                counts = play_games(hub, learner, random_legal(rng), games, seed)
                out.update(wdl_rates(counts, "_random"))
            if pool and self.pool is not None and len(self.pool):
                counts = snapshot_counts(hub, learner, self.pool.snapshots, games, seed)
                out.update(wdl_rates(counts, "_pool"))
        return {f"selfplay/{k}": v for k, v in out.items()}

    # --- checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The pool's snapshots and the schedule (empty without a pool)."""
        if self.pool is None or self.schedule is None:
            return {}
        return {"pool": self.pool.state_dict(), "schedule": self.schedule.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any], envs_restored: bool) -> None:
        """Restores :meth:`state_dict` (games restart their draws when the envs restarted)."""
        if self.pool is None or self.schedule is None or not state:
            return
        self.pool.load_state_dict(state["pool"], self.parts[self.policy_id].obs_filter)
        self.schedule.load_state_dict(state["schedule"], self.pool)
        if not envs_restored:
            self.schedule.start_all(self.pool)

    def close(self) -> None:
        """Closes the evaluation envs."""
        if self._eval_hub is not None:
            self._eval_hub.close()
            self._eval_hub = None
        if self._exact_hub is not None:
            self._exact_hub.close()
            self._exact_hub = None
