"""Turn-based games (PettingZoo AEC envs taken as they are): TurnBasedVectorEnv, the stitching
of late outcomes onto each agent's moves, the trainer and the CLI (learning, legal moves
only, evaluation, the RLlib backend's refusal)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from rlblocks.train.learners.ppo import compute_gae
from rlblocks.train.runner import SampleBatch
from rlblocks.train.turn_batches import TurnSteps, stitch_turns

from tests.conftest import run_cli

pytest.importorskip("pettingzoo", reason="pettingzoo is the multiagent extra")

GAME = "rlblocks.envs.turn_zoo:env"


def _hub(num_envs: int = 2):  # type: ignore[no-untyped-def]
    from rlblocks.envs.turn_zoo import env
    from rlblocks.multiagent.turns import TurnBasedVectorEnv

    return TurnBasedVectorEnv(env, num_envs)


def _asked(raw: list) -> np.ndarray:  # type: ignore[type-arg]
    """Each lane's asked move (the one-hot of its observation)."""
    return np.array([int(np.argmax(v["observations"])) for v in raw])


def test_only_the_agent_to_move_acts_and_the_others_get_their_outcome_late() -> None:
    hub = _hub()
    try:
        spec = hub.specs["shared"]
        # PettingZoo's Dict(observation, action_mask) is read as RLlib's mask form
        assert set(spec.observation_space.spaces) == {"action_mask", "observations"}
        raw = hub.reset_lanes("shared", seed=0)
        for move in range(6):  # 3 moves each, player_0 first
            mover = np.array([move % 2 == 0, move % 2 == 1] * 2)
            assert hub.live_lanes("shared").tolist() == mover.tolist()
            for lane in np.flatnonzero(mover):  # the mover's mask allows its asked move
                assert raw[lane]["action_mask"][_asked(raw)[lane]] == 1.0
            res = hub.step({"shared": _asked(raw)})["shared"]
            assert res.valid.tolist() == mover.tolist()
            assert res.info["late"].tolist() == (~mover).tolist()
            raw = res.raw
        # the last move ends both games: every lane ends, each player scored 3 of 3
        assert res.terminated.all() and res.rewards.tolist() == [1.0] * 4
        assert res.starts.all() and hub.episodes_total == 2 and hub.illegal_moves == 0
        assert hub.metrics()["agent_episode_return_mean/player_0"] == 1.0
    finally:
        hub.close()


def test_a_move_outside_the_mask_is_counted_and_ends_the_game_for_its_player() -> None:
    hub = _hub(1)
    try:
        raw = hub.reset_lanes("shared", seed=3)
        illegal = int(np.flatnonzero(raw[0]["action_mask"] == 0)[0])
        res = hub.step({"shared": np.array([illegal, 0])})["shared"]
        assert hub.illegal_moves == 1 and hub.metrics()["illegal_moves_total"] == 1.0
        assert res.rewards.tolist() == [-1.0, 0.0] and res.terminated.tolist() == [True, True]
        assert res.valid.tolist() == [True, False] and res.info["late"].tolist() == [False, True]
    finally:
        hub.close()


def test_a_turn_based_game_is_not_converted_to_the_parallel_api() -> None:
    from rlblocks.envs.multiagent_zoo import env as parallel_born
    from rlblocks.envs.turn_zoo import env
    from rlblocks.multiagent.envs import as_parallel_env
    from rlblocks.multiagent.turns import is_turn_based_env, multiagent_vector_env

    with pytest.raises(ValueError, match="is a turn-based PettingZoo AECEnv"):
        as_parallel_env(env())
    assert not is_turn_based_env(parallel_born())  # parallel_to_aec: stepped in parallel
    hub = multiagent_vector_env(parallel_born, 1)
    try:
        assert type(hub).__name__ == "MultiAgentVectorEnv"
    finally:
        hub.close()


