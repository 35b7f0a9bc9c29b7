"""``PPOTrainer``: rollouts, PPO updates, metrics, checkpoints, evaluation.

One :meth:`PPOTrainer.train` call is one iteration: collect ``train_batch_size`` steps from
the vector env, run ``num_sgd_iter`` epochs of minibatch SGD, return the metrics.
:meth:`PPOTrainer.fit` loops until a return or timestep target, with a progress bar,
periodic checkpoints and ``progress.csv`` rows in the run directory.

Reproducibility: the seed fixes torch's RNG (action sampling, initial weights), a numpy
generator (minibatch order) and the envs' seeds. A checkpoint stores all of them, plus the
envs themselves when they can be pickled (sync vector envs of ordinary Python envs), the
current observations, recurrent states and episode counters, so a restored run continues
exactly as the uninterrupted one would (same process settings, CPU). Envs that cannot be
pickled are re-created and reset with a seed derived from the run's seed and timestep count.

Examples:
    >>> trainer = PPOTrainer(PPOConfig(env="CartPole-v1", num_envs=2, train_batch_size=64,
    ...                                sgd_minibatch_size=32, num_sgd_iter=1))
    >>> actions, state = trainer.compute_actions([np.zeros(4, np.float32)] * 3)
    >>> actions.shape, state
    ((3,), [])
    >>> trainer.close()
"""

from __future__ import annotations

import math
import pickle
import random
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from rlblocks.catalog import ModelCatalog
from rlblocks.filters import get_filter
from rlblocks.models.visionnet import resolved_conv_filters
from rlblocks.nest import tree_index
from rlblocks.train.checkpoint import (
    checkpoint_run_dir,
    load_checkpoint,
    prune_checkpoints,
    recover_interrupted_saves,
    save_checkpoint,
)
from rlblocks.train.denormals import flushing_denormals
from rlblocks.train.envs import (
    config_with_env,
    evaluation_env,
    make_env_creator,
    vector_env_from_config,
)
from rlblocks.train.evaluation import evaluate_policy
from rlblocks.train.learner import PPOLearner
from rlblocks.train.logger import ProgressLogger
from rlblocks.train.loop import StopTraining, train_until
from rlblocks.train.policy import Policy
from rlblocks.train.run_logging import BEST, RunDirectoryMixin
from rlblocks.train.rundir import RunDirLock, default_run_dir, fresh_run_dir
from rlblocks.train.runner import EnvRunner
from rlblocks.train.trainer_config import PPOConfig, TrainerConfig, lr_at

__all__ = ["BEST", "PPOTrainer", "StopTraining", "default_run_dir"]


def _json_config(config: TrainerConfig) -> dict[str, Any]:
    d = config.to_dict()
    if callable(d["env"]):
        fn = d["env"]
        d["env"] = f"<callable {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}>"
    return d


def _resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no CUDA device; use 'cpu' or 'auto'")
    return torch.device(name)


