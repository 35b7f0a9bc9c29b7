"""``PPOConfig``: every PPO setting in one typed dataclass, built from RLlib-style keys.

The config is validated once, when it is built (``PPOConfig(...)`` or
:meth:`PPOConfig.from_dict`); the trainer then reads typed attributes only. Keys follow
RLlib's PPO names (``lambda`` is spelled ``lambda_`` as an attribute, since ``lambda`` is a
Python keyword; ``from_dict`` and ``to_dict`` use ``lambda``).

Examples:
    >>> cfg = PPOConfig.from_dict({"env": "CartPole-v1", "lr": 1e-3, "lambda": 0.9})
    >>> cfg.lr, cfg.lambda_, cfg.rollout_fragment_length
    (0.001, 0.9, 256)
    >>> PPOConfig.from_dict({"env": "CartPole-v1", "learning_rate": 1e-3})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown PPO config key 'learning_rate'; did you mean ...
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from rlblocks.config import ModelConfig, config_mapping
from rlblocks.config_fields import (
    as_bool,
    as_int,
    as_schedule,
    choice,
    config_keys,
    dict_of,
    int_at_least,
    number_in,
    option,
    optional,
    run_checks,
    unknown_key_message,
)

__all__ = ["PPOConfig", "TrainerConfig", "lr_at", "piecewise"]

#: The model config the trainer uses unless the user's ``model`` dict says otherwise
#: (CleanRL's / the SB3 zoo's choice for classic control: two tanh layers of 64 with
#: orthogonal weights of gain sqrt(2), separate policy and value networks: every default
#: model, ComplexInputNetwork, vision and recurrent wrappers included, then gives the value
#: function its own layers, as ``rlblocks.config.SEPARATE_VALUE_ALGOS`` asks for PPO, APPO and
#: IMPALA; difference 25). Keys the user gives replace these one by one; a user's
#: ``fcnet_weights_initializer`` also drops the default's ``_config``.
PPO_MODEL_DEFAULTS: dict[str, Any] = {
    "fcnet_hiddens": [64, 64],
    "fcnet_activation": "tanh",
    "fcnet_weights_initializer": "orthogonal",
    "fcnet_weights_initializer_config": {"gain": math.sqrt(2)},
    "vf_share_layers": False,
}

_VECTOR_MODES = ("sync", "async", "native", "ray")
_PREPROCESSOR_PREFS = ("deepmind", "rllib", None)
_FILTERS = ("NoFilter", "MeanStdFilter")
_DEVICES = ("cpu", "cuda", "auto")


# Names other libraries (SB3, CleanRL, RLlib's new stack) use -> our key, for suggestions.
#: The gSDE keys (SAC's, Stable-Baselines3's names), refused by name elsewhere.
SDE_KEYS = (
    "use_sde",
    "sde_sample_freq",
    "log_std_init",
    "use_expln",
    "full_std",
    "use_sde_at_warmup",
)

_PPO_OTHER_NAMES = {
    "learning_rate": "lr",
    "gae_lambda": "lambda",
    "minibatch_size": "sgd_minibatch_size",
    "batch_size": "sgd_minibatch_size",
    "n_epochs": "num_sgd_iter",
    "num_epochs": "num_sgd_iter",
    "update_epochs": "num_sgd_iter",
    "ent_coef": "entropy_coeff",
    "vf_coef": "vf_loss_coeff",
    "max_grad_norm": "grad_clip",
    "clip_range": "clip_param",
    "clip_coef": "clip_param",
    "n_envs": "num_envs",
    "num_envs_per_worker": "num_envs",
    "norm_adv": "normalize_advantages",
    "n_steps": "rollout_fragment_length",
    "norm_reward": "normalize_reward",
    "clip_obs": "observation_clip",
    "eval_freq": "evaluation_interval",
    "n_eval_episodes": "evaluation_episodes",
}


#: The RLlib ``AlgorithmConfig`` methods a config's ``rllib`` block may call.
RLLIB_SECTIONS = ("training", "env_runners", "learners", "reporting")


def _rllib_sections(value: Any, name: str = "rllib") -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping):
        raise ValueError(
            f"rllib must be a dict of RLlib config sections {RLLIB_SECTIONS}, got {value!r}"
        )
    out = {}
    for section, keys in value.items():
        if section not in RLLIB_SECTIONS:
            raise ValueError(
                f"rllib.{section}: not an RLlib config section this backend sets; "
                f"use one of {RLLIB_SECTIONS}"
            )
        if not isinstance(keys, Mapping) or not all(isinstance(k, str) for k in keys):
            raise ValueError(f"rllib.{section} must be a dict of RLlib keys, got {keys!r}")
        out[section] = dict(keys)
    return out


def _env(value: Any, name: str) -> Any:
    if value is not None and not (isinstance(value, str) or callable(value)):
        raise ValueError(
            f"{name} must be a gymnasium id (str) or a callable env_creator(env_config), "
            f"got {value!r}"
        )
    return value


def _torch(value: Any, name: str) -> str:
    if value != "torch":
        raise ValueError(f"{name} must be 'torch' (rlblocks is torch-only), got {value!r}")
    return value


def _lr_schedule(value: Any, name: str) -> list[list[float]]:
    schedule = as_schedule(value, name)
    if not any(v for _, v in schedule):
        raise ValueError(
            f"{name}={schedule}: every learning rate in it is 0, so the run would never "
            "learn; e.g. lr_schedule=[[0, 0.0003], [1000000, 0.0]]"
        )
    return schedule


@dataclass
class TrainerConfig:
    """What every trainer's config shares: the env, the model, the vector env, the optimizer's
    learning rate and discount, filters, seeds, devices, checkpoints, evaluation (RLlib's key
    names). :class:`PPOConfig`, :class:`~rlblocks.train.offpolicy_config.DQNConfig` and
    :class:`~rlblocks.train.offpolicy_config.SACConfig` add their algorithm's keys.
    """

    env: str | Callable[[dict[str, Any]], Any] | None = option(None, _env)
    """A gymnasium id (``"CartPole-v1"``) or ``env_creator(env_config) -> gym.Env``."""
    env_config: dict[str, Any] = option({}, dict_of("env_config must be a dict"))
    """Keyword arguments for ``gym.make`` (an id) or the argument of ``env_creator``."""
    model: dict[str, Any] = option({}, dict_of("model must be a dict of model config keys"))
    """RLlib model config (``fcnet_hiddens``, ``use_lstm``, ...); validated by
    :class:`rlblocks.config.ModelConfig`. Missing keys take the algorithm's model defaults
    (:attr:`MODEL_DEFAULTS`), then RLlib's ``MODEL_DEFAULTS``."""
    num_envs: int = option(8, int_at_least(1))
    """Environments stepped together (one gymnasium vector env)."""
    vector_mode: str = option("sync", choice(*_VECTOR_MODES))
    """``"sync"`` (all envs in this process), ``"async"`` (one subprocess per env) or
    ``"native"``: the env's own vector implementation (``gym.make_vec(id,
    vectorization_mode="vector_entry_point")``, e.g. CartPole's numpy one; Atari ids with
    ``preprocessor_pref="deepmind"``: :class:`~rlblocks.wrappers.atari_vector.AtariVectorEnv`),
    or for a callable ``env``, ``env({**env_config, "num_envs": num_envs})`` returning a
    gymnasium ``VectorEnv`` (e.g. :func:`rlblocks.wrappers.vector.make_vector_env`);
    ``"ray"`` (the ``ray`` extra): the envs in Ray actors, a chunk per actor
    (:class:`rlblocks.wrappers.ray_vector.RayVectorEnv`; same seeds, same trajectories as
    ``"sync"``). Same-step and next-step autoreset both work."""
    preprocessor_pref: str | None = option("deepmind", choice(*_PREPROCESSOR_PREFS))
    """Atari ids (``ALE/...``): ``"deepmind"`` (RLlib's default) runs
    :func:`rlblocks.wrappers.atari.wrap_deepmind`'s pipeline with the model config's ``dim``
    and ``framestack``, warping and stacking every env's frame in one batched call
    (``vector_mode="native"``: in :class:`~rlblocks.wrappers.atari_vector.AtariVectorEnv`);
    ``"rllib"`` or None give the model the raw frames (RLlib's GenericPixelPreprocessor
    then applies)."""
    lr: float = option(3e-4, number_in(0.0, low_open=True))
    """Adam learning rate (used when ``lr_schedule`` is None)."""
    lr_schedule: list[list[float]] | None = option(None, optional(_lr_schedule))
    """``[[timestep, lr], ...]``: piecewise-linear learning rate over timesteps (RLlib
    form); constant after the last point."""
    gamma: float = option(0.99, number_in(0.0, 1.0))
    """Discount factor."""
    grad_clip: float | None = option(None, optional(number_in(0.0, low_open=True)))
    """Max global gradient norm; None disables clipping."""
    observation_filter: str = option("NoFilter", choice(*_FILTERS))
    """``"NoFilter"`` or ``"MeanStdFilter"`` (running mean/std, saved with checkpoints)."""
    clip_actions: bool = option(True, as_bool)
    """Clip sampled Box actions to the space's bounds before ``env.step``."""
    seed: int | None = option(0, optional(int_at_least(0, 2**63 - 1)))
    """Seeds torch, numpy and the environments; None draws a random seed."""
    device: str = option("cpu", choice(*_DEVICES))
    """Torch device: ``"cpu"``, ``"cuda"`` or ``"auto"``."""
    num_threads: int | None = option(1, optional(int_at_least(1)))
    """``torch.set_num_threads`` and numpy's BLAS threads for the run
    (:mod:`rlblocks.train.process_threads`): 1 is fastest for small MLP/LSTM models on CPU
    (thread hand-offs cost more than the maths); raise it for conv nets. None leaves
    both as they are. On the RLlib backend it sets the driver's threads (its local learner
    and env runner); Ray gives its workers one thread per CPU they hold."""
    flush_denormals: bool = option(True, as_bool)
    """Flush float32 denormals to zero during each ``train()`` call, on the calling thread
    (its previous setting restored after): near-zero optimizer moments otherwise slow the
    CPU maths several-fold (:mod:`rlblocks.train.denormals`). On the RLlib backend it
    covers the driver (its local learner and env runner)."""
    checkpoint_freq: int = option(10, int_at_least(0))
    """Write a checkpoint every this many iterations during ``fit`` (0: only at the end)."""
    keep_checkpoints: int = option(3, int_at_least(0))
    """How many recent checkpoints a run directory keeps (0 keeps all)."""
    tensorboard: bool = option(False, as_bool)
    """Also write TensorBoard event files (needs the ``tensorboard`` package)."""
    metrics_smoothing_episodes: int = option(100, int_at_least(1))
    """``episode_return_mean`` averages the returns of this many most recent episodes."""
    evaluation_interval: int = option(0, int_at_least(0))
    """Evaluate every this many iterations (0: never): ``evaluation_episodes`` episodes with
    the deterministic (greedy) action on an env of its own, reported as ``evaluation/...``
    metrics (``progress.csv`` columns; NaN in the other iterations). The run directory's
    ``best/`` checkpoint then follows the evaluation return (else the training return)."""
    evaluation_episodes: int = option(10, int_at_least(1))
    """Episodes per evaluation (``evaluation_interval``)."""
    framework: str = option("torch", _torch)
    """Accepted for RLlib compatibility; only ``"torch"``."""
    rllib: dict[str, dict[str, Any]] = option({}, _rllib_sections)
    """``--backend rllib`` only: RLlib ``AlgorithmConfig`` sections applied last, as
    ``{section: {key: value}}`` for ``training``, ``env_runners``, ``learners``,
    ``reporting`` (e.g. DQN's ``{"training": {"n_step": 3, "target_network_update_freq":
    500}}``); the native trainer refuses a non-empty block."""

    #: The algorithm's name (messages, run directories) and its model defaults.
    ALGORITHM: ClassVar[str] = "trainer"
    MODEL_DEFAULTS: ClassVar[Mapping[str, Any]] = {}
    #: Other libraries' names for keys (SB3, CleanRL, RLlib's new stack) -> ours, for hints.
    OTHER_NAMES: ClassVar[Mapping[str, str]] = {}

    def __post_init__(self) -> None:
        self._validate()
        self._validate_algorithm()

    # --- building ------------------------------------------------------------------------
    @classmethod
    def from_dict(cls: type[C], config: Mapping[str, Any] | C | None) -> C:
        """Builds a config from an RLlib-style dict (PPO's ``lambda``, not ``lambda_``).

        Raises:
            ValueError: An unknown key (the message suggests close keys) or a bad value.
        """
        if isinstance(config, cls):
            return config
        config = config_mapping(config, f"{cls.ALGORITHM} config")
        kwargs: dict[str, Any] = {}
        known = config_keys(cls)
        for key, value in config.items():
            if key == "use_sde_at_warmup" and "use_sde" in known:
                raise ValueError(
                    "use_sde_at_warmup: rlblocks' SAC has no uniform-random warmup; it acts "
                    "with its policy (gSDE's noise under use_sde) from the first step, as "
                    "Stable-Baselines3's use_sde_at_warmup=True: drop the key"
                )
            if key not in known and key in SDE_KEYS:
                raise ValueError(
                    f"{key}: gSDE (state-dependent exploration) is implemented for SAC only; "
                    f"{cls.ALGORITHM} explores without it: drop {key} or train SAC"
                )
            if key not in known:
                raise ValueError(
                    unknown_key_message(
                        key, known, f"{cls.ALGORITHM} config", aliases=cls.OTHER_NAMES
                    )
                )
            kwargs[known[key]] = value
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The RLlib-style dict (``lambda`` key); ``from_dict(to_dict())`` round-trips."""
        out: dict[str, Any] = {}
        for key, name in config_keys(type(self)).items():
            value = getattr(self, name)
            out[key] = dict(value) if isinstance(value, dict) else value
        return out

    def replace(self: C, **changes: Any) -> C:
        """A validated copy with some fields changed (RLlib names, ``lambda`` allowed).

        Examples:
            >>> PPOConfig(env="CartPole-v1").replace(num_envs=4).rollout_fragment_length
            512
        """
        merged = self.to_dict()
        merged.update(changes)
        self._follow(merged, changes)
        return type(self).from_dict(merged)

    def _follow(self, merged: dict[str, Any], changes: Mapping[str, Any]) -> None:
        """Keys that follow from ``changes`` in :meth:`replace` (none here)."""

    # --- derived -------------------------------------------------------------------------
    def model_config(self) -> ModelConfig:
        """The validated model config: :attr:`MODEL_DEFAULTS` overridden by ``model``."""
        defaults = dict(self.MODEL_DEFAULTS)
        if "fcnet_weights_initializer" in self.model:
            defaults.pop("fcnet_weights_initializer_config", None)
        return ModelConfig.from_dict({**defaults, **self.model})

    @property
    def env_name(self) -> str:
        """The env id, or the creator's name, for run-directory names and logs."""
        if isinstance(self.env, str):
            return self.env
        return getattr(self.env, "__name__", type(self.env).__name__)

    # --- validation ----------------------------------------------------------------------
    def _validate(self) -> None:
        """Every key's own check (the table's), then the model config's."""
        run_checks(self)
        self.model_config()  # raises on bad model keys or values

    def _validate_algorithm(self) -> None:
        """The algorithm's own keys (after the shared ones)."""


