"""``rlblocks train --backend rllib``: RLlib (PPO, APPO, IMPALA, DQN or SAC) with rlblocks'
modules and connectors, writing the native trainer's run directory.

rlblocks' PPO config keys are mapped onto RLlib's (``train_batch_size`` ->
``train_batch_size_per_learner``, ``sgd_minibatch_size`` -> ``minibatch_size``,
``num_sgd_iter`` -> ``num_epochs``, ``lambda``, ``clip_param``, ``vf_clip_param``,
``vf_loss_coeff``, ``entropy_coeff``, ``kl_coeff``, ``kl_target``, ``grad_clip``, ``lr``,
``gamma``, ``lr_schedule`` (as RLlib's ``lr`` schedule), ``seed``, ``num_envs`` ->
``num_envs_per_env_runner``, ``model`` ->
:func:`~rlblocks.rllib.rl_module_spec`, ``observation_filter`` ->
:func:`~rlblocks.rllib.env_to_module`); APPO and IMPALA take the keys they know.

DQN and SAC take ``env``, ``env_config``, ``model`` (over RLlib's ``MODEL_DEFAULTS``, not the
PPO defaults), ``num_envs``, ``gamma``, ``seed`` and ``observation_filter`` from the config;
their own hyperparameters (``lr``, ``n_step``, ``replay_buffer_config``, ``epsilon``,
``target_network_update_freq``, ``tau``, ``actor_lr``, ...) go in the config's ``rllib``
block (``--set rllib.training.n_step=3``), RLlib's defaults otherwise; a PPO key set to a
non-default value is refused for them rather than ignored. Every algorithm applies the
``rllib`` block last.

Atari ids (``ALE/...``, ``preprocessor_pref="deepmind"``) run the native trainer's DeepMind
pipeline: :func:`deepmind_env` (registered with Ray) in the env runners and
``env_to_module(..., atari=True)``; DQN and SAC keep one frame per episode step with
:func:`~rlblocks.rllib.replay.atari_replay_buffer_config`'s buffer unless the ``rllib``
block names a buffer of its own.

The run directory holds ``config.json`` (the rlblocks config plus a ``backend`` block),
``progress.csv`` with the native trainer's columns (those RLlib does not report are empty),
``checkpoint_NNNNNN/`` (RLlib's checkpoint plus ``rlblocks_rllib.json``) and
``progress.png``. :meth:`RLlibTrainer.restore` resumes a run; :func:`evaluate_run` plays
episodes with the checkpoint's module, without starting Ray.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import time
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.config import ModelConfig
from rlblocks.rllib._ray import Columns, ray
from rlblocks.rllib.connectors import (
    FlatRepeatedObservations,
    MeanStdFilterBatched,
    env_to_module,
    has_repeated,
)
from rlblocks.rllib.replay import atari_replay_buffer_config
from rlblocks.train.config import PPOConfig
from rlblocks.train.logger import ProgressLogger, truncate_progress
from rlblocks.train.loop import episode_summary, train_until
from rlblocks.wrappers.atari import is_atari, wrap_deepmind

__all__ = ["ALGOS", "PROGRESS_COLUMNS", "Q_ALGOS", "Q_COLUMNS", "RLlibTrainer",
           "build_algo_config", "deepmind_env", "evaluate_run", "is_rllib_run"]

ALGOS = ("PPO", "APPO", "IMPALA", "DQN", "SAC")
#: The Q-learning algorithms (rlblocks' Q heads, RLlib's replay buffers).
Q_ALGOS = ("DQN", "SAC")
#: PPO settings that DQN and SAC do not read (theirs live in the config's ``rllib`` block).
_PPO_ONLY = ("train_batch_size", "sgd_minibatch_size", "num_sgd_iter", "lr", "lr_schedule",
             "lambda_", "clip_param", "vf_clip_param", "vf_loss_coeff", "entropy_coeff",
             "kl_coeff", "kl_target", "grad_clip", "normalize_advantages")
#: Native-trainer features that this backend does not run: refused when set, never ignored.
_NATIVE_ONLY = {"target_kl": "rllib.training", "normalize_reward": "an env wrapper",
                "clip_reward": "an env wrapper", "evaluation_interval": "rllib.evaluation"}

#: The native trainer's ``progress.csv`` columns (``PPOTrainer.train``), in its order.
PROGRESS_COLUMNS = (
    "training_iteration", "timesteps_total", "episodes_total", "episodes_this_iter",
    "episode_return_mean", "episode_return_min", "episode_return_max", "episode_len_mean",
    "total_loss", "policy_loss", "vf_loss", "entropy", "kl", "approx_kl", "clipfrac",
    "kl_coeff", "sgd_epochs", "explained_variance", "advantage_mean", "value_target_mean", "lr",
    "steps_per_s", "time_this_iter_s", "time_total_s",
)

#: Columns DQN and SAC add after the native ones (their learners' metrics).
Q_COLUMNS = ("qf_loss", "qf_mean", "td_error_mean", "alpha", "alpha_loss")

_LEARNER_KEYS = {"policy_loss": "policy_loss", "vf_loss": "vf_loss",
                 "total_loss": "total_loss", "entropy": "entropy", "kl": "mean_kl_loss",
                 "kl_coeff": "curr_kl_coeff", "explained_variance": "vf_explained_var",
                 "lr": "default_optimizer_learning_rate", "qf_loss": "qf_loss",
                 "qf_mean": "qf_mean", "td_error_mean": "td_error_mean",
                 "alpha": "alpha_value", "alpha_loss": "alpha_loss"}
_META = "rlblocks_rllib.json"
#: The timestep ``evaluate_run(explore=True)`` explores at (the end of any epsilon schedule).
_LATE = 2**62
_FILTER = "rlblocks_filter.pkl"
_MODULE = Path("learner_group") / "learner" / "rl_module" / "default_policy"


def _is_atari(config: PPOConfig) -> bool:
    return isinstance(config.env, str) and is_atari(config.env)


def deepmind_env(env_id: str, env_config: dict[str, Any] | None = None) -> gym.Env:
    """An Atari id with the env-side DeepMind wrappers (noop reset, frame skip + max,
    episodic life, FIRE reset: :func:`~rlblocks.wrappers.atari.wrap_deepmind` with
    ``warp=False``), as the native trainer makes it; the frame half (gray, resize, stack)
    is the env-to-module connector's. ``env_config`` goes to ``gym.make``."""
    from rlblocks.train.rollout import registered_id

    return wrap_deepmind(gym.make(registered_id(env_id), **dict(env_config or {})), warp=False)


