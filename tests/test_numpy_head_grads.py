"""The numpy twins of the closed-form PPO update's heads (``numpy_head_grads``) against
autograd through the torch distributions at float64 precision: log-probabilities, entropy,
KL and their gradients with respect to the distribution inputs, for the heads of issue 48's
benchmark (Tuple(Discrete, Box), Discrete with RLlib's ``action_mask`` around the model, a
MaskedCategorical distribution) and the others the closed form covers; and ``mask_fill``
against ``rlblocks.masks.action_mask_fill`` (blocks with no legal entry left open)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple
from rlblocks.distributions.base import FLOAT_MIN
from rlblocks.masks import action_mask_fill, mask_layout
from rlblocks.nest import tree_map
from rlblocks.train.fast.head_grads import head_grads
from rlblocks.train.fast.numpy_head_grads import mask_fill, numpy_head_grads, row_max
from test_fc_backprop_heads import setup

# heads of test_fc_backprop_heads ("mask-*": RLlib's action_mask around the model, whose
# masked logits reach the head at FLOAT_MIN; "masked-*-dist": the masked distributions, a
# logit <= -1e8 masks its action) and their leaves, flatten order: ("cat", n, start) or
# ("gauss", dims)
CASES = {
    "tuple": [("cat", 3, 0), ("gauss", 1)],
    "mask-discrete": [("cat", 4, 0)],
    "mask-tuple": [("cat", 3, 0), ("gauss", 1)],
    "masked-categorical-dist": [("cat", 4, 0)],
    "multidiscrete-equal-start": [("cat", 4, 1), ("cat", 4, -2)],
    "dict": [("cat", 2, 0), ("cat", 3, 0), ("gauss", 2), ("cat", 2, 0)],
}


def _leaves(actions) -> list:
    """The action components in flatten order (Dict keys sorted; a MultiDiscrete's
    columns one by one)."""
    if isinstance(actions, dict):
        return [leaf for k in sorted(actions) for leaf in _leaves(actions[k])]
    if isinstance(actions, tuple):
        return [leaf for a in actions for leaf in _leaves(a)]
    if not actions.is_floating_point() and actions.dim() == 2:
        return list(actions.unbind(1))
    return [actions]


def _inputs(name: str, pol, n: int, rng: np.random.Generator) -> torch.Tensor:
    """float64 distribution inputs; masked logits at FLOAT_MIN (an action-mask model) or at
    -1e9 (a masked distribution), every component keeping a legal action."""
    x = torch.from_numpy(rng.normal(size=(n, pol.model.num_outputs)) * 1.5)
    if pol.mask_layout is not None:
        layout = pol.mask_layout
        mask = (rng.random((n, layout.size)) < 0.6).astype(np.float64)
        for start, end in layout.segments:
            mask[np.arange(n), start + rng.integers(0, end - start, n)] = 1.0
        x = x.masked_fill(action_mask_fill(torch.from_numpy(mask), layout), FLOAT_MIN)
    elif name.startswith("masked"):
        drop = rng.random(x.shape) < 0.4
        drop[np.arange(n), rng.integers(0, x.shape[1], n)] = False
        x[torch.from_numpy(drop)] = -1e9
    return x


def _reference(name: str, x: torch.Tensor, leaves: list, old: torch.Tensor) -> tuple:
    """``(logp [B], entropy [B], KL(old || new) [B])`` in float64 with
    ``torch.distributions`` (an oracle written apart from both heads)."""
    D = torch.distributions
    if name.startswith("masked"):
        x = x.masked_fill(x <= -1e8, FLOAT_MIN)
        old = old.masked_fill(old <= -1e8, FLOAT_MIN)
    logp = entropy = kl = torch.zeros(x.shape[0], dtype=torch.float64)
    col = 0
    for (kind, *shape), action in zip(CASES[name], leaves, strict=True):
        if kind == "cat":
            n, start = shape
            new_d = D.Categorical(logits=x[:, col : col + n])
            old_d = D.Categorical(logits=old[:, col : col + n])
            index = torch.as_tensor(action).reshape(-1).long() - start
            col += n
        else:
            (k,) = shape
            mean, log_std = x[:, col : col + k], x[:, col + k : col + 2 * k].clamp(-20, 20)
            o_mean, o_log_std = old[:, col : col + k], old[:, col + k : col + 2 * k]
            new_d = D.Independent(D.Normal(mean, log_std.exp()), 1)
            old_d = D.Independent(D.Normal(o_mean, o_log_std.clamp(-20, 20).exp()), 1)
            index = torch.as_tensor(action).double().reshape(-1, k)
            col += 2 * k
        logp = logp + new_d.log_prob(index)
        entropy = entropy + new_d.entropy()
        kl = kl + D.kl_divergence(old_d, new_d)
    return logp, entropy, kl


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("coeffs", [(0.0, 0.0), (0.03, 0.4)], ids=["plain", "entropy-kl"])
def test_numpy_head_terms_equal_autograd_at_float64(name, coeffs):
    """logp, d logp / d inputs (row by row), entropy, KL and the entropy and KL terms'
    gradient on float64 inputs equal autograd through ``torch.distributions`` in float64
    to 1e-10 (and that oracle equals the float32 rlblocks distribution)."""
    entropy_coeff, kl_coeff = coeffs
    _, pol, _ = setup(name)
    n = 37
    rng = np.random.default_rng(len(name))
    inputs = _inputs(name, pol, n, rng)
    old = inputs + torch.from_numpy(rng.normal(size=inputs.shape) * 0.3)
    old = torch.where(inputs <= -1e8, inputs, old)  # the old policy masks the same actions
    with torch.no_grad():
        torch.manual_seed(0)
        dist32 = pol.dist_class(inputs, pol.model)
        actions = dist32.sample()
    probe = pol.dist_class(torch.zeros(1, inputs.shape[1]), pol.model)
    head = head_grads(probe, None, pol.mask_layout is not None)
    assert not isinstance(head, str), head
    acts_np = tree_map(lambda a: a.numpy(), actions)
    logp, d_logp, d_extra, entropy, kl = numpy_head_grads(head).terms(
        inputs.numpy(), acts_np, old.numpy(), entropy_coeff, kl_coeff, True
    )

    x = inputs.clone().requires_grad_(True)
    want_logp, want_entropy, want_kl = _reference(name, x, _leaves(actions), old)
    with torch.no_grad():  # the oracle is the distribution the closed form stands for
        rows32 = (dist32.logp(actions), dist32.entropy(), pol.dist_class(old).kl(dist32))
    for ours, theirs in zip(rows32, (want_logp, want_entropy, want_kl), strict=True):
        torch.testing.assert_close(ours.double(), theirs.detach(), rtol=1e-5, atol=1e-5)
    (want_d_logp,) = torch.autograd.grad(want_logp.sum(), x, retain_graph=True)
    tol = {"rtol": 1e-10, "atol": 1e-10}
    assert logp.dtype == np.float64 and d_logp.dtype == np.float64
    torch.testing.assert_close(torch.from_numpy(np.asarray(logp)), want_logp.detach(), **tol)
    torch.testing.assert_close(torch.from_numpy(d_logp), want_d_logp, **tol)
    torch.testing.assert_close(float(entropy), float(want_entropy.detach().mean()), **tol)
    torch.testing.assert_close(float(kl), float(want_kl.detach().mean()), **tol)
    if entropy_coeff == 0.0 and kl_coeff == 0.0:
        assert d_extra is None
        return
    extra = -entropy_coeff * want_entropy.mean() + kl_coeff * want_kl.mean()
    (want_extra,) = torch.autograd.grad(extra, x)
    assert d_extra is not None
    torch.testing.assert_close(torch.from_numpy(d_extra), want_extra, **tol)
    assert float(np.abs(d_extra).max()) > 1e-4  # the comparison is not of zeros


@pytest.mark.parametrize(
    "space, num_outputs, size",
    [
        (Discrete(4), 4, 4),
        (MultiDiscrete([3, 2]), 5, 5),
        (Tuple((Discrete(3), Box(-1, 1, (2,)))), 7, 3),
        (Dict({"a": Discrete(2), "b": Box(-1, 1, (1,)), "c": MultiDiscrete([2, 3])}), 9, 7),
    ],
    ids=["discrete", "multidiscrete", "tuple", "dict"],
)
def test_mask_fill_is_action_mask_fill(space, num_outputs, size):
    """Random masks (0/1, fractional and negative entries, NaN; some rows with a component's
    block all zero: left open) give the torch fill."""
    layout = mask_layout(space, num_outputs, MultiBinary(size))
    rng = np.random.default_rng(3)
    mask = rng.choice([0.0, 1.0, 0.5, -1.0], size=(64, size), p=[0.5, 0.3, 0.1, 0.1])
    mask[::5] = 0.0  # rows without any legal action
    mask[1::7, 0] = np.nan
    want = action_mask_fill(torch.from_numpy(mask), layout).numpy()
    got = mask_fill(mask, layout)
    assert got.shape == (64, num_outputs) and got.dtype == bool
    np.testing.assert_array_equal(got, want)
    assert want.any() and not want[::5].any()


def test_row_max_is_max():
    rng = np.random.default_rng(0)
    for cols in (1, 3, 16, 17, 40):
        x = rng.normal(size=(9, cols)).astype(np.float32)
        x[0, -1] = np.nan
        np.testing.assert_array_equal(row_max(x), x.max(1, keepdims=True))
