"""RLBlocksDistribution: RLlib's distribution API over rlblocks distributions, checked against
closed forms (torch.distributions / hand-written) and against the wrapped rlblocks object."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from gymnasium.spaces import Box, Dict, Discrete, MultiDiscrete, Tuple  # noqa: E402
from ray.rllib.core.distribution.torch.torch_distribution import (  # noqa: E402
    TorchCategorical,
    TorchDistribution,
)
from rlblocks import ModelCatalog  # noqa: E402
from rlblocks.distributions import (  # noqa: E402
    Beta,
    BinaryAutoregressiveDistribution,
    Categorical,
    Dirichlet,
    MaskedCategorical,
    SquashedGaussian,
)
from rlblocks.models.autoregressive import AutoregressiveActionModel  # noqa: E402
from rlblocks.rllib import RLBlocksDistribution  # noqa: E402
from rlblocks.spaces import Simplex  # noqa: E402

B = 64


def adapter(space: gym.Space, config: dict | None = None, model=None):
    fn, n = ModelCatalog.get_action_dist(space, config or {})
    return RLBlocksDistribution.bind(fn, n, model), n


def test_is_an_rllib_torch_distribution():
    cls, n = adapter(Discrete(4))
    assert issubclass(cls, TorchDistribution)
    assert cls.required_input_dim(Discrete(4)) == n == 4
    # unbound: the catalog's size for the space
    assert RLBlocksDistribution.required_input_dim(MultiDiscrete([2, 3])) == 5
    assert RLBlocksDistribution.required_input_dim(Box(-1, 1, (3,))) == 6


def test_categorical_closed_form_and_rllib_agree():
    torch.manual_seed(0)
    cls, _ = adapter(Discrete(5))
    logits, other_logits = torch.randn(B, 5), torch.randn(B, 5)
    d, o = cls.from_logits(logits), cls.from_logits(other_logits)
    logp_all = torch.log_softmax(logits, -1)
    p = logp_all.exp()
    a = torch.randint(0, 5, (B,))
    torch.testing.assert_close(d.logp(a), logp_all.gather(1, a[:, None])[:, 0])
    torch.testing.assert_close(d.entropy(), -(p * logp_all).sum(-1))
    kl = (p * (logp_all - torch.log_softmax(other_logits, -1))).sum(-1)
    torch.testing.assert_close(d.kl(o), kl)
    # RLlib's own categorical gives the same numbers
    r, ro = TorchCategorical.from_logits(logits), TorchCategorical.from_logits(other_logits)
    torch.testing.assert_close(d.logp(a), r.logp(a))
    torch.testing.assert_close(d.entropy(), r.entropy())
    torch.testing.assert_close(d.kl(o), r.kl(ro))
    assert torch.equal(d.to_deterministic().sample(), logits.argmax(-1))
    s = d.sample()
    assert s.shape == (B,) and s.dtype == torch.int64


def test_diag_gaussian_closed_form_and_rsample():
    torch.manual_seed(1)
    cls, n = adapter(Box(-1, 1, (3,)))
    inputs = torch.randn(B, n, requires_grad=True)
    other = torch.randn(B, n)
    d, o = cls.from_logits(inputs), cls.from_logits(other)
    mean, log_std = inputs.chunk(2, -1)
    ref = torch.distributions.Normal(mean, log_std.exp())
    ref_o = torch.distributions.Normal(
        *[t if i == 0 else t.exp() for i, t in enumerate(other.chunk(2, -1))]
    )
    x = torch.randn(B, 3)
    torch.testing.assert_close(d.logp(x), ref.log_prob(x).sum(-1))
    torch.testing.assert_close(d.entropy(), ref.entropy().sum(-1))
    torch.testing.assert_close(d.kl(o), torch.distributions.kl_divergence(ref, ref_o).sum(-1))
    r = d.rsample()
    assert r.shape == (B, 3)
    r.sum().backward()
    assert inputs.grad is not None and bool((inputs.grad[:, :3] != 0).all())
    assert d.sample(sample_shape=(2,)).shape == (2, B, 3)
    torch.testing.assert_close(d.to_deterministic().sample(), mean)


def test_beta_and_dirichlet_closed_forms():
    torch.manual_seed(2)
    fn = lambda x, m: Beta(x, m, low=0.0, high=1.0)  # noqa: E731
    cls = RLBlocksDistribution.bind(fn, 4)
    raw, raw_o = torch.randn(B, 4), torch.randn(B, 4)
    d, o = cls.from_logits(raw), cls.from_logits(raw_o)
    conc = torch.nn.functional.softplus(raw) + 1.0
    ref = torch.distributions.Beta(*conc.chunk(2, -1))
    ref_o = torch.distributions.Beta(*(torch.nn.functional.softplus(raw_o) + 1.0).chunk(2, -1))
    x = torch.rand(B, 2) * 0.98 + 0.01
    torch.testing.assert_close(d.logp(x), ref.log_prob(x).sum(-1))
    torch.testing.assert_close(d.entropy(), ref.entropy().sum(-1))
    torch.testing.assert_close(d.kl(o), torch.distributions.kl_divergence(ref, ref_o).sum(-1))
    assert bool(((d.rsample() > 0) & (d.rsample() < 1)).all())

    dcls, n = adapter(Simplex((3,)))
    assert n == 3
    raw = torch.randn(B, 3)
    dd = dcls.from_logits(raw)
    assert isinstance(dd.inner, Dirichlet)
    ref_d = torch.distributions.Dirichlet(raw.exp() + 1e-7)
    y = torch.distributions.Dirichlet(torch.full((B, 3), 4.0)).sample()  # interior points
    torch.testing.assert_close(dd.logp(y), ref_d.log_prob(y), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(dd.entropy(), ref_d.entropy(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(dd.rsample().sum(-1), torch.ones(B))


def test_squashed_gaussian_wraps_rlblocks_and_refuses_entropy():
    torch.manual_seed(3)
    space = Box(-2.0, 2.0, (2,))
    cls, n = adapter(space, {"custom_action_dist": SquashedGaussian})
    inputs = torch.randn(B, n)
    d = cls.from_logits(inputs)
    a = d.sample()
    assert bool(((a >= -2) & (a <= 2)).all())
    torch.testing.assert_close(d.logp(a), d.inner.logp(a))
    # closed form: tanh-squashed Normal, rescaled to [-2, 2]
    mean, log_std = inputs.chunk(2, -1)
    u = torch.atanh((a / 2.0).clamp(-1 + 1e-6, 1 - 1e-6))
    normal = torch.distributions.Normal(mean, log_std.clamp(-5, 2).exp())
    expected = (normal.log_prob(u) - torch.log(1 - torch.tanh(u) ** 2 + 1e-6)).sum(-1) - 2 * np.log(
        2.0
    )
    torch.testing.assert_close(d.logp(a), expected, atol=1e-3, rtol=1e-3)
    with pytest.raises(ValueError, match="Entropy/KL not defined"):
        d.entropy()
    assert d.rsample().shape == (B, 2)


def test_multi_categorical_and_nested_multi_action():
    torch.manual_seed(4)
    cls, n = adapter(MultiDiscrete([3, 2]))
    logits = torch.randn(B, n)
    d = cls.from_logits(logits)
    a = d.sample()
    assert a.shape == (B, 2)
    expected = (
        torch.log_softmax(logits[:, :3], -1).gather(1, a[:, :1])[:, 0]
        + torch.log_softmax(logits[:, 3:], -1).gather(1, a[:, 1:])[:, 0]
    )
    torch.testing.assert_close(d.logp(a), expected)

    space = Dict({"move": Tuple((Discrete(3), Box(-1, 1, (2,)))), "say": Discrete(2)})
    cls, n = adapter(space)
    assert n == 3 + 4 + 2
    inputs, other = torch.randn(B, n), torch.randn(B, n)
    d, o = cls.from_logits(inputs), cls.from_logits(other)
    a = d.sample()
    assert set(a) == {"move", "say"} and a["move"][1].shape == (B, 2)
    # flatten order: Dict keys sorted -> move.0 (3), move.1 (2 means + 2 log-stds), say (2)
    cat1 = torch.log_softmax(inputs[:, :3], -1)
    normal = torch.distributions.Normal(inputs[:, 3:5], inputs[:, 5:7].exp())
    cat2 = torch.log_softmax(inputs[:, 7:], -1)
    expected = (
        cat1.gather(1, a["move"][0][:, None])[:, 0]
        + normal.log_prob(a["move"][1]).sum(-1)
        + cat2.gather(1, a["say"][:, None])[:, 0]
    )
    torch.testing.assert_close(d.logp(a), expected)
    ent = -(cat1.exp() * cat1).sum(-1) + normal.entropy().sum(-1) - (cat2.exp() * cat2).sum(-1)
    torch.testing.assert_close(d.entropy(), ent)
    torch.testing.assert_close(d.kl(o), d.inner.kl(o.inner))
    assert bool((d.kl(o) >= -1e-5).all()) and torch.allclose(d.kl(d), torch.zeros(B), atol=1e-5)
    assert d.sample(sample_shape=(3,))["say"].shape == (3, B)


def test_masked_actions_are_never_sampled():
    torch.manual_seed(5)
    fn = lambda x, m: MaskedCategorical(x, m)  # noqa: E731
    cls = RLBlocksDistribution.bind(fn, 6)
    mask = torch.rand(4096, 6) < 0.5
    mask[:, 0] |= ~mask.any(-1)  # at least one legal action per row
    logits = torch.randn(4096, 6).masked_fill(~mask, torch.finfo(torch.float32).min)
    d = cls.from_logits(logits)
    for _ in range(5):
        a = d.sample()
        assert bool(mask.gather(1, a[:, None]).all())
    assert bool(mask.gather(1, d.to_deterministic().sample()[:, None]).all())
    probs = torch.softmax(logits, -1)
    legal_entropy = -(probs * torch.log(probs.clamp_min(1e-30))).sum(-1)
    torch.testing.assert_close(d.entropy(), legal_entropy, atol=1e-5, rtol=1e-5)


def test_autoregressive_distribution_through_the_adapter():
    torch.manual_seed(6)
    space = Tuple((Discrete(2), Discrete(2)))
    model = AutoregressiveActionModel(Box(-1, 1, (4,)), space, 16, {}, "ar")
    cls = RLBlocksDistribution.bind(BinaryAutoregressiveDistribution, 16, model)
    context, _ = model({"obs": torch.randn(B, 4)})
    d = cls.from_logits(context)
    a1, a2 = d.sample()
    assert a1.shape == a2.shape == (B,)
    # logp is the chain rule: log P(a1) + log P(a2 | a1), from the model's action_model
    l1, l2 = model.action_model(context, [a1, a2])
    expected = (
        torch.log_softmax(l1, -1).gather(1, a1[:, None])[:, 0]
        + torch.log_softmax(l2, -1).gather(1, a2[:, None])[:, 0]
    )
    torch.testing.assert_close(d.logp((a1, a2)), expected)
    assert d.entropy().shape == (B,)


def test_bad_use_is_a_clear_error():
    with pytest.raises(ValueError, match="needs an rlblocks distribution"):
        RLBlocksDistribution.from_logits(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="must be a distribution class"):
        RLBlocksDistribution.bind(3, 2)
    cls, _ = adapter(Discrete(2))
    with pytest.raises(ValueError, match="needs another RLBlocksDistribution"):
        cls.from_logits(torch.zeros(2, 2)).kl(TorchCategorical.from_logits(torch.zeros(2, 2)))
    with pytest.raises(NotImplementedError, match="no reparameterised sample"):
        cls.from_logits(torch.zeros(2, 2)).rsample()
    with pytest.raises(ValueError, match="out of range"):
        cls.from_logits(torch.zeros(2, 2)).logp(torch.tensor([0, 7]))


def test_categorical_distribution_class_is_the_rlblocks_one():
    cls, _ = adapter(Discrete(3))
    assert type(cls.from_logits(torch.zeros(1, 3)).inner) is Categorical
