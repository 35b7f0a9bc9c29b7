"""The exact chances of a deterministic policy against a random legal player
(``rlblocks.train.exact_games``): closed forms on the bundled turn-based game, a Monte-Carlo
estimate on tictactoe, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="pettingzoo is the multiagent extra")


def _asked(pid, agents, obs):  # type: ignore[no-untyped-def]
    """CallTheMove's perfect player: the asked move."""
    return [int(np.argmax(o["observations"])) for o in obs]


def _other(pid, agents, obs):  # type: ignore[no-untyped-def]
    """The legal move that is not the asked one: never scores."""
    return [int(np.flatnonzero(o["action_mask"] * (1 - o["observations"]))[0]) for o in obs]


@pytest.mark.parametrize("turns", [1, 2, 3])
@pytest.mark.parametrize("seat", ["player_0", "player_1"])
def test_call_the_move_scores_its_closed_forms(turns: int, seat: str) -> None:
    from rlblocks.envs.turn_zoo import CallTheMove
    from rlblocks.train.exact_games import exact_versus_random

    # the random player makes the asked move in each of its turns with probability 1/2: it
    # matches a perfect player (1 per game) only when it hits every turn, (1/2)**turns
    every = 0.5**turns
    perfect = exact_versus_random(CallTheMove(turns=turns), _asked, seat, seed=3)
    assert perfect == pytest.approx({"win": 1 - every, "draw": every, "loss": 0.0})
    # a player that never scores draws only when the random player never hits
    never = exact_versus_random(CallTheMove(turns=turns), _other, seat, seed=3)
    assert never == pytest.approx({"win": 0.0, "draw": every, "loss": 1 - every})


def test_tictactoe_exact_chances_match_a_monte_carlo_estimate() -> None:
    pytest.importorskip("pettingzoo.classic.tictactoe_v3", reason="PettingZoo classic")
    from pettingzoo.classic import tictactoe_v3
    from rlblocks.multiagent.turns import TurnBasedVectorEnv
    from rlblocks.train.exact_games import exact_versus_random, expected_losses
    from rlblocks.train.matches import play_games, random_legal

    def lowest(pid, agents, obs):  # type: ignore[no-untyped-def]
        return [int(np.flatnonzero(o["action_mask"])[0]) for o in obs]

    env = tictactoe_v3.env()
    exact = {s: exact_versus_random(env, lowest, s) for s in env.possible_agents}
    for chances in exact.values():
        assert sum(chances.values()) == pytest.approx(1.0)
        assert min(chances.values()) > 0.0  # this weak player wins, draws and loses
    games = 1000
    hub = TurnBasedVectorEnv(tictactoe_v3.env, num_envs=8)
    try:
        counts = play_games(hub, lowest, random_legal(np.random.default_rng(1)), games, 1)
    finally:
        hub.close()
    for what, key in (("win", "wins"), ("draw", "draws"), ("loss", "losses")):
        p = float(np.mean([exact[s][what] for s in exact]))  # seats alternate
        assert abs(counts[key] / games - p) < 4 * np.sqrt(p * (1 - p) / games) + 1e-9
    mean, none = expected_losses([exact[s]["loss"] for s in exact], games)
    assert mean == pytest.approx(games / 2 * sum(exact[s]["loss"] for s in exact))
    assert 0.0 <= none < 1e-6


def test_exact_scores_refuse_a_large_game_a_wrong_seat_and_a_bad_learner() -> None:
    from rlblocks.envs.turn_zoo import CallTheMove
    from rlblocks.train.exact_games import exact_versus_random

    with pytest.raises(ValueError, match=r"more than max_positions=10 moves .* play games"):
        exact_versus_random(CallTheMove(turns=6), _asked, "player_0", max_positions=10)
    with pytest.raises(ValueError, match=r"seat 'nobody' is not one of the game's agents"):
        exact_versus_random(CallTheMove(), _asked, "nobody")
    with pytest.raises(ValueError, match="the learner gave 2 moves for one position"):
        exact_versus_random(CallTheMove(), lambda p, a, o: [0, 1], "player_0")
