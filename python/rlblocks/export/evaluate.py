"""Episodes with an exported policy: what ``rlblocks evaluate RUN_DIR --exported FILE`` runs.

Examples:
    >>> import gymnasium as gym
    >>> policy = load_exported("policy.onnx")                                  # doctest: +SKIP
    >>> evaluate_exported(policy, gym.make("CartPole-v1"), 5, seed=0)["episode_return_mean"]
    ...                                                                        # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rlblocks.export.runtime import ExportedPolicy
from rlblocks.export.sidecar import read_sidecar, space_from_json
from rlblocks.nest import tree_index
from rlblocks.spaces import clip_actions
from rlblocks.train.loop import episode_summary

__all__ = ["check_env", "evaluate_exported", "load_exported"]


def load_exported(path: str | Path) -> ExportedPolicy:
    """:class:`OnnxPolicy` or :class:`TorchExportPolicy`, as the sidecar of ``path`` says.

    Raises:
        ValueError: A missing artifact or sidecar, an unknown format, or an artifact whose
            graph disagrees with its sidecar (see :func:`rlblocks.export.validate.check_artifact`).
    """
    fmt = read_sidecar(path).get("artifact_format")
    if fmt == "onnx":
        from rlblocks.export.onnx_policy import OnnxPolicy

        return OnnxPolicy(path)
    if fmt == "torch-export":
        from rlblocks.export.torch_policy import TorchExportPolicy

        return TorchExportPolicy(path)
    raise ValueError(f"{str(path)!r}: unknown artifact format {fmt!r}")


def check_env(policy: ExportedPolicy, env: gym.Env) -> None:
    """The env observes and acts in the spaces the policy was exported for.

    Raises:
        ValueError: Naming the space, the policy's and the env's.
    """
    where = str(policy.path)
    obs_space = space_from_json(policy.sidecar["observation"]["space"])
    if env.observation_space != obs_space:
        raise ValueError(
            f"{where!r}: the exported policy observes {obs_space}, the "
            f"environment's observation space is {env.observation_space}"
        )
    if env.action_space != policy.action_space:
        raise ValueError(
            f"{where!r}: the exported policy acts in {policy.action_space}, the "
            f"environment's action space is {env.action_space}"
        )


def run_episode(policy: ExportedPolicy, env: gym.Env, seed: int | None) -> tuple[float, int]:
    """One episode with deterministic actions; ``(return, length)``.

    Box actions are clipped to the space when the run was trained with ``clip_actions``;
    previous actions and rewards are carried as the trainer's evaluation carries them.
    """
    raw, _ = env.reset(seed=seed)
    state = policy.initial_state(1) if policy.recurrent else None
    pa, pr = policy.initial_prev(1)
    total, length, done = 0.0, 0, False
    while not done:
        actions, state_out = policy.compute_actions([raw], state, pa, pr)
        action = tree_index(actions, 0)
        if policy.clip_actions:
            action = clip_actions(action, policy.action_space)
        raw, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        length += 1
        done = bool(terminated or truncated)
        state = state_out if policy.recurrent else None
        if pa is not None:
            pa = np.roll(pa, -1, axis=1)
            pa[0, -1] = np.asarray(actions).reshape(pa.shape[2:])
        if pr is not None:
            pr = np.roll(pr, -1, axis=1)
            pr[0, -1] = reward
    return total, length


def evaluate_exported(
    policy: ExportedPolicy, env: gym.Env, episodes: int = 10, seed: int | None = None
) -> dict[str, Any]:
    """Runs ``episodes`` episodes (episode ``i`` reset with ``seed + i``); closes ``env``.

    Returns:
        The keys of ``PPOTrainer.evaluate``: ``episodes``, ``episode_return_mean`` /
        ``_std`` / ``_min`` / ``_max``, ``episode_len_mean``, ``episode_returns``.

    Raises:
        ValueError: ``episodes`` below 1, or an env whose observation or action space is
            not the policy's (:func:`check_env`).
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")
    returns: list[float] = []
    lengths: list[int] = []
    try:
        check_env(policy, env)
        for ep in range(episodes):
            total, length = run_episode(policy, env, None if seed is None else seed + ep)
            returns.append(total)
            lengths.append(length)
    finally:
        env.close()
    return episode_summary(returns, lengths)
