"""ModelV2, the layer helpers and the built-in models: shapes, parameter counts, outputs."""

from __future__ import annotations

import io
import itertools
import math
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks import get_preprocessor
from rlblocks.catalog import ModelCatalog
from rlblocks.models import (
    ComplexInputNetwork,
    FullyConnectedNetwork,
    ModelV2,
    TorchModelV2,
    VisionNetwork,
)
from rlblocks.models.misc import (
    AppendBiasLayer,
    SlimConv2d,
    SlimFC,
    Tanh,
    get_activation_fn,
    get_filter_config,
    get_initializer,
    normc_initializer,
    same_padding,
    valid_padding,
)
from rlblocks.spaces import Repeated
from torch import nn

DISCRETE2 = gym.spaces.Discrete(2)


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def lin(i: int, o: int) -> int:
    return i * o + o


def conv(cin: int, cout: int, kh: int, kw: int | None = None) -> int:
    return cout * cin * kh * (kh if kw is None else kw) + cout


# ----------------------------------------------------------------------------- helpers
@pytest.mark.parametrize(
    "in_size, k, s, padding, out",
    [((84, 84), 8, 4, (2, 2, 2, 2), (21, 21)), ((21, 21), 4, 2, (1, 2, 1, 2), (11, 11)),
     ((10, 10), 5, 2, (1, 2, 1, 2), (5, 5)), ((7, 9), (3, 1), (1, 2), (0, 0, 1, 1), (7, 5)),
     ((5, 5), 1, 1, (0, 0, 0, 0), (5, 5))],
)  # fmt: skip
def test_same_padding(in_size, k, s, padding, out):
    assert same_padding(in_size, k, s) == (padding, out)


def test_same_padding_matches_real_conv_output():
    for h, k, s in itertools.product([7, 10, 21, 84], [1, 3, 4, 8], [1, 2, 4]):
        (left, right, top, bottom), (oh, ow) = same_padding((h, h), k, s)
        x = nn.functional.pad(torch.zeros(1, 1, h, h), (left, right, top, bottom))
        y = nn.functional.conv2d(x, torch.zeros(1, 1, k, k), stride=s)
        assert tuple(y.shape[2:]) == (oh, ow) == (math.ceil(h / s),) * 2


def test_valid_padding():
    assert valid_padding((11, 11), 11, 1) == (1, 1)
    assert valid_padding((10, 8), (3, 2), 2) == (4, 4)


@pytest.mark.parametrize(
    "shape, first, n_layers",
    [((96, 96, 3), [16, [8, 8], 4], 3), ((84, 84, 4), [16, [8, 8], 4], 3),
     ((64, 64, 1), [16, [4, 4], 2], 4), ((42, 42, 3), [16, [4, 4], 2], 3),
     ((10, 10, 2), [16, [5, 5], 2], 2), ((3, 84, 84), [16, [8, 8], 4], 3),
     ((84, 84), [16, [8, 8], 4], 3)],
)  # fmt: skip
def test_get_filter_config_table(shape, first, n_layers):
    filters = get_filter_config(shape)
    assert filters[0] == first and len(filters) == n_layers


def test_get_filter_config_table_values():
    assert get_filter_config((84, 84, 1))[-1] == [256, [11, 11], 1]
    assert get_filter_config((96, 96, 1))[-1] == [256, [11, 11], 2]


@pytest.mark.parametrize("shape", [(100, 100), (84, 42, 3), (1, 84, 84, 3), (84,)])
def test_get_filter_config_errors(shape):
    with pytest.raises(ValueError, match="No default CNN configuration for obs shape"):
        get_filter_config(shape)


def test_get_filter_config_atari_advice():
    with pytest.raises(ValueError, match="For Atari frames, resize to 84x84"):
        get_filter_config((210, 160, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(3, 5), (256, 64), (64, 256)])
def test_tanh_matches_torch_values_and_gradients(dtype, shape):
    torch.manual_seed(0)
    base = torch.randn(*shape, dtype=dtype) * 4
    for x in (base, base.t()):  # contiguous and strided
        x = x.detach().requires_grad_(True)
        ref = x.detach().clone().requires_grad_(True)
        y, y_ref = Tanh()(x), torch.tanh(ref)
        assert y.dtype == dtype and y.shape == x.shape
        torch.testing.assert_close(y, y_ref, rtol=0, atol=2e-7 if dtype == torch.float32 else 1e-15)
        g = torch.randn_like(y)
        (y * g).sum().backward()
        (y_ref * g).sum().backward()
        torch.testing.assert_close(x.grad, ref.grad, rtol=1e-6, atol=1e-6)
        with torch.no_grad():
            torch.testing.assert_close(Tanh()(x), y_ref.detach(), rtol=0, atol=2e-7)


@pytest.mark.parametrize("shape", [(4, 4), (64, 64)])  # torch path and numpy path
def test_tanh_second_derivative(shape):
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(Tanh()(x).sum(), x, create_graph=True)
    g.sum().backward()
    t = torch.tanh(x.detach())
    torch.testing.assert_close(x.grad, -2 * t * (1 - t**2))
    assert torch.autograd.gradgradcheck(Tanh(), (x[:1, :4].detach().requires_grad_(),))