def _batch(valid: np.ndarray, vf: np.ndarray, last: np.ndarray) -> SampleBatch:
    t, n = valid.shape
    z = np.zeros((t, n), np.float32)
    return SampleBatch(
        obs=np.arange(t * n, dtype=np.float32).reshape(t, n, 1),
        actions=np.arange(t * n).reshape(t, n),
        logp=z,
        vf_preds=vf.astype(np.float32),
        dist_inputs=z[..., None],
        rewards=z.copy(),
        dones=np.zeros((t, n), bool),
        prev_actions=None,
        prev_rewards=None,
        last_values=last.astype(np.float32),
        seq_starts=np.zeros((0, 2), np.int64),
        seq_states=[],
        episode_returns=[],
        episode_lengths=[],
        valid=valid,
    )


def test_stitching_gives_gae_over_each_agents_own_moves() -> None:
    # two lanes taking turns; lane 0 moves at 0, 2, 4, lane 1 at 1, 3, 5; the game ends at
    # step 3 (lane 1's move wins: +1 to it, -1 late to lane 0), a new one starts at step 4
    valid = np.array([[t % 2 == 0, t % 2 == 1] for t in range(6)])
    rng = np.random.default_rng(0)
    vf = rng.normal(size=(6, 2))
    batch = _batch(valid, vf, np.array([0.3, -0.2]))
    batch.rewards[3, 1], batch.dones[3, 1] = 1.0, True
    steps = TurnSteps(2)
    for t in range(6):
        late = ~valid[t]
        rewards = np.array([-1.0 if t == 3 else 0.0, 0.0])
        steps.add(late, rewards, np.array([t == 3, False]), np.zeros(2, bool))
    gamma, lam = 0.9, 0.8
    out = stitch_turns(batch, steps, gamma)
    assert out.valid.sum(axis=0).tolist() == [3, 3] and out.num_steps == 6
    assert out.actions[:3, 0].tolist() == [0, 4, 8] and out.actions[:3, 1].tolist() == [3, 7, 11]
    assert out.rewards[:3, 0].tolist() == [0.0, -1.0, 0.0]  # the loss arrived on move 2
    assert out.dones[:3, 0].tolist() == [False, True, False]
    assert out.rewards[:3, 1].tolist() == [0.0, 1.0, 0.0]
    assert out.dones[:3, 1].tolist() == [False, True, False]
    adv, _ = compute_gae(out.rewards, out.vf_preds, out.dones, out.last_values, gamma, lam)
    for lane in range(2):  # GAE of the lane's own moves alone, by hand
        rows = np.flatnonzero(valid[:, lane])
        own = _batch(np.ones((3, 1), bool), vf[rows, lane : lane + 1], batch.last_values[[lane]])
        want, _ = compute_gae(
            out.rewards[:3, lane : lane + 1],
            own.vf_preds,
            out.dones[:3, lane : lane + 1],
            own.last_values,
            gamma,
            lam,
        )
        np.testing.assert_allclose(adv[:3, lane], want[:, 0], rtol=1e-5)
        assert (adv[3:, lane] == 0.0).all()  # padding: no advantage, dropped as not valid


def test_tictactoe_rollouts_pay_each_loss_to_the_losers_last_move_on_both_seats() -> None:
    # a real game: the winner's +1 comes with its own move, the loser's -1 arrives while the
    # other agent moves (late) and must end the loser's last move; from fresh games no game
    # ends on a rollout's first step, so every decisive game shows both ends in the batch
    pytest.importorskip("pettingzoo.classic.tictactoe_v3", reason="PettingZoo classic")
    from rlblocks.train import MultiAgentPPOTrainer

    trainer = MultiAgentPPOTrainer(
        {"env": "pettingzoo.classic.tictactoe_v3:env", "num_envs": 4, "seed": 3}
    )
    try:
        batch = trainer._collect(64)["shared"]
    finally:
        trainer.close()
    valid = np.asarray(batch.valid)
    rewards, dones = batch.rewards[valid], batch.dones[valid]
    wins, losses = int(((rewards == 1) & dones).sum()), int(((rewards == -1) & dones).sum())
    assert wins == losses > 0
    assert not (rewards[~dones] != 0).any()  # tictactoe pays only at the end
    seats = valid.sum(axis=0).reshape(4, 2)  # lanes: (env copy, seat); both seats train
    assert (seats > 0).all() and (seats[:, 0] >= seats[:, 1]).all()  # player_1 moves first


