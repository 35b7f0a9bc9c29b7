"""``rlblocks._core.squashed_gaussian_sample`` / ``squashed_gaussian_grad`` against their
numpy twin and against torch: the draw and log-density of
:class:`~rlblocks.distributions.SquashedGaussian` over ``[-1, 1]``, and autograd's gradient
through every clamp (log-std bounds, the density clamp, actions saturated at exactly
``+-1``); bad input raises a ValueError naming the argument."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from rlblocks import _core
from rlblocks._reference import squashed_gaussian as twin
from rlblocks.distributions import SquashedGaussian, base
from rlblocks.distributions.base import MAX_LOG_NN_OUTPUT, MIN_LOG_NN_OUTPUT

pytestmark = pytest.mark.native

F32 = np.float32
BOUNDS = (MIN_LOG_NN_OUTPUT, MAX_LOG_NN_OUTPUT)


@st.composite
def _draws(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(inputs [B, 2d], noise [B, d], d_action [B, d])``: means up to +-40 (tanh saturates
    to exactly +-1 in float32), log-stds beyond both clamp bounds, exact bounds included."""
    rows, d = draw(st.integers(1, 24)), draw(st.integers(1, 4))
    mean = st.floats(-40, 40, width=32)
    log_std = st.one_of(st.floats(-30, 30, width=32), st.sampled_from([-5.0, 2.0]))
    means = draw(hnp.arrays(F32, (rows, d), elements=mean))
    log_stds = draw(hnp.arrays(F32, (rows, d), elements=log_std))
    noise = draw(hnp.arrays(F32, (rows, d), elements=st.floats(-6, 6, width=32)))
    d_action = draw(hnp.arrays(F32, (rows, d), elements=st.floats(-3, 3, width=32)))
    return np.concatenate([means, log_stds], 1), noise, d_action


def _torch_reference(
    inputs: np.ndarray, noise: np.ndarray, d_action: np.ndarray, coef: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(action, logp, gradient)`` by autograd through SquashedGaussian, with ``noise`` as
    its standard-normal draw."""
    x = torch.tensor(inputs, requires_grad=True)
    dist = SquashedGaussian(x)
    z = dist.mean + dist.std * torch.from_numpy(noise)
    action, logp = dist._squash(z), dist._presquash_logp(z)
    (torch.from_numpy(d_action) * action).sum().add(coef * logp.sum()).backward()
    assert x.grad is not None
    return action.detach().numpy(), logp.detach().numpy(), x.grad.numpy()


def _slack(
    inputs: np.ndarray, noise: np.ndarray, d_action: np.ndarray, coef: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How far float32 implementations of the same formulas may differ, to first order in
    a few ulps (the kernel's, numpy's and torch's exp and tanh differ by about one): ``[B, d]``
    for the action, ``[B]`` for logp, ``[B, 2d]`` for the gradient. Two places are
    ill-conditioned: ``log(1 - tanh^2 + 1e-6)`` as ``tanh`` nears +-1 (an ulp of ``tanh``
    against the small ``1 - tanh^2``), and ``(z - mean) / std`` for a mean large against
    a small std (``z = mean + std * noise`` rounds at the mean's magnitude)."""
    d = noise.shape[1]
    x = inputs.astype(np.float64)
    mean, log_std = x[:, :d], np.clip(x[:, d:], *BOUNDS)
    std = np.exp(log_std)
    t = np.tanh(mean + std * noise)
    ulps = 2.0**-20
    z_scale = np.abs(mean) + std * np.abs(noise)  # what z's rounding is relative to
    scaled_err = ulps * z_scale / std  # of (z - mean) / std
    jac_err = ulps / (1.0 - t * t + 1e-6)  # relative, of 1 - tanh^2 + 1e-6
    action = ulps * z_scale * (1.0 - t * t) + 1e-6
    logp = (
        (np.abs(noise) + 1.0) * scaled_err + ulps * (np.abs(log_std) + 1.0) + 4.0 * jac_err
    ).sum(1)
    grad = (
        (np.abs(d_action) + 2.0 * coef) * (ulps * (1.0 + z_scale) + 4.0 * jac_err)
        + coef * (2.0 + np.abs(noise)) * scaled_err / std
    ) * (1.0 + np.abs(noise) * std)
    return action, logp, np.concatenate([grad, grad], 1)


@settings(max_examples=150, deadline=None)
@given(_draws(), st.floats(0, 2))
def test_native_equals_the_twin_and_autograd(
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray], coef: float
) -> None:
    inputs, noise, d_action = arrays
    action, logp = _core.squashed_gaussian_sample(inputs, noise, *BOUNDS)
    grad = _core.squashed_gaussian_grad(inputs, noise, d_action, coef, *BOUNDS)
    assert action.dtype == logp.dtype == grad.dtype == F32
    assert action.shape == noise.shape and logp.shape == (len(inputs),)
    assert grad.shape == inputs.shape
    assert ((action >= -1) & (action <= 1)).all()

    action_slack, logp_slack, grad_slack = _slack(inputs, noise, d_action, coef)
    t_action, t_logp = twin.squashed_gaussian_sample(inputs, noise, *BOUNDS)
    t_grad = twin.squashed_gaussian_grad(inputs, noise, d_action, coef, *BOUNDS)
    r_action, r_logp, r_grad = _torch_reference(inputs, noise, d_action, coef)
    # the one place float32 rounding may flip a branch: tanh rounding to exactly +-1 (the
    # clamp's tie) in one implementation and not the other; the gradients are compared on
    # the rows where both saturate alike
    for other_action, other_logp, other_grad in (
        (t_action, t_logp, t_grad),
        (r_action, r_logp, r_grad),
    ):
        assert (np.abs(action - other_action) <= action_slack).all()
        assert (np.abs(logp - other_logp) <= 1e-4 * (1 + np.abs(other_logp)) + logp_slack).all()
        alike = (np.abs(action) == 1) == (np.abs(other_action) == 1)
        rows = alike.all(1)
        err = np.abs(grad - other_grad)[rows]
        assert (err <= 1e-4 * (1 + np.abs(other_grad[rows])) + grad_slack[rows]).all(), err