class PPOTrainer(RunDirectoryMixin):
    """Trains a catalog model with PPO on a gymnasium env (see :class:`PPOConfig`).

    Args:
        config: A :class:`PPOConfig` or an RLlib-style dict (``PPOConfig.from_dict``).
        run_dir: Where ``config.json``, ``progress.csv``, checkpoints (and TensorBoard
            events) go; None writes nothing until :meth:`save` (which then picks
            :func:`default_run_dir`).
        env: Overrides the config's ``env``: an id or ``env_creator(env_config)``, a
            ``gymnasium.Env`` instance (trained as the only env: ``num_envs`` becomes 1;
            evaluation runs on a deep copy) or a gymnasium ``VectorEnv`` (``num_envs``
            becomes its size; evaluation copies its first sub-env when it has ``envs``).

    Raises:
        ValueError: A bad config, no or an unknown env, or a model/distribution that does
            not fit the env's spaces.
    """

    #: The ``format`` of this trainer's checkpoints.
    FORMAT: ClassVar[str] = "rlblocks.ppo"

    def __init__(
        self,
        config: PPOConfig | Mapping[str, Any] | None = None,
        run_dir: str | Path | None = None,
        env: Any = None,
    ):
        self.config = PPOConfig.from_dict(config)
        given_venv: Any = None
        if env is not None:
            self.config, given_venv = config_with_env(self.config, env)
        cfg = self.config
        if cfg.rllib:
            raise ValueError(
                "the config's 'rllib' block sets RLlib options: train it with "
                "--backend rllib (RLlibTrainer), or remove the block"
            )
        make_env_creator(cfg)  # validates the env early, with a clear message
        self._start(given_venv, run_dir)

    def _start(self, venv: Any, run_dir: str | Path | None) -> None:
        """Seeds, builds the policy, learner and runner, and opens the run directory."""
        cfg = self.config
        self.seed = (
            cfg.seed
            if cfg.seed is not None
            else int(np.random.SeedSequence().generate_state(1)[0] % (2**31))
        )
        if cfg.num_threads is not None:
            torch.set_num_threads(cfg.num_threads)
        self.device = _resolve_device(cfg.device)
        torch.manual_seed(self.seed)
        random.seed(self.seed)
        self._rng = np.random.default_rng(self.seed)
        self._build(venv=venv)
        self._init_extras()
        self.iteration = 0
        self.timesteps_total = 0
        self.time_total_s = 0.0
        self.last_metrics: dict[str, Any] = {}
        self.run_dir: Path | None = None
        self.checkpoint_path: Path | None = None
        self._logger: ProgressLogger | None = None
        self._run_lock: RunDirLock | None = None
        if run_dir is not None:
            try:
                self._open_run_dir(Path(run_dir))
            except Exception:
                self.close()
                raise

    def _init_extras(self) -> None:
        """State of evaluation during training, the best checkpoint and stop requests."""
        self.stop_requested = False
        self.best_score = -math.inf
        self._eval_env: gym.Env | None = None

    def stop(self) -> None:
        """Asks :meth:`fit` to stop after the current iteration (e.g. from a callback)."""
        self.stop_requested = True

    def interrupt(self) -> None:
        """Asks :meth:`fit` to stop as soon as the run can be saved whole (Ctrl-C in
        ``rlblocks train``): PPO after the current iteration's update, DQN and SAC at the
        next env step (a shorter iteration); ``fit`` then writes its final checkpoint."""
        self.stop_requested = True
        self._interrupted = True

    def _build(self, venv: Any) -> None:
        cfg = self.config
        self.venv = venv if venv is not None else vector_env_from_config(cfg)
        obs_space = self.venv.single_observation_space
        action_space = self.venv.single_action_space
        self.preprocessor = ModelCatalog.get_preprocessor_for_space(obs_space, cfg.model_config())
        self.obs_filter = get_filter(cfg.observation_filter, self.preprocessor.shape)
        self.policy = Policy(self.preprocessor.observation_space, action_space, cfg, self.device)
        self.learner = PPOLearner(self.policy, cfg)
        self.runner = EnvRunner(
            cfg, self.policy, self.preprocessor, self.obs_filter, self.seed, venv=self.venv
        )

    def _config_json(self) -> dict[str, Any]:
        """``config.json``: the config, with the conv stack the vision net picked (RLlib's
        table or a derived one, difference 26), so a run shows the filters it trained with."""
        data = _json_config(self.config)
        filters = resolved_conv_filters(self.policy.model)
        if filters is not None and data["model"].get("conv_filters") is None:
            data["model"]["conv_filters"] = filters
        return data

    # --- properties -----------------------------------------------------------------------
    @property
    def model(self) -> torch.nn.Module:
        """The trained model (a :class:`~rlblocks.models.ModelV2`)."""
        return self.policy.model

    # --- training -------------------------------------------------------------------------
    @flushing_denormals
    def train(self) -> dict[str, Any]:
        """Runs one iteration (rollout + SGD epochs) and returns its metrics.

        Returns:
            ``training_iteration``, ``timesteps_total``, ``episodes_total``,
            ``episodes_this_iter``, ``episode_return_mean`` / ``_min`` / ``_max`` (over the
            last ``metrics_smoothing_episodes`` episodes; nan before the first one ends),
            ``episode_len_mean``, ``policy_loss``, ``vf_loss``, ``total_loss``, ``entropy``,
            ``kl``, ``kl_coeff``, ``approx_kl``, ``clipfrac``, ``explained_variance``,
            ``lr``, ``steps_per_s``, ``time_this_iter_s``, ``time_total_s``, and the model's
            ``metrics()`` (a key clashing with these gets a ``model_`` prefix).
        """
        cfg = self.config
        start = time.perf_counter()
        lr = lr_at(cfg, self.timesteps_total)
        self.learner.set_lr(lr)
        batch = self.runner.collect(self._steps_per_env(int(cfg.rollout_fragment_length)))
        self.timesteps_total += batch.num_steps
        stats = self.learner.update(batch, self._rng)
        self.iteration += 1
        elapsed = time.perf_counter() - start
        self.time_total_s += elapsed
        returns = list(self.runner.episode_returns)
        lengths = list(self.runner.episode_lengths)
        metrics: dict[str, Any] = {
            "training_iteration": self.iteration,
            "timesteps_total": self.timesteps_total,
            "episodes_total": self.runner.episodes_total,
            "episodes_this_iter": len(batch.episode_returns),
            "episode_return_mean": float(np.mean(returns)) if returns else math.nan,
            "episode_return_min": float(np.min(returns)) if returns else math.nan,
            "episode_return_max": float(np.max(returns)) if returns else math.nan,
            "episode_len_mean": float(np.mean(lengths)) if lengths else math.nan,
            **stats,
            "lr": lr,
            "steps_per_s": batch.num_steps / elapsed if elapsed > 0 else math.nan,
            "time_this_iter_s": elapsed,
            "time_total_s": self.time_total_s,
        }
        model_metrics: dict[str, Any] = self.policy.model.metrics()
        for key, value in model_metrics.items():
            if isinstance(value, torch.Tensor):
                value = float(value.detach().float().mean())
            name = f"model_{key}" if key in metrics else key
            metrics[name] = value
        return self._finish_iteration(metrics)

    def _steps_per_env(self, per_env: int) -> int:
        """This iteration's steps of each env: ``per_env``, fewer in the last iteration of
        :meth:`fit`'s step budget (it ends at the budget, rounded up to whole steps of all
        ``num_envs`` envs)."""
        budget = getattr(self, "_step_budget", None)
        if budget is None:
            return per_env
        left = budget - self.timesteps_total
        return max(1, min(per_env, -(-left // self.config.num_envs)))

    def _finish_iteration(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """The iteration's ``evaluation/...`` columns (with ``evaluation_interval``: an
        evaluation every that many iterations, NaN in the others), then ``last_metrics`` and
        the ``progress.csv`` row."""
        interval = self.config.evaluation_interval
        if interval:
            evaluation = None
            if self.iteration % interval == 0:
                evaluation = self._evaluate_during_training()
            for key in (
                "episode_return_mean",
                "episode_return_std",
                "episode_return_min",
                "episode_return_max",
                "episode_len_mean",
            ):
                metrics[f"evaluation/{key}"] = math.nan if evaluation is None else evaluation[key]
        self.last_metrics = metrics
        if self._logger is not None:
            self._logger.write(metrics)
        return metrics

    def _evaluate_during_training(self) -> dict[str, Any]:
        """``evaluation_episodes`` greedy episodes on the trainer's own evaluation env (kept
        open between evaluations; the same seeds every time)."""
        if self._eval_env is None:
            self._eval_env = self.evaluation_env()
        return evaluate_policy(
            self.policy,
            self._observe,
            self._eval_env,
            self.config.evaluation_episodes,
            self.evaluation_seed(),
            clip=self.config.clip_actions,
        )

    def _track_best(self, result: dict[str, Any], evaluated: bool) -> None:
        """Saves ``run_dir/best`` when this iteration's score beats the best so far: the
        evaluation return when evaluating (at evaluation iterations), else the training
        return (at checkpoint iterations)."""
        if self.run_dir is None or not evaluated:
            return
        key = (
            "evaluation/episode_return_mean"
            if self.config.evaluation_interval
            else "episode_return_mean"
        )
        try:
            score = float(result.get(key, math.nan))
        except (TypeError, ValueError):
            return
        if math.isnan(score) or score <= self.best_score:
            return
        self.best_score = score
        save_checkpoint(self.run_dir, self.state_dict(), self.run_dir / BEST)

    def fit(
        self,
        stop_reward: float | None = None,
        stop_timesteps: int | None = None,
        progress: bool = True,
        stop_iters: int | None = None,
        callbacks: list[Any] | tuple[Any, ...] = (),
    ) -> dict[str, Any]:
        """Trains until ``episode_return_mean >= stop_reward`` or a step/iteration budget.

        With a run directory, a checkpoint is written every ``config.checkpoint_freq``
        iterations and at the end, and ``run_dir/best`` holds the best checkpoint so far: by
        the evaluation return at evaluation iterations (``evaluation_interval``), else by the
        training return at checkpoint iterations.

        Args:
            stop_reward: Stop once the mean return reaches this.
            stop_timesteps: Stop once ``timesteps_total`` reaches this: the last iteration
                is shorter (a shorter rollout, fewer off-policy steps), so the run ends at
                the budget rounded up to whole steps of its ``num_envs`` envs.
            progress: Show a tqdm progress bar (timesteps, mean return, steps/s).
            stop_iters: Stop after this many iterations in total.
            callbacks: Objects with ``on_iteration(trainer, result)`` (returning True
                stops the run) and/or ``on_checkpoint(trainer, path)``
                (:class:`~rlblocks.train.loop.Callback`); :meth:`stop` or raising
                :class:`~rlblocks.train.loop.StopTraining` stops it too.

        Returns:
            The last iteration's metrics.

        Raises:
            ValueError: No stopping criterion given.
        """
        self.stop_requested = False
        self._interrupted = False
        interval = self.config.evaluation_interval

        def after_iteration(result: dict[str, Any]) -> None:
            if interval:
                self._track_best(result, self.iteration % interval == 0)

        class _BestOfCheckpoints:
            @staticmethod
            def on_checkpoint(trainer: PPOTrainer, path: Path) -> None:
                if not interval:
                    trainer._track_best(trainer.last_metrics, True)

        self._step_budget = stop_timesteps  # the last iteration stops at it
        try:
            return train_until(
                self,
                f"{self.config.ALGORITHM} {self.config.env_name}",
                stop_reward,
                stop_timesteps,
                stop_iters,
                progress,
                self.save if self.run_dir is not None else None,
                self.config.checkpoint_freq,
                callbacks=[_BestOfCheckpoints(), *callbacks],
                after_iteration=after_iteration,
            )
        finally:
            self._step_budget = None

    # --- acting ---------------------------------------------------------------------------
    def compute_actions(
        self,
        obs: Any,
        state: list[Any] | None = None,
        explore: bool = False,
        prev_actions: Any = None,
        prev_rewards: Any = None,
    ) -> tuple[Any, list[torch.Tensor]]:
        """Actions for a batch of raw env observations (no filter update, no training).

        Args:
            obs: A list of observations, or a batched structure (leading batch dim).
            state: The recurrent state (``[B, ...]`` tensors, as returned by the previous
                call); None starts from the initial state.
            explore: Sample (True) or take the most likely action (False).
            prev_actions: ``[B, n, *action_shape]`` previous actions for models that read
                them (None: zeros, as at an episode start).
            prev_rewards: ``[B, n]`` previous rewards (None: zeros).

        Returns:
            ``(actions, state_out)``: numpy actions in the action space's batched structure
            and the new state list (empty for feed-forward models).
        """
        x = self._observe(obs)
        if state is None:
            state = self.policy.initial_state(x.shape[0])
        state = [torch.as_tensor(s, device=self.device) for s in state]
        out = self.policy.act(x, state, prev_actions, prev_rewards, explore=explore, full=False)
        return out["actions"], out["state_out"]

    def compute_single_action(
        self, obs: Any, state: list[Any] | None = None, explore: bool = False
    ) -> tuple[Any, list[torch.Tensor]]:
        """One observation -> ``(action, state_out)`` (state tensors without a batch dim)."""
        batched = None if state is None else [torch.as_tensor(s)[None] for s in state]
        actions, state_out = self.compute_actions([obs], batched, explore=explore)
        return tree_index(actions, 0), [s[0] for s in state_out]

    def evaluate(
        self, episodes: int = 10, explore: bool = False, seed: int | None = None
    ) -> dict[str, Any]:
        """Runs ``episodes`` full episodes on a fresh env (training state is untouched).

        Args:
            episodes: Number of episodes (>= 1).
            explore: Sample actions instead of taking the most likely ones.
            seed: Seed of the evaluation env (default: the run's seed + 1,000,003).

        Returns:
            ``episodes``, ``episode_return_mean`` / ``_std`` / ``_min`` / ``_max``,
            ``episode_len_mean`` and the list ``episode_returns``.
        """
        if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
            raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")
        env = self.evaluation_env()
        try:
            return evaluate_policy(
                self.policy,
                self._observe,
                env,
                episodes,
                self.evaluation_seed(seed),
                explore,
                self.config.clip_actions,
            )
        finally:
            env.close()

    def _observe(self, obs: Any) -> np.ndarray:
        """Raw observations -> the model's inputs (the filter is not updated)."""
        return np.asarray(self.obs_filter(self.preprocessor.transform_batch(obs), update=False))

    def evaluation_env(self) -> gym.Env:
        """A fresh single env as :meth:`evaluate` uses it (the run's wrappers included)."""
        return evaluation_env(self.config)

    def evaluation_seed(self, seed: int | None = None) -> int:
        """The seed of :meth:`evaluate`'s first episode (default: the run's seed + 1,000,003)."""
        return self.seed + 1_000_003 if seed is None else int(seed)

    # --- checkpoints ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint holds (see the module docstring)."""
        env = self.config.env
        try:
            pickle.dumps(env)
            storable_env = env
        except Exception:  # lambdas and closures cannot be pickled
            storable_env = None
        config = self.config.to_dict()
        config["env"] = storable_env
        return {
            "format": self.FORMAT,
            "config": config,
            "env_name": self.config.env_name,
            "seed": self.seed,
            "iteration": self.iteration,
            "timesteps_total": self.timesteps_total,
            "time_total_s": self.time_total_s,
            "model": self.model.state_dict(),
            "optimizer": self.learner.optimizer.state_dict(),
            "kl_coeff": self.learner.kl_coeff,
            "filter": self.obs_filter.state_dict(),
            "runner": self.runner.state_dict(),
            "envs": self.runner.env_snapshot(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "numpy_rng": self._rng.bit_generator.state,
            "python_rng": random.getstate(),
            "last_metrics": dict(self.last_metrics),
            "best_score": self.best_score,
        }

    def save(self, path: str | Path | None = None) -> Path:
        """Writes a checkpoint atomically; returns its directory.

        Args:
            path: The checkpoint directory; default ``run_dir/checkpoint_<iteration>``
                (a default run directory is created if the trainer has none).
        """
        if path is None and self.run_dir is None:
            self._open_run_dir(fresh_run_dir(default_run_dir(self.config)))
        run = self.run_dir if self.run_dir is not None else Path(path).parent  # type: ignore[arg-type]
        saved = save_checkpoint(run, self.state_dict(), path)
        self.checkpoint_path = saved
        if path is None and self.run_dir is not None:
            prune_checkpoints(self.run_dir, self.config.keep_checkpoints)
        return saved

    @classmethod
    def restore(
        cls,
        path: str | Path,
        env: str | Callable[[dict[str, Any]], Any] | None = None,
        run_dir: str | Path | None = None,
        log: bool = True,
    ) -> PPOTrainer:
        """A trainer continuing from a checkpoint (or a run directory's newest checkpoint).

        Args:
            path: A ``checkpoint_NNNNNN`` directory or a run directory.
            env: The env (id or creator) when the checkpoint could not store it (a lambda or
                closure as ``env``).
            run_dir: Where the resumed run logs; default: the checkpoint's run directory
                (its ``progress.csv`` is cut back to the checkpoint's iteration, and its
                later checkpoints are moved into ``abandoned_<time>/`` with a warning).
            log: Log into the run directory; False leaves every file untouched (for
                evaluation or inspection; :meth:`save` then needs a path or picks a new
                default run directory).

        Raises:
            ValueError: No checkpoint, a corrupt one, or an env that must be given.
        """
        if log:  # a save killed between its renames: its old copy is the valid one
            recover_interrupted_saves(checkpoint_run_dir(path))
        state = load_checkpoint(path)
        if state.get("format") != cls.FORMAT:
            raise ValueError(f"{state['_path']!r} is not a PPO checkpoint")
        config_dict = dict(state["config"])
        if env is not None:
            config_dict["env"] = env
        if config_dict["env"] is None:
            raise ValueError(
                f"checkpoint {state['_path']!r} was trained on {state['env_name']!r}, an env "
                "creator that could not be saved; pass it: PPOTrainer.restore(path, env=...)"
            )
        config = PPOConfig.from_dict(config_dict)
        trainer = cls.__new__(cls)
        trainer.config = config
        trainer.seed = int(state["seed"])
        if config.num_threads is not None:
            torch.set_num_threads(config.num_threads)
        trainer.device = _resolve_device(config.device)
        envs = None
        if state.get("envs") is not None:
            try:
                envs = pickle.loads(state["envs"])
            except Exception as err:  # e.g. the env's module is not importable here
                raise ValueError(
                    f"checkpoint {state['_path']!r}: its saved environments cannot be loaded "
                    f"({type(err).__name__}: {err}); is the env's package importable?"
                ) from None
        if envs is None:
            warnings.warn(
                f"resuming {state['_path']!r}: its envs were not stored (vector_mode="
                f"{config.vector_mode!r}{'' if config.vector_mode != 'sync' else ', not picklable'}"
                "), so they restart from a fresh reset: the episodes in progress at the "
                "checkpoint are dropped and the run does not continue bit for bit",
                RuntimeWarning,
                stacklevel=2,
            )
        trainer._rng = np.random.default_rng(trainer.seed)
        trainer._build(venv=vector_env_from_config(config, envs=envs) if envs is not None else None)
        trainer.iteration = int(state["iteration"])
        trainer.timesteps_total = int(state["timesteps_total"])
        trainer.time_total_s = float(state["time_total_s"])
        trainer.last_metrics = dict(state.get("last_metrics") or {})
        trainer._init_extras()
        trainer.best_score = float(state.get("best_score", -math.inf))
        try:
            trainer.model.load_state_dict(state["model"])
            trainer.learner.optimizer.load_state_dict(state["optimizer"])
            trainer.obs_filter.load_state_dict(state["filter"])
        except (RuntimeError, ValueError, KeyError) as err:
            raise ValueError(
                f"checkpoint {state['_path']!r} does not fit this config/model: {err}"
            ) from None
        trainer.learner.kl_coeff = float(state["kl_coeff"])
        trainer.runner.load_state_dict(state["runner"], envs_restored=envs is not None)
        if envs is None:
            trainer.runner._seed = trainer.seed + trainer.timesteps_total
        torch.set_rng_state(state["torch_rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        trainer._rng.bit_generator.state = state["numpy_rng"]
        random.setstate(state["python_rng"])
        trainer._resume_logging(state, run_dir, log)
        return trainer

    def close(self) -> None:
        """Closes the envs and the log writers."""
        self.runner.close()
        if getattr(self, "_eval_env", None) is not None:
            self._eval_env.close()  # type: ignore[union-attr]
            self._eval_env = None
        if getattr(self, "_logger", None) is not None:
            self._logger.close()  # type: ignore[union-attr]
        self._release_run_dir()

    def __enter__(self) -> PPOTrainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
