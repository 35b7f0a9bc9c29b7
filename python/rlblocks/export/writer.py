"""``write_policy``: one trainer-like policy as an ONNX or torch.export artifact + sidecar
(the writing half of :func:`rlblocks.export.export_policy`, which finds and opens the
source; :mod:`rlblocks.rllib.export` writes RLlib runs' policies through it too).
"""

from __future__ import annotations

import io
import logging
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlblocks.export.graph import PolicyGraph
from rlblocks.export.sidecar import (
    PREPROCESSOR_OPTIONS,
    space_to_json,
    write_sidecar,
)

__all__ = ["FORMATS", "write_policy"]

#: ``fmt`` -> default file suffix.
FORMATS = {"onnx": ".onnx", "torch-export": ".pt2"}

_EXTRA_HINT = 'pip install "rlblocks[export]"'


def _sidecar(trainer: Any, graph: PolicyGraph, artifact: Path, fmt: str) -> dict[str, Any]:
    prep = trainer.preprocessor
    cfg = trainer.config
    model_config = cfg.model_config().to_dict()
    leaves = []
    for name, path, leaf in graph.leaves:
        leaves.append(
            {
                "name": name,
                "path": list(path),
                "dtype": str(leaf.dtype),
                "shape": ["B", *(leaf.shape or ())],
                "space": space_to_json(leaf),
            }
        )
    pol = graph.policy
    with torch.no_grad():
        example = graph(*graph.example_inputs(2))
    shapes = {
        name: ["B", *t.shape[1:]] for name, t in zip(graph.output_names, example, strict=True)
    }
    inputs: list[dict[str, Any]] = [{"name": "obs", "dtype": "float32", "shape": ["B", graph.size]}]
    inputs += [
        {
            "name": f"state_in_{i}",
            "dtype": "float32",
            "shape": ["B", *s.shape],
            "initial": s.detach().cpu().float().numpy().tolist(),
        }
        for i, s in enumerate(pol.model.get_initial_state())
    ]
    if pol.n_prev_actions:
        inputs.append(
            {
                "name": "prev_actions",
                "dtype": np.dtype(pol.action_dtype).name,
                "shape": ["B", pol.n_prev_actions, *pol.action_shape],
                "initial": pol.initial_prev_action.tolist(),
            }
        )
    if pol.n_prev_rewards:
        inputs.append(
            {"name": "prev_rewards", "dtype": "float32", "shape": ["B", pol.n_prev_rewards]}
        )
    observation_extra: dict[str, Any] = {}
    if pol.mask_layout is not None and pol.mask_columns is not None:
        # The mask travels inside the obs input, at these columns (rlblocks.masks).
        observation_extra["action_mask"] = {
            "offset": int(pol.mask_columns.start),
            "size": int(pol.mask_layout.size),
            "segments": [list(seg) for seg in pol.mask_layout.segments],
        }
    return {
        "artifact": artifact.name,
        "artifact_format": fmt,
        "env": cfg.env_name,
        "observation": {
            **observation_extra,
            "space": space_to_json(trainer.venv.single_observation_space, model_config),
            "preprocessor": type(prep).__name__,
            "preprocessor_options": {k: model_config[k] for k in PREPROCESSOR_OPTIONS},
            "shape": list(prep.shape),
            "size": graph.size,
            "layout": prep.layout.describe(),
            "filter": {"kind": type(trainer.obs_filter).__name__, "baked_in": graph.has_filter},
        },
        "inputs": inputs,
        "outputs": {
            "actions": leaves,
            "dist_inputs": {
                "name": "dist_inputs",
                "dtype": "float32",
                "shape": shapes["dist_inputs"],
                "dist_class": _name(pol.dist_class),
            },
            "value": {"name": "value", "dtype": "float32", "shape": ["B"]},
            "state": [
                {"name": f"state_out_{i}", "dtype": "float32", "shape": ["B", *shape]}
                for i, shape in enumerate(graph.state_shapes)
            ],
        },
        "output_names": graph.output_names,
        "input_names": graph.input_names,
        "action_space": space_to_json(pol.action_space),
        "clip_actions": bool(cfg.clip_actions),
    }


def _name(cls: Any) -> str:
    """A distribution class's name (through ``functools.partial``)."""
    return str(
        getattr(cls, "__name__", None)
        or getattr(getattr(cls, "func", None), "__name__", type(cls).__name__)
    )


def _dynamic_shapes(graph: PolicyGraph) -> tuple[Any, ...]:
    batch = torch.export.Dim("batch", min=1, max=1 << 20)
    return (tuple({0: batch} for _ in graph.input_names),)


def _export_program(graph: PolicyGraph) -> torch.export.ExportedProgram:
    example = graph.example_inputs(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # attributes assigned during export (value_function)
        try:
            return torch.export.export(
                graph, example, dynamic_shapes=_dynamic_shapes(graph), strict=False
            )
        except Exception as err:  # torch raises many types; one clear line for the user
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise ValueError(
                f"export: torch.export cannot trace this policy ({type(err).__name__}: {first})"
            ) from err


def _write_onnx(program: torch.export.ExportedProgram, graph: PolicyGraph, path: Path) -> None:
    try:
        import onnx  # noqa: F401  (torch.onnx needs it)
        import onnxscript  # noqa: F401
    except ImportError as err:
        raise ImportError(f"ONNX export needs onnx and onnxscript: {_EXTRA_HINT}") from err
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "torchvision is not installed" lines
    with warnings.catch_warnings(), redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            onnx_program = torch.onnx.export(
                program,
                (),
                dynamo=True,
                input_names=graph.input_names,
                output_names=graph.output_names,
                external_data=False,
                verbose=False,
            )
        finally:
            quiet.setLevel(level)
    if onnx_program is None:
        raise ValueError("export: torch.onnx.export returned no program")
    onnx_program.save(str(path), external_data=False)


def write_policy(trainer: Any, path: str | Path | None, fmt: str) -> Path:
    """Writes the artifact and sidecar of a trainer-like ``trainer`` (``policy``,
    ``preprocessor``, ``obs_filter``, ``venv``, ``run_dir``, ``checkpoint_path``, optional
    ``sidecar_extra``; :func:`rlblocks.export.export_policy`'s work once the source is
    open); ``path`` None: ``policy.onnx`` / ``policy.pt2`` in the run directory.

    Raises:
        ValueError: A missing directory, or a model not on the CPU.
        ImportError: ``fmt="onnx"`` without the ``export`` extra.
    """
    if path is None:
        base = (
            trainer.run_dir
            if trainer.run_dir is not None
            else (
                trainer.checkpoint_path.parent if trainer.checkpoint_path is not None else Path(".")
            )
        )
        path = Path(base) / f"policy{FORMATS[fmt]}"
    artifact = Path(path)
    if artifact.parent and not artifact.parent.exists():
        raise ValueError(f"export: the directory {str(artifact.parent)!r} does not exist")
    policy = trainer.policy
    if policy.device.type != "cpu":
        raise ValueError("export: the model must be on the CPU (device='cpu')")
    was_training = policy.model.training
    policy.set_training(False)
    graph = PolicyGraph(policy, trainer.preprocessor.shape, trainer.obs_filter)
    try:
        program = _export_program(graph)
        if fmt == "onnx":
            _write_onnx(program, graph, artifact)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "No complete tensor found in the group"
                torch.export.save(program, str(artifact))
    finally:
        policy.set_training(was_training)
    sidecar = _sidecar(trainer, graph, artifact, fmt)
    sidecar.update(getattr(trainer, "sidecar_extra", {}))
    write_sidecar(artifact, sidecar)
    return artifact
