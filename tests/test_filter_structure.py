"""A MeanStdFilter over a structured observation leaves its structure alone: list lengths,
graph counts and links, a text's characters and an action mask pass through; the values around
them are normalised exactly as before."""

from __future__ import annotations

import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rlblocks import _impl, get_preprocessor, restore_original_dimensions
from rlblocks.filters import MeanStdFilter, unfiltered_columns
from rlblocks.layout import layout
from rlblocks.spaces import Repeated
from rlblocks.values import GraphValues, OneOfValues, RepeatedValues, TextValues
from spaces_strategies import NEW_KIND_OPTIONS, nested_spaces, sample_value

pytestmark = pytest.mark.native

MARK = -7.0  # no preprocessed value is -7 on a zeroed row


def _mark_structure(value: Any, row: np.ndarray) -> None:
    """Writes MARK into every field of a restored (numpy view) value that restore reads as
    structure: lengths, graph counts and links, a text's characters."""

    def put(field: np.ndarray) -> None:
        if field.size:  # an empty field (a list of max_len 0) holds no column
            assert np.shares_memory(field, row), "restore made a copy: the oracle needs views"
        field[...] = MARK

    if isinstance(value, RepeatedValues):
        put(value.lengths)
        _mark_structure(value.values, row)
    elif isinstance(value, TextValues):  # the length and the characters, ids or one-hot
        put(value.lengths)
        put(value.values)
    elif isinstance(value, GraphValues):
        put(value.n_nodes)
        put(value.n_edges)
        put(value.edge_index)
    elif isinstance(value, OneOfValues):
        for branch in value.values:
            _mark_structure(branch, row)
    elif isinstance(value, tuple):
        for item in value:
            _mark_structure(item, row)
    elif isinstance(value, dict):
        for item in value.values():
            _mark_structure(item, row)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=nested_spaces(new_kinds=True), ids=st.booleans())
def test_structure_columns_are_what_restore_reads_as_structure(space: gym.Space, ids: bool):
    """The layout's structure columns against an independent oracle: the columns of a row
    that restore_original_dimensions hands out as lengths, counts, links and ids."""
    options = {**NEW_KIND_OPTIONS, "text_encoding": "ids" if ids else "one_hot"}
    lay = layout(space, options)
    row = np.zeros((1, lay.size), np.float32)
    holder = gym.spaces.Box(-1, 1, (lay.size,))
    holder.original_space, holder.layout = space, lay  # type: ignore[attr-defined]
    _mark_structure(restore_original_dimensions(row, holder), row)
    np.testing.assert_array_equal(np.flatnonzero(row[0] == MARK), lay.structure_columns)


