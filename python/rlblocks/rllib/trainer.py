"""``rlblocks train --backend rllib``: trains with RLlib on Ray (the algorithm config of
:func:`~rlblocks.rllib.algo_config.build_algo_config`), writing the native trainer's run
directory.

The run directory (:mod:`rlblocks.rllib.checkpoints`) holds ``config.json`` (the rlblocks
config plus a ``backend`` block), ``progress.csv`` with the native trainer's columns (those
RLlib does not report are empty; a multi-agent run adds :data:`MULTIAGENT_COLUMNS` and, per
agent and policy, ``agent_episode_return_mean/<agent_id>``,
``module_episode_return_mean/<policy_id>`` and ``<stat>/<policy_id>`` learner stats),
``checkpoint_NNNNNN/`` (RLlib's checkpoint plus the trainer's counters and the filter state)
and ``progress.png``. :meth:`RLlibTrainer.restore`
resumes a run; :func:`rlblocks.rllib.evaluate.evaluate_run` plays episodes with the
checkpoint's module, without starting Ray.

On a cluster (``ray_address``) the user modules the config names (``env="my_pkg.envs:MyEnv-v0"``,
a ``custom_model``, ...) travel to the workers in the job's ``runtime_env``
(:mod:`rlblocks.rllib.runtime_env`); env runners that fail to start anyway are a ValueError
naming their error (:func:`actor_start_failure`), not RLlib's ``IndexError``.
"""

from __future__ import annotations

import json
import math
import pickle
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlblocks.rllib._ray import COMPONENT_ENV_TO_MODULE_CONNECTOR
from rlblocks.rllib.algo_config import (
    Q_ALGOS,
    PolicyMapping,
    build_algo_config,
    with_algo_defaults,
)
from rlblocks.rllib.checkpoints import (
    FILTER_FILE,
    META_FILE,
    checkpoints,
    newest_checkpoint,
    run_config,
)
from rlblocks.rllib.connectors import MeanStdFilterBatched
from rlblocks.rllib.runtime_env import runtime_env_for
from rlblocks.rllib.startup import actor_start_failure, build_algo, init_ray
from rlblocks.rllib.turn_env import ILLEGAL_MOVES, IllegalMoveCounter
from rlblocks.train.algo_spaces import DETERMINISTIC_ALGOS, rllib_refusal
from rlblocks.train.denormals import flushing_denormals
from rlblocks.train.logger import ProgressLogger, truncate_progress
from rlblocks.train.loop import nearest_iteration, train_until
from rlblocks.train.offpolicy_config import DQNConfig, SACConfig
from rlblocks.train.process_threads import set_process_threads
from rlblocks.train.rundir import claim_run_dir, lock_run_dir
from rlblocks.train.trainer_config import PPOConfig, TrainerConfig

__all__ = [
    "MULTIAGENT_COLUMNS",
    "PROGRESS_COLUMNS",
    "Q_COLUMNS",
    "RLlibTrainer",
    "actor_start_failure",
]

#: The native trainer's ``progress.csv`` columns (``PPOTrainer.train``), in its order.
PROGRESS_COLUMNS = (
    "training_iteration",
    "timesteps_total",
    "episodes_total",
    "episodes_this_iter",
    "episode_return_mean",
    "episode_return_min",
    "episode_return_max",
    "episode_len_mean",
    "total_loss",
    "policy_loss",
    "vf_loss",
    "entropy",
    "kl",
    "approx_kl",
    "clipfrac",
    "kl_coeff",
    "sgd_epochs",
    "explained_variance",
    "advantage_mean",
    "value_target_mean",
    "lr",
    "steps_per_s",
    "time_this_iter_s",
    "time_total_s",
)

#: Columns DQN and SAC add after the native ones (their learners' metrics).
Q_COLUMNS = ("qf_loss", "qf_mean", "td_error_mean", "alpha", "alpha_loss")

#: Columns a multi-agent run adds after the native ones (before its per-agent and per-policy
#: columns).
MULTIAGENT_COLUMNS = ("agent_timesteps_total", "agent_steps_per_s")

