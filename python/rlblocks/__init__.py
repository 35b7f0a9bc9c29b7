"""rlblocks: RLlib's models, preprocessors and action distributions, fast and standalone.

Examples:
    >>> import gymnasium as gym
    >>> import rlblocks as rb
    >>> space = gym.spaces.MultiDiscrete([3, 4])
    >>> rb.get_preprocessor(space)(space).transform([1, 3])
    array([0., 1., 0., 0., 0., 0., 1.], dtype=float32)
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

try:
    from rlblocks import _core
except ImportError as err:  # pragma: no cover - exercised only on broken installs
    raise ImportError(
        "rlblocks' native extension rlblocks._core could not be imported "
        f"({err}). Reinstall with `pip install .` (it builds the C++ core with CMake), or for "
        "development build it in place with `cmake -S . -B build/dev && cmake --build build/dev` "
        "and put `python/` on PYTHONPATH."
    ) from err

from rlblocks import spaces
from rlblocks.preprocessors import Preprocessor, get_preprocessor
from rlblocks.restore import restore_original_dimensions
from rlblocks.values import GraphValues, OneOfValues, RepeatedValues, TextValues

__version__ = "0.1.0"


def set_num_threads(n: int) -> None:
    """Threads used by every batched native kernel (the calling thread counts as one).

    Raises:
        ValueError: ``n`` is not an int (a float such as 1.5, a bool, a string) or is < 1.
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise ValueError(f"set_num_threads: n must be an int >= 1, got {n!r}")
    if not 1 <= n <= 2**31 - 1:
        raise ValueError(f"set_num_threads: n must be an int in [1, 2**31 - 1], got {n!r}")
    _core.set_num_threads(int(n))


def get_num_threads() -> int:
    """Threads used by the batched native kernels."""
    return int(_core.get_num_threads())


# Torch-backed parts load on first use, so preprocessing alone never imports torch.
_LAZY = {
    "MODEL_DEFAULTS": ("rlblocks.config", "MODEL_DEFAULTS"),
    "ModelCatalog": ("rlblocks.catalog", "ModelCatalog"),
    "models": ("rlblocks.models", None),
    "distributions": ("rlblocks.distributions", None),
    "filters": ("rlblocks.filters", None),
    "framestack": ("rlblocks.framestack", None),
    "image": ("rlblocks.image", None),
    "wrappers": ("rlblocks.wrappers", None),
    "sequences": ("rlblocks.sequences", None),
    "views": ("rlblocks.views", None),
    "utils": ("rlblocks.utils", None),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'rlblocks' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


__all__ = [
    "GraphValues",
    "OneOfValues",
    "Preprocessor",
    "RepeatedValues",
    "TextValues",
    "get_preprocessor",
    "get_num_threads",
    "restore_original_dimensions",
    "set_num_threads",
    "spaces",
    *_LAZY,
]
