"""``DQNTrainer``, ``SACTrainer``, ``TD3Trainer`` and ``DDPGTrainer``: off-policy training
on the C++ replay buffer.

One :meth:`OffPolicyTrainer.train` call is one iteration of ``timesteps_per_iteration`` env
steps (all envs together; fewer in the last iteration of ``fit``'s step budget, and after
:meth:`~rlblocks.train.trainer.Trainer.interrupt`, Ctrl-C in ``rlblocks train``). Every
vector-env step:

1. the learner acts on the preprocessed observations (DQN: epsilon-greedy; SAC: a sample
   of its policy; TD3 / DDPG: the deterministic action plus exploration noise; a masked
   action is never taken);
2. the step goes into the replay buffer (:class:`rlblocks.replay.ReplayBuffer`): Box
   observations as the env gives them (an Atari frame stack: each frame once), other
   spaces as their flat C++ preprocessed row; a finished episode's final observation with
   it, so that truncated episodes bootstrap from it and no transition crosses an episode;
3. once ``learning_starts`` steps are stored, every ``train_freq`` steps run
   ``gradient_steps`` updates on batches of ``train_batch_size`` (prioritized replay: the
   new priorities go back to the buffer, beta annealed), and every
   ``target_network_update_freq`` steps the targets move by ``tau``. On a goal-conditioned
   env the batches come through hindsight relabelling (``her``, :mod:`rlblocks.her`,
   :mod:`rlblocks.train.hindsight`): the same buffer, goals relabelled at sample time.

Everything else is the :class:`~rlblocks.train.trainer.Trainer` base's: the run directory,
``progress.csv`` (plus the learner's ``qf_loss``, ``q_mean``, ``td_error_mean``, SAC's
``actor_loss``, ``alpha``, ...), the progress bar, ``fit``, checkpoints (the replay buffer
too with ``checkpoint_replay``: the resumed run then continues exactly), ``evaluate``
(greedy / deterministic actions) and ``export`` (argmax-Q, SAC's squashed mean, TD3's
deterministic action).

Examples:
    >>> trainer = DQNTrainer({"env": "CartPole-v1", "timesteps_per_iteration": 200,
    ...                       "learning_starts": 100})
    >>> trainer.train()["timesteps_total"]
    200
    >>> trainer.close()
"""

from __future__ import annotations

import math
import time
import warnings
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from rlblocks.catalog import ModelCatalog
from rlblocks.filters import NoFilter
from rlblocks.spaces import clip_actions
from rlblocks.train.denormals import flushing_denormals
from rlblocks.train.envs import make_env_creator, vector_env_from_config
from rlblocks.train.hindsight import build_her, resolve_her
from rlblocks.train.learners.dqn import DQNLearner
from rlblocks.train.learners.sac import SACLearner
from rlblocks.train.learners.td3 import TD3Learner
from rlblocks.train.offpolicy_checks import (
    check_budget,
    checked_replay_buffer,
    no_learning_yet,
    run_budget,
)
from rlblocks.train.offpolicy_config import (
    DDPGConfig,
    DQNConfig,
    OffPolicyConfig,
    SACConfig,
    TD3Config,
)
from rlblocks.train.runner import env_snapshot
from rlblocks.train.success import SuccessWindow
from rlblocks.train.trainer import Trainer, checkpoint_fits
from rlblocks.train.trainer_config import lr_at
from rlblocks.wrappers.env_errors import non_finite_observation
from rlblocks.wrappers.vector_steps import VectorSteps

__all__ = ["DDPGTrainer", "DQNTrainer", "OffPolicyTrainer", "SACTrainer", "TD3Trainer"]


