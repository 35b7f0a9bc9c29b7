"""``Trainer``: what every native trainer shares, whatever it learns.

:class:`Trainer` owns seeding (torch, numpy, Python), the device, the run directory
(:class:`~rlblocks.train.run_logging.RunDirectoryMixin`: ``config.json``, ``progress.csv``,
the writer lock), :meth:`~Trainer.fit` (:func:`~rlblocks.train.loop.train_until` with its
callbacks), evaluation during training and ``run_dir/best``, checkpoints (:meth:`~Trainer.save`,
:meth:`~Trainer.restore`), :meth:`~Trainer.close` and the refusal of an ``rllib`` block.
The algorithms are siblings under it, none a subclass of another:
:class:`~rlblocks.train.ppo.PPOTrainer`, :class:`~rlblocks.train.offpolicy.OffPolicyTrainer`
(DQN, SAC) and :class:`~rlblocks.train.multiagent.MultiAgentPPOTrainer`. Each supplies
``_build`` (its envs, policy, learner), ``train`` (one iteration), ``_close_envs`` and
its part of a checkpoint (``_own_state``, ``_restore_build``, ``_load_state``).
"""

from __future__ import annotations

import contextlib
import math
import pickle
import random
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
import numpy as np
import torch

from rlblocks.models.visionnet import resolved_conv_filters
from rlblocks.train.checkpoint import (
    checkpoint_run_dir,
    load_checkpoint,
    prune_checkpoints,
    recover_interrupted_saves,
    save_checkpoint,
)
from rlblocks.train.envs import config_with_env, evaluation_env, evaluation_seed
from rlblocks.train.evaluation import evaluate_policy
from rlblocks.train.logger import ProgressLogger
from rlblocks.train.loop import train_until
from rlblocks.train.process_threads import set_process_threads
from rlblocks.train.run_logging import BEST, RunDirectoryMixin
from rlblocks.train.rundir import RunDirLock, default_run_dir, fresh_run_dir
from rlblocks.train.trainer_config import TrainerConfig

__all__ = [
    "Trainer",
    "check_episodes",
    "checkpoint_fits",
    "json_config",
    "refuse_rllib_block",
    "resolve_device",
]

_T = TypeVar("_T", bound="Trainer")


def json_config(config: TrainerConfig) -> dict[str, Any]:
    """``config`` as ``config.json`` holds it (a callable env by its name), with the ``algo``
    that trained it first (the key a ``--config`` file names it by)."""
    d = {"algo": config.ALGORITHM, **config.to_dict()}
    if callable(d["env"]):
        fn = d["env"]
        d["env"] = f"<callable {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}>"
    fn = d.get("goal_reward")
    if callable(fn):  # the off-policy configs' hindsight reward (rlblocks.train.hindsight)
        d["goal_reward"] = (
            f"<callable {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}>"
        )
    return d


def resolve_device(name: str) -> torch.device:
    """The torch device of the config's ``device`` (``auto``: CUDA when torch sees one)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no CUDA device; use 'cpu' or 'auto'")
    return torch.device(name)


def refuse_rllib_block(config: TrainerConfig) -> None:
    """Refuses a config with an ``rllib`` block: its options only mean something to RLlib."""
    if config.rllib:
        raise ValueError(
            "the config's 'rllib' block sets RLlib options: train it with "
            "--backend rllib (RLlibTrainer), or remove the block"
        )


def check_episodes(episodes: Any) -> None:
    """Refuses an evaluation's ``episodes`` that is not an int >= 1."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")


@contextlib.contextmanager
def checkpoint_fits(state: Mapping[str, Any]) -> Iterator[None]:
    """Turns what loading a checkpoint's weights raises into one ValueError naming it."""
    try:
        yield
    except (RuntimeError, ValueError, KeyError) as err:
        raise ValueError(
            f"checkpoint {state['_path']!r} does not fit this config/model: {err}"
        ) from None


