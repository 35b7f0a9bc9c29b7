"""Episodes of a multi-agent run with its exported policies, every policy acting for its
agents in one env: what ``rlblocks evaluate RUN_DIR --exported FILE`` runs on a native
multi-agent run (``rlblocks export`` wrote ``policy_<id>.onnx`` / ``.pt2`` per policy).

The env is stepped by :func:`~rlblocks.train.play.play_episodes`, the loop
:meth:`MultiAgentPPOTrainer.evaluate
<rlblocks.train.multiagent.MultiAgentPPOTrainer.evaluate>` runs too (one copy, the same
reset seed, the same union values per policy and the same clipping of each agent's action),
so deterministic actions give the checkpoint's returns.

Examples:
    >>> files = exported_policy_files("runs/ma/policy_scout.onnx", ["scout", "pilot"])
    ...                                                                        # doctest: +SKIP
    >>> str(files["pilot"])                                                    # doctest: +SKIP
    'runs/ma/policy_pilot.onnx'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlblocks.export.evaluate import ExportedActor
from rlblocks.export.runtime import ExportedPolicy
from rlblocks.export.sidecar import space_from_json
from rlblocks.multiagent.turns import multiagent_vector_env
from rlblocks.train.loop import episode_summary
from rlblocks.train.play import play_episodes

__all__ = ["check_policy", "evaluate_exported_multiagent", "exported_policy_files", "file_safe"]

_SUFFIXES = (".onnx", ".pt2")


def file_safe(policy_id: Any) -> str:
    """A policy id as ``rlblocks export`` writes it in ``policy_<id>`` (characters other
    than letters, digits, ``-``, ``_`` and ``.`` become ``_``).

    Examples:
        >>> file_safe("team/blue 1")
        'team_blue_1'
    """
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(policy_id))


def check_policy(
    policy: ExportedPolicy, policy_id: Any, observation_space: Any, action_space: Any
) -> None:
    """The artifact is ``policy_id``'s, for the (union) spaces the env gives that policy.

    Raises:
        ValueError: Another policy's artifact, or other spaces (both named).
    """
    where = str(policy.path)
    named = (policy.sidecar.get("multiagent") or {}).get("policy_id")
    if str(named) != str(policy_id):
        raise ValueError(
            f"{where!r} is the artifact of policy {named!r}, not of {policy_id!r} (exported "
            "from another run?)"
        )
    obs_space = space_from_json(policy.sidecar["observation"]["space"])
    if obs_space != observation_space or policy.action_space != action_space:
        raise ValueError(
            f"{where!r}: the exported policy observes {obs_space} and acts in "
            f"{policy.action_space}; the env gives policy {policy_id!r} "
            f"{observation_space} and {action_space}"
        )


def exported_policy_files(path: str | Path, policy_ids: Sequence[Any]) -> dict[Any, Path]:
    """The artifact of each policy: ``policy_<id>`` with the suffix of ``path`` (one of
    them) in its folder, or in the folder ``path`` (``.onnx``, else ``.pt2``).

    Raises:
        ValueError: A policy without its artifact, naming the file.
    """
    p = Path(path)
    if p.is_dir():
        folder = p
        suffix = next(
            (
                s
                for s in _SUFFIXES
                if all((p / f"policy_{file_safe(i)}{s}").is_file() for i in policy_ids)
            ),
            _SUFFIXES[0],
        )
    else:
        folder, suffix = p.parent, p.suffix
    files = {pid: folder / f"policy_{file_safe(pid)}{suffix}" for pid in policy_ids}
    missing = [str(f) for f in files.values() if not f.is_file()]
    if missing:
        raise ValueError(
            f"--exported: this multi-agent run acts with the policies {list(policy_ids)}; "
            f"{missing[0]!r} does not exist (`rlblocks export RUN_DIR` writes one "
            "policy_<id> artifact per policy)"
        )
    return files


def evaluate_exported_multiagent(
    policies: Mapping[str, ExportedPolicy],
    make: Callable[[], Any],
    multiagent: Mapping[str, Any],
    episodes: int = 10,
    seed: int | None = None,
    *,
    clip_actions: bool = True,
    name: str = "env",
) -> dict[str, Any]:
    """Runs ``episodes`` episodes of one env copy (reset with ``seed``; the next episodes
    follow as the copy resets itself), every policy acting for its agents.

    Args:
        policies: ``{policy_id: artifact}``, one for every policy of the mapping.
        make: Builds one multi-agent env
            (:func:`~rlblocks.train.multiagent.multiagent_creator` of the run's config).
        multiagent: The run config's ``multiagent`` block (its ``policy_mapping`` and
            ``agent_id_one_hot``).
        episodes: Episodes to play (>= 1).
        seed: The reset seed.
        clip_actions: Clip each agent's action into its own Box bounds (the run's
            ``clip_actions``).
        name: The env's name in error messages.

    Returns:
        The keys of :func:`~rlblocks.export.evaluate.evaluate_exported` (returns summed over
        the agents) plus ``agent_episode_return_mean/<agent>`` and
        ``module_episode_return_mean/<policy>``.

    Raises:
        ValueError: ``episodes`` below 1, a policy of the mapping without an artifact, or an
            artifact for other spaces.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")
    hub = multiagent_vector_env(
        make,
        1,
        multiagent.get("policy_mapping", "shared"),
        bool(multiagent.get("agent_id_one_hot", False)),
        clip_actions,
        name,
        smoothing=episodes,
    )
    try:
        missing = [pid for pid in hub.policy_ids if pid not in policies]
        if missing:
            raise ValueError(f"no exported policy for {missing} (policies: {hub.policy_ids})")
        for pid in hub.policy_ids:
            spec = hub.specs[pid]
            check_policy(policies[pid], pid, spec.observation_space, spec.action_space)
        actors = {pid: ExportedActor(policies[pid]) for pid in hub.policy_ids}
        play_episodes(hub, actors, episodes, seed)
    finally:
        hub.close()
    result = episode_summary(list(hub.episode_returns), list(hub.episode_lengths))
    for key, value in hub.metrics().items():
        if key.startswith(("agent_", "module_")):
            result[key] = value
    return result
