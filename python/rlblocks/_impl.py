"""Which implementation runs the kernels: the C++ core (default) or the numpy reference.

``RLBLOCKS_IMPL=numpy`` in the environment forces the pure-numpy reference everywhere
(debugging, benchmarks). It is read when rlblocks is imported; ``use_numpy_reference`` can
flip it at run time (tests and benchmarks use it to compare both paths).
"""

from __future__ import annotations

import os

_native = os.environ.get("RLBLOCKS_IMPL", "native").strip().lower() != "numpy"


def native() -> bool:
    """True when the C++ kernels are in use."""
    return _native


def use_numpy_reference(flag: bool = True) -> None:
    """Switch every rlblocks kernel to the numpy reference (or back to C++)."""
    global _native
    _native = not flag
