"""Tiny helpers for nested action structures (dicts, tuples, lists of arrays or tensors).

Examples:
    >>> import numpy as np
    >>> tree_map(lambda x: x * 2, {"a": np.ones(2), "b": (np.zeros(1),)})
    {'a': array([2., 2.]), 'b': (array([0.]),)}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["tree_leaves", "tree_map"]


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """Applies ``fn`` to the leaves of ``tree`` (and the matching leaves of ``rest``)."""
    if isinstance(tree, Mapping):
        return {k: tree_map(fn, tree[k], *(r[k] for r in rest)) for k in tree}
    if isinstance(tree, (tuple, list)):
        return type(tree)(
            tree_map(fn, t, *(r[i] for r in rest)) for i, t in enumerate(tree)
        )
    return fn(tree, *rest)


def tree_leaves(tree: Any) -> list[Any]:
    """The leaves of ``tree`` in order (Dict keys in their order).

    Examples:
        >>> tree_leaves({"a": 1, "b": (2, 3)})
        [1, 2, 3]
    """
    if isinstance(tree, Mapping):
        return [leaf for k in tree for leaf in tree_leaves(tree[k])]
    if isinstance(tree, (tuple, list)):
        return [leaf for t in tree for leaf in tree_leaves(t)]
    return [tree]