def test_fcnet_honours_hidden_initializers_and_keeps_head_init():
    cfg = {
        "fcnet_hiddens": [16, 8],
        "vf_share_layers": False,
        "post_fcnet_hiddens": [6],
        "fcnet_weights_initializer": "orthogonal_",
        "fcnet_weights_initializer_config": {"gain": 2.0},
        "fcnet_bias_initializer": "Constant",
        "fcnet_bias_initializer_config": {"val": 0.25},
        "post_fcnet_weights_initializer": "zeros",
    }
    m = FullyConnectedNetwork(gym.spaces.Box(-1, 1, (5,)), gym.spaces.Discrete(3), 3, cfg, "fc")
    for stack in (m._hidden_layers, m._value_branch_separate):
        for layer in list(stack)[:2]:  # fcnet_hiddens: orthogonal rows of norm 2, bias 0.25
            w, b = layer._model[0].weight, layer._model[0].bias
            gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
            torch.testing.assert_close(gram, 4.0 * torch.eye(len(gram)), atol=1e-5, rtol=0)
            assert torch.all(b == 0.25)
        post = list(stack)[2]._model[0]  # post_fcnet_hiddens: zeros, default zero bias
        assert torch.all(post.weight == 0) and torch.all(post.bias == 0)
    for head in (m._logits, m._value_branch):  # heads keep normc(0.01)
        w = head._model[0].weight
        torch.testing.assert_close(w.norm(dim=1), torch.full((w.shape[0],), 0.01))


def test_default_initializers_draw_the_same_weights_as_before():
    torch.manual_seed(3)
    box, discrete = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    a = FullyConnectedNetwork(box, discrete, 2, {"fcnet_hiddens": [8]}, "a")
    torch.manual_seed(3)
    normc = {
        "fcnet_hiddens": [8],
        "fcnet_weights_initializer": "normc",
        "fcnet_weights_initializer_config": {"std": 1.0},
    }
    b = FullyConnectedNetwork(box, discrete, 2, normc, "b")
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)


SB3_HEADS = {
    "logits_weights_initializer": "orthogonal",
    "logits_weights_initializer_config": {"gain": 0.01},
    "vf_weights_initializer": "orthogonal",
    "vf_weights_initializer_config": {"gain": 1.0},
}


@pytest.mark.parametrize("share", [True, False])
def test_head_initializers_set_the_logits_and_value_heads(share):
    box, discrete = gym.spaces.Box(-1, 1, (5,)), gym.spaces.Discrete(3)
    cfg = {"fcnet_hiddens": [16, 8], "vf_share_layers": share, **SB3_HEADS}
    m = FullyConnectedNetwork(box, discrete, 3, cfg, "fc")
    for head, gain in ((m._logits, 0.01), (m._value_branch, 1.0)):
        w, b = head._model[0].weight, head._model[0].bias
        torch.testing.assert_close(w @ w.T, gain**2 * torch.eye(len(w)), atol=1e-6, rtol=0)
        assert torch.all(b == 0)
    # unset keys keep normc(0.01), drawing what an explicit normc(0.01) draws
    torch.manual_seed(5)
    a = FullyConnectedNetwork(box, discrete, 3, {"fcnet_hiddens": [8]}, "a")
    torch.manual_seed(5)
    normc = {
        "fcnet_hiddens": [8],
        "logits_weights_initializer": "normc",
        "logits_weights_initializer_config": {"std": 0.01},
        "vf_weights_initializer": "normc",
        "vf_weights_initializer_config": {"std": 0.01},
    }
    b = FullyConnectedNetwork(box, discrete, 3, normc, "b")
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)


def test_head_initializers_are_refused_where_no_head_reads_them():
    box, discrete = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    for extra, owner in (
        ({"use_lstm": True}, "use_lstm / use_attention wrapper"),
        ({"use_attention": True}, "use_lstm / use_attention wrapper"),
    ):
        with pytest.raises(ValueError, match=f"logits_weights_initializer and vf_.*{owner}"):
            ModelCatalog.get_model_v2(box, discrete, 2, {**SB3_HEADS, **extra})
    image = gym.spaces.Box(0, 1, (42, 42, 3))
    with pytest.raises(ValueError, match="^vf_weights_initializer set the heads .*VisionNetwork"):
        ModelCatalog.get_model_v2(image, discrete, 2, {"vf_weights_initializer": "zeros"})
    with pytest.raises(ValueError, match="logits_weights_initializer='orthogonal': .*no logits"):
        FullyConnectedNetwork(box, discrete, None, SB3_HEADS, "torso")
    with pytest.raises(ValueError, match="vf_weights_initializer='zeros': .*no value head"):
        cfg = {"vf_weights_initializer": "zeros"}
        FullyConnectedNetwork(box, discrete, 2, cfg, "x", value_branch=False)
    # the default FC net reads them
    assert isinstance(ModelCatalog.get_model_v2(box, discrete, 2, SB3_HEADS), FullyConnectedNetwork)


def test_get_initializer_errors():
    with pytest.raises(ValueError, match="unknown initializer 'nope'.*orthogonal"):
        get_initializer("nope")
    with pytest.raises(ValueError, match="does not accept"):
        get_initializer("xavier_uniform", {"std": 1.0})
    with pytest.raises(ValueError, match="takes only std"):
        get_initializer("normc", {"gain": 1.0})
    with pytest.raises(ValueError, match="unknown initializer"):
        FullyConnectedNetwork(
            gym.spaces.Box(-1, 1, (4,)),
            gym.spaces.Discrete(2),
            2,
            {"fcnet_weights_initializer": "nope"},
            "fc",
        )
    calls = []
    init = get_initializer(lambda t, scale: calls.append(scale), {"scale": 3})
    init(torch.empty(2))
    assert calls == [3]