@pytest.mark.parametrize("backend", ["native", "numpy"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=nested_spaces(new_kinds=True), seed=st.integers(0, 2**31 - 1))
def test_filtering_keeps_the_structure_and_normalises_the_values(
    backend: str, space: gym.Space, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    space = gym.spaces.Tuple((space,))  # always one flat row (a lone Box keeps its shape)
    prep = get_preprocessor(space)(space, NEW_KIND_OPTIONS)
    rows = prep.transform_batch([sample_value(space, rng) for _ in range(6)])
    keep = unfiltered_columns(prep.layout)
    before = _impl.native()
    _impl.use_numpy_reference(backend == "numpy")
    try:
        kept = MeanStdFilter(prep.shape, clip=2.0, passthrough=keep)
        plain = MeanStdFilter(prep.shape, clip=2.0)
        got, want = kept(rows), plain(rows)
    finally:
        _impl.use_numpy_reference(not before)
    np.testing.assert_array_equal(got[:, keep], rows[:, keep])
    values = np.setdiff1d(np.arange(prep.size), keep)
    np.testing.assert_array_equal(got[:, values], want[:, values])
    # what a model reads back: the same lengths, counts, links and ids as the raw rows
    holder = prep.observation_space
    _assert_same_structure(
        restore_original_dimensions(got, holder), restore_original_dimensions(rows, holder)
    )


def _assert_same_structure(got: Any, want: Any) -> None:
    if isinstance(want, RepeatedValues):
        np.testing.assert_array_equal(got.lengths, want.lengths)
        _assert_same_structure(got.values, want.values)
    elif isinstance(want, TextValues):
        np.testing.assert_array_equal(got.lengths, want.lengths)
    elif isinstance(want, GraphValues):
        for name in ("n_nodes", "n_edges", "edge_index", "node_mask", "edge_mask"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    elif isinstance(want, OneOfValues):
        for g, w in zip(got.values, want.values, strict=True):
            _assert_same_structure(g, w)
    elif isinstance(want, (tuple, dict)):
        items = want.values() if isinstance(want, dict) else want
        others = got.values() if isinstance(got, dict) else got
        for g, w in zip(others, items, strict=True):
            _assert_same_structure(g, w)


def test_a_constant_mission_keeps_its_length_and_characters() -> None:
    """MiniGrid's case: a string that never changes used to normalise to length 0 (an empty
    mission), then its one-hot characters to 0; now the text passes through whole, so a
    repeated string stays one row (encoded once) and its characters what the encoder's
    embedding looks up."""
    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (2,)), "mission": gym.spaces.Text(8)})
    prep = get_preprocessor(space)(space)
    rows = prep.transform_batch(
        [{"image": np.array([i, 2 * i]), "mission": "go"} for i in range(4)]
    )
    f = MeanStdFilter(prep.shape, passthrough=unfiltered_columns(prep.layout))
    out = restore_original_dimensions(f(rows), prep.observation_space)
    raw = restore_original_dimensions(rows, prep.observation_space)
    assert out["mission"].lengths.tolist() == [2.0] * 4
    np.testing.assert_array_equal(out["mission"].values, raw["mission"].values)
    assert out["mission"].values.sum() == 2 * 4  # one 1 per character
    np.testing.assert_allclose(out["image"].mean(axis=0), 0.0, atol=1e-5)  # still normalised


def test_in_place_filtering_keeps_the_raw_structure() -> None:
    space = Repeated(gym.spaces.Box(-1, 1, (2,)), max_len=3)
    prep = get_preprocessor(space)(space)
    rng = np.random.default_rng(0)
    rows = prep.transform_batch(
        [list(rng.uniform(-1, 1, (int(n), 2))) for n in rng.integers(0, 4, 10)]
    )
    lengths = rows[:, 0].copy()
    f = MeanStdFilter(prep.shape, passthrough=[0])
    assert f(rows, out=rows) is rows
    np.testing.assert_array_equal(rows[:, 0], lengths)


def test_passthrough_travels_with_copies_pickles_and_states() -> None:
    f = MeanStdFilter((4,), passthrough=[3, 0])
    assert f.passthrough.tolist() == [0, 3]
    _ = f(np.arange(8.0).reshape(2, 4))
    for other in (f.copy(), pickle.loads(pickle.dumps(f))):
        assert other.passthrough.tolist() == [0, 3]
        np.testing.assert_array_equal(other(np.ones(4), update=False), f(np.ones(4), update=False))
    g = MeanStdFilter((4,), passthrough=[0, 3])
    g.load_state_dict(f.state_dict())
    assert g.running_stats.n == 2
    old = {k: v for k, v in f.state_dict().items() if k != "passthrough"}  # before the key
    g.load_state_dict(old)
    assert g.passthrough.tolist() == [0, 3]
    with pytest.raises(ValueError, match=r"state\['passthrough'\]: columns \[0, 3\] differ"):
        MeanStdFilter((4,), passthrough=[1]).load_state_dict(f.state_dict())
    assert "passthrough=[0, 3]" in repr(f)


@pytest.mark.parametrize(
    ("shape", "columns", "message"),
    [
        ((4,), [4], r"distinct columns in \[0, 4\), got \[4\]"),
        ((4,), [-1], r"distinct columns in \[0, 4\)"),
        ((4,), [1, 1], r"distinct columns in \[0, 4\), got \[1, 1\]"),
        ((4,), [0.5], "1-d sequence of column indices"),
        ((4,), [[0]], "1-d sequence of column indices"),
        ((2, 2), [0], r"need a 1-d filter shape, this one is \(2, 2\)"),
    ],
)
def test_bad_passthrough_columns_are_refused(shape, columns, message) -> None:
    with pytest.raises(ValueError, match=message):
        MeanStdFilter(shape, passthrough=columns)