def test_saturated_actions_and_clamped_log_stds_get_no_gradient() -> None:
    # mean 50: tanh is exactly 1 in float32 (d tanh = 0); log-std 9 lies beyond the upper
    # bound 2, where the clamp passes no gradient
    inputs = np.array([[50.0, 9.0], [0.0, 0.0]], F32)
    noise = np.zeros((2, 1), F32)
    grad = _core.squashed_gaussian_grad(inputs, noise, np.ones((2, 1), F32), 0.0, *BOUNDS)
    action, _ = _core.squashed_gaussian_sample(inputs, noise, *BOUNDS)
    assert action[0, 0] == 1.0
    # d action / d mean = (1 - tanh^2) = 0 at saturation; at 0 it is 1
    np.testing.assert_array_equal(grad, np.array([[0.0, 0.0], [1.0, 0.0]], F32))


def test_an_action_rounded_onto_the_bound_passes_half_its_gradient() -> None:
    # tanh(8.75) is 1 - 2^-24 in float32: the squash rounds it to exactly 1, a tie of the
    # clamp, where torch passes half the gradient; 1 - tanh^2 is 2^-23, so the mean's
    # gradient is 0.5 * 2^-23
    inputs = np.array([[8.75, 0.0]], F32)
    noise, d_action = np.zeros((1, 1), F32), np.ones((1, 1), F32)
    assert torch.tanh(torch.tensor(8.75)).item() == np.float32(1 - 2**-24)
    action, _ = _core.squashed_gaussian_sample(inputs, noise, *BOUNDS)
    grad = _core.squashed_gaussian_grad(inputs, noise, d_action, 0.0, *BOUNDS)
    assert action[0, 0] == 1.0 and grad[0, 0] == 2.0**-24
    assert _torch_reference(inputs, noise, d_action, 0.0)[2][0, 0] == 2.0**-24
    assert twin.squashed_gaussian_grad(inputs, noise, d_action, 0.0, *BOUNDS)[0, 0] == 2.0**-24


def test_nan_inputs_stay_in_their_row() -> None:
    inputs = np.array([[np.nan, 0.0], [0.5, -1.0]], F32)
    noise = np.ones((2, 1), F32)
    action, logp = _core.squashed_gaussian_sample(inputs, noise, *BOUNDS)
    grad = _core.squashed_gaussian_grad(inputs, noise, np.ones((2, 1), F32), 0.1, *BOUNDS)
    assert np.isnan(logp[0]) and np.isfinite(logp[1]) and np.isfinite(action[1]).all()
    assert np.isfinite(grad[1]).all()


