"""``rlblocks train --backend rllib``: the native trainer's run directory, resume, evaluate."""

from __future__ import annotations

import csv
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from rlblocks.train import PPOTrainer  # noqa: E402

SMALL = ["--set", "num_envs=4", "--set", "train_batch_size=1000",
         "--set", "sgd_minibatch_size=250", "--set", "num_sgd_iter=2",
         "--set", "checkpoint_freq=2", "--set", "model.fcnet_hiddens=[32]"]


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlblocks.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def header(run: Path) -> list[str]:
    with open(run / "progress.csv", newline="") as f:
        return next(csv.reader(f))


def test_train_resume_evaluate(tmp_path):
    run = tmp_path / "run"
    out = cli("train", "--env", "CartPole-v1", "--backend", "rllib", "--run-dir", str(run),
              "--stop-timesteps", "3000", "--no-progress", *SMALL)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "PPO (RLlib, 0 env runners)" in out.stdout
    config = json.loads((run / "config.json").read_text())
    assert config["backend"]["name"] == "rllib" and config["env"] == "CartPole-v1"
    assert (run / "progress.png").is_file()
    assert sorted(p.name for p in run.glob("checkpoint_*")) == ["checkpoint_000002",
                                                               "checkpoint_000003"]
    # the same progress.csv columns as the native trainer
    native = PPOTrainer({"env": "CartPole-v1", "num_envs": 2, "train_batch_size": 64,
                         "sgd_minibatch_size": 32, "num_sgd_iter": 1}, run_dir=tmp_path / "n")
    native.train()
    native.close()
    assert header(run) == header(tmp_path / "n")
    with open(run / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["training_iteration"]) for r in rows] == [1, 2, 3]
    assert int(rows[-1]["timesteps_total"]) >= 3000
    assert all(float(r["vf_loss"]) >= 0 for r in rows)

    resumed = cli("train", "--resume", str(run), "--stop-timesteps", "5000", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    with open(run / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["training_iteration"]) for r in rows] == [1, 2, 3, 4, 5]
    steps = [int(r["timesteps_total"]) for r in rows]
    assert steps == sorted(steps) and steps[-1] >= 5000

    evaluated = cli("evaluate", str(run), "--episodes", "2", "--seed", "3")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    result = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert result["episodes"] == 2 and len(result["episode_returns"]) == 2
    assert result["checkpoint"].endswith("checkpoint_000005")
    assert all(r >= 1 for r in result["episode_returns"])


def test_rllib_flags_need_the_backend(tmp_path):
    out = cli("train", "--env", "CartPole-v1", "--num-env-runners", "2",
              "--run-dir", str(tmp_path / "x"))
    assert out.returncode == 2
    assert "--num-env-runners need --backend rllib" in out.stderr
    out = cli("train", "--env", "CartPole-v1", "--backend", "rllib", "--algo", "APPO",
              "--run-dir", str(tmp_path / "y"))
    assert out.returncode == 2 and "--num-env-runners >= 1" in out.stderr
    assert not (tmp_path / "y").exists()


def test_remote_env_runner_filter_and_nested_obs_through_the_cli(tmp_path):
    run = tmp_path / "dict"
    out = cli("train", "--env", "rlblocks/DictCartPole-v0", "--backend", "rllib",
              "--num-env-runners", "1", "--num-envs-per-env-runner", "2",
              "--run-dir", str(run), "--stop-timesteps", "2000", "--no-progress",
              "--set", "observation_filter=MeanStdFilter", *SMALL)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "PPO (RLlib, 1 env runners)" in out.stdout
    ckpt = sorted(run.glob("checkpoint_*"))[-1]
    state = pickle.loads((ckpt / "rlblocks_filter.pkl").read_bytes())
    assert state is not None and state["shape"] == [6]  # 4 scalars + one-hot side (2)
    assert state["running"]["num_pushes"] >= 2000
    evaluated = cli("evaluate", str(run), "--episodes", "2")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    result = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert result["episodes"] == 2 and result["episode_len_mean"] >= 1


