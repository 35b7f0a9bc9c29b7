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
    with pytest.raises(KeyError, match="variable-length list"):
        lay.find(("r", 0))


class _Shapeless(gym.Space):
    """A space of values rlblocks cannot lay out (no shape, not strings)."""

    def __init__(self) -> None:
        super().__init__(None, None)

    def contains(self, x: object) -> bool:
        return True


def test_unsupported_space_names_its_path() -> None:
    space = gym.spaces.Dict({"t": gym.spaces.Tuple((D(2), _Shapeless()))})
    with pytest.raises(ValueError, match=r"space\['t'\]\[1\]: _Shapeless has no shape"):
        layout(space)
    bad_graph = gym.spaces.Graph(B(0, 1, (2,)), D(2))
    object.__setattr__(bad_graph, "edge_space", gym.spaces.MultiBinary(2))
    with pytest.raises(ValueError, match=r"space.edge_space: a Graph's edge_space must be"):
        layout(bad_graph)


def test_new_kinds_sizes_offsets_and_describe() -> None:
    space = gym.spaces.Dict(
        {
            "g": gym.spaces.Graph(B(0, 1, (2,)), D(3)),
            "o": gym.spaces.OneOf((D(2), B(-1, 1, (3,)))),
            "s": gym.spaces.Sequence(gym.spaces.Dict({"a": D(2), "b": B(0, 1, (1,))})),
            "t": gym.spaces.Text(4, charset="xyz"),
        }
    )
    opts = {"graph_max_nodes": 3, "graph_max_edges": 2, "sequence_max_len": 5}
    lay = layout(space, opts)
    graph = 2 + 3 * 2 + 2 * 3 + 2 * 2
    oneof = 2 + 2 + 3
    sequence = 1 + 5 * 3
    text = 1 + 4 * 3
    assert lay.size == graph + oneof + sequence + text
    assert [(p, o, n.kind) for p, o, n in lay.leaves()] == [
        (("g",), 0, "graph"),
        (("o",), graph, "oneof"),
        (("o", 0), graph + 2, "discrete"),
        (("o", 1), graph + 4, "box"),
        (("s",), graph + oneof, "sequence"),
        (("s", 0, "a"), graph + oneof + 1, "discrete"),
        (("s", 0, "b"), graph + oneof + 3, "box"),
        (("t",), graph + oneof + sequence, "text"),
    ]
    entries = {e["path"]: e for e in lay.describe()}
    assert entries['obs["g"]'] | {"node": None, "edge": None} == {
        "path": 'obs["g"]',
        "offset": 0,
        "size": graph,
        "kind": "graph",
        "max_nodes": 3,
        "max_edges": 2,
        "node": None,
        "edge": None,
        "nodes_offset": 2,
        "edges_offset": 8,
        "links_offset": 14,
    }
    assert entries['obs["g"]']["edge"]["kind"] == "one_hot"
    assert entries['obs["o"]']["kind"] == "one_of_branch" and entries['obs["o"]']["size"] == 2
    assert entries['obs["s"]']["kind"] == "sequence_length"
    assert entries['obs["t"]']["charset"] == "xyz" and entries['obs["t"]']["min_len"] == 1
    assert lay.find(("o", 1)).columns == slice(graph + 4, graph + 7)
    with pytest.raises(KeyError, match="variable-length list"):
        lay.find(("s", 0))
    assert not lay.find(("g",)).node.dtype and not lay.find(("t",)).node.dtype
    ids = layout(space, {**opts, "text_encoding": "ids"})
    assert ids.find(("t",)).node.size == 1 + 4 and ids is not lay


def test_string_spaces_use_the_config_charset_and_length() -> None:
    class Mission(gym.Space[str]):
        def __init__(self) -> None:
            super().__init__(None, None)

        def contains(self, x: object) -> bool:
            return isinstance(x, str)

    node = layout(Mission()).root
    assert node.kind == "text" and node.max_len == 64 and node.min_len == 0
    assert "".join(node.charset) == "".join(chr(c) for c in range(32, 127))
    assert node.length_key == "text_max_length"
    small = layout(Mission(), {"text_max_length": 3, "text_charset": "ab"}).root
    assert small.size == 1 + 3 * 2 and small.charset == ("a", "b")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sequence_max_len": 0}, "sequence_max_len must be an int >= 1"),
        ({"graph_max_nodes": 2.5}, "graph_max_nodes must be an int >= 1"),
        ({"text_charset": "aa"}, "text_charset must be"),
        ({"text_encoding": "bytes"}, "text_encoding must be"),
    ],
)
def test_bad_layout_options(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        layout(gym.spaces.Sequence(D(2)), options)


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