def flat_repeated_env(env_id: str, model_config: dict[str, Any],
                      env_config: dict[str, Any] | None = None) -> gym.Env:
    """``gym.make(env_id, **env_config)`` with its ``Repeated`` observations flattened on the
    env side (:class:`~rlblocks.rllib.connectors.FlatRepeatedObservations`): RLlib's env
    runner cannot unbatch the per-env lists that gymnasium's vector env makes of them."""
    return FlatRepeatedObservations(gym.make(env_id, **dict(env_config or {})), model_config)


def _gym_id(env: str) -> str:
    return f"rlblocks.envs:{env}" if env.startswith("rlblocks/") else env


def _probe_repeated(config: PPOConfig) -> bool:
    """Whether the run's env observes a ``Repeated`` (anywhere in its space; one env is made
    here to see its space)."""
    env = gym.make(_gym_id(str(config.env)), **dict(config.env_config))
    try:
        return has_repeated(env.observation_space)
    finally:
        env.close()


def make_env(config: PPOConfig, algo: str = "PPO") -> gym.Env:
    """The run's env as its env runners make it (for ``rlblocks evaluate``)."""
    if _is_atari(config):
        return deepmind_env(str(config.env), config.env_config)
    gym_id = _gym_id(str(config.env))
    if _probe_repeated(config):
        return flat_repeated_env(gym_id, _model(config, algo), config.env_config)
    return gym.make(gym_id, **dict(config.env_config))