class Trainer(RunDirectoryMixin):
    """The base of the native trainers (module docstring).

    Args:
        config: The algorithm's config (``CONFIG``) or an RLlib-style dict.
        run_dir: Where ``config.json``, ``progress.csv``, checkpoints (and TensorBoard
            events) go; None writes nothing until :meth:`save` (which then picks
            :func:`~rlblocks.train.rundir.default_run_dir`).
        env: Overrides the config's ``env``: an id or ``env_creator(env_config)``, a
            ``gymnasium.Env`` instance (trained as the only env: ``num_envs`` becomes 1;
            evaluation runs on a deep copy) or a gymnasium ``VectorEnv`` (``num_envs``
            becomes its size; evaluation copies its first sub-env when it has ``envs``).
    """

    #: The config class the trainer reads.
    CONFIG: ClassVar[type[TrainerConfig]] = TrainerConfig
    #: The ``format`` of this trainer's checkpoints.
    FORMAT: ClassVar[str] = ""
    #: What a checkpoint of another format is called "not a ... checkpoint" by.
    KIND: ClassVar[str] = ""
    config: Any
    policy: Any
    obs_filter: Any
    preprocessor: Any

    def __init__(
        self,
        config: TrainerConfig | Mapping[str, Any] | None = None,
        run_dir: str | Path | None = None,
        env: Any = None,
    ):
        self.config = self.CONFIG.from_dict(config)
        given_venv: Any = None
        if env is not None:
            self.config, given_venv = config_with_env(self.config, env)
        refuse_rllib_block(self.config)
        self._check_config()
        self._start(given_venv, run_dir)

    # --- what each algorithm supplies -------------------------------------------------------
    def _check_config(self) -> None:
        """Refuses what this trainer cannot train, before anything is built."""

    def _build(self, venv: Any) -> None:
        """Builds the envs (``venv``: given or restored ones, or None), policy and learner."""
        raise NotImplementedError

    def train(self) -> dict[str, Any]:
        """Runs one iteration and returns its metrics."""
        raise NotImplementedError

    def _close_envs(self) -> None:
        """Closes the training envs."""
        raise NotImplementedError

    def _own_state(self) -> dict[str, Any]:
        """The algorithm's part of :meth:`state_dict` (weights, envs, counters)."""
        raise NotImplementedError

    def _restore_build(self, state: dict[str, Any], envs: Any) -> None:
        """Builds the trainer of a restore (``envs``: the unpickled ``state["envs"]`` or
        None), warning when the run will not continue bit for bit."""
        raise NotImplementedError

    def _load_state(self, state: dict[str, Any], envs: Any) -> None:
        """Loads the algorithm's part of a checkpoint into the built trainer (``envs``:
        the restored envs, None when they restart from a fresh reset)."""
        raise NotImplementedError

    # --- starting -----------------------------------------------------------------------------
    def _start(self, venv: Any, run_dir: str | Path | None) -> None:
        """Seeds, builds the trainer and opens the run directory."""
        cfg = self.config
        seed = (
            cfg.seed
            if cfg.seed is not None
            else int(np.random.SeedSequence().generate_state(1)[0] % (2**31))
        )
        self._set_up_process(seed)
        torch.manual_seed(self.seed)
        random.seed(self.seed)
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
                self._claim_run_dir(Path(run_dir))
                self._open_run_dir(Path(run_dir))
            except Exception:
                self.close()
                raise

    def _set_up_process(self, seed: int) -> None:
        """The run's seed, torch's and numpy's BLAS threads, the device and the numpy
        generator."""
        self.seed = seed
        set_process_threads(self.config.num_threads)
        self.device = resolve_device(self.config.device)
        self._rng = np.random.default_rng(self.seed)

    def _init_extras(self) -> None:
        """State of evaluation during training, the best checkpoint and stop requests."""
        self.stop_requested = False
        self.best_score = -math.inf
        self._eval_env: gym.Env | None = None

    def _config_json(self) -> dict[str, Any]:
        """``config.json``: the config, with the conv stack the vision net picked (RLlib's
        table or a derived one, difference 26), so a run shows the filters it trained with."""
        data = json_config(self.config)
        filters = resolved_conv_filters(self.policy.model)
        if filters is not None and data["model"].get("conv_filters") is None:
            data["model"]["conv_filters"] = filters
        return data

    @property
    def model(self) -> torch.nn.Module:
        """The trained model (a :class:`~rlblocks.models.ModelV2`)."""
        return self.policy.model  # type: ignore[no-any-return]

    # --- fit ----------------------------------------------------------------------------------
    def stop(self) -> None:
        """Asks :meth:`fit` to stop after the current iteration (e.g. from a callback)."""
        self.stop_requested = True

    def interrupt(self) -> None:
        """Asks :meth:`fit` to stop as soon as the run can be saved whole (Ctrl-C in
        ``rlblocks train``): PPO after the current iteration's update, DQN and SAC at the
        next env step (a shorter iteration); ``fit`` then writes its final checkpoint."""
        self.stop_requested = True
        self._interrupted = True

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
            if getattr(self, "tracks_success", False):  # a column from the first row on
                metrics["evaluation/success_rate"] = (
                    math.nan if evaluation is None else evaluation.get("success_rate", math.nan)
                )
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

    def best_by(self) -> str:
        """What ``run_dir/best`` is scored by (saved in every checkpoint and in ``best/``'s
        ``meta.json``): the evaluation return when evaluating, else the training return."""
        if self.config.evaluation_interval:
            return "evaluation/episode_return_mean"
        return "episode_return_mean"

    def _best_score(self, result: dict[str, Any], at_checkpoint: bool) -> float | None:
        """This iteration's score for ``run_dir/best`` (higher is better; None: no score
        now): the evaluation return at evaluation iterations (``evaluation_interval``), else
        the training return at checkpoint iterations (``at_checkpoint``)."""
        interval = self.config.evaluation_interval
        if at_checkpoint == bool(interval) or (interval and self.iteration % interval):
            return None
        try:
            return float(result.get(self.best_by(), math.nan))
        except (TypeError, ValueError):
            return None

    def _track_best(self, score: float | None) -> None:
        """Saves ``run_dir/best`` when ``score`` beats the best score so far."""
        if self.run_dir is None or score is None or math.isnan(score):
            return
        if score <= self.best_score:
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

        def after_iteration(result: dict[str, Any]) -> None:
            self._track_best(self._best_score(result, at_checkpoint=False))

        class _BestOfCheckpoints:
            @staticmethod
            def on_checkpoint(trainer: Trainer, path: Path) -> None:
                trainer._track_best(trainer._best_score(trainer.last_metrics, True))

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

    # --- evaluation ---------------------------------------------------------------------------
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
        check_episodes(episodes)
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
        return evaluation_seed(self.seed, seed)

    # --- checkpoints --------------------------------------------------------------------------
    def _storable_env(self) -> Any:
        """The config's env as a checkpoint stores it (None: it cannot be pickled)."""
        env = self.config.env
        try:
            pickle.dumps(env)
            return env
        except Exception:  # lambdas and closures cannot be pickled
            return None

    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint holds: the config, counters, RNG states, the best score
        and the algorithm's own part (weights, optimizers, envs when they pickle)."""
        config = self.config.to_dict()
        config["env"] = self._storable_env()
        return {
            "format": self.FORMAT,
            "config": config,
            "env_name": self.config.env_name,
            "seed": self.seed,
            "iteration": self.iteration,
            "timesteps_total": self.timesteps_total,
            "time_total_s": self.time_total_s,
            **self._own_state(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "numpy_rng": self._rng.bit_generator.state,
            "python_rng": random.getstate(),
            "last_metrics": dict(self.last_metrics),
            "best_score": self.best_score,
            "best_by": self.best_by(),
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
        cls: type[_T],
        path: str | Path,
        env: Any = None,
        run_dir: str | Path | None = None,
        log: bool = True,
    ) -> _T:
        """A trainer continuing from a checkpoint (or a run directory's newest checkpoint):
        exactly as the uninterrupted run when its envs (and an off-policy run's replay
        buffer, ``checkpoint_replay``) were stored, else with a RuntimeWarning.

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
            raise ValueError(f"{state['_path']!r} is not a {cls.KIND} checkpoint")
        config_dict = dict(state["config"])
        if env is not None:
            config_dict["env"] = env
        if config_dict["env"] is None:
            raise ValueError(
                f"checkpoint {state['_path']!r} was trained on {state['env_name']!r}, an env "
                f"creator that could not be saved; pass it: {cls.__name__}.restore(path, env=...)"
            )
        envs = None
        if state.get("envs") is not None:
            try:
                envs = pickle.loads(state["envs"])
            except Exception as err:  # e.g. the env's module is not importable here
                raise ValueError(
                    f"checkpoint {state['_path']!r}: its saved environments cannot be loaded "
                    f"({type(err).__name__}: {err}); is the env's package importable?"
                ) from None
        trainer = cls.__new__(cls)
        trainer.config = cls.CONFIG.from_dict(config_dict)
        trainer._set_up_process(int(state["seed"]))
        trainer._logger = None
        trainer._restore_build(state, envs)
        trainer._init_extras()
        trainer.iteration = int(state["iteration"])
        trainer.timesteps_total = int(state["timesteps_total"])
        trainer.time_total_s = float(state["time_total_s"])
        trainer.last_metrics = dict(state.get("last_metrics") or {})
        trainer.best_score = -math.inf
        if state.get("best_by", Trainer.best_by(trainer)) == trainer.best_by():
            trainer.best_score = float(state.get("best_score", -math.inf))
        trainer._load_state(state, envs)
        torch.set_rng_state(state["torch_rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        trainer._rng.bit_generator.state = state["numpy_rng"]
        random.setstate(state["python_rng"])
        trainer._resume_logging(state, run_dir, log)
        return trainer

    def close(self) -> None:
        """Closes the envs and the log writers."""
        self._close_envs()
        if getattr(self, "_eval_env", None) is not None:
            self._eval_env.close()  # type: ignore[union-attr]
            self._eval_env = None
        if getattr(self, "_logger", None) is not None:
            self._logger.close()  # type: ignore[union-attr]
        self._release_run_dir()

    def __enter__(self: _T) -> _T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
