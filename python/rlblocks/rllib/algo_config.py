"""An rlblocks PPO config as an RLlib ``AlgorithmConfig`` (PPO, APPO, IMPALA, DQN or SAC)
with rlblocks' modules and connectors, and the run's env as RLlib's env runners make it.

rlblocks' PPO config keys are mapped onto RLlib's (``train_batch_size`` ->
``train_batch_size_per_learner``, ``sgd_minibatch_size`` -> ``minibatch_size``,
``num_sgd_iter`` -> ``num_epochs``, ``lambda``, ``clip_param``, ``vf_clip_param``,
``vf_loss_coeff``, ``entropy_coeff``, ``kl_coeff``, ``kl_target``, ``grad_clip``, ``lr``,
``gamma``, ``lr_schedule`` (as RLlib's ``lr`` schedule), ``seed``, ``num_envs`` ->
``num_envs_per_env_runner``, ``model`` ->
:func:`~rlblocks.rllib.rl_module_spec`, ``observation_filter`` ->
:func:`~rlblocks.rllib.env_to_module`); APPO and IMPALA take the keys they know.

DQN and SAC take the native trainer's config
(:class:`~rlblocks.train.offpolicy_config.DQNConfig` / ``SACConfig``: the same defaults and
refusals on both backends), translated by :func:`~rlblocks.rllib.q_config.q_sections`. A
:class:`PPOConfig` with DQN / SAC is a run directory written before that (RLlib's defaults,
their settings in the ``rllib`` block, ``model`` over RLlib's ``MODEL_DEFAULTS``; a PPO key
set to a non-default value is refused). Every algorithm applies the ``rllib`` block last.

Multi-agent envs (``env`` a ``"module:callable"`` or callable making a PettingZoo env, as
:func:`is_multiagent_config` finds; the config's ``multiagent`` block): the env runners make
:class:`~rlblocks.rllib.multiagent_env.UnionMultiAgentEnv` of it (each policy's agents share
its union space), the config gets ``.multi_agent(policies=..., policy_mapping_fn=...)``, a
:func:`~rlblocks.rllib.multi_rl_module_spec` with each policy's model (``model`` under
``multiagent.policies[id].model``) and :class:`~rlblocks.rllib.connectors.MultiAgentEnvToModule`
(one C++ flattening call per policy). PPO, APPO and IMPALA run them.

Atari ids (``ALE/...``, ``preprocessor_pref="deepmind"``) run the native trainer's DeepMind
pipeline: :func:`deepmind_env` (registered with Ray) in the env runners and
``env_to_module(..., atari=True)``; DQN and SAC keep one frame per episode step with
:func:`~rlblocks.rllib.replay.atari_replay_buffer_config`'s buffer unless the ``rllib``
block names a buffer of its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import partial
from typing import Any, NamedTuple

import gymnasium as gym

from rlblocks.config import ModelConfig
from rlblocks.masks import mask_form, mask_form_space
from rlblocks.rllib.connectors import (
    EnvToModule,
    FlatRepeatedObservations,
    MultiAgentEnvToModule,
    env_to_module,
    needs_env_side_flattening,
)
from rlblocks.rllib.env_runner import VectorEnvRunner
from rlblocks.rllib.learner import (
    RLBlocksDQNTorchLearner,
    RLBlocksPPOTorchLearner,
    RLBlocksSACTorchLearner,
)
from rlblocks.rllib.offpolicy import RLBlocksDQN, RLBlocksSAC
from rlblocks.rllib.q_config import q_sections, rllib_lr
from rlblocks.rllib.replay import atari_replay_buffer_config
from rlblocks.rllib.spec import multi_rl_module_spec, rl_module_spec
from rlblocks.train.algo_spaces import check_rllib_run
from rlblocks.train.trainer_config import PPOConfig, TrainerConfig
from rlblocks.wrappers.atari import is_atari, wrap_deepmind

__all__ = [
    "ALGOS",
    "Q_ALGOS",
    "PolicyMapping",
    "build_algo_config",
    "is_multiagent_config",
    "deepmind_env",
    "flat_repeated_env",
    "make_env",
    "multiagent_env_to_module",
    "multiagent_setup",
    "run_env_to_module",
    "with_algo_defaults",
]

#: The RLlib algorithms this backend runs.
ALGOS = ("PPO", "APPO", "IMPALA", "DQN", "SAC")
#: The Q-learning algorithms (rlblocks' Q heads, RLlib's replay buffers).
Q_ALGOS = ("DQN", "SAC")


def _is_atari(config: TrainerConfig) -> bool:
    return isinstance(config.env, str) and is_atari(config.env)


def deepmind_env(env_id: str, env_config: dict[str, Any] | None = None) -> gym.Env:
    """An Atari id with the env-side DeepMind wrappers (noop reset, frame skip + max,
    episodic life, FIRE reset: :func:`~rlblocks.wrappers.atari.wrap_deepmind` with
    ``warp=False``), as the native trainer makes it; the frame half (gray, resize, stack)
    is the env-to-module connector's. ``env_config`` goes to ``gym.make``."""
    from rlblocks.train.envs import registered_id

    return wrap_deepmind(gym.make(registered_id(env_id), **dict(env_config or {})), warp=False)


