"""Tuned configs: every file is a valid config, the CLI runs them, and one whose code path
no cheaper test learns (the autoregressive model and distribution) reaches its stated return
here (the rest are rerun by benchmarks/bench_tuned.py; the LSTM and attention wrappers learn
the zoo's recall tasks in tests/learning/test_zoo.py)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import gymnasium as gym
import pytest
import yaml
from rlblocks.catalog import ModelCatalog
from rlblocks.cli import main
from rlblocks.train import PPOConfig, PPOTrainer
from rlblocks.train.logger import read_progress
from rlblocks.train.tuned import TUNED_DIR, list_tuned, load_tuned, tuned_for

NAMES = [p.stem for p in sorted(TUNED_DIR.glob("*.yaml"))]


def test_the_tuned_configs_cover_the_issue_list() -> None:
    envs = {t.env for t in list_tuned()}
    assert {
        "CartPole-v1",
        "Acrobot-v1",
        "Pendulum-v1",
        "rlblocks/StatelessCartPole-v0",
        "rlblocks/RepeatAfterMe-v0",
        "rlblocks/ParametricCartPole-v0",
        "rlblocks/CorrelatedActions-v0",
        "rlblocks/DictCartPole-v0",
        "LunarLander-v3",
        "ALE/Pong-v5",
        "ALE/Breakout-v5",
        # issue 46: the classic-control, Box2D and MiniGrid suites against rl-zoo3's table
        "MountainCar-v0",
        "MountainCarContinuous-v0",
        "LunarLanderContinuous-v3",
        "BipedalWalker-v3",
        "MiniGrid-Empty-8x8-v0",
        "MiniGrid-DoorKey-5x5-v0",
        "MiniGrid-DoorKey-8x8-v0",
        "MiniGrid-KeyCorridorS3R1-v0",
    } <= envs
    assert tuned_for("rlblocks/StatelessCartPole-v0", "use_lstm") == ["stateless_cartpole_lstm"]
    assert tuned_for("rlblocks/StatelessCartPole-v0", "use_attention") == [
        "stateless_cartpole_attention"
    ]


SUITES = {
    "CartPole-v1": ("cartpole", {"PPO", "DQN"}),
    "Acrobot-v1": ("acrobot", {"PPO", "DQN"}),
    "MountainCar-v0": ("mountaincar", {"DQN"}),
    "MountainCarContinuous-v0": ("mountaincarcontinuous", {"SAC"}),
    "Pendulum-v1": ("pendulum", {"PPO", "SAC", "TD3"}),
    "LunarLander-v3": ("lunarlander", {"PPO", "DQN"}),
    "LunarLanderContinuous-v3": ("lunarlandercontinuous", {"SAC"}),
    "BipedalWalker-v3": ("bipedalwalker", {"SAC"}),
    "MiniGrid-Empty-8x8-v0": ("minigrid_empty8x8", {"PPO"}),
    "MiniGrid-DoorKey-5x5-v0": ("minigrid_doorkey5x5", {"PPO"}),
    "MiniGrid-DoorKey-8x8-v0": ("minigrid_doorkey8x8", {"PPO"}),
    "MiniGrid-KeyCorridorS3R1-v0": ("minigrid_keycorridors3r1", {"PPO"}),
    "Hopper-v5": ("hopper", {"PPO", "SAC", "TD3"}),  # the mujoco extra (the zoo's entries)
    "HalfCheetah-v5": ("halfcheetah", {"PPO", "SAC", "TD3"}),
    "Walker2d-v5": ("walker2d", {"PPO", "SAC"}),
    "Ant-v5": ("ant", {"PPO", "SAC"}),
    "Swimmer-v5": ("swimmer", {"PPO", "SAC"}),
}


def test_the_suite_configs_are_named_env_algo_and_old_names_still_load(capsys) -> None:
    for env, (stem, algos) in SUITES.items():
        for algo in algos:
            tuned = load_tuned(f"{stem}_{algo.lower()}")
            assert (tuned.env, tuned.algo) == (env, algo)
            assert tuned.stop_reward is not None and tuned.stop_timesteps
            # rl-zoo3's number and budget beside it (MiniGrid: the zoo publishes none)
            assert (tuned.zoo is None) == env.startswith("MiniGrid"), tuned.name
    for old, new in (("cartpole", "cartpole_ppo"), ("acrobot", "acrobot_ppo")):
        assert load_tuned(old).name == new and load_tuned(old).config == load_tuned(new).config
    assert main(["tuned", "pendulum"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["env"] == "Pendulum-v1"


@pytest.mark.parametrize("name", NAMES)
def test_each_tuned_config_is_valid_and_builds(name: str) -> None:
    tuned = load_tuned(name)
    assert tuned.description and tuned.stop_reward is not None and tuned.stop_timesteps
    if tuned.extra is not None:  # an extra of pyproject.toml; CI does not install robotics
        tomllib = pytest.importorskip("tomllib")  # Python 3.11+
        with open(Path(__file__).parents[1] / "pyproject.toml", "rb") as f:
            extras = tomllib.load(f)["project"]["optional-dependencies"]
        assert tuned.extra in extras, (tuned.extra, sorted(extras))
        module = {
            "robotics": "gymnasium_robotics",
            "highway": "highway_env",
            "mujoco": "mujoco",
        }.get(tuned.extra)
        if module is not None:
            pytest.importorskip(module, reason=f'pip install "rlblocks[{tuned.extra}]"')
    # the off-policy trainers (their learning runs: tests/learning/test_offpolicy_learning.py)
    if tuned.algo in ("DQN", "SAC", "TD3", "DDPG"):
        from rlblocks.cli.train_help import config_class as config_of
        from rlblocks.train import offpolicy

        config_class = config_of(tuned.algo)
        trainer_class = getattr(offpolicy, f"{tuned.algo}Trainer")
        config_class.from_dict(tuned.config)  # every key known, every value in range
        if "GPU" in tuned.hardware:  # a long CPU run (BipedalWalker's SAC) still smoke-runs
            return
        small = {
            "timesteps_per_iteration": 64,
            "learning_starts": 32,
            "replay_capacity": 256,
            "train_batch_size": min(32, tuned.config.get("train_batch_size", 32)),
        }
        with trainer_class({**tuned.config, **small}) as trainer:
            assert trainer.train()["timesteps_total"] == 64
        return
    PPOConfig.from_dict(tuned.config)  # every key known, every value in range
    if tuned.hardware != "CPU":  # Atari: the model needs ale-py's envs; build the config only
        return
    with PPOTrainer(
        {
            **tuned.config,
            "num_envs": 2,
            "train_batch_size": 64,
            "sgd_minibatch_size": 32,
            "num_sgd_iter": 1,
        }
    ) as trainer:
        assert trainer.train()["timesteps_total"] == 64


@pytest.mark.parametrize("name", ["correlated_actions"])
def test_tuned_config_reaches_its_return_from_the_cli(name: str, tmp_path) -> None:
    run = tmp_path / name
    assert main(["train", "--tuned", name, "--no-progress", "--run-dir", str(run)]) == 0
    rows = read_progress(run)
    tuned = load_tuned(name)
    assert rows[-1]["episode_return_mean"] >= tuned.stop_reward
    assert rows[-1]["timesteps_total"] <= tuned.stop_timesteps


def test_set_overrides_a_tuned_config_and_its_stop_block_applies(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--tuned",
                "cartpole",
                "--set",
                "num_envs=2",
                "--set",
                "train_batch_size=64",
                "--stop-timesteps",
                "128",
                "--no-progress",
                "--run-dir",
                str(run),
            ]
        )
        == 0
    )
    assert "until a mean return >= 475.0 or 128 steps" in capsys.readouterr().out
    assert [r["timesteps_total"] for r in read_progress(run)] == [64, 128]


def test_a_config_file_stop_block(tmp_path, capsys) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "env": "CartPole-v1",
                "num_envs": 2,
                "train_batch_size": 64,
                "stop": {"timesteps_total": 64},
            }
        )
    )
    assert (
        main(["train", "--config", str(path), "--no-progress", "--run-dir", str(tmp_path / "run")])
        == 0
    )
    assert [r["timesteps_total"] for r in read_progress(tmp_path / "run")] == [64]
    path.write_text(yaml.safe_dump({"env": "CartPole-v1", "stop": {"reward": 1}}))
    assert main(["train", "--config", str(path)]) == 2
    assert "stop: unknown keys ['reward']" in capsys.readouterr().err


def test_memory_alone_gets_a_one_line_hint(tmp_path, capsys) -> None:
    assert (
        main(
            [
                "train",
                "--env",
                "rlblocks/StatelessCartPole-v0",
                "--set",
                "model.use_lstm=true",
                "--set",
                "num_envs=2",
                "--set",
                "train_batch_size=64",
                "--stop-timesteps",
                "64",
                "--no-progress",
                "--run-dir",
                str(tmp_path / "a"),
            ]
        )
        == 0
    )
    hints = [ln for ln in capsys.readouterr().err.splitlines() if "hint" in ln]
    assert hints == [
        "rlblocks train: hint: use_lstm alone uses RLlib's defaults; the tuned "
        "config for rlblocks/StatelessCartPole-v0 is `rlblocks train --tuned "
        "stateless_cartpole_lstm`"
    ]
    # Anything else set in the model, or an env without a tuned memory config: no hint.
    assert (
        main(
            [
                "train",
                "--env",
                "CartPole-v1",
                "--set",
                "model.use_lstm=true",
                "--set",
                "num_envs=2",
                "--set",
                "train_batch_size=64",
                "--stop-timesteps",
                "64",
                "--no-progress",
                "--run-dir",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    assert "hint" not in capsys.readouterr().err


def test_tuned_listing_and_errors(capsys) -> None:
    assert main(["tuned"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in NAMES)
    assert main(["tuned", "pendulum"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["env"] == "Pendulum-v1"
    assert main(["tuned", "cartpol"]) == 2
    assert "no tuned config 'cartpol'; did you mean 'cartpole'" in capsys.readouterr().err
    assert main(["train", "--tuned", "cartpole", "--env", "Acrobot-v1"]) == 2
    assert "--tuned NAME brings its own env" in capsys.readouterr().err


def test_the_listing_shows_the_suites_table_where_bench_tuned_measured_nothing(
    capsys, monkeypatch
) -> None:
    """``rlblocks tuned`` shows a suite row's figures (the configs ``bench_tuned.py`` does not
    rerun once said "not measured"), and ``suites.json`` is what ``bench_suites.py`` computes
    from its results file (written by ``--write-docs`` with the table, never by hand)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    suites = importlib.import_module("bench_suites")
    figures = suites.tuned_figures(suites.read_results(suites.RESULTS))
    assert figures and json.loads((TUNED_DIR / "suites.json").read_text()) == figures
    assert main(["tuned"]) == 0
    lines = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines() if ln.strip()}
    for name, fig in figures.items():
        if not load_tuned(name).measured:
            reached = f"suites: {fig['reached']} seeds reached {fig['target']:g}, evaluation"
            assert reached in lines[name], lines[name]


