"""Defaults ``rlblocks train --env ID`` decides from the env's spaces (no tuned config, no
config file).

A vector observation (a 1-D ``Box``: the fully connected model, not recurrent) trains PPO
on minibatches of 64 rows (:data:`VECTOR_DEFAULTS`, Stable-Baselines3's default
``batch_size``, which rl-baselines3-zoo keeps for every vector-observation PPO entry but
CartPole's), 4x the SGD steps per iteration of the 256 rows an image or recurrent model
keeps: at the zoo's budgets it lifted CartPole-v1 from 364 to 500 at 100k steps and
Pendulum-v1 from -625 to -151 (3 seeds each, docs/benchmarks.md). Continuous control (a
flat float ``Box`` observation and a ``Box`` action space) also gets observation
normalisation (``observation_filter=MeanStdFilter``) and reward scaling
(``normalize_reward=True``), as rl-baselines3-zoo's ``VecNormalize`` does for those envs;
with an unbounded observation (MuJoCo's locomotion) also a free log-std starting at -2
(:data:`UNBOUNDED_CONTROL_MODEL_DEFAULTS`). A key the user sets (``--set``) is never
changed. The choice is printed at the start and lands in ``config.json`` with the rest of
the config. An env the defaults are known to fall short on (MountainCar's hard exploration,
Swimmer's long horizon) gets a one-line note naming the tuned config to use. A ``Discrete``
action on an image observation (:func:`image_observation`: Atari's frames, MiniGrid's
``Dict``) gets a learning rate falling linearly to 0 at the run's budget
(:func:`annealed_lr`). A multi-agent
env's train batch and minibatch are counted in agent steps
(:mod:`rlblocks.train.agent_batches`), also printed.

A goal env (a goal ``Dict`` observation) whose reward ``her="auto"`` can recompute
(:func:`~rlblocks.train.hindsight.auto_relabels`: the env's ``compute_reward`` or a
``--set goal_reward``) trains, when no ``--algo`` is given, the off-policy algorithm for
its action space with hindsight relabelling (:func:`goal_algo`: SAC for a ``Box`` that
SAC squashes, DQN for ``Discrete``; PPO with :func:`goal_env_note` for any other action
space), said in one line (:func:`goal_algo_line`). The env is made once for this and for
the continuous-control defaults (:func:`probe_env`).

A turn-based game (a PettingZoo ``AECEnv``) whose every agent observes an ``action_mask``
and moves in a ``Discrete`` space, trained by one ``shared`` policy, gets
:data:`TURN_DEFAULTS`: an entropy bonus (``entropy_coeff``), which keeps self-play's own
moves varied, and a random opening (``selfplay_random_opening``: each self-play game opens
with 0 to 6 random legal moves, not trained on), so that the greedy policy has also learnt
the positions a weak opponent leads to and has been punished there by its own play
(measured in docs/multiagent.md, "Self-play": tictactoe's losses to a random legal player
fell from 10 to 1-3 of 500 at 100k steps with the bonus, and to 0-1 with the opening), and
500 greedy games against a random legal player every 10 iterations, which keep the run's
``best/`` checkpoint (the one ``rlblocks evaluate`` and ``export`` load).

Examples:
    >>> import gymnasium as gym
    >>> box = gym.spaces.Box(-1.0, 1.0, (3,))
    >>> continuous_control(box, box), continuous_control(box, gym.spaces.Discrete(2))
    (True, False)
    >>> vector_observation(box), vector_observation(gym.spaces.Box(0, 255, (84, 84, 4)))
    (True, False)
    >>> shortfall_note("MountainCar-v0").split(";")[1]
    ' `rlblocks train --tuned mountaincar_dqn` does'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = [
    "CONTROL_DEFAULTS",
    "DQN_VECTOR_DEFAULTS",
    "EXACT_DEFAULTS",
    "TURN_DEFAULTS",
    "UNBOUNDED_CONTROL_MODEL_DEFAULTS",
    "VECTOR_DEFAULTS",
    "EnvProbe",
    "annealed_lr",
    "continuous_control",
    "dqn_space_defaults",
    "goal_algo",
    "goal_algo_choice",
    "goal_algo_line",
    "goal_env_note",
    "image_observation",
    "multiagent_defaults",
    "probe_env",
    "shortfall_note",
    "space_defaults",
    "turn_based_defaults",
    "unbounded_observation",
    "vector_observation",
]

#: What a vector observation with the fully connected model gets when the user did not set
#: the key: Stable-Baselines3's default minibatch (rl-baselines3-zoo's on every
#: vector-observation PPO entry but CartPole's, whose minibatch is its whole 256-step batch).
VECTOR_DEFAULTS: dict[str, Any] = {"sgd_minibatch_size": 64}

#: What DQN on a vector observation gets when the user did not set the key (besides
#: ``gradient_steps = train_freq``, :func:`dqn_space_defaults`): 3-step returns, Rainbow's
#: multi-step targets.
DQN_VECTOR_DEFAULTS: dict[str, Any] = {"n_step": 3}

#: What continuous control gets when the user set neither key.
CONTROL_DEFAULTS: dict[str, Any] = {"observation_filter": "MeanStdFilter", "normalize_reward": True}

#: The model keys continuous control with unbounded observations (MuJoCo's locomotion: a
#: 1-D Box observation with an infinite bound) gets besides :data:`CONTROL_DEFAULTS`, when
#: the user set none of them and no custom model or distribution: a free (state-independent)
#: log-std starting at -2, a std of 0.14, as rl-baselines3-zoo's tuned HalfCheetah, Hopper
#: and Humanoid PPO entries start. Measured at 1M steps (docs/benchmarks.md): HalfCheetah
#: 6,765 and Hopper 2,979 on seed 0 against 1,759 and 1,129 with the net's own log-std
#: output (std 1 at the start). A bounded observation keeps that output: Pendulum-v1 with
#: these keys stayed near a random policy's return (-1,014 to -1,047 on seeds 0-2, against
#: -151 without them).
UNBOUNDED_CONTROL_MODEL_DEFAULTS: dict[str, Any] = {"free_log_std": True, "log_std_init": -2.0}

#: What a turn-based game with action masks gets, each key the user did not set: an entropy
#: bonus, up to 6 random opening moves per self-play game (three per seat of a two-player
#: game; the same for every game, no game is special-cased) and 500 greedy games against a
#: random legal player every 10 iterations, by which ``best/`` keeps the policy (fewest
#: losses, then most wins). The rule for those two: the games cost about a tenth of the
#: training time (measured: 1.0 s for tictactoe's 500 games, 11 s of training per 10
#: iterations; 2.4 s for connect_four's, 36 s) and are as many as the 500 games the
#: targets of docs/multiagent.md are counted on, so that a lucky few do not pick a policy.
#: A game small enough to be scored exactly gets :data:`EXACT_DEFAULTS` over these.
TURN_DEFAULTS: dict[str, Any] = {
    "entropy_coeff": 0.01,
    "selfplay_random_opening": 6,
    "selfplay_eval_interval": 10,
    "selfplay_eval_games": 500,
}

#: What a turn-based game gets over :data:`TURN_DEFAULTS` where
#: :func:`rlblocks.train.exact_games.exact_refusal` admits it (:func:`turn_based_defaults`),
#: each key the user did not set: the evaluation against the random player is exact (no
#: sample, so no luck picks ``best/``) and, by the same rule of about a tenth of the training
#: time, every 5 iterations (measured under a load of 5: tictactoe's exact evaluation 2-3 s,
#: 5 iterations of training 15-25 s), twice the candidates for ``best/``.
EXACT_DEFAULTS: dict[str, Any] = {"selfplay_eval_exact": True, "selfplay_eval_interval": 5}


@dataclass(frozen=True)
class _Shortfall:
    """What the defaults are known to fall short of on an env, as the start-of-run note says
    it (``{env}``: the run's id; ``{tuned}``: the tuned config of the run's algorithm, from
    ``tuned``, whose ``""`` entry serves any other; an algorithm it does not name, with no
    ``""`` entry, gets no note: the shortfall was measured on the others), and the settings
    that already take the note's advice (``answered(env_config, gamma)``: no note)."""

    note: str
    tuned: Mapping[str, str]
    answered: Callable[[Mapping[str, Any], float | None], bool] = lambda env_config, gamma: False