def test_a_late_truncation_is_bootstrapped_from_the_agents_last_observation() -> None:
    valid = np.array([[True, False], [False, True]])
    vf = np.array([[0.5, 0.0], [0.0, 0.7]])
    batch = _batch(valid, vf, np.zeros(2))
    steps = TurnSteps(2)
    steps.add(np.array([False, True]), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool))
    steps.add(np.array([True, False]), np.array([0.25, 0.0]), np.zeros(2, bool), [True, True])
    out = stitch_turns(batch, steps, gamma=0.5)
    assert out.rewards[0, 0] == pytest.approx(0.25 + 0.5 * 0.5) and out.dones[0, 0]


def test_cli_learns_the_turn_based_game_with_defaults_and_legal_moves_only(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    done = run_cli(
        "train", "--env", GAME, "--no-progress", "--run-dir", str(run), "--stop-timesteps", "16384"
    )
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader((run / "progress.csv").open()))
    assert all(float(r["illegal_moves_total"]) == 0.0 for r in rows)
    # random legal moves score 0.5 per player; player_0's reward always arrives late (the
    # game ends on player_1's move), so it learns only through the stitching. The training
    # games open with 0 to 6 random moves (selfplay_random_opening=6, a default), 3 of the
    # 6 on average, which score as random: a perfect policy's games score 0.75 there; the
    # greedy evaluation below plays without them
    for player in ("player_0", "player_1"):
        assert float(rows[-1][f"agent_episode_return_mean/{player}"]) >= 0.65
    shown = run_cli("evaluate", str(run), "--episodes", "20")
    assert shown.returncode == 0, shown.stderr
    result = json.loads(shown.stdout.strip().splitlines()[-1])
    assert result["episode_return_mean"] >= 1.8 and result["episode_len_mean"] == 6.0
    again = run_cli("train", "--resume", str(run), "--no-progress", "--stop-timesteps", "18432")
    assert again.returncode == 0, again.stderr
    rows = list(csv.DictReader((run / "progress.csv").open()))
    assert int(rows[-1]["timesteps_total"]) == 18432 and float(rows[-1]["illegal_moves_total"]) == 0


def test_tictactoe_trains_an_iteration_with_legal_moves_only(tmp_path: Path) -> None:
    pytest.importorskip("pettingzoo.classic.tictactoe_v3", reason="PettingZoo classic")
    run = tmp_path / "run"
    small = ["--set", "train_batch_size=512", "--set", "sgd_minibatch_size=128"]
    env = "pettingzoo.classic.tictactoe_v3:env"
    done = run_cli(
        "train",
        "--env",
        env,
        *small,
        "--no-progress",
        "--run-dir",
        str(run),
        "--stop-timesteps",
        "512",
    )
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader((run / "progress.csv").open()))
    assert float(rows[-1]["illegal_moves_total"]) == 0.0 and float(rows[-1]["episodes_total"]) > 0
    config = json.loads((run / "config.json").read_text())["multiagent_policies"]["shared"]
    assert (
        config["agents"] == ["player_1", "player_2"]
        and "action_mask" in config["observation_space"]
    )
    shown = run_cli("evaluate", str(run), "--episodes", "3")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout.strip().splitlines()[-1])["episodes"] == 3


