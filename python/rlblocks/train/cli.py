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
import re
import shutil
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlblocks.train.checkpoint import checkpoint_meta, find_checkpoint, list_checkpoints
from rlblocks.train.logger import read_progress

__all__ = ["add_subcommands", "load_config_file", "parse_overrides"]

#: ``rlblocks train`` stops here when neither --stop-timesteps nor the env's reward
#: threshold ends the run first.
DEFAULT_STOP_TIMESTEPS = 500_000

#: The stop conditions a run of ``rlblocks train`` went by (a ``--resume`` goes on by them).
STOP_FILE = "stop.json"

#: Config keys whose value is a mapping of further keys (``--set model.KEY=VALUE``).
_MAPPING_KEYS = {"model": "model.fcnet_hiddens=[64,64]", "env_config": "env_config.size=8",
                 "rllib": "rllib.training.n_step=3",
                 "stop": "stop.timesteps_total=100000"}


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


def _yaml_load(text: str) -> Any:
    """``yaml.safe_load``, but ``1e5`` and ``1e-3`` are numbers (YAML 1.2), as ``--set``
    reads them, not the strings of YAML 1.1."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
        list("-+0123456789."))
    return yaml.load(text, Loader=Loader)  # noqa: S506 (a SafeLoader subclass)


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
            data = _yaml_load(text)
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
    """The env's reward threshold; None if it has none or is not a known id (a bad id
    is reported when the trainer makes the env)."""
    from rlblocks.train.rollout import env_spec

    try:
        spec = env_spec(env)
    except ValueError:
        return None
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
    and the ``stop`` block (of the file or tuned config, changed by ``--set stop.KEY=V``)."""
    from rlblocks.train.tuned import load_tuned, split_stop

    if args.tuned and (args.config or args.env):
        raise ValueError("--tuned NAME brings its own env and config: use --set to change "
                         "keys of it, or --config / --env without --tuned")
    if args.tuned:
        tuned = load_tuned(args.tuned)
        stop = {"episode_return_mean": tuned.stop_reward, "timesteps_total": tuned.stop_timesteps}
        base = {**tuned.config, "stop": {k: v for k, v in stop.items() if v is not None}}
    else:
        base = load_config_file(args.config) if args.config else {}
    overrides = parse_overrides(args.set or [])
    merged = _merge(base, overrides)
    for key, example in _MAPPING_KEYS.items():
        value = merged.get(key)
        if value is not None and not isinstance(value, dict):
            where = "--set" if key in overrides else "the config's"
            raise ValueError(f"{where} {key}={value!r}: {key} must be a mapping of keys "
                             f"(e.g. --set {example}), got {type(value).__name__}")
    data, reward, steps = split_stop(merged)
    if args.env:
        data["env"] = args.env
    if not data.get("env"):
        raise ValueError("give an environment: --env ENV, --tuned NAME (`rlblocks tuned` "
                         "lists them) or 'env' in the --config file")
    if not args.tuned and not args.config:
        _hint_tuned(str(data["env"]), data.get("model") or {})
    return data, (reward, steps)


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
    """The command line's stop flags, by the same check as a config's ``stop`` block."""
    from rlblocks.train.tuned import stop_value

    if args.stop_timesteps is not None:
        stop_value("timesteps_total", args.stop_timesteps, "--stop-timesteps")
    if args.stop_reward is not None:
        stop_value("episode_return_mean", args.stop_reward, "--stop-reward")


def _saved_stops(run_dir: str | Path) -> dict[str, Any]:
    """The stop conditions of ``run_dir``'s ``stop.json`` (``{}`` if it has none)."""
    path = Path(run_dir) / STOP_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _run_env(run_dir: Path) -> Any:
    """The ``env`` of ``run_dir``'s ``config.json`` (None if unreadable)."""
    try:
        data = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return data.get("env") if isinstance(data, dict) else None


def _write_stops(run_dir: Path, stop_reward: float | None, stop_timesteps: int) -> None:
    (run_dir / STOP_FILE).write_text(json.dumps(
        {"episode_return_mean": stop_reward, "timesteps_total": stop_timesteps}) + "\n")