#: Envs (id prefix) the defaults are known to fall short on (:class:`_Shortfall`).
#: ``mountaincarcontinuous_sac`` explores with gSDE (``use_sde``, as rl-baselines3-zoo's run;
#: without it every seed stood still); Swimmer's PPO defaults reached 37.3 at 1M steps on seed
#: 0, ``swimmer_ppo`` (gamma 0.9999) 152.8 there and 279-286 on seeds 1-2; its SAC defaults
#: 21.4 at 20k steps over 3 seeds, ``swimmer_sac`` (gamma 0.9999) 29.4; Ant's PPO defaults
#: trained 500k steps on seed 0 (the CLI's default budget) ended at a training return of 1,332
#: with the contact forces (evaluated 1,464 +- 905) and 2,637 without them (3,161 +- 38;
#: docs/benchmarks.md).
_SHORTFALLS: dict[str, _Shortfall] = {
    "MountainCar-": _Shortfall(
        "{env} is a hard-exploration env: these defaults will not solve it (the return stays "
        "-200); `rlblocks train --tuned {tuned}` does",
        {"": "mountaincar_dqn"},
    ),
    "MountainCarContinuous-": _Shortfall(
        "{env} is a hard-exploration env: these defaults will not solve it (PPO and SAC here "
        "learn to stand still, a return near 0; the tuned config explores with gSDE, "
        "state-dependent exploration); `rlblocks train --tuned {tuned}` does",
        {"": "mountaincarcontinuous_sac"},
    ),
    "Swimmer-": _Shortfall(
        "{env} is a long-horizon env: its reward comes from a slow gait that these defaults' "
        "gamma 0.99 discounts away (PPO reached about 40 in 1M steps); `rlblocks train "
        "--tuned {tuned}` keeps rl-baselines3-zoo's gamma 0.9999, or `--set gamma=0.9999`",
        {"SAC": "swimmer_sac", "": "swimmer_ppo"},
        lambda env_config, gamma: gamma is not None and gamma >= 0.999,
    ),
    "Ant-v5": _Shortfall(
        "{env}'s observation holds 78 noisy contact forces (include_cfrc_ext_in_observation), "
        "which rl-baselines3-zoo's Ant-v3 read as zeros; with them these defaults' PPO reached "
        "a return of about 1,300 in 500k steps here (the ant flips), without them 2,600: "
        "`rlblocks train --tuned {tuned}` (these defaults without them), or `--set "
        "env_config.include_cfrc_ext_in_observation=false`",
        {"PPO": "ant_ppo"},  # measured with PPO only
        lambda env_config, gamma: env_config.get("include_cfrc_ext_in_observation") is False,
    ),
}


