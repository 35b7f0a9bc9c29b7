"""``TorchExportPolicy``: an exported ``.pt2`` policy (``torch.export``) run by torch.

Examples:
    >>> from rlblocks.export import TorchExportPolicy
    >>> policy = TorchExportPolicy("policy.pt2")               # doctest: +SKIP
    >>> actions, state = policy.compute_actions(observations)  # doctest: +SKIP
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlblocks.export.runtime import ExportedPolicy
from rlblocks.export.validate import TensorSpec

__all__ = ["TorchExportPolicy"]


class TorchExportPolicy(ExportedPolicy):
    """Acts with a ``.pt2`` artifact of :func:`rlblocks.export.export_policy`.

    Args:
        path: The ``.pt2`` file (its ``.pt2.json`` sidecar next to it).

    Raises:
        ValueError: A missing file or sidecar, a file ``torch.export.load`` rejects, or a
            program whose inputs or outputs (count, order, shapes, dtypes) differ from the
            sidecar's, naming the field, what the sidecar says and what the program has.
    """

    def __init__(self, path: str | Path):
        super().__init__(path)
        if self.sidecar.get("artifact_format") != "torch-export":
            raise ValueError(
                f"{str(self.path)!r} is a {self.sidecar.get('artifact_format')} "
                "artifact, not torch.export (use OnnxPolicy)"
            )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "No complete tensor found in the group"
                self.program = torch.export.load(str(self.path))
        except Exception as err:  # torch raises several types for a bad archive
            raise ValueError(f"torch.export cannot load {str(self.path)!r}: {err}") from None
        self._check_graph(*_program_specs(self.program))
        self.module = self.program.module()

    @torch.no_grad()
    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        args = [torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in self.input_names]
        return [t.numpy() for t in self.module(*args)]


def _tensor_spec(node: Any) -> TensorSpec:
    """A graph node's example value as a TensorSpec (symbolic sizes as their names)."""
    val = getattr(node, "meta", {}).get("val")
    if not isinstance(val, torch.Tensor):
        return TensorSpec(None, (), f"non-tensor {type(val).__name__}")
    shape = tuple(d if isinstance(d, int) else str(d) for d in val.shape)
    return TensorSpec(None, shape, str(val.dtype).removeprefix("torch."))


def _program_specs(program: Any) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The user inputs and outputs of an ``ExportedProgram`` (which names neither)."""
    nodes = {n.name: n for n in program.graph.nodes}
    sig = program.graph_signature
    inputs = [_tensor_spec(nodes.get(name)) for name in sig.user_inputs]
    outputs = [_tensor_spec(nodes.get(name)) for name in sig.user_outputs]
    return inputs, outputs