def test_get_activation_fn():
    assert get_activation_fn("relu") is nn.ReLU and get_activation_fn("ReLU") is nn.ReLU
    assert get_activation_fn("tanh") is Tanh and get_activation_fn("Tanh") is nn.Tanh
    assert get_activation_fn("elu") is nn.ELU
    assert get_activation_fn("swish") is nn.SiLU is get_activation_fn("silu")
    assert get_activation_fn("softmax") is nn.Softmax
    assert get_activation_fn("Sigmoid") is nn.Sigmoid and get_activation_fn("GELU") is nn.GELU
    assert get_activation_fn("LeakyReLU") is nn.LeakyReLU
    assert get_activation_fn(None) is None and get_activation_fn("linear") is None
    assert get_activation_fn(torch.tanh) is torch.tanh
    for bad in ("sigmoid", "gelu", "leakyrelu", "Linear2"):
        with pytest.raises(ValueError, match=f"Unknown activation \\('{bad}'\\)"):
            get_activation_fn(bad)
    with pytest.raises(ValueError, match="only framework='torch'"):
        get_activation_fn("relu", "tf")


def test_normc_initializer_row_norms():
    w = torch.empty(7, 13)
    normc_initializer(0.5)(w)
    torch.testing.assert_close(w.norm(dim=1), torch.full((7,), 0.5))


def test_slim_fc_layout_and_init():
    fc = SlimFC(6, 4, activation_fn="relu", bias_init=0.25)
    assert list(fc.state_dict()) == ["_model.0.weight", "_model.0.bias"]
    assert isinstance(fc._model[1], nn.ReLU)
    bound = math.sqrt(6 / (6 + 4))  # xavier_uniform_ default
    assert fc._model[0].weight.abs().max() <= bound
    assert torch.all(fc._model[0].bias == 0.25)
    assert len(SlimFC(6, 4)._model) == 1
    assert len(SlimFC(6, 4, use_bias=False).state_dict()) == 1
    assert isinstance(SlimFC(2, 2, activation_fn=torch.tanh)._model[1], nn.Module)
    x = torch.randn(3, 2)
    f = SlimFC(2, 2, activation_fn=torch.tanh)
    torch.testing.assert_close(f(x), torch.tanh(f._model[0](x)))


def test_slim_conv_layout():
    padded = SlimConv2d(3, 8, 4, 2, (1, 2, 1, 2))
    assert isinstance(padded._model[0], nn.ZeroPad2d) and isinstance(padded._model[2], nn.ReLU)
    assert "_model.1.weight" in padded.state_dict()
    plain = SlimConv2d(3, 8, [4, 4], 1, None, activation_fn=None)
    assert list(plain.state_dict()) == ["_model.0.weight", "_model.0.bias"]
    assert len(plain._model) == 1
    assert "_model.1.weight" in SlimConv2d(3, 8, 1, 1, (0, 0, 0, 0)).state_dict()
    assert padded(torch.zeros(2, 3, 21, 21)).shape == (2, 8, 11, 11)


@pytest.mark.parametrize(
    "kernel, padding, in_hw",
    [((11, 11), None, (11, 11)), ((1, 1), (0, 0, 0, 0), (1, 1)), ((3, 2), None, (3, 2)),
     ((11, 11), None, (12, 12)), ((3, 3), (1, 1, 1, 1), (3, 3))],
)  # fmt: skip
def test_slim_conv_full_kernel_matches_conv(kernel, padding, in_hw):
    layer = SlimConv2d(5, 7, kernel, 1, padding, activation_fn="tanh")
    conv = layer._model[0 if padding is None else 1]
    x = torch.randn(3, 5, *in_hw)
    padded = x if padding is None else nn.functional.pad(x, padding)
    expected = torch.tanh(nn.functional.conv2d(padded, conv.weight, conv.bias))
    torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)


def test_append_bias_layer():
    layer = AppendBiasLayer(3)
    with torch.no_grad():
        layer.log_std.copy_(torch.tensor([1.0, 2.0, 3.0]))
    out = layer(torch.zeros(2, 2))
    assert out.tolist() == [[0, 0, 1, 2, 3]] * 2
    assert list(layer.state_dict()) == ["log_std"]


# ----------------------------------------------------------------------------- FC
def fc_expected_params(
    n_in, fc, post, n_out, *, no_final_linear=False, vf_share=True, free_log_std=False
):
    """Closed form of RLlib's FullyConnectedNetwork layout."""
    hiddens = fc + post
    total, prev = 0, n_in
    n_logits = n_out // 2 if (free_log_std and n_out) else n_out
    for h in hiddens[:-1]:
        total += lin(prev, h)
        prev = h
    if no_final_linear and n_out:
        total += lin(prev, n_logits)
        prev = n_logits
    else:
        if hiddens:
            total += lin(prev, hiddens[-1])
            prev = hiddens[-1]
        if n_out:
            total += lin(prev, n_logits)
    if free_log_std and n_out:
        total += n_logits  # the appended log_std vector
    vf_in = prev
    if not vf_share:
        vf_in = n_in
        for h in hiddens:
            total += lin(vf_in, h)
            vf_in = h
    return total + lin(vf_in, 1)