def test_custom_models_and_distributions_by_import_path() -> None:
    space = gym.spaces.Box(-1, 1, (3,))
    with pytest.raises(
        ValueError, match="custom_model 'rlblocks.models:NoSuchModel': cannot import it"
    ):
        ModelCatalog.get_model_v2(
            space, gym.spaces.Discrete(2), 2, {"custom_model": "rlblocks.models:NoSuchModel"}
        )
    with pytest.raises(ValueError, match="custom_action_dist 'no_such_module:X'"):
        ModelCatalog.get_action_dist(
            gym.spaces.Discrete(2), {"custom_action_dist": "no_such_module:X"}
        )
    dist, n = ModelCatalog.get_action_dist(
        gym.spaces.Discrete(3), {"custom_action_dist": "rlblocks.distributions:Categorical"}
    )
    import torch
    from rlblocks.distributions import Categorical

    assert n == 3 and isinstance(dist(torch.zeros(1, 3), None), Categorical)


@pytest.mark.parametrize("name", ["hopper_td3", "halfcheetah_td3"])
def test_mujoco_td3_configs_start_every_layer_as_torch_linear_does(name: str) -> None:
    # rl-zoo3's TD3 nets (SB3) start from torch's nn.Linear init: weights and biases uniform
    # within 1/sqrt(fan_in), output layers included. With RLlib's start (normc(1.0) hidden
    # layers, zero biases, normc(0.01) outputs) the same settings learned both envs worse
    # (docs/qlearning.md). Built on plain Box spaces of HalfCheetah's shapes (no MuJoCo).
    import torch
    from rlblocks.train.learners.td3 import TD3Learner
    from rlblocks.train.offpolicy_config import TD3Config

    cfg = TD3Config.from_dict(load_tuned(name).config)
    assert cfg.network_init == "torch"
    torch.manual_seed(0)
    learner = TD3Learner(gym.spaces.Box(-5, 5, (17,)), gym.spaces.Box(-1, 1, (6,)), cfg)
    trained = [
        m
        for net in (learner.actor, *learner.critics)
        for n, m in net.named_modules()
        if isinstance(m, torch.nn.Linear) and ("_hidden_layers" in n or "_logits" in n)
    ]
    assert len(trained) == 9  # [400, 300] and the output layer: the actor, two critics
    for layer in trained:
        bound = layer.in_features**-0.5
        for p in (layer.weight, layer.bias):
            largest = float(p.detach().abs().max())
            assert largest <= bound * (1 + 1e-6), (layer, largest, bound)
            if p.numel() >= 100:  # spread over the whole range (normc's rows are not)
                assert largest > 0.9 * bound, (layer, largest, bound)
