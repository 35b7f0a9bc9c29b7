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
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from rlblocks.catalog import ModelCatalog
from rlblocks.filters import get_filter, unfiltered_columns
from rlblocks.nest import tree_index
from rlblocks.train.denormals import flushing_denormals
from rlblocks.train.envs import make_env_creator, vector_env_from_config
from rlblocks.train.learners.ppo import PPOLearner
from rlblocks.train.loop import StopTraining
from rlblocks.train.policy import Policy
from rlblocks.train.run_logging import BEST
from rlblocks.train.rundir import default_run_dir
from rlblocks.train.runner import EnvRunner
from rlblocks.train.success import SuccessWindow
from rlblocks.train.trainer import Trainer, checkpoint_fits
from rlblocks.train.trainer_config import PPOConfig, lr_at

__all__ = ["BEST", "PPOTrainer", "StopTraining", "default_run_dir"]


class PPOTrainer(Trainer):
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

    CONFIG: ClassVar[type[PPOConfig]] = PPOConfig
    FORMAT: ClassVar[str] = "rlblocks.ppo"
    KIND: ClassVar[str] = "PPO"

    def __init__(
        self,
        config: PPOConfig | Mapping[str, Any] | None = None,
        run_dir: str | Path | None = None,
        env: Any = None,
    ):
        super().__init__(config, run_dir, env)

    def _check_config(self) -> None:
        make_env_creator(self.config)  # validates the env early, with a clear message

    def _build(self, venv: Any) -> None:
        cfg = self.config
        self.venv = venv if venv is not None else vector_env_from_config(cfg)
        obs_space = self.venv.single_observation_space
        action_space = self.venv.single_action_space
        self.preprocessor = ModelCatalog.get_preprocessor_for_space(obs_space, cfg.model_config())
        self.obs_filter = get_filter(
            cfg.observation_filter,
            self.preprocessor.shape,
            cfg.observation_clip,
            unfiltered_columns(self.preprocessor.layout),
        )
        self.policy = Policy(self.preprocessor.observation_space, action_space, cfg, self.device)
        self.learner = PPOLearner(self.policy, cfg)
        self.runner = EnvRunner(
            cfg, self.policy, self.preprocessor, self.obs_filter, self.seed, venv=self.venv
        )
        #: The ``success_rate`` column of a goal env (as the off-policy trainers have it).
        self.successes = SuccessWindow(obs_space, cfg.metrics_smoothing_episodes)
        self.tracks_success = self.successes.tracked

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
        self.successes.take(self.runner.steps)  # the success flags of its finished episodes
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
            **self.successes.metrics(),
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

    # --- checkpoints ----------------------------------------------------------------------
    def _own_state(self) -> dict[str, Any]:
        """The model, optimizer, KL coefficient, filter, runner state and envs."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.learner.optimizer.state_dict(),
            "kl_coeff": self.learner.kl_coeff,
            "filter": self.obs_filter.state_dict(),
            "runner": self.runner.state_dict(),
            "episode_successes": self.successes.state(),
            "envs": self.runner.env_snapshot(),
        }

    def _restore_build(self, state: dict[str, Any], envs: Any) -> None:
        config = self.config
        if envs is None:
            warnings.warn(
                f"resuming {state['_path']!r}: its envs were not stored (vector_mode="
                f"{config.vector_mode!r}{'' if config.vector_mode != 'sync' else ', not picklable'}"
                "), so they restart from a fresh reset: the episodes in progress at the "
                "checkpoint are dropped and the run does not continue bit for bit",
                RuntimeWarning,
                stacklevel=3,
            )
        self._build(venv=vector_env_from_config(config, envs=envs) if envs is not None else None)

    def _load_state(self, state: dict[str, Any], envs: Any) -> None:
        with checkpoint_fits(state):
            self.model.load_state_dict(state["model"])
            self.learner.optimizer.load_state_dict(state["optimizer"])
            self.obs_filter.load_state_dict(state["filter"])
        self.learner.kl_coeff = float(state["kl_coeff"])
        self.runner.load_state_dict(state["runner"], envs_restored=envs is not None)
        self.successes.load(state.get("episode_successes"))
        if envs is None:
            self.runner._seed = self.seed + self.timesteps_total

    def _close_envs(self) -> None:
        self.runner.close()
