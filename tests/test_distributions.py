"""Action distributions: closed forms, torch.distributions / scipy oracles, Monte Carlo,
sample statistics, masking, autoregressive chains, the catalog table and numerics."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rlblocks.distributions import (
    FLOAT_MIN,
    ActionDistribution,
    AutoregressiveDistribution,
    Beta,
    BinaryAutoregressiveDistribution,
    Categorical,
    Deterministic,
    DiagGaussian,
    Dirichlet,
    MaskedCategorical,
    MaskedMultiCategorical,
    MultiActionDistribution,
    MultiCategorical,
    SquashedGaussian,
    UnsupportedSpaceError,
    select_action_dist,
)
from rlblocks.spaces import Simplex
from scipy import stats

TD = torch.distributions


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def _close(a: torch.Tensor, b, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    if isinstance(b, torch.Tensor):
        b = b.detach()
    b = torch.as_tensor(np.asarray(b), dtype=torch.float64)
    np.testing.assert_allclose(a.detach().double().numpy(), b.numpy(), atol=atol, rtol=rtol)


def _all_finite_grads(loss: torch.Tensor, x: torch.Tensor) -> None:
    assert torch.isfinite(loss).all(), loss
    (g,) = torch.autograd.grad(loss.sum(), x)
    assert torch.isfinite(g).all(), g


# ------------------------------------------------------------------------------ Categorical


def test_categorical_matches_torch() -> None:
    logits = torch.randn(64, 5) * 3
    other = torch.randn(64, 5)
    a = torch.randint(0, 5, (64,))
    d, ref = Categorical(logits, None), TD.Categorical(logits=logits)
    _close(d.logp(a), ref.log_prob(a))
    _close(d.entropy(), ref.entropy())
    _close(d.kl(Categorical(other, None)), TD.kl_divergence(ref, TD.Categorical(logits=other)))
    assert d.logp(a).dtype == torch.float32
    assert torch.equal(d.deterministic_sample(), logits.argmax(1))


def test_categorical_temperature_copies_and_scales() -> None:
    logits = torch.tensor([[1.0, 2.0, 4.0]])
    before = logits.clone()
    d = Categorical(logits, None, temperature=0.5)
    assert torch.equal(logits, before)  # difference 7: the caller's tensor is untouched
    _close(d.probs, torch.softmax(before / 0.5, -1))
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="temperature"):
            Categorical(logits, None, temperature=bad)


def test_categorical_entropy_and_kl_monte_carlo() -> None:
    x = torch.tensor([[2.0, -1.0, 0.5, 0.0, 1.0]]).repeat(40000, 1)
    y = torch.tensor([[0.0, 1.0, -0.5, 0.3, 0.0]]).repeat(40000, 1)
    d, o = Categorical(x, None), Categorical(y, None)
    s = d.sample()
    _close(-d.logp(s).mean(), d.entropy()[0], atol=0.02)
    _close((d.logp(s) - o.logp(s)).mean(), d.kl(o)[0], atol=0.02)


def test_categorical_sample_frequencies_and_ties() -> None:
    probs = torch.tensor([0.1, 0.0, 0.6, 0.3])
    d = Categorical(probs.log().expand(40000, 4), None)
    counts = torch.bincount(d.sample(), minlength=4).double() / 40000
    assert counts[1] == 0  # zero-probability category never drawn
    _close(counts, probs, atol=0.015)
    assert d.deterministic_sample()[0] == 2
    assert Categorical(torch.zeros(1, 3), None).deterministic_sample().item() == 0  # first tie


def test_categorical_batch_dims_and_start() -> None:
    logits = torch.randn(2, 3, 4, 6)
    d = Categorical(logits, None)
    s = d.sample()
    assert s.shape == (2, 3, 4) and s.dtype == torch.int64
    _close(d.logp(s), TD.Categorical(logits=logits).log_prob(s))
    assert d.entropy().shape == (2, 3, 4)
    space = Discrete(6, start=-2)
    cls, n = select_action_dist(space, {})
    d2 = cls(logits, None)
    s2 = d2.sample()
    assert n == 6 and int(s2.min()) >= -2 and int(s2.max()) <= 3
    _close(d2.logp(s2), TD.Categorical(logits=logits).log_prob(s2 + 2))
    for dist in (d, d2, cls(logits, None, temperature=0.5)):  # the unchecked sampled path
        sample = dist.sample()
        torch.testing.assert_close(dist.sampled_action_logp(), dist.logp(sample), rtol=0, atol=0)


def test_categorical_bad_actions() -> None:
    d = Categorical(torch.zeros(4, 3), None)
    with pytest.raises(ValueError, match="out of range"):
        d.logp(torch.tensor([0, 1, 3, 0]))
    with pytest.raises(ValueError, match="out of range"):
        d.logp(torch.tensor([0, -1, 0, 0]))
    with pytest.raises(ValueError, match="shape"):
        d.logp(torch.tensor([[0], [1], [2], [0]]))
    with pytest.raises(ValueError, match="Categorical"):
        d.kl(DiagGaussian(torch.zeros(4, 2), None))


def test_numpy_inputs_become_float32_tensors() -> None:
    d = Categorical(np.zeros((2, 3), dtype=np.float64), None)
    assert d.inputs.dtype == torch.float32
    _close(d.logp(np.array([0, 2])), [-math.log(3)] * 2)


@pytest.mark.parametrize("scale", [1e4, -1e4])
def test_categorical_extreme_logits_are_finite(scale: float) -> None:
    x = (torch.tensor([[1.0, -1.0, 0.5, 0.0], [0.0, 0.0, 1.0, -1.0]]) * scale).requires_grad_()
    d, o = Categorical(x, None), Categorical(x.flip(-1), None)
    a = d.sample()
    assert a.shape == (2,)
    _all_finite_grads(d.logp(torch.tensor([1, 3])) + d.entropy() + d.kl(o), x)
    _all_finite_grads(Categorical(x, None, temperature=0.1).entropy(), x)


# ------------------------------------------------------------------------------ masking


def test_masked_categorical_never_samples_masked() -> None:
    mask = torch.tensor([[1, 0, 1, 0, 1], [0, 0, 0, 1, 0]], dtype=torch.bool)
    logits = torch.tensor([[-5.0, 30.0, 0.0, 30.0, 2.0], [9.0, 9.0, 9.0, -9.0, 9.0]])
    d = MaskedCategorical(logits.repeat(50000, 1), mask=mask.repeat(50000, 1))
    s = d.sample().reshape(50000, 2)  # 10^5 draws
    assert bool(mask[0][s[:, 0]].all()) and bool((s[:, 1] == 3).all())
    legal_p = torch.softmax(torch.tensor([-5.0, 0.0, 2.0]), -1)
    freq = torch.bincount(s[:, 0], minlength=5)[[0, 2, 4]].double() / 50000
    _close(freq, legal_p, atol=0.01)
    assert torch.equal(d.deterministic_sample()[:2], torch.tensor([4, 3]))


def test_masked_categorical_entropy_and_kl_over_legal_actions() -> None:
    logits, other = torch.randn(32, 6), torch.randn(32, 6)
    mask = torch.rand(32, 6) > 0.4
    mask[:, 0] = True
    d = MaskedCategorical(logits, mask=mask)
    o = MaskedCategorical(other, mask=mask)
    for i in range(32):
        m = mask[i]
        p = TD.Categorical(logits=logits[i][m])
        q = TD.Categorical(logits=other[i][m])
        _close(d.entropy()[i], p.entropy())
        _close(d.kl(o)[i], TD.kl_divergence(p, q))
        j = int(torch.nonzero(m)[-1])
        _close(d.logp(torch.tensor([j] * 32))[i], p.log_prob(torch.tensor(int(m[:j].sum()))))


def test_masked_categorical_reads_floored_logits() -> None:
    """The parametric-actions recipe: logits + max(log(mask), FLOAT_MIN)."""
    logits = torch.randn(16, 4)
    mask = torch.ones(16, 4)
    mask[:, 1:] = torch.rand(16, 3).round()
    floored = logits + torch.clamp(torch.log(mask), min=FLOAT_MIN)
    a, b = MaskedCategorical(floored), MaskedCategorical(logits, mask=mask)
    assert torch.equal(a.legal, b.legal)
    _close(a.entropy(), b.entropy())
    _close(a.log_probs, b.log_probs)
    # Plain Categorical also copes with floored logits (and a temperature < 1 keeps them finite).
    c = Categorical(floored, None, temperature=0.5)
    assert torch.isfinite(c.entropy()).all()


def test_masked_all_but_one_is_finite() -> None:
    x = (torch.randn(8, 5) * 1e4).requires_grad_()
    mask = torch.zeros(8, 5, dtype=torch.bool)
    mask[torch.arange(8), torch.arange(8) % 5] = True
    d = MaskedCategorical(x, mask=mask, temperature=0.3)
    o = MaskedCategorical(-x, mask=mask)
    assert torch.equal(d.sample(), torch.arange(8) % 5)
    _close(d.entropy(), torch.zeros(8))
    _close(d.logp(torch.arange(8) % 5), torch.zeros(8))
    _all_finite_grads(d.logp(torch.arange(8) % 5) + d.entropy() + d.kl(o), x)


def test_masked_fully_masked_row_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one legal"):
        MaskedCategorical(torch.zeros(2, 3), mask=torch.tensor([[1, 0, 0], [0, 0, 0]]))
    with pytest.raises(ValueError, match="broadcast"):
        MaskedCategorical(torch.zeros(2, 3), mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="at least one legal"):
        MaskedMultiCategorical(torch.zeros(1, 5), None, [2, 3], mask=torch.tensor([1, 1, 0, 0, 0]))


def test_masked_multicategorical() -> None:
    lens = [3, 4]
    mask = torch.tensor([[0, 1, 1, 1, 0, 0, 1]], dtype=torch.bool).repeat(50000, 1)
    d = MaskedMultiCategorical(torch.randn(1, 7).repeat(50000, 1), None, lens, mask=mask)
    s = d.sample()
    assert bool((s[:, 0] != 0).all()) and bool(((s[:, 1] == 0) | (s[:, 1] == 3)).all())
    row = d.inputs[0]
    h = TD.Categorical(logits=row[1:3]).entropy() + TD.Categorical(logits=row[[3, 6]]).entropy()
    _close(d.entropy()[0], h)


# ------------------------------------------------------------------------------ MultiCategorical


def test_multicategorical_matches_independent_categoricals() -> None:
    lens = [2, 5, 3]
    x, y = torch.randn(40, 10), torch.randn(40, 10)
    d, o = MultiCategorical(x, None, lens), MultiCategorical(y, None, lens)
    refs = [TD.Categorical(logits=p) for p in x.split(lens, 1)]
    orefs = [TD.Categorical(logits=p) for p in y.split(lens, 1)]
    a = d.sample()
    assert a.shape == (40, 3) and a.dtype == torch.int64
    _close(d.logp(a), sum(r.log_prob(a[:, i]) for i, r in enumerate(refs)))
    _close(d.multi_entropy(), torch.stack([r.entropy() for r in refs], 1))
    _close(d.entropy(), sum(r.entropy() for r in refs))
    _close(d.kl(o), sum(TD.kl_divergence(r, q) for r, q in zip(refs, orefs, strict=True)))
    det = d.deterministic_sample()
    assert torch.equal(det, torch.stack([p.argmax(1) for p in x.split(lens, 1)], 1))


def test_multicategorical_sample_frequencies() -> None:
    x = torch.tensor([[0.0, 1.0, 0.0, 2.0, -1.0]]).repeat(30000, 1)
    d = MultiCategorical(x, None, [2, 3])
    s = d.sample()
    _close(torch.bincount(s[:, 0], minlength=2) / 30000.0, torch.softmax(x[0, :2], 0), atol=0.015)
    _close(torch.bincount(s[:, 1], minlength=3) / 30000.0, torch.softmax(x[0, 2:], 0), atol=0.015)


def test_multidiscrete_2d_nvec_and_start() -> None:
    space = MultiDiscrete(np.array([[2, 3], [4, 5]]), start=np.array([[0, 1], [-2, 10]]))
    cls, n = select_action_dist(space, {})
    assert n == 14
    x = torch.randn(7, 14)
    d = cls(x, None)
    s = d.sample()
    assert s.shape == (7, 2, 2)
    assert all(space.contains(v) for v in s.numpy())
    flat = (s.reshape(7, 4) - torch.tensor([0, 1, -2, 10])).T
    ref = sum(
        TD.Categorical(logits=p).log_prob(flat[i]) for i, p in enumerate(x.split([2, 3, 4, 5], 1))
    )
    _close(d.logp(s), ref)
    _close(d.logp(s.reshape(7, 4)), ref)  # a flat [B, k] form is accepted too
    with pytest.raises(ValueError, match="out of range"):
        d.logp(torch.zeros(7, 2, 2, dtype=torch.int64))  # 0 < start 10 for the last element


def test_int_box_actions_lie_in_the_space() -> None:
    space = Box(-2, 1, shape=(2, 3), dtype=np.int64)
    cls, n = select_action_dist(space, {})
    assert n == 6 * 4
    d = cls(torch.randn(50, 24), None)
    s = d.sample()
    assert s.shape == (50, 2, 3) and s.dtype == torch.int64
    assert all(space.contains(v) for v in s.numpy())
    assert space.contains(d.deterministic_sample()[0].numpy())
    ref = TD.Categorical(logits=d.inputs.reshape(50, 6, 4)).log_prob(s.reshape(50, 6) + 2).sum(1)
    _close(d.logp(s), ref)


def test_int_box_per_element_bounds_are_respected() -> None:
    space = Box(np.array([0, -3, 2]), np.array([1, 0, 4]), dtype=np.int64)
    cls, n = select_action_dist(space, {})
    assert n == 3 * 8  # RLlib's size: the global range -3..4 per element
    d = cls(torch.zeros(20000, n), None)
    s = d.sample()
    assert all(space.contains(v) for v in s[:500].numpy())
    for i, (lo, hi) in enumerate(((0, 1), (-3, 0), (2, 4))):
        assert int(s[:, i].min()) == lo and int(s[:, i].max()) == hi
    _close(d.multi_entropy()[0], [math.log(2), math.log(4), math.log(3)])
    with pytest.raises(ValueError, match="out of range"):
        d.logp(torch.tensor([[0, -3, 5]]).expand(20000, 3))


@pytest.mark.parametrize("scale", [1e4, -1e4])
def test_multicategorical_extreme_logits(scale: float) -> None:
    x = (torch.randn(4, 7) * scale).requires_grad_()
    d, o = MultiCategorical(x, None, [3, 4]), MultiCategorical(x.flip(-1), None, [3, 4])
    _all_finite_grads(d.logp(d.sample()) + d.entropy() + d.kl(o), x)


def test_multicategorical_bad_input() -> None:
    with pytest.raises(ValueError, match="need 5"):
        MultiCategorical(torch.zeros(2, 4), None, [2, 3])
    d = MultiCategorical(torch.zeros(2, 5), None, [2, 3])
    with pytest.raises(ValueError, match="out of range"):
        d.logp(torch.tensor([[0, 3], [1, 0]]))
    with pytest.raises(ValueError, match="shape"):
        d.logp(torch.tensor([0, 1]))


# ------------------------------------------------------------------------------ DiagGaussian


def test_diag_gaussian_matches_torch_and_scipy() -> None:
    x, y = torch.randn(30, 6), torch.randn(30, 6)
    d, o = DiagGaussian(x, None), DiagGaussian(y, None)
    mean, log_std = x.chunk(2, 1)
    ref = TD.Normal(mean, log_std.exp())
    oref = TD.Normal(*(lambda m, s: (m, s.exp()))(*y.chunk(2, 1)))
    a = torch.randn(30, 3)
    _close(d.logp(a), ref.log_prob(a).sum(1))
    sp = stats.norm.logpdf(a.numpy(), mean.numpy(), log_std.exp().numpy()).sum(1)
    _close(d.logp(a), sp, atol=1e-4)
    _close(d.entropy(), ref.entropy().sum(1))
    _close(d.kl(o), TD.kl_divergence(ref, oref).sum(1), atol=1e-4)
    assert torch.equal(d.deterministic_sample(), mean)


def test_diag_gaussian_statistics_and_kl_monte_carlo() -> None:
    x = torch.tensor([[1.0, -2.0, math.log(0.5), math.log(2.0)]]).repeat(50000, 1)
    y = torch.tensor([[0.0, -1.0, 0.0, math.log(3.0)]]).repeat(50000, 1)
    d, o = DiagGaussian(x, None), DiagGaussian(y, None)
    s = d.sample()
    _close(s.mean(0), [1.0, -2.0], atol=0.03)
    _close(s.std(0), [0.5, 2.0], atol=0.03)
    mc_kl = (d.logp(s) - o.logp(s)).mean()
    _close(mc_kl, d.kl(o)[0], atol=0.03)
    mc_h = -d.logp(s).mean()
    _close(mc_h, d.entropy()[0], atol=0.03)


def test_diag_gaussian_scalar_box_shapes() -> None:
    space = Box(-1, 1, shape=())
    cls, n = select_action_dist(space, {})
    assert n == 2
    d = cls(torch.randn(5, 2), None)
    assert d.sample().shape == (5,) and d.deterministic_sample().shape == (5,)  # difference 8
    a = torch.randn(5)
    _close(d.logp(a), d.logp(a[:, None]))
    assert d.logp(a).shape == (5,)
    with pytest.raises(ValueError, match="shape"):
        DiagGaussian(torch.randn(5, 2), None).logp(a)  # without the space: [B] is ambiguous


@pytest.mark.parametrize("log_std", [-1e4, -80.0, 80.0, 1e4])
def test_diag_gaussian_extreme_log_std(log_std: float) -> None:
    x = torch.tensor([[0.5, 1e4, log_std, log_std]]).requires_grad_()
    d, o = DiagGaussian(x, None), DiagGaussian(torch.zeros(1, 4), None)
    _all_finite_grads(d.logp(torch.tensor([[0.0, -1e4]])) + d.entropy() + d.kl(o), x)
    assert torch.isfinite(d.sample()).all()


def test_diag_gaussian_any_batch_dims() -> None:
    x = torch.randn(2, 3, 4)
    d = DiagGaussian(x, None)
    s = d.sample()
    assert s.shape == (2, 3, 2)
    m, ls = x.chunk(2, -1)
    _close(d.logp(s), TD.Normal(m, ls.exp()).log_prob(s).sum(-1))


# ------------------------------------------------------------------------------ SquashedGaussian


def _squashed_reference(mean, log_std, x, low, high):
    """Float64 density of low + (high-low)(tanh(z)+1)/2, z ~ N(mean, std), with RLlib's
    clamps (log_std to [-5, 2], the per-dim Normal log-density to [-100, 100])."""
    mean, log_std, x = (np.asarray(v, dtype=np.float64) for v in (mean, log_std, x))
    scale = (high - low) / 2.0
    t = (x - low) / scale - 1.0
    u = np.arctanh(t)
    return (
        np.clip(stats.norm.logpdf(u, mean, np.exp(np.clip(log_std, -5, 2))), -100, 100)
        - np.log1p(-t * t)
        - np.log(scale)
    ).sum(-1)


def test_squashed_gaussian_density() -> None:
    low, high = np.array([-2.0, 0.0], dtype=np.float32), np.array([3.0, 0.5], dtype=np.float32)
    space = Box(low, high)
    x = torch.randn(20, 4)
    d = SquashedGaussian(x, None, action_space=space)
    unit = torch.rand(20, 2) * 1.8 - 0.9  # interior points
    a = torch.as_tensor(low) + (unit + 1) / 2 * torch.as_tensor(high - low)
    ref = _squashed_reference(x[:, :2], x[:, 2:], a, low.astype(np.float64), high)
    _close(d.logp(a), ref, atol=2e-4, rtol=1e-4)
    # the density integrates to one over [low, high] (checks the log((high-low)/2) Jacobian)
    grid = torch.linspace(1.0, 5.0, 20001)[1:-1, None]
    d1 = SquashedGaussian(torch.tensor([[0.3, -0.5]]).expand(len(grid), 2), None, low=1.0, high=5.0)
    dens = d1.logp(grid).exp().double()
    integral = torch.trapezoid(dens, grid[:, 0].double())
    assert abs(float(integral) - 1.0) < 2e-3


def test_squashed_gaussian_samples_and_bounds() -> None:
    x = torch.tensor([[0.5, -3.0, 0.0, 1.5]]).repeat(20000, 1)
    d = SquashedGaussian(x, None, low=-2.0, high=4.0)
    s = d.sample()
    assert bool(((s >= -2.0) & (s <= 4.0)).all())
    # the squash is monotone, so quantiles of z map to quantiles of the action
    mean, std = torch.tensor([0.5, -3.0]), torch.tensor([1.0, math.exp(1.5)])
    for k, q in ((0.0, 0.5), (1.0, 0.8413)):
        cut = 1.0 + 3.0 * torch.tanh(mean + k * std)
        _close((s <= cut).double().mean(0), [q, q], atol=0.012)
    _close(d.deterministic_sample()[0], 1.0 + 3.0 * torch.tanh(torch.tensor([0.5, -3.0])))
    interior = (s > -1.9).all(1) & (s < 3.9).all(1)
    _close(d.sampled_action_logp()[interior], d.logp(s)[interior], atol=2e-3, rtol=1e-3)
    with pytest.raises(ValueError, match="not defined"):
        d.entropy()
    with pytest.raises(ValueError, match="not defined"):
        d.kl(d)
    with pytest.raises(ValueError, match="low < high"):
        SquashedGaussian(x, None, low=1.0, high=1.0)


def test_squashed_gaussian_at_and_beyond_bounds_is_finite() -> None:
    x = torch.tensor([[1e4, -1e4, 1e4, -1e4]]).requires_grad_()
    for a in ([[1.0, -1.0]], [[5.0, -7.0]], [[-1.0, 1.0]]):
        act = torch.tensor(a).requires_grad_()
        _all_finite_grads(SquashedGaussian(x, None).logp(act), x)
        (g,) = torch.autograd.grad(SquashedGaussian(x, None).logp(act).sum(), act)
        assert torch.isfinite(g).all()
    d = SquashedGaussian(x, None)
    d.sample()
    assert torch.isfinite(d.sampled_action_logp()).all()


# ------------------------------------------------------------------------------ Beta


def test_beta_matches_scipy_and_torch() -> None:
    x, y = torch.randn(25, 6) * 3, torch.randn(25, 6)
    d = Beta(x, None, low=-1.0, high=3.0)
    o = Beta(y, None, low=-1.0, high=3.0)
    conc = torch.nn.functional.softplus(x) + 1
    alpha, beta = conc.chunk(2, 1)
    a = torch.rand(25, 3) * 3.8 - 0.9
    unit = (a + 1.0) / 4.0
    ref = stats.beta.logpdf(unit.numpy(), alpha.numpy(), beta.numpy()).sum(1)
    _close(d.logp(a), ref, atol=1e-4, rtol=1e-4)
    _close(d.entropy(), stats.beta.entropy(alpha.numpy(), beta.numpy()).sum(1), atol=1e-4)
    oa, ob = (torch.nn.functional.softplus(y) + 1).chunk(2, 1)
    kl = TD.kl_divergence(TD.Beta(alpha, beta), TD.Beta(oa, ob)).sum(1)  # difference 10: summed
    _close(d.kl(o), kl, atol=1e-4, rtol=1e-4)
    _close(d.deterministic_sample(), alpha / (alpha + beta) * 4 - 1)


def test_beta_samples_and_monte_carlo() -> None:
    x = torch.tensor([[1.0, -0.5, 2.0, 0.3]]).repeat(40000, 1)
    d, o = Beta(x, None, low=2.0, high=4.0), Beta(x.flip(-1), None, low=2.0, high=4.0)
    s = d.sample()
    assert bool(((s >= 2.0) & (s <= 4.0)).all())
    _close(s.mean(0), d.deterministic_sample()[0], atol=0.01)
    s = s.clamp(2.0 + 1e-5, 4.0 - 1e-5)
    _close((d.logp(s) - o.logp(s)).mean(), d.kl(o)[0], atol=0.02)
    # entropy of the unit variable: E[-log p(u)]
    _close(-d.logp(s).mean(), d.entropy()[0], atol=0.02)


def test_beta_bounds_finite() -> None:
    x = torch.tensor([[20.0, -20.0, -20.0, 20.0]]).requires_grad_()
    for a in ([[0.0, 1.0]], [[1.0, 0.0]], [[-3.0, 7.0]]):
        _all_finite_grads(Beta(x, None).logp(torch.tensor(a)) + Beta(x, None).entropy(), x)


# ----------------------------------------------------------------- Deterministic, Dirichlet


def test_deterministic() -> None:
    x = torch.randn(3, 2)
    d = Deterministic(x, None)
    assert torch.equal(d.sample(), x) and torch.equal(d.deterministic_sample(), x)
    assert torch.equal(d.sampled_action_logp(), torch.zeros(3))
    for call in (lambda: d.logp(x), d.entropy, lambda: d.kl(d)):
        with pytest.raises(NotImplementedError, match="point mass"):
            call()
    cls, n = select_action_dist(Box(-1, 1, (4,)), {}, dist_type="deterministic")
    assert cls is Deterministic and n == 4


def _renorm(p: torch.Tensor) -> np.ndarray:
    v = p.double().numpy()
    return v / v.sum()


def test_dirichlet_matches_scipy() -> None:
    x, y = torch.randn(10, 4), torch.randn(10, 4)
    d, o = Dirichlet(x, None), Dirichlet(y, None)
    c = x.exp() + 1e-7
    _close(d.deterministic_sample(), c / c.sum(1, keepdim=True))  # difference 12: the mean
    pts = torch.distributions.Dirichlet(torch.ones(4)).sample((10,)).double()
    pts = (pts / pts.sum(1, keepdim=True)).float()
    for i in range(10):
        _close(
            d.logp(pts)[i],
            stats.dirichlet.logpdf(_renorm(pts[i]), c[i].numpy()),
            atol=1e-4,
            rtol=1e-4,
        )
        _close(d.entropy()[i], stats.dirichlet.entropy(c[i].double().numpy()), atol=1e-4)
    _close(d.kl(o), TD.kl_divergence(TD.Dirichlet(c), TD.Dirichlet(y.exp() + 1e-7)), atol=1e-4)


def test_dirichlet_monte_carlo_and_edges() -> None:
    x = torch.log(torch.tensor([[2.0, 3.0, 0.5]])).repeat(40000, 1)
    y = torch.log(torch.tensor([[1.0, 1.0, 1.0]])).repeat(40000, 1)
    d, o = Dirichlet(x, None), Dirichlet(y, None)
    s = d.sample()
    _close(s.mean(0), [2 / 5.5, 3 / 5.5, 0.5 / 5.5], atol=0.01)
    _close((d.logp(s) - o.logp(s)).mean(), d.kl(o)[0], atol=0.03)
    e = (torch.tensor([[20.0, -1e4, 3.0]])).requires_grad_()
    _all_finite_grads(Dirichlet(e, None).logp(torch.tensor([[1.0, 0.0, 0.0]])), e)


def test_dirichlet_simplex_rank2() -> None:
    space = Simplex((2, 3))
    cls, n = select_action_dist(space, {})
    assert n == 6
    x = torch.randn(5, 6)
    d = cls(x, None)
    s = d.sample()
    assert s.shape == (5, 2, 3)
    rows = [Dirichlet(p, None) for p in x.reshape(5, 2, 3).unbind(1)]
    _close(d.logp(s), rows[0].logp(s[:, 0]) + rows[1].logp(s[:, 1]))
    _close(d.entropy(), rows[0].entropy() + rows[1].entropy())


# ------------------------------------------------------------------------------ MultiAction


NESTED = Dict(
    {
        "move": Tuple((Discrete(3), Box(-1, 1, shape=(2,)))),
        "grip": MultiDiscrete([2, 4]),
        "aim": Box(-1, 1, shape=()),
        "mix": Simplex((3,)),
    }
)


def test_multi_action_structure_and_flat_logp() -> None:
    cls, n = select_action_dist(NESTED, {})
    assert n == 2 + 6 + 3 + 4 + 3  # aim, grip, mix, move (sorted keys)
    x = torch.randn(6, n)
    d = cls(x, None)
    a = d.sample()
    assert set(a) == {"move", "grip", "aim", "mix"}
    assert a["move"][0].shape == (6,) and a["move"][1].shape == (6, 2) and a["aim"].shape == (6,)
    children = d.flat_child_distributions
    expected = (
        children[0].logp(a["aim"])
        + children[1].logp(a["grip"])
        + children[2].logp(a["mix"])
        + children[3].logp(a["move"][0])
        + children[4].logp(a["move"][1])
    )
    _close(d.logp(a), expected)
    flat = torch.cat(
        [
            a["aim"][:, None],
            a["grip"].float(),
            a["mix"],
            a["move"][0][:, None].float(),
            a["move"][1],
        ],
        1,
    )
    state = torch.get_rng_state()
    _close(d.logp(flat), expected)
    assert torch.equal(state, torch.get_rng_state())  # difference 13: no sampling to split
    _close(d.logp(flat.numpy()), expected)
    _close(d.sampled_action_logp(), d.logp(a), atol=1e-4)
    _close(
        d.entropy(),
        children[0].entropy()
        + children[1].entropy()
        + children[2].entropy()
        + children[3].entropy()
        + children[4].entropy(),
    )
    o = cls(torch.randn(6, n), None)
    ref_kl = sum(c.kl(q) for c, q in zip(children, o.flat_child_distributions, strict=True))
    _close(d.kl(o), ref_kl)
    det = d.deterministic_sample()
    assert torch.equal(det["move"][0], children[3].deterministic_sample())
    with pytest.raises(ValueError, match="flat action tensor"):
        d.logp(flat[:, :-1])
    with pytest.raises(ValueError, match='actions\\["move"\\]'):
        d.logp({"aim": a["aim"], "grip": a["grip"], "mix": a["mix"]})


def _leaf_spaces() -> st.SearchStrategy[gym.Space]:
    return st.one_of(
        st.builds(Discrete, st.integers(1, 5)),
        st.builds(lambda v: MultiDiscrete(v), st.lists(st.integers(1, 4), min_size=1, max_size=3)),
        st.builds(lambda d: Box(-2, 3, shape=(d,) if d else ()), st.integers(0, 3)),
        st.builds(
            lambda d, hi: Box(-1, hi, shape=(d,), dtype=np.int64),
            st.integers(1, 3),
            st.integers(0, 3),
        ),
        st.builds(lambda d: Simplex((d,)), st.integers(2, 4)),
    )


def _nested_spaces() -> st.SearchStrategy[gym.Space]:
    return st.recursive(
        _leaf_spaces(),
        lambda children: st.one_of(
            st.lists(children, min_size=1, max_size=3).map(lambda cs: Tuple(tuple(cs))),
            st.dictionaries(st.sampled_from("abcde"), children, min_size=1, max_size=3).map(Dict),
        ),
        max_leaves=5,
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=_nested_spaces(), batch=st.sampled_from([(), (3,), (2, 2)]), seed=st.integers(0, 99))
def test_random_nested_spaces_round_trip(space: gym.Space, batch: tuple, seed: int) -> None:
    torch.manual_seed(seed)
    cls, n = select_action_dist(space, {})
    x = torch.randn(*batch, n) * 2
    d = cls(x, None)
    a = d.sample()
    lp = d.logp(a)
    assert lp.shape == batch and lp.dtype == torch.float32 and torch.isfinite(lp).all()
    assert d.entropy().shape == batch and torch.isfinite(d.entropy()).all()
    assert d.kl(cls(torch.randn(*batch, n), None)).shape == batch
    # every sample lies in the space (per batch entry; Gaussian draws are unbounded, so the
    # float Box leaves are clipped to their bounds, as an env would)
    if batch == (3,):
        clipped = _clip_boxes(space, a)
        for i in range(3):
            item = _index(clipped, i)
            assert space.contains(item), (space, item)
        if isinstance(space, (Tuple, Dict)):
            _close(d.logp(_flatten_sample(a)), lp, atol=1e-4)


def _clip_boxes(space: gym.Space, a):
    if isinstance(space, Tuple):
        return tuple(_clip_boxes(s, v) for s, v in zip(space.spaces, a, strict=True))
    if isinstance(space, Dict):
        return {k: _clip_boxes(space.spaces[k], a[k]) for k in space.spaces}
    if isinstance(space, Box) and not isinstance(space, Simplex) and a.is_floating_point():
        return a.clamp(float(space.low.min()), float(space.high.max()))
    return a


def _index(a, i):
    if isinstance(a, tuple):
        return tuple(_index(v, i) for v in a)
    if isinstance(a, dict):
        return {k: _index(v, i) for k, v in a.items()}
    v = a[i].numpy()
    return int(v) if v.ndim == 0 and v.dtype == np.int64 else v


def _flatten_sample(a) -> torch.Tensor:
    parts: list[torch.Tensor] = []

    def walk(v):
        if isinstance(v, tuple):
            for c in v:
                walk(c)
        elif isinstance(v, dict):
            for k in sorted(v):
                walk(v[k])
        else:
            parts.append(v.reshape(v.shape[0], -1).float())

    walk(a)
    return torch.cat(parts, 1)


# ------------------------------------------------------------------------------ autoregressive


class _BinaryChainModel:
    """P(a1) from the context; P(a2 | a1) a fixed table (so the joint is known exactly)."""

    action_space = Tuple((Discrete(2), Discrete(2)))
    model_config: dict = {}
    table = torch.tensor([[2.0, -1.0], [-0.5, 1.5]])

    def action_model(self, ctx, actions):
        a1 = actions[0]
        return [ctx[..., :2], self.table[a1] + 0.0 * ctx[..., 2:4]]

    def joint(self, ctx) -> torch.Tensor:
        p1 = torch.softmax(ctx[..., :2], -1)
        p2 = torch.softmax(self.table, -1)
        return p1[..., :, None] * p2  # [..., a1, a2]


def test_autoregressive_logp_is_sum_of_conditionals() -> None:
    model = _BinaryChainModel()
    ctx = torch.randn(8, 4)
    d = AutoregressiveDistribution(ctx, model)
    joint = model.joint(ctx)
    a1, a2 = torch.randint(0, 2, (8,)), torch.randint(0, 2, (8,))
    _close(d.logp((a1, a2)), joint[torch.arange(8), a1, a2].log())
    _close(d.logp(torch.stack([a1, a2], 1)), joint[torch.arange(8), a1, a2].log())
    # probabilities of all four joint actions sum to one
    total = sum(
        d.logp((torch.full((8,), i), torch.full((8,), j))).exp() for i in (0, 1) for j in (0, 1)
    )
    _close(total, torch.ones(8))


def test_autoregressive_samples_entropy_and_kl() -> None:
    model = _BinaryChainModel()
    ctx = torch.tensor([[0.3, -0.4, 0.0, 0.0]]).repeat(40000, 1)
    d = AutoregressiveDistribution(ctx, model)
    a1, a2 = d.sample()
    joint = model.joint(ctx[:1])[0]
    freq = torch.zeros(2, 2)
    freq.index_put_((a1, a2), torch.ones(40000), accumulate=True)
    _close(freq / 40000, joint, atol=0.01)
    _close(d.sampled_action_logp(), joint[a1, a2].log())
    h_exact = -(joint * joint.log()).sum()
    _close(d.entropy().mean(), h_exact, atol=0.01)  # chain-rule estimate, averaged
    other_ctx = torch.tensor([[-1.0, 1.0, 0.0, 0.0]]).repeat(40000, 1)
    o = AutoregressiveDistribution(other_ctx, model)
    q = model.joint(other_ctx[:1])[0]
    _close(d.kl(o).mean(), (joint * (joint.log() - q.log())).sum(), atol=0.01)
    da1, da2 = d.deterministic_sample()
    assert int(da1[0]) == 0 and int(da2[0]) == 0
    with pytest.raises(ValueError, match="action_model"):
        AutoregressiveDistribution(ctx, object())


def test_binary_autoregressive_distribution() -> None:
    model = _BinaryChainModel()
    assert BinaryAutoregressiveDistribution.required_model_output_shape(None, {}) == 16
    d = BinaryAutoregressiveDistribution(torch.randn(4, 4), model)
    a = d.sample()
    assert isinstance(a, tuple) and a[0].shape == (4,)
    _close(d.logp(torch.stack(a, 1)), d.logp(a))
    bad = type("M", (), {"action_space": Tuple((Discrete(3),)), "action_model": model.action_model})
    with pytest.raises(ValueError, match="only supports"):
        BinaryAutoregressiveDistribution(torch.randn(4, 4), bad())


# ------------------------------------------------------------------------------ catalog table


def test_package_exposes_distributions() -> None:
    import rlblocks as rb

    assert rb.distributions.Categorical is Categorical
    assert issubclass(rb.distributions.UnsupportedSpaceError, ValueError)


def test_select_action_dist_table() -> None:
    assert select_action_dist(Discrete(4), {}) == (Categorical, 4)
    cls, n = select_action_dist(MultiDiscrete([2, 3, 4]), None)
    assert cls.func is MultiCategorical and n == 9
    cls, n = select_action_dist(Box(0, 4, (3,), dtype=np.int32), {})
    assert cls.func is MultiCategorical and n == 15 and cls.keywords["input_lens"] == [5, 5, 5]
    cls, n = select_action_dist(Box(-1, 1, (5,)), {})
    assert cls.func is DiagGaussian and n == 10
    assert select_action_dist(Simplex((4,)), {}) == (Dirichlet, 4)
    cls, n = select_action_dist(Tuple((Discrete(2), Box(-1, 1, (3,)))), {})
    assert cls.func is MultiActionDistribution and n == 8
    assert cls.keywords["input_lens"] == [2, 6]


def test_select_action_dist_unsupported() -> None:
    for space in (Box(-1, 1, (2, 2)), MultiBinary(3), gym.spaces.Text(5)):
        with pytest.raises(UnsupportedSpaceError) as info:
            select_action_dist(space, {})
        assert isinstance(info.value, ValueError)
    with pytest.raises(UnsupportedSpaceError):
        select_action_dist(Tuple((Discrete(2), Box(-1, 1, (2, 2)))), {})
    with pytest.raises(ValueError, match="dist_type"):
        select_action_dist(Discrete(2), {}, dist_type="gaussian")


class _MyDist(ActionDistribution):
    @staticmethod
    def required_model_output_shape(action_space, model_config):
        return 7

    def sample(self):
        return self.inputs[..., 0]


def test_custom_action_dist() -> None:
    registry = {"mine": _MyDist}
    assert select_action_dist(Discrete(2), {"custom_action_dist": "mine"}, None, registry) == (
        _MyDist,
        7,
    )
    assert select_action_dist(Discrete(2), {"custom_action_dist": _MyDist}) == (_MyDist, 7)
    with pytest.raises(ValueError, match="not registered.*mine"):
        select_action_dist(Discrete(2), {"custom_action_dist": "theirs"}, None, registry)

    class MyMulti(MultiActionDistribution):
        pass

    cls, n = select_action_dist(Tuple((Discrete(2), Discrete(3))), {"custom_action_dist": MyMulti})
    assert cls.func is MyMulti and n == 5
    assert isinstance(cls(torch.zeros(1, 5), None), MyMulti)


def test_autoregressive_through_the_catalog_table() -> None:
    space = Tuple((Discrete(2), Discrete(2)))
    cfg = {
        "custom_action_dist": AutoregressiveDistribution,
        "custom_model_config": {"context_size": 4},
    }
    cls, n = select_action_dist(space, cfg)
    assert n == 4 and cls.func is AutoregressiveDistribution
    d = cls(torch.randn(6, 4), _BinaryChainModel())
    a = d.sample()
    assert d.logp(a).shape == (6,)
    assert select_action_dist(space, {"custom_action_dist": BinaryAutoregressiveDistribution}) == (
        BinaryAutoregressiveDistribution,
        16,
    )


def test_dist_type_class_binds_space_bounds() -> None:
    space = Box(np.array([0.0, -4.0], np.float32), np.array([1.0, 4.0], np.float32))
    cls, n = select_action_dist(space, {}, dist_type=SquashedGaussian)
    assert n == 4
    d = cls(torch.tensor([[1e4, -1e4, 0.0, 0.0]]), None)
    _close(d.deterministic_sample(), [[1.0, -4.0]])
    cls, n = select_action_dist(space, {}, dist_type=Beta)
    _close(cls(torch.zeros(1, 4), None).deterministic_sample(), [[0.5, 0.0]])


# ------------------------------------------------------------------------------ bundled models


def test_parametric_actions_model_with_masked_categorical() -> None:
    from rlblocks.models.parametric import ParametricActionsModel
    from rlblocks.preprocessors import get_preprocessor

    n_act, emb = 5, 3
    obs_space = Dict(
        {
            "action_mask": Box(0, 1, (n_act,)),
            "avail_actions": Box(-1, 1, (n_act, emb)),
            "cart": Box(-1, 1, (4,)),
        }
    )
    prep = get_preprocessor(obs_space)(obs_space)
    model = ParametricActionsModel(
        prep.observation_space,
        Discrete(n_act),
        n_act,
        {"fcnet_hiddens": [8]},
        "pa",
        action_embed_size=emb,
    )
    rng = np.random.default_rng(0)
    batch = []
    for i in range(64):
        mask = (rng.random(n_act) > 0.5).astype(np.float32)
        mask[i % n_act] = 1.0
        batch.append(
            {
                "action_mask": mask,
                "avail_actions": rng.uniform(-1, 1, (n_act, emb)).astype(np.float32),
                "cart": rng.uniform(-1, 1, 4).astype(np.float32),
            }
        )
    flat = torch.as_tensor(np.stack([prep.transform(o) for o in batch]))
    logits, _ = model({"obs": flat})
    assert logits.shape == (64, n_act)
    masks = torch.as_tensor(np.stack([o["action_mask"] for o in batch]))
    intent, _ = model.action_embed_model(
        {"obs": torch.as_tensor(np.stack([o["cart"] for o in batch]))}
    )
    avail = torch.as_tensor(np.stack([o["avail_actions"] for o in batch]))
    expected = (avail * intent[:, None]).sum(2)
    _close(logits[masks > 0], expected[masks > 0], atol=1e-5)
    assert bool((logits[masks == 0] < -1e30).all())
    d = MaskedCategorical(logits)
    assert torch.equal(d.legal, masks > 0)
    draws = MaskedCategorical(logits.detach().repeat(1600, 1)).sample().reshape(1600, 64)
    assert bool((masks.gather(1, draws.T.contiguous()) > 0).all())  # 102,400 draws, all legal
    loss = -(d.logp(d.sample()) + 0.01 * d.entropy()).mean() + model.value_function().pow(2).mean()
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    with pytest.raises(ValueError, match="num_outputs"):
        ParametricActionsModel(obs_space, Discrete(n_act), 4, {}, "pa", action_embed_size=emb)
    with pytest.raises(ValueError, match="shape"):
        ParametricActionsModel(obs_space, Discrete(n_act), n_act, {}, "pa", action_embed_size=2)


def test_binary_autoregressive_model_and_distribution() -> None:
    from rlblocks.models.autoregressive import AutoregressiveActionModel

    space = Tuple((Discrete(2), Discrete(2)))
    model = AutoregressiveActionModel(Box(-1, 1, (3,)), space, 16, {}, "ar")
    with torch.no_grad():  # make a2 depend visibly on a1
        model.a2_logits._model[0].weight.mul_(300.0)
        model.a1_logits._model[0].weight.mul_(100.0)
    obs = torch.tensor([[0.5, -0.2, 0.9]])
    ctx, _ = model({"obs": obs})
    p1 = torch.softmax(model.a1_logits(ctx), -1)[0]
    p2 = torch.stack(
        [
            torch.softmax(model.a2_logits(model.a2_hidden(torch.tensor([[v]]))), -1)[0]
            for v in (0.0, 1.0)
        ]
    )
    joint = (p1[:, None] * p2).detach()
    d = BinaryAutoregressiveDistribution(ctx, model)
    for i in (0, 1):
        for j in (0, 1):
            _close(d.logp((torch.tensor([i]), torch.tensor([j]))), joint[i, j].log()[None])
    big = BinaryAutoregressiveDistribution(ctx.detach().expand(20000, 16), model)
    a1, a2 = big.sample()
    freq = torch.zeros(2, 2).index_put_((a1, a2), torch.ones(20000), accumulate=True) / 20000
    _close(freq, joint, atol=0.015)
    d.logp(torch.tensor([[1, 0]])).sum().backward()
    assert model.a2_logits._model[0].weight.grad is not None
    assert model.context_layer._model[0].weight.grad is not None
    # the general distribution drives the same model identically
    g = AutoregressiveDistribution(ctx, model)
    _close(g.logp(torch.tensor([[1, 1]])), d.logp(torch.tensor([[1, 1]])))
    with pytest.raises(ValueError, match="only supports"):
        AutoregressiveActionModel(Box(-1, 1, (3,)), Discrete(4), 16, {}, "ar")


def test_multi_action_required_model_output_shape_on_instance_and_class():
    space = gym.spaces.Dict(
        {
            "a": gym.spaces.Discrete(4),
            "b": gym.spaces.Tuple((gym.spaces.MultiDiscrete([2, 3]), gym.spaces.Box(-1, 1, (3,)))),
        }
    )
    from rlblocks.catalog import ModelCatalog

    dist_cls, n = ModelCatalog.get_action_dist(space, {})
    assert n == 4 + 5 + 6  # Categorical 4, MultiCategorical 2 + 3, DiagGaussian 2 * 3
    dist = dist_cls(torch.zeros(2, n), None)
    # RLlib's signature: an instance method taking (action_space, model_config).
    assert dist.required_model_output_shape(space, {}) == n
    assert dist.required_model_output_shape() == n
    assert MultiActionDistribution.required_model_output_shape(space, {}) == n
    with pytest.raises(ValueError, match="needs the action space"):
        MultiActionDistribution.required_model_output_shape()


@pytest.mark.parametrize(
    "make",
    [
        lambda x: DiagGaussian(x),
        lambda x: SquashedGaussian(x, low=-2.0, high=3.0),
        lambda x: Beta(x, low=-2.0, high=3.0),
        lambda x: Dirichlet(x),
    ],
)
def test_rsample_shapes_bounds_and_gradients(make) -> None:
    inputs = torch.randn(5, 4, requires_grad=True)
    dist = make(inputs)
    one, many = dist.rsample(), dist.rsample((3, 2))
    assert many.shape == (3, 2, *one.shape)
    if not isinstance(dist, DiagGaussian):
        lo, hi = (0.0, 1.0) if isinstance(dist, Dirichlet) else (-2.0, 3.0)
        assert bool((many >= lo).all() and (many <= hi).all())
    many.sum().backward()
    assert inputs.grad is not None and bool(inputs.grad.abs().sum() > 0)