def continuous_control(observation_space: gym.Space, action_space: gym.Space) -> bool:
    """Whether the spaces are continuous control's: a 1-D float ``Box`` observation and a
    ``Box`` action."""
    return (
        isinstance(observation_space, gym.spaces.Box)
        and len(observation_space.shape) == 1
        and np.issubdtype(observation_space.dtype, np.floating)
        and isinstance(action_space, gym.spaces.Box)
    )


def unbounded_observation(observation_space: gym.Space) -> bool:
    """Whether the observation is a ``Box`` with an infinite bound (MuJoCo's locomotion
    envs; the classic-control and Box2D envs bound theirs)."""
    return isinstance(observation_space, gym.spaces.Box) and not (
        np.isfinite(observation_space.low).all() and np.isfinite(observation_space.high).all()
    )


def vector_observation(observation_space: gym.Space) -> bool:
    """Whether the observation is a vector (a 1-D ``Box``), which the default fully connected
    model takes as it is."""
    return isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 1


def image_observation(observation_space: gym.Space) -> bool:
    """Whether the observation is an image or a ``Dict`` / ``Tuple`` holding one (a 3-D
    ``Box``, which the catalog gives a convolutional net).

    Examples:
        >>> grid = gym.spaces.Box(0, 255, (7, 7, 3), np.uint8)
        >>> image_observation(gym.spaces.Dict({"image": grid, "direction": gym.spaces.Discrete(4)}))
        True
        >>> image_observation(gym.spaces.Box(-1.0, 1.0, (4,)))
        False
    """
    from rlblocks.spaces import flatten_space

    return any(
        isinstance(leaf, gym.spaces.Box) and len(leaf.shape) == 3
        for leaf in flatten_space(observation_space)
    )