FC_CASES = list(
    itertools.product(
        [[], [7], [16, 8]], [[], [5]], [None, 4], [False, True], [False, True], [False, True]
    )
)


@pytest.mark.parametrize("fc, post, n_out, nfl, vf_share, free", FC_CASES)
def test_fc_shapes_and_param_counts(fc, post, n_out, nfl, vf_share, free):
    obs = gym.spaces.Box(-1, 1, (5,))
    cfg = {
        "fcnet_hiddens": fc,
        "post_fcnet_hiddens": post,
        "no_final_linear": nfl,
        "vf_share_layers": vf_share,
        "free_log_std": free,
    }
    m = FullyConnectedNetwork(obs, DISCRETE2, n_out, cfg, "fc")
    assert n_params(m) == fc_expected_params(
        5, fc, post, n_out, no_final_linear=nfl, vf_share=vf_share, free_log_std=free
    )
    out, state = m({"obs": torch.randn(3, 5)})
    expected_out = n_out if n_out else ((fc + post)[-1] if fc + post else 5)
    assert out.shape == (3, expected_out) and m.num_outputs == expected_out
    assert state == []
    assert m.value_function().shape == (3,)


def test_fc_default_param_count_hand_computed():
    m = FullyConnectedNetwork(gym.spaces.Box(-1, 1, (4,)), DISCRETE2, 2, {}, "fc")
    assert n_params(m) == (4 * 256 + 256) + (256 * 256 + 256) + (256 * 2 + 2) + (256 + 1)


def test_fc_matches_hand_built_sequential():
    m = FullyConnectedNetwork(
        gym.spaces.Box(-1, 1, (6,)), DISCRETE2, 3, {"fcnet_hiddens": [10, 8]}, "fc"
    )
    ref = nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 8), nn.Tanh(), nn.Linear(8, 3))
    vref = nn.Linear(8, 1)
    with torch.no_grad():
        pairs = [
            (ref[0], m._hidden_layers[0]._model[0]),
            (ref[2], m._hidden_layers[1]._model[0]),
            (ref[4], m._logits._model[0]),
            (vref, m._value_branch._model[0]),
        ]
        for dst, src in pairs:
            dst.weight.copy_(src.weight)
            dst.bias.copy_(src.bias)
    x = torch.randn(9, 6)
    out, _ = m({"obs": x})
    torch.testing.assert_close(out, ref(x))
    torch.testing.assert_close(m.value_function(), vref(ref[:4](x)).squeeze(1))


def test_fc_init_scales():
    m = FullyConnectedNetwork(
        gym.spaces.Box(-1, 1, (6,)), DISCRETE2, 3, {"fcnet_hiddens": [10]}, "f"
    )
    torch.testing.assert_close(
        m._hidden_layers[0]._model[0].weight.detach().norm(dim=1), torch.ones(10)
    )
    torch.testing.assert_close(
        m._logits._model[0].weight.detach().norm(dim=1), torch.full((3,), 0.01)
    )
    assert torch.all(m._logits._model[0].bias == 0)


def test_fc_activation_rules():
    obs = gym.spaces.Box(-1, 1, (3,))
    m = FullyConnectedNetwork(
        obs, DISCRETE2, 2, {"fcnet_hiddens": [4], "post_fcnet_hiddens": [5],
                            "fcnet_activation": "relu", "post_fcnet_activation": "tanh"}, "f"
    )  # fmt: skip
    # RLlib: post_fcnet_hiddens use fcnet_activation when fcnet_hiddens is non-empty.
    assert [type(layer._model[1]) for layer in m._hidden_layers] == [nn.ReLU, nn.ReLU]
    m = FullyConnectedNetwork(
        obs, DISCRETE2, 2, {"fcnet_hiddens": [], "post_fcnet_hiddens": [5],
                            "fcnet_activation": "relu", "post_fcnet_activation": "tanh"}, "f"
    )  # fmt: skip
    assert isinstance(m._hidden_layers[0]._model[1], nn.Tanh)
    m = FullyConnectedNetwork(
        obs, DISCRETE2, 2, {"fcnet_hiddens": [4], "no_final_linear": True}, "f"
    )
    assert m._logits is None and isinstance(m._hidden_layers[-1]._model[1], nn.Tanh)


def test_fc_free_log_std():
    m = FullyConnectedNetwork(
        gym.spaces.Box(-1, 1, (3,)), DISCRETE2, 4, {"fcnet_hiddens": [8], "free_log_std": True}, "f"
    )
    out, _ = m({"obs": torch.randn(5, 3)})
    assert out.shape == (5, 4) and torch.all(out[:, 2:] == 0)
    with torch.no_grad():
        m._append_free_log_std.log_std.fill_(0.5)
    assert torch.all(m({"obs": torch.randn(5, 3)})[0][:, 2:] == 0.5)
    with pytest.raises(ValueError, match="free_log_std=True needs an even num_outputs"):
        FullyConnectedNetwork(
            gym.spaces.Box(-1, 1, (3,)), DISCRETE2, 3, {"free_log_std": True}, "f"
        )


