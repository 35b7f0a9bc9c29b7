"""Sequence chopping/padding: C++ kernel vs numpy twin, RLlib's examples, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rlblocks import _core, _impl
from rlblocks._reference import sequences as ref
from rlblocks.sequences import (
    PaddedBatch,
    add_time_dimension,
    chop_into_sequences,
    pad_batch_to_sequences_of_same_size,
    sequence_mask,
)

pytestmark = pytest.mark.native


@pytest.fixture(params=["native", "numpy"])
def impl(request):
    saved = _impl.native()
    _impl.use_numpy_reference(request.param == "numpy")
    yield request.param
    _impl.use_numpy_reference(not saved)


def slow_pad(leaf, lens, t, pad_last, order=None):
    """Row-by-row transcription of RLlib's padding loop (the spec, not the fast twin)."""
    order = range(len(lens)) if order is None else order
    starts = np.cumsum(lens) - lens
    out = np.zeros((len(lens) * t,) + leaf.shape[1:], dtype=leaf.dtype)
    for s, k in enumerate(order):
        for o in range(lens[k]):
            out[s * t + o] = leaf[starts[k] + o]
        if pad_last and lens[k] > 0:
            for o in range(lens[k], t):
                out[s * t + o] = leaf[starts[k] + lens[k] - 1]
    return out


def test_rllib_docstring_example(impl):
    feats, states, lens = chop_into_sequences(
        episode_ids=[1, 1, 5, 5, 5, 5],
        unroll_ids=[4, 4, 4, 4, 4, 4],
        agent_indices=[0, 0, 0, 0, 0, 0],
        feature_columns=[[4, 4, 8, 8, 8, 8], [1, 1, 0, 1, 1, 0]],
        state_columns=[[4, 5, 4, 5, 5, 5]],
        max_seq_len=3,
    )
    assert [f.tolist() for f in feats] == [[4, 4, 0, 8, 8, 8, 8, 0, 0], [1, 1, 0, 0, 1, 1, 0, 0, 0]]
    assert [s.tolist() for s in states] == [[4, 4, 5]]
    assert lens.tolist() == [2, 3, 1] and lens.dtype == np.int32


def test_ids_never_collide(impl):
    # RLlib's additive uid merges (eps 1, agent 0) with (eps 0, agent 1); we do not.
    _, _, lens = chop_into_sequences(
        feature_columns=[np.arange(4)],
        state_columns=[],
        max_seq_len=10,
        episode_ids=[1, 1, 0, 0],
        agent_indices=[0, 0, 1, 1],
        unroll_ids=[0, 0, 0, 0],
    )
    assert lens.tolist() == [2, 2]
    _, _, lens = chop_into_sequences(
        feature_columns=[np.arange(4)],
        state_columns=[],
        max_seq_len=10,
        episode_ids=[0, 0, 0, 0],
        agent_indices=[0, 0, 0, 0],
        unroll_ids=[0, 0, 1 << 33, 1 << 33],
    )
    assert lens.tolist() == [2, 2]


@settings(max_examples=60, deadline=None)
@given(
    runs=st.lists(st.integers(1, 9), min_size=0, max_size=12),
    max_len=st.integers(1, 6),
    agents=st.booleans(),
)
def test_seq_lens_native_matches_numpy(runs, max_len, agents):
    eps = np.repeat(np.arange(len(runs)) % 3, runs)  # repeated ids in non-adjacent runs
    ag = np.repeat(np.arange(len(runs)) % 2, runs) if agents else None
    got = _core.seq_lens_from_ids(eps, ag, None, max_len)
    want = ref.seq_lens_from_ids(eps, ag, None, max_len)
    assert got.dtype == np.int32 and want.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    assert got.sum() == len(eps)
    assert (got <= max_len).all()
    # Slow transcription of the walking rule.
    lens, cur = [], 0
    for i in range(len(eps)):
        new = i > 0 and (eps[i] != eps[i - 1] or (ag is not None and ag[i] != ag[i - 1]))
        if new or cur >= max_len:
            lens.append(cur)
            cur = 0
        cur += 1
    if cur:
        lens.append(cur)
    assert got.tolist() == lens


