"""``rlblocks train --env ID`` alone: defaults decided from the env's spaces (continuous
control gets observation normalisation and reward scaling, printed and in config.json), a
user's ``--set`` wins, MountainCar's start names the tuned config that solves it, a goal
env alone trains the off-policy algorithm that relabels its goals (PPO, given, names it)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from rlblocks.cli import main

TINY = ["--set", "num_envs=2", "--set", "train_batch_size=64", "--stop-timesteps", "64"]


def _train(tmp_path: Path, *args: str) -> dict:
    run = tmp_path / "run"
    assert main(["train", *args, *TINY, "--no-progress", "--run-dir", str(run)]) == 0
    config: dict = json.loads((run / "config.json").read_text())
    return config


def test_continuous_control_normalises_by_default(tmp_path, capsys) -> None:
    config = _train(tmp_path, "--env", "Pendulum-v1")
    out = capsys.readouterr().out
    assert (
        "rlblocks train: continuous control (Box observations and actions): "
        "sgd_minibatch_size=64, observation_filter=MeanStdFilter, normalize_reward=True "
        "(--set any to change)"
    ) in out
    assert config["observation_filter"] == "MeanStdFilter"
    assert config["normalize_reward"] is True
    assert config["sgd_minibatch_size"] == 64


def test_a_vector_observation_trains_on_minibatches_of_64(tmp_path, capsys) -> None:
    """Issue 46 item 2: PPO's 256-row minibatches left CartPole at 71% and Pendulum at 63% of
    the tuned return at the zoo's budgets; a vector observation with the fully connected
    model gets Stable-Baselines3's 64 (printed, in config.json); a user's ``--set``, a
    recurrent model and an image observation keep 256."""
    config = _train(tmp_path, "--env", "CartPole-v1")
    assert (
        "rlblocks train: a vector observation (fully connected model): sgd_minibatch_size=64 "
        "(--set it to change)"
    ) in capsys.readouterr().out
    assert config["sgd_minibatch_size"] == 64
    config = _train(tmp_path / "set", "--env", "CartPole-v1", "--set", "sgd_minibatch_size=32")
    assert (
        config["sgd_minibatch_size"] == 32 and "a vector observation" not in capsys.readouterr().out
    )
    lstm = ["--set", "model.use_lstm=true", "--set", "model.lstm_cell_size=8"]
    config = _train(tmp_path / "lstm", "--env", "CartPole-v1", *lstm)
    assert (
        config["sgd_minibatch_size"] == 256
        and "a vector observation" not in capsys.readouterr().out
    )


def test_an_image_observation_keeps_256_row_minibatches() -> None:
    import gymnasium as gym
    from rlblocks.cli.train_defaults import EnvProbe, space_defaults
    from rlblocks.train.trainer_config import PPOConfig

    frames = gym.spaces.Box(0, 255, (84, 84, 4), dtype="uint8")
    probe = EnvProbe(frames, gym.spaces.Discrete(6), relabels=False)
    assert space_defaults(PPOConfig(env="CartPole-v1"), {}, probe)[0] == {}
    vector = EnvProbe(gym.spaces.Box(-1.0, 1.0, (4,)), gym.spaces.Discrete(2), relabels=False)
    keys = space_defaults(PPOConfig(env="CartPole-v1"), {}, vector)[0]
    assert keys == {"sgd_minibatch_size": 64}


def test_an_image_observation_anneals_the_learning_rate_to_the_budget(tmp_path, capsys) -> None:
    """Issue 46 item 2: on a solved grid one late iteration could leave MiniGrid-Empty-8x8's
    greedy policy in a loop (0.0 on 2 of 2 seeds at 100k with a constant rate); PPO with a
    Discrete action on an image observation anneals the rate to 0 at the run's budget
    (printed, in config.json), unless the user sets ``lr`` or ``lr_schedule``; a resume past
    the schedule's end, where nothing would learn, is refused."""
    from rlblocks.train.logger import read_progress

    config = _train(tmp_path, "--env", "rlblocks/zoo-Image-v0")
    assert (
        "rlblocks train: a Discrete action on an image observation: "
        "lr_schedule=[[0, 0.0003], [64, 0.0]] (--set it to change)"
    ) in capsys.readouterr().out
    assert config["lr_schedule"] == [[0, 0.0003], [64, 0.0]]
    run = tmp_path / "run"
    argv = ["train", "--resume", str(run), "--stop-timesteps", "128", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "rlblocks train: error: lr_schedule reaches a learning rate of 0 at 64 steps, before "
        "this run's budget (--stop-timesteps=128): the steps after 64 would not learn"
    )
    assert [int(r["timesteps_total"]) for r in read_progress(run)] == [64]  # nothing trained
    config = _train(tmp_path / "set", "--env", "rlblocks/zoo-Image-v0", "--set", "lr=0.001")
    assert config["lr_schedule"] is None and "image observation" not in capsys.readouterr().out
    assert _train(tmp_path / "vector", "--env", "CartPole-v1")["lr_schedule"] is None


