"""Which spaces and settings each algorithm trains, checked before anything is built: the
native learners and ``--backend rllib`` refuse in the same words, and ``rlblocks train
--backend rllib`` refuses before Ray is imported or started (one env is made to read its
spaces). No torch, no Ray.

Examples:
    >>> import gymnasium as gym
    >>> check_action_space("DQN", gym.spaces.Discrete(2))
    >>> try:
    ...     check_action_space("SAC", gym.spaces.MultiBinary(2))
    ... except ValueError as err:
    ...     print(str(err)[:45])
    SAC: the action space must be a Box (squashed
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = [
    "DETERMINISTIC_ALGOS",
    "NATIVE_ONLY",
    "PPO_ONLY",
    "RLLIB_Q_TAKEN",
    "RLLIB_Q_UNSUPPORTED",
    "check_action_space",
    "check_rllib_config",
    "check_rllib_multiagent",
    "check_rllib_q_keys",
    "check_rllib_run",
    "check_rllib_spaces",
    "makes_multiagent_env",
    "multiagent_algo_refusal",
    "rllib_refusal",
]

#: PPO settings that DQN and SAC on RLlib do not read, refused in a DQN / SAC run of PPO keys
#: (a run directory written before they took their own configs there: ``rllib`` block keys).
PPO_ONLY = (
    "train_batch_size",
    "sgd_minibatch_size",
    "num_sgd_iter",
    "lr",
    "lr_schedule",
    "lambda_",
    "clip_param",
    "vf_clip_param",
    "vf_loss_coeff",
    "entropy_coeff",
    "kl_coeff",
    "kl_target",
    "grad_clip",
    "normalize_advantages",
)
#: Native-trainer features that ``--backend rllib`` does not run (refused, never ignored),
#: and what to use there instead.
NATIVE_ONLY = {
    "target_kl": "rllib.training",
    "normalize_reward": "an env wrapper",
    "clip_reward": "an env wrapper",
    "observation_clip": "the MeanStdFilter connector, which clips at 10",
    "evaluation_interval": "rllib.evaluation",
    "selfplay_snapshot_every": "rllib.callbacks",
    "selfplay_pool_size": "rllib.callbacks",
    "selfplay_opponent_prob": "rllib.callbacks",
    "selfplay_random_prob": "rllib.callbacks",
    "selfplay_random_opening": "rllib.callbacks",
    "selfplay_eval_interval": "rllib.evaluation",
    "selfplay_eval_games": "rllib.evaluation",
    "selfplay_eval_exact": "rllib.evaluation",
}
_MASK_KEYS = {"action_mask", "observations"}
#: The native algorithms with a deterministic actor: Box actions only, native only.
DETERMINISTIC_ALGOS = ("TD3", "DDPG")

#: DQN / SAC config keys whose native meaning ``--backend rllib`` cannot honour: refused at
#: any value but the default (:func:`check_rllib_q_keys`), with what to use instead.
RLLIB_Q_UNSUPPORTED = {
    "device": "the local learner runs on the CPU (RLlib's own: rllib.learners)",
    "tensorboard": "RLlib reports its own results",
    "evaluation_interval": "RLlib's own (rllib.evaluation)",
    "evaluation_episodes": "RLlib's own (rllib.evaluation)",
    "checkpoint_replay": "RLlib runs keep the replay buffer out of checkpoints",
    "her": "RLlib's replay buffers do not relabel goals; her='auto' is off there",
    "her_strategy": "hindsight relabelling is native only",
    "her_n_sampled_goal": "hindsight relabelling is native only",
    "goal_reward": "hindsight relabelling is native only",
    "q_model": "the critics of rlblocks' RLlib SAC module are built from model",
    "use_sde": "gSDE is native only; RLlib's SAC samples the plain squashed Gaussian",
    "network_init": "rlblocks' RLlib SAC module starts its layers as the catalog does",
    "parallel_critics": "its learner runs the critics one after the other; 'auto' is off there",
}
#: Keys checked apart from their default: SAC's ``q_model`` is honoured where the critics'
#: model config it makes is the actor's (``device="auto"``, too: the CPU).
_SAME_MODEL = "q_model"
#: The ``rllib`` block's keys that a DQN / SAC config key sets (``--backend rllib``): section
#: -> {RLlib key: the config key to set instead}; the block keeps RLlib's other keys.
RLLIB_Q_TAKEN: dict[str, dict[str, str]] = {
    "training": {
        "lr": "lr",
        "gamma": "gamma",
        "grad_clip": "grad_clip",
        "train_batch_size": "train_batch_size",
        "train_batch_size_per_learner": "train_batch_size",
        "num_steps_sampled_before_learning_starts": "learning_starts",
        "training_intensity": "train_freq / gradient_steps",
        "target_network_update_freq": "target_network_update_freq",
        "tau": "tau",
        "n_step": "n_step",
        "double_q": "double_q",
        "dueling": "dueling",
        "num_atoms": "num_atoms",
        "v_min": "v_min",
        "v_max": "v_max",
        "td_error_loss_fn": "td_error_loss_fn",
        "epsilon": "epsilon",
        "actor_lr": "actor_lr",
        "critic_lr": "critic_lr",
        "alpha_lr": "alpha_lr",
        "initial_alpha": "initial_alpha",
        "target_entropy": "target_entropy",
        "twin_q": "twin_q",
        "store_buffer_in_checkpoints": "checkpoint_replay",
    },
    "reporting": {
        "min_sample_timesteps_per_iteration": "timesteps_per_iteration",
        "metrics_num_episodes_for_smoothing": "metrics_smoothing_episodes",
    },
    "debugging": {"seed": "seed"},
}
#: The ``rllib.training.replay_buffer_config`` keys that ``replay_capacity`` and the
#: ``prioritized_replay*`` keys set.
_BUFFER_TAKEN = {
    "capacity": "replay_capacity",
    "alpha": "prioritized_replay_alpha",
    "beta": "prioritized_replay_beta",
}


def check_action_space(algo: str, space: gym.Space, *, flat_box: bool = True) -> None:
    """Raises ValueError when ``algo`` (``"DQN"``, ``"SAC"``, ``"TD3"`` or ``"DDPG"``;
    others pass) cannot act in ``space``: DQN takes Discrete actions, SAC Discrete ones or a
    float Box with finite bounds (``flat_box``: a 1-D one, as the native SAC squashes them),
    TD3 and DDPG such a Box only."""
    if algo == "DQN" and not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"DQN needs a Discrete action space, got {space}; train Box actions with SAC "
            "(--algo SAC)"
        )
    if algo in DETERMINISTIC_ALGOS and not isinstance(space, gym.spaces.Box):
        raise ValueError(
            f"{algo} needs a Box action space (a deterministic actor), got {space}; train "
            "Discrete actions with DQN or SAC (--algo DQN / --algo SAC)"
        )
    if algo not in ("SAC", *DETERMINISTIC_ALGOS) or isinstance(space, gym.spaces.Discrete):
        return
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(
            f"SAC: the action space must be a Box (squashed Gaussian) or Discrete "
            f"(Categorical), got {space}"
        )
    if not np.issubdtype(space.dtype, np.floating) or (flat_box and len(space.shape) != 1):
        shape = "1-D float" if flat_box else "float"
        raise ValueError(
            f"{algo}: a Box action space must be {shape}, got {space} (dtype {space.dtype}, "
            f"shape {space.shape})"
        )
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise ValueError(
            f"{algo}: the Box action space needs finite bounds to squash into, got low="
            f"{space.low.tolist()}, high={space.high.tolist()}"
        )


def multiagent_algo_refusal(algo: str) -> str:
    """The line refusing ``algo`` on a multi-agent env with the native trainer."""
    return (
        f"rlblocks train trains multi-agent envs with PPO (MultiAgentPPOTrainer; with "
        f"--backend rllib: PPO, APPO or IMPALA), not {algo}; leave --algo out"
    )


def makes_multiagent_env(config: Any) -> bool:
    """Whether the config's ``env`` (a ``"module:callable"`` or callable; registered ids are
    single-agent without making anything) makes a multi-agent env (one is made and closed)."""
    from rlblocks.multiagent.envs import is_multiagent_env
    from rlblocks.train.envs import env_callable, raw_env_creator

    if isinstance(config.env, str) and env_callable(config.env) is None:
        return False
    made = raw_env_creator(config)()
    try:
        return is_multiagent_env(made)
    finally:
        close = getattr(made, "close", None)
        if close is not None:
            close()


def check_rllib_multiagent(config: Any, algo: str) -> None:
    """Raises ValueError for what ``--backend rllib`` does not run on a multi-agent env."""
    if algo not in ("PPO", "APPO", "IMPALA"):
        raise ValueError(
            f"--backend rllib trains multi-agent envs with PPO, APPO or IMPALA, not {algo}"
        )
    if config.observation_filter != "NoFilter":
        raise ValueError(
            f"observation_filter={config.observation_filter!r}: multi-agent runs on RLlib "
            "take 'NoFilter' only"
        )


def check_rllib_q_keys(config: Any, algo: str) -> None:
    """Raises ValueError for what a DQN / SAC config (the native trainer's
    :class:`~rlblocks.train.offpolicy_config.DQNConfig` / ``SACConfig``) sets that
    ``--backend rllib`` cannot honour: a key of :data:`RLLIB_Q_UNSUPPORTED` off its default,
    prioritized replay whose beta is annealed (RLlib's stays fixed), or an ``rllib`` block key
    that one of the config's keys sets (:data:`RLLIB_Q_TAKEN`)."""
    defaults = type(config)(env=config.env)
    for key, instead in RLLIB_Q_UNSUPPORTED.items():
        if key == _SAME_MODEL and hasattr(config, key):
            changed = config.q_model_config() != config.model_config()
        elif key == "device":  # "auto" is the CPU where no GPU is given to RLlib
            changed = config.device not in ("cpu", "auto")
        elif key in ("her", "parallel_critics"):  # "auto" and False both mean off there
            changed = getattr(config, key, False) is True
        else:
            changed = hasattr(config, key) and getattr(config, key) != getattr(defaults, key)
        if changed:
            raise ValueError(
                f"{key}={getattr(config, key)!r}: {algo} on --backend rllib cannot honour "
                f"this native-trainer setting ({instead}); leave it at its default "
                f"{getattr(defaults, key)!r}"
            )
    if config.prioritized_replay and (
        config.final_prioritized_replay_beta != config.prioritized_replay_beta
    ):
        raise ValueError(
            f"final_prioritized_replay_beta={config.final_prioritized_replay_beta!r}: RLlib's "
            f"prioritized replay keeps beta fixed at prioritized_replay_beta="
            f"{config.prioritized_replay_beta!r} (no annealing); set "
            f"final_prioritized_replay_beta={config.prioritized_replay_beta!r} for "
            "--backend rllib"
        )
    for section, taken in RLLIB_Q_TAKEN.items():
        for key in config.rllib.get(section) or {}:
            if key in taken:
                raise ValueError(
                    f"rllib.{section}.{key}: {algo}'s config key {taken[key]} sets it on "
                    f"--backend rllib; set {taken[key]} instead"
                )
    buffer = (config.rllib.get("training") or {}).get("replay_buffer_config") or {}
    for key in buffer if isinstance(buffer, dict) else ():
        if key in _BUFFER_TAKEN:
            raise ValueError(
                f"rllib.training.replay_buffer_config.{key}: {algo}'s config key "
                f"{_BUFFER_TAKEN[key]} sets it on --backend rllib; set "
                f"{_BUFFER_TAKEN[key]} instead"
            )


def check_rllib_config(config: Any, algo: str) -> None:
    """Raises ValueError for a native-only feature, or a PPO setting that DQN / SAC would
    ignore, in a ``--backend rllib`` config: a DQN / SAC config goes to
    :func:`check_rllib_q_keys`; a :class:`~rlblocks.train.PPOConfig` with ``algo`` DQN or
    SAC is a run directory written before DQN and SAC took their own configs there."""
    if hasattr(config, "replay_capacity"):
        check_rllib_q_keys(config, algo)
        return
    defaults = type(config)(env=config.env)
    for key, instead in NATIVE_ONLY.items():
        if getattr(config, key) != getattr(defaults, key):
            raise ValueError(
                f"{key}={getattr(config, key)!r}: a native-trainer option that "
                f"--backend rllib does not run; use RLlib's own ({instead})"
            )
    if algo not in ("DQN", "SAC"):
        return
    changed = [
        ("lambda" if k == "lambda_" else k)
        for k in PPO_ONLY
        if getattr(config, k) != getattr(defaults, k)
    ]
    if changed:
        example = "lr" if algo == "DQN" else "actor_lr"
        raise ValueError(
            f"{', '.join(changed)}: PPO settings that {algo} does not read; set "
            f"{algo}'s own in the config's rllib.training block (e.g. --set "
            f"rllib.training.{example}=1e-3)"
        )


def check_rllib_spaces(
    algo: str, observation_space: gym.Space, action_space: gym.Space, num_atoms: int = 1
) -> None:
    """Raises ValueError when ``algo`` on ``--backend rllib`` cannot train a single-agent
    env of these spaces (the checks its modules make, in the native trainer's words where
    the rule is the same)."""
    check_action_space(algo, action_space, flat_box=False)
    masked = (
        isinstance(observation_space, gym.spaces.Dict)
        and set(observation_space.spaces) == _MASK_KEYS
    )
    if masked and algo == "SAC":
        raise ValueError(
            "--backend rllib: SAC does not read action masks (the env observes "
            "'action_mask'); train it natively (without --backend rllib), or with DQN or PPO"
        )
    if masked and algo == "DQN" and num_atoms > 1:
        raise ValueError("DQN: action masks with num_atoms > 1 are not supported")


def rllib_refusal(algo: str) -> str:
    """The line refusing ``algo`` (TD3 / DDPG) on ``--backend rllib``."""
    return (
        f"--backend rllib: {algo} is not available there (RLlib 2.60 has no TD3 or DDPG on "
        f"its new API stack); train it natively (leave --backend out)"
    )


def check_rllib_run(config: Any, algo: str, num_env_runners: int | None = None) -> None:
    """Every refusal of ``--backend rllib`` that the config, the algorithm and the env's
    spaces decide, made before Ray is imported (one env of the config is made and closed):
    TD3 / DDPG first (:func:`rllib_refusal`; no env is made for them), then
    :func:`check_rllib_multiagent` (a multi-agent env), :func:`check_rllib_config`,
    then :func:`check_rllib_spaces` (a single-agent env); ``num_env_runners`` (when given)
    below 1 for APPO / IMPALA.

    Raises:
        ValueError: The first refusal, or an env that cannot be made.
    """
    from rlblocks.multiagent.envs import is_multiagent_env
    from rlblocks.train.envs import raw_env_creator

    if algo in DETERMINISTIC_ALGOS:
        raise ValueError(rllib_refusal(algo))
    if algo in ("APPO", "IMPALA") and num_env_runners is not None and num_env_runners < 1:
        raise ValueError(f"{algo} samples asynchronously: give --num-env-runners >= 1")
    made = raw_env_creator(config)()
    try:
        multiagent = is_multiagent_env(made)
        if multiagent:  # the algorithm itself first: the keys it reads matter only after
            check_rllib_multiagent(config, algo)
        check_rllib_config(config, algo)
        if not multiagent and isinstance(made, gym.Env):
            atoms = getattr(config, "num_atoms", None) or (
                (config.rllib.get("training") or {}).get("num_atoms", 1)
            )
            check_rllib_spaces(algo, made.observation_space, made.action_space, int(atoms))
    finally:
        close = getattr(made, "close", None)
        if close is not None:
            close()