def test_non_contiguous_arguments_are_read_as_their_values() -> None:
    rng = np.random.default_rng(0)
    wide = rng.standard_normal((6, 8)).astype(F32)
    inputs, noise = wide[:, 2:6], wide[:, ::4]
    d_action = rng.standard_normal((2, 6)).astype(F32).T
    assert not inputs.flags.c_contiguous and not d_action.flags.c_contiguous
    got = _core.squashed_gaussian_grad(inputs, noise, d_action, 0.3, *BOUNDS)
    want = _core.squashed_gaussian_grad(inputs.copy(), noise.copy(), d_action.copy(), 0.3, *BOUNDS)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("inputs", "noise", "d_action", "message"),
    [
        (np.zeros((3, 2)), np.zeros((3, 1), F32), None, "inputs must be a float32 array"),
        (np.zeros((3, 3), F32), np.zeros((3, 1), F32), None, r"inputs must be \[B, 2d\]"),
        (np.zeros(4, F32), np.zeros((2, 1), F32), None, r"inputs must be \[B, 2d\]"),
        (np.zeros((3, 2), F32), np.zeros((2, 1), F32), None, r"noise must be \[3, 1\]"),
        (np.zeros((3, 4), F32), np.zeros((3, 1), F32), None, r"noise must be \[3, 2\]"),
        ([[0.0, 0.0]], np.zeros((1, 1), F32), None, "inputs must be a float32 array, got list"),
        (np.zeros((3, 2), F32), np.zeros((3, 1), F32), np.zeros((3, 2), F32), "d_action must be"),
        (np.zeros((3, 2), F32), np.zeros((3, 1), F32), np.zeros((3, 1)), "d_action must be a fl"),
    ],
)
def test_bad_arguments_raise_naming_them(inputs, noise, d_action, message) -> None:
    with pytest.raises(ValueError, match=message):
        if d_action is None:
            _core.squashed_gaussian_sample(inputs, noise, *BOUNDS)
        else:
            _core.squashed_gaussian_grad(inputs, noise, d_action, 1.0, *BOUNDS)
    with pytest.raises(ValueError, match="log_std bounds must satisfy low <= high"):
        _core.squashed_gaussian_sample(np.zeros((1, 2), F32), np.zeros((1, 1), F32), 2.0, -5.0)


Z = np.zeros
GOOD = (Z((1, 2), F32), Z((1, 1), F32))


@pytest.mark.parametrize(
    ("inputs", "noise", "d_action", "bounds"),
    [
        (*GOOD, Z((1, 1), F32), (float("nan"), 2.0)),
        (*GOOD, Z((1, 1), F32), (-5.0, float("nan"))),
        (*GOOD, Z((1, 1), F32), (2.0, -5.0)),
        (*GOOD, Z((1, 1), np.int32), BOUNDS),
        (*GOOD, Z((2, 1), F32), BOUNDS),  # numpy would broadcast it into a wrong gradient
        (*GOOD, Z((1,), F32), BOUNDS),
        (*GOOD, [[0.0]], BOUNDS),
        (Z((1, 2), F32), Z((3, 1), F32), Z((1, 1), F32), BOUNDS),
        (Z((1, 2), F32), Z((1, 1), np.float64), Z((1, 1), F32), BOUNDS),
        (Z((1, 3), F32), Z((1, 1), F32), Z((1, 1), F32), BOUNDS),
        (Z((1, 2), np.float16), Z((1, 1), F32), Z((1, 1), F32), BOUNDS),
        (Z((1, 2, 1), F32), Z((1, 1), F32), Z((1, 1), F32), BOUNDS),
    ],
)
def test_the_twin_refuses_what_the_kernel_refuses_with_its_message(
    inputs, noise, d_action, bounds
) -> None:
    for native, numpy_twin, args in (
        (_core.squashed_gaussian_sample, twin.squashed_gaussian_sample, (inputs, noise)),
        (_core.squashed_gaussian_grad, twin.squashed_gaussian_grad, (inputs, noise, d_action, 0.5)),
    ):
        try:
            native(*args, *bounds)
        except ValueError as err:
            with pytest.raises(ValueError) as twin_err:
                numpy_twin(*args, *bounds)
            assert str(twin_err.value) == str(err)
        else:  # sample does not read d_action: both accept it
            numpy_twin(*args, *bounds)
            assert native is _core.squashed_gaussian_sample


def test_no_rows_give_empty_results_on_both() -> None:
    inputs, noise = np.zeros((0, 4), F32), np.zeros((0, 2), F32)
    for impl in (_core, twin):
        action, logp = impl.squashed_gaussian_sample(inputs, noise, *BOUNDS)
        grad = impl.squashed_gaussian_grad(inputs, noise, noise, 0.5, *BOUNDS)
        assert action.shape == (0, 2) and logp.shape == (0,) and grad.shape == (0, 4)
        assert action.dtype == logp.dtype == grad.dtype == F32


def test_the_twin_uses_the_distributions_constants() -> None:
    """The twin keeps its own copies (it sits below the torch layer): they must agree."""
    assert twin.SMALL_NUMBER == base.SMALL_NUMBER
    assert twin._HALF_LOG_2PI == base._HALF_LOG_2PI
