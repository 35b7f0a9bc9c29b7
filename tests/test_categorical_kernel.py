"""``rlblocks._core.categorical_draw`` against its numpy twin and against float64 maths:
the inverse-CDF pick, the log-probabilities, the first maximum, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from rlblocks import _core
from rlblocks._reference.categorical import categorical_draw as twin
from rlblocks.distributions import Categorical

pytestmark = pytest.mark.native

F32 = np.float32


def _logits(max_rows: int = 40, max_k: int = 40) -> st.SearchStrategy[np.ndarray]:
    shapes = st.tuples(st.integers(1, max_rows), st.integers(1, max_k))
    finite = st.floats(-30, 30, width=32, allow_nan=False, allow_infinity=False)
    return hnp.arrays(F32, shapes, elements=finite)


def _exact(logits: np.ndarray, uniforms: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float64: the first index whose cumulative probability exceeds ``u``, the log-softmax,
    and how far ``u`` is from the nearest cumulative probability (where float32 may differ)."""
    x = logits.astype(np.float64)
    log_probs = x - x.max(1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(1, keepdims=True))
    cdf = np.cumsum(np.exp(log_probs), 1)
    u = uniforms.astype(np.float64) * cdf[:, -1]
    index = np.minimum((cdf <= u[:, None]).sum(1), x.shape[1] - 1)
    margin = np.abs(cdf - u[:, None]).min(1)
    return index, log_probs, margin


@settings(max_examples=200, deadline=None)
@given(_logits(), st.data())
def test_native_equals_the_twin_and_float64(logits: np.ndarray, data: st.DataObject) -> None:
    rows = len(logits)
    unit = st.floats(0, 1, width=32, exclude_max=True)
    uniforms = data.draw(hnp.arrays(F32, rows, elements=unit))
    index, logp = _core.categorical_draw(logits, uniforms)
    t_index, t_logp = twin(logits, uniforms)
    exact, log_probs, margin = _exact(logits, uniforms)
    assert index.dtype == np.int64 and logp.dtype == F32 and index.shape == logp.shape == (rows,)
    assert ((index >= 0) & (index < logits.shape[1])).all()
    clear = margin > 1e-5  # away from a boundary, float32 rounding cannot change the pick
    np.testing.assert_array_equal(index[clear], t_index[clear])
    np.testing.assert_array_equal(index[clear], exact[clear])
    np.testing.assert_allclose(logp, log_probs[np.arange(rows), index], rtol=1e-5, atol=2e-5)
    same = index == t_index  # all rows but those on a boundary (above)
    np.testing.assert_allclose(logp[same], t_logp[same], rtol=1e-6, atol=2e-6)


@settings(max_examples=100, deadline=None)
@given(_logits())
def test_without_uniforms_the_first_maximum(logits: np.ndarray) -> None:
    logits[:, -1] = logits.max(1)  # a tie with an earlier maximum where there is one
    index, logp = _core.categorical_draw(logits)
    np.testing.assert_array_equal(index, logits.argmax(1))
    np.testing.assert_array_equal(index, twin(logits)[0])
    ref = torch.log_softmax(torch.from_numpy(logits).double(), 1).numpy()
    np.testing.assert_allclose(logp, ref[np.arange(len(logits)), index], rtol=1e-5, atol=2e-5)


def test_draws_follow_the_probabilities_and_torch() -> None:
    """Many rows of one distribution: the frequencies are its probabilities, and the picks
    are the ones rlblocks' torch ``Categorical`` makes from the same generator."""
    probs = np.array([0.1, 0.0, 0.6, 0.3])
    logits = np.log(np.where(probs > 0, probs, 1e-30)).astype(F32)
    rows = 200_000
    torch.manual_seed(4)
    index, _ = _core.categorical_draw(np.tile(logits, (rows, 1)), torch.rand(rows).numpy())
    freq = np.bincount(index, minlength=4) / rows
    np.testing.assert_allclose(freq, probs, atol=4e-3)
    torch.manual_seed(5)
    batch = np.tile(logits, (64, 1))
    ours = _core.categorical_draw(batch, torch.rand(64).numpy())[0]
    torch.manual_seed(5)
    theirs = Categorical(torch.from_numpy(batch)).sample()
    np.testing.assert_array_equal(ours, theirs.numpy())