def test_a_users_set_wins_and_discrete_envs_keep_rllibs_defaults(tmp_path, capsys) -> None:
    config = _train(tmp_path, "--env", "Pendulum-v1", "--set", "observation_filter=NoFilter")
    assert config["observation_filter"] == "NoFilter" and config["normalize_reward"] is True
    assert "normalize_reward=True (--set" in capsys.readouterr().out
    config = _train(tmp_path / "cartpole", "--env", "CartPole-v1")
    assert config["observation_filter"] == "NoFilter" and config["normalize_reward"] is False
    assert "continuous control" not in capsys.readouterr().out


def test_a_tuned_config_or_an_off_policy_algo_is_left_as_it_is(tmp_path, capsys) -> None:
    config = _train(tmp_path, "--tuned", "pendulum_sac", "--set", "learning_starts=16")
    assert config["observation_filter"] == "NoFilter"
    config = _train(tmp_path / "sac", "--algo", "SAC", "--env", "Pendulum-v1")
    assert config["observation_filter"] == "NoFilter"
    assert "continuous control" not in capsys.readouterr().out


@pytest.mark.parametrize("algo", ["PPO", "DQN"])
def test_mountaincar_names_the_tuned_config_that_solves_it(tmp_path, capsys, algo) -> None:
    small = ["--set", "learning_starts=16"] if algo == "DQN" else []
    _train(tmp_path, "--algo", algo, "--env", "MountainCar-v0", *small)
    assert (
        "rlblocks train: note: MountainCar-v0 is a hard-exploration env: these defaults will "
        "not solve it (the return stays -200); `rlblocks train --tuned mountaincar_dqn` does"
    ) in capsys.readouterr().out


@pytest.mark.parametrize("algo", ["PPO", "SAC"])
def test_mountaincar_continuous_names_the_gsde_config_that_solves_it(
    tmp_path, capsys, algo
) -> None:
    """Issue 46: the defaults stand still on MountainCarContinuous; the start says so (its id
    is not ``MountainCar-``, so it once stayed silent) and names ``mountaincarcontinuous_sac``,
    which explores with gSDE (it once said no config here solves it)."""
    small = ["--set", "learning_starts=16"] if algo == "SAC" else []
    _train(tmp_path, "--algo", algo, "--env", "MountainCarContinuous-v0", *small)
    out = capsys.readouterr().out
    assert (
        "rlblocks train: note: MountainCarContinuous-v0 is a hard-exploration env: these "
        "defaults will not solve it (PPO and SAC here learn to stand still"
    ) in out
    assert "gSDE" in out and "`rlblocks train --tuned mountaincarcontinuous_sac` does" in out


