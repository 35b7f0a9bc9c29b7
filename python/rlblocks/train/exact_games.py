"""The exact chances of a deterministic policy against a uniformly random legal player in a
small turn-based game, found by enumerating every move the random player can make.

:func:`exact_versus_random` plays the learner's seat with a deterministic
:data:`~rlblocks.train.matches.Mover` (a greedy policy: the same move in the same position)
on a PettingZoo ``AECEnv`` and branches at each move of the other seats over every move
their action mask allows, each with probability ``1 / legal moves``, as
:func:`~rlblocks.train.matches.random_legal` draws them. Each finished game adds its
probability to its outcome (:func:`~rlblocks.train.matches.game_outcome`), so the result is
the exact probability of a win, a draw and a loss, where a sample of games only estimates
them. A loss probability of exactly 0 means the policy loses no game against the random
player, in any number of games; one above 0 gives the expected losses in ``n`` games with the
learner's seat alternating (:func:`expected_losses`).

The walk reaches each position by resetting the env (with ``seed``) and replaying the moves
that lead to it, so it suits games of a few thousand positions per seat (tictactoe: at
most 1,332 learner positions as the second player) and needs a game that is deterministic
given its seed and moves (PettingZoo classic games are); it refuses a game that needs more
than ``max_positions`` moves to walk (:data:`MAX_POSITIONS`), and a learner that does not
give one move per position it is asked. :func:`exact_refusal` checks a game against that
rule on one line of play before any walk.

Examples:
    >>> from rlblocks.envs.turn_zoo import CallTheMove
    >>> from rlblocks.masks import MASK_KEY, OBS_KEY
    >>> def asked(pid, agents, obs):  # CallTheMove's perfect player
    ...     return [int(np.argmax(o[OBS_KEY])) for o in obs]
    >>> exact_versus_random(CallTheMove(turns=1), asked, "player_0")
    {'win': 0.5, 'draw': 0.5, 'loss': 0.0}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlblocks.masks import MASK_KEY, mask_form
from rlblocks.train.matches import Mover, game_outcome

__all__ = ["MAX_POSITIONS", "exact_refusal", "exact_versus_random", "expected_losses"]

#: The most learner and random moves one walk plays before it refuses the game as too large.
MAX_POSITIONS = 20_000


def _settle(env: Any) -> Any:
    """Plays the ``None`` moves of agents that are done; the agent to move, None at the end."""
    for _ in range(4 * len(env.possible_agents) + 4):
        agents = list(getattr(env, "agents", []))
        if not agents:
            return None
        a = env.agent_selection
        if not (env.terminations.get(a, False) or env.truncations.get(a, False)):
            return a
        env.step(None)
    return None if not list(getattr(env, "agents", [])) else env.agent_selection


def _replay(env: Any, moves: tuple[int, ...], seed: int) -> dict[Any, float]:
    """Resets ``env`` with ``seed`` and plays ``moves``; each agent's rewards summed."""
    env.reset(seed=seed)
    returns: dict[Any, float] = {}
    for move in moves:
        _settle(env)
        before = list(env.agents)
        env.step(move)
        for a in before:
            returns[a] = returns.get(a, 0.0) + float(env.rewards.get(a, 0.0))
    return returns


def exact_versus_random(
    env: Any,
    learner: Mover,
    seat: Any,
    seed: int = 0,
    policy_of: Callable[[Any], str] = lambda agent: "shared",
    max_positions: int = MAX_POSITIONS,
) -> dict[str, float]:
    """The exact ``win`` / ``draw`` / ``loss`` probabilities of ``learner`` playing agent
    ``seat`` of ``env`` (a PettingZoo ``AECEnv``, reset here with ``seed``) against a
    uniformly random legal player on every other seat (module docstring).

    Args:
        env: The game; it is reset and played once per position.
        learner: A deterministic mover, called once per level of the walk with
            ``(policy_of(seat), [seat, ...], [observation, ...])``, one row per position
            (the observations in RLlib's mask form, :func:`~rlblocks.masks.mask_form`).
        seat: The learner's agent.
        seed: The seed of every reset (the game's own random draws replay with it).
        policy_of: The policy id of each agent (as the run maps it).
        max_positions: The most moves to play before refusing the game as too large.

    Raises:
        ValueError: A game larger than ``max_positions``, an opponent observation without an
            action mask or with no legal move, or a learner that does not give one move per
            position.
    """
    if seat not in env.possible_agents:
        raise ValueError(f"seat {seat!r} is not one of the game's agents {env.possible_agents}")
    out = {"win": 0.0, "draw": 0.0, "loss": 0.0}
    played = 0
    # level by level over positions, each one the moves that lead to it from the reset (an
    # env's copy need not hold its state: PettingZoo's EzPickle copies rebuild the env); the
    # learner's positions of a level are asked in one call
    level: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
    while level:
        asked: list[tuple[tuple[int, ...], float, Any, Any]] = []
        following: list[tuple[tuple[int, ...], float]] = []
        for moves, prob in level:
            returns = _replay(env, moves, seed)
            mover = _settle(env)
            if mover is None:
                out[game_outcome(returns, seat)] += prob
                continue
            obs = mask_form(env.observe(mover))
            if mover == seat:
                asked.append((moves, prob, mover, obs))
                continue
            if not isinstance(obs, dict) or MASK_KEY not in obs:
                raise ValueError(
                    f"the random legal player needs an action_mask in agent {mover!r}'s observation"
                )
            branches = np.flatnonzero(np.asarray(obs[MASK_KEY]).reshape(-1)).tolist()
            if not branches:
                raise ValueError(f"agent {mover!r} is to move with no legal move in its mask")
            following.extend(((*moves, int(m)), prob / len(branches)) for m in branches)
        if asked:
            chosen = np.asarray(
                learner(
                    policy_of(seat),
                    [seat] * len(asked),
                    [obs for _, _, _, obs in asked],
                )
            ).reshape(-1)
            if chosen.size != len(asked):
                raise ValueError(
                    f"the learner gave {chosen.size} moves for {len(asked)} position(s)"
                )
            following.extend(
                ((*moves, int(m)), prob)
                for (moves, prob, _, _), m in zip(asked, chosen, strict=True)
            )
        played += len(following)
        if played > max_positions:
            raise ValueError(_too_large(max_positions))
        level = following
    return out


