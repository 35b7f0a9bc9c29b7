"""TD3's closed-form update (``rlblocks.train.fast.td3_backprop``): whole updates equal
the autograd path's (the same smoothing noise, the delayed actor, Polyak targets), for TD3
and DDPG, ReLU and tanh, with gradient clipping and importance weights; and the networks
it does not cover fall back to autograd, with the reason said once."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gymnasium.spaces import Box
from rlblocks.train import DDPGConfig, TD3Config
from rlblocks.train.fast.td3_backprop import TD3Backprop
from rlblocks.train.learners.td3 import TD3Learner


def _batches(n: int, rows: int = 48) -> list[SimpleNamespace]:
    rng = np.random.default_rng(0)
    return [
        SimpleNamespace(
            obs=rng.normal(size=(rows, 3)).astype(np.float32),
            actions=rng.uniform(-2.0, 3.0, (rows, 2)).astype(np.float32),
            rewards=rng.normal(size=rows).astype(np.float32),
            next_obs=rng.normal(size=(rows, 3)).astype(np.float32),
            discounts=np.where(rng.random(rows) < 0.2, 0.0, 0.99).astype(np.float32),
            weights=rng.uniform(0.5, 1.0, rows).astype(np.float32),
        )
        for _ in range(n)
    ]


def _learner(cls: type, hooked: bool, **kw: object) -> TD3Learner:
    torch.manual_seed(0)
    learner = TD3Learner(Box(-1, 1, (3,)), Box(-2.0, 3.0, (2,)), cls(**kw))
    if hooked:  # a no-op hook: the module path, the same networks
        learner.actor.register_forward_pre_hook(lambda module, args: None)
    return learner


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("algo", [TD3Config, DDPGConfig])
@pytest.mark.parametrize("grad_clip", [None, 0.5])
def test_closed_form_update_matches_autograd(
    activation: str, algo: type, grad_clip: object
) -> None:
    """Twenty updates give the same parameters (online, target, optimizer moments),
    statistics and priorities on the closed form as through autograd."""
    model = {"fcnet_hiddens": [32, 32], "fcnet_activation": activation}
    kw = {"model": model, "q_model": model, "grad_clip": grad_clip, "tau": 0.1}
    if algo is TD3Config:  # a wide noise clip: the smoothing's clamps are met both ways
        kw.update(target_noise=0.5, target_noise_clip=0.3)
    fast, plain = _learner(algo, False, **kw), _learner(algo, True, **kw)
    assert fast._backprop() is not None and plain._backprop() is None
    results = []
    for learner in (fast, plain):
        torch.manual_seed(1)
        results.append([learner.update(b, 0) for b in _batches(20)])
    for (stats_a, prio_a), (stats_b, prio_b) in zip(*results, strict=True):
        assert stats_a.keys() == stats_b.keys()
        for key in stats_a:
            assert stats_a[key] == pytest.approx(stats_b[key], rel=1e-4, abs=1e-5), key
        np.testing.assert_allclose(prio_a, prio_b, rtol=1e-4, atol=1e-5)
    assert sum("actor_loss" in s for s, _ in results[0]) == 20 // fast.config.policy_delay
    state_a, state_b = fast.state_dict(), plain.state_dict()
    for key in ("actor", "target_actor", "critics", "target_critics"):
        for name, tensor in state_a[key].items():
            torch.testing.assert_close(tensor, state_b[key][name], rtol=1e-4, atol=1e-5)
    for key in ("actor_optimizer", "critic_optimizer"):
        for slot, moments in state_a[key]["state"].items():
            for name, tensor in moments.items():
                want = state_b[key]["state"][slot][name]
                torch.testing.assert_close(tensor, want, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("change", ["free the gradients", "move the storages"])
def test_the_numpy_views_follow_freed_gradients_and_moved_storages(change: str) -> None:
    """The closed form's products run on numpy views of the parameters and their
    ``.grad`` tensors: after the gradients are freed (``zero_grad(set_to_none=True)``) or
    every parameter's and target's storage is replaced (same values), its updates still
    equal autograd's, so the views were taken again."""
    model = {"fcnet_hiddens": [16, 16]}
    kw = {"model": model, "q_model": model, "tau": 0.1}
    fast, plain = _learner(TD3Config, False, **kw), _learner(TD3Config, True, **kw)
    batches = _batches(10)
    for learner in (fast, plain):
        torch.manual_seed(1)
        for b in batches[:5]:
            learner.update(b, 0)
    if change == "free the gradients":
        for opt in (fast.actor_optimizer, fast.critic_optimizer):
            opt.zero_grad(set_to_none=True)
    else:
        nets = (fast.actor, fast.target_actor, fast.critics, fast.target_critics)
        for p in (p for net in nets for p in net.parameters()):
            old = p.data
            p.data = old.clone()
            old.fill_(float("nan"))  # stale views would read (and write) this
    assert fast._backprop() is not None
    for learner in (fast, plain):
        torch.manual_seed(2)
        for b in batches[5:]:
            learner.update(b, 0)
    state_a, state_b = fast.state_dict(), plain.state_dict()
    for key in ("actor", "target_actor", "critics", "target_critics"):
        for name, tensor in state_a[key].items():
            torch.testing.assert_close(tensor, state_b[key][name], rtol=1e-4, atol=1e-5)


