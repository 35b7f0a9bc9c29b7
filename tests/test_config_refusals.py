"""Settings that would run and never learn are refused when the config is built, when the
trainer is built (the env's frame stacks, the machine's memory) or when the stop budget is
known (``fit``, the CLI before it makes the env), with one line naming the keys and a value
that works; a multi-agent env's malformed returns are one line naming the env, the agent and
the value. Through the Python API and the CLI (fresh processes, as the console script)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import rlblocks
from rlblocks.train.algo_spaces import RLLIB_Q_UNSUPPORTED, check_rllib_q_keys
from rlblocks.train.offpolicy import DQNTrainer, SACTrainer
from rlblocks.train.offpolicy_config import DQNConfig, SACConfig
from rlblocks.train.trainer_config import PPOConfig

USER_DIR = Path(__file__).parent / "fixtures" / "user_envs"
TINY_DQN = {
    "env": "CartPole-v1",
    "num_envs": 1,
    "model": {"fcnet_hiddens": [8]},
    "timesteps_per_iteration": 100,
}


def rlblocks_cli(*args: str) -> subprocess.CompletedProcess[str]:
    where = str(Path(rlblocks.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": f"{where}{os.pathsep}{USER_DIR}"}
    env.pop("RLBLOCKS_TRACEBACK", None)
    code = "import sys; from rlblocks.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-P", "-c", code, *args],
        cwd=USER_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def error_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def suggested(message: str, key: str) -> int:
    """The value ``message`` suggests for ``key`` (``use key=N``)."""
    found = re.search(rf"use {key}=(\d+)", message)
    assert found, message
    return int(found.group(1))


# --- a replay buffer that can never hold a batch ----------------------------------------------
@pytest.mark.parametrize("config_class", [DQNConfig, SACConfig])
def test_a_batch_larger_than_the_buffer_is_refused_with_a_size_that_works(
    config_class: Any,
) -> None:
    with pytest.raises(ValueError) as err:
        config_class(train_batch_size=200, replay_capacity=100, num_envs=1)
    message = str(err.value)
    assert message.startswith("train_batch_size=200 with replay_capacity=100:"), message
    assert "never learn" in message
    config_class(train_batch_size=200, replay_capacity=suggested(message, "replay_capacity"))


def test_the_suggested_capacity_learns_with_several_envs() -> None:
    """Each env keeps replay_capacity // num_envs steps: the suggestion counts that."""
    config = {**TINY_DQN, "num_envs": 4, "train_batch_size": 20, "learning_starts": 0}
    with pytest.raises(ValueError) as err:
        DQNConfig.from_dict({**config, "replay_capacity": 20})
    capacity = suggested(str(err.value), "replay_capacity")
    trainer = DQNTrainer({**config, "replay_capacity": capacity, "train_freq": 1})
    try:
        result = trainer.train()
    finally:
        trainer.close()
    assert result["num_updates"] > 0 and math.isfinite(result["qf_loss"])


def test_a_buffer_too_small_for_the_envs_frame_stacks_is_refused_at_build() -> None:
    """Pong's DeepMind observations are stacks of 4 frames: the 4 newest steps of an env are
    not sampleable yet, so capacity 19 never holds a batch of 16 (the config alone allows it)."""
    pytest.importorskip("ale_py")
    config = {"env": "ALE/Pong-v5", "num_envs": 1, "train_batch_size": 16}
    DQNConfig.from_dict({**config, "replay_capacity": 19})  # the config cannot know the stacks
    with pytest.raises(ValueError) as err:
        DQNTrainer({**config, "replay_capacity": 19})
    message = str(err.value)
    assert "replay_capacity=19" in message and "frame_stack=4" in message, message
    fits = {**config, "learning_starts": 0, "train_freq": 1, "timesteps_per_iteration": 40}
    trainer = DQNTrainer({**fits, "replay_capacity": 16 + 4})  # the least that works
    try:
        assert trainer.train()["num_updates"] > 0
    finally:
        trainer.close()


