"""Ray-less evaluation of a ``--backend rllib`` run: episodes played with the newest
checkpoint's module and the run's env-to-module pieces, in this process."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlblocks.rllib._ray import (
    Columns,
    SingleAgentEpisode,
    clip_action,
    get_base_struct_from_space,
    unsquash_action,
)
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
from rlblocks.train.loop import episode_summary
from rlblocks.train.trainer_config import PPOConfig

__all__ = [
    "evaluate_exported_multiagent_run",
    "evaluate_exported_run",
    "evaluate_run",
    "multiagent_policies",
]

#: The timestep ``evaluate_run(explore=True)`` explores at (the end of any epsilon schedule).
_LATE = 2**62


def _batched(value: Any, time_axis: bool) -> Any:
    """One processed observation as a batch of one (``[1, 1, ...]`` with a time axis)."""
    if isinstance(value, dict):
        return {k: _batched(v, time_axis) for k, v in value.items()}
    t = torch.as_tensor(np.asarray(value))[None]
    return t[:, None] if time_axis else t


def evaluate_run(
    run_dir: str | Path, episodes: int = 10, explore: bool = False, seed: int | None = None
) -> dict[str, Any]:
    """Plays ``episodes`` with the newest checkpoint's module and the same env-to-module
    pieces as training (the filter frozen at its saved state); no Ray cluster is started.

    Returns:
        The keys of :meth:`rlblocks.train.PPOTrainer.evaluate`, plus ``checkpoint``.

    Raises:
        ValueError: Not a run of this backend, no checkpoint, or bad ``episodes``.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")
    ckpt = newest_checkpoint(run_dir)
    algo = str(ckpt.backend.get("algo", "PPO"))
    config = PPOConfig.from_dict(ckpt.config)
    setup = multiagent_setup(config)
    if setup is not None:
        return _evaluate_multiagent(ckpt, config, algo, setup, episodes, explore, seed)
    module = load_module(ckpt.module_dir)
    filter_state = ckpt.filter_state
    env = make_env(config, algo)
    # What RLlib's env runner sends the env: the module's actions unsquashed to the Box
    # bounds (normalize_actions) or clipped to them (clip_actions), as in training.
    runner = build_algo_config(config, algo, int(ckpt.backend.get("num_env_runners") or 0))
    struct = get_base_struct_from_space(env.action_space)
    to_env = (
        unsquash_action
        if runner.normalize_actions
        else clip_action
        if runner.clip_actions
        else None
    )
    pieces = run_env_to_module(config, algo, training=False)()
    space = env.observation_space
    for piece in pieces:
        piece.input_action_space = env.action_space
        piece.input_observation_space = space
        space = piece.observation_space
        if isinstance(piece, MeanStdFilterBatched):
            piece.update_stats = False
            if filter_state is not None:
                piece.set_state(filter_state)
    dist_cls = (
        module.get_exploration_action_dist_cls()
        if explore
        else module.get_inference_action_dist_cls()
    )
    stateful = bool(module.get_initial_state())
    base = (config.seed or 0) + 1_000_003 if seed is None else int(seed)
    returns, lengths = [], []
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=base + ep)
            episode = SingleAgentEpisode(
                observation_space=env.observation_space, action_space=env.action_space
            )
            episode.add_env_reset(observation=obs)
            state = {k: torch.from_numpy(v)[None] for k, v in module.get_initial_state().items()}
            total, done = 0.0, False
            while not done:
                for piece in pieces:
                    piece(
                        rl_module=module,
                        batch={},
                        episodes=[episode],
                        explore=explore,
                        shared_data={},
                    )
                batch: dict[str, Any] = {
                    Columns.OBS: _batched(episode.get_observations(-1), stateful)
                }
                if stateful:
                    batch[Columns.STATE_IN] = state
                with torch.no_grad():
                    out = (
                        module.forward_exploration(batch, t=_LATE)
                        if explore
                        else module.forward_inference(batch)
                    )
                if Columns.ACTIONS in out:  # DQN: epsilon-greedy / greedy in the module
                    action = _unbatch(out[Columns.ACTIONS])
                else:
                    logits = out[Columns.ACTION_DIST_INPUTS]
                    if stateful:
                        logits, state = logits[:, 0], out[Columns.STATE_OUT]
                    dist = dist_cls.from_logits(logits)
                    action = _unbatch(
                        dist.sample() if explore else dist.to_deterministic().sample()
                    )
                obs, reward, terminated, truncated, _ = env.step(
                    action if to_env is None else to_env(action, struct)
                )
                episode.add_env_step(
                    observation=obs,
                    action=action,
                    reward=float(reward),
                    terminated=terminated,
                    truncated=truncated,
                )
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
            lengths.append(len(episode))
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
    config = PPOConfig.from_dict(ckpt.config)
    if multiagent_setup(config) is not None:
        raise ValueError(
            "this RLlib run is multi-agent: evaluate_exported_multiagent_run plays its "
            "policies' artifacts together"
        )
    base = (config.seed or 0) + 1_000_003 if seed is None else int(seed)
    result = evaluate_exported(exported, make_env(config, algo), episodes, seed=base)
    return {**result, "checkpoint": str(ckpt.path)}


