"""``MultiAgentPPOTrainer``: PPO on PettingZoo / RLlib multi-agent envs, one model per policy.

The trainer steps ``num_envs`` copies of the env (:class:`~rlblocks.multiagent.envs.
MultiAgentVectorEnv`); each policy (``multiagent.policy_mapping``) has its own model,
optimizer, observation filter and :class:`~rlblocks.train.runner.EnvRunner` over its lanes,
and every runner steps in lockstep with the others over the shared envs. Each iteration is
``rollout_fragment_length`` env steps of every copy, then each policy's PPO update on its
agents' steps (GAE per lane: no agent bootstraps from another's steps).

Everything else is the :class:`~rlblocks.train.trainer.Trainer` base's: the run directory,
``progress.csv``, the progress bar, checkpoints, ``fit`` and its stop conditions.
Checkpoints hold every policy, the return statistics and (when they can be pickled) the
envs in the middle of their episodes, so a restored run continues exactly as the
uninterrupted one would.

Examples:
    >>> trainer = MultiAgentPPOTrainer({
    ...     "env": "rlblocks.envs.multiagent_zoo:parallel_env", "num_envs": 4,
    ...     "train_batch_size": 128, "sgd_minibatch_size": 64, "num_sgd_iter": 1})
    >>> sorted(trainer.policies), trainer.hub.specs["shared"].action_space
    (['shared'], Discrete(5))
    >>> trainer.train()["agent_timesteps_total"] > 128  # several agents per env step
    True
    >>> trainer.close()
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from rlblocks.catalog import ModelCatalog
from rlblocks.filters import get_filter, unfiltered_columns
from rlblocks.masks import mask_form
from rlblocks.multiagent.envs import (
    MultiAgentVectorEnv,
    as_parallel_env,
    ezpickled,
    is_multiagent_env,
)
from rlblocks.multiagent.turns import (
    TurnBasedVectorEnv,
    is_turn_based_env,
    multiagent_vector_env,
)
from rlblocks.multiagent.workers import WorkerVectorEnv
from rlblocks.nest import tree_index
from rlblocks.preprocessors import Preprocessor
from rlblocks.train.algo_spaces import makes_multiagent_env
from rlblocks.train.checkpoint import EXACT_BEST_BY, GAMES_BEST_BY
from rlblocks.train.denormals import flushing_denormals
from rlblocks.train.env_workers import auto_env_workers, env_workers_line, free_cores
from rlblocks.train.envs import raw_env_creator
from rlblocks.train.evaluation import PolicyActor
from rlblocks.train.learners.ppo import PPOLearner
from rlblocks.train.loop import episode_summary
from rlblocks.train.play import play_episodes
from rlblocks.train.policy import Policy
from rlblocks.train.runner import EnvRunner, SampleBatch
from rlblocks.train.selfplay import SelfPlay, exact_score, games_score
from rlblocks.train.trainer import (
    Trainer,
    check_episodes,
    checkpoint_fits,
    json_config,
    refuse_rllib_block,
)
from rlblocks.train.trainer_config import PPOConfig, lr_at
from rlblocks.train.turn_batches import TurnSteps, stitch_turns

__all__ = [
    "FORMAT",
    "MultiAgentPPOTrainer",
    "PolicyParts",
    "is_multiagent_config",
    "multiagent_creator",
]

#: The ``format`` of a multi-agent checkpoint.
FORMAT = "rlblocks.ppo.multiagent"


def multiagent_creator(config: PPOConfig) -> Callable[[], Any]:
    """A no-argument function building one multi-agent env of ``config`` (in PettingZoo's
    parallel API, or a turn-based PettingZoo ``AECEnv`` as it is).

    Raises:
        ValueError: The env is not a multi-agent env (checked on the first call).
    """
    raw = raw_env_creator(config)

    def create() -> Any:
        made = raw()
        if not is_multiagent_env(made):
            raise ValueError(
                f"env {config.env_name!r} gave a {type(made).__name__}, not a PettingZoo "
                "ParallelEnv / AECEnv or an RLlib MultiAgentEnv; single-agent envs train "
                "with PPOTrainer"
            )
        return made if is_turn_based_env(made) else as_parallel_env(made)

    return create


def is_multiagent_config(config: PPOConfig) -> bool:
    """Whether ``config``'s env is multi-agent: a config with a ``multiagent`` block, or a
    ``"module:callable"`` / callable env whose env (made once, then closed) is one.
    Registered gymnasium ids are single-agent without making anything."""
    return bool(config.multiagent) or makes_multiagent_env(config)


class PolicyParts:
    """One policy's pieces: its config, preprocessor, filter, policy, learner and runner."""

    def __init__(
        self,
        config: PPOConfig,
        preprocessor: Preprocessor,
        obs_filter: Any,
        policy: Policy,
        learner: PPOLearner,
        runner: EnvRunner,
    ) -> None:
        self.config = config
        self.preprocessor = preprocessor
        self.obs_filter = obs_filter
        self.policy = policy
        self.learner = learner
        self.runner = runner

    def observe(self, raw: list[Any]) -> np.ndarray:
        """Union values -> the model's inputs (the filter is not updated)."""
        x = self.preprocessor.transform_batch(raw)
        return np.asarray(self.obs_filter(x, update=False))


