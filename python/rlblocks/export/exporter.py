"""``export_policy``: write a trained policy as one ONNX or torch.export artifact + sidecar.

Examples:
    >>> from rlblocks.train import PPOConfig, PPOTrainer
    >>> trainer = PPOTrainer(PPOConfig(env="CartPole-v1", num_envs=1))
    >>> import tempfile, os
    >>> out = export_policy(trainer, os.path.join(tempfile.mkdtemp(), "p.pt2"), "torch-export")
    >>> out.name, sorted(p.name for p in out.parent.iterdir())
    ('p.pt2', ['p.pt2', 'p.pt2.json'])
    >>> trainer.close()
"""

from __future__ import annotations

import io
import json
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

__all__ = ["FORMATS", "export_policies", "export_policy", "rllib_run"]

#: ``fmt`` -> default file suffix.
FORMATS = {"onnx": ".onnx", "torch-export": ".pt2"}

_EXTRA_HINT = 'pip install "rlblocks[export]"'


def rllib_run(source: Any) -> bool:
    """Whether ``source`` is the directory of a ``--backend rllib`` run or of one of its
    checkpoints (its ``config.json`` says so; nothing of Ray is imported).

    Examples:
        >>> rllib_run("no/such/run"), rllib_run(object())
        (False, False)
    """
    if not isinstance(source, (str, Path)):
        return False
    for candidate in (Path(source), Path(source).parent):
        cfg = candidate / "config.json"
        if cfg.is_file():
            try:
                backend = json.loads(cfg.read_text()).get("backend")
            except (ValueError, AttributeError):
                return False
            return isinstance(backend, dict) and backend.get("name") == "rllib"
    return False


def _rllib_export() -> Any:
    """:mod:`rlblocks.rllib.export`; without Ray a ValueError naming the extra."""
    try:
        from rlblocks.rllib import export
    except ImportError as err:
        raise ValueError(f"export: this run was trained with --backend rllib; {err}") from None
    return export


def _trainer(source: Any) -> tuple[Any, bool]:
    """``(trainer, opened_here)`` for a trainer or a run / checkpoint directory."""
    if (hasattr(source, "policy") and hasattr(source, "preprocessor")) or hasattr(
        source, "policies"
    ):
        return source, False
    from rlblocks.train.restoring import restore_trainer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # envs not stored: irrelevant here
        return restore_trainer(source, log=False), True


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


def export_policy(source: Any, path: str | Path | None = None, fmt: str = "onnx") -> Path:
    """Exports a trained policy to ``path`` (and ``path + ".json"``, the sidecar).

    Args:
        source: A :class:`~rlblocks.train.PPOTrainer`, or a run / checkpoint directory
            (its newest checkpoint is restored); a ``--backend rllib`` run's goes through
            :func:`rlblocks.rllib.export.export_rllib_policy` (the module of the checkpoint,
            loaded without Ray; needs the ``ray`` extra).
        path: The artifact's path; default ``RUN_DIR/policy.onnx`` (``policy.pt2`` for
            torch.export), or ``policy.onnx`` in the current directory for a trainer
            without a run directory.
        fmt: ``"onnx"`` or ``"torch-export"``.

    Returns:
        The artifact's path.

    Raises:
        ValueError: An unknown format, no checkpoint, or a policy that cannot be traced.
        ImportError: ``fmt="onnx"`` without the ``export`` extra.
    """
    if fmt not in FORMATS:
        raise ValueError(f"export: unknown format {fmt!r}; choose one of {sorted(FORMATS)}")
    if rllib_run(source):
        return Path(_rllib_export().export_rllib_policy(source, path, fmt))
    trainer, opened = _trainer(source)
    if hasattr(trainer, "policies"):
        if opened:
            trainer.close()
        raise ValueError(
            "export: this is a multi-agent run; export_policies writes one artifact per "
            "policy (rlblocks export does it)"
        )
    try:
        if path is None:
            base = (
                trainer.run_dir
                if trainer.run_dir is not None
                else (
                    trainer.checkpoint_path.parent
                    if trainer.checkpoint_path is not None
                    else Path(".")
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
    finally:
        if opened:
            trainer.close()


class _PolicyOfRun:
    """One policy of a multi-agent trainer, seen as the single-agent trainer
    :func:`export_policy` exports (its union space is the artifact's observation)."""

    def __init__(self, trainer: Any, policy_id: str) -> None:
        parts = trainer.policies[policy_id]
        self.policy, self.preprocessor = parts.policy, parts.preprocessor
        self.obs_filter, self.config = parts.obs_filter, parts.config
        self.venv = trainer.hub.lanes(policy_id)
        self.run_dir, self.checkpoint_path = trainer.run_dir, trainer.checkpoint_path
        spec = trainer.hub.specs[policy_id]
        self.sidecar_extra = {
            "multiagent": {
                "policy_id": policy_id,
                "agents": [str(a) for a in spec.agents],
                "agent_id_one_hot": spec.agent_id_one_hot,
                "agent_observation_spaces": {
                    str(a): space_to_json(s) for a, s in spec.obs_spaces.items()
                },
                "agent_action_spaces": {
                    str(a): space_to_json(s) for a, s in spec.action_spaces.items()
                },
            }
        }


def export_policies(
    source: Any, out_dir: str | Path | None = None, fmt: str = "onnx"
) -> dict[str, Path]:
    """Exports every policy of a multi-agent run as ``policy_<id>.onnx`` (or ``.pt2``) with
    its sidecar; its ``multiagent`` entry names the policy's agents and their own spaces
    (:class:`~rlblocks.multiagent.union.UnionSpec` rebuilt from them turns an agent's
    observation into the artifact's input). A single-agent run gives ``{"default": path}``.

    Args:
        source: A trainer, or a run / checkpoint directory (a ``--backend rllib`` run's:
            :func:`rlblocks.rllib.export.export_rllib_policies`).
        out_dir: Where the artifacts go (default: the run directory).
        fmt: ``"onnx"`` or ``"torch-export"``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"export: unknown format {fmt!r}; choose one of {sorted(FORMATS)}")
    if rllib_run(source):
        found = _rllib_export().export_rllib_policies(source, out_dir, fmt)
        return {str(k): Path(v) for k, v in found.items()}
    trainer, opened = _trainer(source)
    try:
        if not hasattr(trainer, "policies"):
            target = None if out_dir is None else Path(out_dir) / f"policy{FORMATS[fmt]}"
            return {"default": export_policy(trainer, target, fmt)}
        base = Path(out_dir) if out_dir is not None else trainer.run_dir
        if base is None:
            base = trainer.checkpoint_path.parent if trainer.checkpoint_path else Path(".")
        out = {}
        for pid in trainer.policies:
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in pid)
            out[pid] = export_policy(
                _PolicyOfRun(trainer, pid), Path(base) / f"policy_{safe}{FORMATS[fmt]}", fmt
            )
        return out
    finally:
        if opened:
            trainer.close()