# --- a buffer larger than the machine's memory ------------------------------------------------
def test_a_buffer_beyond_the_machines_memory_is_one_line_naming_replay_capacity() -> None:
    """The buffer's own refusal (bytes by part against the machine's memory, see
    tests/test_replay_hardening.py) reaches the user in the config's words."""
    with pytest.raises(ValueError) as err:
        DQNTrainer({**TINY_DQN, "replay_capacity": 10**11})
    message = str(err.value)
    assert message.startswith("replay_capacity=100000000000: 100000000000 steps need"), message
    assert "sum trees" in message and "machine's memory" in message and "\n" not in message
    fits = int(re.search(r"use replay_capacity <= (\d+)", message)[1])
    trainer = DQNTrainer({**TINY_DQN, "replay_capacity": min(fits, 10**6)})
    trainer.close()


# --- a stop budget that ends before the first update ------------------------------------------
@pytest.mark.parametrize(
    ("keys", "stop", "refused"),
    [
        ({"learning_starts": 1000}, {"stop_timesteps": 500}, "learning_starts=1000"),
        ({"learning_starts": 300}, {"stop_iters": 3}, "learning_starts=300"),
        ({"learning_starts": 0, "train_batch_size": 300}, {"stop_iters": 3}, "train_batch_size"),
        ({"learning_starts": 0, "train_freq": 400}, {"stop_timesteps": 300}, "train_freq=400"),
        (
            {"learning_starts": 0, "target_network_update_freq": 500},
            {"stop_timesteps": 300},
            "target_network_update_freq=500",
        ),
    ],
)
def test_fit_refuses_a_budget_in_which_the_run_would_not_learn(
    keys: dict[str, Any], stop: dict[str, int], refused: str
) -> None:
    trainer = DQNTrainer({**TINY_DQN, **keys})
    try:
        with pytest.raises(ValueError, match=re.escape(refused)) as err:
            trainer.fit(progress=False, **stop)
        assert "stop budget" in str(err.value) and "use " in str(err.value)
        assert trainer.timesteps_total == 0  # refused before it stepped
    finally:
        trainer.close()


def test_a_first_iteration_without_an_update_says_so_when_no_budget_was_given() -> None:
    trainer = SACTrainer({**TINY_DQN, "env": "Pendulum-v1", "learning_starts": 150})
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert trainer.train()["num_updates"] == 0
            trainer.train()  # only the first iteration warns
        shown = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        assert len(shown) == 1 and "took no gradient step" in shown[0], shown
        assert "learning_starts=150" in shown[0]
    finally:
        trainer.close()


def test_a_learning_rate_schedule_of_zeros_is_refused() -> None:
    with pytest.raises(ValueError, match="every learning rate in it is 0"):
        PPOConfig(lr_schedule=[[0, 0.0], [1000, 0.0]])
    with pytest.raises(ValueError, match="every learning rate in it is 0"):
        DQNConfig(lr_schedule=[[0, 0.0]])
    PPOConfig(lr_schedule=[[0, 1e-3], [1000, 0.0]])  # decaying to 0 learns


def test_one_row_minibatches_with_standardised_advantages_are_refused() -> None:
    """A one-row minibatch standardises its advantage to 0: the policy loss has no gradient
    (shown on the learner's own standardisation), so the config is refused."""
    from rlblocks.train.learners.ppo import _standardized

    torch = pytest.importorskip("torch")
    assert float(_standardized(torch.tensor([3.5]), None)[0]) == 0.0
    with pytest.raises(ValueError, match="sgd_minibatch_size=1 with normalize_advantages=True"):
        PPOConfig(sgd_minibatch_size=1)
    with pytest.raises(ValueError, match="use train_batch_size=2 or more"):
        PPOConfig(train_batch_size=1, num_envs=1)
    PPOConfig(sgd_minibatch_size=1, normalize_advantages=False)
    PPOConfig(sgd_minibatch_size=1, model={"use_lstm": True})  # minibatches of whole sequences


