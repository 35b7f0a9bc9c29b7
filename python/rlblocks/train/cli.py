"""``rlblocks train | evaluate | export | tuned | plot``: the command line of :mod:`rlblocks.train`.

``rlblocks train --env ENV [--config FILE.yaml|json] [--set key=value ...]
[--stop-reward R] [--stop-timesteps N] [--resume RUN_DIR]`` trains PPO with a progress bar
and writes a run directory (``config.json``, ``progress.csv``, checkpoints,
``progress.png``). ``--set`` values are parsed as YAML (``lr=1e-3``,
``model.fcnet_hiddens=[32,32]``, ``observation_filter=MeanStdFilter``); dotted keys reach
into ``model`` and ``env_config`` (the env's constructor keyword arguments). ``--env`` takes
a registered id or gymnasium's ``module:EnvId`` form: the module (found on ``sys.path`` or in
the current directory) is imported, then the id made. ``--tuned NAME`` starts from a tuned
config (``rlblocks tuned`` lists them; :mod:`rlblocks.train.tuned`), whose ``stop`` block sets
the default stop return and step budget (as a ``stop`` block in a ``--config`` file does).

Examples:
    >>> parse_overrides(["lr=1e-3", "model.fcnet_hiddens=[32, 32]", "num_envs=4"])
    {'lr': 0.001, 'model': {'fcnet_hiddens': [32, 32]}, 'num_envs': 4}
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlblocks.train.checkpoint import checkpoint_meta
from rlblocks.train.logger import read_progress

__all__ = ["add_subcommands", "load_config_file", "parse_overrides"]

#: ``rlblocks train`` stops here when neither --stop-timesteps nor the env's reward
#: threshold ends the run first.
DEFAULT_STOP_TIMESTEPS = 500_000


def _yaml_value(text: str) -> Any:
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
        try:
            return float(value)
        except ValueError:
            return value
    return value


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["a=1", "model.b=[2]"]`` -> ``{"a": 1, "model": {"b": [2]}}`` (values as YAML).

    Raises:
        ValueError: An item without ``=`` or with an empty key.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise ValueError(f"--set expects key=value (e.g. lr=1e-3 or "
                             f"model.fcnet_hiddens=[64,64]), got {item!r}")
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"--set {item!r}: {part!r} was already set to a plain value")
            node = child
        node[parts[-1]] = _yaml_value(value)
    return out


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Reads a YAML or JSON config file (a mapping of PPO keys).

    Raises:
        ValueError: Missing file, unparsable content, or not a mapping.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"config file {str(p)!r} does not exist")
    text = p.read_text()
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as err:  # json and yaml raise different error types
        raise ValueError(f"config file {str(p)!r} could not be parsed: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"config file {str(p)!r} must hold a mapping of config keys, got "
                         f"{type(data).__name__}")
    return data


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _default_stop_reward(env: Any) -> float | None:
    from rlblocks.train.rollout import env_spec

    spec = env_spec(env)
    if spec is None or spec.reward_threshold is None:
        return None
    return float(spec.reward_threshold)


def _user_modules_importable() -> None:
    """``--env my_pkg.envs:MyEnv-v0`` finds ``my_pkg`` in the current directory, as
    ``python -m`` would (appended: it never shadows an installed package)."""
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.append(cwd)


def _config_data(args: argparse.Namespace) -> tuple[dict[str, Any], tuple[Any, Any]]:
    """The PPO keys of ``--tuned`` / ``--config`` / ``--env`` / ``--set`` (later ones win)
    and the ``stop`` block of the file, if any."""
    from rlblocks.train.tuned import load_tuned, split_stop

    if args.tuned and (args.config or args.env):
        raise ValueError("--tuned NAME brings its own env and config: use --set to change "
                         "keys of it, or --config / --env without --tuned")
    if args.tuned:
        tuned = load_tuned(args.tuned)
        data, stops = dict(tuned.config), (tuned.stop_reward, tuned.stop_timesteps)
    else:
        data, reward, steps = split_stop(load_config_file(args.config) if args.config else {})
        stops = (reward, steps)
    overrides = parse_overrides(args.set or [])
    data = _merge(data, overrides)
    if args.env:
        data["env"] = args.env
    if not data.get("env"):
        raise ValueError("give an environment: --env ENV, --tuned NAME (`rlblocks tuned` "
                         "lists them) or 'env' in the --config file")
    if not args.tuned and not args.config:
        _hint_tuned(str(data["env"]), data.get("model") or {})
    return data, stops


def _hint_tuned(env: str, model: dict[str, Any]) -> None:
    """``use_lstm`` / ``use_attention`` alone get RLlib's defaults, which learn slowly: one
    line names the tuned config for that env and memory, if there is one."""
    from rlblocks.train.tuned import tuned_for

    for wrapper in ("use_lstm", "use_attention"):
        if model.get(wrapper) and set(model) <= {"use_lstm", "use_attention"}:
            names = tuned_for(env, wrapper)
            if names:
                print(f"rlblocks train: hint: {wrapper} alone uses RLlib's defaults; the tuned "
                      f"config for {env} is `rlblocks train --tuned {names[0]}`",
                      file=sys.stderr, flush=True)


def _check_stops(args: argparse.Namespace) -> None:
    if args.stop_timesteps is not None and args.stop_timesteps <= 0:
        raise ValueError(f"--stop-timesteps must be > 0, got {args.stop_timesteps}")
    if args.stop_reward is not None and not math.isfinite(args.stop_reward):
        raise ValueError(f"--stop-reward must be a finite number, got {args.stop_reward}")


def _restore(run_dir: str) -> Any:
    """``PPOTrainer.restore`` whose warnings (a resume that is not exact) are one line each."""
    from rlblocks.train.ppo import PPOTrainer

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        trainer = PPOTrainer.restore(run_dir)
    for w in caught:
        print(f"rlblocks: warning: {w.message}", file=sys.stderr, flush=True)
    return trainer


def _rllib_run(path: str) -> bool:
    """Whether ``path`` (a run or checkpoint directory) is a ``--backend rllib`` run; reads
    its ``config.json`` only (no Ray import)."""
    for candidate in (Path(path), Path(path).parent):
        cfg = candidate / "config.json"
        if cfg.is_file():
            try:
                backend = json.loads(cfg.read_text()).get("backend")
            except ValueError:
                return False
            return isinstance(backend, dict) and backend.get("name") == "rllib"
    return False


def _rllib_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--backend rllib`` options; ValueError when given to the native backend."""
    flags = {"algo": args.algo, "num_env_runners": args.num_env_runners,
             "num_envs_per_env_runner": args.num_envs_per_env_runner,
             "ray_address": args.ray_address}
    if args.backend != "rllib":
        given = [f"--{k.replace('_', '-')}" for k, v in flags.items() if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)} need --backend rllib")
    return flags


