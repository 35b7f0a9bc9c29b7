"""A DQN / SAC config (the native trainer's
:class:`~rlblocks.train.offpolicy_config.DQNConfig` / ``SACConfig``) as RLlib's DQN / SAC
``AlgorithmConfig`` sections: ``rlblocks train --backend rllib --algo DQN|SAC`` builds the
same config as the native backend, with the same defaults and refusals, and
:func:`q_sections` is the one translation.

Every key maps, or is refused (:func:`~rlblocks.train.algo_spaces.check_rllib_q_keys`)
when set to a value RLlib cannot honour:

* ``lr`` (DQN; ``lr_schedule`` as RLlib's schedule of it, or of each SAC rate), ``gamma``,
  ``grad_clip``, ``train_batch_size`` -> ``train_batch_size_per_learner``, ``learning_starts`` ->
  ``num_steps_sampled_before_learning_starts``, ``target_network_update_freq``, ``tau``,
  ``n_step``;
* ``replay_capacity``, ``prioritized_replay``, ``prioritized_replay_alpha`` / ``_beta`` ->
  ``replay_buffer_config`` (RLlib's ``PrioritizedEpisodeReplayBuffer`` or
  ``EpisodeReplayBuffer``; Atari: the frame-stacking ones);
* ``train_freq`` / ``gradient_steps`` -> ``training_intensity`` = ``gradient_steps *
  train_batch_size / train_freq``: RLlib's ratio of replayed to sampled steps
  (``ray.rllib.algorithms.dqn.dqn.calculate_rr_weights`` rounds it into sample / update
  rounds), and ``rollout_fragment_length`` = ``train_freq`` steps over the envs of a
  runner (at least ``n_step``), so that one sample round holds ``train_freq`` steps;
* ``timesteps_per_iteration`` -> ``min_sample_timesteps_per_iteration``;
* DQN: ``double_q``, ``dueling``, ``num_atoms``, ``v_min``, ``v_max``, ``td_error_loss_fn``,
  ``epsilon`` with ``random_steps`` (epsilon 1 until then) folded into RLlib's schedule;
* SAC: ``actor_lr``, ``critic_lr``, ``alpha_lr`` (``lr`` where unset), ``initial_alpha``,
  ``target_entropy``, ``twin_q``;
* ``model`` over the algorithm's model defaults, ``env``, ``num_envs``, ``seed``,
  ``observation_filter``, ``metrics_smoothing_episodes``, ``num_threads``, the checkpoint
  keys: :func:`~rlblocks.rllib.algo_config.build_algo_config` and the trainer.

The config's ``rllib`` block (applied last) takes RLlib's other keys.

Examples:
    >>> from rlblocks.train.offpolicy_config import DQNConfig
    >>> training = q_sections(DQNConfig(env="CartPole-v1"), "DQN", 1)["training"]
    >>> training["training_intensity"], training["num_steps_sampled_before_learning_starts"]
    (8.0, 1000)
    >>> training["epsilon"]
    [[0, 1.0], [999, 1.0], [1000, 0.905], [10000, 0.05]]
"""

from __future__ import annotations

import math
from typing import Any

from rlblocks.rllib.replay import atari_replay_buffer_config
from rlblocks.train.algo_spaces import check_rllib_q_keys
from rlblocks.train.trainer_config import piecewise
from rlblocks.wrappers.atari import is_atari

__all__ = ["epsilon_schedule", "q_sections"]


def epsilon_schedule(schedule: list[list[float]], warmup: int) -> list[list[float]]:
    """RLlib's ``epsilon`` schedule (linear between points, starting at timestep 0) for the
    native one: epsilon 1 for the first ``warmup`` steps, then ``schedule``'s.

    Examples:
        >>> epsilon_schedule([[0, 1.0], [100, 0.0]], 0)
        [[0, 1.0], [100, 0.0]]
        >>> epsilon_schedule([[0, 0.5]], 10)
        [[0, 1.0], [9, 1.0], [10, 0.5]]
    """
    points = [[int(t), float(v)] for t, v in schedule]
    if warmup <= 0:
        if points[0][0] > 0:
            points.insert(0, [0, points[0][1]])
        return points
    head = [[0, 1.0], [warmup - 1, 1.0]] if warmup > 1 else [[0, 1.0]]
    return head + [[warmup, piecewise(schedule, warmup)]] + [p for p in points if p[0] > warmup]