# --- the CLI: one line, before the env is made ------------------------------------------------
DQN_CLI = ["train", "--algo", "DQN", "--env", "CartPole-v1", "--no-progress"]


@pytest.mark.parametrize(
    ("args", "start"),
    [
        (
            ["--set", "train_batch_size=200", "--set", "replay_capacity=100"],
            "rlblocks train: error: train_batch_size=200 with replay_capacity=100:",
        ),
        (
            ["--stop-timesteps", "500"],
            "rlblocks train: error: learning_starts=1000 is at or beyond the stop budget "
            "(--stop-timesteps 500, 1000 steps in whole iterations)",
        ),
        (
            ["--set", "replay_capacity=100000000000", "--stop-timesteps", "5000"],
            "rlblocks train: error: replay_capacity=100000000000: 100000000000 steps need",
        ),
    ],
)
def test_cli_refuses_a_dqn_run_that_would_not_learn(
    tmp_path: Path,
    args: list[str],
    start: str,
    cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    run = tmp_path / "run"
    line = error_line(cli(*DQN_CLI, "--run-dir", str(run), *args))
    assert line.startswith(start), line
    assert not run.exists()  # a failed start leaves nothing behind


@pytest.mark.ray
@pytest.mark.parametrize(
    ("args", "start"),
    [
        # the native config's validators and budget checks, in the same words
        (
            ["--set", "train_batch_size=200", "--set", "replay_capacity=100"],
            "rlblocks train: error: train_batch_size=200 with replay_capacity=100:",
        ),
        (
            ["--stop-timesteps", "500"],
            "rlblocks train: error: learning_starts=1000 is at or beyond the stop budget "
            "(--stop-timesteps 500, 1000 steps in whole iterations)",
        ),
        (
            ["--set", "sgd_minibatch_size=64"],
            "rlblocks train: error: unknown DQN config key 'sgd_minibatch_size'",
        ),
        # what RLlib cannot honour, named
        (
            ["--set", "tensorboard=true"],
            "rlblocks train: error: tensorboard=True: DQN on --backend rllib cannot honour",
        ),
        (
            ["--set", "prioritized_replay=true"],
            "rlblocks train: error: final_prioritized_replay_beta=1.0: RLlib's prioritized "
            "replay keeps beta fixed at prioritized_replay_beta=0.4",
        ),
        (
            ["--set", "rllib.training.lr=0.001"],
            "rlblocks train: error: rllib.training.lr: DQN's config key lr sets it on "
            "--backend rllib; set lr instead",
        ),
        (
            ["--set", "rllib.training.replay_buffer_config.capacity=100"],
            "rlblocks train: error: rllib.training.replay_buffer_config.capacity: DQN's config "
            "key replay_capacity sets it",
        ),
    ],
)
def test_cli_refuses_an_rllib_dqn_run_as_the_native_config_does_before_ray_starts(
    tmp_path: Path, args: list[str], start: str
) -> None:
    """``--backend rllib --algo DQN`` builds the native ``DQNConfig``: the same validators
    and refusals, and what RLlib cannot honour refused, all before Ray starts."""
    run = tmp_path / "run"
    out = rlblocks_cli(*DQN_CLI, "--backend", "rllib", "--run-dir", str(run), *args)
    line = error_line(out)  # one line: Ray never started (it logs as it starts)
    assert line.startswith(start), line
    assert not run.exists()


@pytest.mark.parametrize("key", sorted(RLLIB_Q_UNSUPPORTED))
def test_rllib_q_keys_refuse_each_setting_rllib_cannot_honour(key: str) -> None:
    """Each native key ``--backend rllib`` cannot honour is refused off its default, named;
    at its default it passes."""
    algo = "SAC" if key in ("q_model", "use_sde", "network_init", "parallel_critics") else "DQN"
    cls = SACConfig if algo == "SAC" else DQNConfig
    check_rllib_q_keys(cls(env="CartPole-v1"), algo)
    value = {
        "device": "cuda",
        "tensorboard": True,
        "evaluation_interval": 5,
        "evaluation_episodes": 3,
        "checkpoint_replay": True,
        "q_model": {"fcnet_hiddens": [8]},
        "her": True,
        "her_strategy": "final",
        "her_n_sampled_goal": 2,
        "goal_reward": "mod:fn",
        "use_sde": True,
        "network_init": "torch",
        "parallel_critics": True,
    }[key]
    config = cls(env="CartPole-v1")
    setattr(config, key, value)  # past the validators (cuda needs no GPU here)
    with pytest.raises(ValueError, match=rf"^{key}=.*{algo} on --backend rllib cannot honour"):
        check_rllib_q_keys(config, algo)
    if key == "her":  # her=false trains without relabelling on both backends
        check_rllib_q_keys(DQNConfig(her=False), algo)
    if key == "parallel_critics":  # False: one critic after the other on both backends
        check_rllib_q_keys(SACConfig(parallel_critics=False), algo)
    if key == "device":  # "auto": the CPU where RLlib is given no GPU, as natively without one
        check_rllib_q_keys(DQNConfig(device="auto"), algo)
    if key == "q_model":  # a q_model that makes the actor's model config changes nothing
        check_rllib_q_keys(
            SACConfig(model={"fcnet_hiddens": [8]}, q_model={"fcnet_hiddens": [8]}), algo
        )


def test_every_dqn_and_sac_key_is_translated_handled_or_refused_on_rllib() -> None:
    """No DQN / SAC key is silently dropped on ``--backend rllib``: each one is translated
    (rlblocks.rllib.q_config), read by build_algo_config / the trainer, or refused."""
    import dataclasses

    translated = {
        "lr", "lr_schedule", "gamma", "grad_clip", "train_batch_size", "replay_capacity",
        "learning_starts", "train_freq", "gradient_steps", "target_network_update_freq", "tau",
        "n_step", "prioritized_replay", "prioritized_replay_alpha", "prioritized_replay_beta",
        "timesteps_per_iteration", "double_q", "dueling", "num_atoms", "v_min", "v_max",
        "td_error_loss_fn", "epsilon", "random_steps", "actor_lr", "critic_lr", "alpha_lr",
        "initial_alpha", "target_entropy", "twin_q",
        # refused when annealed (RLlib's beta is fixed); equal to the beta it is honoured
        "final_prioritized_replay_beta", "prioritized_replay_beta_annealing_timesteps",
    }  # fmt: skip
    handled = {
        "env", "env_config", "model", "num_envs", "preprocessor_pref", "observation_filter",
        "seed", "num_threads", "flush_denormals", "checkpoint_freq", "keep_checkpoints",
        "metrics_smoothing_episodes", "framework", "rllib",
        "clip_actions",  # no effect on Discrete or squashed (SAC) actions, either backend
        "vector_mode",  # how envs are stepped (speed): RLlib's env runners step them
        # gSDE's settings: refused without use_sde (which is refused on RLlib)
        "sde_sample_freq", "log_std_init", "use_expln", "full_std",
    }  # fmt: skip
    for cls in (DQNConfig, SACConfig):
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = fields - translated - handled - set(RLLIB_Q_UNSUPPORTED)
        assert not unknown, (cls.__name__, sorted(unknown))


# --- multi-agent envs that return malformed steps ---------------------------------------------
BAD = "my_pkg.bad_agents:parallel_env"
CASES = {
    "no agents at reset": (
        {"fault": "reset_no_agents"},
        "returned no agents from reset (observations {}, agents [])",
    ),
    "rewards None": ({"fault": "rewards"}, "returned rewards None from step"),
    "a None reward": ({"fault": "reward"}, "a reward for agent 'blue' that is not a number: None"),
    "a str reward": (
        {"fault": "reward", "value": "x"},
        "a reward for agent 'blue' that is not a number: 'x'",
    ),
    "an array reward": (
        {"fault": "reward", "value": "array"},
        "a reward for agent 'blue' that is not a number: array([1., 1., 1.])",
    ),
    "a bool reward": (
        {"fault": "reward", "value": True},
        "a reward for agent 'blue' that is not a number: True",
    ),
    "a nan reward": (
        {"fault": "reward", "value": math.nan},
        "returned a non-finite reward for agent 'blue': nan",
    ),
    "a missing reward": (
        {"fault": "missing_reward"},
        "returned no rewards entry for live agent 'blue': its rewards are {'red': 1.0}",
    ),
    "an unknown agent": (
        {"fault": "extra_agent"},
        "returned rewards for agent 'green', which is not one of its possible_agents",
    ),
    "an int termination": (
        {"fault": "termination", "value": 1},
        "a termination flag for agent 'blue' that is not True or False: 1",
    ),
    "terminations a list": ({"fault": "terminations", "value": [1]}, "terminations [1]"),
    "truncations None": ({"fault": "truncations"}, "returned truncations None from step"),
    "infos None": ({"fault": "infos"}, "returned infos None from step"),
    "observations an int": (
        {"fault": "observations", "value": 3},
        "returned observations 3 from step",
    ),
    "a short tuple": (
        {"fault": "step_tuple", "value": [1, 2]},
        "returned from step [1, 2]; expected a tuple (observations, rewards, terminations, "
        "truncations, infos)",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_malformed_multiagent_return_names_the_env_and_the_agent(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pettingzoo")
    from rlblocks.train import MultiAgentPPOTrainer

    monkeypatch.syspath_prepend(str(USER_DIR))
    env_config, shown = CASES[case]
    trainer = MultiAgentPPOTrainer(
        {
            "env": BAD,
            "env_config": env_config,
            "num_envs": 2,
            "train_batch_size": 32,
            "sgd_minibatch_size": 16,
            "num_sgd_iter": 1,
            "model": {"fcnet_hiddens": [8]},
        }
    )
    try:
        with pytest.raises(ValueError) as err:
            trainer.train()
    finally:
        trainer.close()
    message = str(err.value)
    assert message.startswith(f"env {BAD!r} (copy 0) "), message
    assert shown in message and "\n" not in message, message
    assert message.count(f"env {BAD!r}") == 1, message


def test_the_env_is_well_formed_without_a_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusals above come from the faults, not from the env (which trains as it is)."""
    pytest.importorskip("pettingzoo")
    from rlblocks.train import MultiAgentPPOTrainer

    monkeypatch.syspath_prepend(str(USER_DIR))
    trainer = MultiAgentPPOTrainer(
        {"env": BAD, "num_envs": 2, "train_batch_size": 32, "sgd_minibatch_size": 16}
    )
    try:
        assert trainer.train()["timesteps_total"] == 32
    finally:
        trainer.close()


@pytest.mark.parametrize("case", ["no agents at reset", "a None reward"])
def test_cli_a_malformed_multiagent_env_is_one_line(
    tmp_path: Path, case: str, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    pytest.importorskip("pettingzoo")
    env_config, shown = CASES[case]
    sets = [f"env_config.{k}={'null' if v is None else v}" for k, v in env_config.items()]
    sets += ["num_envs=2", "train_batch_size=32", "sgd_minibatch_size=16", "num_sgd_iter=1"]
    args = [x for s in sets for x in ("--set", s)]
    run = tmp_path / "run"
    out = cli("train", "--env", BAD, "--no-progress", "--run-dir", str(run), *args)
    line = error_line(out)
    assert line.startswith(f"rlblocks train: error: env {BAD!r} (copy 0) "), line
    assert shown in line, line
