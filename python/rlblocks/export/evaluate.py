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
from rlblocks.train.loop import episode_summary
from rlblocks.train.play import play_episode

__all__ = ["ExportedActor", "check_env", "evaluate_exported", "load_exported"]


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


class ExportedActor:
    """An exported policy as a :class:`~rlblocks.train.play.LaneActor` (it reads the
    raw observations; its deterministic actions)."""

    def __init__(self, policy: ExportedPolicy) -> None:
        self.policy = policy

    def initial_state(self, n: int) -> list[Any] | None:
        """The artifact's initial state (None when it is not recurrent)."""
        return self.policy.initial_state(n) if self.policy.recurrent else None

    def initial_prev(self, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The artifact's previous actions and rewards at an episode start."""
        return self.policy.initial_prev(n)

    def observe(self, raw: list[Any], x: Any, fresh: np.ndarray | None) -> Any:
        """The raw observations themselves (the artifact preprocesses them)."""
        return raw

    def act(self, x: Any, state: Any, pa: Any, pr: Any) -> tuple[Any, Any]:
        """:meth:`ExportedPolicy.compute_actions`."""
        acted, state_out = self.policy.compute_actions(x, state, pa, pr)
        return acted, state_out if self.policy.recurrent else None

    def restart(self, state: list[Any], fresh: np.ndarray) -> list[Any]:
        """A copy of ``state`` with the rows ``fresh`` at the initial state."""
        out = [np.array(s) for s in state]
        for s, s0 in zip(out, self.policy.initial_state(len(fresh)), strict=True):
            s[fresh] = s0
        return out


def evaluate_exported(
    policy: ExportedPolicy, env: gym.Env, episodes: int = 10, seed: int | None = None
) -> dict[str, Any]:
    """Runs ``episodes`` episodes (episode ``i`` reset with ``seed + i``); closes ``env``.

    Each episode is :func:`~rlblocks.train.play.play_episode` (the loop the trainer's
    evaluation runs) with deterministic actions, Box actions clipped to the space when the
    run was trained with ``clip_actions``.

    Returns:
        The keys of ``PPOTrainer.evaluate``: ``episodes``, ``episode_return_mean`` /
        ``_std`` / ``_min`` / ``_max``, ``episode_len_mean``, ``episode_returns``, and
        ``success_rate`` when the env's last-step infos give ``is_success`` / ``success``.

    Raises:
        ValueError: ``episodes`` below 1, or an env whose observation or action space is
            not the policy's (:func:`check_env`).
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")
    returns: list[float] = []
    lengths: list[int] = []
    successes: list[float] = []
    try:
        check_env(policy, env)
        for ep in range(episodes):
            total, length = play_episode(
                ExportedActor(policy),
                env,
                None if seed is None else seed + ep,
                policy.action_space if policy.clip_actions else None,
                successes,
            )
            returns.append(total)
            lengths.append(length)
    finally:
        env.close()
    summary = episode_summary(returns, lengths)
    if successes:  # the env's last-step infos give is_success / success
        summary["success_rate"] = sum(successes) / len(successes)
    return summary