def _rllib_trainer() -> Any:
    """``rlblocks.rllib.trainer``; without Ray a user's error naming the extra."""
    try:
        from rlblocks.rllib import trainer
    except ImportError as err:
        raise ValueError(str(err)) from None
    return trainer


def _train(args: argparse.Namespace) -> int:
    from rlblocks.train.config import PPOConfig
    from rlblocks.train.plot import plot_run
    from rlblocks.train.ppo import PPOTrainer, default_run_dir

    _check_stops(args)
    flags = _rllib_flags(args)
    created: Path | None = None  # a run directory this command made (removed if it fails)
    trainer: Any
    if args.resume and _rllib_run(args.resume):
        if args.config or args.set or args.env:
            raise ValueError("--resume continues a run with its saved config; --env, --config "
                             "and --set cannot be combined with it")
        trainer = _rllib_trainer().RLlibTrainer.restore(args.resume,
                                                        ray_address=flags["ray_address"])
        file_stops: tuple[float | None, int | None] = (None, None)
        if args.stop_timesteps is not None and args.stop_timesteps <= trainer.timesteps_total:
            trainer.close()
            raise ValueError(f"--stop-timesteps {args.stop_timesteps}: the run already has "
                             f"{trainer.timesteps_total} steps")
    elif args.resume:
        if args.config or args.set or args.env:
            raise ValueError("--resume continues a run with its saved config; --env, --config "
                             "and --set cannot be combined with it")
        done = int(checkpoint_meta(args.resume)["timesteps_total"])
        if args.stop_timesteps is not None and args.stop_timesteps <= done:
            raise ValueError(f"--stop-timesteps {args.stop_timesteps}: the run already has "
                             f"{done} steps")
        trainer = _restore(args.resume)
        file_stops = (None, None)
    else:
        data, file_stops = _config_data(args)
        config = PPOConfig.from_dict(data)
        target = Path(args.run_dir) if args.run_dir else default_run_dir(config, args.runs_root)
        created = None if target.exists() else target
        if args.backend == "rllib":
            rllib = _rllib_trainer()
            try:
                trainer = rllib.RLlibTrainer(
                    config, target, algo=flags["algo"] or "PPO",
                    num_env_runners=flags["num_env_runners"] or 0,
                    num_envs_per_env_runner=flags["num_envs_per_env_runner"],
                    ray_address=flags["ray_address"])
            except BaseException:
                if created is not None:
                    shutil.rmtree(created, ignore_errors=True)
                raise
        else:
            trainer = PPOTrainer(config, run_dir=target)
    cfg = trainer.config
    stop_reward = args.stop_reward if args.stop_reward is not None else file_stops[0]
    if stop_reward is None and not args.no_default_stop_reward:
        stop_reward = _default_stop_reward(cfg.env)
    stop_timesteps: int = next(s for s in (args.stop_timesteps, file_stops[1],
                                           DEFAULT_STOP_TIMESTEPS) if s is not None)
    run_dir = trainer.run_dir
    until = f"a mean return >= {stop_reward} or " if stop_reward is not None else ""
    algo = (f"{trainer.backend['algo']} (RLlib, {trainer.backend['num_env_runners']} env "
            f"runners)" if hasattr(trainer, "backend") else "PPO")
    print(f"rlblocks train: {algo} on {cfg.env_name}, {cfg.num_envs} envs, until {until}"
          f"{stop_timesteps} steps; run directory: {run_dir}", flush=True)
    try:
        metrics = trainer.fit(stop_reward=stop_reward, stop_timesteps=stop_timesteps,
                              progress=not args.no_progress)
    except BaseException:
        if created is not None and trainer.checkpoint_path is None and not read_progress(created):
            shutil.rmtree(created, ignore_errors=True)  # a failed start leaves nothing behind
        raise
    finally:
        trainer.close()
    plot = plot_run(trainer.run_dir or ".")
    ret = metrics.get("episode_return_mean", math.nan)
    print(
        f"done: {metrics.get('timesteps_total', 0)} steps, {metrics.get('episodes_total', 0)} "
        f"episodes, mean return {ret:.1f} (last {cfg.metrics_smoothing_episodes} episodes), "
        f"{trainer.time_total_s:.0f} s\n"
        f"results: {run_dir}/progress.csv\ncheckpoint: {trainer.checkpoint_path}\nplot: {plot}",
        flush=True,
    )
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from rlblocks.train.ppo import PPOTrainer

    if _rllib_run(args.run_dir):
        if args.exported is not None:
            raise ValueError("--exported plays an export of a native run; this run was trained "
                             "with --backend rllib (evaluate it without --exported)")
        print(json.dumps(_rllib_trainer().evaluate_run(
            args.run_dir, args.episodes, explore=args.explore, seed=args.seed)))
        return 0
    exported = None
    if args.exported is not None:
        if args.explore:
            raise ValueError("--exported runs the exported deterministic actions; --explore "
                             "cannot be combined with it")
        from rlblocks.export.evaluate import load_exported

        try:
            exported = load_exported(args.exported)
        except ImportError as err:  # the export extra is missing
            raise ValueError(str(err)) from err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # evaluation starts fresh episodes
        trainer = PPOTrainer.restore(args.run_dir, log=False)
    try:
        if exported is not None:
            from rlblocks.export.evaluate import evaluate_exported

            result = evaluate_exported(exported, trainer.evaluation_env(), args.episodes,
                                       seed=trainer.evaluation_seed(args.seed))
            result["exported"] = str(args.exported)
        else:
            result = trainer.evaluate(args.episodes, explore=args.explore, seed=args.seed)
    finally:
        trainer.close()
    result["checkpoint"] = str(trainer.checkpoint_path)
    print(json.dumps(result))
    return 0