def flat_repeated_env(
    env_id: str, model_config: dict[str, Any], env_config: dict[str, Any] | None = None
) -> gym.Env:
    """``gym.make(env_id, **env_config)`` with its ``Repeated`` (gymnasium ``Sequence``,
    ``Graph``, ``Text``, ``OneOf``) observations flattened on the env side
    (:class:`~rlblocks.rllib.connectors.FlatRepeatedObservations`): RLlib's env runner
    cannot unbatch the per-env values that gymnasium's vector env makes of them."""
    return FlatRepeatedObservations(gym.make(env_id, **dict(env_config or {})), model_config)


def _gym_id(env: str) -> str:
    from rlblocks.train.env_ids import importable_id

    return importable_id(env)


def mask_form_env(env_id: str, env_config: dict[str, Any] | None = None) -> gym.Env:
    """``gym.make(env_id, **env_config)`` whose PettingZoo-form observations
    ``{"observation", "action_mask"}`` are given in RLlib's ``{"action_mask",
    "observations"}`` form (:func:`rlblocks.masks.mask_form`), as the native trainer reads
    them."""
    env = gym.make(env_id, **dict(env_config or {}))
    return gym.wrappers.TransformObservation(env, mask_form, mask_form_space(env.observation_space))


def _probe(config: TrainerConfig) -> str | None:
    """What the run's env needs on the env side (one env is made here to see its space):
    ``"repeated"`` for a ``Repeated`` or another space that RLlib's env runner cannot unbatch
    (anywhere in its space), ``"mask_form"`` for PettingZoo's form of the action mask."""
    env = gym.make(_gym_id(str(config.env)), **dict(config.env_config))
    try:
        space = env.observation_space
        if needs_env_side_flattening(space):
            return "repeated"
        return "mask_form" if mask_form_space(space) is not space else None
    finally:
        env.close()


def make_env(config: TrainerConfig, algo: str = "PPO") -> gym.Env:
    """The run's env as its env runners make it (for ``rlblocks evaluate``; a multi-agent
    run's :class:`~rlblocks.rllib.multiagent_env.UnionMultiAgentEnv`)."""
    setup = multiagent_setup(config)
    if setup is not None:
        from rlblocks.rllib.multiagent_envs import make_multiagent_env

        return make_multiagent_env(config, setup.mapping)
    if _is_atari(config):
        return deepmind_env(str(config.env), config.env_config)
    gym_id = _gym_id(str(config.env))
    probed = _probe(config)
    if probed == "repeated":
        return flat_repeated_env(gym_id, _model(config, algo), config.env_config)
    if probed == "mask_form":
        return mask_form_env(gym_id, config.env_config)
    return gym.make(gym_id, **dict(config.env_config))


def _env_id(config: TrainerConfig, algo: str = "PPO") -> str:
    """The env as RLlib's workers can make it (``rlblocks/...`` ids import their module;
    Atari ids are registered with Ray as :func:`deepmind_env` creators, envs observing a
    ``Repeated`` as :func:`flat_repeated_env` creators)."""
    if not isinstance(config.env, str):
        raise ValueError(
            "--backend rllib needs a gymnasium id as env (a callable env creator "
            "cannot be sent to Ray's workers)"
        )
    env = config.env
    if _is_atari(config):
        if config.preprocessor_pref != "deepmind":
            raise ValueError(
                f"--backend rllib runs Atari ids with the DeepMind pipeline only "
                f"(preprocessor_pref='deepmind'), got {config.preprocessor_pref!r}"
            )
        from rlblocks.rllib._ray import register_env

        name = f"rlblocks-deepmind:{env}"
        register_env(name, partial(deepmind_env, env))
        return name
    probed = _probe(config)
    if probed is not None:
        from rlblocks.rllib._ray import register_env

        name = f"rlblocks-{probed.replace('_', '-')}:{env}"
        if probed == "repeated":
            register_env(name, partial(flat_repeated_env, _gym_id(env), _model(config, algo)))
        else:
            register_env(name, partial(mask_form_env, _gym_id(env)))
        return name
    return _gym_id(env)


