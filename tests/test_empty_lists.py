"""A batch whose lists or strings are all empty skips the encoder, and a string repeated
over a batch is encoded once (issue 46: MiniGrid's constant mission ran a full attention
forward and backward per row and minibatch). The shortcuts must give what the full
computation gives: the same encodings and gradients, and one PPO update on the tuned
MiniGrid config the same parameters. The reference is the full computation, reached by
making the encoders believe they are being traced (then nothing is cut, grouped or
skipped)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from rlblocks.models import entity
from rlblocks.models.entity import EntityEncoder, TextEncoder

OPTS = {"type": "attention", "dim": 8, "heads": 2, "layers": 1, "pool": "mean"}


@contextmanager
def _full_computation(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with monkeypatch.context() as patch:
        patch.setattr(entity, "_tracing", lambda: True)
        yield


def _grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient, zeros where none reached it."""
    return {
        n: torch.zeros_like(p) if p.grad is None else p.grad.clone()
        for n, p in module.named_parameters()
    }


def _backward(out: torch.Tensor) -> None:
    """A weighted sum's backward (an encoding of zeros may need none: no graph reaches it)."""
    loss = (out * torch.linspace(-1.0, 2.0, out.numel()).reshape(out.shape)).sum()
    if loss.requires_grad:
        loss.backward()


def _compare(
    module: torch.nn.Module,
    run: Callable[[], torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
    calls: list[int],
) -> None:
    module.zero_grad(set_to_none=True)
    fast = run()
    _backward(fast)
    fast_grads, skipped = _grads(module), list(calls)
    module.zero_grad(set_to_none=True)
    with _full_computation(monkeypatch):
        full = run()
        _backward(full)
    assert skipped == [] and calls != []  # the shortcut ran no encoder, the reference did
    torch.testing.assert_close(fast, full, rtol=0, atol=0)
    full_grads = _grads(module)
    for name, grad in fast_grads.items():
        torch.testing.assert_close(grad, full_grads[name], msg=name)


def _counted(enc: EntityEncoder, calls: list[int]) -> None:
    enc.embed.register_forward_hook(lambda m, a, o: calls.append(int(a[0].shape[0])))


@pytest.mark.parametrize("kind", ["attention", "deepsets"])
@pytest.mark.parametrize("pool", ["mean", "max", "sum", "attention"])
def test_a_batch_of_empty_lists_skips_the_encoder_with_the_same_result(
    kind: str, pool: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    enc = EntityEncoder(3, dim=8, heads=2, layers=2, pool=pool, type=kind)
    calls: list[int] = []
    _counted(enc, calls)
    items = torch.randn(4, 5, 3)  # garbage in every (padded) slot
    mask = torch.zeros(4, 5, dtype=torch.bool)
    _compare(enc, lambda: enc(items, mask), monkeypatch, calls)
    if kind == "deepsets":  # rho of zeros: not zeros, and its bias gets a gradient
        assert enc.rho is not None and bool(enc(items, mask)[:, :-1].abs().sum() > 0)


@pytest.mark.parametrize("encoding", ["one_hot", "ids"])
def test_empty_strings_skip_the_text_encoder_with_the_same_result(
    encoding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    enc = TextEncoder(4, 3, encoding, OPTS)
    calls: list[int] = []
    _counted(enc.entities, calls)
    width = 4 if encoding == "one_hot" else 1
    # Lengths <= 0 (0, and a normalised -0.7): no position is used; values anything.
    flat = torch.cat([torch.tensor([[0.0], [-0.7], [0.0]]), torch.randn(3, 3 * width)], dim=1)
    _compare(enc, lambda: enc.forward_flat(flat), monkeypatch, calls)
    with torch.no_grad():  # the rollout's path (no memo needed)
        torch.testing.assert_close(enc.forward_flat(flat), torch.zeros(3, 9), rtol=0, atol=0)
    assert calls == [3]  # only the reference ran the encoder (on every row)
    live = flat.clone()
    live[1, 0] = 0.3  # one position in use: the encoder runs again
    calls.clear()
    enc.forward_flat(live)
    assert calls != []


def test_one_ppo_update_on_the_tuned_minigrid_config_is_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("minigrid")
    from rlblocks.train.ppo import PPOTrainer
    from rlblocks.train.tuned import load_tuned

    config = dict(load_tuned("minigrid_doorkey5x5_ppo").config)
    # the zoo's MiniGrid settings normalise the observation (the tuned config did until
    # 2026-12-02): the filter must leave the constant mission's block as it is
    config.update(
        train_batch_size=256, num_envs=2, num_sgd_iter=2, seed=3,
        observation_filter="MeanStdFilter", sgd_minibatch_size=64,
    )  # fmt: skip
    trainer = PPOTrainer(config)
    try:
        batch = trainer.runner.collect(128)
        block = batch.obs[..., -6081:]
        # the constant mission passes the MeanStdFilter whole: its length and its one-hot
        # characters, one 1 per character
        mission = "use the key to open the door and then get to the goal"
        assert np.unique(block[..., 0]).tolist() == [float(len(mission))]
        assert np.unique(block[..., 1:]).tolist() == [0.0, 1.0]
        assert (block[..., 1:].sum(axis=-1) == len(mission)).all()
        model, learner = trainer.policy.model, trainer.learner
        start = copy.deepcopy((model.state_dict(), learner.optimizer.state_dict()))

        def update() -> tuple[dict[str, float], list[torch.Tensor]]:
            model.load_state_dict(start[0])
            learner.optimizer.load_state_dict(start[1])
            stats = learner.update(copy.deepcopy(batch), np.random.default_rng(0))
            return stats, [p.detach().clone() for p in model.parameters()]

        fast_stats, fast = update()
        with _full_computation(monkeypatch):
            full_stats, full = update()
        before = [start[0][name] for name, _ in model.named_parameters()]
        assert any(not torch.equal(a, b) for a, b in zip(fast, before, strict=True))
        for a, b in zip(fast, full, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        for key in ("total_loss", "policy_loss", "vf_loss", "entropy", "kl"):
            assert fast_stats[key] == pytest.approx(full_stats[key], rel=1e-4, abs=1e-6), key
    finally:
        trainer.close()