def multiagent_policies(run_dir: str | Path) -> tuple[Any, ...]:
    """The policy ids of a multi-agent run of this backend (empty: single-agent)."""
    setup = multiagent_setup(PPOConfig.from_dict(newest_checkpoint(run_dir).config))
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
    from rlblocks.export.evaluate_multiagent import check_policy
    from rlblocks.nest import tree_index
    from rlblocks.rllib.multiagent_env import make_multiagent_env

    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")
    ckpt = newest_checkpoint(run_dir)
    config = PPOConfig.from_dict(ckpt.config)
    setup = multiagent_setup(config)
    if setup is None:
        raise ValueError("this RLlib run is single-agent: use evaluate_exported_run")
    env = make_multiagent_env(config, setup.mapping)
    base = (config.seed or 0) + 1_000_003 if seed is None else int(seed)
    try:
        for pid in setup.policies:
            if pid not in policies:
                raise ValueError(f"no exported policy for {pid!r} (policies: {setup.policies})")
            union = env.unions[pid]
            check_policy(policies[pid], pid, union.observation_space, union.action_space)
    except BaseException:
        env.close()
        raise
    states: dict[Any, Any] = {}

    def begin() -> None:
        states.update({a: policies[setup.mapping[a]].initial_state(1) for a in setup.agents})

    def act(acting: list[Any], obs: dict[Any, Any]) -> dict[Any, Any]:
        actions: dict[Any, Any] = {}
        for pid in dict.fromkeys(setup.mapping[a] for a in acting):
            agents = [a for a in acting if setup.mapping[a] == pid]
            policy = policies[pid]
            state = (
                [np.concatenate(rows) for rows in zip(*(states[a] for a in agents), strict=True)]
                if policy.recurrent
                else None
            )
            chosen, state_out = policy.compute_actions([obs[a] for a in agents], state)
            for i, a in enumerate(agents):
                actions[a] = tree_index(chosen, i)
                if policy.recurrent:
                    states[a] = [s[i : i + 1] for s in state_out]
        return actions

    out = _play_multiagent(env, setup, episodes, base, begin, act)
    return {**out, "checkpoint": str(ckpt.path)}


def _evaluate_multiagent(
    ckpt: RunCheckpoint,
    config: PPOConfig,
    algo: str,
    setup: MultiAgentSetup,
    episodes: int,
    explore: bool,
    seed: int | None,
) -> dict[str, Any]:
    """:func:`evaluate_run` of a multi-agent run: each policy's module acts for its agents
    (one forward pass per policy and step), on the run's
    :class:`~rlblocks.rllib.multiagent_env.UnionMultiAgentEnv`. Adds the
    ``agent_episode_return_mean/<agent_id>`` of the episodes."""
    from rlblocks.rllib.multiagent_env import make_multiagent_env

    root = ckpt.module_dir.parent  # one module directory per policy
    modules = {p: load_module(root / p) for p in setup.policies}
    runner = build_algo_config(config, algo, int(ckpt.backend.get("num_env_runners") or 0))
    to_env = (
        unsquash_action
        if runner.normalize_actions
        else clip_action
        if runner.clip_actions
        else None
    )
    env = make_multiagent_env(config, setup.mapping)
    piece = multiagent_env_to_module(config, algo, setup)()[0]
    piece.input_action_space = env.action_space
    piece.input_observation_space = env.observation_space
    structs = {a: get_base_struct_from_space(env.action_spaces[a]) for a in setup.agents}
    base = (config.seed or 0) + 1_000_003 if seed is None else int(seed)
    states: dict[Any, Any] = {}

    def begin() -> None:
        states.update(
            {
                a: {
                    k: torch.from_numpy(v)[None]
                    for k, v in modules[setup.mapping[a]].get_initial_state().items()
                }
                for a in setup.agents
            }
        )

    def act(acting: list[Any], obs: dict[Any, Any]) -> dict[Any, Any]:
        flat = piece.transform({a: obs[a] for a in acting})
        actions: dict[Any, Any] = {}
        for policy in dict.fromkeys(setup.mapping[a] for a in acting):
            agents = [a for a in acting if setup.mapping[a] == policy]
            chosen = _act(modules[policy], agents, flat, states, explore)
            for a, action in chosen.items():
                actions[a] = action if to_env is None else to_env(action, structs[a])
        return actions

    out = _play_multiagent(env, setup, episodes, base, begin, act)
    return {**out, "checkpoint": str(ckpt.path)}