def test_the_smoothing_noise_is_the_module_paths_draw() -> None:
    """The target alone, for the same torch seed: equal on both paths, and a different
    seed moves it (the noise is drawn, not skipped)."""
    kw = {"model": {"fcnet_hiddens": [8]}, "q_model": {"fcnet_hiddens": [8]}}
    learner = _learner(TD3Config, False, **kw)
    fast = learner._backprop()
    assert fast is not None
    b = _batches(1)[0]
    nxt, r, d = (torch.from_numpy(x) for x in (b.next_obs, b.rewards, b.discounts))
    ys = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        ys.append(fast.targets(nxt, r, d, 0.2, 0.5))
    torch.manual_seed(3)
    want = learner.targets(nxt, b.rewards, b.discounts)
    torch.testing.assert_close(ys[0], want, rtol=1e-5, atol=1e-6)
    assert torch.equal(ys[0], ys[1]) and not torch.equal(ys[0], ys[2])


def test_what_it_does_not_cover_goes_to_autograd_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = {"fcnet_hiddens": [8]}
    free = TD3Learner(
        Box(-1, 1, (3,)),
        Box(-1, 1, (2,)),
        TD3Config(model={**model, "free_log_std": True}, q_model={**model, "free_log_std": False}),
    )
    frozen = _learner(TD3Config, False, model=model, q_model=model)
    frozen.critics[0].q_head._logits._model[0].bias.requires_grad_(False)
    wide = _learner(TD3Config, False, model=model, q_model=model)
    wide.target_actor.double()
    hooked = _learner(TD3Config, False, model=model, q_model=model)
    assert hooked._backprop() is not None
    hooked.critics[1].register_forward_hook(lambda module, args, out: None)
    assert hooked._backprop() is None  # a hook set after the choice: autograd from then on
    with caplog.at_level(logging.INFO, logger="rlblocks.train.learners.td3"):
        for learner in (free, frozen, wide, free):
            assert learner._backprop() is None
        free.update(_batches(1, rows=4)[0], 0)  # through autograd
    said = [r.getMessage() for r in caplog.records if "closed form declined" in r.getMessage()]
    assert said == [
        "TD3 update: autograd: the closed form declined: the actor is not the plain fully "
        "connected network (tanh/ReLU, no free log-std)",
        "TD3 update: autograd: the closed form declined: a trained parameter is frozen",
        "TD3 update: autograd: the closed form declined: parameters off the CPU or not float32",
    ]
    assert isinstance(TD3Backprop.choose(wide.actor, wide.target_actor, [], []), str)


def test_the_default_td3_and_ddpg_trainers_take_the_closed_form() -> None:
    from rlblocks.train import DDPGTrainer, TD3Trainer

    for trainer_class in (TD3Trainer, DDPGTrainer):
        small = {"learning_starts": 16, "timesteps_per_iteration": 32, "train_batch_size": 16}
        with trainer_class({"env": "Pendulum-v1", **small}) as trainer:
            assert trainer.learner._backprop() is not None
            trainer.train()  # and trains on it
            assert trainer.learner._backprop() is not None