def _frame_stack(space: gym.Space, config: OffPolicyConfig) -> tuple[int, int]:
    """``(k, axis)`` when the observations are frame stacks the buffer can store frame by
    frame (the DeepMind Atari pipeline's ``(84, 84, 4)`` uint8 stacks), else ``(0, -1)``."""
    from rlblocks.train.envs import deepmind_atari

    if (
        deepmind_atari(config)
        and isinstance(space, gym.spaces.Box)
        and space.dtype == np.uint8
        and len(space.shape) == 3
        and config.model_config().framestack
    ):
        return int(space.shape[-1]), -1
    return 0, -1


class OffPolicyTrainer(Trainer):
    """The shared loop of :class:`DQNTrainer` and :class:`SACTrainer` (module docstring).

    Args:
        config: The algorithm's config (or an RLlib-style dict).
        run_dir: As :class:`~rlblocks.train.trainer.Trainer`'s.
        env: As :class:`~rlblocks.train.trainer.Trainer`'s.
    """

    CONFIG: ClassVar[type[OffPolicyConfig]] = OffPolicyConfig
    FORMAT: ClassVar[str] = "rlblocks.offpolicy"
    KIND: ClassVar[str] = "off-policy"
    #: Builds the learner: ``LEARNER(obs_space, action_space, config, device)``.
    LEARNER: ClassVar[Callable[..., Any]]
    config: Any
    learner: Any

    def __init__(
        self,
        config: OffPolicyConfig | Mapping[str, Any] | None = None,
        run_dir: str | Path | None = None,
        env: Any = None,
    ):
        super().__init__(config, run_dir, env)

    def _check_config(self) -> None:
        make_env_creator(self.config)

    def _build(self, venv: Any) -> None:
        cfg: OffPolicyConfig = self.config
        self.venv = venv if venv is not None else vector_env_from_config(cfg)
        try:
            self._build_parts()
        except BaseException:
            self.venv.close()
            raise

    def _build_parts(self) -> None:
        cfg: OffPolicyConfig = self.config
        venv = self.venv
        n = int(venv.num_envs)
        # the env calls and the per-step bookkeeping; a plain SyncVectorEnv's sub-envs are
        # stepped directly (the same calls, without its batching of observations and infos)
        self.steps = VectorSteps(venv, cfg.env_name, sub_envs=True)
        obs_space, action_space = venv.single_observation_space, venv.single_action_space
        self.preprocessor = ModelCatalog.get_preprocessor_for_space(obs_space, cfg.model_config())
        self.obs_filter = NoFilter()
        self.learner = self.LEARNER(
            self.preprocessor.observation_space, action_space, cfg, self.device
        )
        self.policy = self.learner.acting_policy()
        # Box observations are stored as the env gives them (images stay uint8, a frame
        # stack is stored frame by frame); other spaces as their preprocessed row.
        self._store_raw = isinstance(obs_space, gym.spaces.Box)
        shape = tuple(obs_space.shape or ()) if self._store_raw else self.preprocessor.shape
        dtype = obs_space.dtype if self._store_raw else np.float32
        k, axis = _frame_stack(obs_space, cfg)
        self.replay = checked_replay_buffer(
            cfg.replay_capacity,
            n,
            tuple(shape),
            dtype,
            tuple(action_space.shape or ()),
            np.int64 if isinstance(action_space, gym.spaces.Discrete) else np.float32,
            cfg.train_batch_size,
            frame_stack=k,
            stack_axis=axis,
            prioritized=cfg.prioritized_replay,
            n_step=cfg.n_step,
            gamma=cfg.gamma,
            alpha=cfg.prioritized_replay_alpha,
            seed=self.seed,
        )
        # hindsight relabelling (her): a sampler over the same buffer, or None
        choice = resolve_her(cfg, obs_space, self._one_env)
        self.her = build_her(cfg, choice, self.preprocessor.layout, self.replay)
        self.her_note = choice.note
        #: The ``success_rate`` column (a goal Dict observation: the envs that report
        #: ``is_success`` / ``success``), as PPO has it.
        self.successes = SuccessWindow(obs_space, cfg.metrics_smoothing_episodes)
        self.tracks_success = self.successes.tracked
        self.num_envs = n
        self._raw: Any = None
        self.episode_returns: deque[float] = deque(maxlen=cfg.metrics_smoothing_episodes)
        self.episode_lengths: deque[int] = deque(maxlen=cfg.metrics_smoothing_episodes)
        self.episodes_total = 0
        self.num_updates = 0
        self._env_seed: int | None = self.seed

    # --- the env side -------------------------------------------------------------------------
    def _one_env(self) -> gym.Env:
        """One env of the run (a sub-env of a sync vector env, else a new one, kept for its
        ``compute_reward`` and closed with the envs)."""
        envs = getattr(self.venv, "envs", None)
        if isinstance(envs, (list, tuple)) and envs and isinstance(envs[0], gym.Env):
            return envs[0]
        env = self.__dict__.get("_her_env")
        if env is None:
            env = self.__dict__["_her_env"] = make_env_creator(self.config)()
        return env

    def _stored(self, raw: Any) -> np.ndarray:
        """What the buffer stores of a batch of raw observations (an array, or a list of
        per-env observations)."""
        if self._store_raw:  # in the space's dtype, as the vector env batches them
            return np.asarray(raw, self.venv.single_observation_space.dtype)
        return self.preprocessor.transform_batch(raw)

    def _from_env(self, raw: Any) -> np.ndarray:
        """:meth:`_stored` of observations the envs returned, refusing a non-finite value
        (it would reach the replay buffer and every batch that samples it) with its path."""
        stored = self._stored(raw)
        if (
            stored.dtype.kind == "f"
            and not math.isfinite(stored.sum())
            and not np.isfinite(stored).all()
        ):
            flat = self._model_input(stored) if self._store_raw else stored
            space = self.venv.single_observation_space
            raise ValueError(non_finite_observation(self.config.env_name, space, raw, flat))
        return stored

    def _model_input(self, stored: np.ndarray) -> np.ndarray:
        """The model's input from stored observations."""
        if self._store_raw:
            return self.preprocessor.transform_batch(stored)
        return stored

    def _reset(self) -> None:
        raw, _ = self.steps.reset(seed=self._env_seed)
        self._raw = self._from_env(raw)

    def _step_envs(self) -> int:
        """One step of every env: act, store; returns the steps that were transitions (the
        finished episodes wait in ``self.steps``)."""
        cfg: OffPolicyConfig = self.config
        obs = self._raw
        actions = self.learner.act(self._model_input(obs), True, self.timesteps_total)
        env_actions = actions
        if cfg.clip_actions and isinstance(self.venv.single_action_space, gym.spaces.Box):
            env_actions = clip_actions(actions, self.venv.single_action_space)
        step = self.steps.step(env_actions)
        nxt = self._from_env(step.result.raw)
        final = nxt  # next-step autoreset: the returned observation is the final one
        if step.any_done and not self.steps.next_step:
            final = nxt.copy()
            for i in np.flatnonzero(step.dones):
                final[i] = self._from_env([step.finals[i]])[0]
        valid = step.valid
        self.replay.add(
            obs, actions, step.rewards, step.terminated, step.truncated, final, valid=valid
        )
        self._raw = nxt
        return self.num_envs if valid is None else int(valid.sum())

    # --- training -----------------------------------------------------------------------------
    def _learn(self, before: int, stats: list[dict[str, float]]) -> None:
        """The gradient steps and target updates due between ``before`` and now."""
        cfg: OffPolicyConfig = self.config
        now = self.timesteps_total
        if now < cfg.learning_starts or len(self.replay) < cfg.train_batch_size:
            return
        rounds = now // cfg.train_freq - max(before, cfg.learning_starts - 1) // cfg.train_freq
        for _ in range(max(0, rounds) * cfg.gradient_steps):
            beta = cfg.beta_at(now)
            # the arrays of the previous batch are reused (the update keeps none of them)
            out = self.__dict__.get("_sample_out")
            sampler = self.her if self.her is not None else self.replay
            batch = sampler.sample(cfg.train_batch_size, beta=beta, out=out)
            self.__dict__["_sample_out"] = batch
            batch = batch._replace(
                obs=self._model_input(batch.obs), next_obs=self._model_input(batch.next_obs)
            )
            row, priorities = self.learner.update(batch, now)
            if cfg.prioritized_replay:
                self.replay.update_priorities(batch.indices, priorities)
            stats.append(row)
            self.num_updates += 1
        syncs = now // cfg.target_network_update_freq - before // cfg.target_network_update_freq
        for _ in range(min(syncs, 1 if cfg.tau >= 1.0 else syncs)):
            self.learner.sync_targets()

    @flushing_denormals
    def train(self) -> dict[str, Any]:
        """Runs one iteration (``timesteps_per_iteration`` env steps and the updates due).

        Returns:
            ``training_iteration``, ``timesteps_total``, ``episodes_total``,
            ``episodes_this_iter``, ``episode_return_mean`` / ``_min`` / ``_max``,
            ``episode_len_mean``, the learner's statistics averaged over the iteration's
            updates (DQN: ``qf_loss``, ``q_mean``, ``td_error_mean``, ``grad_norm``,
            ``epsilon``; SAC: ``qf_loss``, ``actor_loss``, ``alpha``, ``entropy``, ...),
            ``num_updates``, ``replay_size``, ``lr``, ``steps_per_s``, ``time_this_iter_s``,
            ``time_total_s``.
        """
        cfg: OffPolicyConfig = self.config
        start = time.perf_counter()
        if self._raw is None:
            self._reset()
        lr = lr_at(cfg, self.timesteps_total)
        if cfg.lr_schedule:
            self.learner.set_lr(lr)
        stats: list[dict[str, float]] = []
        target = self.timesteps_total + cfg.timesteps_per_iteration
        budget = getattr(self, "_step_budget", None)
        if budget is not None:  # the last iteration of fit's step budget ends at it
            target = min(target, max(budget, self.timesteps_total + 1))
        first = self.timesteps_total
        while self.timesteps_total < target:
            if getattr(self, "_interrupted", False) and self.timesteps_total > first:
                break  # Ctrl-C: the iteration ends here, whole
            before = self.timesteps_total
            self.timesteps_total += self._step_envs()
            self._learn(before, stats)
        finished, lengths = self.steps.take_finished()
        self.successes.take(self.steps)
        self.episode_returns.extend(finished)
        self.episode_lengths.extend(lengths)
        self.episodes_total += len(finished)
        self.iteration += 1
        if self.iteration == 1 and not self.num_updates and not self.__dict__.get("_budget"):
            warnings.warn(
                no_learning_yet(cfg, self.timesteps_total, len(self.replay)),
                RuntimeWarning,
                stacklevel=2,
            )
        elapsed = time.perf_counter() - start
        self.time_total_s += elapsed
        done_now = self.timesteps_total - first
        returns_window = list(self.episode_returns)
        metrics: dict[str, Any] = {
            "training_iteration": self.iteration,
            "timesteps_total": self.timesteps_total,
            "episodes_total": self.episodes_total,
            "episodes_this_iter": len(finished),
            "episode_return_mean": float(np.mean(returns_window)) if returns_window else math.nan,
            "episode_return_min": float(np.min(returns_window)) if returns_window else math.nan,
            "episode_return_max": float(np.max(returns_window)) if returns_window else math.nan,
            "episode_len_mean": (
                float(np.mean(self.episode_lengths)) if self.episode_lengths else math.nan
            ),
        }
        metrics.update(self.successes.metrics())  # a goal env's success_rate
        # every column from the first row on (progress.csv's header): NaN before updates
        for key in self.learner.STATS:
            values = [row[key] for row in stats if key in row]
            metrics[key] = float(np.mean(values)) if values else math.nan
        metrics.update(self._extra_metrics())
        metrics.update(
            {
                "num_updates": self.num_updates,
                "replay_size": len(self.replay),
                "lr": lr,
                "steps_per_s": done_now / elapsed if elapsed > 0 else math.nan,
                "time_this_iter_s": elapsed,
                "time_total_s": self.time_total_s,
            }
        )
        return self._finish_iteration(metrics)

    def fit(
        self,
        stop_reward: float | None = None,
        stop_timesteps: int | None = None,
        progress: bool = True,
        stop_iters: int | None = None,
        callbacks: list[Any] | tuple[Any, ...] = (),
    ) -> dict[str, Any]:
        """As :meth:`~rlblocks.train.trainer.Trainer.fit`; a fresh run first refuses a stop
        budget in which it would not learn
        (:func:`~rlblocks.train.offpolicy_checks.check_budget`)."""
        budget = run_budget(stop_timesteps, stop_iters, self.config.timesteps_per_iteration)
        if budget is not None and self.timesteps_total == 0:
            check_budget(self.config, self.num_envs, *budget)
        self.__dict__["_budget"] = budget
        return super().fit(stop_reward, stop_timesteps, progress, stop_iters, callbacks)

    def _extra_metrics(self) -> dict[str, float]:
        """Metrics of the algorithm's own (DQN: the current epsilon)."""
        return {}

    def compute_actions(
        self,
        obs: Any,
        state: list[Any] | None = None,
        explore: bool = False,
        prev_actions: Any = None,
        prev_rewards: Any = None,
    ) -> tuple[Any, list[torch.Tensor]]:
        """Actions for a batch of raw observations: greedy (DQN: argmax-Q; SAC: the squashed
        mean; TD3: the deterministic actor), or with ``explore`` as in training (DQN:
        epsilon-greedy at the current timestep; SAC: a sample; TD3: uniform before
        ``learning_starts``, then the exploration noise). Returns ``(actions, [])`` (no
        recurrent state)."""
        x = self._model_input(self._stored(obs))
        return self.learner.act(x, explore, self.timesteps_total), []

    # --- checkpoints --------------------------------------------------------------------------
    def _own_state(self) -> dict[str, Any]:
        """The learner, the envs (when they pickle), the current observations, episode
        counters and, with ``checkpoint_replay``, the replay buffer."""
        return {
            "learner": self.learner.state_dict(),
            "replay": self.replay.state_dict() if self.config.checkpoint_replay else None,
            "envs": env_snapshot(self.venv),
            "raw": self._raw,
            **self.steps.state_dict(),  # resetting, ep_return, ep_len
            "episode_returns": list(self.episode_returns),
            "episode_lengths": list(self.episode_lengths),
            "episode_successes": self.successes.state(),
            "episodes_total": self.episodes_total,
            "num_updates": self.num_updates,
        }

    def _restore_build(self, state: dict[str, Any], envs: Any) -> None:
        config = self.config
        lost = []
        if envs is None:
            lost.append("its envs were not stored, so they restart from a fresh reset")
        if state.get("replay") is None:
            lost.append(
                "its replay buffer was not stored (checkpoint_replay=False), so it refills "
                f"for learning_starts={config.learning_starts} steps"
            )
        if lost:
            warnings.warn(
                f"resuming {state['_path']!r}: {'; '.join(lost)}: the run does not continue "
                "bit for bit",
                RuntimeWarning,
                stacklevel=3,
            )
        self._build(venv=vector_env_from_config(config, envs=envs) if envs is not None else None)

    def _load_state(self, state: dict[str, Any], envs: Any) -> None:
        with checkpoint_fits(state):
            self.learner.load_state_dict(state["learner"])
            if state.get("replay") is not None:
                self.replay.load_state_dict(state["replay"])
        self.episode_returns.extend(state["episode_returns"])
        self.episode_lengths.extend(state["episode_lengths"])
        self.successes.load(state.get("episode_successes"))
        self.episodes_total = int(state["episodes_total"])
        self.num_updates = int(state["num_updates"])
        if envs is not None:
            self._raw = state["raw"]
            self.steps.load_state_dict(state)
        else:
            self._env_seed = self.seed + self.timesteps_total

    def _close_envs(self) -> None:
        if getattr(self, "venv", None) is not None:
            self.venv.close()
        her_env = self.__dict__.pop("_her_env", None)
        if her_env is not None:
            her_env.close()