def test_fc_separate_value_branch_reads_raw_input():
    m = FullyConnectedNetwork(
        gym.spaces.Box(-1, 1, (3,)),
        DISCRETE2,
        2,
        {"fcnet_hiddens": [4], "vf_share_layers": False},
        "f",
    )
    x = torch.randn(6, 3)
    m({"obs": x})
    expected = m._value_branch(m._value_branch_separate(x)).squeeze(1)
    torch.testing.assert_close(m.value_function(), expected)


def test_fc_flattens_multi_dim_box_and_casts_int():
    m = FullyConnectedNetwork(
        gym.spaces.Box(0, 3, (2, 3)), DISCRETE2, 2, {"fcnet_hiddens": [4]}, "f"
    )
    out, _ = m({"obs": torch.randint(0, 3, (5, 2, 3))})
    assert out.shape == (5, 2) and out.dtype == torch.float32


def test_value_function_before_forward_errors():
    m = FullyConnectedNetwork(
        gym.spaces.Box(-1, 1, (3,)), DISCRETE2, 2, {"fcnet_hiddens": [4]}, "f"
    )
    with pytest.raises(ValueError, match="before value_function"):
        m.value_function()
    feat = FullyConnectedNetwork(
        gym.spaces.Box(-1, 1, (3,)), DISCRETE2, None, {}, "f", value_branch=False
    )
    feat({"obs": torch.zeros(1, 3)})
    with pytest.raises(ValueError, match="value_branch=False"):
        feat.value_function()


# ----------------------------------------------------------------------------- vision
def vision_default_84_params(c_in: int, n_out: int) -> int:
    return conv(c_in, 16, 8) + conv(16, 32, 4) + conv(32, 256, 11) + lin(256, n_out) + lin(256, 1)


def test_vision_default_84_param_count_and_shapes():
    obs = gym.spaces.Box(0, 255, (84, 84, 4))
    m = VisionNetwork(obs, DISCRETE2, 6, {}, "v")
    assert n_params(m) == vision_default_84_params(4, 6) == 1005623
    out, _ = m({"obs": torch.rand(3, 84, 84, 4)})
    assert out.shape == (3, 6) and m.value_function().shape == (3,)
    assert m.model_config["conv_filters"] == get_filter_config((84, 84, 4))


@pytest.mark.parametrize(
    "shape, expected_convs",
    [((42, 42, 3), conv(3, 16, 4) + conv(16, 32, 4) + conv(32, 256, 11)),
     ((96, 96, 1), conv(1, 16, 8) + conv(16, 32, 4) + conv(32, 256, 11)),
     ((10, 10, 2), conv(2, 16, 5) + conv(16, 32, 5))],
)  # fmt: skip
def test_vision_default_tables_param_counts(shape, expected_convs):
    m = VisionNetwork(gym.spaces.Box(0, 1, shape), DISCRETE2, 5, {}, "v")
    last = m.filters[-1].out_channels
    assert n_params(m) == expected_convs + lin(last, 5) + lin(last, 1)
    out, _ = m({"obs": torch.rand(2, *shape)})
    assert out.shape == (2, 5)


def test_vision_separate_value_tower_param_count():
    obs = gym.spaces.Box(0, 1, (42, 42, 3))
    convs = conv(3, 16, 4) + conv(16, 32, 4) + conv(32, 256, 11)
    m = VisionNetwork(obs, DISCRETE2, 5, {"vf_share_layers": False}, "v")
    assert n_params(m) == convs + lin(256, 5) + convs + lin(256, 1)
    m({"obs": torch.rand(4, 42, 42, 3)})
    assert m.value_function().shape == (4,)


def test_vision_matches_hand_built_sequential():
    m = VisionNetwork(gym.spaces.Box(0, 1, (84, 84, 4)), DISCRETE2, 6, {}, "v")
    ref = nn.Sequential(
        nn.ZeroPad2d((2, 2, 2, 2)), nn.Conv2d(4, 16, 8, 4), nn.ReLU(),
        nn.ZeroPad2d((1, 2, 1, 2)), nn.Conv2d(16, 32, 4, 2), nn.ReLU(),
        nn.Conv2d(32, 256, 11, 1), nn.ReLU(), nn.Conv2d(256, 6, 1),
    )  # fmt: skip
    pairs = [(ref[1], m._convs[0]._model[1]), (ref[4], m._convs[1]._model[1]),
             (ref[6], m._convs[2]._model[0]), (ref[8], m._logits._model[1])]  # fmt: skip
    with torch.no_grad():
        for dst, src in pairs:
            dst.weight.copy_(src.weight)
            dst.bias.copy_(src.bias)
    x = torch.rand(2, 84, 84, 4)
    out, _ = m({"obs": x})
    torch.testing.assert_close(out, ref(x.permute(0, 3, 1, 2)).flatten(1))
    features = ref[:8](x.permute(0, 3, 1, 2)).flatten(1)
    torch.testing.assert_close(m.value_function(), m._value_branch(features).squeeze(1))