def shortfall_note(
    env: str,
    env_config: Mapping[str, Any] | None = None,
    algo: str = "PPO",
    gamma: float | None = None,
) -> str | None:
    """The start-of-run note for an env the defaults are known to fall short on, naming the
    tuned config of ``algo`` (None for any other env, or where ``env_config`` and ``gamma``
    already take the note's advice).

    Examples:
        >>> shortfall_note("MountainCarContinuous-v0").split("; `")[1]
        'rlblocks train --tuned mountaincarcontinuous_sac` does'
        >>> shortfall_note("Swimmer-v5", algo="SAC").split("--tuned ")[1].split("`")[0]
        'swimmer_sac'
        >>> shortfall_note("Swimmer-v5", gamma=0.9999) is None
        True
        >>> shortfall_note("CartPole-v1") is None
        True
        >>> shortfall_note("Ant-v5", {"include_cfrc_ext_in_observation": False}) is None
        True
        >>> shortfall_note("Ant-v5", algo="SAC") is None  # measured on PPO only
        True
    """
    for prefix, shortfall in _SHORTFALLS.items():
        if env.startswith(prefix) or env.partition(":")[2].startswith(prefix):
            if shortfall.answered(env_config or {}, gamma):
                return None
            tuned = shortfall.tuned.get(algo, shortfall.tuned.get(""))
            return shortfall.note.format(env=env, tuned=tuned) if tuned else None
    return None


@dataclass(frozen=True)
class EnvProbe:
    """One env of a new run, made once before its config is built: its spaces and whether
    ``her="auto"`` relabels it."""

    observation_space: gym.Space
    action_space: gym.Space
    relabels: bool


def probe_env(data: dict[str, Any]) -> EnvProbe | None:
    """Makes one env of the config keys ``data`` (``env``, ``env_config``; a ``goal_reward``
    the user set counts as the reward function) and reads it; None for an env that fails to
    build or is no gymnasium env (a multi-agent one), which the trainer then reports."""
    from types import SimpleNamespace

    from rlblocks.train.envs import make_env_creator
    from rlblocks.train.hindsight import auto_relabels
    from rlblocks.train.trainer_config import PPOConfig

    try:
        light = PPOConfig.from_dict(
            {"env": data["env"], "env_config": data.get("env_config") or {}}
        )
        env = make_env_creator(light)()
    except Exception:  # the trainer's own start names what is wrong with the env
        return None
    try:
        obs_space, action_space = env.observation_space, env.action_space
        keys = SimpleNamespace(goal_reward=data.get("goal_reward"))
        try:
            relabels = auto_relabels(keys, obs_space, lambda: env)
        except ValueError:  # a goal_reward that does not import: the trainer refuses it
            relabels = True
    finally:
        env.close()
    return EnvProbe(obs_space, action_space, relabels)


def goal_algo(action_space: gym.Space) -> str | None:
    """The off-policy algorithm that relabels a goal env acting in ``action_space``: DQN for
    ``Discrete``, SAC for a ``Box`` it squashes (1-D float, finite bounds); None for any
    other (PPO trains it, without relabelling).

    Examples:
        >>> goal_algo(gym.spaces.Discrete(3)), goal_algo(gym.spaces.Box(-1.0, 1.0, (2,)))
        ('DQN', 'SAC')
        >>> goal_algo(gym.spaces.MultiDiscrete([2, 2])) is None
        True
    """
    from rlblocks.train.algo_spaces import check_action_space

    if isinstance(action_space, gym.spaces.Discrete):
        return "DQN"
    if not isinstance(action_space, gym.spaces.Box):
        return None
    try:
        check_action_space("SAC", action_space)
    except ValueError:
        return None
    return "SAC"