def _env_id(config: PPOConfig, algo: str = "PPO") -> str:
    """The env as RLlib's workers can make it (``rlblocks/...`` ids import their module;
    Atari ids are registered with Ray as :func:`deepmind_env` creators, envs observing a
    ``Repeated`` as :func:`flat_repeated_env` creators)."""
    if not isinstance(config.env, str):
        raise ValueError("--backend rllib needs a gymnasium id as env (a callable env creator "
                         "cannot be sent to Ray's workers)")
    env = config.env
    if _is_atari(config):
        if config.preprocessor_pref != "deepmind":
            raise ValueError(f"--backend rllib runs Atari ids with the DeepMind pipeline only "
                             f"(preprocessor_pref='deepmind'), got {config.preprocessor_pref!r}")
        from ray.tune.registry import register_env

        name = f"rlblocks-deepmind:{env}"
        register_env(name, partial(deepmind_env, env))
        return name
    if _probe_repeated(config):
        from ray.tune.registry import register_env

        name = f"rlblocks-flat-repeated:{env}"
        register_env(name, partial(flat_repeated_env, _gym_id(env), _model(config, algo)))
        return name
    return _gym_id(env)


def _model(config: PPOConfig, algo: str) -> dict[str, Any]:
    """The run's model config: DQN/SAC over RLlib's ``MODEL_DEFAULTS``, the others over the
    PPO defaults."""
    if algo in Q_ALGOS:
        return ModelConfig.from_dict(config.model).to_dict()
    return config.model_config().to_dict()


def _frames_once(config: PPOConfig, algo: str) -> bool:
    """DQN/SAC on Atari: episodes keep one frame per step and rlblocks' frame-stacking
    replay buffer rebuilds the stacks, unless the ``rllib`` block names another buffer."""
    if algo not in Q_ALGOS or not _is_atari(config):
        return False
    buffer = config.rllib.get("training", {}).get("replay_buffer_config") or {}
    return "FrameStack" in str(buffer.get("type", "FrameStack"))


def _pieces(config: PPOConfig, algo: str, training: bool = True) -> Any:
    """The env-to-module connector factory of a run (evaluation keeps stacks in the
    episode: the module sees the same observations)."""
    return env_to_module(_model(config, algo), config.observation_filter,
                         atari=_is_atari(config),
                         stack_in_episode=not (training and _frames_once(config, algo)))


def _ppo_training(config: PPOConfig, algo: str) -> dict[str, Any]:
    """RLlib ``.training(...)`` keys of PPO, APPO and IMPALA from an rlblocks PPO config."""
    lr: Any = config.lr
    if config.lr_schedule:  # RLlib interpolates [[timestep, lr], ...] from timestep 0
        lr = [[int(t), float(v)] for t, v in config.lr_schedule]
        if lr[0][0] != 0:
            lr.insert(0, [0, lr[0][1]])
    train: dict[str, Any] = {
        "lr": lr, "gamma": config.gamma, "grad_clip": config.grad_clip,
        "train_batch_size_per_learner": config.train_batch_size,
        "entropy_coeff": config.entropy_coeff, "vf_loss_coeff": config.vf_loss_coeff,
    }
    if algo == "PPO":
        train.update(minibatch_size=config.sgd_minibatch_size, num_epochs=config.num_sgd_iter,
                     lambda_=config.lambda_, clip_param=config.clip_param,
                     vf_clip_param=(config.vf_clip_param if config.vf_clip_param is not None
                                    else float("inf")),
                     kl_coeff=config.kl_coeff, kl_target=config.kl_target,
                     use_kl_loss=config.kl_coeff > 0)
    elif algo == "APPO":
        train.update(clip_param=config.clip_param, kl_coeff=config.kl_coeff,
                     kl_target=config.kl_target, use_kl_loss=config.kl_coeff > 0)
    return train


def _q_training(config: PPOConfig, algo: str) -> dict[str, Any]:
    """RLlib ``.training(...)`` keys of DQN and SAC: ``gamma`` (the rest is RLlib's or the
    config's ``rllib`` block).

    Raises:
        ValueError: A PPO-only key with a non-default value (it would be ignored).
    """
    defaults = PPOConfig(env=config.env)
    changed = [("lambda" if k == "lambda_" else k) for k in _PPO_ONLY
               if getattr(config, k) != getattr(defaults, k)]
    if changed:
        example = "lr" if algo == "DQN" else "actor_lr"
        raise ValueError(f"{', '.join(changed)}: PPO settings that {algo} does not read; set "
                         f"{algo}'s own in the config's rllib.training block (e.g. --set "
                         f"rllib.training.{example}=1e-3)")
    return {"gamma": config.gamma}