def test_config_keys_map_onto_rllib():
    from rlblocks.rllib.trainer import build_algo_config
    from rlblocks.train import PPOConfig

    config = PPOConfig.from_dict({
        "env": "rlblocks/DictCartPole-v0", "num_envs": 3, "train_batch_size": 999,
        "sgd_minibatch_size": 111, "num_sgd_iter": 7, "lambda": 0.9, "gamma": 0.95,
        "clip_param": 0.25, "vf_clip_param": 5.0, "entropy_coeff": 0.01, "kl_coeff": 0.2,
        "lr_schedule": [[100, 1e-3], [2000, 1e-4]], "seed": 5})
    algo = build_algo_config(config, "PPO", num_env_runners=2)
    assert algo.env == "rlblocks.envs:rlblocks/DictCartPole-v0"
    assert (algo.num_envs_per_env_runner, algo.num_env_runners) == (3, 2)
    assert (algo.train_batch_size_per_learner, algo.minibatch_size, algo.num_epochs) == (
        999, 111, 7)
    assert (algo.lambda_, algo.gamma, algo.clip_param, algo.vf_clip_param) == (
        0.9, 0.95, 0.25, 5.0)
    assert algo.entropy_coeff == 0.01 and algo.kl_coeff == 0.2 and algo.use_kl_loss
    assert algo.lr == [[0, 1e-3], [100, 1e-3], [2000, 1e-4]] and algo.seed == 5
    with pytest.raises(ValueError, match="--algo must be one of"):
        build_algo_config(config, "DQN")
    with pytest.raises(ValueError, match="gymnasium id"):
        build_algo_config(PPOConfig.from_dict({"env": lambda cfg: None}))


@pytest.mark.parametrize("tuned", ["correlated_actions", "parametric_cartpole"])
def test_models_guide_examples_learn_on_rllib(tmp_path, tuned):
    # the autoregressive model + distribution (Tuple actions, the distribution calls the
    # model) and the parametric-actions model (masked logits from a nested observation)
    run = tmp_path / tuned
    out = cli("train", "--tuned", tuned, "--backend", "rllib", "--stop-reward", "120",
              "--stop-timesteps", "40000", "--no-progress", "--run-dir", str(run))
    assert out.returncode == 0, out.stderr[-3000:]
    with open(run / "progress.csv", newline="") as f:
        best = max(float(r["episode_return_mean"]) for r in csv.DictReader(f)
                   if r["episode_return_mean"] not in ("", "nan"))
    assert best >= 120, best  # random play: about 100 (correlated) / 22 (parametric)
    evaluated = cli("evaluate", str(run), "--episodes", "1")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert json.loads(evaluated.stdout.strip().splitlines()[-1])["episodes"] == 1


def test_evaluate_uses_the_training_pieces(tmp_path):
    # a model reading previous actions and rewards, behind a filter: evaluation must build
    # the same inputs as training
    run = tmp_path / "lstm"
    out = cli("train", "--env", "rlblocks/StatelessCartPole-v0", "--backend", "rllib",
              "--run-dir", str(run), "--stop-timesteps", "1000", "--no-progress",
              "--set", "model.use_lstm=true", "--set", "model.lstm_use_prev_action=true",
              "--set", "model.lstm_use_prev_reward=true", "--set", "model.lstm_cell_size=16",
              "--set", "observation_filter=MeanStdFilter", *SMALL)
    assert out.returncode == 0, out.stderr[-3000:]
    evaluated = cli("evaluate", str(run), "--episodes", "2", "--explore")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    result = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert result["episodes"] == 2 and min(result["episode_returns"]) >= 1


def test_atari_ids_are_refused_with_a_clear_error() -> None:
    from types import SimpleNamespace

    from rlblocks.rllib.trainer import _env_id

    with pytest.raises(ValueError, match="does not run Atari ids yet"):
        _env_id(SimpleNamespace(env="ALE/Pong-v5"))
    assert _env_id(SimpleNamespace(env="CartPole-v1")) == "CartPole-v1"
