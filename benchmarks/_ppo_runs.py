"""One PPO training run in rlblocks or in Stable-Baselines3 / sb3-contrib, same settings.

The settings use RLlib's key names; :func:`rlblocks_config` and :func:`sb3_ppo_kwargs` turn
them into each library's arguments, and both runners stop at the same mean return (of the
last 100 episodes) or step budget. Used by ``bench_train.py``.

Examples:
    >>> cfg = cartpole_settings()
    >>> cfg["num_envs"], cfg["train_batch_size"], rlblocks_config(cfg, seed=1)["lambda"]
    (8, 256, 0.8)
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunResult:
    """One training run.

    Attributes:
        case: Benchmark case (``cartpole``, ...).
        method: ``rlblocks`` or ``sb3``.
        seed: The run's seed.
        wall_s: Seconds from building the trainer to stopping.
        env_steps: Environment (agent) steps taken.
        reached: Whether the target return was reached (None when the case has no target).
        final_return: Mean return of the recent episodes when the run stopped.
        extra: Case-specific numbers (``steps_per_s``, ``target``, ...).
    """

    case: str
    method: str
    seed: int
    wall_s: float
    env_steps: int
    reached: bool | None
    final_return: float
    extra: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# settings shared by both libraries


def cartpole_settings() -> dict[str, Any]:
    """The CartPole PPO settings (rl-baselines3-zoo's, with constant lr and clip range)."""
    return {
        "env": "CartPole-v1",
        "num_envs": 8,
        "n_steps": 32,  # per env -> 256 steps per iteration
        "train_batch_size": 256,
        "sgd_minibatch_size": 256,
        "num_sgd_iter": 20,
        "lr": 1e-3,
        "gamma": 0.98,
        "lambda": 0.8,
        "clip_param": 0.2,
        "entropy_coeff": 0.0,
        "vf_loss_coeff": 0.5,
        "grad_clip": 0.5,
        "hiddens": [64, 64],
    }


def pong_settings() -> dict[str, Any]:
    """Atari PPO settings (rl-baselines3-zoo's Atari PPO, constant schedules)."""
    return {
        "num_envs": 8,
        "n_steps": 128,
        "train_batch_size": 1024,
        "sgd_minibatch_size": 256,
        "num_sgd_iter": 4,
        "lr": 2.5e-4,
        "gamma": 0.99,
        "lambda": 0.95,
        "clip_param": 0.1,
        "entropy_coeff": 0.01,
        "vf_loss_coeff": 0.5,
        "grad_clip": 0.5,
    }


#: Stable-Baselines3's ``MlpPolicy`` head init (``ortho_init``): orthogonal weights with gain
#: 0.01 for the action head and 1.0 for the value head, zero biases (RLlib's heads draw
#: normc(0.01) for both: a value head that starts near 0, and several seeds of CartPole
#: took 2-3x the steps to 475).
SB3_HEADS: dict[str, Any] = {
    "logits_weights_initializer": "orthogonal",
    "logits_weights_initializer_config": {"gain": 0.01},
    "vf_weights_initializer": "orthogonal",
    "vf_weights_initializer_config": {"gain": 1.0},
}


def rlblocks_config(
    settings: dict[str, Any], seed: int, *, sb3_heads: bool = True, **overrides: Any
) -> dict[str, Any]:
    """The rlblocks PPO config dict (RLlib keys) for shared ``settings``; with ``hiddens``,
    SB3's MlpPolicy net and init (``sb3_heads=False``: RLlib's heads, for the recurrent
    wrappers, which build heads of their own)."""
    config = {
        "env": settings.get("env"),
        "num_envs": settings["num_envs"],
        "train_batch_size": settings["train_batch_size"],
        "sgd_minibatch_size": settings["sgd_minibatch_size"],
        "num_sgd_iter": settings["num_sgd_iter"],
        "lr": settings["lr"],
        "gamma": settings["gamma"],
        "lambda": settings["lambda"],
        "clip_param": settings["clip_param"],
        "vf_clip_param": None,  # SB3's clip_range_vf=None
        "entropy_coeff": settings["entropy_coeff"],
        "vf_loss_coeff": settings["vf_loss_coeff"],
        "grad_clip": settings["grad_clip"],
        "kl_coeff": 0.0,
        "seed": seed,
        "model": {},
    }
    if "hiddens" in settings:
        config["model"] = {
            "fcnet_hiddens": list(settings["hiddens"]),
            "fcnet_activation": "tanh",
            "vf_share_layers": False,
            # SB3's hidden-layer init (orthogonal, gain sqrt(2)) and its heads'
            "fcnet_weights_initializer": "orthogonal",
            "fcnet_weights_initializer_config": {"gain": math.sqrt(2)},
            **(SB3_HEADS if sb3_heads else {}),
        }
    config.update(overrides)
    return config


# --------------------------------------------------------------------------------------------
# runners


def run_rlblocks(
    case: str,
    config: dict[str, Any],
    seed: int,
    stop_reward: float | None,
    stop_timesteps: int | None,
    algo: str = "PPO",
) -> RunResult:
    """Trains rlblocks' ``algo`` (PPO, DQN or SAC) until ``stop_reward`` (if given) or
    ``stop_timesteps``."""
    from rlblocks.train import DQNTrainer, PPOTrainer, SACTrainer

    trainer_class = {"PPO": PPOTrainer, "DQN": DQNTrainer, "SAC": SACTrainer}[algo]
    t0, c0 = time.perf_counter(), time.process_time()
    with trainer_class(config) as trainer:
        result = trainer.fit(stop_reward=stop_reward, stop_timesteps=stop_timesteps, progress=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    steps = int(result["timesteps_total"])
    ret = float(result.get("episode_return_mean", math.nan))
    reached = None if stop_reward is None else bool(ret >= stop_reward)
    extra = {"steps_per_s": steps / wall, "target": stop_reward, "cpu_s": cpu}
    return RunResult(case, "rlblocks", seed, wall, steps, reached, ret, extra)


def _sb3_stop_callback(stop_reward: float | None) -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    class StopOnMeanReturn(BaseCallback):
        """Stops when the mean of the last 100 episode returns reaches ``stop_reward``."""

        def __init__(self) -> None:
            super().__init__()
            self.reached = False
            self.returns: deque[float] = deque(maxlen=100)

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.returns.append(float(info["episode"]["r"]))
            if stop_reward is not None and self.returns:
                if statistics.fmean(self.returns) >= stop_reward:
                    self.reached = True
                    return False
            return True

    return StopOnMeanReturn()


def run_sb3(
    case: str,
    make_model: Callable[[int], Any],
    seed: int,
    stop_reward: float | None,
    stop_timesteps: int,
) -> RunResult:
    """Trains an SB3 model (built by ``make_model(seed)``) like :func:`run_rlblocks`."""
    t0, c0 = time.perf_counter(), time.process_time()
    model = make_model(seed)
    callback = _sb3_stop_callback(stop_reward)
    model.learn(total_timesteps=stop_timesteps, callback=callback)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    steps = int(model.num_timesteps)
    # The callback's window includes the step that stopped the run (SB3's buffer lags it).
    returns = callback.returns or [ep["r"] for ep in (model.ep_info_buffer or [])]
    ret = statistics.fmean(returns) if returns else math.nan
    reached = None if stop_reward is None else bool(callback.reached)
    extra = {"steps_per_s": steps / wall, "target": stop_reward, "cpu_s": cpu}
    return RunResult(case, "sb3", seed, wall, steps, reached, float(ret), extra)


def sb3_ppo_kwargs(settings: dict[str, Any], seed: int) -> dict[str, Any]:
    """SB3 ``PPO`` / ``RecurrentPPO`` arguments for rlblocks' settings (RLlib key names).

    Examples:
        >>> kw = sb3_ppo_kwargs({**cartpole_settings(), "n_steps": 32}, seed=1)
        >>> kw["n_steps"], kw["batch_size"], kw["seed"]
        (32, 256, 1)
    """
    return {
        "n_steps": settings["n_steps"],
        "batch_size": settings["sgd_minibatch_size"],
        "n_epochs": settings["num_sgd_iter"],
        "learning_rate": settings["lr"],
        "gamma": settings["gamma"],
        "gae_lambda": settings["lambda"],
        "clip_range": settings["clip_param"],
        "ent_coef": settings["entropy_coeff"],
        "vf_coef": settings["vf_loss_coeff"],
        "max_grad_norm": settings["grad_clip"],
        "seed": seed,
        "device": "cpu",
        "verbose": 0,
    }


def sb3_cartpole(settings: dict[str, Any]) -> Callable[[int], Any]:
    """A ``make_model(seed)`` for SB3 PPO with the CartPole settings."""

    def make(seed: int) -> Any:
        from stable_baselines3 import PPO
        from stable_baselines3.common.env_util import make_vec_env

        venv = make_vec_env(settings["env"], n_envs=settings["num_envs"], seed=seed)
        hiddens = list(settings["hiddens"])
        return PPO(
            "MlpPolicy",
            venv,
            policy_kwargs={"net_arch": {"pi": hiddens, "vf": hiddens}},
            **sb3_ppo_kwargs(settings, seed),
        )

    return make


def sb3_recurrent(settings: dict[str, Any]) -> Callable[[int], Any]:
    """A ``make_model(seed)`` for sb3-contrib's RecurrentPPO with the stateless LSTM case's
    settings: one LSTM of 64 shared by policy and value (as rlblocks' ``use_lstm``) over
    the same MLP, the same rollout, minibatch, epochs and coefficients. RecurrentPPO has no
    previous-action input (rlblocks' case uses ``lstm_use_prev_action``)."""

    def make(seed: int) -> Any:
        from sb3_contrib import RecurrentPPO
        from stable_baselines3.common.env_util import make_vec_env

        venv = make_vec_env(settings["env"], n_envs=settings["num_envs"], seed=seed)
        hiddens = list(settings["hiddens"])
        return RecurrentPPO(
            "MlpLstmPolicy",
            venv,
            policy_kwargs={
                "net_arch": {"pi": hiddens, "vf": hiddens},
                "lstm_hidden_size": 64,
                "shared_lstm": True,
                "enable_critic_lstm": False,
            },
            **sb3_ppo_kwargs(
                {**settings, "n_steps": settings["train_batch_size"] // settings["num_envs"]}, seed
            ),
        )

    return make


def sb3_pong(settings: dict[str, Any]) -> Callable[[int], Any]:
    """A ``make_model(seed)`` for SB3 PPO on Pong (AtariWrapper, 4-frame stack, CnnPolicy)."""

    def make(seed: int) -> Any:
        import ale_py
        import gymnasium as gym
        from stable_baselines3 import PPO
        from stable_baselines3.common.env_util import make_atari_env
        from stable_baselines3.common.vec_env import VecFrameStack

        gym.register_envs(ale_py)
        venv = make_atari_env(
            "ALE/Pong-v5",
            n_envs=settings["num_envs"],
            seed=seed,
            env_kwargs={"frameskip": 1, "repeat_action_probability": 0.0},
        )
        venv = VecFrameStack(venv, n_stack=4)
        return PPO(
            "CnnPolicy",
            venv,
            **sb3_ppo_kwargs(settings, seed),
        )

    return make


# --------------------------------------------------------------------------------------------
# cases
