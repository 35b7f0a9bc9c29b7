"""``FlatParameters``: parameters and gradients as views of two flat buffers; gradient
clipping and Adam on the buffer equal torch's per-parameter versions."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rlblocks.train.fast import FlatParameters
from torch import nn


def small_model(seed: int = 0) -> nn.Module:
    """Linear layers, a parameter-less activation, a 0-d and a non-contiguous parameter."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3), nn.Linear(3, 1, bias=False))
    model.register_parameter("scale", nn.Parameter(torch.tensor(1.5)))
    model.register_parameter("transposed", nn.Parameter(torch.randn(5, 2).t()))
    return model


def loss_of(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    h = model[3](model[2](model[1](model[0](x))))
    return (h.squeeze(1) * model.scale).pow(2).mean() + (model.transposed.sum(0) ** 2).sum()


def offset_of(params: list[nn.Parameter], param: nn.Parameter) -> int:
    return offsets(params)[[id(p) for p in params].index(id(param))]


def offsets(params: list[nn.Parameter]) -> list[int]:
    out, o = [], 0
    for p in params:
        out.append(o)
        o += p.numel()
    return out


# --- layout -------------------------------------------------------------------
def test_parameters_become_views_of_one_buffer_with_their_values():
    model = small_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = list(model.parameters())
    assert not model.transposed.is_contiguous()
    ids = [id(p) for p in params]
    flat = FlatParameters(params)
    assert [id(p) for p in model.parameters()] == ids  # the same Parameter objects
    assert flat.param.shape == (sum(p.numel() for p in params),)
    esize = flat.param.element_size()
    for p, off in zip(params, offsets(params), strict=True):
        assert p.data_ptr() == flat.param.data_ptr() + off * esize
        assert p.grad is not None
        assert p.grad.data_ptr() == flat.param.grad.data_ptr() + off * esize
        assert p.grad.shape == p.shape
    after = model.state_dict()
    assert list(after) == list(before)
    for k in before:
        torch.testing.assert_close(after[k], before[k], rtol=0, atol=0)
    # the buffer is the storage: writing it changes the model, and the other way round
    with torch.no_grad():
        flat.param.add_(1.0)
        for k in before:
            torch.testing.assert_close(model.state_dict()[k], before[k] + 1.0, rtol=0, atol=0)
        model[0].bias.zero_()
    off = offset_of(params, model[0].bias)
    assert flat.param[off : off + 6].abs().sum() == 0


def test_load_state_dict_keeps_the_views():
    """Restoring a checkpoint copies into the buffer (the optimizer still owns the storage)."""
    model, other = small_model(0), small_model(1)
    flat = FlatParameters(list(model.parameters()))
    ptrs = [p.data_ptr() for p in model.parameters()]
    model.load_state_dict(other.state_dict())
    assert [p.data_ptr() for p in model.parameters()] == ptrs
    torch.testing.assert_close(
        flat.param.detach(),
        torch.cat([p.detach().reshape(-1) for p in other.parameters()]),
        rtol=0,
        atol=0,
    )


def test_forward_and_backward_are_unchanged():
    model = small_model()
    ref = copy.deepcopy(model)
    FlatParameters(list(model.parameters()))
    x = torch.randn(9, 4)
    torch.testing.assert_close(loss_of(model, x), loss_of(ref, x), rtol=0, atol=0)


def test_mixed_dtypes_or_no_parameters_are_refused():
    with pytest.raises(ValueError, match="differ in device or dtype"):
        FlatParameters(
            [nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(2, dtype=torch.float64))]
        )
    with pytest.raises(ValueError, match="no parameters"):
        FlatParameters([])


def test_mixed_devices_are_refused():
    """A second device without a GPU: torch's "meta" device."""
    with pytest.raises(ValueError, match="differ in device or dtype"):
        FlatParameters([nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(2, device="meta"))])


# --- gradients -------------------------------------------------------------------
def test_backward_accumulates_into_the_buffer():
    """With the views attached, autograd writes straight into the gradient buffer."""
    model = small_model()
    ref = copy.deepcopy(model)
    flat = FlatParameters(list(model.parameters()))
    x = torch.randn(8, 4)
    flat.attach_grads()
    loss_of(model, x).backward()
    grad_ptrs = [p.grad.data_ptr() for p in model.parameters()]
    flat.sync_grads()
    assert [p.grad.data_ptr() for p in model.parameters()] == grad_ptrs
    loss_of(ref, x).backward()
    expected = torch.cat([p.grad.reshape(-1) for p in ref.parameters()])
    torch.testing.assert_close(flat.param.grad, expected, rtol=1e-6, atol=1e-7)


