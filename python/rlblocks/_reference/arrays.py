"""How the native bindings describe and accept array arguments, in numpy.

The twins raise the bindings' messages word for word, so they share the bindings'
vocabulary (``cpp/bindings/bindings.hpp``): a type's C name, an array's description, and
the float32 argument check.

Examples:
    >>> import numpy as np
    >>> describe(np.zeros((2, 3), np.int32)), describe([1.0])
    ('int32 array of shape (2, 3)', 'list')
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["describe", "float32_array", "tp_name"]


def tp_name(obj: Any) -> str:
    """The name the native core's messages give a type (C's ``tp_name``: ``numpy.ndarray``,
    ``int``, a Python class's own name)."""
    t = type(obj)
    if t.__flags__ & (1 << 9) or t.__module__ == "builtins":  # a heap type: a Python class
        return t.__name__
    return f"{t.__module__}.{t.__name__}"


def describe(obj: Any) -> str:
    """``"read-only non-contiguous float64 array of shape (2, 3)"``, or a non-array's type
    name (the bindings' ``describe``)."""
    if not isinstance(obj, np.ndarray):
        return tp_name(obj)
    flags = ("" if obj.flags.writeable else "read-only ") + (
        "" if obj.flags.c_contiguous else "non-contiguous "
    )
    return f"{flags}{obj.dtype} array of shape {obj.shape}"


def float32_array(obj: Any, fn: str, what: str) -> np.ndarray:
    """``obj`` if it is a float32 array, else the bindings' ValueError ``"fn: what must be a
    float32 array, got ..."``."""
    if not isinstance(obj, np.ndarray) or obj.dtype != np.float32:
        raise ValueError(f"{fn}: {what} must be a float32 array, got {describe(obj)}")
    return obj