def goal_algo_line(env_id: str, algo: str) -> str:
    """The start-of-run line of a goal env that ``--env`` alone trains with ``algo``
    (:func:`goal_algo`) and hindsight relabelling.

    Examples:
        >>> goal_algo_line("parking-v0", "SAC")[:67]
        'parking-v0 is a goal env with a reward to recompute: --algo SAC (th'
    """
    space = "Discrete" if algo == "DQN" else "Box"
    return (
        f"{env_id} is a goal env with a reward to recompute: --algo {algo} (the off-policy "
        f"algorithm for its {space} actions) with hindsight relabelling, her=auto "
        "(--set her=false turns it off; --algo PPO, or another --algo, trains that instead)"
    )


def goal_algo_choice(
    backend: str, probe: EnvProbe | None, env_id: str
) -> tuple[str | None, str | None]:
    """For ``--env`` alone with no ``--algo``: ``(algo, line)``, the algorithm a goal env that
    ``her=auto`` relabels trains with (:func:`goal_algo`; None: PPO, as for any other env)
    and the start-of-run line saying so (None: nothing to say). On ``--backend rllib``,
    which does not relabel, PPO stays and the line is a note naming what the native backend
    trains."""
    from rlblocks.her import is_goal_space

    if probe is None or not probe.relabels or not is_goal_space(probe.observation_space):
        return None, None
    algo = goal_algo(probe.action_space)
    if algo is None:
        return None, None
    if backend == "rllib":
        return None, (
            f"note: {env_id} is a goal env: --backend rllib trains PPO, which does not "
            "relabel its goals (hindsight relabelling is native only: the native backend "
            f"trains it with --algo {algo} and her=auto)"
        )
    return algo, goal_algo_line(env_id, algo)


def goal_env_note(
    env_id: str, observation_space: gym.Space, action_space: gym.Space, relabels: bool = True
) -> str:
    """The start-of-run note for PPO on a goal env (a goal ``Dict`` observation): PPO does
    not relabel goals; the off-policy algorithm for its action space (:func:`goal_algo`)
    does, when ``relabels`` (a reward ``her=auto`` can recompute; else it needs a
    ``goal_reward``). No such algorithm for the action space: said so.

    Examples:
        >>> goal_env_note("parking-v0", None, gym.spaces.Box(-1.0, 1.0, (2,)))[:58]
        'parking-v0 is a goal env: PPO does not relabel its goals; '
    """
    algo = goal_algo(action_space)
    head = f"{env_id} is a goal env: PPO does not relabel its goals; "
    if algo is None:
        return head + (
            f"no off-policy algorithm here acts in {action_space} (SAC takes a 1-D Box with "
            "finite bounds, DQN Discrete), so none relabels them (docs/goals.md)"
        )
    if not relabels:
        return head + (
            f"`--algo {algo} --set goal_reward=module:function` trains it with hindsight "
            "replay (the env has no compute_reward; docs/goals.md)"
        )
    return head + (
        f"`--algo {algo}` trains it with hindsight replay (her=auto turns it on; docs/goals.md)"
    )