class PolicyMapping:
    """RLlib's ``policy_mapping_fn`` for a fixed ``{agent_id: policy_id}`` (picklable).

    Examples:
        >>> PolicyMapping({"a_0": "shared"})("a_0", None)
        'shared'
    """

    def __init__(self, mapping: dict[Any, Any]) -> None:
        self.mapping = dict(mapping)

    def __call__(self, agent_id: Any, episode: Any = None, **kwargs: Any) -> Any:
        try:
            return self.mapping[agent_id]
        except KeyError:
            raise ValueError(
                f"agent {agent_id!r} is not one of the env's possible_agents {list(self.mapping)}"
            ) from None


class MultiAgentSetup(NamedTuple):
    """A multi-agent run's agents, ``{agent_id: policy_id}`` mapping and policies."""

    agents: tuple[Any, ...]
    mapping: dict[Any, Any]
    policies: tuple[Any, ...]
    #: A turn-based game (:class:`~rlblocks.rllib.turn_env.TurnBasedMultiAgentEnv`).
    turn_based: bool = False


def _makes_multiagent(config: TrainerConfig) -> Any:
    """The env the config's ``env`` makes when it may be multi-agent (a callable or
    ``"module:callable"``), else None."""
    from rlblocks.train.envs import env_callable, raw_env_creator

    if not callable(config.env) and env_callable(config.env) is None:
        return None
    return raw_env_creator(config)()


def is_multiagent_config(config: TrainerConfig) -> bool:
    """Whether the config's env is a PettingZoo / RLlib multi-agent env (one env is made to
    see it, unless ``env`` is a gymnasium id).

    Raises:
        ValueError: A ``multiagent`` block with a single-agent env, or an env that cannot
            be made.

    Examples:
        >>> is_multiagent_config(PPOConfig(env="CartPole-v1"))
        False
    """
    return multiagent_setup(config) is not None


def multiagent_setup(config: TrainerConfig) -> MultiAgentSetup | None:
    """The agents, mapping and policies of a multi-agent config (one env is made and
    mapped with the config's ``multiagent`` block); None for a single-agent env.

    Raises:
        ValueError: As :func:`is_multiagent_config`, or a mapping that cannot be built.
    """
    from rlblocks.multiagent.envs import is_multiagent_env

    made = _makes_multiagent(config)
    if made is None or not is_multiagent_env(made):
        close = getattr(made, "close", None)
        if close is not None:
            close()
        if getattr(config, "multiagent", None):
            raise ValueError(
                f"multiagent is set but env {config.env_name!r} is not a multi-agent env "
                "(a 'module:callable' or callable returning a PettingZoo or RLlib "
                "multi-agent env)"
            )
        return None
    from rlblocks.rllib.multiagent_envs import union_multiagent_env
    from rlblocks.rllib.turn_env import TurnBasedMultiAgentEnv

    block = getattr(config, "multiagent", None) or {}
    env = union_multiagent_env(
        made,
        block.get("policy_mapping", "shared"),
        bool(block.get("agent_id_one_hot", False)),
    )
    try:
        mapping = dict(env.policy_mapping)
        return MultiAgentSetup(
            tuple(env.possible_agents),
            mapping,
            tuple(dict.fromkeys(mapping.values())),
            isinstance(env, TurnBasedMultiAgentEnv),
        )
    finally:
        env.close()


def _policy_models(config: TrainerConfig, algo: str, policies: tuple[Any, ...]) -> dict[Any, Any]:
    """Each policy's model config: ``model`` under ``multiagent.policies[id].model``."""
    base = _model(config, algo)
    own = (getattr(config, "multiagent", None) or {}).get("policies") or {}
    unknown = sorted(str(p) for p in own if p not in policies)
    if unknown:
        raise ValueError(
            f"multiagent.policies names {unknown}, which the mapping does not make "
            f"(its policies: {list(policies)})"
        )
    return {p: {**base, **(own.get(p) or {}).get("model", {})} for p in policies}