def _refuse_native_only(config: PPOConfig) -> None:
    """Raises ValueError for a native-trainer feature set in a config for this backend."""
    defaults = PPOConfig(env=config.env)
    for key, instead in _NATIVE_ONLY.items():
        if getattr(config, key) != getattr(defaults, key):
            raise ValueError(f"{key}={getattr(config, key)!r}: a native-trainer option that "
                             f"--backend rllib does not run; use RLlib's own ({instead})")


def _algorithm_config_class(algo: str) -> Any:
    from ray.rllib.algorithms import appo, dqn, impala, ppo, sac

    return {"PPO": ppo.PPOConfig, "APPO": appo.APPOConfig, "IMPALA": impala.IMPALAConfig,
            "DQN": dqn.DQNConfig, "SAC": sac.SACConfig}[algo]


def _apply_sections(algo_config: Any, sections: dict[str, dict[str, Any]]) -> Any:
    """``algo_config.<section>(**keys)`` for the config's ``rllib`` block; an unknown key is a
    ValueError naming it."""
    for section, keys in sections.items():
        try:
            algo_config = getattr(algo_config, section)(**keys)
        except TypeError as err:
            raise ValueError(f"rllib.{section}: {err}") from None
    return algo_config


def build_algo_config(config: PPOConfig, algo: str = "PPO", num_env_runners: int = 0,
                      num_envs_per_env_runner: int | None = None,
                      num_cpus_per_env_runner: float | None = None) -> Any:
    """The RLlib ``AlgorithmConfig`` for an rlblocks config.

    ``num_cpus_per_env_runner`` defaults to this machine's CPUs (less half a CPU for the
    driver) shared by the runners, between 0.25 and 1.

    Raises:
        ValueError: An unknown algorithm, a bad count, or a config RLlib cannot run.
    """
    if algo not in ALGOS:
        raise ValueError(f"--algo must be one of {ALGOS}, got {algo!r}")
    if isinstance(num_env_runners, bool) or int(num_env_runners) < 0:
        raise ValueError(f"--num-env-runners must be >= 0, got {num_env_runners}")
    envs = config.num_envs if num_envs_per_env_runner is None else int(num_envs_per_env_runner)
    if envs < 1:
        raise ValueError(f"--num-envs-per-env-runner must be >= 1, got {envs}")
    if algo in ("APPO", "IMPALA") and int(num_env_runners) < 1:
        raise ValueError(f"{algo} samples asynchronously: give --num-env-runners >= 1")
    _refuse_native_only(config)
    model = _model(config, algo)
    train = _q_training(config, algo) if algo in Q_ALGOS else _ppo_training(config, algo)
    if _frames_once(config, algo):
        train["replay_buffer_config"] = atari_replay_buffer_config(model)
    from rlblocks.rllib import rl_module_spec

    runners = int(num_env_runners)
    cpus = os.cpu_count() or 1
    per_runner = max(0.25, min(1.0, (cpus - 0.5) / runners)) if runners else 1.0
    if num_cpus_per_env_runner is not None:
        if not float(num_cpus_per_env_runner) > 0:
            raise ValueError(f"num_cpus_per_env_runner must be > 0, got "
                             f"{num_cpus_per_env_runner}")
        per_runner = float(num_cpus_per_env_runner)
    algo_config = (
        _algorithm_config_class(algo)()
        .environment(_env_id(config, algo), env_config=dict(config.env_config))
        .rl_module(rl_module_spec=rl_module_spec(model, algo=algo))
        .env_runners(num_env_runners=runners, num_envs_per_env_runner=envs,
                     num_cpus_per_env_runner=per_runner,
                     env_to_module_connector=_pieces(config, algo))
        .resources(num_cpus_for_main_process=0.5 if runners else 1)
        .learners(num_learners=0)
        .training(**train)
        .reporting(metrics_num_episodes_for_smoothing=config.metrics_smoothing_episodes,
                   min_time_s_per_iteration=0)
        .debugging(seed=config.seed)
    )
    return _apply_sections(algo_config, config.rllib)


def _num(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def _init_ray(address: str | None) -> None:
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False)