def _export(args: argparse.Namespace) -> int:
    from rlblocks.export.exporter import export_policy
    from rlblocks.export.sidecar import sidecar_path

    try:
        path = export_policy(args.run_dir, args.out, fmt=args.format)
    except ImportError as err:  # the export extra is missing
        raise ValueError(str(err)) from err
    print(f"exported: {path}\nsidecar: {sidecar_path(path)}")
    return 0


def _tuned(args: argparse.Namespace) -> int:
    from rlblocks.train.tuned import list_tuned, load_tuned

    if args.name:
        print(load_tuned(args.name).path.read_text(), end="")
        return 0
    rows = [("name", "env", "model", "target", "last measured (seeds reached, median steps, "
             "median wall s)")]
    for t in list_tuned():
        target = f"{t.stop_reward:g} in {t.stop_timesteps:,} steps"
        if t.hardware != "CPU":
            target += " (GPU or long run)"
        m = t.measured
        measured = (f"{m['reached']}, {m['median_steps']:,}, {m['median_wall_s']} s "
                    f"({m['date']})" if m else "not measured")
        rows.append((t.name, t.env, t.model_summary, target, measured))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[4])
    print("\nrun one: rlblocks train --tuned NAME [--set key=value ...]; "
          "show one: rlblocks tuned NAME")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from rlblocks.train.plot import plot_run

    print(plot_run(args.run_dir, args.out, x=args.x, y=args.y))
    return 0