C = TypeVar("C", bound=TrainerConfig)


def _env_workers(value: Any, name: str) -> int | str:
    """``num_env_workers``: an int >= 0 or ``"auto"``."""
    if isinstance(value, str) and value == "auto":
        return "auto"
    try:
        return as_int(value, name, 0)
    except ValueError:
        raise ValueError(f"{name} must be an int >= 0 or 'auto', got {value!r}") from None


@dataclass
class PPOConfig(TrainerConfig):
    """Settings of a PPO run (RLlib's key names; defaults tuned for classic control).

    ``train_batch_size`` environment steps are collected per iteration, ``num_envs`` at a
    time, then ``num_sgd_iter`` epochs of minibatch SGD run over them.
    """

    grad_clip: float | None = 0.5
    """Max global gradient norm; None disables clipping."""
    train_batch_size: int = option(2048, int_at_least(1))
    """Environment steps per training iteration (a multiple of ``num_envs``)."""
    rollout_fragment_length: int | str = "auto"
    """Steps per env per iteration; ``"auto"`` = ``train_batch_size // num_envs``."""
    num_env_workers: int | str = option(0, _env_workers)
    """Multi-agent PPO: step the ``num_envs`` env copies in this many worker processes
    (shared-memory observations and actions, :class:`~rlblocks.multiagent.workers.
    WorkerVectorEnv`; same seeds, same trajectories); 0 steps them in the trainer's process
    (the library's default); ``"auto"`` (``rlblocks train``'s default for multi-agent envs)
    picks from the cores free at the start (:mod:`rlblocks.train.env_workers`). Other
    trainers refuse a value above 0 (``"auto"`` is 0 there)."""
    sgd_minibatch_size: int = option(256, int_at_least(1))
    """Rows per SGD minibatch (recurrent models: about this many rows, whole sequences)."""
    num_sgd_iter: int = option(10, int_at_least(1))
    """Epochs over each training batch."""
    lambda_: float = option(0.95, number_in(0.0, 1.0), key="lambda")
    """GAE lambda (RLlib key ``lambda``)."""
    clip_param: float = option(0.2, number_in(0.0, low_open=True))
    """PPO clip range of the probability ratio."""
    vf_clip_param: float | None = option(10.0, optional(number_in(0.0, low_open=True)))
    """Value clipping: the new value may move at most this far from the rollout's value
    (PPO2 style); None disables it."""
    vf_loss_coeff: float = option(0.5, number_in(0.0))
    """Weight of the value loss."""
    entropy_coeff: float = option(0.0, number_in(0.0))
    """Weight of the entropy bonus."""
    kl_coeff: float = option(0.0, number_in(0.0))
    """Initial coefficient of the KL(old || new) penalty; 0 disables it (RLlib: 0.2)."""
    kl_target: float = option(0.01, number_in(0.0, low_open=True))
    """Adaptive KL: the coefficient grows 1.5x above ``2 * kl_target`` and halves below
    ``kl_target / 2``."""
    target_kl: float | None = option(None, optional(number_in(0.0, low_open=True)))
    """Early stop of the SGD epochs (Stable-Baselines3's rule): once a minibatch's approximate
    KL(old || new) exceeds ``1.5 * target_kl``, that minibatch's step and the remaining epochs
    are skipped (``sgd_epochs`` in the metrics says how many epochs ran); None: off."""
    normalize_reward: bool = option(False, as_bool)
    """Divide rewards by the running std of the discounted return (``gamma``), as
    Stable-Baselines3's ``VecNormalize(norm_reward=True)``; the training loss sees the scaled
    rewards, the episode returns reported stay the env's. The running stats are saved with
    checkpoints."""
    clip_reward: float | None = option(None, optional(number_in(0.0, low_open=True)))
    """Clip each training reward (after ``normalize_reward``) to ``[-clip_reward,
    clip_reward]`` (VecNormalize's ``clip_reward``, 10 there); None: no clipping."""
    observation_clip: float | None = option(None, optional(number_in(0.0, low_open=True)))
    """Clip each filtered observation to ``[-observation_clip, observation_clip]``
    (``observation_filter="MeanStdFilter"`` only; VecNormalize's ``clip_obs``, 10 there, and
    the RLlib backend's connector, 10); None: no clipping (RLlib's native ``MeanStdFilter``)."""
    normalize_advantages: bool = option(True, as_bool)
    """Standardise advantages per minibatch."""
    fast_paths: bool = option(True, as_bool)
    """Use the trainer's fast paths (:mod:`rlblocks.train.fast`: numpy rollout actions,
    closed-form PPO gradients, flat parameter buffers, direct fused-Adam calls) where they
    cover the model; False runs the plain torch path everywhere (same results within
    float tolerance, slower)."""
    multiagent: dict[str, Any] = field(default_factory=dict)
    """Multi-agent envs (a PettingZoo or RLlib multi-agent env; :mod:`rlblocks.multiagent`):
    ``policy_mapping`` (``"shared"``: one model for every agent, even when their spaces
    differ (the default); ``"per_agent"``; ``"by_space"``: one policy per set of agents with
    equal spaces; or ``"module:function"`` mapping an agent id to a policy id),
    ``policies`` (``{policy_id: {"model": {...}}}``: a policy's own model keys over
    ``model``) and ``agent_id_one_hot`` (also show a shared policy the agent's index)."""

    selfplay_snapshot_every: int = option(0, int_at_least(0))
    """Turn-based games (one ``shared`` policy, native trainer): every this many iterations a
    frozen snapshot of the policy joins the opponent pool (:mod:`rlblocks.train.opponents`);
    0: no pool, the policy only plays itself."""
    selfplay_pool_size: int = option(5, int_at_least(1))
    """The opponent pool keeps the newest this many snapshots."""
    selfplay_opponent_prob: float = option(0.5, number_in(0.0, 1.0))
    """Per env copy and game, the probability that a pool snapshot (uniformly drawn) plays
    every seat but the learner's; else the policy plays itself."""
    selfplay_random_prob: float = option(0.0, number_in(0.0, 1.0))
    """Turn-based games with action masks (one ``shared`` policy, native trainer): per env
    copy and game, the probability that a random legal player plays every seat but the
    learner's (its moves are not trained on, the learner's are); drawn before the pool's
    ``selfplay_opponent_prob``."""
    selfplay_random_opening: int = option(0, int_at_least(0))
    """Turn-based games with action masks (one ``shared`` policy, native trainer): each game
    opens with ``k`` random legal moves, ``k`` drawn uniformly from 0 to this, of whichever
    seat is to move (not trained on), so the policy also learns the positions a weak
    opponent leads to; 0: none. ``rlblocks train --env`` alone sets it for such games
    (:data:`rlblocks.cli.train_defaults.TURN_DEFAULTS`)."""
    selfplay_eval_interval: int = option(10, int_at_least(0))
    """Turn-based games (native trainer): every this many iterations, ``selfplay_eval_games``
    games against a random legal player and against the pool, written as
    ``selfplay/win_rate_random`` ... ``selfplay/loss_rate_pool`` (NaN in other
    iterations); 0: never. The games against the random player keep the run directory's
    ``best/`` checkpoint (fewest losses, then most wins:
    :func:`rlblocks.train.selfplay.games_score`), confirmed: a policy that scores better
    than ``best/`` plays as many fresh games (``selfplay/..._rate_confirm``), and their
    score alone replaces ``best/``'s when better."""
    selfplay_eval_exact: bool = option(False, as_bool)
    """Turn-based games with action masks (native trainer): the evaluation against the random
    legal player is exact, not played (:func:`rlblocks.train.exact_games.exact_versus_random`
    from every seat, averaged, in the ``selfplay/..._rate_random`` columns; no confirmation
    games) and ``best/`` keeps the lowest exact loss, then the highest win
    (:func:`rlblocks.train.selfplay.exact_score`). A game that
    :func:`rlblocks.train.exact_games.exact_refusal` refuses is refused at the start.
    ``rlblocks train --env GAME`` alone sets it where that rule admits the game
    (:data:`rlblocks.cli.train_defaults.TURN_DEFAULTS`: tictactoe, not connect_four)."""
    selfplay_eval_games: int = option(20, int_at_least(1))
    """Games per opponent in each self-play evaluation (seats alternate); ``rlblocks train
    --env GAME`` alone sets 500 (:data:`rlblocks.cli.train_defaults.TURN_DEFAULTS`)."""

    ALGORITHM: ClassVar[str] = "PPO"
    MODEL_DEFAULTS: ClassVar[Mapping[str, Any]] = PPO_MODEL_DEFAULTS
    OTHER_NAMES: ClassVar[Mapping[str, str]] = _PPO_OTHER_NAMES

    def _follow(self, merged: dict[str, Any], changes: Mapping[str, Any]) -> None:
        """The fragment length follows a new batch size or env count."""
        if "rollout_fragment_length" not in changes and (
            "train_batch_size" in changes or "num_envs" in changes
        ):
            merged["rollout_fragment_length"] = "auto"

    def _validate_algorithm(self) -> None:
        if self.train_batch_size % self.num_envs:
            raise ValueError(
                f"train_batch_size ({self.train_batch_size}) must be a multiple of num_envs "
                f"({self.num_envs})"
            )
        auto = self.train_batch_size // self.num_envs
        if self.rollout_fragment_length == "auto":
            self.rollout_fragment_length = auto
        else:
            frag = as_int(self.rollout_fragment_length, "rollout_fragment_length", minimum=1)
            if frag != auto:
                raise ValueError(
                    f"rollout_fragment_length ({frag}) must be 'auto' or train_batch_size / "
                    f"num_envs = {auto}"
                )
            self.rollout_fragment_length = frag
        if self.observation_clip is not None and self.observation_filter == "NoFilter":
            raise ValueError(
                f"observation_clip={self.observation_clip} clips the filtered observations, "
                "and observation_filter='NoFilter' filters none: use "
                "observation_filter='MeanStdFilter' (or observation_clip=None)"
            )
        model = self.model_config()
        rows = min(self.sgd_minibatch_size, self.train_batch_size)
        if self.normalize_advantages and rows == 1 and not (model.use_lstm or model.use_attention):
            key = "sgd_minibatch_size" if self.sgd_minibatch_size == 1 else "train_batch_size"
            raise ValueError(
                f"{key}=1 with normalize_advantages=True: a minibatch of one row standardises "
                f"its advantage to 0, so the policy would never learn; use {key}=2 or more "
                "(or normalize_advantages=False)"
            )
        self.multiagent = _multiagent_block(self.multiagent, self.model)


