"""The action heads' fused kernels against their numpy twins and the torch distributions:
``_core.masked_categorical_draw`` (the model's masking and MaskedCategorical's draw in one
call) and ``_core.diag_gaussian_draw`` (DiagGaussian's draw and log-density); a masked
action is never drawn, and both refuse bad input with their twin's message. Also the
actor's fused forward ``_core.dense_forward`` against its twin, the numpy forward and the
actor's draws."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from rlblocks import _core
from rlblocks._reference.categorical import masked_categorical_draw as masked_twin
from rlblocks._reference.dense import dense_forward as dense_twin
from rlblocks._reference.diag_gaussian import diag_gaussian_draw as gaussian_twin
from rlblocks.distributions import DiagGaussian, MaskedCategorical
from rlblocks.distributions.base import FLOAT_MIN, LOG_BOUND
from rlblocks.train.fast.dense_layers import run_numpy
from rlblocks.train.fast.fc_actor import FUSED_ROWS, FCActor

pytestmark = pytest.mark.native

F32 = np.float32
UNIT = st.floats(0, 1, width=32, exclude_max=True)


@st.composite
def masked_batches(draw: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(logits, mask, uniforms)``: every mask row with an entry > 0; some legal logits
    below the masked rule's -1e8 where the row keeps one above it."""
    rows, k = draw(st.integers(1, 24)), draw(st.integers(1, 9))
    finite = st.floats(-30, 30, width=32)
    logits = draw(hnp.arrays(F32, (rows, k), elements=finite))
    mask = draw(hnp.arrays(F32, (rows, k), elements=st.sampled_from([0.0, 1.0, -1.0, 0.5])))
    first = draw(hnp.arrays(np.int64, rows, elements=st.integers(0, k - 1)))
    mask[np.arange(rows), first] = 1.0  # a legal action in every row, above the floor
    deep = draw(hnp.arrays(np.bool_, (rows, k)))
    deep[np.arange(rows), first] = False
    logits[deep] = F32(-3e8)
    uniforms = draw(hnp.arrays(F32, rows, elements=UNIT))
    return logits, mask, uniforms


@settings(max_examples=150, deadline=None)
@given(masked_batches(), st.booleans())
def test_masked_draw_equals_its_twin_and_never_draws_a_masked_action(batch, explore):
    logits, mask, uniforms = batch
    u = uniforms if explore else None
    masked, index, logp = _core.masked_categorical_draw(logits, mask, u)
    t_masked, t_index, t_logp = masked_twin(logits, mask, u)
    assert masked.dtype == F32 and index.dtype == np.int64 and logp.dtype == F32
    np.testing.assert_array_equal(masked, np.where(mask <= 0, F32(FLOAT_MIN), logits))
    np.testing.assert_array_equal(masked, t_masked)
    rows = np.arange(len(logits))
    assert (mask[rows, index] > 0).all()  # never a masked action
    assert (logits[rows, index] > -1e8).all()  # nor one the masked rule counts as masked
    assert (mask[rows, t_index] > 0).all()
    if u is not None:  # away from a float32 boundary of the CDF both pick the same
        floored = np.where(masked <= -1e8, -np.inf, masked.astype(np.float64))
        probs = np.exp(floored - floored.max(1, keepdims=True))
        cdf = np.cumsum(probs / probs.sum(1, keepdims=True), 1)
        clear = np.abs(cdf - u[:, None].astype(np.float64)).min(1) > 1e-5
        np.testing.assert_array_equal(index[clear], t_index[clear])
    else:
        np.testing.assert_array_equal(index, t_index)
    same = index == t_index
    np.testing.assert_allclose(logp[same], t_logp[same], rtol=1e-6, atol=2e-6)