def is_rllib_run(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` (or the run of a checkpoint in it) was made by this backend."""
    path = Path(run_dir)
    for candidate in (path, path.parent):
        cfg = candidate / "config.json"
        if cfg.is_file():
            try:
                return json.loads(cfg.read_text()).get("backend", {}).get("name") == "rllib"
            except (ValueError, AttributeError):
                return False
    return False


def _checkpoints(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.glob("checkpoint_*") if (p / _META).is_file())


def _newest_checkpoint(path: Path) -> Path:
    if (path / _META).is_file():
        return path
    found = _checkpoints(path)
    if not found:
        raise ValueError(f"no RLlib-backend checkpoint in {str(path)!r}")
    return found[-1]


class RLlibTrainer:
    """Trains with RLlib on Ray and logs like :class:`rlblocks.train.PPOTrainer`.

    Args:
        config: The rlblocks PPO config (or dict).
        run_dir: The run directory (created).
        algo: ``"PPO"``, ``"APPO"`` or ``"IMPALA"``.
        num_env_runners: Ray env-runner actors (0: sample in the driver).
        num_envs_per_env_runner: Vector envs per runner (default ``config.num_envs``).
        num_cpus_per_env_runner: CPUs each runner reserves (default: see
            :func:`build_algo_config`).
        ray_address: An existing cluster's address; None starts a local Ray sized to the
            machine.

    Raises:
        ValueError: A bad config or setting.
    """

    def __init__(self, config: PPOConfig | dict[str, Any], run_dir: str | Path, *,
                 algo: str = "PPO", num_env_runners: int = 0,
                 num_envs_per_env_runner: int | None = None,
                 num_cpus_per_env_runner: float | None = None,
                 ray_address: str | None = None, _resumed: bool = False) -> None:
        self.config = PPOConfig.from_dict(config)
        self.backend = {"name": "rllib", "algo": algo, "num_env_runners": int(num_env_runners),
                        "num_envs_per_env_runner": num_envs_per_env_runner,
                        "num_cpus_per_env_runner": num_cpus_per_env_runner}
        algo_config = build_algo_config(self.config, algo, num_env_runners,
                                        num_envs_per_env_runner, num_cpus_per_env_runner)
        self.run_dir = Path(run_dir)
        self.iteration = 0
        self.timesteps_total = 0
        self.episodes_total = 0
        self.time_total_s = 0.0
        self.last_metrics: dict[str, Any] = {}
        self.checkpoint_path: Path | None = None
        if not _resumed:
            try:
                self.run_dir.mkdir(parents=True, exist_ok=True)
                (self.run_dir / "config.json").write_text(json.dumps(
                    {**self.config.to_dict(), "backend": self.backend}, indent=2, default=repr))
            except OSError as err:
                raise ValueError(f"cannot use {str(self.run_dir)!r} as the run directory: "
                                 f"{err.strerror or err}") from err
        self._logger = ProgressLogger(self.run_dir)
        _init_ray(ray_address)
        self.algo = algo_config.build_algo()

    # --- training ------------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """One RLlib iteration; the metrics in the native trainer's columns."""
        start = time.perf_counter()
        result = self.algo.train()
        elapsed = time.perf_counter() - start
        runners = result.get("env_runners", {})
        learner = result.get("learners", {}).get("default_policy", {})
        steps = int(_num(runners.get("num_env_steps_sampled_lifetime", 0)) or 0)
        done_now = steps - self.timesteps_total
        self.iteration += 1
        self.timesteps_total = steps
        episodes = int(_num(runners.get("num_episodes", 0)) or 0)
        self.episodes_total += episodes
        self.time_total_s += elapsed
        columns = PROGRESS_COLUMNS + (Q_COLUMNS if self.backend["algo"] in Q_ALGOS else ())
        metrics: dict[str, Any] = {c: math.nan for c in columns}
        metrics.update({
            "training_iteration": self.iteration, "timesteps_total": self.timesteps_total,
            "episodes_total": self.episodes_total, "episodes_this_iter": episodes,
            "episode_return_mean": _num(runners.get("episode_return_mean")),
            "episode_return_min": _num(runners.get("episode_return_min")),
            "episode_return_max": _num(runners.get("episode_return_max")),
            "episode_len_mean": _num(runners.get("episode_len_mean")),
            "steps_per_s": done_now / elapsed if elapsed > 0 else math.nan,
            "time_this_iter_s": elapsed, "time_total_s": self.time_total_s,
        })
        for ours, theirs in _LEARNER_KEYS.items():
            if theirs in learner:
                metrics[ours] = _num(learner[theirs])
        if math.isnan(metrics["lr"]) and self.backend["algo"] not in Q_ALGOS:
            metrics["lr"] = self.config.lr
        self.last_metrics = metrics
        self._logger.write(metrics)
        return metrics

    def fit(self, stop_reward: float | None = None, stop_timesteps: int | None = None,
            progress: bool = True, stop_iters: int | None = None) -> dict[str, Any]:
        """Trains until the mean return, step or iteration budget is reached; checkpoints
        every ``config.checkpoint_freq`` iterations and at the end."""
        return train_until(self, f"{self.backend['algo']} (RLlib) {self.config.env_name}",
                           stop_reward, stop_timesteps, stop_iters, progress, self.save,
                           self.config.checkpoint_freq)

    # --- checkpoints ---------------------------------------------------------------------------
    def _filter_state(self) -> dict[str, Any] | None:
        if self.config.observation_filter == "NoFilter":
            return None

        def state(runner: Any) -> Any:
            for piece in runner._env_to_module.connectors:
                if isinstance(piece, MeanStdFilterBatched):
                    return piece.get_state()
            return None

        group = self.algo.env_runner_group
        if group.num_remote_env_runners() > 0:
            found = group.foreach_env_runner(state, local_env_runner=False)
        else:
            found = [state(group.local_env_runner)]
        return next((s for s in found if s is not None), None)

    def save(self) -> Path:
        """Writes ``run_dir/checkpoint_<iteration>`` (older ones beyond
        ``config.keep_checkpoints`` are removed)."""
        target = self.run_dir / f"checkpoint_{self.iteration:06d}"
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.algo.save_to_path(str(tmp.resolve()))
        (tmp / _FILTER).write_bytes(pickle.dumps(self._filter_state()))
        (tmp / _META).write_text(json.dumps({
            "iteration": self.iteration, "timesteps_total": self.timesteps_total,
            "episodes_total": self.episodes_total, "time_total_s": self.time_total_s,
            "last_metrics": self.last_metrics, "backend": self.backend}, default=repr))
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        self.checkpoint_path = target
        keep = max(1, int(self.config.keep_checkpoints))
        for old in _checkpoints(self.run_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        return target

    @classmethod
    def restore(cls, run_dir: str | Path, ray_address: str | None = None) -> RLlibTrainer:
        """Continues a run from its newest checkpoint (``progress.csv`` is cut back to it).

        Raises:
            ValueError: Not a run of this backend, or no checkpoint.
        """
        path = Path(run_dir)
        ckpt = _newest_checkpoint(path)
        run = ckpt.parent
        if not is_rllib_run(run):
            raise ValueError(f"{str(run)!r} is not a run of `rlblocks train --backend rllib`")
        data = json.loads((run / "config.json").read_text())
        backend = data.pop("backend")
        meta = json.loads((ckpt / _META).read_text())
        trainer = cls(data, run, algo=backend["algo"],
                      num_env_runners=backend["num_env_runners"],
                      num_envs_per_env_runner=backend["num_envs_per_env_runner"],
                      num_cpus_per_env_runner=backend.get("num_cpus_per_env_runner"),
                      ray_address=ray_address, _resumed=True)
        trainer.algo.restore_from_path(str(ckpt.resolve()))
        trainer.iteration = int(meta["iteration"])
        trainer.timesteps_total = int(meta["timesteps_total"])
        trainer.episodes_total = int(meta["episodes_total"])
        trainer.time_total_s = float(meta["time_total_s"])
        trainer.last_metrics = dict(meta.get("last_metrics") or {})
        trainer.checkpoint_path = ckpt
        truncate_progress(run, trainer.iteration)
        return trainer

    def close(self) -> None:
        """Stops the algorithm (its env runners and learners)."""
        self.algo.stop()
        self._logger.close()


def _batched(value: Any, time_axis: bool) -> Any:
    """One processed observation as a batch of one (``[1, 1, ...]`` with a time axis)."""
    if isinstance(value, dict):
        return {k: _batched(v, time_axis) for k, v in value.items()}
    t = torch.as_tensor(np.asarray(value))[None]
    return t[:, None] if time_axis else t


def evaluate_run(run_dir: str | Path, episodes: int = 10, explore: bool = False,
                 seed: int | None = None) -> dict[str, Any]:
    """Plays ``episodes`` with the newest checkpoint's module and the same env-to-module
    pieces as training (the filter frozen at its saved state); no Ray cluster is started.

    Returns:
        The keys of :meth:`rlblocks.train.PPOTrainer.evaluate`, plus ``checkpoint``.

    Raises:
        ValueError: Not a run of this backend, no checkpoint, or bad ``episodes``.
    """
    from ray.rllib.core.rl_module.rl_module import RLModule
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode
    from ray.rllib.utils.spaces.space_utils import (
        clip_action,
        get_base_struct_from_space,
        unsquash_action,
    )

    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")
    ckpt = _newest_checkpoint(Path(run_dir))
    if not is_rllib_run(ckpt.parent):
        raise ValueError(f"{str(ckpt.parent)!r} is not a run of `rlblocks train --backend rllib`")
    data = json.loads((ckpt.parent / "config.json").read_text())
    algo = str(data.pop("backend").get("algo", "PPO"))
    config = PPOConfig.from_dict(data)
    module = RLModule.from_checkpoint(str((ckpt / _MODULE).resolve()))
    filter_state = pickle.loads((ckpt / _FILTER).read_bytes())
    env = make_env(config, algo)
    # What RLlib's env runner sends the env: the module's actions unsquashed to the Box
    # bounds (normalize_actions) or clipped to them (clip_actions), as in training.
    runner = build_algo_config(config, algo)
    struct = get_base_struct_from_space(env.action_space)
    to_env = (unsquash_action if runner.normalize_actions
              else clip_action if runner.clip_actions else None)
    pieces = _pieces(config, algo, training=False)()
    space = env.observation_space
    for piece in pieces:
        piece.input_action_space = env.action_space
        piece.input_observation_space = space
        space = piece.observation_space
        if isinstance(piece, MeanStdFilterBatched):
            piece.update_stats = False
            if filter_state is not None:
                piece.set_state(filter_state)
    dist_cls = (module.get_exploration_action_dist_cls() if explore
                else module.get_inference_action_dist_cls())
    stateful = bool(module.get_initial_state())
    base = (config.seed or 0) + 1_000_003 if seed is None else int(seed)
    returns, lengths = [], []
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=base + ep)
            episode = SingleAgentEpisode(observation_space=env.observation_space,
                                         action_space=env.action_space)
            episode.add_env_reset(observation=obs)
            state = {k: torch.from_numpy(v)[None] for k, v in module.get_initial_state().items()}
            total, done = 0.0, False
            while not done:
                for piece in pieces:
                    piece(rl_module=module, batch={}, episodes=[episode], explore=explore,
                          shared_data={})
                batch: dict[str, Any] = {
                    Columns.OBS: _batched(episode.get_observations(-1), stateful)}
                if stateful:
                    batch[Columns.STATE_IN] = state
                with torch.no_grad():
                    out = (module.forward_exploration(batch, t=_LATE) if explore
                           else module.forward_inference(batch))
                if Columns.ACTIONS in out:  # DQN: epsilon-greedy / greedy in the module
                    action = _unbatch(out[Columns.ACTIONS])
                else:
                    logits = out[Columns.ACTION_DIST_INPUTS]
                    if stateful:
                        logits, state = logits[:, 0], out[Columns.STATE_OUT]
                    dist = dist_cls.from_logits(logits)
                    action = _unbatch(dist.sample() if explore
                                      else dist.to_deterministic().sample())
                obs, reward, terminated, truncated, _ = env.step(
                    action if to_env is None else to_env(action, struct))
                episode.add_env_step(observation=obs, action=action, reward=float(reward),
                                     terminated=terminated, truncated=truncated)
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
            lengths.append(len(episode))
    finally:
        env.close()
    return {**episode_summary(returns, lengths), "checkpoint": str(ckpt)}


def _unbatch(actions: Any) -> Any:
    if isinstance(actions, dict):
        return {k: _unbatch(v) for k, v in actions.items()}
    if isinstance(actions, (tuple, list)):
        return type(actions)(_unbatch(a) for a in actions)
    return actions[0].detach().cpu().numpy()