def test_vision_post_fcnet_last_hidden_gets_activation():
    m = VisionNetwork(
        gym.spaces.Box(0, 1, (10, 10, 3)), DISCRETE2, 4,
        {"post_fcnet_hiddens": [12, 7], "post_fcnet_activation": "tanh"}, "v",
    )  # fmt: skip
    fcs = [layer for layer in m._convs if isinstance(layer, SlimFC)]
    # docs/differences.md, difference 18
    assert all(isinstance(f._model[-1], nn.Tanh) for f in fcs) and len(fcs) == 2
    assert isinstance(m._logits, SlimFC) and len(m._logits._model) == 1
    assert n_params(m) == (conv(3, 16, 5) + conv(16, 32, 5) + lin(32, 12) + lin(12, 7)
                           + lin(7, 4) + lin(7, 1))  # fmt: skip
    out, _ = m({"obs": torch.rand(3, 10, 10, 3)})
    assert out.shape == (3, 4) and m.value_function().shape == (3,)


def test_vision_no_final_linear():
    m = VisionNetwork(
        gym.spaces.Box(0, 1, (10, 10, 3)), DISCRETE2, 4, {"no_final_linear": True}, "v"
    )
    assert m._logits is None
    assert n_params(m) == conv(3, 16, 5) + conv(16, 4, 5) + lin(4, 1)
    out, _ = m({"obs": torch.rand(3, 10, 10, 3)})
    assert out.shape == (3, 4) and torch.all(out >= 0)  # ReLU on the outputs


def test_vision_num_outputs_none_flattens():
    filters = [[8, [3, 3], 2], [4, [3, 3], 1]]  # 12x12 -> 6x6 -> 4x4
    m = VisionNetwork(
        gym.spaces.Box(0, 1, (12, 12, 1)), DISCRETE2, None, {"conv_filters": filters}, "v"
    )
    assert m.num_outputs == 4 * 4 * 4
    out, _ = m({"obs": torch.rand(2, 12, 12, 1)})
    assert out.shape == (2, 64) and m.value_function().shape == (2,)


def test_vision_error_when_last_conv_not_1x1():
    with pytest.raises(ValueError, match=r"into a 9x9 feature map.*need it to be 1x1"):
        VisionNetwork(
            gym.spaces.Box(0, 1, (80, 80, 3)), DISCRETE2, 6,
            {"conv_filters": [[16, [8, 8], 4], [32, [4, 4], 2]]}, "v",
        )  # fmt: skip
    # a size without an RLlib default gets a derived stack (difference 26), not an error
    m = VisionNetwork(gym.spaces.Box(0, 1, (100, 100, 3)), DISCRETE2, 6, {}, "v")
    assert m({"obs": torch.rand(2, 100, 100, 3)})[0].shape == (2, 6)
    with pytest.raises(ValueError, match="needs a rank-3 Box"):
        VisionNetwork(gym.spaces.Box(0, 1, (84, 84)), DISCRETE2, 6, {}, "v")


# ----------------------------------------------------------------------------- complex input
def complex_space():
    return gym.spaces.Dict(
        {"img": gym.spaces.Box(0, 1, (10, 10, 3)), "d": gym.spaces.Discrete(3),
         "v": gym.spaces.Box(-1, 1, (2,))}
    )  # fmt: skip


def test_complex_input_param_count_and_no_unused_parameters():
    space = complex_space()
    prep = get_preprocessor(space)(space)
    cfg = {"fcnet_hiddens": [8], "post_fcnet_hiddens": [6]}
    m = ComplexInputNetwork(prep.observation_space, DISCRETE2, 4, cfg, "c")
    cnn = conv(3, 16, 5) + conv(16, 32, 5)
    assert n_params(m) == cnn + lin(3, 8) + lin(2, 8) + lin(32 + 8 + 8, 6) + lin(6, 4) + lin(6, 1)
    state = m.state_dict()
    assert len({t.data_ptr() for t in state.values()}) == len(state)  # no aliased duplicates
    assert sorted(m.cnns) == ["1"] and sorted(m.one_hot) == ["0"] and sorted(m.flatten) == ["2"]
    batch = prep.transform_batch([space.sample() for _ in range(5)])
    out, _ = m({"obs": torch.from_numpy(batch)})
    assert out.shape == (5, 4)
    (out.sum() + m.value_function().sum()).backward()
    unused = [name for name, p in m.named_parameters() if p.grad is None]
    assert unused == []


def test_complex_input_nested_raw_input_matches_flat_path():
    space = complex_space()
    space.seed(3)
    prep = get_preprocessor(space)(space)
    cfg = {"fcnet_hiddens": [8]}
    flat_model = ComplexInputNetwork(prep.observation_space, DISCRETE2, 3, cfg, "c")
    raw_model = ComplexInputNetwork(
        space, DISCRETE2, 3, dict(cfg, _disable_preprocessor_api=True), "c"
    )
    raw_model.load_state_dict(flat_model.state_dict())
    samples = [space.sample() for _ in range(4)]
    flat = torch.from_numpy(prep.transform_batch(samples))
    nested = {
        "img": torch.tensor(np.stack([s["img"] for s in samples])),
        "d": torch.tensor([int(s["d"]) for s in samples]),
        "v": torch.tensor(np.stack([s["v"] for s in samples])),
    }
    out_flat, _ = flat_model({"obs": flat})
    out_raw, _ = raw_model({"obs": nested})
    torch.testing.assert_close(out_raw, out_flat)
    torch.testing.assert_close(raw_model.value_function(), flat_model.value_function())