class _Stops:
    """The stop conditions of a ``train`` command and where each came from (for messages)."""

    def __init__(self, args: argparse.Namespace, file_stops: tuple[Any, Any], env: Any,
                 saved: dict[str, Any]) -> None:
        self.reward: float | None
        if args.stop_reward is not None:
            self.reward, self.reward_from = args.stop_reward, "--stop-reward"
        elif file_stops[0] is not None:
            self.reward, self.reward_from = file_stops[0], "stop.episode_return_mean"
        elif args.no_default_stop_reward:
            self.reward, self.reward_from = None, ""
        elif "episode_return_mean" in saved:
            self.reward, self.reward_from = saved["episode_return_mean"], "stop.episode_return_mean"
        else:
            self.reward = _default_stop_reward(env)
            self.reward_from = "the env's reward threshold"
        if args.stop_timesteps is not None:
            self.timesteps, self.timesteps_from = args.stop_timesteps, "--stop-timesteps"
        elif file_stops[1] is not None:
            self.timesteps, self.timesteps_from = file_stops[1], "stop.timesteps_total"
        elif isinstance(saved.get("timesteps_total"), int):
            self.timesteps, self.timesteps_from = saved["timesteps_total"], "stop.timesteps_total"
        else:
            self.timesteps, self.timesteps_from = DEFAULT_STOP_TIMESTEPS, "the default budget"

    def check_not_met(self, steps: int, last_return: Any) -> None:
        """Refuses a ``--resume`` whose stop condition the run has already met (it would
        end at once): the message says how to extend it."""
        if steps >= self.timesteps:
            if self.timesteps_from == "--stop-timesteps":
                raise ValueError(f"--stop-timesteps {self.timesteps}: the run already has "
                                 f"{steps} steps")
            raise ValueError(f"the run is already done: {self.timesteps_from}="
                             f"{self.timesteps} already reached at {steps:,} steps; pass "
                             f"--stop-timesteps N larger than {steps} to train on")
        try:
            ret = float(last_return)
        except (TypeError, ValueError):
            return
        if self.reward is None or math.isnan(ret) or ret < self.reward:
            return
        reached = f"a mean return of {ret:.1f} at {steps:,} steps"
        if self.reward_from == "--stop-reward":
            raise ValueError(f"--stop-reward {self.reward:g}: the run already has {reached}; "
                             f"pass a --stop-reward larger than {ret:.1f}")
        why = "" if self.reward_from.startswith("stop.") else f" ({self.reward_from})"
        raise ValueError(f"the run is already done: stop.episode_return_mean={self.reward:g}"
                         f"{why} already reached with {reached}; pass --stop-reward R larger "
                         f"than {ret:.1f}, or --no-default-stop-reward to train on to the "
                         "step budget")


def _last_return(path: str | Path, meta: dict[str, Any]) -> Any:
    """The checkpoint's mean return: its ``meta.json`` (else its progress.csv row)."""
    if "episode_return_mean" in meta:
        return meta["episode_return_mean"]
    ckpt = find_checkpoint(path)
    for row in read_progress(ckpt.parent):
        if row.get("training_iteration") == meta.get("iteration"):
            return row.get("episode_return_mean")
    return None


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

    _check_stops(args)
    flags = _rllib_flags(args)
    if args.resume and (args.config or args.set or args.env or args.tuned):
        raise ValueError("--resume continues a run with its saved config; --env, --config, "
                         "--tuned and --set cannot be combined with it")
    created: Path | None = None  # a run directory this command made (removed if it fails)
    trainer: Any = None
    try:
        if args.resume and _rllib_run(args.resume):
            trainer = _rllib_trainer().RLlibTrainer.restore(args.resume,
                                                            ray_address=flags["ray_address"])
            stops = _Stops(args, (None, None), trainer.config.env, _saved_stops(trainer.run_dir))
            stops.check_not_met(trainer.timesteps_total,
                                trainer.last_metrics.get("episode_return_mean"))
        elif args.resume:
            meta = checkpoint_meta(args.resume)
            run = find_checkpoint(args.resume).parent
            stops = _Stops(args, (None, None), _run_env(run), _saved_stops(run))
            stops.check_not_met(int(meta["timesteps_total"]), _last_return(args.resume, meta))
            trainer = _restore(args.resume)
        else:
            data, file_stops = _config_data(args)
            config = PPOConfig.from_dict(data)
            stops = _Stops(args, file_stops, config.env, {})
            target = (Path(args.run_dir) if args.run_dir
                      else _default_run_dir(config, args.runs_root))
            created = None if target.exists() else target
            trainer = _new_trainer(args, flags, config, target)
        return _fit(args, trainer, stops)
    except BaseException:
        if created is not None and not list_checkpoints(created) and not read_progress(created):
            shutil.rmtree(created, ignore_errors=True)  # a failed start leaves nothing behind
        raise
    finally:
        if trainer is not None:
            trainer.close()


def _default_run_dir(config: Any, root: str) -> Path:
    from rlblocks.train.ppo import default_run_dir

    return default_run_dir(config, root)