def test_sync_grads_copies_replaced_and_missing_grads():
    """A ``.grad`` set to None (and not recomputed) counts as zero; a ``.grad`` replaced by a
    new tensor is copied in; afterwards every ``.grad`` is its view again."""
    model = small_model()
    ref = copy.deepcopy(model)
    params = list(model.parameters())
    flat = FlatParameters(params)
    flat.param.grad.fill_(7.0)  # stale values that must not survive
    x = torch.randn(8, 4)
    unused = model[3].weight  # the loss below does not reach it
    for p in params:  # as after zero_grad(set_to_none=True): autograd allocates fresh tensors
        p.grad = None
    model.scale.grad = torch.full_like(model.scale, 2.0)  # replaced: 2 + dloss/dscale
    loss = loss_of_without_last(model, x)
    loss.backward()
    assert params[0].grad is not None and unused.grad is None
    flat.sync_grads()
    esize = flat.param.element_size()
    for p, off in zip(params, offsets(params), strict=True):
        assert p.grad.data_ptr() == flat.param.grad.data_ptr() + off * esize
    loss_of_without_last(ref, x).backward()
    ref.scale.grad += 2.0
    for p, q in zip(params, ref.parameters(), strict=True):
        want = q.grad if q.grad is not None else torch.zeros_like(q)
        torch.testing.assert_close(p.grad, want, rtol=1e-6, atol=1e-7)
    off = offset_of(params, unused)
    assert flat.param.grad[off : off + unused.numel()].abs().sum() == 0


def loss_of_without_last(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    h = model[2](model[1](model[0](x)))
    return (h * model.scale).pow(2).mean() + (model.transposed.sum(0) ** 2).sum()


def test_attach_grads_zeroes_and_relinks():
    model = small_model()
    params = list(model.parameters())
    flat = FlatParameters(params)
    flat.param.grad.fill_(3.0)
    params[1].grad = torch.ones_like(params[1])
    params[2].grad = None
    flat.attach_grads()
    assert flat.param.grad.abs().sum() == 0
    esize = flat.param.element_size()
    for p, off in zip(params, offsets(params), strict=True):
        assert p.grad.data_ptr() == flat.param.grad.data_ptr() + off * esize
        assert p.grad.shape == p.shape
    params[1].grad.fill_(5.0)  # writes through to the buffer
    off = offsets(params)[1]
    assert (flat.param.grad[off : off + params[1].numel()] == 5.0).all()


# --- clipping -------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(
    scale=st.sampled_from([0.0, 1e-6, 0.01, 0.3, 1.0, 7.0, 1e4]),
    max_norm=st.sampled_from([0.1, 0.5, 1.0, 40.0]),
    seed=st.integers(0, 1000),
)
def test_clip_grad_norm_matches_torch(scale, max_norm, seed):
    model = small_model(seed)
    ref = copy.deepcopy(model)
    params = list(model.parameters())
    flat = FlatParameters(params)
    gen = torch.Generator().manual_seed(seed)
    for p, q in zip(params, ref.parameters(), strict=True):
        g = torch.randn(p.shape, generator=gen) * scale
        p.grad.copy_(g)
        q.grad = g.clone()
    norm = flat.clip_grad_norm_(max_norm)
    ref_norm = torch.nn.utils.clip_grad_norm_(list(ref.parameters()), max_norm)
    torch.testing.assert_close(norm, ref_norm, rtol=1e-6, atol=0)
    for p, q in zip(params, ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-12)
    assert float(torch.linalg.vector_norm(flat.param.grad)) <= max_norm * (1 + 1e-5)


# --- optimizer -------------------------------------------------------------------
@pytest.mark.parametrize("clip", [None, 0.5])
def test_adam_on_the_buffer_equals_per_parameter_adam(clip):
    """Several Adam steps (fused) on ``flat.param`` give the parameters of per-parameter
    fused Adam on a copy, with autograd gradients synced in every step."""
    model = small_model(3)
    ref = copy.deepcopy(model)
    flat = FlatParameters(list(model.parameters()))
    opt = torch.optim.Adam([flat.param], lr=0.05, eps=1e-5, fused=True)
    ref_opt = torch.optim.Adam(list(ref.parameters()), lr=0.05, eps=1e-5, fused=True)
    start = [p.detach().clone() for p in ref.parameters()]
    gen = torch.Generator().manual_seed(0)
    for step in range(6):
        x = torch.randn(16, 4, generator=gen)
        if step % 2:
            flat.attach_grads()
        else:  # as after a user's zero_grad(): autograd allocates, sync copies in
            for p in model.parameters():
                p.grad = None
        loss_of(model, x).backward()
        flat.sync_grads()
        ref_opt.zero_grad()
        loss_of(ref, x).backward()
        if clip is not None:
            flat.clip_grad_norm_(clip)
            torch.nn.utils.clip_grad_norm_(list(ref.parameters()), clip)
        opt.step()
        ref_opt.step()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=1e-7)
    moved = max(
        float((q.detach() - s).abs().max()) for q, s in zip(ref.parameters(), start, strict=True)
    )
    assert moved > 0.1  # the steps did something
