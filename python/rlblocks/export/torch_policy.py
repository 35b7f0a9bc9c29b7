"""``TorchExportPolicy``: an exported ``.pt2`` policy (``torch.export``) run by torch.

Examples:
    >>> from rlblocks.export import TorchExportPolicy
    >>> policy = TorchExportPolicy("policy.pt2")               # doctest: +SKIP
    >>> actions, state = policy.compute_actions(observations)  # doctest: +SKIP
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

from rlblocks.export.runtime import ExportedPolicy

__all__ = ["TorchExportPolicy"]


class TorchExportPolicy(ExportedPolicy):
    """Acts with a ``.pt2`` artifact of :func:`rlblocks.export.export_policy`.

    Args:
        path: The ``.pt2`` file (its ``.pt2.json`` sidecar next to it).

    Raises:
        ValueError: A missing file or sidecar, or a file ``torch.export.load`` rejects.
    """

    def __init__(self, path: str | Path):
        super().__init__(path)
        if self.sidecar.get("artifact_format") != "torch-export":
            raise ValueError(f"{str(self.path)!r} is a {self.sidecar.get('artifact_format')} "
                             "artifact, not torch.export (use OnnxPolicy)")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "No complete tensor found in the group"
                self.program = torch.export.load(str(self.path))
        except Exception as err:  # torch raises several types for a bad archive
            raise ValueError(f"torch.export cannot load {str(self.path)!r}: {err}") from None
        self.module = self.program.module()

    @torch.no_grad()
    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        args = [torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in self.input_names]
        return [t.numpy() for t in self.module(*args)]