def test_a_uniform_next_to_one_stays_in_range() -> None:
    logits = np.array([[0.0, -80.0, -80.0]], F32)  # the last probability rounds to 0
    below_one = np.nextafter(F32(1), F32(0))
    for draw in (_core.categorical_draw, twin):
        index, _ = draw(logits, np.array([below_one], F32))
        assert 0 <= int(index[0]) < 3


@pytest.mark.parametrize("draw", [_core.categorical_draw, twin], ids=["native", "twin"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_logits_raise_naming_the_row(draw: object, bad: float) -> None:
    logits = np.zeros((3, 4), F32)
    logits[2, 1] = bad
    with pytest.raises(ValueError, match="row 2 are not all finite"):
        draw(logits, np.zeros(3, F32))  # type: ignore[operator]


@pytest.mark.parametrize(
    ("logits", "uniforms", "message"),
    [
        (np.zeros((2, 3), np.float64), None, "float32"),
        (np.zeros(3, F32), None, r"\[B, K\]"),
        (np.zeros((2, 0), F32), None, r"\[B, K\]"),
        (np.zeros((2, 3), F32), np.zeros(3, F32), r"uniforms must be \[B\] = \[2\]"),
        (np.zeros((2, 3), F32), np.zeros(2, np.float64), "uniforms must be a float32"),
    ],
)
def test_bad_arguments_are_value_errors(
    logits: np.ndarray, uniforms: np.ndarray | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        _core.categorical_draw(logits, uniforms)


def test_twenty_million_equal_logits_are_exact_to_float32() -> None:
    """A float32 running sum stops at 2**24 terms of 1: K = 20M equal logits gave logp
    -16.64 and u = 0.5 drew index 8,388,609. Summed in float64, both are exact."""
    k = 20_000_000
    logits = np.zeros((1, k), F32)
    half = np.array([0.5], F32)
    for draw in (_core.categorical_draw, twin):
        index, logp = draw(logits, half)  # type: ignore[operator]
        assert int(index[0]) == k // 2
        assert logp[0] == np.float32(-np.log(k))
        _, logp = draw(logits)  # type: ignore[operator]
        assert logp[0] == np.float32(-np.log(k))


BAD_ARGS = [
    (np.zeros((2, 3), np.float64), None),
    (np.zeros(3, F32), None),
    (np.zeros((2, 0), F32), None),
    ([[0.0, 1.0]], None),
    (np.zeros((2, 3), F32), np.zeros(3, F32)),
    (np.zeros((1, 3), F32), np.zeros(3, F32)),
    (np.zeros((1, 3), F32), np.zeros((1, 1), F32)),
    (np.zeros((2, 3), F32), np.zeros(2, np.float64)),
    (np.zeros((2, 3), F32), np.zeros(2, np.int32)),
    (np.zeros((2, 3), F32), [0.5, 0.5]),
    (np.full((2, 3), np.nan, F32), np.zeros(3, F32)),
]


@pytest.mark.parametrize(("logits", "uniforms"), BAD_ARGS)
def test_the_twin_refuses_what_the_kernel_refuses_with_its_message(
    logits: np.ndarray, uniforms: np.ndarray | None
) -> None:
    with pytest.raises(ValueError) as native:
        _core.categorical_draw(logits, uniforms)
    with pytest.raises(ValueError) as numpy_twin:
        twin(logits, uniforms)
    assert str(numpy_twin.value) == str(native.value)


def test_no_rows_give_empty_results_on_both() -> None:
    for draw in (_core.categorical_draw, twin):
        for uniforms in (None, np.zeros(0, F32)):
            index, logp = draw(np.zeros((0, 4), F32), uniforms)  # type: ignore[operator]
            assert index.shape == logp.shape == (0,)
            assert index.dtype == np.int64 and logp.dtype == F32