def _play_multiagent(
    env: Any,
    setup: MultiAgentSetup,
    episodes: int,
    base: int,
    begin: Callable[[], None],
    act: Callable[[list[Any], dict[Any, Any]], dict[Any, Any]],
) -> dict[str, Any]:
    """Plays ``episodes`` of the multi-agent ``env`` (seeded ``base + episode``) and closes
    it: ``begin()`` starts an episode's recurrent states, ``act(agents, obs)`` gives the
    actions of the agents to move. Returns :func:`episode_summary` of the team returns and
    each agent's ``agent_episode_return_mean/<agent_id>``."""
    returns, lengths = [], []
    agent_returns: dict[Any, list[float]] = {a: [] for a in setup.agents}
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=base + ep)
            begin()
            totals: dict[Any, float] = {}
            steps, done = 0, False
            while not done:
                actions = act([a for a in env.agents if a in obs], obs)
                obs, rewards, terminated, truncated, _ = env.step(actions)
                for a, r in rewards.items():
                    totals[a] = totals.get(a, 0.0) + float(r)
                steps += 1
                done = bool(terminated["__all__"] or truncated["__all__"])
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


def _act(
    module: Any,
    agents: list[Any],
    flat: dict[Any, Any],
    states: dict[Any, dict[str, torch.Tensor]],
    explore: bool,
) -> dict[Any, Any]:
    """One forward pass of ``module`` for ``agents`` (their flattened observations and
    recurrent states, updated in place): each agent's action."""
    stateful = bool(states[agents[0]])
    batch: dict[str, Any] = {Columns.OBS: _stack([_batched(flat[a], stateful) for a in agents])}
    if stateful:
        batch[Columns.STATE_IN] = {
            k: torch.cat([states[a][k] for a in agents]) for k in states[agents[0]]
        }
    with torch.no_grad():
        out = module.forward_exploration(batch) if explore else module.forward_inference(batch)
    logits = out[Columns.ACTION_DIST_INPUTS]
    if stateful:
        logits = logits[:, 0]
        for i, a in enumerate(agents):
            states[a] = {k: v[i : i + 1] for k, v in out[Columns.STATE_OUT].items()}
    dist_cls = (
        module.get_exploration_action_dist_cls()
        if explore
        else module.get_inference_action_dist_cls()
    )
    dist = dist_cls.from_logits(logits)
    sampled = dist.sample() if explore else dist.to_deterministic().sample()
    return {a: _row(sampled, i) for i, a in enumerate(agents)}


def _stack(values: list[Any]) -> Any:
    """Batches of one, concatenated (dicts key by key)."""
    if isinstance(values[0], dict):
        return {k: _stack([v[k] for v in values]) for k in values[0]}
    return torch.cat(values)


def _row(actions: Any, i: int) -> Any:
    """Row ``i`` of a batch of actions (nested dicts and tuples too), as numpy."""
    if isinstance(actions, dict):
        return {k: _row(v, i) for k, v in actions.items()}
    if isinstance(actions, (tuple, list)):
        return type(actions)(_row(a, i) for a in actions)
    return actions[i].detach().cpu().numpy()


def _unbatch(actions: Any) -> Any:
    if isinstance(actions, dict):
        return {k: _unbatch(v) for k, v in actions.items()}
    if isinstance(actions, (tuple, list)):
        return type(actions)(_unbatch(a) for a in actions)
    return actions[0].detach().cpu().numpy()
