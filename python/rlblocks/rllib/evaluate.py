"""Ray-less evaluation of a ``--backend rllib`` run: episodes played with the newest
checkpoint's module and the run's env-to-module pieces, in this process.

The episodes are :mod:`rlblocks.train.play`'s loops (the ones native and exported policies
are played by): the module acts as a :class:`~rlblocks.rllib.module_actor.RLModuleActor`,
an exported artifact as an :class:`~rlblocks.export.evaluate.ExportedActor`; episode ``i``
is reset with the seed ``base + i``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlblocks.rllib._ray import clip_action, get_base_struct_from_space, unsquash_action
from rlblocks.rllib.algo_config import (
    MultiAgentSetup,
    build_algo_config,
    make_env,
    multiagent_env_to_module,
    multiagent_setup,
    run_env_to_module,
)
from rlblocks.rllib.checkpoints import RunCheckpoint, load_module, newest_checkpoint
from rlblocks.rllib.connectors import MeanStdFilterBatched
from rlblocks.rllib.module_actor import EpisodeModuleActor, RLModuleActor
from rlblocks.train.loop import episode_summary
from rlblocks.train.play import LaneActor, play_agents_episode, play_episode
from rlblocks.train.trainer_config import TrainerConfig

__all__ = [
    "evaluate_exported_multiagent_run",
    "evaluate_exported_run",
    "evaluate_run",
    "multiagent_policies",
]


def _check_episodes(episodes: Any) -> None:
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")


def _base_seed(config: TrainerConfig, seed: int | None) -> int:
    """Episode 0's reset seed: ``seed``, else the run's evaluation seed."""
    return (config.seed or 0) + 1_000_003 if seed is None else int(seed)


def _to_env(
    ckpt: RunCheckpoint, config: TrainerConfig, algo: str
) -> Callable[[Any, Any], Any] | None:
    """What RLlib's env runner does to the module's actions before the env gets them, as in
    training: unsquash them to the Box bounds (normalize_actions), clip them (clip_actions)
    or nothing."""
    runner = build_algo_config(config, algo, int(ckpt.backend.get("num_env_runners") or 0))
    to_env: Any = clip_action if runner.clip_actions else None
    return unsquash_action if runner.normalize_actions else to_env


def evaluate_run(
    run_dir: str | Path, episodes: int = 10, explore: bool = False, seed: int | None = None
) -> dict[str, Any]:
    """Plays ``episodes`` with the newest checkpoint's module and the same env-to-module
    pieces as training (the filter frozen at its saved state); no Ray cluster is started.

    Returns:
        The keys of :meth:`rlblocks.train.PPOTrainer.evaluate`, plus ``checkpoint`` (a
        multi-agent run: ``agent_episode_return_mean/<agent_id>`` too).

    Raises:
        ValueError: Not a run of this backend, no checkpoint, or bad ``episodes``.
    """
    _check_episodes(episodes)
    ckpt = newest_checkpoint(run_dir)
    algo = str(ckpt.backend.get("algo", "PPO"))
    config = ckpt.trainer_config
    setup = multiagent_setup(config)
    if setup is not None:
        return _evaluate_multiagent(ckpt, config, algo, setup, episodes, explore, seed)
    module = load_module(ckpt.module_dir)
    env = make_env(config, algo)
    to_env = _to_env(ckpt, config, algo)
    pieces = run_env_to_module(config, algo, training=False)()
    space = env.observation_space
    for piece in pieces:
        piece.input_action_space = env.action_space
        piece.input_observation_space = space
        space = piece.observation_space
        if isinstance(piece, MeanStdFilterBatched):
            piece.update_stats = False
            if ckpt.filter_state is not None:
                piece.set_state(ckpt.filter_state)
    actor = EpisodeModuleActor(
        module,
        pieces,
        env.observation_space,
        env.action_space,
        explore,
        to_env,
        get_base_struct_from_space(env.action_space),
    )
    base = _base_seed(config, seed)
    returns, lengths = [], []
    try:
        for ep in range(episodes):
            total, length = play_episode(actor, env, base + ep)
            returns.append(total)
            lengths.append(length)
    finally:
        env.close()
    return {**episode_summary(returns, lengths), "checkpoint": str(ckpt.path)}


def evaluate_exported_run(
    run_dir: str | Path, exported: Any, episodes: int = 10, seed: int | None = None
) -> dict[str, Any]:
    """Plays ``episodes`` with an exported policy of a single-agent RLlib run
    (:func:`rlblocks.rllib.export.export_rllib_policy`) on the run's env, with the seeds
    :func:`evaluate_run` uses (so the same deterministic actions give the same returns).

    Args:
        run_dir: The run (or one of its checkpoints).
        exported: An :class:`~rlblocks.export.ExportedPolicy`
            (:func:`rlblocks.export.evaluate.load_exported`).
        episodes: Episodes to play.
        seed: The first episode's seed (default: the run's evaluation seed).

    Returns:
        The keys of :func:`rlblocks.export.evaluate_exported`, plus ``checkpoint``.

    Raises:
        ValueError: Not a run of this backend, a multi-agent run, bad ``episodes``, or an
            artifact for other spaces than the run's env.
    """
    from rlblocks.export.evaluate import evaluate_exported

    ckpt = newest_checkpoint(run_dir)
    algo = str(ckpt.backend.get("algo", "PPO"))
    config = ckpt.trainer_config
    if multiagent_setup(config) is not None:
        raise ValueError(
            "this RLlib run is multi-agent: evaluate_exported_multiagent_run plays its "
            "policies' artifacts together"
        )
    result = evaluate_exported(
        exported, make_env(config, algo), episodes, seed=_base_seed(config, seed)
    )
    return {**result, "checkpoint": str(ckpt.path)}


def multiagent_policies(run_dir: str | Path) -> tuple[Any, ...]:
    """The policy ids of a multi-agent run of this backend (empty: single-agent)."""
    setup = multiagent_setup(newest_checkpoint(run_dir).trainer_config)
    return () if setup is None else tuple(setup.policies)


def evaluate_exported_multiagent_run(
    run_dir: str | Path, policies: dict[Any, Any], episodes: int = 10, seed: int | None = None
) -> dict[str, Any]:
    """Plays ``episodes`` of a multi-agent RLlib run with its exported policies
    (:func:`rlblocks.rllib.export.export_rllib_policies`; ``{policy_id: ExportedPolicy}``),
    each acting for its agents, on the env and with the seeds :func:`evaluate_run` uses, so
    the greedy actions give its returns.

    Returns:
        The keys of :func:`evaluate_run` for a multi-agent run.

    Raises:
        ValueError: A single-agent run, bad ``episodes``, a policy without its artifact, or
            an artifact of other spaces.
    """
    from rlblocks.export.evaluate import ExportedActor
    from rlblocks.export.evaluate_multiagent import check_policy
    from rlblocks.rllib.multiagent_envs import make_multiagent_env

    _check_episodes(episodes)
    ckpt = newest_checkpoint(run_dir)
    config = ckpt.trainer_config
    setup = multiagent_setup(config)
    if setup is None:
        raise ValueError("this RLlib run is single-agent: use evaluate_exported_run")
    env = make_multiagent_env(config, setup.mapping)
    try:
        for pid in setup.policies:
            if pid not in policies:
                raise ValueError(f"no exported policy for {pid!r} (policies: {setup.policies})")
            union = env.unions[pid]
            check_policy(policies[pid], pid, union.observation_space, union.action_space)
    except BaseException:
        env.close()
        raise
    actors = {pid: ExportedActor(policies[pid]) for pid in setup.policies}
    out = _play_agents(env, setup, actors, episodes, _base_seed(config, seed))
    return {**out, "checkpoint": str(ckpt.path)}


def _evaluate_multiagent(
    ckpt: RunCheckpoint,
    config: TrainerConfig,
    algo: str,
    setup: MultiAgentSetup,
    episodes: int,
    explore: bool,
    seed: int | None,
) -> dict[str, Any]:
    """:func:`evaluate_run` of a multi-agent run: each policy's module acts for its agents
    (one forward pass per policy and step), on the run's
    :class:`~rlblocks.rllib.multiagent_env.UnionMultiAgentEnv`, the observations flattened
    by the run's connector. Adds the ``agent_episode_return_mean/<agent_id>`` of the
    episodes."""
    from rlblocks.rllib.multiagent_envs import make_multiagent_env

    root = ckpt.module_dir.parent  # one module directory per policy
    to_env = _to_env(ckpt, config, algo)
    env = make_multiagent_env(config, setup.mapping)
    piece = multiagent_env_to_module(config, algo, setup)()[0]
    piece.input_action_space = env.action_space
    piece.input_observation_space = env.observation_space
    actors: dict[Any, LaneActor] = {}
    for pid in setup.policies:
        # every agent of a policy acts in the policy's union space
        struct = get_base_struct_from_space(env.unions[pid].action_space)
        actors[pid] = RLModuleActor(load_module(root / pid), explore, to_env, struct)
    base = _base_seed(config, seed)
    out = _play_agents(env, setup, actors, episodes, base, piece.transform)
    return {**out, "checkpoint": str(ckpt.path)}


def _play_agents(
    env: Any,
    setup: MultiAgentSetup,
    actors: Mapping[Any, LaneActor],
    episodes: int,
    base: int,
    prepare: Callable[[dict[Any, Any]], Any] | None = None,
) -> dict[str, Any]:
    """Plays ``episodes`` of the multi-agent ``env`` (episode ``i`` reset with ``base + i``;
    :func:`~rlblocks.train.play.play_agents_episode`) and closes it. Returns
    :func:`episode_summary` of the team returns and each agent's
    ``agent_episode_return_mean/<agent_id>``."""
    returns, lengths = [], []
    agent_returns: dict[Any, list[float]] = {a: [] for a in setup.agents}
    try:
        for ep in range(episodes):
            totals, steps = play_agents_episode(env, actors, setup.mapping, base + ep, prepare)
            returns.append(sum(totals.values()))
            lengths.append(steps)
            for a, total in totals.items():
                agent_returns[a].append(total)
    finally:
        env.close()
    out = episode_summary(returns, lengths)
    for a, values in agent_returns.items():
        out[f"agent_episode_return_mean/{a}"] = float(np.mean(values)) if values else math.nan
    return out