@pytest.mark.ray
def test_the_rllib_adapter_asks_only_the_mover_and_pays_each_agent_at_its_next_move() -> None:
    """RLlib's env of a turn-based game: one observation (the mover's) per step, an agent's
    rewards reported with its next observation or its end, every agent that moved ended at
    the game's end, the sums equal to PettingZoo's own returns; masked-out moves counted."""
    from pettingzoo.classic import tictactoe_v3
    from rlblocks.rllib.turn_env import TurnBasedMultiAgentEnv

    game = TurnBasedMultiAgentEnv(tictactoe_v3.env())
    rng = np.random.default_rng(0)
    outcomes = set()
    for seed in range(30):
        obs, _ = game.reset(seed=seed)
        twin = tictactoe_v3.env()  # the same moves on PettingZoo's env, stepped by hand
        twin.reset(seed=seed)
        paid = {a: 0.0 for a in game.possible_agents}
        truth = {a: 0.0 for a in game.possible_agents}
        moved: set = set()
        over = False
        while not over:
            (mover,) = obs  # only the agent to move observes
            moved.add(mover)
            move = int(rng.choice(np.flatnonzero(obs[mover]["action_mask"])))
            obs, rewards, terminated, truncated, _ = game.step({mover: move})
            assert twin.agent_selection == mover
            twin.step(move)
            for a in moved:  # PettingZoo's rewards of this move to the agents that moved
                truth[a] += float(twin.rewards[a])
            assert set(rewards) <= set(obs) and set(rewards) <= moved
            for a, r in rewards.items():
                paid[a] += r
            over = terminated["__all__"] or truncated["__all__"]
            if not over:
                assert len(obs) == 1 and not any(terminated[a] for a in obs)
        assert set(obs) == moved and all(terminated[a] for a in moved)
        assert paid == truth and sorted(paid.values()) in ([-1.0, 1.0], [0.0, 0.0])
        outcomes.add(max(paid.values()))
    assert outcomes == {0.0, 1.0} and game.illegal_moves == 0  # wins and draws were played
    obs, _ = game.reset(seed=0)
    (mover,) = obs
    taken = int(np.flatnonzero(obs[mover]["action_mask"])[0])
    game.step({mover: taken})
    (other,) = game.reset(seed=0)[0]
    game.step({other: taken})  # a legal move again: the board was reset
    (nxt,) = game.aec_env.agents[1:2]
    game.step({nxt: taken})  # the square is taken: outside the mask, played and counted
    assert game.illegal_moves == 1
    with pytest.raises(ValueError, match="asks for a move of"):
        game.step({"nobody": 0})


def test_rllib_backend_refuses_native_self_play_keys_in_one_line(tmp_path: Path) -> None:
    out = run_cli(
        "train",
        "--env",
        GAME,
        "--backend",
        "rllib",
        "--set",
        "selfplay_snapshot_every=2",
        "--run-dir",
        str(tmp_path / "r"),
    )
    assert out.returncode != 0
    assert out.stderr.count("\n") == 1 and "selfplay_snapshot_every=2" in out.stderr
    assert "native-trainer option" in out.stderr and not (tmp_path / "r").exists()


def test_turn_based_games_refuse_recurrent_models_and_reward_scaling() -> None:
    from rlblocks.train import MultiAgentPPOTrainer

    with pytest.raises(ValueError, match="model.use_lstm=True: env .* is a turn-based game"):
        MultiAgentPPOTrainer({"env": GAME, "model": {"use_lstm": True}})
    with pytest.raises(ValueError, match="normalize_reward / clip_reward"):
        MultiAgentPPOTrainer({"env": GAME, "normalize_reward": True})


def test_compute_single_action_reads_pettingzoos_mask_dict_and_honours_the_mask() -> None:
    from rlblocks.envs.turn_zoo import env
    from rlblocks.train import MultiAgentPPOTrainer

    trainer = MultiAgentPPOTrainer({"env": GAME, "num_envs": 1})
    try:
        game = env()
        for seed in range(20):
            game.reset(seed=seed)
            obs = game.observe("player_0")  # {"observation", "action_mask"}, as PettingZoo's
            move, _ = trainer.compute_single_action(obs, agent="player_0", explore=True)
            assert obs["action_mask"][int(move)] == 1
    finally:
        trainer.close()