@pytest.mark.parametrize("explore", [True, False])
def test_masked_draw_equals_masked_categorical(explore):
    """The same torch uniforms give MaskedCategorical's actions and log-probs."""
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (64, 5)).astype(F32)
    mask = (rng.random((64, 5)) < 0.5).astype(F32)
    logits[:, 2] = F32(-5e8)  # legal, below the masked rule in every row
    mask[:, [0, 2]] = 1.0
    torch.manual_seed(3)
    uniforms = torch.rand(64).numpy() if explore else None
    masked, index, logp = _core.masked_categorical_draw(logits, mask, uniforms)
    torch.manual_seed(3)
    dist = MaskedCategorical(torch.from_numpy(masked))
    want = dist.sample() if explore else dist.deterministic_sample()
    np.testing.assert_array_equal(index, want.numpy())
    np.testing.assert_allclose(logp, dist.logp(want).numpy(), rtol=1e-5, atol=1e-5)
    assert (index != 2).all()


def _refusal(fn: Any, *args: Any) -> str:
    with pytest.raises(ValueError) as err:
        fn(*args)
    return str(err.value)


def _same_refusal(native: Any, twin: Any, *args: Any) -> str:
    message = _refusal(native, *args)
    assert _refusal(twin, *args) == message
    return message


MASKED_REFUSALS = {
    "no legal entry": (
        np.zeros((2, 3), F32),
        np.array([[1, 0, 0], [0, -1, 0]], F32),
        None,
        "mask row 1 has no entry > 0",
    ),
    "all below the floor": (
        np.array([[0, 0, 0], [-2e8, 0, 1]], F32),
        np.array([[1, 1, 1], [1, 0, 0]], F32),
        np.zeros(2, F32),
        "row 1 has no legal logit above -1e8",
    ),
    "nan logit": (
        np.array([[0, np.nan, 0]], F32),
        np.ones((1, 3), F32),
        None,
        "row 0 are not all finite",
    ),
    "inf logit": (np.array([[np.inf, 0]], F32), np.ones((1, 2), F32), None, "not all finite"),
    "float64 logits": (np.zeros((1, 2)), np.ones((1, 2), F32), None, "logits must be a float32"),
    "int mask": (np.zeros((1, 2), F32), np.ones((1, 2), np.int8), None, "mask must be a float32"),
    "mask shape": (np.zeros((2, 2), F32), np.ones((2, 3), F32), None, "mask must be shaped"),
    "1-d logits": (np.zeros(3, F32), np.ones(3, F32), None, "logits must be [B, K]"),
    "no actions": (np.zeros((2, 0), F32), np.ones((2, 0), F32), None, "K >= 1"),
    "uniforms shape": (np.zeros((2, 2), F32), np.ones((2, 2), F32), np.zeros(3, F32), "[B] = [2]"),
}


@pytest.mark.parametrize("case", sorted(MASKED_REFUSALS))
def test_masked_draw_refuses_bad_input_with_its_twins_message(case):
    logits, mask, uniforms, part = MASKED_REFUSALS[case]
    message = _same_refusal(_core.masked_categorical_draw, masked_twin, logits, mask, uniforms)
    assert message.startswith("masked_categorical_draw: ") and part in message, message


