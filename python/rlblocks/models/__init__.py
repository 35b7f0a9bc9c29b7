"""Torch models: the ``ModelV2`` base class and RLlib's built-in models.

Submodules load on first use, so importing ``rlblocks.models`` stays cheap.

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks.models import FullyConnectedNetwork
    >>> m = FullyConnectedNetwork(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), 2, {}, "fc")
    >>> m({"obs": torch.zeros(1, 3)})[0].shape
    torch.Size([1, 2])
"""

from __future__ import annotations

import importlib
from typing import Any

from rlblocks.models.modelv2 import ModelInterface, ModelV2, TorchModelV2

_LAZY = {
    "FullyConnectedNetwork": "rlblocks.models.fcnet",
    "VisionNetwork": "rlblocks.models.visionnet",
    "ComplexInputNetwork": "rlblocks.models.complex_input",
    "DuelingQModel": "rlblocks.models.heads",
    "ContinuousActionQModel": "rlblocks.models.heads",
    "RecurrentNetwork": "rlblocks.models.recurrent",
    "LSTMWrapper": "rlblocks.models.recurrent",
    "AttentionWrapper": "rlblocks.models.attention",
    "GTrXLNet": "rlblocks.models.attention",
    "FrameStackingModel": "rlblocks.models.framestack_model",
    "ParametricActionsModel": "rlblocks.models.parametric",
    "AutoregressiveActionModel": "rlblocks.models.autoregressive",
    "EntityEncoder": "rlblocks.models.entity",
    "TextEncoder": "rlblocks.models.entity",
    "GraphEncoder": "rlblocks.models.graph",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'rlblocks.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = ["ModelInterface", "ModelV2", "TorchModelV2", *_LAZY]
