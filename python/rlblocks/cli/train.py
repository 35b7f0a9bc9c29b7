"""``rlblocks train``: trains PPO, DQN, SAC, TD3 or DDPG (APPO and IMPALA on RLlib) and writes a run
directory.

``rlblocks train --env ENV [--config FILE.yaml|json] [--set key=value ...] [--stop-reward R]
[--stop-timesteps N] [--resume RUN_DIR] [--run-dir DIR [--overwrite]] [--algo ALGO]`` trains
``--algo`` (PPO unless a ``--tuned`` or ``--config`` file names another, or ``--env`` alone is a
goal env: :func:`_goal_algo`) with a progress bar
and writes a run directory (``config.json``, ``stop.json``, ``progress.csv``,
checkpoints, ``progress.png``): a new directory, an empty one, or with ``--overwrite`` one
whose previous run is deleted first; a directory another training writes is refused naming
its pid (:mod:`rlblocks.train.rundir`). Ctrl-C stops the run with a checkpoint to
``--resume`` from (exit code 130; :func:`~rlblocks.cli.train_stops.ctrl_c_saves`). ``--set``
values are parsed as YAML (``lr=1e-3``, ``model.fcnet_hiddens=[32,32]``,
``observation_filter=MeanStdFilter``); dotted keys reach into ``model`` and ``env_config``
(the env's constructor keyword arguments). ``--env`` takes a registered id or gymnasium's
``module:EnvId`` form: the module (found on ``sys.path`` or in the current directory) is
imported, then the id made; ``module:callable`` calls a function of the module with
``env_config`` as keyword arguments (a PettingZoo or RLlib multi-agent env trains with
:class:`~rlblocks.train.multiagent.MultiAgentPPOTrainer`). ``--tuned NAME`` starts from a
tuned config (``rlblocks tuned`` lists them; :mod:`rlblocks.train.tuned`), whose ``stop``
block sets the default stop return and step budget (as a ``stop`` block in a ``--config``
file does). ``--backend rllib`` trains with RLlib on Ray (:mod:`rlblocks.rllib.trainer`);
with ``--ray-address`` the user modules the config names are shipped to the cluster's
workers (:mod:`rlblocks.rllib.runtime_env`), and env runners that fail to start are one
error line.

Examples:
    >>> from rlblocks.cli import build_parser
    >>> build_parser().parse_args(["train", "--env", "CartPole-v1", "--set", "lr=1e-3"]).set
    ['lr=1e-3']
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

from rlblocks.cli._args import add_command
from rlblocks.cli._rllib_backend import rllib_run, rllib_trainer
from rlblocks.cli._startup import before_trainer
from rlblocks.cli.model_notes import unread_model_keys_notes
from rlblocks.cli.train_config import config_data, parse_overrides
from rlblocks.cli.train_help import ConfigHelp, config_class
from rlblocks.cli.train_stops import (
    DEFAULT_STOP_TIMESTEPS,
    Stops,
    budget_note,
    check_stop_flags,
    ctrl_c_saves,
    last_return,
    saved_stops,
    write_stops,
)


def add_parser(sub: Any) -> None:
    """Adds ``train`` to an argparse subparsers object."""
    train = add_command(
        sub,
        "train",
        run,
        help="train PPO, DQN, SAC, TD3 or DDPG on a gymnasium or multi-agent env",
        description=(
            "Trains --algo (PPO by default; SAC or DQN with hindsight relabelling for a goal "
            "env, natively) with a progress bar and writes a run directory:"
            " config.json, stop.json, progress.csv, checkpoint_NNNNNN/ and progress.png. "
            "--set values are read as YAML (lr=1e-3, model.fcnet_hiddens=[32,32], "
            "observation_filter=MeanStdFilter); dotted keys reach into model, env_config "
            "and stop. A --config file or a --tuned config may end with a stop: "
            "{episode_return_mean: R, timesteps_total: N} block. --resume RUN_DIR continues"
            " a run by its saved config and stop conditions; resuming from an older "
            "checkpoint moves the later ones into abandoned_<time>/. A --run-dir holding a "
            "previous run is refused unless --resume or --overwrite; one that another "
            "training writes is refused (naming its pid). Ctrl-C stops at the end of the "
            "iteration and saves a checkpoint to --resume from (exit code 130); a second "
            "Ctrl-C aborts at once. The config keys of the algorithm (--algo, given before "
            "--help) follow the options, with their defaults."
        ),
        add_help=False,
    )
    train.add_argument(
        "-h",
        "--help",
        action=ConfigHelp,
        help="show this help, then the config keys of --algo's config (PPO's unless --algo "
        "comes first; a goal env alone takes SAC's or DQN's) with their defaults, and exit",
    )
    train.add_argument(
        "--env",
        help="gymnasium id, e.g. CartPole-v1 or MiniGrid-DoorKey-5x5-v0 (the installed "
        "package that registers a third-party id is imported); module:EnvId for an env "
        "that a module of yours "
        "registers (my_pkg.envs:MyEnv-v0); or module:callable returning an env, "
        "e.g. a PettingZoo multi-agent env (mpe2.simple_spread_v3:parallel_env)",
    )
    train.add_argument(
        "--config",
        help="YAML or JSON file of --algo's config keys (and an optional "
        "stop: {episode_return_mean, timesteps_total} block)",
    )
    train.add_argument(
        "--tuned",
        metavar="NAME",
        help="a tuned config shipped with rlblocks (`rlblocks tuned` lists them)",
    )
    train.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a config key (repeatable; dotted keys for model.*); the keys, "
        "their defaults and docs are listed at the end of this help",
    )
    train.add_argument(
        "--num-envs",
        type=int,
        default=None,
        metavar="N",
        help="envs stepped together (the config's num_envs; --backend rllib: per env runner)",
    )
    train.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the run's seed (the config's seed)",
    )
    train.add_argument(
        "--stop-reward",
        type=float,
        default=None,
        help="stop at this mean return (default: the env's reward threshold)",
    )
    train.add_argument(
        "--stop-timesteps",
        type=int,
        default=None,
        help=f"stop after this many env steps (default {DEFAULT_STOP_TIMESTEPS})",
    )
    train.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its checkpoint")
    train.add_argument(
        "--run-dir",
        help="run directory (default rlblocks_runs/PPO_<env>_<time>, always a new one); a "
        "directory holding a previous run is refused unless --resume or --overwrite",
    )
    train.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the previous run in --run-dir (its config, progress, checkpoints and "
        "exported policies are deleted; other files are never touched)",
    )
    train.add_argument(
        "--runs-root", default="rlblocks_runs", help="parent of default run directories"
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument(
        "--no-default-stop-reward", action="store_true", help="ignore the env's reward threshold"
    )
    train.add_argument(
        "--backend",
        choices=("native", "rllib"),
        default="native",
        help="native: rlblocks' own trainers (default); rllib: RLlib on Ray with "
        "rlblocks' module and connectors (needs the ray extra)",
    )
    train.add_argument(
        "--algo",
        choices=("PPO", "APPO", "IMPALA", "DQN", "SAC", "TD3", "DDPG"),
        default=None,
        help="algorithm (default PPO, or the --tuned / --config file's algo; --env alone on a "
        "goal env whose reward can be recomputed: SAC for Box actions, DQN for Discrete, "
        "with hindsight relabelling, natively): PPO, DQN and SAC "
        "train on both backends with the same config keys, APPO and IMPALA need --backend "
        "rllib, TD3 and DDPG (Box actions) train natively only",
    )
    train.add_argument(
        "--num-env-runners",
        type=int,
        default=None,
        help="Ray env-runner actors (--backend rllib; default 0: sample in the driver, "
        "1 for APPO and IMPALA, which sample asynchronously)",
    )
    train.add_argument(
        "--num-envs-per-env-runner",
        type=int,
        default=None,
        help="vector envs per env runner (--backend rllib; default num_envs)",
    )
    train.add_argument(
        "--ray-address",
        default=None,
        help="address of a running Ray cluster, or 'auto' for the one started on this "
        "machine (--backend rllib; default: start a local Ray sized to the machine); the "
        "modules that --env and the config name (my_pkg.envs:MyEnv-v0, a custom_model, "
        "...) travel to its workers in Ray's runtime_env unless pip installed them "
        "(RLBLOCKS_SHIP_USER_CODE=0: never)",
    )


def run(args: argparse.Namespace) -> int:
    """Trains (or resumes) a run; a run directory this command made is removed again if
    the start fails before a checkpoint or a progress row is written."""
    from rlblocks.train.checkpoint import checkpoint_meta, find_checkpoint, list_checkpoints
    from rlblocks.train.logger import read_progress

    check_stop_flags(args)
    flags = _rllib_flags(args)
    flags_given = args.num_envs is not None or args.seed is not None
    if args.resume and (args.config or args.set or args.env or args.tuned or flags_given):
        raise ValueError(
            "--resume continues a run with its saved config; --env, --config, "
            "--tuned, --set, --num-envs and --seed cannot be combined with it"
        )
    if args.overwrite and (args.resume or not args.run_dir):
        raise ValueError(
            "--overwrite replaces the run in --run-dir DIR: give --run-dir (and no --resume)"
        )
    created: Path | None = None  # a run directory this command made (removed if it fails)
    made_root = False
    trainer: Any = None
    claim: Any = None  # the run directory's writer lock (rlblocks.train.rundir)
    try:
        if args.resume and rllib_run(args.resume):
            trainer = rllib_trainer().RLlibTrainer.restore(
                args.resume, ray_address=flags["ray_address"]
            )
            stops = Stops(args, (None, None), trainer.config.env, saved_stops(trainer.run_dir))
            stops.check_not_met(
                trainer.timesteps_total, trainer.last_metrics.get("episode_return_mean")
            )
        elif args.resume:
            meta = checkpoint_meta(args.resume)
            run_dir = find_checkpoint(args.resume).parent
            stops = Stops(args, (None, None), _run_env(run_dir), saved_stops(run_dir))
            stops.check_not_met(int(meta["timesteps_total"]), last_return(args.resume, meta))
            claim = _lock(run_dir)  # before the resume changes any file
            trainer = _restore(args.resume)
        else:
            data, file_stops, file_algo = config_data(args)
            flags["algo"] = flags["algo"] or file_algo
            alone = not (args.tuned or args.config)
            # --env alone: one env made here decides a goal env's algorithm (before its
            # config class checks the --set keys) and the space defaults
            probe = _probe_env(data) if alone and flags["algo"] in (None, "PPO", "DQN") else None
            picked = _goal_algo(args, flags, probe, data)
            if args.backend == "rllib":
                _env_runners(flags)
                _check_before_ray(data, flags)
                # APPO / IMPALA start from RLlib's defaults
                data = rllib_trainer().with_algo_defaults(data, flags["algo"] or "PPO")
            config = _from_dict(flags["algo"], data, picked)
            stops = Stops(args, file_stops, config.env, {})
            if alone:
                config = _env_defaults(args, flags, config, data, probe, stops.timesteps)
            _check_budget(config, stops, args.backend, flags)
            if args.run_dir:
                target = Path(args.run_dir)
                created = None if target.exists() else target
                claim = _claim(target, args.overwrite, False)
            else:  # a name of its own, made here (never another run's)
                made_root = not Path(args.runs_root).exists()
                claim = _claim(_default_run_dir(config, args.runs_root, flags["algo"]), False, True)
                target = created = claim.path
            trainer = _new_trainer(args, flags, config, target)
            for note in unread_model_keys_notes(trainer, data.get("model") or {}):
                print(f"rlblocks train: note: {note}", flush=True)
        return _fit(args, trainer, stops)
    except BaseException:
        if created is not None and not list_checkpoints(created) and not read_progress(created):
            shutil.rmtree(created, ignore_errors=True)  # a failed start leaves nothing behind
            if made_root:
                with contextlib.suppress(OSError):  # and the --runs-root made for it
                    created.parent.rmdir()
        raise
    finally:
        try:
            if trainer is not None:
                trainer.close()
        finally:
            if claim is not None:
                claim.release()


def _claim(target: Path, overwrite: bool, fresh_name: bool) -> Any:
    from rlblocks.train.rundir import claim_run_dir

    return claim_run_dir(target, overwrite=overwrite, fresh_name=fresh_name)


def _lock(run_dir: Path) -> Any:
    from rlblocks.train.rundir import lock_run_dir

    return lock_run_dir(run_dir)


def _check_budget(config: Any, stops: Stops, backend: str, flags: dict[str, Any]) -> None:
    """Refuses, before any env or trainer is made (and before Ray starts), a DQN / SAC run
    that would take no gradient step within its stop budget (named as the user gave it) or
    whose replay buffer can never hold a batch (on ``--backend rllib``: one ring of
    rlblocks' replay arrays per env of all env runners, unless the ``rllib`` block names a
    buffer of its own)."""
    from rlblocks.train.offpolicy_checks import check_budget, check_replay_fits, run_budget
    from rlblocks.train.offpolicy_config import OffPolicyConfig

    if not isinstance(config, OffPolicyConfig):
        return
    name = {
        "--stop-timesteps": f"--stop-timesteps {stops.timesteps}",
        "stop.timesteps_total": f"stop.timesteps_total={stops.timesteps}",
    }.get(stops.timesteps_from, f"{stops.timesteps_from} of {stops.timesteps} steps")
    num_envs = config.num_envs
    if backend == "rllib":
        per_runner = flags["num_envs_per_env_runner"] or config.num_envs
        num_envs = max(1, flags["num_env_runners"] or 0) * per_runner
        if "replay_buffer_config" not in (config.rllib.get("training") or {}):
            check_replay_fits(config.train_batch_size, config.replay_capacity, num_envs)
    budget = run_budget(stops.timesteps, None, config.timesteps_per_iteration, name)
    if budget is not None:
        check_budget(config, num_envs, *budget)


def _run_env(run_dir: Path) -> Any:
    """The ``env`` of ``run_dir``'s ``config.json`` (None if unreadable)."""
    try:
        data = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return data.get("env") if isinstance(data, dict) else None