def test_a_turn_based_game_with_masks_gets_an_entropy_bonus_and_a_random_opening(
    tmp_path, capsys
) -> None:
    """``rlblocks train --env GAME`` on a turn-based game whose agents observe action masks
    (docs/multiagent.md, "Self-play": the bonus and the random opening are what keep
    tictactoe's greedy policy from losing to a random legal player) and, this game being
    small enough, the exact evaluation; a parallel env and a user's ``--set`` keep theirs."""
    pytest.importorskip("pettingzoo", reason="pettingzoo is the multiagent extra")
    from rlblocks.cli.train_defaults import EXACT_DEFAULTS, TURN_DEFAULTS

    config = _train(tmp_path, "--env", "rlblocks.envs.turn_zoo:env")
    given = {**TURN_DEFAULTS, **EXACT_DEFAULTS}
    shown = ", ".join(f"{k}={v}" for k, v in given.items())
    assert f"rlblocks train: a turn-based game with action masks: {shown} (--set" in (
        capsys.readouterr().out
    )
    assert all(config[k] == v for k, v in given.items())
    config = _train(
        tmp_path / "set", "--env", "rlblocks.envs.turn_zoo:env", "--set", "entropy_coeff=0"
    )
    assert config["entropy_coeff"] == 0 and config["selfplay_random_opening"] == 6
    assert (
        "with action masks: selfplay_random_opening=6, selfplay_eval_interval=5, "
        "selfplay_eval_games=500, selfplay_eval_exact=True (--set any to change)"
    ) in capsys.readouterr().out
    config = _train(tmp_path / "par", "--env", "rlblocks.envs.multiagent_zoo:parallel_env")
    assert config["entropy_coeff"] == 0 and "turn-based" not in capsys.readouterr().out


def test_ppo_on_a_goal_env_names_the_algo_that_relabels(tmp_path, capsys) -> None:
    config = _train(tmp_path, "--algo", "PPO", "--env", "rlblocks/zoo-GoalBox-v0")
    assert (
        "rlblocks train: note: rlblocks/zoo-GoalBox-v0 is a goal env: PPO does not relabel its "
        "goals; `--algo SAC` trains it with hindsight replay (her=auto turns it on; "
        "docs/goals.md)"
    ) in capsys.readouterr().out
    assert config["algo"] == "PPO" and "her" not in config
    config = _train(tmp_path / "cartpole", "--env", "CartPole-v1")
    assert "goal env" not in capsys.readouterr().out
    assert config["algo"] == "PPO"


#: Enough steps for SAC / DQN to take a gradient step within the tiny budget.
OFF_POLICY = ["--set", "learning_starts=16", "--set", "model.fcnet_hiddens=[8]"]


def test_a_goal_env_alone_trains_sac_with_her(tmp_path, capsys) -> None:
    """``--env GoalEnv`` alone (issue 47): the off-policy algorithm for its Box actions with
    hindsight relabelling, said at the start and in config.json; a key only SAC has is
    accepted (the algorithm is decided before the config class checks the keys)."""
    config = _train(tmp_path, "--env", "rlblocks/zoo-GoalBox-v0", *OFF_POLICY, "--set", "tau=0.01")
    out = capsys.readouterr().out
    assert (
        "rlblocks train: rlblocks/zoo-GoalBox-v0 is a goal env with a reward to recompute: "
        "--algo SAC (the off-policy algorithm for its Box actions) with hindsight relabelling"
    ) in out
    assert "--algo PPO, or another --algo, trains that instead" in out
    assert "rlblocks train: her: on (her=auto" in out and "PPO does not relabel" not in out
    assert config["algo"] == "SAC" and config["her"] is True and config["tau"] == 0.01


def test_a_discrete_goal_env_alone_trains_dqn_and_her_false_turns_it_off(tmp_path, capsys) -> None:
    config = _train(tmp_path, "--env", "rlblocks/zoo-Goal-v0", *OFF_POLICY, "--set", "her=false")
    out = capsys.readouterr().out
    assert "--algo DQN (the off-policy algorithm for its Discrete actions)" in out
    assert "rlblocks train: her: off (her=false)" in out
    assert config["algo"] == "DQN" and config["her"] is False


