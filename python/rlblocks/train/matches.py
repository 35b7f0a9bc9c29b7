"""Games of a turn-based env between the learner and an opponent, counted as wins, draws
and losses.

:func:`play_games` plays ``games`` whole games on a
:class:`~rlblocks.multiagent.turns.TurnBasedVectorEnv`; game ``g`` seats the learner at seat
``g % seats`` (seats alternate) and the opponent at every other seat. Each side is a
:data:`Mover`: it gets the agents to move and their observations (PettingZoo's mask dict in
RLlib's form, :func:`~rlblocks.masks.mask_form`) and returns their moves.
:func:`game_outcome` reads a game from its final returns (each agent's rewards summed over
the game; PettingZoo classic pays only at the end): a **win** when the learner's seat got
more than every other seat, a **draw** when it got as much as the best other seat, else a
**loss**. :func:`random_legal` is the random legal player (a uniform move among those the
action mask allows).

Examples:
    >>> game_outcome({"player_0": 1.0, "player_1": -1.0}, "player_0")
    'win'
    >>> game_outcome({"player_0": 0.0, "player_1": 0.0}, "player_1")
    'draw'
    >>> from rlblocks.envs.turn_zoo import env
    >>> from rlblocks.multiagent.turns import TurnBasedVectorEnv
    >>> hub = TurnBasedVectorEnv(env, num_envs=2)
    >>> rng = np.random.default_rng(0)
    >>> result = play_games(hub, random_legal(rng), random_legal(rng), games=6, seed=0)
    >>> sorted(result), result["games"]
    (['draws', 'games', 'losses', 'wins'], 6)
    >>> hub.close()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlblocks.masks import MASK_KEY
from rlblocks.multiagent.turns import TurnBasedVectorEnv

__all__ = ["Mover", "game_outcome", "play_games", "random_legal", "wdl_rates"]

#: One side of a game: ``(policy_id, agents, observations) -> moves`` (one per agent).
Mover = Callable[[str, list[Any], list[Any]], Any]


def game_outcome(returns: dict[Any, float], learner: Any) -> str:
    """``"win"``, ``"draw"`` or ``"loss"`` of seat ``learner`` from the agents' final
    returns (module docstring)."""
    mine = returns.get(learner, 0.0)
    best_other = max((r for a, r in returns.items() if a != learner), default=mine)
    if mine > best_other:
        return "win"
    return "draw" if mine == best_other else "loss"


def random_legal(rng: np.random.Generator) -> Mover:
    """A :data:`Mover` that plays a uniform legal move (the observation's ``action_mask``).

    Raises:
        ValueError: (when called) an observation without an action mask.
    """

    def move(policy_id: str, agents: list[Any], obs: list[Any]) -> np.ndarray:
        out = np.zeros(len(agents), np.int64)
        for i, (agent, o) in enumerate(zip(agents, obs, strict=True)):
            if not isinstance(o, dict) or MASK_KEY not in o:
                raise ValueError(
                    f"the random legal player needs an action_mask in agent {agent!r}'s observation"
                )
            legal = np.flatnonzero(np.asarray(o[MASK_KEY]).reshape(-1))
            out[i] = rng.choice(legal) if legal.size else 0
        return out

    return move


def play_games(
    hub: TurnBasedVectorEnv,
    learner: Mover,
    opponent: Mover,
    games: int,
    seed: int | None,
    on_game_end: Callable[[int, str], Any] | None = None,
) -> dict[str, int]:
    """Plays ``games`` games on ``hub``'s copies (reset with ``seed``), the learner's seat
    alternating (module docstring); ``{"games", "wins", "draws", "losses"}`` (the
    learner's). ``on_game_end(game, outcome)`` is called as each counted game ends."""
    seats = list(hub.agents)
    counts = {"games": 0, "wins": 0, "draws": 0, "losses": 0}
    hub.finished_games = []
    for pid in hub.specs:
        hub.reset_lanes(pid, seed)
    game_of = list(range(hub.num_envs))  # the game each copy plays
    started = hub.num_envs
    while counts["games"] < games:
        actions: dict[str, np.ndarray] = {}
        for pid, spec in hub.specs.items():
            lanes = np.flatnonzero(hub.live_lanes(pid))
            actions[pid] = np.zeros(hub.num_envs * len(spec.agents), np.int64)
            sides: dict[bool, list[tuple[int, Any, Any]]] = {True: [], False: []}
            for lane in lanes:
                agent, obs = hub.lane_obs(pid, int(lane))
                e = int(lane) // len(spec.agents)
                mine = seats.index(agent) == game_of[e] % len(seats)
                sides[mine].append((int(lane), agent, obs))
            for mine, rows in sides.items():
                if rows:
                    mover = learner if mine else opponent
                    moves = mover(pid, [r[1] for r in rows], [r[2] for r in rows])
                    actions[pid][[r[0] for r in rows]] = np.asarray(moves).reshape(-1)
        hub.step(actions)
        for e, returns in hub.finished_games:
            if game_of[e] < games:
                outcome = game_outcome(returns, seats[game_of[e] % len(seats)])
                counts["games"] += 1
                counts[{"win": "wins", "draw": "draws", "loss": "losses"}[outcome]] += 1
                if on_game_end is not None:
                    on_game_end(game_of[e], outcome)
            game_of[e] = started
            started += 1
        hub.finished_games.clear()
    return counts


def wdl_rates(counts: dict[str, int], suffix: str) -> dict[str, float]:
    """``win_rate``, ``draw_rate`` and ``loss_rate`` of :func:`play_games`' counts, each
    key ending in ``suffix``."""
    n = max(counts["games"], 1)
    return {
        f"win_rate{suffix}": counts["wins"] / n,
        f"draw_rate{suffix}": counts["draws"] / n,
        f"loss_rate{suffix}": counts["losses"] / n,
    }
