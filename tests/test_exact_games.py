"""The exact chances of a deterministic policy against a random legal player
(``rlblocks.train.exact_games``): closed forms on the bundled turn-based game, a Monte-Carlo
estimate on tictactoe, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="pettingzoo is the multiagent extra")

TICTACTOE = "pettingzoo.classic.tictactoe_v3:env"
CONNECT_FOUR = "pettingzoo.classic.connect_four_v3:env"


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
    with pytest.raises(ValueError, match=r"the learner gave 2 moves for 1 position\(s\)"):
        exact_versus_random(CallTheMove(), lambda p, a, o: [0, 1], "player_0")


class _Counted:
    """A PettingZoo env whose ``step`` calls are counted (everything else passed through)."""

    def __init__(self, env) -> None:  # type: ignore[no-untyped-def]
        self.env, self.steps = env, 0

    def step(self, action) -> None:  # type: ignore[no-untyped-def]
        self.steps += 1
        self.env.step(action)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.env, name)


def test_exact_scoring_admits_tictactoe_and_refuses_connect_four_within_a_few_moves() -> None:
    """The rule (``exact_refusal``) on one line of play: tictactoe's walk is small; connect
    four.s is refused on its first line, before its tenth move, not after a long walk."""
    pytest.importorskip("pettingzoo.classic.connect_four_v3", reason="PettingZoo classic")
    from pettingzoo.classic import connect_four_v3, tictactoe_v3
    from rlblocks.train.exact_games import exact_refusal

    ttt = _Counted(tictactoe_v3.env())
    assert exact_refusal(ttt) is None
    assert ttt.steps <= 2 * 9  # the line played twice
    four = _Counted(connect_four_v3.env())
    why = exact_refusal(four)
    assert why is not None and why.startswith("the game needs more than max_positions=20000")
    assert four.steps < 10


def test_exact_scoring_refuses_a_game_that_is_not_deterministic_given_its_seed() -> None:
    from rlblocks.envs.turn_zoo import CallTheMove
    from rlblocks.train.exact_games import exact_refusal

    class Unseeded(CallTheMove):
        def reset(self, seed=None, options=None) -> None:  # type: ignore[no-untyped-def]
            super().reset(None, options)  # the asked moves go on from the last game's draws

    game = Unseeded(turns=3)
    game.reset(seed=5)
    assert exact_refusal(game) == (
        "two plays of the same moves from the same seed differed (not deterministic)"
    )
    assert exact_refusal(CallTheMove(turns=3)) is None


def test_cli_defaults_choose_the_exact_evaluation_for_tictactoe_not_connect_four() -> None:
    pytest.importorskip("pettingzoo.classic.connect_four_v3", reason="PettingZoo classic")
    from rlblocks.cli.train_defaults import turn_based_defaults
    from rlblocks.train.trainer_config import PPOConfig

    ttt = turn_based_defaults(PPOConfig.from_dict({"env": TICTACTOE}), {})
    assert ttt["selfplay_eval_exact"] is True and ttt["selfplay_eval_interval"] == 5
    four = turn_based_defaults(PPOConfig.from_dict({"env": CONNECT_FOUR}), {})
    assert "selfplay_eval_exact" not in four and four["selfplay_eval_interval"] == 10
    mine = turn_based_defaults(
        PPOConfig.from_dict({"env": TICTACTOE}), {"selfplay_eval_exact": False}
    )
    assert "selfplay_eval_exact" not in mine and mine["selfplay_eval_interval"] == 10


def test_best_holds_the_lowest_exact_loss_and_a_game_too_large_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """With ``selfplay_eval_exact``: each evaluation is the exact chances against the random
    player (no confirmation games), best/ the iteration of the lowest exact loss, then the
    highest win, its policy scoring exactly what its row says; resumed, the best score of
    that kind is kept. connect_four is refused at the start, in one line."""
    pytest.importorskip("pettingzoo.classic.connect_four_v3", reason="PettingZoo classic")
    import csv
    import json
    import math

    from rlblocks.train import MultiAgentPPOTrainer, restore_trainer
    from rlblocks.train.checkpoint import select_checkpoint
    from rlblocks.train.exact_games import exact_versus_random
    from rlblocks.train.selfplay import exact_score, policy_mover

    cfg = {"env": TICTACTOE, "num_envs": 4, "train_batch_size": 256, "sgd_minibatch_size": 64,
           "num_sgd_iter": 4, "lr": 3e-3, "seed": 2, "selfplay_eval_interval": 1,
           "selfplay_eval_exact": True, "checkpoint_freq": 1, "keep_checkpoints": 0}  # fmt: skip
    with MultiAgentPPOTrainer(cfg, run_dir=tmp_path) as trainer:
        trainer.fit(stop_iters=3, progress=False)
    rows = list(csv.DictReader((tmp_path / "progress.csv").open()))
    assert all(math.isnan(float(r["selfplay/loss_rate_confirm"])) for r in rows)
    losses = [float(r["selfplay/loss_rate_random"]) for r in rows]
    assert len(set(losses)) == 3  # three policies that lose differently
    scores = [exact_score(r) for r in rows]
    top = max(s for s in scores if s is not None)
    meta = json.loads((tmp_path / "best" / "meta.json").read_text())
    assert meta["best_by"] == "selfplay/exact_vs_random"
    assert meta["iteration"] == 1 + scores.index(top) and meta["best_score"] == top
    assert losses[scores.index(top)] == min(losses)
    assert select_checkpoint(tmp_path)[0] == tmp_path / "best"  # what evaluate loads
    best = restore_trainer(tmp_path / "best", log=False)
    hub = best.fresh_hub(1)
    try:
        mover = policy_mover(best.policies, hub, explore=False)
        env = hub.envs[0]
        again = [exact_versus_random(env, mover, s, seed=2) for s in env.possible_agents]
    finally:
        hub.close()
        best.close()
    row = rows[scores.index(top)]
    for what in ("win", "draw", "loss"):
        mean = float(np.mean([a[what] for a in again]))
        assert mean == pytest.approx(float(row[f"selfplay/{what}_rate_random"]), abs=1e-12)
    resumed = restore_trainer(tmp_path / "checkpoint_000001")  # best/ saved after it
    try:
        assert resumed.best_by() == "selfplay/exact_vs_random" and resumed.best_score == top
    finally:
        resumed.close()
    with pytest.raises(ValueError) as refused:
        MultiAgentPPOTrainer({"env": CONNECT_FOUR, "selfplay_eval_exact": True})
    assert str(refused.value) == (
        f"selfplay_eval_exact=True: env {CONNECT_FOUR!r} cannot be scored exactly: the game "
        "needs more than max_positions=20000 moves to walk exactly; exact scores are for small "
        "games (tictactoe), play games instead (set false)"
    )