class DQNTrainer(OffPolicyTrainer):
    """DQN (dueling, double, n-step, prioritized, distributional) on a gymnasium env with
    ``Discrete`` actions; see :class:`~rlblocks.train.offpolicy_config.DQNConfig`."""

    CONFIG: ClassVar[type[OffPolicyConfig]] = DQNConfig
    FORMAT: ClassVar[str] = "rlblocks.dqn"
    KIND: ClassVar[str] = "DQN"

    LEARNER: ClassVar[Callable[..., Any]] = DQNLearner

    def _extra_metrics(self) -> dict[str, float]:
        return {"epsilon": self.config.epsilon_at(self.timesteps_total)}


class SACTrainer(OffPolicyTrainer):
    """SAC (twin critics, automatic entropy tuning) on a gymnasium env with ``Box`` or
    ``Discrete`` actions; see :class:`~rlblocks.train.offpolicy_config.SACConfig`."""

    CONFIG: ClassVar[type[OffPolicyConfig]] = SACConfig
    FORMAT: ClassVar[str] = "rlblocks.sac"
    KIND: ClassVar[str] = "SAC"

    LEARNER: ClassVar[Callable[..., Any]] = SACLearner

    def evaluate(
        self, episodes: int = 10, explore: bool = False, seed: int | None = None
    ) -> dict[str, Any]:
        """The base's evaluation; refuses ``explore`` under gSDE.

        Raises:
            ValueError: ``explore=True`` with ``use_sde``: the acting policy samples the
                plain squashed Gaussian, not gSDE's noise.
        """
        if explore and self.config.use_sde:
            raise ValueError(
                "explore=True: this SAC run explores with gSDE (use_sde), whose per-env noise "
                "matrices the evaluation policy does not sample; evaluate without --explore"
            )
        return super().evaluate(episodes, explore, seed)