#: The learner stats a multi-agent run logs per policy, as ``<stat>/<policy_id>``.
_POLICY_STATS = (
    "total_loss",
    "policy_loss",
    "vf_loss",
    "entropy",
    "kl",
    "kl_coeff",
    "explained_variance",
    "lr",
)

#: progress.csv column -> the learner metrics RLlib reports it under, the first present
#: wins: IMPALA logs its losses summed over the batch as ``pi_loss`` / ``vf_loss`` and the
#: means as ``mean_pi_loss`` / ``mean_vf_loss``; PPO, APPO, DQN and SAC log the means as
#: ``policy_loss`` / ``vf_loss``.
_LEARNER_KEYS: dict[str, tuple[str, ...]] = {
    "policy_loss": ("policy_loss", "mean_pi_loss"),
    "vf_loss": ("mean_vf_loss", "vf_loss"),
    "total_loss": ("total_loss",),
    "entropy": ("entropy",),
    "kl": ("mean_kl_loss",),
    "kl_coeff": ("curr_kl_coeff",),
    "explained_variance": ("vf_explained_var",),
    "lr": ("default_optimizer_learning_rate",),
    "qf_loss": ("qf_loss",),
    "qf_mean": ("qf_mean",),
    "td_error_mean": ("td_error_mean",),
    "alpha": ("alpha_value",),
    "alpha_loss": ("alpha_loss",),
}


def _learner_metric(stats: Mapping[str, Any], column: str) -> float:
    """The value of ``progress.csv``'s ``column`` in one module's learner results
    (RLlib's names, :data:`_LEARNER_KEYS`), nan when none is reported.

    Examples:
        >>> impala = {"pi_loss": 96.0, "mean_pi_loss": 0.75, "vf_loss": 640.0, "mean_vf_loss": 5.0}
        >>> _learner_metric(impala, "policy_loss"), _learner_metric(impala, "vf_loss")
        (0.75, 5.0)
        >>> _learner_metric({"policy_loss": 0.1}, "policy_loss"), _learner_metric({}, "kl")
        (0.1, nan)
    """
    for key in _LEARNER_KEYS[column]:
        if key in stats:
            return _num(stats[key])
    return math.nan