def annealed_lr(
    config: Any, given: dict[str, Any], budget: int | None
) -> dict[str, list[list[float]]]:
    """For PPO with a ``Discrete`` action on an image observation, when the user
    set neither ``lr`` nor ``lr_schedule`` (``given``) and the run has a step ``budget``:
    ``lr_schedule`` falling linearly from ``config.lr`` to 0 at the budget, as CleanRL's PPO
    anneals it by default; ``{}`` otherwise. Why: once a grid is solved the policy is nearly
    deterministic, the value net fits the one path to rounding noise, and standardised
    advantages scale that noise up, so every 10-20k steps one iteration moves the policy a
    long way (a KL of 0.1-1.8); late in a run such a kick can leave a greedy loop that never
    reaches the goal again. MiniGrid-Empty-8x8-v0 at 100k steps (docs/benchmarks.md,
    MiniGrid): with a constant rate seeds 0 and 1 ended in such a loop (0.0, after kicks of
    KL 1.32 and 1.81 at 94k and 90k steps), with the rate annealed seeds 0-2 all held the
    shortest path (0.961; the largest kick after 30k steps 0.53).

    Examples:
        >>> from rlblocks.train.trainer_config import PPOConfig
        >>> annealed_lr(PPOConfig(), {}, 100_000)
        {'lr_schedule': [[0, 0.0003], [100000, 0.0]]}
        >>> annealed_lr(PPOConfig(), {"lr": 1e-3}, 100_000), annealed_lr(PPOConfig(), {}, None)
        ({}, {})
    """
    if not budget or "lr" in given or "lr_schedule" in given:
        return {}
    return {"lr_schedule": [[0, config.lr], [int(budget), 0.0]]}


def space_defaults(
    config: Any,
    given: dict[str, Any],
    probe: EnvProbe | None = None,
    budget: int | None = None,
) -> tuple[dict[str, Any], str | None, str]:
    """For a native PPO ``config`` built from ``--env`` alone: the keys to add, those the
    user did not set (``given``) of :data:`VECTOR_DEFAULTS` for a vector observation with a
    model that is not recurrent and of :data:`CONTROL_DEFAULTS` for continuous control, with
    ``model``: :data:`UNBOUNDED_CONTROL_MODEL_DEFAULTS` where its observation is unbounded
    (the caller merges it into the user's model keys), and :func:`annealed_lr` to the run's
    step ``budget`` for a ``Discrete`` action on an :func:`image_observation`; ``{}``
    otherwise, and for a multi-agent env or one that fails to build, which the trainer then
    reports. Also :func:`goal_env_note` for a goal env, and what the keys were decided from,
    for the start line. ``probe``: the env already made (:func:`probe_env`; None: made
    here)."""
    from rlblocks.her import is_goal_space

    if probe is None:
        probe = probe_env({"env": config.env, "env_config": config.env_config})
    if probe is None:
        return {}, None, ""
    obs_space, action_space = probe.observation_space, probe.action_space
    goal = is_goal_space(obs_space)
    note = (
        goal_env_note(str(config.env_name), obs_space, action_space, probe.relabels)
        if goal
        else None
    )
    keys: dict[str, Any] = {}
    what = "a vector observation (fully connected model)"
    recurrent = config.model.get("use_lstm") or config.model.get("use_attention")
    if vector_observation(obs_space) and not recurrent:
        keys.update(VECTOR_DEFAULTS)
    model: dict[str, Any] = {}
    if continuous_control(obs_space, action_space):
        keys.update(CONTROL_DEFAULTS)
        what = "continuous control (Box observations and actions)"
        if unbounded_observation(obs_space) and not recurrent:
            model = _unset_model_keys(config, given, UNBOUNDED_CONTROL_MODEL_DEFAULTS)
            what = "continuous control (Box actions, unbounded Box observations)"
    if isinstance(action_space, gym.spaces.Discrete) and image_observation(obs_space):
        keys.update(annealed_lr(config, given, budget))
        what = "a Discrete action on an image observation"
    keys = {k: v for k, v in keys.items() if k not in given}
    if model:
        keys["model"] = model
    return keys, note, what