def test_complex_input_tuple_and_multidiscrete_and_features_only():
    space = gym.spaces.Tuple(
        (gym.spaces.MultiDiscrete([2, 3]), gym.spaces.Box(-1, 1, (2, 2)), gym.spaces.MultiBinary(3))
    )
    prep = get_preprocessor(space)(space)
    m = ComplexInputNetwork(prep.observation_space, DISCRETE2, None, {"fcnet_hiddens": [4]}, "c")
    assert m.num_outputs == 12 and m.logits_layer is None
    assert n_params(m) == lin(5, 4) + lin(4, 4) + lin(3, 4)
    out, _ = m({"obs": torch.from_numpy(prep.transform_batch([space.sample() for _ in range(2)]))})
    assert out.shape == (2, 12)
    with pytest.raises(ValueError, match="no value head"):
        m.value_function()


def test_complex_input_encodes_repeated_component():
    # Issue 26: a Repeated component gets an entity encoder (RLlib refused it); the
    # "flatten" type keeps RLlib's FC stack over the zero-padded block (1 + 3 x 2 floats).
    space = gym.spaces.Dict(
        {"r": Repeated(gym.spaces.Discrete(2), 3), "b": gym.spaces.Box(0, 1, (2,))}
    )
    m = ComplexInputNetwork(space, DISCRETE2, 2, {}, "c")
    assert sorted(m.entities) == ["1"] and sorted(m.flatten) == ["0"]
    flat = ComplexInputNetwork(space, DISCRETE2, 2, {"entity_encoder": {"type": "flatten"}}, "c")
    assert not flat.entities and flat.flatten_dims == {"0": 2, "1": 7}


# ----------------------------------------------------------------------------- ModelV2 API
class Recorder(ModelV2):
    """Single inheritance; records what forward sees."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.layer = nn.Linear(int(np.prod(obs_space.shape)), num_outputs)
        self.seen = None

    def forward(self, input_dict, state, seq_lens):
        self.seen = (input_dict, state, seq_lens)
        return self.layer(input_dict["obs_flat"]), []


class RLlibStyle(TorchModelV2, nn.Module):
    """RLlib's double-inheritance form, both __init__ calls."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.net = nn.Linear(obs_space.shape[0], num_outputs)
        self.vf = nn.Linear(obs_space.shape[0], 1)
        self._x = None

    def forward(self, input_dict, state, seq_lens):
        self._x = input_dict["obs"]
        return self.net(self._x), state

    def value_function(self):
        return self.vf(self._x).squeeze(1)


class RLlibStyleModuleFirst(TorchModelV2, nn.Module):
    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        nn.Module.__init__(self)
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.net = nn.Linear(obs_space.shape[0], num_outputs)

    def forward(self, input_dict, state, seq_lens):
        return self.net(input_dict["obs"]), state


@pytest.mark.parametrize("cls", [RLlibStyle, RLlibStyleModuleFirst])
def test_rllib_style_double_inheritance(cls):
    m = cls(gym.spaces.Box(-1, 1, (3,)), DISCRETE2, 2, {"fcnet_hiddens": [4]}, "rl")
    assert isinstance(m, nn.Module) and m.num_outputs == 2 and m.name == "rl"
    assert m.model_config["fcnet_hiddens"] == [4] and m.config.fcnet_hiddens == (4,)
    assert n_params(m) == lin(3, 2) + (lin(3, 1) if cls is RLlibStyle else 0)
    out, state = m({"obs": torch.randn(4, 3)})
    assert out.shape == (4, 2) and state == []
    if cls is RLlibStyle:
        assert m.value_function().shape == (4,)


def test_call_restores_nested_obs_and_flattens():
    space = gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2, 3)), "b": gym.spaces.Discrete(4)})
    prep = get_preprocessor(space)(space)
    m = Recorder(prep.observation_space, DISCRETE2, 2, {}, "r")
    flat = torch.rand(5, prep.size)
    m({"obs": flat})
    seen, _, _ = m.seen
    assert seen["obs_flat"] is flat
    assert seen["obs"]["a"].shape == (5, 2, 3) and seen["obs"]["b"].shape == (5, 4)
    torch.testing.assert_close(
        torch.cat([seen["obs"]["a"].reshape(5, -1), seen["obs"]["b"]], 1), flat
    )
    disabled = Recorder(
        prep.observation_space, DISCRETE2, 2, {"_disable_preprocessor_api": True}, "r"
    )
    disabled({"obs": flat})
    assert disabled.seen[0]["obs"] is flat


def test_call_obs_flat_for_images_numpy_input_and_state():
    m = Recorder(gym.spaces.Box(0, 1, (2, 3)), DISCRETE2, 2, {}, "r")
    obs = np.random.default_rng(0).random((4, 2, 3), dtype=np.float32)
    h = torch.zeros(4, 5)
    out, state = m({"obs": obs, "state_in_0": h, "seq_lens": torch.tensor([4])})
    seen, state_in, seq_lens = m.seen
    assert seen["obs"].shape == (4, 2, 3) and seen["obs_flat"].shape == (4, 6)
    assert state_in == [h] and state == [h]  # empty returned state -> input state
    assert seq_lens.tolist() == [4]
    assert m.last_output() is out