def _restore(run_dir: str) -> Any:
    """``PPOTrainer.restore`` whose warnings (a resume that is not exact) are one line each."""
    from rlblocks.train.restoring import restore_trainer

    before_trainer()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        trainer = restore_trainer(run_dir)
    for w in caught:
        print(f"rlblocks: warning: {w.message}", file=sys.stderr, flush=True)
    return trainer


def _rllib_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--backend rllib`` options; ValueError when given to the native backend."""
    flags = {
        "num_env_runners": args.num_env_runners,
        "num_envs_per_env_runner": args.num_envs_per_env_runner,
        "ray_address": args.ray_address,
    }
    if args.backend != "rllib":
        given = [f"--{k.replace('_', '-')}" for k, v in flags.items() if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)} need --backend rllib")
        if args.algo in ("APPO", "IMPALA"):
            raise ValueError(f"--algo {args.algo} needs --backend rllib")
    flags["algo"] = args.algo
    return flags


def _check_before_ray(data: dict[str, Any], flags: dict[str, Any]) -> None:
    """The refusals of a new ``--backend rllib`` run that the config, the algorithm and the
    env's spaces decide, before Ray is imported or started
    (:func:`~rlblocks.train.algo_spaces.check_rllib_run` on the algorithm's config, the
    native backend's; APPO's and IMPALA's own defaults change no key it reads)."""
    from rlblocks.train.algo_spaces import check_rllib_run

    config = config_class(flags["algo"]).from_dict(data)
    check_rllib_run(config, flags["algo"] or "PPO", flags["num_env_runners"])


def _multiagent_algo_refusal(algo: str) -> str:
    from rlblocks.train.algo_spaces import multiagent_algo_refusal

    return multiagent_algo_refusal(algo)


def _makes_multiagent_env(config: Any) -> bool:
    from rlblocks.train.algo_spaces import makes_multiagent_env

    return makes_multiagent_env(config)


def _env_runners(flags: dict[str, Any]) -> None:
    """``--num-env-runners`` of a new RLlib run when not given: 0 (sample in the driver),
    but 1 for APPO and IMPALA, which sample asynchronously in env runners (said on stderr)."""
    if flags["num_env_runners"] is not None:
        return
    asynchronous = flags["algo"] in ("APPO", "IMPALA")
    flags["num_env_runners"] = 1 if asynchronous else 0
    if asynchronous:
        print(
            f"rlblocks train: {flags['algo']} samples asynchronously in env runners: "
            "--num-env-runners 1 (give --num-env-runners N for more)",
            file=sys.stderr,
            flush=True,
        )


def _default_run_dir(config: Any, root: str, algo: str | None) -> Path:
    from rlblocks.train.ppo import default_run_dir

    return default_run_dir(config, root, algo)


def _probe_env(data: dict[str, Any]) -> Any:
    from rlblocks.cli.train_defaults import probe_env

    return probe_env(data)


def _goal_algo(
    args: argparse.Namespace, flags: dict[str, Any], probe: Any, data: dict[str, Any]
) -> bool:
    """``--env`` alone with no ``--algo``: a goal env's algorithm
    (:func:`~rlblocks.cli.train_defaults.goal_algo_choice`) set in ``flags`` and its line
    printed; True when the env picked it."""
    from rlblocks.cli.train_defaults import goal_algo_choice

    if flags["algo"] is not None:
        return False
    algo, line = goal_algo_choice(args.backend, probe, str(data["env"]))
    if line:
        print(f"rlblocks train: {line}", flush=True)
    flags["algo"] = algo
    return algo is not None


def _from_dict(algo: str | None, data: dict[str, Any], picked: bool) -> Any:
    """``algo``'s config of ``data``; a key it refuses names the goal env's choice when the
    env ``picked`` the algorithm (:func:`_goal_algo`)."""
    try:
        return config_class(algo).from_dict(data)
    except ValueError as err:
        if not picked:
            raise
        raise ValueError(
            f"{err} (--env {data['env']} is a goal env, so rlblocks train chose --algo "
            f"{algo}; give --algo PPO for PPO's keys)"
        ) from err


def _env_defaults(
    args: argparse.Namespace,
    flags: dict[str, Any],
    config: Any,
    data: dict[str, Any],
    probe: Any = None,
    budget: int | None = None,
) -> Any:
    """``--env`` alone: the note of an env the defaults fall short on, and for native PPO the
    defaults decided from the env (:mod:`rlblocks.cli.train_defaults`: the batch sizes of a
    multi-agent env, counted in agent steps; continuous control's and turn-based games' from
    the spaces, read from ``probe``, the env run() made once; a learning rate annealed to the
    step ``budget``), printed and applied."""
    from rlblocks.cli import train_defaults as defaults
    from rlblocks.train.agent_batches import agent_batch_line

    note = defaults.shortfall_note(
        str(config.env), config.env_config, flags["algo"] or "PPO", getattr(config, "gamma", None)
    )
    if note:
        print(f"rlblocks train: note: {note}", flush=True)
    given = parse_overrides(args.set or [])
    if args.backend == "native" and flags["algo"] == "DQN":
        extra = defaults.dqn_space_defaults(config, given, probe)
        return _with_defaults(flags["algo"], data, "DQN on a vector observation", extra, config)
    if args.backend != "native" or (flags["algo"] or "PPO") != "PPO":
        return config
    batches = defaults.multiagent_defaults(config, given)
    if batches is not None:
        agents, sizes = batches
        chosen = {
            "train_batch_size": config.train_batch_size,
            "sgd_minibatch_size": config.sgd_minibatch_size,
            **sizes,
        }
        print(f"rlblocks train: {agent_batch_line(agents, config.num_envs, chosen)}", flush=True)
        data = {**data, **sizes}
        if "num_env_workers" not in given:  # worker processes when cores are free
            data["num_env_workers"] = "auto"
        config = config_class(flags["algo"]).from_dict(data)
    # probe: the env made once in run() (None: it did not build, nothing to decide from)
    extra, goal_note, what = (
        defaults.space_defaults(config, given, probe, budget) if probe else ({}, None, "")
    )
    if goal_note:
        print(f"rlblocks train: note: {goal_note}", flush=True)
    if not extra:
        what = "a turn-based game with action masks"
        extra = defaults.turn_based_defaults(config, given)
    return _with_defaults(flags["algo"], data, what, extra, config)


def _with_defaults(
    algo: str | None, data: dict[str, Any], what: str, extra: dict[str, Any], config: Any
) -> Any:
    """``config`` with the keys ``extra`` decided from ``what`` (none: ``config`` as it is),
    said in one start line (a nested dict such as ``model`` as its dotted keys). A nested
    dict is merged into the config's own (``model={"free_log_std": True}`` keeps the user's
    other model keys); any other value replaces the key."""
    if not extra:
        return config
    said = [
        (f"{k}.{sub}", v) for k, keys in extra.items() if isinstance(keys, dict)
        for sub, v in keys.items()
    ] + [(k, v) for k, v in extra.items() if not isinstance(v, dict)]  # fmt: skip
    print(
        f"rlblocks train: {what}: "
        + ", ".join(f"{k}={v}" for k, v in said)
        + f" (--set {({1: 'it', 2: 'either'}).get(len(said), 'any')} to change)",
        flush=True,
    )
    merged = {
        k: {**data[k], **v} if isinstance(v, dict) and isinstance(data.get(k), dict) else v
        for k, v in extra.items()
    }
    return config_class(algo).from_dict({**data, **merged})


def _new_trainer(args: argparse.Namespace, flags: dict[str, Any], config: Any, target: Path) -> Any:
    if args.backend == "rllib":
        return rllib_trainer().RLlibTrainer(
            config,
            target,
            algo=flags["algo"] or "PPO",
            num_env_runners=flags["num_env_runners"],
            num_envs_per_env_runner=flags["num_envs_per_env_runner"],
            ray_address=flags["ray_address"],
        )
    before_trainer()
    if flags["algo"] in ("DQN", "SAC", "TD3", "DDPG"):
        if _makes_multiagent_env(config):
            raise ValueError(_multiagent_algo_refusal(flags["algo"]))
        from rlblocks.train import offpolicy

        trainer_class = getattr(offpolicy, f"{flags['algo']}Trainer")
        return trainer_class(config, run_dir=target)
    from rlblocks.train.multiagent import is_multiagent_config

    if is_multiagent_config(config):
        from rlblocks.train.multiagent import MultiAgentPPOTrainer

        return MultiAgentPPOTrainer(config, run_dir=target)
    from rlblocks.train.ppo import PPOTrainer

    return PPOTrainer(config, run_dir=target)


def _fit(args: argparse.Namespace, trainer: Any, stops: Stops) -> int:
    from rlblocks.train.plot import plot_run

    cfg = trainer.config
    run_dir = trainer.run_dir
    stops.check_lr_schedule(cfg)
    write_stops(Path(run_dir), stops.reward, stops.timesteps)
    until = f"a mean return >= {stops.reward} or " if stops.reward is not None else ""
    algo = (
        f"{trainer.backend['algo']} (RLlib, {trainer.backend['num_env_runners']} env runners)"
        if hasattr(trainer, "backend")
        else (
            f"multi-agent PPO ({len(trainer.hub.agents)} agents, policies "
            f"{', '.join(trainer.policies)})"
            if hasattr(trainer, "hub")
            else cfg.ALGORITHM
        )
    )
    print(
        f"rlblocks train: {algo} on {cfg.env_name}, {cfg.num_envs} envs, until {until}"
        f"{stops.timesteps} steps{budget_note(trainer, stops.timesteps)}; "
        f"run directory: {run_dir}",
        flush=True,
    )
    note = getattr(trainer, "her_note", None)  # the off-policy trainers' hindsight choice
    if note:
        print(f"rlblocks train: {note}", flush=True)
    if getattr(cfg, "use_sde", False) and not hasattr(trainer, "backend"):
        from rlblocks.train.gsde import SDE_NOTE

        print(f"rlblocks train: {SDE_NOTE}", flush=True)
    with ctrl_c_saves(trainer) as interrupted:
        metrics = trainer.fit(
            stop_reward=stops.reward,
            stop_timesteps=stops.timesteps,
            progress=not args.no_progress,
        )
    plot = plot_run(trainer.run_dir or ".")
    ret = metrics.get("episode_return_mean", math.nan)
    if interrupted:
        print(
            f"rlblocks train: interrupted after {trainer.timesteps_total} steps (iteration "
            f"{trainer.iteration}); saved checkpoint: {trainer.checkpoint_path}\n"
            f"continue with: rlblocks train --resume {run_dir}",
            file=sys.stderr,
            flush=True,
        )
        return 130
    from rlblocks.train.numbers import format_return  # not at import: --help stays light

    print(
        f"done: {metrics.get('timesteps_total', 0)} steps, {metrics.get('episodes_total', 0)} "
        f"episodes, mean return {format_return(ret)} "
        f"(last {cfg.metrics_smoothing_episodes} episodes), "
        f"{trainer.time_total_s:.0f} s\n"
        f"results: {run_dir}/progress.csv\ncheckpoint: {trainer.checkpoint_path}\nplot: {plot}",
        flush=True,
    )
    return 0
