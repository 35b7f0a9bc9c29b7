"""rlblocks.nest: one walker, Dict keys in the space's (insertion) order unless sorted."""

from __future__ import annotations

import subprocess
import sys
from collections import OrderedDict

import gymnasium as gym
import numpy as np
import pytest
from rlblocks.nest import (
    stack_rows,
    tree_flatten,
    tree_from_paths,
    tree_index,
    tree_leaves,
    tree_map,
    tree_stack,
    tree_unflatten,
)
from rlblocks.spaces import space_path_items

# OrderedDict: a gymnasium Dict built from a plain dict sorts its keys.
SPACE = gym.spaces.Dict(
    OrderedDict(
        z=gym.spaces.Discrete(3),
        a=gym.spaces.Tuple(
            (
                gym.spaces.Box(-1, 1, (2,)),
                gym.spaces.Dict(
                    OrderedDict(y=gym.spaces.Discrete(2), b=gym.spaces.Box(0, 1, (1,)))
                ),
            )
        ),
    )
)


def test_leaves_follow_the_space_order_the_preprocessors_use():
    sample = SPACE.sample()
    paths = [path for path, _ in space_path_items(SPACE)]
    want = [
        sample[p[0]]
        if len(p) == 1
        else (sample[p[0]][p[1]] if len(p) == 2 else sample[p[0]][p[1]][p[2]])
        for p in paths
    ]
    got = tree_leaves(sample)
    assert list(sample) == ["z", "a"] and len(got) == len(want) == 4
    assert all(g is w for g, w in zip(got, want, strict=True))


def test_sorted_keys_follow_rllib_flatten_order():
    sample = SPACE.sample()
    sorted_paths = [path for path, _ in space_path_items(SPACE, sort_dict_keys=True)]
    leaves = tree_leaves(sample, sort_keys=True)
    assert leaves[0] is sample["a"][0]
    assert leaves[-1] is sample["z"]
    assert len(leaves) == len(sorted_paths)


@pytest.mark.parametrize("sort_keys", [False, True])
def test_flatten_unflatten_round_trip_keeps_the_dict_order(sort_keys):
    tree = {"b": (1, None, [2, 3]), "a": OrderedDict(d=4, c=5)}
    leaves, spec = tree_flatten(tree, sort_keys=sort_keys)
    assert None in leaves  # None is a leaf, as in every walker it replaces
    back = tree_unflatten(spec, leaves)
    assert back == tree and list(back) == ["b", "a"] and list(back["a"]) == ["d", "c"]


def test_map_stack_and_index():
    rows = [{"x": np.full(2, i), "y": (np.int64(i),)} for i in range(3)]
    stacked = tree_stack(rows)
    assert stacked["x"].shape == (3, 2) and stacked["y"][0].tolist() == [0, 1, 2]
    one = tree_index(stacked, 2)
    assert one["x"].tolist() == [2, 2] and int(one["y"][0]) == 2
    pairs = tree_map(lambda a, b: a + b, {"p": 1, "q": 2}, {"q": 20, "p": 10})
    assert pairs == {"p": 11, "q": 22}


def test_tree_from_paths_rebuilds_a_space_structure():
    items = [(path, i) for i, (path, _) in enumerate(space_path_items(SPACE))]
    tree = tree_from_paths(items)
    assert list(tree) == ["z", "a"] and isinstance(tree["a"], tuple)
    assert list(tree["a"][1]) == ["y", "b"] and tree["a"][1]["b"] == 3
    with pytest.raises(ValueError, match="tuple indices"):
        tree_from_paths([((1,), "x")])


def test_the_module_imports_no_torch():
    code = "import sys, rlblocks.nest; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


STACKS = {
    "float32 rows": [np.arange(6, dtype=np.float32).reshape(2, 3) + i for i in range(5)],
    "bool vectors": [np.array([True, False, i % 2 == 0]) for i in range(4)],
    "scalars": [np.float32(i) for i in range(3)],
    "0-d arrays": [np.array(i, np.int64) for i in range(3)],
    "mixed dtypes": [np.zeros(2, np.int64), np.ones(2, np.float32)],
    "object arrays": [np.array([{"a": 1}, None], dtype=object) for _ in range(2)],
    "a tuple of lists": ([1, 2], [3, 4]),
}


@pytest.mark.parametrize("name", sorted(STACKS))
def test_stack_rows_is_np_stack(name: str) -> None:
    items = STACKS[name]
    got, want = stack_rows(items), np.stack(items)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert [repr(x) for x in got.ravel()] == [repr(x) for x in want.ravel()]


def test_stack_rows_refuses_differing_shapes_as_np_stack() -> None:
    items = [np.zeros((2, 3)), np.zeros((3, 3))]
    with pytest.raises(ValueError) as want:
        np.stack(items)
    with pytest.raises(ValueError) as got:
        stack_rows(items)
    assert str(got.value) == str(want.value)
