"""The closed-form glue the native and RLlib learners share: ``clear_unwritten`` (which
gradients a closed-form pass leaves to ``zero_grad``) and ``PolyakUpdate`` (target
networks)."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks.train.fast.polyak import PolyakUpdate
from rlblocks.train.fast.q_layers import DenseQ
from rlblocks.train.fast.unwritten import clear_unwritten, unwritten_params
from rlblocks.train.learners.dqn import DQNLearner
from rlblocks.train.offpolicy_config import DQNConfig
from rlblocks.train.qnetwork import QNetwork


@pytest.mark.parametrize("dueling", [True, False])
def test_dense_q_writes_what_autograd_reaches(dueling: bool) -> None:
    """``DenseQ.written_params``: exactly the parameters a loss on the Q-values reaches
    (autograd leaves ``.grad`` None on the others, e.g. the body's unused value branch)."""
    torch.manual_seed(0)
    net = QNetwork(
        gym.spaces.Box(-1, 1, (3,)),
        gym.spaces.Discrete(4),
        {"fcnet_hiddens": [8, 8]},
        dueling=dueling,
    )
    fast = DenseQ.from_network(net)
    assert fast is not None
    net.masked_q(torch.randn(5, 3)).sum().backward()
    unreached = [p for p in net.parameters() if p.grad is None]
    assert unwritten_params(list(net.parameters()), fast) == unreached
    assert len(fast.written_params()) + len(unreached) == len(list(net.parameters()))


def test_clear_unwritten_keeps_the_written_gradients() -> None:
    torch.manual_seed(0)
    net = QNetwork(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(4), {"fcnet_hiddens": [8]})
    fast = DenseQ.from_network(net)
    assert fast is not None
    params = list(net.parameters())
    for p in params:
        p.grad = torch.ones_like(p)
    kept = {id(p): p.grad for p in fast.written_params()}
    clear_unwritten(params, fast)
    for p in params:
        if id(p) in kept:
            assert p.grad is kept[id(p)]  # the same tensor: the closed form overwrites it
        else:
            assert p.grad is None
    assert any(p.grad is None for p in params)  # the value branch's


def test_the_dqn_update_leaves_no_stale_gradient() -> None:
    """The closed-form DQN update: after it, the gradients are autograd's (None where the
    loss does not reach, written in full elsewhere), even over stale ones."""
    learner = DQNLearner(
        gym.spaces.Box(-1, 1, (3,)),
        gym.spaces.Discrete(2),
        DQNConfig(model={"fcnet_hiddens": [8]}),
        "cpu",
    )
    fast = DenseQ.from_network(learner.q)
    assert fast is not None
    for p in learner.q.parameters():
        p.grad = torch.full_like(p, float("nan"))
    rng = np.random.default_rng(0)
    b = 4
    batch = type(
        "Batch",
        (),
        {
            "obs": rng.normal(size=(b, 3)).astype(np.float32),
            "next_obs": rng.normal(size=(b, 3)).astype(np.float32),
            "actions": rng.integers(0, 2, b),
            "rewards": rng.normal(size=b),
            "discounts": np.full(b, 0.99),
            "weights": np.ones(b),
        },
    )()
    learner.update(batch)
    written = {id(p) for p in fast.written_params()}
    for p in learner.q.parameters():
        if id(p) in written:
            assert p.grad is not None and bool(torch.isfinite(p.grad).all())
        else:
            assert p.grad is None


def _nets() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(1)
    online = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    online(torch.randn(8, 3))  # running statistics and the integer batch counter move
    target = copy.deepcopy(online)
    with torch.no_grad():
        for t in target.state_dict().values():
            t.copy_(torch.randn_like(t) if t.is_floating_point() else torch.randint(0, 9, t.shape))
    return online, target


def test_polyak_of_parameters_interpolates_and_copies_buffers() -> None:
    online, target = _nets()
    update = PolyakUpdate.of_parameters(online, target)
    before = [p.detach().clone() for p in target.parameters()]
    update(0.25)
    for t, t0, o in zip(target.parameters(), before, online.parameters(), strict=True):
        torch.testing.assert_close(t.detach(), 0.75 * t0 + 0.25 * o.detach())
    for tb, ob in zip(target.buffers(), online.buffers(), strict=True):
        assert torch.equal(tb, ob)
    update(1.0)  # an exact copy
    for t, o in zip(target.parameters(), online.parameters(), strict=True):
        assert torch.equal(t, o)


def test_polyak_of_state_dict_is_rllibs_formula() -> None:
    """Every state-dict tensor ``tau * online + (1 - tau) * target``, bit for bit (the two
    products and their sum RLlib's ``update_target_network`` computes)."""
    online, target = _nets()
    update = PolyakUpdate.of_state_dict(online, target)
    for tau in (0.005, 0.3, 1.0):
        want = {
            k: tau * online.state_dict()[k] + (1 - tau) * t for k, t in target.state_dict().items()
        }
        update(tau)
        for key, got in target.state_dict().items():
            assert torch.equal(got, want[key].to(got.dtype)), (tau, key)


def test_polyak_refuses_networks_that_differ() -> None:
    a, b = torch.nn.Linear(3, 4), torch.nn.Linear(3, 5)
    with pytest.raises(ValueError, match="differ in number or shape"):
        PolyakUpdate.of_parameters(a, b)
    with pytest.raises(ValueError, match="different keys"):
        PolyakUpdate.of_state_dict(a, torch.nn.Sequential(torch.nn.Linear(3, 4)))
    with pytest.raises(ValueError, match="buffers"):
        PolyakUpdate.of_parameters(torch.nn.BatchNorm1d(4), torch.nn.LayerNorm(4))
