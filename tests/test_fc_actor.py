"""FCActor (numpy rollout actions of the default FC model) against the torch policy path."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks.distributions import Categorical
from rlblocks.train.actor import ActorInput
from rlblocks.train.fast import FCActor
from rlblocks.train.fast.choice import log_once, numpy_acting
from rlblocks.train.policy import Policy
from rlblocks.train.trainer_config import PPOConfig

OBS = gym.spaces.Box(-2.0, 2.0, (5,), np.float32)

CASES = [
    (gym.spaces.Discrete(4), {"fcnet_hiddens": [16, 16]}),
    (
        gym.spaces.Discrete(3, start=-1),
        {"fcnet_hiddens": [8], "fcnet_activation": "relu", "vf_share_layers": True},
    ),
    (gym.spaces.Discrete(5), {"fcnet_hiddens": []}),
    (gym.spaces.Box(-1, 1, (3,)), {"fcnet_hiddens": [16, 8]}),
    (gym.spaces.Box(-1, 1, (2,)), {"fcnet_hiddens": [16], "free_log_std": True}),
    (
        gym.spaces.Box(-1, 1, ()),
        {"fcnet_hiddens": [8], "no_final_linear": True, "fcnet_activation": "linear"},
    ),
]


def policy(space: gym.Space, model: dict) -> Policy:
    torch.manual_seed(0)
    pol = Policy(OBS, space, PPOConfig.from_dict({"model": model}))
    with torch.no_grad():  # larger weights: outputs far from the initial near-uniform ones
        for p in pol.model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return pol


@pytest.mark.parametrize("space, model", CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize("explore", [True, False])
def test_numpy_actions_equal_the_torch_path(space, model, explore):
    """Same seed, same actions; log-probs, values and distribution inputs agree to float32
    rounding; the torch RNG advances by the same draws on both paths."""
    pol = policy(space, model)
    assert isinstance(pol.actor, FCActor) and pol.actor.numpy
    obs = np.random.default_rng(1).uniform(-2, 2, (64, 5)).astype(np.float32)
    results = []
    for actor in (pol.actor, pol.actor.fallback):
        torch.manual_seed(7)
        out = actor.act(ActorInput(obs, [], None, None), explore, True)
        after = torch.rand(1).item()
        results.append((out, after))
    (fast, after_fast), (ref, after_ref) = results
    assert after_fast == after_ref
    assert fast["actions"].shape == ref["actions"].shape
    assert fast["actions"].dtype == ref["actions"].dtype
    if isinstance(space, gym.spaces.Discrete):
        np.testing.assert_array_equal(fast["actions"], ref["actions"])
    else:
        np.testing.assert_allclose(fast["actions"], ref["actions"], rtol=1e-5, atol=1e-6)
    for key in ("logp", "vf_preds", "dist_inputs"):
        assert fast[key].dtype == np.float32
        np.testing.assert_allclose(fast[key], ref[key], rtol=1e-5, atol=1e-5, err_msg=key)
    assert fast["state_out"] == [] and ref["state_out"] == []


def test_values_and_weight_updates_are_seen():
    """``Policy.values`` goes through the actor, and an in-place parameter update (what the
    optimizer does) changes its outputs at once."""
    pol = policy(gym.spaces.Discrete(2), {"fcnet_hiddens": [8]})
    obs = np.ones((3, 5), np.float32)
    before = pol.values(obs, [])
    with torch.no_grad():
        pol.model._value_branch._model[0].bias.add_(1.0)
        want = pol.forward(pol.input_dict(torch.from_numpy(obs)), [], None)[1].numpy()
    np.testing.assert_allclose(pol.values(obs, []), want, rtol=1e-6)
    np.testing.assert_allclose(pol.values(obs, []), before + 1.0, rtol=1e-5)


def test_hooks_and_other_models_use_the_torch_path():
    pol = policy(gym.spaces.Discrete(2), {"fcnet_hiddens": [8]})
    calls = []
    handle = (
        pol.model._hidden_layers[0]._model[0].register_forward_hook(lambda *args: calls.append(1))
    )
    pol.act(np.zeros((2, 5), np.float32), [])
    handle.remove()
    assert calls
    lstm = Policy(
        OBS,
        gym.spaces.Discrete(2),
        PPOConfig.from_dict({"model": {"fcnet_hiddens": [8], "use_lstm": True}}),
    )
    assert not isinstance(lstm.actor, FCActor)
    config = PPOConfig.from_dict({"model": {"fcnet_hiddens": [8]}})
    base = Policy(OBS, gym.spaces.Discrete(3), config)
    custom = Policy(OBS, gym.spaces.Discrete(3), PPOConfig(), model=base.model, dist_class=MyHead)
    assert isinstance(custom.actor, FCActor) and not custom.actor.numpy
    assert custom.actor.declined == "MyHead head"


class MyHead(Categorical):
    """A custom head: numpy does not know how it draws."""


def test_the_actor_choice_is_logged_once_at_build(caplog):
    """One info line on ``rlblocks.train`` per policy: which actor serves, and why."""
    cases = [
        ({"fcnet_hiddens": [8, 8]}, True, "actor: fast numpy FC (2 hidden layers)"),
        ({"fcnet_hiddens": [8]}, False, "actor: torch module (fast_paths is off)"),
        (
            {"fcnet_hiddens": [8], "use_lstm": True},
            True,
            "actor: torch module (not the default fully connected model)",
        ),
    ]
    for model, fast, line in cases:
        caplog.clear()
        with caplog.at_level("INFO", logger="rlblocks.train"):
            pol = Policy(
                OBS,
                gym.spaces.Discrete(2),
                PPOConfig.from_dict({"model": model, "fast_paths": fast}),
            )
            pol.act(np.zeros((2, 5), np.float32), pol.initial_state(2))
        assert [r.getMessage() for r in caplog.records if r.name == "rlblocks.train"] == [line]


def test_the_shared_choice_names_why_a_custom_head_keeps_the_module_and_says_it_once(caplog):
    """``numpy_acting`` (RLlib's runner) and the policy make the same choice; the reason is
    logged once per process however often a runner is built."""
    pol = policy(gym.spaces.Discrete(3), {"fcnet_hiddens": [8]})
    reason = numpy_acting(pol.model, MyHead)
    assert reason == "numpy declined: MyHead head"
    assert isinstance(numpy_acting(pol.model, pol.dist_class), FCActor)
    with caplog.at_level("INFO", logger="rlblocks.test_choice"):
        for _ in range(3):
            log_once(logging.getLogger("rlblocks.test_choice"), "a runner", reason)
    assert [r.getMessage() for r in caplog.records] == [f"a runner: {reason}"]
