"""``rlblocks evaluate RUN_DIR``: plays episodes with a run's newest checkpoint (or an
exported policy of it) and prints a JSON summary; the run directory is only read.

Examples:
    >>> from rlblocks.cli import build_parser
    >>> build_parser().parse_args(["evaluate", "runs/a", "--episodes", "3"]).episodes
    3
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rlblocks.cli._args import (
    add_checkpoint_choice,
    add_command,
    add_run_dir,
    chosen_checkpoint,
    refuse_checkpoint_choice,
    restore_chosen,
    say_checkpoint,
)
from rlblocks.cli._rllib_backend import rllib_evaluate_run, rllib_run


def add_parser(sub: Any) -> None:
    """Adds ``evaluate`` to an argparse subparsers object."""
    evaluate = add_command(
        sub,
        "evaluate",
        run,
        help="evaluate a run's checkpoint",
        description="Plays episodes with a run's checkpoint (--checkpoint; or a given "
        "checkpoint directory) and prints a JSON summary; the run directory is only read.",
    )
    add_run_dir(evaluate)
    add_checkpoint_choice(evaluate)
    evaluate.add_argument("--episodes", type=int, default=10, help="episodes to run")
    evaluate.add_argument("--explore", action="store_true", help="sample actions")
    evaluate.add_argument("--seed", type=int, default=None, help="evaluation env seed")
    evaluate.add_argument(
        "--exported",
        metavar="FILE",
        default=None,
        help="run an exported policy (.onnx or .pt2 from `rlblocks export`) "
        "instead of the checkpoint, on the run's env",
    )
    evaluate.add_argument(
        "--opponent",
        metavar="WHO",
        default=None,
        help="turn-based games: play --episodes games against WHO (random: a random legal "
        "player; snapshot: the run's opponent pool; a run directory: that run's policy; "
        "human: you, on the terminal) and print wins / draws / losses; seats alternate",
    )


def run(args: argparse.Namespace) -> int:
    """Prints the evaluation's JSON summary (an RLlib run evaluates without starting Ray; a
    multi-agent run's ``--exported`` plays every policy's artifact together; ``--opponent``:
    :mod:`rlblocks.cli.versus`)."""
    if args.opponent is not None:
        return _versus(args)
    if rllib_run(args.run_dir):
        refuse_checkpoint_choice(args)
        if args.exported is not None:
            print(json.dumps(_rllib_exported(args)))
            return 0
        print(
            json.dumps(
                rllib_evaluate_run()(
                    args.run_dir, args.episodes, explore=args.explore, seed=args.seed
                )
            )
        )
        return 0
    ckpt, said = chosen_checkpoint(args)
    exported = None if args.exported is None else _load_exported(args)
    if exported is not None:
        result = _exported_from_run_files(args, exported, ckpt)
        if result is not None:
            say_checkpoint("evaluate", said)
            print(json.dumps(result))
            return 0
    trainer, said = restore_chosen(args, ckpt, said)
    try:
        if args.exported is not None and hasattr(trainer, "policies"):
            result = _multiagent_exported(args, trainer)
        elif args.exported is not None and exported is None:
            raise ValueError(
                f"--exported {args.exported}: name the artifact file of this single-agent "
                "run (e.g. RUN_DIR/policy.onnx)"
            )
        elif exported is not None:
            from rlblocks.export.evaluate import evaluate_exported

            result = evaluate_exported(
                exported,
                trainer.evaluation_env(),
                args.episodes,
                seed=trainer.evaluation_seed(args.seed),
            )
            result["exported"] = str(args.exported)
        else:
            result = trainer.evaluate(args.episodes, explore=args.explore, seed=args.seed)
    finally:
        trainer.close()
    result["checkpoint"] = str(trainer.checkpoint_path)
    say_checkpoint("evaluate", said)
    print(json.dumps(result))
    return 0


def _versus(args: argparse.Namespace) -> int:
    """``--opponent``: games of a native turn-based run (:func:`rlblocks.cli.versus.versus`)."""
    if rllib_run(args.run_dir):
        raise ValueError(
            f"--opponent {args.opponent}: games against an opponent are played with native "
            "runs (this is a --backend rllib run)"
        )
    from rlblocks.cli.versus import versus

    trainer, said = restore_chosen(args, *chosen_checkpoint(args))
    try:
        exported = None
        if args.exported is not None and hasattr(trainer, "policies"):
            from rlblocks.export.evaluate_multiagent import exported_policy_files

            files = exported_policy_files(args.exported, list(trainer.policies))
            exported = {pid: _load_exported(args, path) for pid, path in files.items()}
        result = versus(args, trainer, exported)
        if exported is not None:
            result["exported"] = {pid: str(path) for pid, path in files.items()}
    finally:
        trainer.close()
    result["checkpoint"] = str(trainer.checkpoint_path)
    say_checkpoint("evaluate", said)
    print(json.dumps(result))
    return 0


#: The config class of each single-agent checkpoint format (meta.json's ``format``).
_CONFIGS = {
    "rlblocks.ppo": "PPOConfig",
    "rlblocks.dqn": "DQNConfig",
    "rlblocks.sac": "SACConfig",
    "rlblocks.td3": "TD3Config",
    "rlblocks.ddpg": "DDPGConfig",
}


def _exported_from_run_files(
    args: argparse.Namespace, exported: Any, ckpt: Any
) -> dict[str, Any] | None:
    """``--exported`` on a native single-agent run from its ``config.json`` and the chosen
    checkpoint's (``ckpt``) ``meta.json`` alone, as the restored trainer would evaluate it
    (the run's seed, a fresh evaluation env) without importing torch. None when those files do
    not say enough (a checkpoint saved before meta.json held the seed, an env that config.json
    cannot name): the caller restores the trainer then."""
    from pathlib import Path

    from rlblocks.train import offpolicy_config, trainer_config
    from rlblocks.train.checkpoint import checkpoint_meta, checkpoint_run_dir

    meta = checkpoint_meta(ckpt)
    name = _CONFIGS.get(str(meta.get("format")))
    if name is None or not isinstance(meta.get("seed"), int):
        return None
    try:
        data = json.loads((checkpoint_run_dir(ckpt) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("env"), str):
        return None
    module = trainer_config if name == "PPOConfig" else offpolicy_config
    data.pop("algo", None)  # config.json names the algorithm (rlblocks.train.trainer.json_config)
    config = getattr(module, name).from_dict(data)
    from rlblocks.export.evaluate import evaluate_exported
    from rlblocks.train.envs import evaluation_env, evaluation_seed

    seed = evaluation_seed(meta["seed"], args.seed)
    result = evaluate_exported(exported, evaluation_env(config), args.episodes, seed=seed)
    result["exported"] = str(args.exported)
    result["checkpoint"] = str(Path(ckpt))
    return result


def _load_exported(args: argparse.Namespace, path: Any = None) -> Any:
    """The ``--exported`` artifact (or ``path``; refused with ``--explore``). A multi-agent
    artifact, or a folder, is loaded by :func:`_multiagent_exported` instead (None)."""
    if args.explore:
        raise ValueError(
            "--exported runs the exported deterministic actions; --explore "
            "cannot be combined with it"
        )
    from pathlib import Path

    from rlblocks.export.evaluate import load_exported

    target = Path(args.exported if path is None else path)
    if path is None and (target.is_dir() or "multiagent" in _sidecar_or_empty(target)):
        return None
    try:
        return load_exported(target)
    except ImportError as err:  # the export extra is missing
        raise ValueError(str(err)) from err


def _sidecar_or_empty(path: Any) -> dict[str, Any]:
    """The artifact's sidecar ({} when it cannot be read: loading it says why)."""
    from rlblocks.export.sidecar import read_sidecar

    try:
        return dict(read_sidecar(path))
    except (ValueError, OSError):
        return {}


def _multiagent_exported(args: argparse.Namespace, trainer: Any) -> dict[str, Any]:
    """``--exported`` on a native multi-agent run: every policy's ``policy_<id>`` artifact
    (next to the one named, or in the folder named) acting for its agents together, as
    :meth:`~rlblocks.train.multiagent.MultiAgentPPOTrainer.evaluate` plays."""
    from rlblocks.export.evaluate_multiagent import (
        evaluate_exported_multiagent,
        exported_policy_files,
    )
    from rlblocks.train.multiagent import multiagent_creator

    files = exported_policy_files(args.exported, list(trainer.policies))
    policies = {pid: _load_exported(args, path) for pid, path in files.items()}
    cfg = trainer.config
    result = evaluate_exported_multiagent(
        policies,
        multiagent_creator(cfg),
        cfg.multiagent,
        args.episodes,
        trainer.evaluation_seed(args.seed),
        clip_actions=cfg.clip_actions,
        name=cfg.env_name,
    )
    result["exported"] = {pid: str(path) for pid, path in files.items()}
    return result


def _rllib_exported(args: argparse.Namespace) -> dict[str, Any]:
    """``--exported`` on a ``--backend rllib`` run: the artifact on the run's env, with the
    seeds the module's own evaluation uses."""
    exported = _load_exported(args)
    try:
        from rlblocks.rllib import evaluate as rllib_evaluate
    except ImportError as err:
        raise ValueError(str(err)) from None
    policy_ids = rllib_evaluate.multiagent_policies(args.run_dir)
    if policy_ids:
        from rlblocks.export.evaluate_multiagent import exported_policy_files

        files = exported_policy_files(args.exported, policy_ids)
        policies = {pid: _load_exported(args, path) for pid, path in files.items()}
        result = rllib_evaluate.evaluate_exported_multiagent_run(
            args.run_dir, policies, args.episodes, seed=args.seed
        )
        result["exported"] = {str(pid): str(path) for pid, path in files.items()}
        return dict(result)
    if exported is None:
        raise ValueError(
            f"--exported {args.exported}: name the artifact file of this single-agent run "
            "(e.g. RUN_DIR/policy.onnx)"
        )
    evaluate_exported_run = rllib_evaluate.evaluate_exported_run
    result = evaluate_exported_run(args.run_dir, exported, args.episodes, seed=args.seed)
    result["exported"] = str(args.exported)
    return dict(result)