DTYPES = [np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.bool_, np.float16]


@settings(max_examples=80, deadline=None)
@given(
    lens=st.lists(st.integers(0, 7), min_size=0, max_size=10),
    extra=st.integers(0, 3),
    dtype=st.sampled_from(DTYPES),
    trailing=st.sampled_from([(), (3,), (2, 2), (0,)]),
    pad_last=st.booleans(),
    shuffle=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_pad_native_matches_numpy_and_spec(lens, extra, dtype, trailing, pad_last, shuffle, seed):
    rng = np.random.default_rng(seed)
    lens = np.array(lens, dtype=np.int32)
    t = (int(lens.max()) if len(lens) else 0) + extra
    n = int(lens.sum())
    leaf = (rng.normal(size=(n,) + trailing) * 50).astype(dtype)
    other = rng.integers(0, 9, size=(n, 2)).astype(np.int64)
    order = rng.permutation(len(lens)) if shuffle else None
    got = _core.pad_sequences([leaf, other], lens, t, pad_last, order)
    want = ref.pad_sequences([leaf, other], lens, t, pad_last, order)
    for g, w, src in zip(got, want, [leaf, other], strict=True):
        assert g.dtype == src.dtype and g.shape == (len(lens) * t,) + src.shape[1:]
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(g, slow_pad(src, lens, t, pad_last, order))


def test_non_contiguous_inputs_are_copied_not_misread():
    base = np.arange(40, dtype=np.float64).reshape(10, 4)
    leaf = base[:, ::2]  # strided view
    lens = np.array([3, 2], np.int64)
    got = _core.pad_sequences([leaf[:5].T.copy().T], lens, 4, False)[0]
    np.testing.assert_array_equal(got, slow_pad(np.ascontiguousarray(leaf[:5]), lens, 4, False))
    got = _core.pad_sequences([leaf[::2]], lens, 4, True)[0]
    np.testing.assert_array_equal(got, slow_pad(np.ascontiguousarray(leaf[::2]), lens, 4, True))


@pytest.mark.parametrize("kernel", [_core.pad_sequences, ref.pad_sequences])
def test_pad_bad_input_raises(kernel):
    leaf = np.zeros((5, 2), np.float32)
    with pytest.raises(ValueError, match=r"seq_lens\[1\] = -1"):
        kernel([leaf], np.array([6, -1]), 6, False)
    with pytest.raises(ValueError, match=r"seq_lens\[0\] = 5 is outside \[0, max_seq_len=4\]"):
        kernel([leaf], np.array([5]), 4, False)
    with pytest.raises(ValueError, match="expected 4 rows"):
        kernel([leaf], np.array([2, 2]), 4, False)
    with pytest.raises(ValueError, match="expected 5 rows"):
        kernel([np.zeros(3)], np.array([2, 3]), 4, False)
    with pytest.raises(ValueError, match="expected 5 rows"):
        kernel([np.zeros(())], np.array([2, 3]), 4, False)
    with pytest.raises(ValueError, match="integers"):
        kernel([leaf], np.array([2.0, 3.0]), 4, False)
    with pytest.raises(ValueError, match="1-D"):
        kernel([leaf], np.array([[2, 3]]), 4, False)
    with pytest.raises(ValueError, match="permutation"):
        kernel([leaf], np.array([2, 3]), 4, False, np.array([0, 0]))
    with pytest.raises(ValueError, match="permutation"):
        kernel([leaf], np.array([2, 3]), 4, False, np.array([0, 2]))
    with pytest.raises(ValueError, match="object"):
        kernel([np.array([None] * 5, dtype=object)], np.array([2, 3]), 4, False)
    with pytest.raises(ValueError, match="max_seq_len"):
        kernel([leaf], np.array([2, 3]), -1, False)


@pytest.mark.parametrize("kernel", [_core.seq_lens_from_ids, ref.seq_lens_from_ids])
def test_seq_lens_bad_input_raises(kernel):
    with pytest.raises(ValueError, match="max_seq_len must be >= 1"):
        kernel(np.zeros(3, np.int64), None, None, 0)
    with pytest.raises(ValueError, match="agent_indices has 2 rows"):
        kernel(np.zeros(3, np.int64), np.zeros(2, np.int64), None, 4)
    with pytest.raises(ValueError, match="integers"):
        kernel(np.array([0.5, 1.0]), None, None, 4)
    with pytest.raises(ValueError, match="episode_ids are required"):
        kernel(None, None, None, 4)


def test_chop_bad_input_raises(impl):
    with pytest.raises(ValueError, match="padding must be one of"):
        chop_into_sequences(
            feature_columns=[], state_columns=[], max_seq_len=3, seq_lens=[1], padding="edge"
        )
    with pytest.raises(ValueError, match="exceeds max_seq_len=2"):
        chop_into_sequences(
            feature_columns=[np.arange(3)],
            state_columns=[],
            max_seq_len=2,
            seq_lens=[3],
            dynamic_max=False,
        )
    with pytest.raises(ValueError, match="expected 4 rows"):
        chop_into_sequences(
            feature_columns=[np.arange(5)], state_columns=[], max_seq_len=4, seq_lens=[2, 2]
        )
    with pytest.raises(ValueError, match="state_columns\\[0\\] leaf 0: expected 4 rows"):
        chop_into_sequences(
            feature_columns=[np.arange(4)],
            state_columns=[np.zeros(3)],
            max_seq_len=4,
            seq_lens=[2, 2],
        )
    with pytest.raises(ValueError, match="negative"):
        chop_into_sequences(
            feature_columns=[np.arange(4)], state_columns=[], max_seq_len=4, seq_lens=[5, -1]
        )
    with pytest.raises(ValueError, match="episode_ids are required"):
        chop_into_sequences(feature_columns=[np.arange(4)], state_columns=[], max_seq_len=4)


def test_fixed_max_extra_padding_and_last_padding(impl):
    f, _, lens = chop_into_sequences(
        feature_columns=[np.arange(1, 6)],
        state_columns=[],
        max_seq_len=4,
        episode_ids=[0, 0, 0, 1, 1],
        dynamic_max=False,
        padding="last",
    )
    assert f[0].tolist() == [1, 2, 3, 3, 4, 5, 5, 5] and lens.tolist() == [3, 2]
    f, _, _ = chop_into_sequences(
        feature_columns=[np.arange(1, 6)],
        state_columns=[],
        max_seq_len=4,
        episode_ids=[0, 0, 0, 1, 1],
        _extra_padding=1,
    )
    assert f[0].tolist() == [1, 2, 3, 0, 4, 5, 0, 0]


def test_nested_features_states_and_objects(impl):
    obs = {"b": np.arange(5.0), "a": np.arange(10).reshape(5, 2)}
    infos = np.array([{"i": i} for i in range(5)], dtype=object)
    names = np.array(list("abcde"))
    h = np.arange(5.0) * 10
    feats, states, lens = chop_into_sequences(
        feature_columns=[obs, infos, names],
        state_columns=[(h, {"c": h + 1})],
        max_seq_len=2,
        episode_ids=[3, 3, 3, 7, 7],
        handle_nested_data=True,
        pad_infos_with_empty_dicts=True,
    )
    assert lens.tolist() == [2, 1, 2]
    a, b = feats[0]  # sorted keys: "a" then "b"
    assert a.tolist() == [[0, 1], [2, 3], [4, 5], [0, 0], [6, 7], [8, 9]]
    assert b.tolist() == [0.0, 1.0, 2.0, 0.0, 3.0, 4.0]
    assert feats[1][0].tolist() == [{"i": 0}, {"i": 1}, {"i": 2}, {}, {"i": 3}, {"i": 4}]
    assert feats[2][0].tolist() == ["a", "b", "c", None, "d", "e"]
    ((hs, cd),) = states
    assert hs.tolist() == [0.0, 20.0, 30.0] and cd["c"].tolist() == [1.0, 21.0, 31.0]
    # states_already_reduced_to_init passes the columns through.
    _, st_, _ = chop_into_sequences(
        feature_columns=[],
        state_columns=[h[:3]],
        max_seq_len=2,
        seq_lens=[2, 1, 2],
        states_already_reduced_to_init=True,
    )
    assert st_[0] is h[:3] or np.array_equal(st_[0], h[:3])


def test_shuffle_permutes_everything_together(impl):
    np.random.seed(0)  # noqa: NPY002 (shuffle uses the global RNG, as RLlib)
    x = np.arange(12.0)
    feats, states, lens = chop_into_sequences(
        feature_columns=[x],
        state_columns=[x * 100],
        max_seq_len=3,
        episode_ids=np.repeat(np.arange(5), [3, 1, 2, 3, 3]),
        shuffle=True,
    )
    assert sorted(lens.tolist()) == [1, 2, 3, 3, 3]
    blocks = feats[0].reshape(5, 3)
    for k in range(5):
        first = blocks[k, 0]
        assert states[0][k] == first * 100
        assert blocks[k, : lens[k]].tolist() == list(np.arange(first, first + lens[k]))
        assert (blocks[k, lens[k] :] == 0).all()


def test_empty_batch(impl):
    feats, states, lens = chop_into_sequences(
        feature_columns=[np.zeros((0, 3))],
        state_columns=[np.zeros((0, 2))],
        max_seq_len=4,
        episode_ids=np.zeros(0, np.int64),
    )
    assert feats[0].shape == (0, 3) and states[0].shape == (0, 2) and lens.shape == (0,)


def test_add_time_dimension_and_mask():
    x = torch.arange(12).reshape(6, 2)
    out = add_time_dimension(x, seq_lens=torch.tensor([3, 1]))
    assert out.shape == (2, 3, 2) and out[1, 0].tolist() == [6, 7]
    assert add_time_dimension(x, seq_lens=np.array([3, 1]), time_major=True).shape == (3, 2, 2)
    assert add_time_dimension(x.numpy(), max_seq_len=3, time_major=True).shape == (3, 2, 2)
    with pytest.raises(ValueError, match="do not split"):
        add_time_dimension(x, seq_lens=torch.tensor([1, 1, 1, 1]))
    m = sequence_mask(torch.tensor([1, 3]), 4, time_major=True)
    assert m.shape == (4, 2) and m[:, 1].tolist() == [True, True, True, False]


class _VR:
    def __init__(self, shift_from):
        self.shift_from = shift_from


def test_pad_batch_rnn_attention_and_divisibility(impl):
    batch = {
        "obs": np.arange(5.0),
        "eps_id": np.array([0, 0, 0, 1, 1]),
        "state_in_0": np.arange(5.0) * 10,
        "state_out_0": np.arange(5.0),
    }
    out = pad_batch_to_sequences_of_same_size(batch, max_seq_len=2)
    assert isinstance(out, PaddedBatch) and out.zero_padded and out.max_seq_len == 2
    assert out["obs"].tolist() == [0, 1, 2, 0, 3, 4]
    assert out["eps_id"].tolist() == [0, 0, 0, 0, 1, 1]
    assert out["state_in_0"].tolist() == [0, 20, 30]
    assert out["state_out_0"] is batch["state_out_0"]
    assert pad_batch_to_sequences_of_same_size(out, 2) is out
    assert batch["obs"].shape == (5,)  # input untouched
    # Attention memories: fixed max, max_seq_len attribute left unset (as RLlib).
    out = pad_batch_to_sequences_of_same_size(
        batch, max_seq_len=3, view_requirements={"state_in_0": _VR(-3)}
    )
    assert out["obs"].tolist() == [0, 1, 2, 3, 4, 0] and out.max_seq_len is None
    # No states, divisibility not met -> chunks of batch_divisibility_req.
    out = pad_batch_to_sequences_of_same_size(
        {"obs": np.arange(5.0), "eps_id": np.zeros(5, np.int64)},
        max_seq_len=20,
        batch_divisibility_req=2,
    )
    assert out["obs"].tolist() == [0, 1, 2, 3, 4, 0] and out.max_seq_len == 2
    # No states, divisibility met -> unchanged.
    out = pad_batch_to_sequences_of_same_size({"obs": np.arange(4.0)}, 20, batch_divisibility_req=2)
    assert out["obs"].tolist() == [0, 1, 2, 3] and "seq_lens" not in out


@pytest.mark.parametrize("kernel", [_core.gather_rows, ref.gather_rows])
def test_gather_rows_parity_and_bounds(kernel):
    rng = np.random.default_rng(0)
    leaves = [
        rng.normal(size=(7, 3)).astype(np.float32),
        np.arange(7, dtype=np.int16),
        rng.normal(size=(7, 2, 2))[:, ::-1],
    ]
    idx = np.array([6, 0, 3, 3])
    for got, leaf in zip(kernel(leaves, idx), leaves, strict=True):
        assert got.dtype == leaf.dtype
        np.testing.assert_array_equal(got, leaf[idx])
    with pytest.raises(ValueError, match=r"index\[1\] = 7 is outside \[0, 7\)"):
        kernel(leaves, np.array([0, 7]))
    with pytest.raises(ValueError, match=r"index\[0\] = -1"):
        kernel(leaves, np.array([-1]))
    with pytest.raises(ValueError, match="integers"):
        kernel(leaves, np.array([0.0]))
    with pytest.raises(ValueError, match="scalar"):
        kernel([np.float32(1)], np.array([0]))


@settings(max_examples=40, deadline=None)
@given(
    runs=st.lists(st.integers(1, 8), min_size=1, max_size=10),
    max_len=st.integers(1, 5),
    dynamic_max=st.booleans(),
    extra=st.integers(0, 2),
    padding=st.sampled_from(["zero", "last"]),
    shuffle=st.booleans(),
    seed=st.integers(0, 100),
)
def test_chop_native_equals_numpy_end_to_end(
    runs, max_len, dynamic_max, extra, padding, shuffle, seed
):
    rng = np.random.default_rng(seed)
    eps = np.repeat(np.arange(len(runs)), runs)
    n = len(eps)
    cols = [
        {"x": rng.normal(size=(n, 2)).astype(np.float32), "y": rng.integers(0, 5, n)},
        rng.random(n) < 0.5,
    ]
    states = [rng.normal(size=(n, 3))]
    outs = []
    saved = _impl.native()
    try:
        for numpy_ref in (False, True):
            _impl.use_numpy_reference(numpy_ref)
            np.random.seed(seed)  # noqa: NPY002 (shuffle uses the global RNG, as RLlib)
            outs.append(
                chop_into_sequences(
                    feature_columns=cols,
                    state_columns=states,
                    episode_ids=eps,
                    max_seq_len=max_len,
                    dynamic_max=dynamic_max,
                    _extra_padding=extra,
                    padding=padding,
                    shuffle=shuffle,
                    handle_nested_data=True,
                )
            )
    finally:
        _impl.use_numpy_reference(not saved)
    (f1, s1, l1), (f2, s2, l2) = outs
    np.testing.assert_array_equal(l1, l2)
    for a, b in zip(f1, f2, strict=True):
        for x, y in zip(a, b, strict=True):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(s1[0], s2[0])
    t = (int(l1.max()) + extra) if dynamic_max else max_len
    assert f1[0][0].shape == (len(l1) * t, 2)