def _new_trainer(args: argparse.Namespace, flags: dict[str, Any], config: Any,
                 target: Path) -> Any:
    if args.backend == "rllib":
        return _rllib_trainer().RLlibTrainer(
            config, target, algo=flags["algo"] or "PPO",
            num_env_runners=flags["num_env_runners"] or 0,
            num_envs_per_env_runner=flags["num_envs_per_env_runner"],
            ray_address=flags["ray_address"])
    from rlblocks.train.ppo import PPOTrainer

    return PPOTrainer(config, run_dir=target)


def _fit(args: argparse.Namespace, trainer: Any, stops: _Stops) -> int:
    from rlblocks.train.plot import plot_run

    cfg = trainer.config
    run_dir = trainer.run_dir
    _write_stops(Path(run_dir), stops.reward, stops.timesteps)
    until = f"a mean return >= {stops.reward} or " if stops.reward is not None else ""
    algo = (f"{trainer.backend['algo']} (RLlib, {trainer.backend['num_env_runners']} env "
            f"runners)" if hasattr(trainer, "backend") else "PPO")
    print(f"rlblocks train: {algo} on {cfg.env_name}, {cfg.num_envs} envs, until {until}"
          f"{stops.timesteps} steps; run directory: {run_dir}", flush=True)
    metrics = trainer.fit(stop_reward=stops.reward, stop_timesteps=stops.timesteps,
                          progress=not args.no_progress)
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
    train = sub.add_parser(
        "train", help="train PPO on a gymnasium env",
        description="Trains PPO with a progress bar and writes a run directory: config.json, "
        "stop.json, progress.csv, checkpoint_NNNNNN/ and progress.png. --set values are read "
        "as YAML (lr=1e-3, model.fcnet_hiddens=[32,32], observation_filter=MeanStdFilter); "
        "dotted keys reach into model, env_config and stop. A --config file or a --tuned "
        "config may end with a stop: {episode_return_mean: R, timesteps_total: N} block. "
        "--resume RUN_DIR continues a run by its saved config and stop conditions; "
        "resuming from an older checkpoint moves the later ones into abandoned_<time>/.")
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

    evaluate = sub.add_parser(
        "evaluate", help="evaluate a run's latest checkpoint",
        description="Plays episodes with a run's newest checkpoint (or a given checkpoint "
        "directory) and prints a JSON summary; the run directory is only read.")
    evaluate.add_argument("run_dir", help="run directory or checkpoint directory")
    evaluate.add_argument("--episodes", type=int, default=10, help="episodes to run")
    evaluate.add_argument("--explore", action="store_true", help="sample actions")
    evaluate.add_argument("--seed", type=int, default=None, help="evaluation env seed")
    evaluate.add_argument("--exported", metavar="FILE", default=None,
                          help="run an exported policy (.onnx or .pt2 from `rlblocks export`) "
                          "instead of the checkpoint, on the run's env")
    evaluate.set_defaults(func=_guard(_evaluate, "evaluate"))

    export = sub.add_parser(
        "export", help="export a run's policy to ONNX or torch.export",
        description="Writes the policy of a run's newest checkpoint as an ONNX or "
        "torch.export artifact with a JSON sidecar describing its inputs and outputs.")
    export.add_argument("run_dir", help="run directory or checkpoint directory")
    export.add_argument("--format", choices=["onnx", "torch-export"], default="onnx",
                        help="artifact format (default onnx; needs rlblocks[export])")
    export.add_argument("--out", default=None, metavar="FILE",
                        help="artifact path (default RUN_DIR/policy.onnx or policy.pt2); the "
                        "JSON sidecar is written next to it as FILE.json")
    export.set_defaults(func=_guard(_export, "export"))

    tuned = sub.add_parser(
        "tuned", help="list the tuned configs, or print one",
        description="Lists the tuned configs shipped with rlblocks (env, model, target, last "
        "measurement), or prints one's YAML; run one with rlblocks train --tuned NAME.")
    tuned.add_argument("name", nargs="?", help="print this tuned config's YAML")
    tuned.add_argument("--list", action="store_true", help="list them (the default)")
    tuned.set_defaults(func=_guard(_tuned, "tuned"))

    plot = sub.add_parser(
        "plot", help="learning curve PNG of a run",
        description="Plots one progress.csv column against another into a PNG (the "
        "directory of --out must exist).")
    plot.add_argument("run_dir", help="run directory")
    plot.add_argument("--out", default=None, help="PNG path (default RUN_DIR/progress.png)")
    plot.add_argument("--x", default="timesteps_total", help="x column of progress.csv")
    plot.add_argument("--y", default="episode_return_mean", help="y column of progress.csv")
    plot.set_defaults(func=_guard(_plot, "plot"))