def _unset_model_keys(config: Any, given: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """``wanted`` when the user set none of its model keys and no custom model or action
    distribution (which decide their own outputs), else nothing: the keys belong together."""
    user = given.get("model") or {}
    custom = config.model.get("custom_model") or config.model.get("custom_action_dist")
    if custom or not isinstance(user, dict) or any(k in user for k in wanted):
        return {}
    return dict(wanted)


def dqn_space_defaults(
    config: Any, given: dict[str, Any], probe: EnvProbe | None
) -> dict[str, Any]:
    """For a native DQN ``config`` built from ``--env`` alone with a vector observation
    (:func:`vector_observation`): one gradient step per env step (``gradient_steps`` =
    ``train_freq``, rl-baselines3-zoo's rhythm for Acrobot and LunarLander, 4x the 1 in 4
    kept for images) and :data:`DQN_VECTOR_DEFAULTS`, the keys the user did not set
    (``given``); ``{}`` for any other observation (images, goal ``Dict`` ones) or no probe.

    Examples:
        >>> from rlblocks.train.offpolicy_config import DQNConfig
        >>> probe = EnvProbe(gym.spaces.Box(-1.0, 1.0, (4,)), gym.spaces.Discrete(2), False)
        >>> dqn_space_defaults(DQNConfig(env="CartPole-v1"), {"n_step": 1}, probe)
        {'gradient_steps': 4}
    """
    if probe is None or not vector_observation(probe.observation_space):
        return {}
    keys = {"gradient_steps": config.train_freq, **DQN_VECTOR_DEFAULTS}
    return {k: v for k, v in keys.items() if k not in given}


def multiagent_defaults(config: Any, given: dict[str, Any]) -> tuple[int, dict[str, int]] | None:
    """``(agents, keys to add)`` for native PPO on a multi-agent ``config``: the batch sizes
    counted in agent steps (:func:`~rlblocks.train.agent_batches.agent_batch_defaults`)
    that the user did not set (``given``); None for a single-agent env (or one that fails to
    build, which the trainer then reports). ``agents``: the env's ``possible_agents``, 1 for
    a turn-based game (one agent moves per env step)."""
    from rlblocks.multiagent.envs import is_multiagent_env
    from rlblocks.multiagent.turns import is_turn_based_env
    from rlblocks.train.agent_batches import agent_batch_defaults
    from rlblocks.train.envs import env_callable, raw_env_creator

    if isinstance(config.env, str) and env_callable(config.env) is None:
        return None  # a registered id: single-agent, nothing made
    try:
        env = raw_env_creator(config)()
    except Exception:  # the trainer's own start names what is wrong with the env
        return None
    try:
        if not is_multiagent_env(env):
            return None
        agents = 1 if is_turn_based_env(env) else len(getattr(env, "possible_agents", None) or [1])
    finally:
        close = getattr(env, "close", None)
        if close is not None:
            close()
    return agents, agent_batch_defaults(max(agents, 1), config.num_envs, given)


def turn_based_defaults(config: Any, given: dict[str, Any]) -> dict[str, Any]:
    """The :data:`TURN_DEFAULTS` the user did not set (``given``) when ``config``'s env is a
    turn-based game whose every agent observes an ``action_mask`` and has a ``Discrete``
    action space, and the mapping is ``shared``; ``{}`` otherwise (and for an env that fails
    to build, which the trainer then reports). With them ``selfplay_eval_exact=True`` where
    :func:`rlblocks.train.exact_games.exact_refusal` admits the game (tictactoe; not
    connect_four, refused in milliseconds) and the user did not set it."""
    from rlblocks.masks import MASK_KEY
    from rlblocks.multiagent.turns import is_turn_based_env
    from rlblocks.train.exact_games import exact_refusal
    from rlblocks.train.multiagent import multiagent_creator

    if config.multiagent.get("policy_mapping", "shared") != "shared":
        return {}
    try:
        env = multiagent_creator(config)()
    except Exception:  # the trainer's own start names what is wrong with the env
        return {}
    try:
        if not is_turn_based_env(env):
            return {}
        for agent in env.possible_agents:
            obs, act = env.observation_space(agent), env.action_space(agent)
            if not isinstance(act, gym.spaces.Discrete) or not (
                isinstance(obs, gym.spaces.Dict) and MASK_KEY in obs.spaces
            ):
                return {}
        exact = "selfplay_eval_exact" not in given and exact_refusal(env) is None
    finally:
        env.close()
    out = {k: v for k, v in TURN_DEFAULTS.items() if k not in given}
    if not exact:
        return out
    return {**out, **{k: v for k, v in EXACT_DEFAULTS.items() if k not in given}}
