"""rlblocks.layout: one description of the flat row, checked against what the C++ plan
writes, what restore_original_dimensions unpacks and what the export sidecar says."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rlblocks import get_preprocessor, restore_original_dimensions
from rlblocks.layout import Layout, layout
from rlblocks.spaces import Repeated
from spaces_strategies import nested_spaces

pytestmark = pytest.mark.native

B, D = gym.spaces.Box, gym.spaces.Discrete


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def _under_repeated(lay: Layout, path: tuple[Any, ...]) -> bool:
    return any(lay.find(path[:i]).node.kind == "repeated" for i in range(len(path)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=nested_spaces(), seed=st.integers(0, 2**31 - 1))
def test_every_leaf_lands_where_the_layout_says(space: gym.Space, seed: int) -> None:
    """Each leaf's columns of the C++ output equal that leaf preprocessed on its own."""
    space.seed(seed)
    obs = space.sample()
    prep = get_preprocessor(space)(space)
    lay = prep.layout
    assert lay.size == prep.size
    row = np.asarray(prep.transform(obs), np.float32).ravel()
    covered = np.zeros(lay.size, bool)
    for path, offset, node in lay.leaves():
        if _under_repeated(lay, path):
            continue
        size = node.size
        if node.kind == "repeated":
            assert row[offset] == len(_get(obs, path))
        else:
            leaf = node.space
            want = get_preprocessor(leaf)(leaf).transform(_get(obs, path))
            np.testing.assert_array_equal(
                row[offset : offset + size], np.asarray(want, np.float32).ravel()
            )
        assert not covered[offset : offset + size].any()
        covered[offset : offset + size] = True
    assert covered.all()  # the top-level slots tile the row exactly


@settings(max_examples=40, deadline=None)
@given(space=nested_spaces())
def test_describe_matches_leaves(space: gym.Space) -> None:
    lay = layout(space)
    described = lay.describe()
    leaves = list(lay.leaves())
    assert [d["offset"] for d in described] == [offset for _, offset, _ in leaves]
    for entry, (_, _, node) in zip(described, leaves, strict=True):
        assert entry["size"] == (1 if node.kind == "repeated" else node.size)


def test_find_names_the_missing_path() -> None:
    space = gym.spaces.Dict({"a": gym.spaces.Tuple((D(2), B(0, 1, (3,)))), "r": Repeated(D(2), 2)})
    lay = layout(space)
    assert lay.find(("a", 1)).columns == slice(2, 5)
    with pytest.raises(KeyError, match=r'obs\["a"\]\[2\]: no such entry'):
        lay.find(("a", 2))
    with pytest.raises(KeyError, match="Repeated list"):
        lay.find(("r", 0))


def test_unsupported_space_names_its_path() -> None:
    space = gym.spaces.Dict({"t": gym.spaces.Tuple((D(2), gym.spaces.Text(5)))})
    with pytest.raises(ValueError, match=r"space\['t'\]\[1\]: rlblocks has no preprocessor"):
        layout(space)


def test_built_once_per_space_and_options() -> None:
    frame = B(0, 255, (210, 160, 3), np.uint8)
    space = gym.spaces.Tuple((D(2), frame))
    assert layout(space) is layout(space)
    assert layout(space) is not layout(gym.spaces.Tuple((D(2), frame)))  # equal, not same
    small = layout(space, {"dim": 42, "grayscale": True})
    assert small is layout(space, {"dim": 42, "grayscale": True, "fcnet_hiddens": [8]})
    assert small.find((1,)).node.shape == (42, 42, 1)
    assert layout(space).find((1,)).node.shape == (84, 84, 3)


def test_the_cache_keeps_no_space_alive() -> None:
    space = gym.spaces.Tuple((D(3), B(0, 1, (2,))))
    layout(space)
    ref = weakref.ref(space)
    del space
    gc.collect()
    assert ref() is None


def test_restore_uses_the_preprocessors_frame_options() -> None:
    """A Dict with raw Atari frames preprocessed at dim=42 unpacks to 42x42 frames
    (difference 6: RLlib rebuilds a default preprocessor and fails on the size)."""
    space = gym.spaces.Dict({"frame": B(0, 255, (210, 160, 3), np.uint8), "n": D(3)})
    prep = get_preprocessor(space)(space, {"dim": 42, "grayscale": True})
    batch = prep.transform_batch([space.sample(), space.sample()])
    parts = restore_original_dimensions(batch, prep.observation_space, "numpy")
    assert parts["frame"].shape == (2, 42, 42, 1) and parts["n"].shape == (2, 3)
    np.testing.assert_array_equal(parts["n"].sum(axis=1), [1.0, 1.0])