#: The keys of a config's ``multiagent`` block and the built-in policy mappings.
MULTIAGENT_KEYS = ("policy_mapping", "policies", "agent_id_one_hot")
POLICY_MAPPINGS = ("shared", "per_agent", "by_space")


def _multiagent_block(value: Any, model: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"multiagent must be a dict of {MULTIAGENT_KEYS}, got {value!r}")
    unknown = [k for k in value if k not in MULTIAGENT_KEYS]
    if unknown:
        raise ValueError(f"multiagent: unknown key {unknown[0]!r}; known: {MULTIAGENT_KEYS}")
    how = value.get("policy_mapping", "shared")
    if not isinstance(how, str) or (how not in POLICY_MAPPINGS and ":" not in how):
        raise ValueError(
            f"multiagent.policy_mapping must be one of {POLICY_MAPPINGS} or "
            f"'module:function', got {how!r}"
        )
    one_hot = as_bool(value.get("agent_id_one_hot", False), "multiagent.agent_id_one_hot")
    policies = value.get("policies") or {}
    if not isinstance(policies, Mapping):
        raise ValueError(
            f"multiagent.policies must be a dict {{policy_id: {{'model': {{...}}}}}}, got "
            f"{policies!r}"
        )
    checked: dict[str, Any] = {}
    for pid, spec in policies.items():
        spec = {} if spec is None else spec
        if not isinstance(spec, Mapping) or any(k != "model" for k in spec):
            raise ValueError(
                f"multiagent.policies[{pid!r}] must be {{'model': {{...}}}} (a policy's own "
                f"model keys), got {spec!r}"
            )
        own = spec.get("model") or {}
        if not isinstance(own, Mapping):
            raise ValueError(f"multiagent.policies[{pid!r}].model must be a dict, got {own!r}")
        try:
            ModelConfig.from_dict({**PPO_MODEL_DEFAULTS, **model, **own})
        except ValueError as err:
            raise ValueError(f"multiagent.policies[{pid!r}].model: {err}") from None
        checked[str(pid)] = {"model": dict(own)}
    out: dict[str, Any] = {"policy_mapping": how, "agent_id_one_hot": one_hot}
    if checked:
        out["policies"] = checked
    return out if dict(value) else {}


def piecewise(schedule: list[list[float]], t: float) -> float:
    """A ``[[t0, v0], [t1, v1], ...]`` schedule at ``t``: linear between points, constant
    outside them.

    Examples:
        >>> piecewise([[0, 1.0], [100, 0.0]], 25), piecewise([[0, 1.0], [100, 0.0]], 500)
        (0.75, 0.0)
    """
    if t <= schedule[0][0]:
        return float(schedule[0][1])
    for (t0, v0), (t1, v1) in zip(schedule[:-1], schedule[1:], strict=True):
        if t <= t1:
            frac = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
            return float(v0 + frac * (v1 - v0))
    return float(schedule[-1][1])


def lr_at(config: TrainerConfig, timestep: int) -> float:
    """The learning rate at ``timestep``: ``lr_schedule`` interpolated, or ``lr``.

    Examples:
        >>> cfg = PPOConfig(env="CartPole-v1", lr_schedule=[[0, 1e-3], [1000, 0.0]])
        >>> lr_at(cfg, 250), lr_at(cfg, 5000)
        (0.00075, 0.0)
    """
    return piecewise(config.lr_schedule, timestep) if config.lr_schedule else config.lr