def _num(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def _count(value: Any) -> int:
    """A count RLlib reports (0 when it reports none, or nan in an iteration without one)."""
    out = _num(value)
    return int(out) if math.isfinite(out) else 0


def _trainer_config(config: TrainerConfig | Mapping[str, Any], algo: str, resumed: bool) -> Any:
    """The run's config: ``algo``'s config class (a resumed run's ``config.json`` by
    :func:`~rlblocks.rllib.checkpoints.run_config`, DQN / SAC runs of PPO keys included).

    Raises:
        ValueError: TD3 / DDPG (native only), a new DQN / SAC run given a
            :class:`PPOConfig`, or a bad config.
    """
    if algo in DETERMINISTIC_ALGOS:
        raise ValueError(rllib_refusal(algo))
    if isinstance(config, Mapping) and resumed:
        return run_config(dict(config), algo)
    if algo in Q_ALGOS and isinstance(config, PPOConfig):
        raise ValueError(
            f"--algo {algo} runs a {algo}Config (the native trainer's keys), got a PPOConfig"
        )
    if not isinstance(config, Mapping):
        return config
    cls: Any = {"DQN": DQNConfig, "SAC": SACConfig}.get(algo, PPOConfig)
    return cls.from_dict(with_algo_defaults(config, algo))  # APPO / IMPALA: RLlib's defaults


class RLlibTrainer:
    """Trains with RLlib on Ray and logs like :class:`rlblocks.train.PPOTrainer`.

    Args:
        config: The rlblocks config (or dict) of ``algo``: a :class:`PPOConfig` for PPO, APPO
            and IMPALA, the native trainer's ``DQNConfig`` / ``SACConfig`` for DQN / SAC.
        run_dir: The run directory (created).
        algo: ``"PPO"``, ``"APPO"``, ``"IMPALA"``, ``"DQN"`` or ``"SAC"``.
        num_env_runners: Ray env-runner actors (0: sample in the driver).
        num_envs_per_env_runner: Vector envs per runner (default ``config.num_envs``).
        num_cpus_per_env_runner: CPUs each runner reserves (default: see
            :func:`build_algo_config`).
        ray_address: An existing cluster's address; None starts a local Ray sized to the
            machine.
        runtime_env: A Ray ``runtime_env`` for the job (pip packages, env vars, ...); the
            user modules the config names are added to its ``py_modules``
            (:func:`~rlblocks.rllib.runtime_env.runtime_env_for`), so that env runners on
            nodes without them import them. Used when this trainer starts or connects to
            Ray; a driver that called ``ray.init`` itself passes its own.

    Raises:
        ValueError: A bad config or setting, or env runners that failed to start (the
            line names their error, e.g. the env's module that did not import).
    """

    def __init__(
        self,
        config: TrainerConfig | Mapping[str, Any],
        run_dir: str | Path,
        *,
        algo: str = "PPO",
        num_env_runners: int = 0,
        num_envs_per_env_runner: int | None = None,
        num_cpus_per_env_runner: float | None = None,
        ray_address: str | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        _resumed: bool = False,
    ) -> None:
        self.config: Any = _trainer_config(config, algo, _resumed)
        # the driver runs the local learner (and env runner): on a 2-core machine, torch's
        # default of one thread per core contends with the env runners (CartPole DQN to
        # 150: 38 s instead of 22); Ray's workers get one thread per CPU they hold
        set_process_threads(self.config.num_threads)
        self.backend = {
            "name": "rllib",
            "algo": algo,
            "num_env_runners": int(num_env_runners),
            "num_envs_per_env_runner": num_envs_per_env_runner,
            "num_cpus_per_env_runner": num_cpus_per_env_runner,
        }
        algo_config = build_algo_config(
            self.config, algo, num_env_runners, num_envs_per_env_runner, num_cpus_per_env_runner
        )
        self.run_dir = Path(run_dir)
        self.iteration = 0
        self.timesteps_total = 0
        self.episodes_total = 0
        self.time_total_s = 0.0
        self.last_metrics: dict[str, Any] = {}
        self.checkpoint_path: Path | None = None
        self.stop_requested = False
        self.steps_this_iter = 0
        # one writer (rlblocks.train.rundir); a new run never writes over an earlier one
        self._run_lock = (
            lock_run_dir(self.run_dir)
            if _resumed
            else claim_run_dir(
                self.run_dir,
                resume_hint=f"continue it with RLlibTrainer.restore({str(self.run_dir)!r}), "
                "or pass another run_dir (or delete that run)",
            )
        )
        try:
            self._start(algo_config, ray_address, runtime_env, _resumed)
        except BaseException:
            self._run_lock.release()
            raise

    def _start(
        self,
        algo_config: Any,
        ray_address: str | None,
        runtime_env: Mapping[str, Any] | None,
        resumed: bool,
    ) -> None:
        """Writes ``config.json`` (a new run), starts Ray and builds the algorithm."""
        if not resumed:
            try:
                self.run_dir.mkdir(parents=True, exist_ok=True)
                (self.run_dir / "config.json").write_text(
                    json.dumps(
                        {**self.config.to_dict(), "backend": self.backend}, indent=2, default=repr
                    )
                )
            except OSError as err:
                raise ValueError(
                    f"cannot use {str(self.run_dir)!r} as the run directory: {err.strerror or err}"
                ) from err
        self._logger = ProgressLogger(self.run_dir)
        init_ray(ray_address, runtime_env_for(self.config, runtime_env))
        fn = getattr(algo_config, "policy_mapping_fn", None)
        #: ``{agent_id: policy_id}`` of a multi-agent run (None: single-agent).
        self.policy_mapping: dict[Any, Any] | None = (
            dict(fn.mapping) if isinstance(fn, PolicyMapping) else None
        )
        self.agent_timesteps_total = 0
        #: A turn-based game: ``illegal_moves_total`` is a column.
        self.turn_based = getattr(algo_config, "callbacks_class", None) is IllegalMoveCounter
        self.algo = build_algo(algo_config)

    # --- training ------------------------------------------------------------------------------
    @flushing_denormals
    def train(self) -> dict[str, Any]:
        """One RLlib iteration; the metrics in the native trainer's columns."""
        start = time.perf_counter()
        result = self.algo.train()
        elapsed = time.perf_counter() - start
        runners = result.get("env_runners", {})
        learners = result.get("learners", {})
        policies = list(dict.fromkeys((self.policy_mapping or {}).values()))
        learner = learners.get(policies[0] if len(policies) == 1 else "default_policy", {})
        steps = _count(runners.get("num_env_steps_sampled_lifetime", 0))
        done_now = steps - self.timesteps_total
        #: The env steps of the last iteration.
        self.steps_this_iter = done_now
        self.iteration += 1
        self.timesteps_total = steps
        episodes = _count(runners.get("num_episodes", 0))
        self.episodes_total += episodes
        self.time_total_s += elapsed
        columns = PROGRESS_COLUMNS + (Q_COLUMNS if self.backend["algo"] in Q_ALGOS else ())
        metrics: dict[str, Any] = {c: math.nan for c in columns}
        metrics.update(
            {
                "training_iteration": self.iteration,
                "timesteps_total": self.timesteps_total,
                "episodes_total": self.episodes_total,
                "episodes_this_iter": episodes,
                "episode_return_mean": _num(runners.get("episode_return_mean")),
                "episode_return_min": _num(runners.get("episode_return_min")),
                "episode_return_max": _num(runners.get("episode_return_max")),
                "episode_len_mean": _num(runners.get("episode_len_mean")),
                "steps_per_s": done_now / elapsed if elapsed > 0 else math.nan,
                "time_this_iter_s": elapsed,
                "time_total_s": self.time_total_s,
            }
        )
        for column in _LEARNER_KEYS.keys() & metrics.keys():
            metrics[column] = _learner_metric(learner, column)
        if math.isnan(metrics["lr"]) and self.backend["algo"] not in Q_ALGOS:
            metrics["lr"] = self.config.lr
        if self.policy_mapping is not None:
            self._multiagent_metrics(metrics, runners, learners, elapsed)
        self.last_metrics = metrics
        self._logger.write(metrics)
        return metrics

    def _multiagent_metrics(
        self, metrics: dict[str, Any], runners: Any, learners: Any, elapsed: float
    ) -> None:
        """Adds a multi-agent run's columns (RLlib's names; every agent and policy from the
        first iteration on, nan until its first episode ends)."""
        mapping = self.policy_mapping or {}
        sampled = runners.get("num_agent_steps_sampled_lifetime", {})
        agent_steps = sum(_count(v) for v in sampled.values()) if isinstance(sampled, dict) else 0
        done_now = agent_steps - self.agent_timesteps_total
        self.agent_timesteps_total = agent_steps
        metrics["agent_timesteps_total"] = agent_steps
        metrics["agent_steps_per_s"] = done_now / elapsed if elapsed > 0 else math.nan
        if self.turn_based:
            metrics[ILLEGAL_MOVES] = _count(runners.get(ILLEGAL_MOVES, 0))
        agent_returns = runners.get("agent_episode_returns_mean", {})
        for agent in mapping:
            metrics[f"agent_episode_return_mean/{agent}"] = _num(agent_returns.get(str(agent)))
        module_returns = runners.get("module_episode_returns_mean", {})
        policies = list(dict.fromkeys(mapping.values()))
        for policy in policies:
            metrics[f"module_episode_return_mean/{policy}"] = _num(module_returns.get(policy))
        for policy in policies:
            stats = learners.get(policy, {})
            for stat in _POLICY_STATS:
                value = _learner_metric(stats, stat)
                if stat == "lr" and math.isnan(value):
                    value = self.config.lr
                metrics[f"{stat}/{policy}"] = value

    def interrupt(self) -> None:
        """Asks :meth:`fit` to stop after the current RLlib iteration and save (Ctrl-C)."""
        self.stop_requested = True

    def fit(
        self,
        stop_reward: float | None = None,
        stop_timesteps: int | None = None,
        progress: bool = True,
        stop_iters: int | None = None,
    ) -> dict[str, Any]:
        """Trains until the mean return, step or iteration budget is reached; checkpoints
        every ``config.checkpoint_freq`` iterations and at the end.

        RLlib samples whole iterations, which cannot be cut short: with ``stop_timesteps``
        the run ends at the iteration nearest the budget (once it is less than half an
        iteration away, :func:`~rlblocks.train.loop.nearest_iteration`)."""
        self.stop_requested = False

        class _NearestIteration:
            @staticmethod
            def on_iteration(trainer: RLlibTrainer, result: dict[str, Any]) -> bool:
                return stop_timesteps is not None and nearest_iteration(
                    trainer.timesteps_total, stop_timesteps, trainer.steps_this_iter
                )

        return train_until(
            self,
            f"{self.backend['algo']} (RLlib) {self.config.env_name}",
            stop_reward,
            stop_timesteps,
            stop_iters,
            progress,
            self.save,
            self.config.checkpoint_freq,
            callbacks=[_NearestIteration()],
        )

    # --- checkpoints ---------------------------------------------------------------------------
    def _filter_state(self) -> dict[str, Any] | None:
        if self.config.observation_filter == "NoFilter":
            return None

        def state(runner: Any) -> Any:
            pieces = runner.get_state(components=COMPONENT_ENV_TO_MODULE_CONNECTOR)
            return pieces.get(COMPONENT_ENV_TO_MODULE_CONNECTOR, {}).get(
                MeanStdFilterBatched.__name__
            )

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
        (tmp / FILTER_FILE).write_bytes(pickle.dumps(self._filter_state()))
        (tmp / META_FILE).write_text(
            json.dumps(
                {
                    "iteration": self.iteration,
                    "timesteps_total": self.timesteps_total,
                    "agent_timesteps_total": self.agent_timesteps_total,
                    "episodes_total": self.episodes_total,
                    "time_total_s": self.time_total_s,
                    "last_metrics": self.last_metrics,
                    "backend": self.backend,
                },
                default=repr,
            )
        )
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        self.checkpoint_path = target
        keep = max(1, int(self.config.keep_checkpoints))
        for old in checkpoints(self.run_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        return target

    @classmethod
    def restore(
        cls,
        run_dir: str | Path,
        ray_address: str | None = None,
        runtime_env: Mapping[str, Any] | None = None,
    ) -> RLlibTrainer:
        """Continues a run from its newest checkpoint (``progress.csv`` is cut back to it);
        ``ray_address`` and ``runtime_env`` as in the constructor.

        Raises:
            ValueError: Not a run of this backend, or no checkpoint.
        """
        found = newest_checkpoint(run_dir)
        ckpt, run, backend, meta = found.path, found.path.parent, found.backend, found.meta
        trainer = cls(
            found.config,
            run,
            algo=backend["algo"],
            num_env_runners=backend["num_env_runners"],
            num_envs_per_env_runner=backend["num_envs_per_env_runner"],
            num_cpus_per_env_runner=backend.get("num_cpus_per_env_runner"),
            ray_address=ray_address,
            runtime_env=runtime_env,
            _resumed=True,
        )
        trainer.algo.restore_from_path(str(ckpt.resolve()))
        trainer.iteration = int(meta["iteration"])
        trainer.timesteps_total = int(meta["timesteps_total"])
        trainer.agent_timesteps_total = int(meta.get("agent_timesteps_total", 0))
        trainer.episodes_total = int(meta["episodes_total"])
        trainer.time_total_s = float(meta["time_total_s"])
        trainer.last_metrics = dict(meta.get("last_metrics") or {})
        trainer.checkpoint_path = ckpt
        truncate_progress(run, trainer.iteration)
        return trainer

    def close(self) -> None:
        """Stops the algorithm (its env runners and learners) and unlocks the run directory."""
        try:
            self.algo.stop()
            self._logger.close()
        finally:
            self._run_lock.release()