def multiagent_env_to_module(
    config: TrainerConfig, algo: str, setup: MultiAgentSetup
) -> MultiAgentEnvToModule:
    """The env-to-module connector factory of a multi-agent run (each policy flattened with
    its own model config's preprocessor options)."""
    return MultiAgentEnvToModule(
        _model(config, algo), setup.mapping, _policy_models(config, algo, setup.policies)
    )


def _multiagent(algo_config: Any, config: TrainerConfig, algo: str, setup: MultiAgentSetup) -> Any:
    """The multi-agent parts of an ``AlgorithmConfig`` (module docstring)."""
    from rlblocks.rllib._ray import register_env
    from rlblocks.rllib.multiagent_envs import multiagent_env_creator

    models = _policy_models(config, algo, setup.policies)
    name = f"rlblocks-multiagent:{config.env_name}"
    register_env(name, partial(multiagent_env_creator, config.to_dict(), setup.mapping))
    if setup.turn_based:  # the moves outside the mask, counted over the run
        from rlblocks.rllib.turn_env import IllegalMoveCounter

        algo_config = algo_config.callbacks(IllegalMoveCounter)
    return (
        # RLlib's env check steps random union actions, ignoring the action masks that keep
        # each agent inside its own space (UnionMultiAgentEnv is tested instead)
        algo_config.environment(name, env_config=dict(config.env_config), disable_env_checking=True)
        .multi_agent(policies=set(setup.policies), policy_mapping_fn=PolicyMapping(setup.mapping))
        .rl_module(rl_module_spec=multi_rl_module_spec(models, algo=algo))
        .env_runners(env_to_module_connector=multiagent_env_to_module(config, algo, setup))
    )


def _model(config: TrainerConfig, algo: str) -> dict[str, Any]:
    """The run's model config over its config's model defaults (a DQN / SAC run directory
    of PPO keys, :func:`_legacy_q`: over RLlib's ``MODEL_DEFAULTS``)."""
    if _legacy_q(config, algo):
        return ModelConfig.from_dict(config.model).to_dict()
    return config.model_config().to_dict()


def _legacy_q(config: TrainerConfig, algo: str) -> bool:
    """A DQN / SAC run of a :class:`PPOConfig` (written before DQN and SAC took their own
    configs on this backend; :func:`~rlblocks.rllib.checkpoints.run_config`)."""
    return algo in Q_ALGOS and isinstance(config, PPOConfig)


def _frames_once(config: TrainerConfig, algo: str) -> bool:
    """DQN/SAC on Atari: episodes keep one frame per step and rlblocks' frame-stacking
    replay buffer rebuilds the stacks, unless the ``rllib`` block names another buffer."""
    if algo not in Q_ALGOS or not _is_atari(config):
        return False
    buffer = config.rllib.get("training", {}).get("replay_buffer_config") or {}
    return "FrameStack" in str(buffer.get("type", "FrameStack"))


def run_env_to_module(config: TrainerConfig, algo: str, training: bool = True) -> EnvToModule:
    """The env-to-module connector factory of a run (evaluation, ``training=False``, keeps
    the frame stacks in the episode: the module sees the same observations)."""
    return env_to_module(
        _model(config, algo),
        config.observation_filter,
        atari=_is_atari(config),
        stack_in_episode=not (training and _frames_once(config, algo)),
    )


def _ppo_training(config: PPOConfig, algo: str) -> dict[str, Any]:
    """RLlib ``.training(...)`` keys of PPO, APPO and IMPALA from an rlblocks PPO config
    (new APPO / IMPALA runs start from RLlib's defaults: :func:`with_algo_defaults`)."""
    train: dict[str, Any] = {
        "lr": rllib_lr(config, config.lr),
        "gamma": config.gamma,
        "grad_clip": config.grad_clip,
        "train_batch_size_per_learner": config.train_batch_size,
        "entropy_coeff": config.entropy_coeff,
        "vf_loss_coeff": config.vf_loss_coeff,
    }
    if algo == "PPO":
        train.update(
            minibatch_size=config.sgd_minibatch_size,
            num_epochs=config.num_sgd_iter,
            lambda_=config.lambda_,
            clip_param=config.clip_param,
            vf_clip_param=(
                config.vf_clip_param if config.vf_clip_param is not None else float("inf")
            ),
            kl_coeff=config.kl_coeff,
            kl_target=config.kl_target,
            use_kl_loss=config.kl_coeff > 0,
        )
        return train
    if algo == "APPO":
        train.update(
            clip_param=config.clip_param,
            kl_coeff=config.kl_coeff,
            kl_target=config.kl_target,
            use_kl_loss=config.kl_coeff > 0,
        )
    return train