def test_a_ppo_key_on_a_goal_env_alone_names_the_choice(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    argv = ["train", "--env", "rlblocks/zoo-GoalBox-v0", "--set", "num_sgd_iter=3"]
    assert main([*argv, "--no-progress", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlblocks train: error: unknown SAC config key 'num_sgd_iter'")
    assert err.endswith(
        "(--env rlblocks/zoo-GoalBox-v0 is a goal env, so rlblocks train chose --algo SAC; "
        "give --algo PPO for PPO's keys)"
    )
    assert "\n" not in err and not run.exists()


def test_goal_algo_by_action_space_and_the_rllib_note() -> None:
    """Box -> SAC, Discrete -> DQN, any other action space keeps PPO (with a note that says
    no algorithm here relabels it); a goal env without a reward to recompute keeps PPO;
    --backend rllib keeps PPO and says what the native backend trains."""
    import gymnasium as gym
    from rlblocks.cli.train_defaults import EnvProbe, goal_algo_choice, goal_env_note

    bits = gym.spaces.Box(0.0, 1.0, (3,))
    goal = gym.spaces.Dict({"observation": bits, "achieved_goal": bits, "desired_goal": bits})
    multi = gym.spaces.MultiDiscrete([2, 2])
    assert goal_algo_choice("native", EnvProbe(goal, multi, True), "G") == (None, None)
    assert "no off-policy algorithm here acts in MultiDiscrete" in goal_env_note("G", goal, multi)
    assert goal_algo_choice("native", EnvProbe(goal, bits, False), "G") == (None, None)
    assert "goal_reward=module:function" in goal_env_note("G", goal, bits, relabels=False)
    assert goal_algo_choice("native", EnvProbe(bits, bits, True), "G") == (None, None)
    algo, line = goal_algo_choice("rllib", EnvProbe(goal, gym.spaces.Discrete(2), True), "G")
    assert algo is None and line == (
        "note: G is a goal env: --backend rllib trains PPO, which does not relabel its goals "
        "(hindsight relabelling is native only: the native backend trains it with --algo DQN "
        "and her=auto)"
    )


def test_dqn_on_a_vector_observation_takes_a_gradient_step_per_env_step(tmp_path, capsys) -> None:
    """Issue 46 item 2: DQN's defaults (one gradient step per 4 env steps, 1-step returns)
    left CartPole at 35% of the tuned return at the zoo's 50k steps; on a vector observation
    ``--env`` alone takes one gradient step per env step and 3-step returns (printed, in
    config.json); a user's ``--set`` wins, and a tuned config keeps its own."""
    small = ["--algo", "DQN", "--set", "learning_starts=16"]
    config = _train(tmp_path, *small, "--env", "CartPole-v1")
    assert (
        "rlblocks train: DQN on a vector observation: gradient_steps=4, n_step=3 "
        "(--set either to change)"
    ) in capsys.readouterr().out
    assert config["gradient_steps"] == config["train_freq"] == 4 and config["n_step"] == 3
    sets = ["--set", "train_freq=8", "--set", "n_step=1"]
    config = _train(tmp_path / "set", *small, "--env", "CartPole-v1", *sets)
    assert (config["gradient_steps"], config["n_step"]) == (8, 1)
    assert "gradient_steps=8 (--set it to change)" in capsys.readouterr().out
    # mountaincar_dqn: 8 gradient steps every 16 env steps, which the defaults would make 16
    config = _train(tmp_path / "tuned", "--tuned", "mountaincar_dqn", "--set", "learning_starts=16")
    assert (config["train_freq"], config["gradient_steps"]) == (16, 8)
    assert "vector observation" not in capsys.readouterr().out


def test_dqn_on_an_image_observation_keeps_its_defaults() -> None:
    import gymnasium as gym
    from rlblocks.cli.train_defaults import EnvProbe, dqn_space_defaults
    from rlblocks.train.offpolicy_config import DQNConfig

    frames = gym.spaces.Box(0, 255, (84, 84, 4), dtype="uint8")
    probe = EnvProbe(frames, gym.spaces.Discrete(6), relabels=False)
    assert dqn_space_defaults(DQNConfig(env="CartPole-v1"), {}, probe) == {}


class UnboundedControl(gym.Env):
    """MuJoCo's shape without MuJoCo: an unbounded vector observation, Box actions."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.normal(size=3).astype(np.float32), {}

    def step(self, action):
        obs = self.np_random.normal(size=3).astype(np.float32)
        return obs, -float(np.square(action).sum()), False, False, {}


def test_unbounded_continuous_control_starts_a_free_log_std_at_minus_2(tmp_path, capsys) -> None:
    """Issue 46 item 2: MuJoCo's locomotion (unbounded observations) learns far more with a
    small state-independent exploration noise at the start (docs/benchmarks.md); bounded
    continuous control (Pendulum) keeps the net's own log-std output."""
    gym.register("rlblocks_test/UnboundedControl-v0", entry_point=UnboundedControl)
    try:
        config = _train(tmp_path, "--env", "rlblocks_test/UnboundedControl-v0")
        out = capsys.readouterr().out
        assert (
            "rlblocks train: continuous control (Box actions, unbounded Box observations): "
            "model.free_log_std=True, model.log_std_init=-2.0, sgd_minibatch_size=64, "
            "observation_filter=MeanStdFilter, normalize_reward=True (--set any to change)"
        ) in out
        assert config["model"]["free_log_std"] is True
        assert config["model"]["log_std_init"] == -2.0
        # the user's own model keys stay, merged with these
        hidden = ["--set", "model.fcnet_hiddens=[8]"]
        config = _train(tmp_path / "hidden", "--env", "rlblocks_test/UnboundedControl-v0", *hidden)
        assert config["model"]["fcnet_hiddens"] == [8]
        assert config["model"]["free_log_std"] is True
        capsys.readouterr()
        # one of the keys set: neither is added (they belong together)
        mine = ["--set", "model.free_log_std=false"]
        config = _train(tmp_path / "mine", "--env", "rlblocks_test/UnboundedControl-v0", *mine)
        assert config["model"]["free_log_std"] is False and "log_std_init" not in config["model"]
        assert "model.log_std_init" not in capsys.readouterr().out
    finally:
        gym.registry.pop("rlblocks_test/UnboundedControl-v0")
    config = _train(tmp_path / "pendulum", "--env", "Pendulum-v1")
    assert "free_log_std" not in config["model"] and "log_std_init" not in config["model"]


#: Tuned configs that are the CLI's defaults for their env's spaces, key for key (the suites
#: table's defaults cell of a row flagged ``tuned_is_defaults`` in benchmarks/bench_suites.py
#: rests on it): each trains as ``--env`` alone does, on an env of the same kind of spaces.
DEFAULTS_AS_TUNED = {
    "pendulum_ppo": "Pendulum-v1",
    "hopper_ppo": "rlblocks_test/UnboundedControl-v0",
    "walker2d_ppo": "rlblocks_test/UnboundedControl-v0",
    "minigrid_empty8x8_ppo": "MiniGrid-Empty-8x8-v0",
    "minigrid_doorkey5x5_ppo": "MiniGrid-DoorKey-5x5-v0",
    "minigrid_doorkey8x8_ppo": "MiniGrid-DoorKey-8x8-v0",
    "minigrid_keycorridors3r1_ppo": "MiniGrid-KeyCorridorS3R1-v0",
}


@pytest.mark.parametrize("name", sorted(DEFAULTS_AS_TUNED))
def test_tuned_configs_that_are_the_defaults_train_as_the_defaults(
    tmp_path, monkeypatch, name
) -> None:
    from rlblocks.train.logger import read_progress
    from rlblocks.train.tuned import load_tuned

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    suites = importlib.import_module("bench_suites")
    assert {n for n, row in suites.ROWS.items() if row.tuned_is_defaults} == set(DEFAULTS_AS_TUNED)
    env = DEFAULTS_AS_TUNED[name]
    if env.startswith("MiniGrid-"):
        pytest.importorskip("minigrid")
    tuned = load_tuned(name)
    data = {**tuned.config, "env": env}
    if "lr_schedule" in data:  # the defaults anneal the rate to the run's budget: the tuned
        # config's schedule is theirs at its budget, and this run's at the test's
        assert data["lr_schedule"] == [[0, data["lr"]], [tuned.stop_timesteps, 0.0]]
        data["lr_schedule"] = [[0, data["lr"]], [192, 0.0]]
    (tmp_path / "tuned.json").write_text(json.dumps(data))
    gym.register("rlblocks_test/UnboundedControl-v0", entry_point=UnboundedControl)
    try:
        runs, configs = {}, {}
        for how, source in (("tuned", ["--config", str(tmp_path / "tuned.json")]),
                            ("defaults", ["--env", env])):  # fmt: skip
            run = tmp_path / how
            args = ["train", *source, "--seed", "3", "--no-progress", "--run-dir", str(run)]
            assert main([*args, *TINY[:4], "--stop-timesteps", "192"]) == 0
            runs[how] = read_progress(run)
            # every key but the model's, which a tuned config spells out where the defaults
            # leave MODEL_DEFAULTS' (the same net: the losses below compare it)
            configs[how] = json.loads((run / "config.json").read_text())
            configs[how].pop("model")
    finally:
        gym.registry.pop("rlblocks_test/UnboundedControl-v0")
    assert configs["tuned"] == configs["defaults"]
    keys = ("timesteps_total", "total_loss", "policy_loss", "vf_loss", "entropy", "kl")
    tuned, defaults = ([[row[k] for k in keys] for row in rows] for rows in runs.values())
    assert len(tuned) == 3 and tuned == defaults


def test_ant_names_the_contact_forces_and_the_tuned_config(tmp_path, capsys) -> None:
    """Issue 46: in 500k steps the defaults reached about 1,300 on Ant-v5, 2,600 without the
    78 contact forces in the observation (``ant_ppo``); the start says so, and is silent once
    the run leaves them out, and for SAC, where it was not measured (it named ``ant_ppo``)."""
    pytest.importorskip("mujoco")
    _train(tmp_path / "a", "--env", "Ant-v5")
    assert (
        "rlblocks train: note: Ant-v5's observation holds 78 noisy contact forces "
        "(include_cfrc_ext_in_observation)"
    ) in capsys.readouterr().out
    config = _train(
        tmp_path / "b",
        "--env",
        "Ant-v5",
        "--set",
        "env_config.include_cfrc_ext_in_observation=false",
    )
    assert config["env_config"] == {"include_cfrc_ext_in_observation": False}
    assert "contact forces" not in capsys.readouterr().out
    _train(tmp_path / "c", "--env", "Ant-v5", "--algo", "SAC")
    assert "rlblocks train: note:" not in capsys.readouterr().out


@pytest.mark.parametrize(("algo", "tuned"), [("PPO", "swimmer_ppo"), ("SAC", "swimmer_sac")])
def test_swimmer_names_the_tuned_config_of_the_algorithm(tmp_path, capsys, algo, tuned) -> None:
    """Issue 46: Swimmer's defaults discount its slow gait away (gamma 0.99); the start names
    the tuned config of the run's algorithm, and is silent once the run sets gamma 0.9999."""
    pytest.importorskip("mujoco")
    small = ["--set", "learning_starts=16"] if algo == "SAC" else []
    _train(tmp_path / "a", "--algo", algo, "--env", "Swimmer-v5", *small)
    out = capsys.readouterr().out
    assert "rlblocks train: note: Swimmer-v5 is a long-horizon env" in out
    assert f"`rlblocks train --tuned {tuned}` keeps rl-baselines3-zoo's gamma 0.9999" in out
    _train(tmp_path / "b", "--algo", algo, "--env", "Swimmer-v5", *small, "--set", "gamma=0.9999")
    assert "long-horizon" not in capsys.readouterr().out
