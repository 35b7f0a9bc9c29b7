"""``rlblocks export RUN_DIR``: writes the policy of a run's newest checkpoint as an ONNX or
torch.export artifact with a JSON sidecar (:mod:`rlblocks.export`).

Examples:
    >>> from rlblocks.cli import build_parser
    >>> build_parser().parse_args(["export", "runs/a"]).format
    'onnx'
"""

from __future__ import annotations

import argparse
from typing import Any

from rlblocks.cli._args import (
    add_checkpoint_choice,
    add_command,
    add_run_dir,
    chosen_checkpoint,
    refuse_checkpoint_choice,
    say_checkpoint,
)


def add_parser(sub: Any) -> None:
    """Adds ``export`` to an argparse subparsers object."""
    export = add_command(
        sub,
        "export",
        run,
        help="export a run's policy to ONNX or torch.export",
        description="Writes the policy of a run's checkpoint (--checkpoint; native or "
        "--backend rllib) as an ONNX or torch.export artifact with a JSON sidecar "
        "describing its inputs and outputs.",
    )
    add_run_dir(export)
    add_checkpoint_choice(export)
    export.add_argument(
        "--format",
        choices=["onnx", "torch-export"],
        default="onnx",
        help="artifact format (default onnx; needs rlblocks[export])",
    )
    export.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="artifact path (default RUN_DIR/policy.onnx or policy.pt2); the "
        "JSON sidecar is written next to it as FILE.json",
    )


def run(args: argparse.Namespace) -> int:
    """Exports and prints the artifact's and the sidecar's paths."""
    from rlblocks.export.exporter import export_policies, export_policy, rllib_run
    from rlblocks.export.sidecar import sidecar_path
    from rlblocks.train.checkpoint import checkpoint_meta

    try:
        one: Any = export_policy
        many: Any = export_policies
        source, said = args.run_dir, ""
        if rllib_run(args.run_dir):  # the RLlib exporter (the checkpoint's module, no Ray)
            refuse_checkpoint_choice(args)
            rllib = _rllib_export()
            one, many = rllib.export_rllib_policy, rllib.export_rllib_policies
            multiagent = bool(rllib.is_multiagent_run(args.run_dir))
        else:
            source, said = chosen_checkpoint(args)
            multiagent = checkpoint_meta(source).get("format") == "rlblocks.ppo.multiagent"
        if multiagent:
            if args.out is not None:
                raise ValueError(
                    "--out names one file; a multi-agent run writes policy_<id> files into "
                    "its run directory"
                )
            paths = list(many(source, fmt=args.format).values())
        else:
            paths = [one(source, args.out, fmt=args.format)]
    except ImportError as err:  # the export extra is missing
        raise ValueError(str(err)) from err
    if said:
        say_checkpoint("export", said)
    for path in paths:
        print(f"exported: {path}\nsidecar: {sidecar_path(path)}")
    return 0


def _rllib_export() -> Any:
    """:mod:`rlblocks.rllib.export`; without Ray a ValueError naming the extra."""
    try:
        from rlblocks.rllib import export
    except ImportError as err:
        raise ValueError(f"export: this run was trained with --backend rllib; {err}") from None
    return export