def test_call_validates_forward_results_and_input():
    class Bad(Recorder):
        def forward(self, input_dict, state, seq_lens):
            return self.layer(input_dict["obs_flat"])

    class BadState(Recorder):
        def forward(self, input_dict, state, seq_lens):
            return self.layer(input_dict["obs_flat"]), "h"

    for cls, msg in [(Bad, "must return \\(outputs, state_list\\)"), (BadState, "list of state")]:
        with pytest.raises(ValueError, match=msg):
            cls(gym.spaces.Box(0, 1, (2,)), DISCRETE2, 2, {}, "b")({"obs": torch.zeros(1, 2)})
    with pytest.raises(ValueError, match="expected an input dict"):
        Recorder(gym.spaces.Box(0, 1, (2,)), DISCRETE2, 2, {}, "b")(torch.zeros(1, 2))


def test_base_api_defaults():
    m = Recorder(gym.spaces.Box(0, 1, (2,)), DISCRETE2, 2, {"_time_major": True}, "r")
    assert m.is_time_major() and m.get_initial_state() == [] and m.metrics() == {}
    assert m.custom_loss("loss", {}) == "loss"
    assert len(m.variables()) == 2 and set(m.variables(as_dict=True)) == {
        "layer.weight",
        "layer.bias",
    }
    m.layer.bias.requires_grad_(False)
    assert m.trainable_variables() == [m.layer.weight]
    assert list(m.trainable_variables(as_dict=True)) == ["layer.weight"]
    assert not Recorder(gym.spaces.Box(0, 1, (2,)), DISCRETE2, 2, {}, "r").is_time_major()
    with pytest.raises(NotImplementedError):
        m.value_function()
    with pytest.raises(ValueError, match="unknown model config key"):
        Recorder(gym.spaces.Box(0, 1, (2,)), DISCRETE2, 2, {"fcnet_hidens": [3]}, "r")


def test_view_requirements_default():
    views = pytest.importorskip(
        "rlblocks.views", reason="rlblocks.views lands with the sequences work"
    )
    obs = gym.spaces.Box(0, 1, (2,))
    m = Recorder(obs, DISCRETE2, 2, {}, "r")
    reqs = m.view_requirements
    assert list(reqs) == ["obs"] and isinstance(reqs["obs"], views.ViewRequirement)
    assert reqs["obs"].space is obs
    reqs["prev_actions"] = views.ViewRequirement(data_col="actions", shift=-1)
    assert "prev_actions" in m.view_requirements


# ----------------------------------------------------------------------------- save / export
def _fc():
    return FullyConnectedNetwork(
        gym.spaces.Box(-1, 1, (4,)), DISCRETE2, 2, {"fcnet_hiddens": [16, 16]}, "fc"
    )


def _vision():
    return VisionNetwork(
        gym.spaces.Box(0, 1, (10, 10, 3)), DISCRETE2, 3, {"vf_share_layers": False}, "v"
    )


@pytest.mark.parametrize("make, shape", [(_fc, (5, 4)), (_vision, (2, 10, 10, 3))])
def test_state_dict_save_load_round_trip(make, shape):
    src, dst = make(), make()
    buffer = io.BytesIO()
    torch.save(src.state_dict(), buffer)
    buffer.seek(0)
    dst.load_state_dict(torch.load(buffer, weights_only=True))
    x = torch.rand(*shape)
    torch.testing.assert_close(dst({"obs": x})[0], src({"obs": x})[0])
    torch.testing.assert_close(dst.value_function(), src.value_function())


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch marks jit.trace deprecated
@pytest.mark.parametrize("make, shape", [(_fc, (5, 4)), (_vision, (2, 10, 10, 3))])
def test_jit_trace(make, shape):
    m = make()
    traced = torch.jit.trace(m.exportable(), torch.rand(*shape))
    x = torch.rand(*shape)
    out, value = traced(x)
    torch.testing.assert_close(out, m({"obs": x})[0])
    torch.testing.assert_close(value, m.value_function())


@pytest.mark.parametrize("make, shape", [(_fc, (5, 4)), (_vision, (2, 10, 10, 3))])
def test_torch_export(make, shape):
    m = make()
    x = torch.rand(*shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the value_function cache attributes
        exported = torch.export.export(m.exportable(), (x,))
    out, value = exported.module()(x)
    torch.testing.assert_close(out, m({"obs": x})[0])
    torch.testing.assert_close(value, m.value_function())


def test_torch_compile_small_fc():
    # dynamo traces the whole forward as one graph (no graph break); aot_eager runs that
    # graph through AOTAutograd without inductor's C++ code generation (torch's own part,
    # 20 s of compiling here)
    m = FullyConnectedNetwork(
        gym.spaces.Box(-1, 1, (3,)), DISCRETE2, 2, {"fcnet_hiddens": [4]}, "c"
    )
    compiled = torch.compile(m, backend="aot_eager", fullgraph=True)
    x = torch.rand(6, 3)
    out, state = compiled({"obs": x})
    assert state == []
    torch.testing.assert_close(out, m({"obs": x})[0])


# ----------------------------------------------------------------------------- benchmark smoke
def test_benchmark_runs_and_its_sequential_twins_match(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_models as bench

    rows = bench.run_case("fc", bench.build_fc, [1, 4], threads=1, min_time=0.001)
    assert [r.method for r in rows[:3]] == [
        "nn.Sequential",
        "rlblocks model(input_dict)",
        "rlblocks model + value_function",
    ]
    assert all(r.us_per_item > 0 for r in rows) and {r.batch for r in rows} == {1, 4}
    model, seq, shape = bench.build_vision()
    x = torch.rand(2, *shape)
    torch.testing.assert_close(seq(x), model({"obs": x})[0])