class MultiAgentPPOTrainer(Trainer):
    """Trains one model per policy of a multi-agent env with PPO (module docstring).

    Args:
        config: A :class:`PPOConfig` or an RLlib-style dict; ``env`` names a multi-agent
            env (``"module:callable"``, e.g. ``"mpe2.simple_spread_v3:parallel_env"``, or a
            callable ``env_creator(env_config)``) and ``multiagent`` maps agents to policies.
        run_dir: As :class:`~rlblocks.train.trainer.Trainer`'s.

    Raises:
        ValueError: A bad config, an env that is not multi-agent, or agents a shared policy
            cannot serve (the message suggests another mapping).
    """

    CONFIG: ClassVar[type[PPOConfig]] = PPOConfig
    FORMAT: ClassVar[str] = FORMAT
    KIND: ClassVar[str] = "multi-agent PPO"

    def __init__(
        self, config: PPOConfig | Mapping[str, Any] | None = None, run_dir: str | Path | None = None
    ):
        self.config = PPOConfig.from_dict(config)
        refuse_rllib_block(self.config)
        self._check_config()
        self._start(None, run_dir)

    def _check_config(self) -> None:
        if self.config.vector_mode != "sync":
            raise ValueError(
                f"vector_mode={self.config.vector_mode!r}: multi-agent envs are stepped in the "
                "trainer's process (vector_mode='sync')"
            )
        self._make = multiagent_creator(self.config)

    # --- building -----------------------------------------------------------------------------
    def _policy_config(self, policy_id: str) -> PPOConfig:
        own = self.config.multiagent.get("policies", {}).get(policy_id, {}).get("model", {})
        return self.config.replace(model={**self.config.model, **own}) if own else self.config

    def _auto_env_workers(self) -> int:
        """``num_env_workers="auto"``'s choice (:mod:`rlblocks.train.env_workers`), printed."""
        cpus, free = free_cores()
        chosen = auto_env_workers(self.config.num_envs, cpus, free)
        if chosen:
            env = self._make()
            try:
                if is_turn_based_env(env):  # its copies step in process
                    chosen = 0
            finally:
                close = getattr(env, "close", None)
                if close is not None:
                    close()
        print(f"rlblocks: {env_workers_line(chosen, cpus, free)}", flush=True)
        return chosen

    def _build(self, venv: Any) -> None:
        """``venv``: env copies restored from a checkpoint, or None."""
        cfg = self.config
        block = cfg.multiagent
        hub_args = (
            block.get("policy_mapping", "shared"),
            bool(block.get("agent_id_one_hot", False)),
            cfg.clip_actions,
            cfg.env_name,
            cfg.metrics_smoothing_episodes,
        )
        if cfg.num_env_workers == "auto":
            cfg = self.config = cfg.replace(num_env_workers=self._auto_env_workers())
        self.hub: MultiAgentVectorEnv
        if cfg.num_env_workers:  # the copies in worker processes
            self.hub = WorkerVectorEnv(
                self._make,
                cfg.num_envs,
                cfg.num_env_workers,
                *hub_args,
                envs=venv,
                preprocessor_for=self._preprocessor,
            )
        else:
            self.hub = multiagent_vector_env(self._make, cfg.num_envs, *hub_args, envs=venv)
        try:
            self._check_turns()
            named = set(block.get("policies", {}))
            unknown = sorted(named - set(self.hub.policy_ids))
            if unknown:
                raise ValueError(
                    f"multiagent.policies names {unknown}, which the mapping "
                    f"{block.get('policy_mapping', 'shared')!r} gives no agent; its policies "
                    f"are {list(self.hub.policy_ids)}"
                )
            self.policies: dict[str, PolicyParts] = {}
            for pid in self.hub.policy_ids:
                pcfg = self._policy_config(pid)
                spec = self.hub.specs[pid]
                prep = self._preprocessor(pid, spec.observation_space)
                obs_filter = get_filter(
                    pcfg.observation_filter,
                    prep.shape,
                    pcfg.observation_clip,
                    unfiltered_columns(prep.layout),
                )
                policy = Policy(prep.observation_space, spec.action_space, pcfg, self.device)
                learner = PPOLearner(policy, pcfg)
                runner = EnvRunner(
                    pcfg,
                    policy,
                    prep,
                    obs_filter,
                    self.seed,
                    venv=self.hub.lanes(pid),  # type: ignore[arg-type]
                )
                self.policies[pid] = PolicyParts(pcfg, prep, obs_filter, policy, learner, runner)
            self.selfplay = SelfPlay(
                self.hub, self.policies, cfg, self.seed, self.fresh_hub, self._fresh_policy
            )
        except BaseException:
            self.hub.close()
            raise
        self.agent_timesteps_total = 0

    def _preprocessor(self, policy_id: str, space: Any) -> Preprocessor:
        """The preprocessor of ``policy_id``'s union observations ``space``."""
        model = self._policy_config(policy_id).model_config()
        return ModelCatalog.get_preprocessor_for_space(space, model)

    def fresh_hub(self, n: int) -> Any:
        """``n`` fresh copies of the env, mapped as training maps them."""
        block = self.config.multiagent
        return multiagent_vector_env(
            self._make,
            n,
            block.get("policy_mapping", "shared"),
            bool(block.get("agent_id_one_hot", False)),
            self.config.clip_actions,
            self.config.env_name,
        )

    def _fresh_policy(self) -> Policy:
        """A new policy of the shared policy's shape (an opponent snapshot's)."""
        (pid,) = self.policies
        parts = self.policies[pid]
        space = self.hub.specs[pid].action_space
        return Policy(parts.preprocessor.observation_space, space, parts.config, self.device)

    def _check_turns(self) -> None:
        """Refuses what turn-based games do not train with (a move's outcome arrives after
        the rollout stepped on: no recurrent state or reward scaling follows it)."""
        if not isinstance(self.hub, TurnBasedVectorEnv):
            return
        cfg, model = self.config, self.config.model
        for key in ("use_lstm", "use_attention", "lstm_use_prev_action", "lstm_use_prev_reward"):
            if model.get(key):
                raise ValueError(
                    f"model.{key}=True: env {cfg.env_name!r} is a turn-based game, whose "
                    "policies train without recurrent state or previous actions / rewards"
                )
        if cfg.normalize_reward or cfg.clip_reward is not None:
            raise ValueError(
                f"env {cfg.env_name!r} is a turn-based game: normalize_reward / clip_reward "
                "are not supported there (its rewards arrive after the other agents' turns)"
            )

    def _config_json(self) -> dict[str, Any]:
        data = json_config(self.config)
        data["multiagent_policies"] = {
            pid: {
                "agents": [str(a) for a in spec.agents],
                "observation_space": str(spec.observation_space),
                "action_space": str(spec.action_space),
            }
            for pid, spec in self.hub.specs.items()
        }
        return data

    @property
    def model(self) -> torch.nn.Module:
        """The model of the only policy (ValueError with several: use :attr:`models`)."""
        if len(self.policies) != 1:
            raise ValueError(
                f"this run has {len(self.policies)} policies {list(self.policies)}; use "
                "trainer.models[policy_id]"
            )
        return next(iter(self.policies.values())).policy.model

    @property
    def models(self) -> dict[str, torch.nn.Module]:
        """Each policy's model."""
        return {pid: parts.policy.model for pid, parts in self.policies.items()}

    # --- training -----------------------------------------------------------------------------
    def _collect(self, num_steps: int) -> dict[str, SampleBatch]:
        """Every policy's runner, stepped in lockstep over the shared envs."""
        gens = {pid: p.runner.collect_steps(num_steps) for pid, p in self.policies.items()}
        actions = {pid: next(g) for pid, g in gens.items()}
        turns = isinstance(self.hub, TurnBasedVectorEnv)
        late = {pid: TurnSteps(p.runner.num_envs) for pid, p in self.policies.items()}
        batches: dict[str, SampleBatch] = {}
        while not batches:
            frozen = self.selfplay.before_step(actions)
            results = self.hub.step(actions)
            self.selfplay.after_step(results, frozen)
            for pid, g in gens.items():
                res = results[pid]
                if turns:
                    late[pid].add(res.info["late"], res.rewards, res.terminated, res.truncated)
                try:
                    actions[pid] = g.send(res)
                except StopIteration as stop:
                    batches[pid] = stop.value
        if turns:
            gamma = self.config.gamma
            batches = {pid: stitch_turns(b, late[pid], gamma) for pid, b in batches.items()}
        return batches

    @flushing_denormals
    def train(self) -> dict[str, Any]:
        """One iteration: ``rollout_fragment_length`` steps of every env copy, then each
        policy's PPO update.

        Returns:
            ``training_iteration``, ``timesteps_total`` (env steps), ``agent_timesteps_total``,
            ``episodes_total``, ``episodes_this_iter``, ``episode_return_mean`` / ``_min`` /
            ``_max`` (the sum over an episode's agents), ``episode_len_mean``,
            ``agent_episode_return_mean/<agent>``, ``module_episode_return_mean/<policy>``,
            each policy's losses and statistics as ``<name>/<policy>``, ``lr``,
            ``steps_per_s``, ``agent_steps_per_s``, ``time_this_iter_s``, ``time_total_s``.
        """
        cfg = self.config
        start = time.perf_counter()
        lr = lr_at(cfg, self.timesteps_total)
        for parts in self.policies.values():
            parts.learner.set_lr(lr)
        self.hub.episodes_this_iter = 0
        per_env = self._steps_per_env(int(cfg.rollout_fragment_length))
        batches = self._collect(per_env)
        env_steps = per_env * cfg.num_envs
        agent_steps = sum(b.num_steps for b in batches.values())
        self.timesteps_total += env_steps
        self.agent_timesteps_total += agent_steps
        stats: dict[str, Any] = {}
        for pid, batch in batches.items():
            if batch.num_steps == 0:
                continue  # no agent of this policy was alive in this rollout
            for key, value in self.policies[pid].learner.update(batch, self._rng).items():
                stats[f"{key}/{pid}"] = value
        self.iteration += 1
        elapsed = time.perf_counter() - start
        self.time_total_s += elapsed
        metrics: dict[str, Any] = {
            "training_iteration": self.iteration,
            "timesteps_total": self.timesteps_total,
            "agent_timesteps_total": self.agent_timesteps_total,
            "episodes_total": self.hub.episodes_total,
            "episodes_this_iter": self.hub.episodes_this_iter,
            **self.hub.metrics(),
            **stats,
            "lr": lr,
            "steps_per_s": env_steps / elapsed if elapsed > 0 else math.nan,
            "agent_steps_per_s": agent_steps / elapsed if elapsed > 0 else math.nan,
            "time_this_iter_s": elapsed,
            "time_total_s": self.time_total_s,
            **self.selfplay.end_iteration(
                self.iteration, None if self.run_dir is None else self.best_score
            ),
        }
        return self._finish_iteration(metrics)

    def _evaluate_during_training(self) -> dict[str, Any]:
        return self.evaluate(self.config.evaluation_episodes)

    def best_by(self) -> str:
        """A turn-based game with action masks keeps ``best/`` by its games against a random
        legal player (:func:`~rlblocks.train.selfplay.games_score`), or by its exact score
        against it with ``selfplay_eval_exact`` (:func:`~rlblocks.train.selfplay.exact_score`;
        a resumed run keeps a best score of the same kind only); other envs by the return
        (:meth:`Trainer.best_by`)."""
        if isinstance(self.hub, TurnBasedVectorEnv):
            selfplay = getattr(self, "selfplay", None)
            return EXACT_BEST_BY if selfplay is not None and selfplay.exact else GAMES_BEST_BY
        return super().best_by()

    def _best_score(self, result: dict[str, Any], at_checkpoint: bool) -> float | None:
        """A turn-based game's score: its confirmation games' (played when the evaluation
        against a random legal player scored better than ``best/``, :class:`SelfPlay`; None
        in the other iterations, and always when ``selfplay_eval_interval`` is 0: the sum of
        the seats' returns says nothing of a game); with ``selfplay_eval_exact`` the exact
        evaluation's (:func:`~rlblocks.train.selfplay.exact_score`); other envs'
        :meth:`Trainer._best_score`."""
        if not isinstance(self.hub, TurnBasedVectorEnv):
            return super()._best_score(result, at_checkpoint)
        if at_checkpoint:
            return None
        if self.selfplay.exact:
            return exact_score(result)
        return games_score(result, self.config.selfplay_eval_games, "confirm")

    # --- acting -------------------------------------------------------------------------------
    def compute_actions(
        self,
        obs: Mapping[Any, Any],
        state: Mapping[Any, list[Any]] | None = None,
        explore: bool = False,
    ) -> tuple[dict[Any, Any], dict[Any, list[torch.Tensor]]]:
        """Actions for one step of some agents: ``{agent: raw observation}`` ->
        ``({agent: action in its own space}, {agent: state_out})`` (one batched call per
        policy; ``state``: each agent's state from the previous call, None: initial)."""
        actions: dict[Any, Any] = {}
        states: dict[Any, list[torch.Tensor]] = {}
        groups: dict[str, list[Any]] = {}
        for agent in obs:
            if agent not in self.hub.mapping:
                raise ValueError(
                    f"agent {agent!r} is not one of the env's agents {list(self.hub.agents)}"
                )
            groups.setdefault(self.hub.mapping[agent], []).append(agent)
        for pid, agents in groups.items():
            parts, spec = self.policies[pid], self.hub.specs[pid]
            pol = parts.policy
            raw = [spec.value(a, mask_form(obs[a])) for a in agents]  # PettingZoo's form too
            x = pol.stack_obs(None, parts.observe(raw))
            init = pol.initial_state(len(agents))
            rows = []
            for i, a in enumerate(agents):
                given = None if state is None else state.get(a)
                rows.append(
                    [s[i] for s in init]
                    if given is None
                    else [torch.as_tensor(t, device=self.device) for t in given]
                )
            batch_state = [torch.stack([r[k] for r in rows]) for k in range(len(init))]
            out = pol.act(x, batch_state, explore=explore, full=False)
            for i, a in enumerate(agents):
                actions[a] = spec.agent_action(a, tree_index(out["actions"], i))
                states[a] = [s[i] for s in out["state_out"]]
        return actions, states

    def compute_single_action(
        self, obs: Any, state: list[Any] | None = None, explore: bool = False, agent: Any = None
    ) -> tuple[Any, list[torch.Tensor]]:
        """One agent's observation -> ``(action, state_out)``."""
        if agent is None:
            raise ValueError(
                "a multi-agent trainer needs the agent: compute_single_action(obs, agent=...)"
            )
        actions, states = self.compute_actions(
            {agent: obs}, None if state is None else {agent: state}, explore
        )
        return actions[agent], states[agent]

    def evaluate(
        self, episodes: int = 10, explore: bool = False, seed: int | None = None
    ) -> dict[str, Any]:
        """Runs ``episodes`` whole episodes on a fresh copy of the env (training untouched).

        Returns:
            ``episodes``, ``episode_return_mean`` / ``_std`` / ``_min`` / ``_max`` (sums over
            the agents), ``episode_len_mean``, ``episode_returns`` and
            ``agent_episode_return_mean/<agent>``.
        """
        check_episodes(episodes)
        block = self.config.multiagent
        hub = multiagent_vector_env(
            self._make,
            1,
            block.get("policy_mapping", "shared"),
            bool(block.get("agent_id_one_hot", False)),
            self.config.clip_actions,
            self.config.env_name,
            smoothing=episodes,
        )
        try:
            with torch.random.fork_rng(devices=[]):
                actors = {
                    pid: PolicyActor(parts.policy, parts.observe, explore)
                    for pid, parts in self.policies.items()
                }
                play_episodes(hub, actors, episodes, self.evaluation_seed(seed))
        finally:
            hub.close()
        result = episode_summary(list(hub.episode_returns), list(hub.episode_lengths))
        for key, value in hub.metrics().items():
            if key.startswith(("agent_", "module_")):
                result[key] = value
        return result

    # --- checkpoints --------------------------------------------------------------------------
    def _storable_env(self) -> Any:
        return self.config.env if isinstance(self.config.env, str) else None

    def _own_state(self) -> dict[str, Any]:
        """Every policy (model, optimizer, KL coefficient, filter, runner state), the return
        statistics, the agent step count and (when they pickle) the envs."""
        return {
            "agent_timesteps_total": self.agent_timesteps_total,
            "policies": {
                pid: {
                    "model": p.policy.model.state_dict(),
                    "optimizer": p.learner.optimizer.state_dict(),
                    "kl_coeff": p.learner.kl_coeff,
                    "filter": p.obs_filter.state_dict(),
                    "runner": p.runner.state_dict(),
                }
                for pid, p in self.policies.items()
            },
            "hub": self.hub.state_dict(),
            "selfplay": self.selfplay.state_dict(),
            "envs": self.hub.snapshot(),
        }

    def _restore_build(self, state: dict[str, Any], envs: Any) -> None:
        envs = self._usable(envs)
        if envs is None:
            warnings.warn(
                f"resuming {state['_path']!r}: its envs could not be saved with their state "
                "(they do not pickle, or pickle as EzPickle: their constructor only), so they "
                "restart from a fresh reset: the episodes in progress at the checkpoint are "
                "dropped",
                RuntimeWarning,
                stacklevel=3,
            )
        self._make = multiagent_creator(self.config)
        self._build(venv=None if envs is None else envs["envs"])

    @staticmethod
    def _usable(envs: Any) -> Any:
        """``envs`` of a checkpoint, None when one came back as a new env (an ``EzPickle``
        env saved before :meth:`~rlblocks.multiagent.envs.MultiAgentVectorEnv.snapshot`
        refused those)."""
        if envs is not None and any(ezpickled(e) for e in envs["envs"]):
            return None
        return envs

    def _load_state(self, state: dict[str, Any], envs: Any) -> None:
        envs = self._usable(envs)
        self.agent_timesteps_total = int(state["agent_timesteps_total"])
        saved = state["policies"]
        if set(saved) != set(self.policies):
            raise ValueError(
                f"checkpoint {state['_path']!r} holds policies {sorted(saved)}, this config "
                f"builds {sorted(self.policies)}"
            )
        with checkpoint_fits(state):
            for pid, parts in self.policies.items():
                parts.policy.model.load_state_dict(saved[pid]["model"])
                parts.learner.optimizer.load_state_dict(saved[pid]["optimizer"])
                parts.learner.kl_coeff = float(saved[pid]["kl_coeff"])
                parts.obs_filter.load_state_dict(saved[pid]["filter"])
                parts.runner.load_state_dict(saved[pid]["runner"], envs_restored=envs is not None)
                parts.runner._seed = self.seed + self.timesteps_total
        self.hub.load_state_dict(state["hub"])
        self.selfplay.load_state_dict(state.get("selfplay", {}), envs is not None)
        if envs is not None:
            self.hub.resume(envs)

    def _close_envs(self) -> None:
        if getattr(self, "selfplay", None) is not None:
            self.selfplay.close()
        if getattr(self, "hub", None) is not None:
            self.hub.close()