class TD3Trainer(OffPolicyTrainer):
    """TD3 (clipped double Q, target policy smoothing, delayed actor updates) on a
    gymnasium env with ``Box`` actions; see
    :class:`~rlblocks.train.offpolicy_config.TD3Config` and
    :mod:`rlblocks.train.learners.td3`."""

    CONFIG: ClassVar[type[OffPolicyConfig]] = TD3Config
    FORMAT: ClassVar[str] = "rlblocks.td3"
    KIND: ClassVar[str] = "TD3"

    LEARNER: ClassVar[Callable[..., Any]] = TD3Learner

    def evaluate(
        self, episodes: int = 10, explore: bool = False, seed: int | None = None
    ) -> dict[str, Any]:
        """As :meth:`~rlblocks.train.trainer.Trainer.evaluate`, with the deterministic actor.

        Raises:
            ValueError: ``explore=True``: the actor has no distribution to sample (its
                exploration is the training noise, see :meth:`compute_actions`).
        """
        if explore:
            raise ValueError(
                f"explore=True: {self.KIND}'s actor is deterministic (it explores with its "
                "training noise only); evaluate without --explore"
            )
        return super().evaluate(episodes, explore, seed)


class DDPGTrainer(TD3Trainer):
    """DDPG, TD3's special case (one critic, no target smoothing, no delay); see
    :class:`~rlblocks.train.offpolicy_config.DDPGConfig`."""

    CONFIG: ClassVar[type[OffPolicyConfig]] = DDPGConfig
    FORMAT: ClassVar[str] = "rlblocks.ddpg"
    KIND: ClassVar[str] = "DDPG"