#: Seconds an APPO / IMPALA iteration's loop waits for its env runners' samples before it
#: looks again (RLlib's ``timeout_s_sampler_manager``; its default 0 polls without pause: on a
#: machine with few cores the busy driver starves the env runners, and logs metrics each
#: turn: a 1,000-step IMPALA CartPole iteration took 70 s and 75 CPU-seconds in the driver,
#: 5 s and 15 with this wait). A user's ``rllib.training.timeout_s_sampler_manager`` wins.
SAMPLER_WAIT_S = 0.05

#: The config keys whose value a new APPO / IMPALA run takes from RLlib's own defaults
#: unless the user sets them (:func:`with_algo_defaults`), and RLlib's name of each.
_ASYNC_KEYS = {
    "train_batch_size": "train_batch_size_per_learner",
    "lr": "lr",
    "grad_clip": "grad_clip",
    "entropy_coeff": "entropy_coeff",
    "vf_loss_coeff": "vf_loss_coeff",
}


def with_algo_defaults(data: Mapping[str, Any], algo: str) -> dict[str, Any]:
    """``data`` (a config dict) over the defaults of ``algo``'s new runs: for APPO and
    IMPALA, RLlib's own values of the keys in :data:`_ASYNC_KEYS` (and APPO's
    ``clip_param``), since :class:`PPOConfig`'s defaults (2048-step batches for ten epochs
    of minibatches, gradients clipped at 0.5) are tuned for many passes over each batch and
    make the one pass of these asynchronous algorithms learn slowly; the keys ``data`` sets
    win. Other algorithms: ``data`` unchanged.

    Examples:
        >>> with_algo_defaults({"env": "CartPole-v1", "lr": 1e-3}, "APPO")["lr"]
        0.001
        >>> with_algo_defaults({"env": "CartPole-v1", "num_envs": 4}, "IMPALA")["train_batch_size"]
        500
    """
    if algo not in ("APPO", "IMPALA"):
        return dict(data)
    rllib = _algorithm_config_class(algo)()
    defaults = {ours: getattr(rllib, theirs) for ours, theirs in _ASYNC_KEYS.items()}
    if algo == "APPO":
        defaults["clip_param"] = rllib.clip_param
    # a whole number of steps per env (the config's rule): RLlib's 500 -> 504 for 8 envs
    envs = int(data.get("num_envs", PPOConfig.num_envs))
    defaults["train_batch_size"] = -(-int(defaults["train_batch_size"]) // envs) * envs
    return {**defaults, **data}


def _q_training(config: PPOConfig, algo: str) -> dict[str, Any]:
    """RLlib ``.training(...)`` keys of a DQN / SAC run of PPO keys (:func:`_legacy_q`):
    ``gamma`` (the rest is RLlib's or the config's ``rllib`` block; PPO-only keys are
    refused by :func:`~rlblocks.train.algo_spaces.check_rllib_config`)."""
    return {"gamma": config.gamma}


def _algorithm_config_class(algo: str) -> Any:
    from rlblocks.rllib import _ray

    return {
        "PPO": _ray.RLlibPPOConfig,
        "APPO": _ray.RLlibAPPOConfig,
        "IMPALA": _ray.RLlibIMPALAConfig,
        "DQN": _ray.RLlibDQNConfig,
        "SAC": _ray.RLlibSACConfig,
    }[algo]


def _apply_sections(algo_config: Any, sections: dict[str, dict[str, Any]]) -> Any:
    """``algo_config.<section>(**keys)`` for the config's ``rllib`` block; an unknown key is a
    ValueError naming it."""
    for section, keys in sections.items():
        try:
            algo_config = getattr(algo_config, section)(**keys)
        except TypeError as err:
            raise ValueError(f"rllib.{section}: {err}") from None
    return algo_config


def build_algo_config(
    config: TrainerConfig,
    algo: str = "PPO",
    num_env_runners: int = 0,
    num_envs_per_env_runner: int | None = None,
    num_cpus_per_env_runner: float | None = None,
) -> Any:
    """The RLlib ``AlgorithmConfig`` for an rlblocks config.

    ``num_cpus_per_env_runner`` defaults to this machine's CPUs (less half a CPU for the
    driver) shared by the runners, between 0.25 and 1.

    Raises:
        ValueError: An unknown algorithm, a bad count, or a config RLlib cannot run.
    """
    if algo not in ALGOS:
        raise ValueError(f"--algo must be one of {ALGOS}, got {algo!r}")
    if isinstance(num_env_runners, bool) or int(num_env_runners) < 0:
        raise ValueError(f"--num-env-runners must be >= 0, got {num_env_runners}")
    envs = config.num_envs if num_envs_per_env_runner is None else int(num_envs_per_env_runner)
    if envs < 1:
        raise ValueError(f"--num-envs-per-env-runner must be >= 1, got {envs}")
    if algo in ("APPO", "IMPALA") and int(num_env_runners) < 1:
        raise ValueError(f"{algo} samples asynchronously: give --num-env-runners >= 1")
    own = algo in Q_ALGOS and not isinstance(config, PPOConfig)
    if not own and not isinstance(config, PPOConfig):
        raise ValueError(f"{algo} runs a PPOConfig, got a {type(config).__name__}")
    workers = getattr(config, "num_env_workers", 0)  # a PPO key ("auto": none here)
    if workers and workers != "auto":
        raise ValueError(
            f"num_env_workers={workers} is the native trainer's; on the RLlib "
            "backend the envs step in RLlib's env runners: give --num-env-runners N instead"
        )
    check_rllib_run(config, algo)  # the refusals the spaces decide, before Ray starts
    setup = multiagent_setup(config)
    model = _model(config, algo)
    sections = q_sections(config, algo, envs) if own else {}
    if own:
        train = sections.pop("training")
    elif isinstance(config, PPOConfig):
        train = _q_training(config, algo) if algo in Q_ALGOS else _ppo_training(config, algo)
        if _frames_once(config, algo):
            train["replay_buffer_config"] = atari_replay_buffer_config(model)
    runners = int(num_env_runners)
    cpus = os.cpu_count() or 1
    per_runner = max(0.25, min(1.0, (cpus - 0.5) / runners)) if runners else 1.0
    if num_cpus_per_env_runner is not None:
        if not float(num_cpus_per_env_runner) > 0:
            raise ValueError(f"num_cpus_per_env_runner must be > 0, got {num_cpus_per_env_runner}")
        per_runner = float(num_cpus_per_env_runner)
    # DQN / SAC: RLlib's iteration with the replay on arrays (RLlib's own where they do not apply)
    algo_class = {"DQN": RLBlocksDQN, "SAC": RLBlocksSAC}.get(algo)
    algo_config = _algorithm_config_class(algo)(algo_class=algo_class)
    # rlblocks' PPO update (closed form for FC models; RLlib's otherwise)
    learner_class = {
        "PPO": RLBlocksPPOTorchLearner,
        "DQN": RLBlocksDQNTorchLearner,
        "SAC": RLBlocksSACTorchLearner,
    }.get(algo)
    learner = {"learner_class": learner_class} if learner_class else {}
    if setup is None:
        algo_config = (
            algo_config.environment(_env_id(config, algo), env_config=dict(config.env_config))
            .rl_module(rl_module_spec=rl_module_spec(model, algo=algo))
            .env_runners(
                env_to_module_connector=run_env_to_module(config, algo),
                env_runner_cls=VectorEnvRunner,
            )
        )
    else:
        algo_config = _multiagent(algo_config, config, algo, setup)
    algo_config = (
        algo_config.env_runners(
            num_env_runners=runners,
            num_envs_per_env_runner=envs,
            num_cpus_per_env_runner=per_runner,
        )
        .resources(num_cpus_for_main_process=0.5 if runners else 1)
        .learners(num_learners=0, **learner)
        .training(**train)
    )
    for section, keys in sections.items():  # DQN / SAC: rollout fragments, iteration size
        algo_config = getattr(algo_config, section)(**keys)
    algo_config = algo_config.reporting(
        metrics_num_episodes_for_smoothing=config.metrics_smoothing_episodes,
        min_time_s_per_iteration=0,
    ).debugging(seed=config.seed)
    if algo in ("APPO", "IMPALA") and isinstance(config, PPOConfig):
        # an asynchronous iteration returns at once, with or without results: it lasts
        # until a train batch was sampled (one progress row, not thousands of empty ones)
        algo_config = algo_config.reporting(
            min_sample_timesteps_per_iteration=config.train_batch_size
        ).training(timeout_s_sampler_manager=SAMPLER_WAIT_S)
    return _apply_sections(algo_config, config.rllib)