def _guard(fn: Any, name: str) -> Any:
    """Runs a subcommand; a user's error (a ValueError, or an OSError such as a full disk)
    is one line on stderr and exit code 2 (``RLBLOCKS_TRACEBACK=1`` shows the traceback)."""

    def run(args: argparse.Namespace) -> int:
        _user_modules_importable()
        try:
            return int(fn(args))
        except (ValueError, OSError) as err:
            if os.environ.get("RLBLOCKS_TRACEBACK"):
                raise
            if isinstance(err, OSError):
                where = f": {err.filename}" if err.filename else ""
                message = f"{err.strerror or err}{where}"
            else:
                message = " ".join(str(err).split())
            print(f"rlblocks {name}: error: {message}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"rlblocks {name}: interrupted", file=sys.stderr)
            return 130

    return run


def add_subcommands(sub: Any) -> None:
    """Adds ``train``, ``evaluate``, ``export``, ``tuned`` and ``plot`` to an argparse
    subparsers object."""
    train = sub.add_parser("train", help="train PPO on a gymnasium env")
    train.add_argument("--env", help="gymnasium id, e.g. CartPole-v1, or module:EnvId for an "
                       "env that a module of yours registers (my_pkg.envs:MyEnv-v0)")
    train.add_argument("--config", help="YAML or JSON file of PPO config keys (and an optional "
                       "stop: {episode_return_mean, timesteps_total} block)")
    train.add_argument("--tuned", metavar="NAME",
                       help="a tuned config shipped with rlblocks (`rlblocks tuned` lists them)")
    train.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a config key (repeatable; dotted keys for model.*)")
    train.add_argument("--stop-reward", type=float, default=None,
                       help="stop at this mean return (default: the env's reward threshold)")
    train.add_argument("--stop-timesteps", type=int, default=None,
                       help=f"stop after this many env steps (default {DEFAULT_STOP_TIMESTEPS})")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its checkpoint")
    train.add_argument("--run-dir", help="run directory (default rlblocks_runs/PPO_<env>_<time>)")
    train.add_argument("--runs-root", default="rlblocks_runs",
                       help="parent of default run directories")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument("--no-default-stop-reward", action="store_true",
                       help="ignore the env's reward threshold")
    train.add_argument("--backend", choices=("native", "rllib"), default="native",
                       help="native: rlblocks' own PPO (default); rllib: RLlib on Ray with "
                       "rlblocks' module and connectors (needs the ray extra)")
    train.add_argument("--algo", choices=("PPO", "APPO", "IMPALA", "DQN", "SAC"),
                       default=None, help="RLlib algorithm (--backend rllib; default PPO); "
                       "DQN/SAC options go in the config's rllib.training block")
    train.add_argument("--num-env-runners", type=int, default=None,
                       help="Ray env-runner actors (--backend rllib; default 0: sample in "
                       "the driver)")
    train.add_argument("--num-envs-per-env-runner", type=int, default=None,
                       help="vector envs per env runner (--backend rllib; default num_envs)")
    train.add_argument("--ray-address", default=None,
                       help="address of a running Ray cluster (--backend rllib; default: "
                       "start a local Ray sized to the machine)")
    train.set_defaults(func=_guard(_train, "train"))

    evaluate = sub.add_parser("evaluate", help="evaluate a run's latest checkpoint")
    evaluate.add_argument("run_dir", help="run directory or checkpoint directory")
    evaluate.add_argument("--episodes", type=int, default=10, help="episodes to run")
    evaluate.add_argument("--explore", action="store_true", help="sample actions")
    evaluate.add_argument("--seed", type=int, default=None, help="evaluation env seed")
    evaluate.add_argument("--exported", metavar="FILE", default=None,
                          help="run an exported policy (.onnx or .pt2 from `rlblocks export`) "
                          "instead of the checkpoint, on the run's env")
    evaluate.set_defaults(func=_guard(_evaluate, "evaluate"))

    export = sub.add_parser("export", help="export a run's policy to ONNX or torch.export")
    export.add_argument("run_dir", help="run directory or checkpoint directory")
    export.add_argument("--format", choices=["onnx", "torch-export"], default="onnx",
                        help="artifact format (default onnx; needs rlblocks[export])")
    export.add_argument("--out", default=None, metavar="FILE",
                        help="artifact path (default RUN_DIR/policy.onnx or policy.pt2); the "
                        "JSON sidecar is written next to it as FILE.json")
    export.set_defaults(func=_guard(_export, "export"))

    tuned = sub.add_parser("tuned", help="list the tuned configs, or print one")
    tuned.add_argument("name", nargs="?", help="print this tuned config's YAML")
    tuned.add_argument("--list", action="store_true", help="list them (the default)")
    tuned.set_defaults(func=_guard(_tuned, "tuned"))

    plot = sub.add_parser("plot", help="learning curve PNG of a run")
    plot.add_argument("run_dir", help="run directory")
    plot.add_argument("--out", default=None, help="PNG path (default RUN_DIR/progress.png)")
    plot.add_argument("--x", default="timesteps_total", help="x column of progress.csv")
    plot.add_argument("--y", default="episode_return_mean", help="y column of progress.csv")
    plot.set_defaults(func=_guard(_plot, "plot"))