def test_masked_draw_of_no_rows():
    for fn in (_core.masked_categorical_draw, masked_twin):
        masked, index, logp = fn(np.zeros((0, 3), F32), np.zeros((0, 3), F32), np.zeros(0, F32))
        assert masked.shape == (0, 3) and index.shape == logp.shape == (0,)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 16).flatmap(
        lambda rows: st.integers(0, 5).flatmap(
            lambda d: st.tuples(
                hnp.arrays(F32, (rows, 2 * d), elements=st.floats(-30, 30, width=32)),
                hnp.arrays(F32, (rows, d), elements=st.floats(-5, 5, width=32)),
            )
        )
    ),
    st.booleans(),
)
def test_gaussian_draw_equals_its_twin(batch, explore):
    inputs, noise = batch
    n = noise if explore else None
    actions, logp = _core.diag_gaussian_draw(inputs, n, LOG_BOUND)
    t_actions, t_logp = gaussian_twin(inputs, n, LOG_BOUND)
    assert actions.dtype == logp.dtype == F32 and actions.shape == noise.shape
    np.testing.assert_allclose(actions, t_actions, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(logp, t_logp, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("explore", [True, False])
def test_gaussian_draw_equals_diag_gaussian(explore):
    """The same torch normals give DiagGaussian's actions and log-probs (log-stds beyond
    the clamp included)."""
    inputs = np.random.default_rng(1).normal(0, 2, (32, 6)).astype(F32)
    inputs[0, 3:] = [25.0, -25.0, 0.0]
    torch.manual_seed(5)
    noise = torch.randn(32, 3).numpy() if explore else None
    actions, logp = _core.diag_gaussian_draw(inputs, noise)
    torch.manual_seed(5)
    dist = DiagGaussian(torch.from_numpy(inputs), None)
    want = dist.sample() if explore else dist.deterministic_sample()
    np.testing.assert_allclose(actions, want.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(logp, dist.logp(want).numpy(), rtol=1e-5, atol=1e-4)


GAUSSIAN_REFUSALS = {
    "odd width": (np.zeros((2, 3), F32), None, 20.0, "inputs must be [B, 2 * d]"),
    "1-d inputs": (np.zeros(4, F32), None, 20.0, "inputs must be [B, 2 * d]"),
    "float64 inputs": (np.zeros((2, 2)), None, 20.0, "inputs must be a float32"),
    "noise shape": (np.zeros((2, 4), F32), np.zeros((2, 3), F32), 20.0, "(2, 2), got"),
    "float64 noise": (np.zeros((2, 4), F32), np.zeros((2, 2)), 20.0, "noise must be a float32"),
    "negative bound": (np.zeros((2, 4), F32), None, -1.0, "got -1.0"),
    "nan bound": (np.zeros((2, 4), F32), None, float("nan"), "got nan"),
    "inf bound": (np.zeros((2, 4), F32), None, float("inf"), "got inf"),
}


@pytest.mark.parametrize("case", sorted(GAUSSIAN_REFUSALS))
def test_gaussian_draw_refuses_bad_input_with_its_twins_message(case):
    inputs, noise, bound, part = GAUSSIAN_REFUSALS[case]
    message = _same_refusal(_core.diag_gaussian_draw, gaussian_twin, inputs, noise, bound)
    assert message.startswith("diag_gaussian_draw: ") and part in message, message


# --- the actor's fused forward: _core.dense_forward ------------------------------------------

ACTIVATIONS = st.sampled_from([None, "tanh", "relu"])


@st.composite
def dense_stacks(draw: Any) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, Any]]]:
    """``(x, layers)``: 0-12 rows, 0-3 layers of widths 1-70 (partial blocks of 8 included)."""
    rows = draw(st.integers(0, 12))
    widths = draw(st.lists(st.integers(1, 70), min_size=1, max_size=4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 2, (rows, widths[0])).astype(F32)
    layers = [
        (
            (rng.normal(0, 1, (o, i)) / np.sqrt(i)).astype(F32),
            rng.normal(0, 0.5, o).astype(F32),
            draw(ACTIVATIONS),
        )
        for i, o in zip(widths[:-1], widths[1:], strict=True)
    ]
    return x, layers


@settings(max_examples=100, deadline=None)
@given(dense_stacks())
def test_dense_forward_equals_its_twin_and_the_numpy_forward(stack):
    x, layers = stack
    got = _core.dense_forward(x, layers)
    twin = dense_twin(x, layers)
    numpy_path = run_numpy(layers, x.copy())  # the actor's numpy forward (BLAS, _core.tanh)
    width = layers[-1][0].shape[0] if layers else x.shape[1]
    assert got.dtype == F32 and got.shape == twin.shape == (len(x), width)
    assert got.flags.c_contiguous and not np.shares_memory(got, x)
    np.testing.assert_allclose(got, twin, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, numpy_path, rtol=1e-5, atol=1e-5)


def test_dense_forward_of_no_rows_and_of_strided_input():
    w, b = np.ones((3, 4), F32), np.zeros(3, F32)
    for fn in (_core.dense_forward, dense_twin):
        assert fn(np.zeros((0, 4), F32), [(w, b, "tanh")]).shape == (0, 3)
        wide = np.arange(16, dtype=F32).reshape(2, 8) / 10
        got = fn(wide[:, ::2], [(w, b, None)])  # a non-contiguous batch reads as its values
        np.testing.assert_allclose(got, np.repeat(wide[:, ::2].sum(1, keepdims=True), 3, 1))


W34, B3 = np.zeros((3, 4), F32), np.zeros(3, F32)
DENSE_REFUSALS = {
    "float64 x": (np.zeros((2, 4)), [(W34, B3, None)], "x must be a float32 array"),
    "1-d x": (np.zeros(4, F32), [(W34, B3, None)], "x must be [B, in], got shape (4,)"),
    "layers not a list": (np.zeros((2, 4), F32), (W34, B3), "layers[0] must be"),
    "layers a dict": (np.zeros((2, 4), F32), {}, "layers must be a list of"),
    "short tuple": (np.zeros((2, 4), F32), [(W34, B3)], "got a tuple of length 2"),
    "list for tuple": (np.zeros((2, 4), F32), [[W34, B3, None]], "tuple, got list"),
    "float64 weight": (np.zeros((2, 4), F32), [(W34.astype(np.float64), B3, None)], "weight must"),
    "weight width": (np.zeros((2, 5), F32), [(W34, B3, None)], "[out, 5] (its input's width)"),
    "second width": (
        np.zeros((2, 4), F32),
        [(W34, B3, "tanh"), (W34, B3, None)],
        "layers[1] weight must be [out, 3]",
    ),
    "bias shape": (np.zeros((2, 4), F32), [(W34, np.zeros(4, F32), None)], "of shape (3,), got"),
    "int bias": (np.zeros((2, 4), F32), [(W34, np.zeros(3, np.int32), None)], "bias must be"),
    "elu": (np.zeros((2, 4), F32), [(W34, B3, "elu")], "'tanh' or 'relu', got 'elu'"),
    "callable": (np.zeros((2, 4), F32), [(W34, B3, 3)], "'relu', got 3"),
    "tensor weight": (np.zeros((2, 4), F32), [(torch.zeros(3, 4), B3, None)], "array, got Tensor"),
}


@pytest.mark.parametrize("case", sorted(DENSE_REFUSALS))
def test_dense_forward_refuses_bad_input_with_its_twins_message(case):
    x, layers, part = DENSE_REFUSALS[case]
    message = _same_refusal(_core.dense_forward, dense_twin, x, layers)
    assert message.startswith("dense_forward: ") and part in message, message


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("rows", [1, 8, FUSED_ROWS + 1])
def test_fc_actor_fused_forward_equals_numpy_and_draws_the_same(share, rows):
    """The actor's forward through ``dense_forward`` (up to FUSED_ROWS rows) equals its
    numpy forward, and a seeded draw takes the same actions from torch's generator."""
    import gymnasium as gym
    from rlblocks import _impl
    from rlblocks.train.policy import Policy
    from rlblocks.train.trainer_config import PPOConfig

    cfg = PPOConfig.from_dict({"model": {"vf_share_layers": share, "fcnet_hiddens": [64, 64]}})
    pol = Policy(gym.spaces.Box(-1, 1, (5,)), gym.spaces.Discrete(4), cfg)
    actor = pol.actor
    assert isinstance(actor, FCActor) and actor.numpy
    obs = np.random.default_rng(rows).normal(0, 1, (rows, 5)).astype(F32)
    results = {}
    for reference in (False, True):
        _impl.use_numpy_reference(reference)
        try:
            out, values = actor.forward_numpy(obs)
            torch.manual_seed(3)
            acted = pol.act(obs, [], explore=True, full=True)
        finally:
            _impl.use_numpy_reference(False)
        results[reference] = (out, values, actor.policy_numpy(obs), acted)
    (out, values, policy, acted), (n_out, n_values, _, n_acted) = results[False], results[True]
    assert out.dtype == values.dtype == F32 and values.shape == (rows,)
    np.testing.assert_allclose(out, n_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values, n_values, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(policy, out)
    np.testing.assert_array_equal(acted["actions"], n_acted["actions"])
    np.testing.assert_allclose(acted["logp"], n_acted["logp"], rtol=1e-5, atol=1e-6)