def _too_large(max_positions: int) -> str:
    return (
        f"the game needs more than max_positions={max_positions} moves to walk "
        "exactly; exact scores are for small games (tictactoe), play games instead"
    )


def exact_refusal(env: Any, seed: int = 0, max_positions: int = MAX_POSITIONS) -> str | None:
    """Why :func:`exact_versus_random` cannot score ``env`` (a PettingZoo ``AECEnv``, reset
    here with ``seed``), or None when it can: the rule by which a run scores its policy
    exactly (``selfplay_eval_exact``), checked on one line of play, in milliseconds.

    The line: every seat plays its first legal move, twice from the same reset. Refused:
    an agent to move without an ``action_mask`` or with no legal move; a game the two
    plays of the same moves tell apart (observations, rewards: not deterministic given its
    seed and moves); a game whose walk, estimated from the line, needs more than
    ``max_positions`` moves (each seat's walk multiplies the branches of the other seats'
    moves along the line, level by level, and sums the levels: tictactoe 2,277 as the
    second player; connect_four is refused within its first ten moves).

    Examples:
        >>> from rlblocks.envs.turn_zoo import CallTheMove
        >>> exact_refusal(CallTheMove(turns=2)) is None
        True
        >>> exact_refusal(CallTheMove(turns=2), max_positions=3)[:40]
        'the game needs more than max_positions=3'
    """
    plays: list[list[tuple[Any, bytes, float]]] = []
    for _ in range(2):
        env.reset(seed=seed)
        line: list[tuple[Any, bytes, float]] = []
        walk = dict.fromkeys(env.possible_agents, 1.0)
        walked = dict.fromkeys(env.possible_agents, 0.0)
        while (mover := _settle(env)) is not None:
            obs = mask_form(env.observe(mover))
            if not isinstance(obs, dict) or MASK_KEY not in obs:
                return f"agent {mover!r} observes no action_mask"
            legal = np.flatnonzero(np.asarray(obs[MASK_KEY]).reshape(-1))
            if not legal.size:
                return f"agent {mover!r} is to move with no legal move in its mask"
            for seat in walk:
                walk[seat] *= 1 if seat == mover else legal.size
                walked[seat] += walk[seat]
            if max(walked.values()) > max_positions:
                return _too_large(max_positions)
            seen = b"".join(np.asarray(v).tobytes() for v in obs.values())
            env.step(int(legal[0]))
            reward = float(sum(float(r) for r in env.rewards.values()))
            line.append((mover, seen, reward))
        plays.append(line)
    if plays[0] != plays[1]:
        return "two plays of the same moves from the same seed differed (not deterministic)"
    return None


def expected_losses(loss_by_seat: list[float], games: int) -> tuple[float, float]:
    """``(expected losses, probability of no loss)`` in ``games`` games whose learner seat
    alternates over the seats (game ``g`` at seat ``g % seats``, as
    :func:`~rlblocks.train.matches.play_games` seats it), from each seat's exact loss
    probability.

    Examples:
        >>> expected_losses([0.0, 0.002], 500)[0]
        0.5
        >>> expected_losses([0.0, 0.0], 500)
        (0.0, 1.0)
    """
    seats = len(loss_by_seat)
    counts = [games // seats + (i < games % seats) for i in range(seats)]
    mean = sum(n * p for n, p in zip(counts, loss_by_seat, strict=True))
    none = float(np.prod([(1.0 - p) ** n for n, p in zip(counts, loss_by_seat, strict=True)]))
    return float(mean), none
