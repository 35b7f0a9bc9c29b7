"""``DQNConfig``, ``SACConfig``, ``TD3Config`` and ``DDPGConfig``: the settings of the native
off-policy trainers.

All four share :class:`~rlblocks.train.trainer_config.TrainerConfig`'s keys (env, model, vector
env, seeds, checkpoints, evaluation) and :class:`OffPolicyConfig`'s replay and update
schedule; names follow RLlib's where RLlib has one (``train_batch_size`` is the SGD batch
sampled from the replay buffer, as in RLlib's DQN and SAC).

Examples:
    >>> cfg = DQNConfig.from_dict({"env": "CartPole-v1", "n_step": 3, "num_atoms": 51})
    >>> cfg.n_step, cfg.num_atoms, cfg.epsilon_at(0), cfg.epsilon_at(10_000)
    (3, 51, 1.0, 0.05)
    >>> SACConfig(env="Pendulum-v1").critic_lr
    0.0003
    >>> DQNConfig.from_dict({"batch_size": 64})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown DQN config key 'batch_size'; did you mean 'train_batch_size'? ...
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from rlblocks.config import ModelConfig
from rlblocks.config_fields import (
    as_bool,
    as_number,
    as_schedule,
    choice,
    dict_of,
    int_at_least,
    number_in,
    option,
    optional,
)
from rlblocks.train.offpolicy_checks import check_replay_fits
from rlblocks.train.trainer_config import TrainerConfig, piecewise

__all__ = [
    "ActorCriticConfig",
    "DDPGConfig",
    "DQNConfig",
    "OffPolicyConfig",
    "SACConfig",
    "TD3Config",
    "critic_model_config",
]

#: The Q-network's and SAC's defaults where the user's ``model`` says nothing (the
#: Stable-Baselines3 zoo's choice for classic control: ReLU layers, no value branch). DQN's
#: layers start orthogonal (gain sqrt(2)), as PPO's: with RLlib's normc start, DQN on
#: CartPole-v1 (bench_offpolicy.py's settings) missed 150 within 40k steps on 2 of 8 seeds
#: and needed a median of ~20k steps; orthogonal: 1 of 8, median 9k.
DQN_MODEL_DEFAULTS: dict[str, Any] = {
    "fcnet_hiddens": [64, 64],
    "fcnet_activation": "relu",
    "fcnet_weights_initializer": "orthogonal",
    "fcnet_weights_initializer_config": {"gain": math.sqrt(2)},
}
SAC_MODEL_DEFAULTS: dict[str, Any] = {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"}

#: Model keys of a stochastic actor's free log-std, which the critics do not take from
#: ``model`` (a critic outputs one Q-value; its ``q_model`` may set them, and is refused).
ACTOR_ONLY_KEYS = ("free_log_std", "log_std_init")


def critic_model_config(model: Mapping[str, Any], q_model: Mapping[str, Any]) -> ModelConfig:
    """SAC's and TD3's critics' model config: :data:`SAC_MODEL_DEFAULTS`, then ``model``'s
    keys but :data:`ACTOR_ONLY_KEYS`, then ``q_model``'s.

    Examples:
        >>> critic_model_config({"free_log_std": True, "fcnet_hiddens": [8]}, {}).free_log_std
        False
    """
    shared = {k: v for k, v in model.items() if k not in ACTOR_ONLY_KEYS}
    return ModelConfig.from_dict({**SAC_MODEL_DEFAULTS, **shared, **q_model})


#: SAC's gSDE keys (:class:`SACConfig`) and their defaults, which only ``use_sde=True`` may
#: change.
SDE_DEFAULTS: dict[str, Any] = {
    "sde_sample_freq": -1,
    "log_std_init": -3.0,
    "use_expln": False,
    "full_std": True,
}

_OFF_POLICY_OTHER_NAMES = {
    "learning_rate": "lr",
    "batch_size": "train_batch_size",
    "buffer_size": "replay_capacity",
    "capacity": "replay_capacity",
    "num_steps_sampled_before_learning_starts": "learning_starts",
    "target_update_interval": "target_network_update_freq",
    "max_grad_norm": "grad_clip",
    "n_envs": "num_envs",
    "n_steps": "n_step",
    "eval_freq": "evaluation_interval",
    "n_eval_episodes": "evaluation_episodes",
}


def _auto_or_bool(value: Any, name: str) -> bool | str:
    """``her``, ``parallel_critics``: ``"auto"``, True or False (``"true"`` / ``"false"``
    spelt as strings too)."""
    if isinstance(value, str) and value.lower() in ("auto", "true", "false"):
        v = value.lower()
        return v if v == "auto" else v == "true"
    if isinstance(value, bool):
        return value
    raise ValueError(f"{name} must be 'auto', True or False, got {value!r}")


def _goal_reward(value: Any, name: str) -> Any:
    """``goal_reward``: None, a callable, or ``"module:function"``."""
    if value is None or callable(value):
        return value
    if isinstance(value, str) and value.count(":") == 1 and all(value.split(":")):
        return value
    raise ValueError(
        f"{name} must be None, a callable or 'module:function' (a batched "
        f"reward(achieved_goal, desired_goal, info)), got {value!r}"
    )


def _target_entropy(value: Any, name: str) -> float | str:
    return value if value == "auto" else as_number(value, name)


@dataclass
class OffPolicyConfig(TrainerConfig):
    """Replay and update schedule shared by DQN and SAC."""

    num_envs: int = 1
    """Environments stepped together (each env step of each env is one stored step)."""
    train_batch_size: int = option(32, int_at_least(1))
    """Transitions per gradient step, sampled from the replay buffer."""
    replay_capacity: int = option(100_000, int_at_least(1))
    """Steps the replay buffer holds (preallocated; the oldest are overwritten)."""
    learning_starts: int = option(1000, int_at_least(0))
    """Env steps (all envs together) collected before the first gradient step."""
    train_freq: int = option(4, int_at_least(1))
    """Env steps (all envs together) between rounds of gradient steps."""
    gradient_steps: int = option(1, int_at_least(1))
    """Gradient steps per round."""
    target_network_update_freq: int = option(500, int_at_least(1))
    """Env steps between target-network updates (each a Polyak step with ``tau``)."""
    tau: float = option(1.0, number_in(0.0, 1.0, low_open=True))
    """Polyak coefficient of a target update (1: copy the online network)."""
    n_step: int = option(1, int_at_least(1))
    """n-step returns (computed by the replay buffer at sample time)."""
    prioritized_replay: bool = option(False, as_bool)
    """Proportional prioritized replay (a sum tree) with importance weights."""
    prioritized_replay_alpha: float = option(0.6, number_in(0.0))
    """How strongly priorities shape sampling (0: uniform)."""
    prioritized_replay_beta: float = option(0.4, number_in(0.0))
    """Importance-weight exponent at the start; annealed linearly to
    ``final_prioritized_replay_beta`` over ``prioritized_replay_beta_annealing_timesteps``."""
    final_prioritized_replay_beta: float = option(1.0, number_in(0.0))
    """Importance-weight exponent at the end of the annealing."""
    prioritized_replay_beta_annealing_timesteps: int = option(100_000, int_at_least(0))
    """Env steps over which beta is annealed."""
    timesteps_per_iteration: int = option(1000, int_at_least(1))
    """Env steps per training iteration (one ``progress.csv`` row)."""
    checkpoint_replay: bool = option(False, as_bool)
    """Store the replay buffer in checkpoints (large; resuming without it refills it)."""
    her: bool | str = option("auto", _auto_or_bool)
    """Hindsight experience replay (docs/goals.md): ``"auto"`` turns it on when the
    observation is a goal Dict (``observation``, ``achieved_goal``, ``desired_goal``) and a
    reward function exists (the env's ``compute_reward`` or ``goal_reward``); the run's
    config.json holds the choice (True / False). True on another env is refused."""
    her_strategy: str = option("future", choice("future", "final", "episode"))
    """Which step's achieved goal relabels a sampled step: ``"future"`` (a later step of its
    episode, or itself), ``"final"`` (the episode's last) or ``"episode"`` (any)."""
    her_n_sampled_goal: int = option(4, int_at_least(1))
    """k: a batch's first ``B * k // (k + 1)`` transitions get a hindsight goal."""
    goal_reward: Any = option(None, _goal_reward)
    """The batched reward of relabelled goals, ``f(achieved_goal, desired_goal, info)``
    (a callable or ``"module:function"``); None: the env's ``compute_reward``."""

    ALGORITHM: ClassVar[str] = "off-policy"
    OTHER_NAMES: ClassVar[Mapping[str, str]] = _OFF_POLICY_OTHER_NAMES

    def beta_at(self, timestep: int) -> float:
        """The prioritized-replay importance exponent at ``timestep``."""
        return piecewise(
            [
                [0, self.prioritized_replay_beta],
                [
                    max(1, self.prioritized_replay_beta_annealing_timesteps),
                    self.final_prioritized_replay_beta,
                ],
            ],
            timestep,
        )

    def _validate_algorithm(self) -> None:
        if self.replay_capacity < self.num_envs:
            raise ValueError(
                f"replay_capacity ({self.replay_capacity}) must be at least num_envs "
                f"({self.num_envs})"
            )
        # a buffer that never holds a batch never trains (frame stacks: checked at build)
        check_replay_fits(self.train_batch_size, self.replay_capacity, self.num_envs)
        if self.observation_filter != "NoFilter":
            raise ValueError(
                f"observation_filter={self.observation_filter!r}: the off-policy trainers store "
                "observations as the env gives them; use observation_filter='NoFilter'"
            )


@dataclass
class DQNConfig(OffPolicyConfig):
    """Settings of a DQN run: dueling double Q-learning, optionally n-step, prioritized and
    distributional (C51); defaults are RLlib's DQN defaults on a Stable-Baselines3-sized
    network (``fcnet_hiddens=[64, 64]``, ReLU)."""

    lr: float = 5e-4
    """Adam learning rate (used when ``lr_schedule`` is None)."""
    grad_clip: float | None = 10.0
    """Max global gradient norm; None disables clipping."""
    double_q: bool = option(True, as_bool)
    """Double Q-learning: the online network picks the bootstrap action, the target rates it."""
    dueling: bool = option(True, as_bool)
    """A dueling head ``V + A - mean(A)``; False: plain Q-values."""
    num_atoms: int = option(1, int_at_least(1))
    """Distributional Q-learning (C51) with this many atoms on ``[v_min, v_max]``; 1: off."""
    v_min: float = option(-10.0, number_in())
    """The lowest atom of the return distribution (``num_atoms > 1``)."""
    v_max: float = option(10.0, number_in())
    """The highest atom of the return distribution (``num_atoms > 1``)."""
    td_error_loss_fn: str = option("huber", choice("huber", "mse"))
    """``"huber"`` or ``"mse"`` (expected Q-learning only; C51 minimises cross-entropy)."""
    epsilon: list[list[float]] = option([[0, 1.0], [10_000, 0.05]], as_schedule)
    """``[[timestep, epsilon], ...]``: the epsilon-greedy schedule (linear between points)."""
    random_steps: int | None = option(None, optional(int_at_least(0)))
    """Env steps (all envs together) that act uniformly at random over the legal actions
    (epsilon 1) before the schedule applies; None: ``learning_starts``, as Stable-Baselines3
    warms up. On CartPole-v1 (bench_offpolicy.py's settings, 80 seeds each) 150 was reached
    within 10k steps by 66% of runs with the warm-up and 51% without."""

    ALGORITHM: ClassVar[str] = "DQN"
    MODEL_DEFAULTS: ClassVar[Mapping[str, Any]] = DQN_MODEL_DEFAULTS

    def epsilon_at(self, timestep: int) -> float:
        """Epsilon at ``timestep``: 1 during the random warm-up (``random_steps``), then the
        schedule's.

        Examples:
            >>> cfg = DQNConfig(learning_starts=500, epsilon=[[0, 0.5]])
            >>> cfg.epsilon_at(499), cfg.epsilon_at(500)
            (1.0, 0.5)
        """
        warmup = self.learning_starts if self.random_steps is None else self.random_steps
        return 1.0 if timestep < warmup else piecewise(self.epsilon, timestep)

    def _validate_algorithm(self) -> None:
        super()._validate_algorithm()
        if self.num_atoms > 1 and not self.v_min < self.v_max:
            raise ValueError(f"v_min ({self.v_min}) must be below v_max ({self.v_max})")
        if not all(0.0 <= v <= 1.0 for _, v in self.epsilon):
            raise ValueError(f"epsilon values must lie in [0, 1], got {self.epsilon}")


@dataclass
class ActorCriticConfig(OffPolicyConfig):
    """What SAC and TD3 / DDPG share: an actor and one or two critics, each with its own
    learning rate or all on one ``lr_schedule`` (read at the start of each iteration, as the
    other trainers read it), Polyak targets moved every step, and the layers' start.
    Defaults are Stable-Baselines3's."""

    train_batch_size: int = 256
    """Transitions per gradient step, sampled from the replay buffer."""
    learning_starts: int = 100
    """Env steps (all envs together) collected before the first gradient step."""
    train_freq: int = 1
    """Env steps (all envs together) between rounds of gradient steps."""
    target_network_update_freq: int = 1
    """Env steps between target updates (each a Polyak step with ``tau``)."""
    tau: float = 0.005
    """Polyak coefficient of a target update."""
    q_model: dict[str, Any] = option({}, dict_of("q_model must be a dict of model config keys"))
    """The critics' own model keys, over ``model``'s (which the critics share otherwise)."""
    actor_lr: float | None = option(None, optional(number_in(0.0, low_open=True)))
    """The actor's learning rate (None: ``lr``)."""
    critic_lr: float | None = option(None, optional(number_in(0.0, low_open=True)))
    """The critics' learning rate (None: ``lr``)."""
    twin_q: bool = option(True, as_bool)
    """Two critics, the smaller target estimate bootstrapped (clipped double Q)."""
    network_init: str = option("rllib", choice("rllib", "torch"))
    """How the actor's and critics' layers start: ``"rllib"``, the catalog's (RLlib's
    normc(1.0) hidden layers with zero biases, or the model's ``fcnet_*_initializer`` keys,
    and normc(0.01) output layers); ``"torch"``, every linear and convolution layer
    restarted with torch's own default (``reset_parameters``: weights and biases uniform
    within ``1/sqrt(fan_in)``), as Stable-Baselines3's networks start (native trainer only;
    an initializer key in ``model`` / ``q_model`` is then refused)."""

    parallel_critics: bool | str = option("auto", _auto_or_bool)
    """Run the twin critics' passes of the closed-form update side by side, the second on a
    side thread (:mod:`rlblocks.train.fast.side_thread`; the same numbers, about 0.75x-0.8x
    the update's wall time at ``[400, 300]`` nets on two cores, one more busy core): ``"auto"``
    where two CPUs are free and each critic's forward pass over a batch is at least 2 M
    multiply-adds; True / False always / never (native trainer only)."""

    MODEL_DEFAULTS: ClassVar[Mapping[str, Any]] = SAC_MODEL_DEFAULTS
    #: The learning rates that default to ``lr`` (set at validation) and follow
    #: ``lr_schedule`` where one is set (any other value is then refused).
    LR_KEYS: ClassVar[tuple[str, ...]] = ("actor_lr", "critic_lr")
    #: The learning rates whose 0 means "fixed", which a schedule leaves at 0.
    FIXED_AT_0: ClassVar[tuple[str, ...]] = ()

    def q_model_config(self) -> ModelConfig:
        """The critics' validated model config (:func:`critic_model_config`)."""
        return critic_model_config(self.model, self.q_model)

    def _validate_algorithm(self) -> None:
        super()._validate_algorithm()
        self.q_model_config()
        if self.lr_schedule is not None:
            for key in self.LR_KEYS:
                value = getattr(self, key)
                if value not in (None, self.lr) and not (key in self.FIXED_AT_0 and value == 0):
                    raise ValueError(
                        f"{key}={value!r} with lr_schedule: the schedule moves every learning "
                        f"rate of {self.ALGORITHM} ({' / '.join(self.LR_KEYS)}) together, as "
                        "Stable-Baselines3's does, so this one would be overridden; unset it, "
                        "or drop lr_schedule"
                    )
        for key in self.LR_KEYS:
            if getattr(self, key) is None:
                setattr(self, key, self.lr)
        if self.parallel_critics is True and not self.twin_q:
            raise ValueError(
                "parallel_critics=True pairs the twin critics' passes, and twin_q=False "
                "leaves one critic: unset parallel_critics or set twin_q=True"
            )
        if self.network_init == "torch":
            for what, keys in (("model", self.model), ("q_model", self.q_model)):
                set_keys = sorted(k for k, v in keys.items() if k.endswith("_initializer") and v)
                if set_keys:
                    raise ValueError(
                        f"network_init='torch' restarts every layer with torch's default, so "
                        f"{what}[{set_keys[0]!r}] = {keys[set_keys[0]]!r} would be "
                        "overwritten: unset it, or use network_init='rllib'"
                    )


@dataclass
class SACConfig(ActorCriticConfig):
    """Settings of a SAC run (twin critics, automatic entropy tuning; Box or Discrete
    actions); defaults are Stable-Baselines3's SAC defaults."""

    lr: float = 3e-4
    """Learning rate of the actor, the critics and alpha unless set apart below."""
    alpha_lr: float | None = option(None, optional(number_in(0.0)))
    """The entropy coefficient's learning rate (None: ``lr``; 0: the coefficient stays
    ``initial_alpha``, Stable-Baselines3's fixed ``ent_coef``)."""
    initial_alpha: float = option(1.0, number_in(0.0, low_open=True))
    """The entropy coefficient at the start."""
    target_entropy: float | str = option("auto", _target_entropy)
    """The entropy the coefficient steers to; ``"auto"``: ``-dim(A)`` for Box actions,
    ``0.98 * log(n)`` for ``Discrete(n)``."""
    use_sde: bool = option(False, as_bool)
    """Generalized state-dependent exploration (gSDE, Raffin et al. 2021; Box actions, the
    default fully connected actor): the exploration noise is ``phi(s) @ W``, ``phi(s)``
    the actor's last hidden features (no gradient through them), ``W ~ N(0, sigma^2)``
    one matrix per env, resampled per ``sde_sample_freq``; ``sigma`` is learnt. The
    deterministic action (evaluation, export) is the squashed mean as without it."""
    sde_sample_freq: int = option(-1, int_at_least(-1))
    """gSDE: env steps of each env between draws of ``W`` (-1: a new ``W`` at the start of
    each collection round of ``train_freq`` steps only, as Stable-Baselines3's -1)."""
    log_std_init: float = option(-3.0, number_in(-20.0, 2.0))
    """gSDE: the initial log of ``sigma`` (a SAC key, not a model key)."""
    use_expln: bool = option(False, as_bool)
    """gSDE: ``sigma = expln(log_std)`` (``exp`` below 0, ``log1p(x) + 1`` above; keeps
    ``sigma`` from growing fast) instead of ``exp(log_std)``."""
    full_std: bool = option(True, as_bool)
    """gSDE: one ``sigma`` per (feature, action) pair (False: one per feature)."""

    ALGORITHM: ClassVar[str] = "SAC"
    LR_KEYS: ClassVar[tuple[str, ...]] = ("actor_lr", "critic_lr", "alpha_lr")
    FIXED_AT_0: ClassVar[tuple[str, ...]] = ("alpha_lr",)

    def _validate_algorithm(self) -> None:
        super()._validate_algorithm()
        if self.sde_sample_freq == 0:
            raise ValueError(
                "sde_sample_freq must be -1 (a new gSDE matrix per collection round) or >= 1 "
                "(every that many steps), got 0"
            )
        if not self.use_sde:
            for name, default in SDE_DEFAULTS.items():
                if getattr(self, name) != default:
                    raise ValueError(
                        f"{name}={getattr(self, name)!r} is a gSDE setting: it needs "
                        f"use_sde=True (or leave it at {default!r})"
                    )


@dataclass
class TD3Config(ActorCriticConfig):
    """Settings of a TD3 run (Fujimoto et al. 2018, "Addressing Function Approximation
    Error in Actor-Critic Methods"; Box actions only); defaults are Stable-Baselines3's TD3
    defaults, which follow the paper: twin critics whose smaller target is bootstrapped
    (clipped double Q), target actions smoothed by clipped Gaussian noise (0.2, clipped at
    0.5), the actor and the targets updated every second critic step, Gaussian exploration
    noise of 0.1. The targets move with each delayed actor step, so
    ``target_network_update_freq`` stays 1. Noise scales are in the normalised action
    ``[-1, 1]`` (fractions of half the Box's range)."""

    lr: float = 1e-3
    """Learning rate of the actor and the critics unless set apart below."""
    learning_starts: int = 100
    """Env steps (all envs together) acting uniformly at random in the Box, collected before
    the first gradient step."""
    target_network_update_freq: int = 1
    """Must be 1: the targets move with the delayed actor steps (``policy_delay``)."""
    policy_delay: int = option(2, int_at_least(1))
    """Critic steps per actor step (and per target update)."""
    target_noise: float = option(0.2, number_in(0.0))
    """Standard deviation of the Gaussian noise on the target action (0: no smoothing)."""
    target_noise_clip: float = option(0.5, number_in(0.0))
    """The target action noise is clipped to ``[-target_noise_clip, target_noise_clip]``."""
    exploration_noise: str = option("gaussian", choice("gaussian", "ornstein_uhlenbeck"))
    """The acting noise: ``"gaussian"`` or ``"ornstein_uhlenbeck"`` (one process per env,
    not reset at episode ends)."""
    exploration_sigma: float = option(0.1, number_in(0.0))
    """The exploration noise's standard deviation (Gaussian) or diffusion scale (OU)."""
    ou_theta: float = option(0.15, number_in(0.0))
    """The Ornstein-Uhlenbeck process's mean-reversion rate."""
    ou_dt: float = option(0.01, number_in(0.0, low_open=True))
    """The Ornstein-Uhlenbeck process's time step."""
    warmup_noise: bool = option(False, as_bool)
    """Add the exploration noise to the uniform random actions before ``learning_starts``
    too (then clip to the Box), as Stable-Baselines3 does; False: plain uniform actions, as
    the TD3 paper's code."""

    ALGORITHM: ClassVar[str] = "TD3"

    def _validate_algorithm(self) -> None:
        super()._validate_algorithm()
        name = self.ALGORITHM
        if self.target_network_update_freq != 1:
            raise ValueError(
                f"target_network_update_freq={self.target_network_update_freq}: {name} moves "
                "its targets with each delayed actor step (policy_delay); leave it at 1"
            )
        if self.prioritized_replay:
            raise ValueError(
                f"prioritized_replay=True: {name} samples its replay uniformly; leave it False"
            )


@dataclass
class DDPGConfig(TD3Config):
    """Settings of a DDPG run: TD3 with its three additions taken out, as in
    Stable-Baselines3 and the TD3 paper's "our DDPG" baseline: one critic
    (``twin_q=False``), no target policy smoothing (``target_noise=0``), the actor and the
    targets updated with every critic step (``policy_delay=1``). What stays from TD3:
    the tanh-bounded actor, Gaussian exploration noise of 0.1 (``exploration_noise=
    "ornstein_uhlenbeck"`` for the original DDPG paper's), Polyak targets with
    ``tau=0.005``, Adam at 1e-3 and [256, 256] ReLU networks, no batch normalisation."""

    twin_q: bool = False
    """Two critics, the smaller target estimate bootstrapped (clipped double Q)."""
    policy_delay: int = 1
    """Critic steps per actor step (and per target update)."""
    target_noise: float = 0.0
    """Standard deviation of the Gaussian noise on the target action (0: no smoothing)."""

    ALGORITHM: ClassVar[str] = "DDPG"
