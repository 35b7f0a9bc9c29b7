"""``OnnxPolicy``: an exported ``.onnx`` policy run by onnxruntime, without torch.

Examples:
    >>> from rlblocks.export import OnnxPolicy
    >>> policy = OnnxPolicy("rlblocks_runs/PPO_CartPole-v1_x/policy.onnx")  # doctest: +SKIP
    >>> action, _ = policy.compute_single_action(env.reset()[0])           # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rlblocks.export.runtime import ExportedPolicy
from rlblocks.export.validate import TensorSpec

try:
    import onnxruntime as ort
except ImportError as _err:  # the `export` extra is missing
    raise ImportError(
        'rlblocks.export.OnnxPolicy needs onnxruntime: pip install "rlblocks[export]"'
    ) from _err

__all__ = ["OnnxPolicy"]


class OnnxPolicy(ExportedPolicy):
    """Acts with an ``.onnx`` artifact of :func:`rlblocks.export.export_policy`.

    Args:
        path: The ``.onnx`` file (its ``.onnx.json`` sidecar next to it).
        num_threads: onnxruntime's intra-op threads (1 is fastest for small batches).

    Raises:
        ValueError: A missing file or sidecar, an artifact that onnxruntime rejects, or a
            graph whose inputs or outputs (names, order, shapes, dtypes) differ from the
            sidecar's, naming the field, what the sidecar says and what the graph has.
    """

    def __init__(self, path: str | Path, num_threads: int = 1):
        super().__init__(path)
        if self.sidecar.get("artifact_format") != "onnx":
            raise ValueError(
                f"{str(self.path)!r} is a {self.sidecar.get('artifact_format')} "
                "artifact, not ONNX (use TorchExportPolicy)"
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(num_threads)
        options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(
                str(self.path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as err:  # onnxruntime raises its own exception types
            raise ValueError(f"onnxruntime cannot load {str(self.path)!r}: {err}") from None
        self._check_graph(
            [_spec(i) for i in self.session.get_inputs()],
            [_spec(o) for o in self.session.get_outputs()],
        )

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return list(self.session.run(self.output_names, feeds))


#: onnxruntime's element type names that differ from numpy's.
_ORT_TYPES = {"float": "float32", "double": "float64", "float16": "float16", "bool": "bool"}


def _spec(arg: Any) -> TensorSpec:
    """An onnxruntime ``NodeArg`` (``type`` like ``"tensor(float)"``) as a TensorSpec."""
    kind = str(arg.type)
    elem = kind[len("tensor(") : -1] if kind.startswith("tensor(") else kind
    shape = tuple(d if isinstance(d, int) or d is None else str(d) for d in (arg.shape or ()))
    return TensorSpec(str(arg.name), shape, _ORT_TYPES.get(elem, elem))