def rllib_lr(config: Any, lr: float) -> float | list[list[float]]:
    """``lr``, or the config's ``lr_schedule`` as RLlib's learning-rate schedule (RLlib
    interpolates ``[[timestep, lr], ...]`` from timestep 0, so a schedule that starts later
    gains its first value at 0).

    Examples:
        >>> from rlblocks.train.offpolicy_config import SACConfig
        >>> rllib_lr(SACConfig(), 3e-4), rllib_lr(SACConfig(lr_schedule=[[100, 1e-3]]), 3e-4)
        (0.0003, [[0, 0.001], [100, 0.001]])
    """
    if not config.lr_schedule:
        return lr
    points = [[int(t), float(v)] for t, v in config.lr_schedule]
    return points if points[0][0] == 0 else [[0, points[0][1]], *points]


def _buffer(config: Any, model: dict[str, Any]) -> dict[str, Any]:
    """``replay_buffer_config`` of ``replay_capacity`` and the prioritized-replay keys."""
    prioritized = bool(config.prioritized_replay)
    weights = (
        {"alpha": config.prioritized_replay_alpha, "beta": config.prioritized_replay_beta}
        if prioritized
        else {}
    )
    if isinstance(config.env, str) and is_atari(config.env):
        # each frame stored once; the buffer stacks the frames of a sampled transition
        return atari_replay_buffer_config(
            model, config.replay_capacity, prioritized=prioritized, **weights
        )
    kind = "PrioritizedEpisodeReplayBuffer" if prioritized else "EpisodeReplayBuffer"
    return {"type": kind, "capacity": config.replay_capacity, **weights}


def q_sections(config: Any, algo: str, num_envs: int) -> dict[str, dict[str, Any]]:
    """RLlib ``AlgorithmConfig`` sections (``training``, ``env_runners``, ``reporting``) of a
    DQN / SAC config (module docstring) for env runners of ``num_envs`` envs each.

    Raises:
        ValueError: A key set to a value RLlib cannot honour, named.
    """
    if getattr(config, "ALGORITHM", None) != algo:
        raise ValueError(f"--algo {algo} runs a {algo}Config, got a {type(config).__name__}")
    check_rllib_q_keys(config, algo)
    model = config.model_config().to_dict()
    training: dict[str, Any] = {
        "gamma": config.gamma,
        "grad_clip": config.grad_clip,
        "train_batch_size_per_learner": config.train_batch_size,
        "num_steps_sampled_before_learning_starts": config.learning_starts,
        "training_intensity": config.gradient_steps * config.train_batch_size / config.train_freq,
        "target_network_update_freq": config.target_network_update_freq,
        "tau": config.tau,
        "n_step": config.n_step,
        "replay_buffer_config": _buffer(config, model),
    }
    if algo == "DQN":
        warmup = config.learning_starts if config.random_steps is None else config.random_steps
        training.update(
            lr=rllib_lr(config, config.lr),
            double_q=config.double_q,
            dueling=config.dueling,
            num_atoms=config.num_atoms,
            v_min=config.v_min,
            v_max=config.v_max,
            td_error_loss_fn=config.td_error_loss_fn,
            epsilon=epsilon_schedule(config.epsilon, warmup),
        )
    else:
        training.update(
            actor_lr=rllib_lr(config, config.actor_lr),
            critic_lr=rllib_lr(config, config.critic_lr),
            alpha_lr=config.alpha_lr if config.alpha_lr == 0 else rllib_lr(config, config.alpha_lr),
            initial_alpha=config.initial_alpha,
            target_entropy=config.target_entropy,
            twin_q=config.twin_q,
        )
    fragment = max(config.n_step, math.ceil(config.train_freq / max(1, num_envs)))
    return {
        "training": training,
        "env_runners": {"rollout_fragment_length": fragment},
        "reporting": {"min_sample_timesteps_per_iteration": config.timesteps_per_iteration},
    }
