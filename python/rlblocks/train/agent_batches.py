"""Multi-agent PPO's batch defaults, counted in **agent steps**.

PPO's ``train_batch_size`` counts env steps (2048 by default), and a multi-agent env
collects one sample per live agent per env step: with 75 agents the single-agent default
becomes 153,600 agent samples per iteration. ``rlblocks train --env`` on a multi-agent env
(no ``--tuned`` / ``--config``) therefore sizes the batch by agent steps:

* **Train batch.** :data:`AGENT_STEPS_PER_ITER` (8192) agent steps per iteration, shared
  by the env's ``possible_agents``: ``train_batch_size = 8192 // agents`` env steps, rounded
  down to a multiple of ``num_envs``, never more than PPO's own default (2048 env steps, so
  envs of up to 4 agents keep it) and never fewer than :data:`MIN_STEPS_PER_COPY` (32) steps
  per env copy (GAE needs some trajectory per lane).
* **Minibatch.** ``sgd_minibatch_size = max(256, ceil(agent steps per iteration / 32))``:
  at most :data:`MINIBATCHES_PER_EPOCH` (32) minibatches per epoch, whatever the agent count.
* A turn-based game (one agent moves per env step) counts one agent.
* A key set with ``--set`` (or ``--num-envs``) is never changed; a given
  ``train_batch_size`` still sizes the minibatch by its agent steps.

The choice is printed at the start of the run and lands in ``config.json`` with the rest of
the config.

Examples:
    >>> agent_batch_defaults(2, 8)
    {'train_batch_size': 2048, 'sgd_minibatch_size': 256}
    >>> agent_batch_defaults(75, 8)  # 32 steps per copy: 19,200 agent steps
    {'train_batch_size': 256, 'sgd_minibatch_size': 600}
    >>> agent_batch_defaults(75, 8, given={"train_batch_size": 512})
    {'sgd_minibatch_size': 1200}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "AGENT_STEPS_PER_ITER",
    "MINIBATCHES_PER_EPOCH",
    "MIN_STEPS_PER_COPY",
    "agent_batch_defaults",
    "agent_batch_line",
]

#: Agent steps per iteration the default train batch aims at.
AGENT_STEPS_PER_ITER = 8192
#: The fewest env steps per env copy per iteration.
MIN_STEPS_PER_COPY = 32
#: The most minibatches per epoch the default minibatch gives.
MINIBATCHES_PER_EPOCH = 32
#: PPO's single-agent defaults (env steps per iteration, rows per minibatch).
_PPO_BATCH, _PPO_MINIBATCH = 2048, 256


def agent_batch_defaults(
    agents: int, num_envs: int, given: Mapping[str, Any] | None = None
) -> dict[str, int]:
    """``train_batch_size`` / ``sgd_minibatch_size`` for an env of ``agents`` agents stepped
    in ``num_envs`` copies (module docstring), leaving out the keys in ``given``.

    Raises:
        ValueError: ``agents`` or ``num_envs`` below 1.
    """
    if agents < 1 or num_envs < 1:
        raise ValueError(f"agents ({agents}) and num_envs ({num_envs}) must be at least 1")
    given = given or {}
    out: dict[str, int] = {}
    if "train_batch_size" in given:
        env_steps = int(given["train_batch_size"])
    elif "rollout_fragment_length" in given and given["rollout_fragment_length"] != "auto":
        env_steps = int(given["rollout_fragment_length"]) * num_envs
    else:
        shared = AGENT_STEPS_PER_ITER // agents // num_envs * num_envs
        env_steps = min(_PPO_BATCH, max(MIN_STEPS_PER_COPY * num_envs, shared))
        if env_steps % num_envs:  # more copies than PPO's default batch divides
            env_steps = -(-env_steps // num_envs) * num_envs
        out["train_batch_size"] = env_steps
    if "sgd_minibatch_size" not in given:
        per_epoch = -(-(env_steps * agents) // MINIBATCHES_PER_EPOCH)
        out["sgd_minibatch_size"] = max(_PPO_MINIBATCH, per_epoch)
    return out


def agent_batch_line(agents: int, num_envs: int, sizes: Mapping[str, int]) -> str:
    """The start-of-run line saying the batch sizes a multi-agent run trains with.

    Examples:
        >>> agent_batch_line(75, 8, {"train_batch_size": 256, "sgd_minibatch_size": 600})[:60]
        'multi-agent batch defaults (75 agents, 8 env copies): train_'
    """
    batch, minibatch = sizes["train_batch_size"], sizes["sgd_minibatch_size"]
    return (
        f"multi-agent batch defaults ({agents} agents, {num_envs} env copies): "
        f"train_batch_size={batch} env steps ({batch * agents} agent steps, "
        f"{batch // num_envs} per copy), sgd_minibatch_size={minibatch} agent steps "
        "(counted in agent steps; --set either to change)"
    )
