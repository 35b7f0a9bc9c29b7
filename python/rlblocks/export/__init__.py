"""Deploying a trained policy without the trainer (the ``export`` extra for ONNX).

* :func:`export_policy` writes one artifact (ONNX or ``torch.export``) holding the model,
  the observation filter's statistics and the deterministic action selection, plus a JSON
  sidecar describing its inputs and outputs (:mod:`rlblocks.export.sidecar`).
* :class:`OnnxPolicy` acts with an ``.onnx`` artifact from raw observations through
  onnxruntime and rlblocks' C++ preprocessor, without importing torch;
  :class:`TorchExportPolicy` does the same with a ``.pt2`` one.
* :func:`evaluate_exported` runs episodes with either.
* :func:`rllib_run` tells a ``--backend rllib`` run from a native one (its ``config.json``).

Names are imported on first use, so ``from rlblocks.export import OnnxPolicy`` never loads
torch.

Examples:
    >>> from rlblocks.export import export_policy, OnnxPolicy   # doctest: +SKIP
    >>> path = export_policy("rlblocks_runs/PPO_CartPole-v1_x")  # doctest: +SKIP
    >>> OnnxPolicy(path).compute_single_action(obs)              # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

__all__ = [
    "ExportedPolicy",
    "OnnxPolicy",
    "TorchExportPolicy",
    "evaluate_exported",
    "export_policy",
    "load_exported",
    "rllib_run",
]

_LAZY = {
    "export_policy": "rlblocks.export.exporter",
    "ExportedPolicy": "rlblocks.export.runtime",
    "OnnxPolicy": "rlblocks.export.onnx_policy",
    "TorchExportPolicy": "rlblocks.export.torch_policy",
    "evaluate_exported": "rlblocks.export.evaluate",
    "load_exported": "rlblocks.export.evaluate",
}


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


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'rlblocks.export' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    return sorted(__all__)
