"""GTrXL building blocks, GTrXLNet and AttentionWrapper: attention maths against a naive
loop, step-vs-sequence equivalence, padding invariance, a memory task and bad input."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks.models.attention import AttentionWrapper, GTrXLNet
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.models.gtrxl import GRUGate, RelativeMultiHeadAttention
from rlblocks.sequences import chop_into_sequences
from rlblocks.views import build_view_inputs
from wrapper_checks import check_catalog_wraps_default_model

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def naive_attention(att, inputs, memory, window):
    """Per query, per head: explicit Transformer-XL scores over the allowed keys."""
    b, t, _ = inputs.shape
    tau = memory.shape[1]
    h, d = att._num_heads, att._head_dim
    x = att._input_layernorm(torch.cat([memory, inputs], 1))
    q, k, v = torch.chunk(att._qkv_layer(x), 3, dim=-1)
    out = torch.zeros(b, t, h * d)
    for bi in range(b):
        for i in range(t):
            p = tau + i
            js = [j for j in range(tau + t) if 0 <= p - j <= window]
            for hi in range(h):
                qi = q[bi, p, hi * d : (hi + 1) * d]
                scores = []
                for j in js:
                    rel = att._pos_proj(att._rel_pos_embedding(window + 1)[p - j])
                    rel = rel[hi * d : (hi + 1) * d]
                    kj = k[bi, j, hi * d : (hi + 1) * d]
                    scores.append(
                        ((qi + att._uvar[hi]) @ kj + (qi + att._vvar[hi]) @ rel) / math.sqrt(d)
                    )
                w = torch.softmax(torch.stack(scores), 0)
                out[bi, i, hi * d : (hi + 1) * d] = sum(
                    wj * v[bi, j, hi * d : (hi + 1) * d] for wj, j in zip(w, js, strict=True)
                )
    return att._linear_layer(out)


@pytest.mark.parametrize("tau,window", [(3, 3), (4, 2), (0, 0), (2, 5)])
def test_relative_attention_matches_naive_loop(tau, window):
    torch.manual_seed(0)
    att = RelativeMultiHeadAttention(6, 5, num_heads=2, head_dim=3)
    x, mem = torch.randn(2, 4, 6), torch.randn(2, tau, 6)
    with torch.no_grad():
        torch.testing.assert_close(
            att(x, mem, window=window), naive_attention(att, x, mem, window), atol=1e-5, rtol=1e-5
        )


def test_gru_gate_bias_and_formula():
    torch.manual_seed(0)
    g = GRUGate(4, init_bias=2.0)
    assert torch.allclose(g._bias_z, torch.full((4,), 2.0))
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    r = torch.sigmoid(y @ g._w_r + x @ g._u_r)
    z = torch.sigmoid(y @ g._w_z + x @ g._u_z - 2.0)
    want = (1 - z) * x + z * torch.tanh(y @ g._w_h + (r * x) @ g._u_h)
    torch.testing.assert_close(g((x, y)), want)
    closed = GRUGate(4, init_bias=50.0)
    torch.testing.assert_close(closed((x, y)), x, atol=1e-6, rtol=0)


CFG = {
    "fcnet_hiddens": [8],
    "attention_dim": 8,
    "attention_num_heads": 2,
    "attention_head_dim": 4,
    "attention_memory_inference": 4,
    "attention_memory_training": 4,
    "attention_position_wise_mlp_dim": 8,
    "attention_num_transformer_units": 2,
    "max_seq_len": 5,
    "attention_use_n_prev_actions": 2,
    "attention_use_n_prev_rewards": 3,
}


def make_wrapper(action_space=None, seed=0, **cfg):
    action_space = action_space or gym.spaces.Discrete(3)
    torch.manual_seed(seed)
    return AttentionWrapper(
        OBS, action_space, 4, {**CFG, **cfg}, "att", wrapped_cls=FullyConnectedNetwork
    )


def episode_data(rng, n, action_space):
    eps = np.repeat(np.arange(5), [9, 3, 12, 1, 11])[:n]
    obs = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    acts = np.stack([action_space.sample() for _ in range(n)])
    rew = rng.normal(size=n).astype(np.float32)
    traj = {"obs": obs, "actions": acts, "rewards": rew, "eps_id": eps}
    return traj


@pytest.mark.parametrize(
    "action_space",
    [
        gym.spaces.Discrete(3),
        gym.spaces.MultiDiscrete([2, 2]),
        gym.spaces.Box(-1, 1, (2,), np.float32),
    ],
)
def test_step_by_step_equals_sequence_forward(action_space):
    rng = np.random.default_rng(0)
    action_space.seed(1)
    model = make_wrapper(action_space)
    traj = episode_data(rng, 36, action_space)
    views = build_view_inputs(
        traj, model.view_requirements, names=["obs", "prev_n_actions", "prev_n_rewards"]
    )
    eps = traj["eps_id"]
    n_units = 2
    outs, vals, newest, mem_in, mem_out = [], [], [], [[] for _ in range(n_units)], []
    with torch.no_grad():
        state = None
        for t in range(len(eps)):
            if t == 0 or eps[t] != eps[t - 1]:
                state = [s[None] for s in model.get_initial_state()]
            for i in range(n_units):
                mem_in[i].append(state[i][0])
            out, state = model(
                {k: torch.as_tensor(v[t : t + 1]) for k, v in views.items()},
                state,
                torch.tensor([1]),
            )
            outs.append(out[0])
            vals.append(model.value_function()[0])
            newest.append(torch.stack([s[0, -1] for s in state]))
            mem_out.append([s[0] for s in state])
        outs, vals, newest = torch.stack(outs), torch.stack(vals), torch.stack(newest)
        # Training memories from the trajectory view (state_out_i = newest memory row).
        traj_mem = {f"state_out_{i}": newest[:, i].numpy() for i in range(n_units)}
        mviews = build_view_inputs(
            traj_mem,
            model.view_requirements,
            names=[f"state_in_{i}" for i in range(n_units)],
            episode_ids=eps,
        )
        for i in range(n_units):
            np.testing.assert_allclose(mviews[f"state_in_{i}"], torch.stack(mem_in[i]).numpy())
        feats, states, lens = chop_into_sequences(
            feature_columns=[views["obs"], views["prev_n_actions"], views["prev_n_rewards"]],
            state_columns=[mviews[f"state_in_{i}"] for i in range(n_units)],
            episode_ids=eps,
            max_seq_len=5,
            dynamic_max=False,
        )
        assert len(set(lens.tolist())) > 1
        out, new_state = model(
            {
                "obs": torch.from_numpy(feats[0]),
                "prev_n_actions": torch.from_numpy(feats[1]),
                "prev_n_rewards": torch.from_numpy(feats[2]),
            },
            [torch.from_numpy(s) for s in states],
            torch.from_numpy(lens),
        )
        v = model.value_function()
    valid = (np.arange(5)[None, :] < lens[:, None]).reshape(-1)
    torch.testing.assert_close(out[valid], outs, atol=1e-5, rtol=0)
    torch.testing.assert_close(v[valid], vals, atol=1e-5, rtol=0)
    assert (out[~valid] == 0).all() and (v[~valid] == 0).all()
    ends = np.cumsum(lens) - 1
    for i in range(n_units):
        want = torch.stack([mem_out[e][i] for e in ends])
        torch.testing.assert_close(new_state[i], want, atol=1e-5, rtol=0)


def test_padding_changes_nothing():
    rng = np.random.default_rng(3)
    model = make_wrapper(attention_use_n_prev_actions=0, attention_use_n_prev_rewards=0)
    obs = rng.uniform(-1, 1, (20, 3)).astype(np.float32)
    eps = np.repeat([0, 1, 2], [7, 6, 7])
    mem = rng.normal(size=(20, 4, 8)).astype(np.float32)
    results = []
    for extra in (0, 3):
        (o,), (m0, m1), lens = chop_into_sequences(
            feature_columns=[obs],
            state_columns=[mem, mem * 2],
            episode_ids=eps,
            max_seq_len=5,
            _extra_padding=extra,
        )
        t = o.shape[0] // len(lens)
        valid = torch.from_numpy((np.arange(t)[None, :] < lens[:, None]).reshape(-1))
        with torch.no_grad():
            out, st = model(
                {"obs": torch.from_numpy(o)},
                [torch.from_numpy(m0), torch.from_numpy(m1)],
                torch.from_numpy(lens),
            )
        results.append((out[valid], model.value_function()[valid], st))
    (o1, v1, s1), (o2, v2, s2) = results
    torch.testing.assert_close(o1, o2, atol=1e-6, rtol=0)
    torch.testing.assert_close(v1, v2, atol=1e-6, rtol=0)
    for a, b in zip(s1, s2, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_learns_to_recall_observation_k_steps_back():
    k, n_sym, t_len, batch = 5, 4, 12, 32
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    space = gym.spaces.Box(0.0, 1.0, (n_sym,), np.float32)
    cfg = {
        "fcnet_hiddens": [16],
        "attention_dim": 32,
        "attention_num_heads": 2,
        "attention_head_dim": 16,
        "attention_memory_inference": 8,
        "attention_memory_training": 8,
        "attention_position_wise_mlp_dim": 32,
        "max_seq_len": t_len,
    }
    model = AttentionWrapper(
        space, gym.spaces.Discrete(n_sym), n_sym, cfg, "mem", wrapped_cls=FullyConnectedNetwork
    )
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    def batch_data():
        sym = rng.integers(0, n_sym, (batch, t_len))
        obs = np.eye(n_sym, dtype=np.float32)[sym].reshape(-1, n_sym)
        return torch.from_numpy(obs), torch.from_numpy(sym[:, :-k].copy())

    state0 = [s.expand(batch, -1, -1) for s in model.get_initial_state()]
    lens = torch.full((batch,), t_len)
    for _ in range(400):
        obs, target = batch_data()
        out, _ = model({"obs": obs}, state0, lens)
        logits = out.reshape(batch, t_len, n_sym)[:, k:]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, n_sym), target.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (logits.argmax(-1) == target).float().mean().item() > 0.99:
            break
    with torch.no_grad():
        obs, target = batch_data()
        out, _ = model({"obs": obs}, state0, lens)
        acc = (out.reshape(batch, t_len, n_sym)[:, k:].argmax(-1) == target).float().mean().item()
    assert acc > 0.95, acc


def test_gtrxlnet_own_heads_and_views():
    torch.manual_seed(0)
    net = GTrXLNet(
        OBS,
        gym.spaces.Discrete(2),
        3,
        {"max_seq_len": 7},
        "g",
        num_transformer_units=2,
        attention_dim=8,
        num_heads=2,
        head_dim=4,
        memory_inference=3,
        memory_training=6,
        position_wise_mlp_dim=8,
    )
    vr = net.view_requirements["state_in_1"]
    assert vr.data_col == "state_out_1" and vr.shift_arr.tolist() == list(range(-6, 0))
    assert vr.batch_repeat_value == 7 and vr.space.shape == (8,)
    state = [s[None].expand(2, -1, -1) for s in net.get_initial_state()]
    assert state[0].shape == (2, 3, 8)
    out, new = net({"obs": torch.randn(4, 3)}, state, torch.tensor([2, 2]))
    assert out.shape == (4, 3)
    with torch.no_grad():  # linear logits (difference 18): RLlib's ReLU would give 0 here
        net.logits._model[0].weight.zero_()
        net.logits._model[0].bias.fill_(-1.0)
        linear_out, _ = net({"obs": torch.randn(4, 3)}, state, torch.tensor([2, 2]))
    assert (linear_out == -1.0).all()
    assert net.value_function().shape == (4,) and new[1].shape == (2, 3, 8)
    with torch.no_grad():
        net.values_out._model[0].bias.fill_(1.0)  # padded rows must still give 0
        out, _ = net({"obs": torch.randn(4, 3)}, state, torch.tensor([2, 1]))
    assert (out[3] == 0).all() and net.value_function()[3] == 0
    assert (net.value_function()[:3] != 0).all()
    feat_net = GTrXLNet(
        OBS,
        gym.spaces.Discrete(2),
        None,
        {},
        "g",
        attention_dim=8,
        head_dim=4,
        memory_inference=2,
        position_wise_mlp_dim=4,
    )
    assert feat_net.num_outputs == 8
    with pytest.raises(ValueError, match="call forward"):
        feat_net.value_function()


def test_bad_input_raises():
    model = make_wrapper()
    state = [s[None].expand(2, -1, -1) for s in model.get_initial_state()]
    d = {
        "obs": torch.zeros(4, 3),
        "prev_n_actions": torch.zeros(4, 2, dtype=torch.long),
        "prev_n_rewards": torch.zeros(4, 3),
    }
    with pytest.raises(ValueError, match="seq_lens are required"):
        model(d, state, None)
    with pytest.raises(ValueError, match=r"seq_lens must be in \[0, T=2\]"):
        model(d, state, torch.tensor([3, 1]))
    with pytest.raises(ValueError, match="expected 2 memory tensors"):
        model(d, state[:1], torch.tensor([2, 2]))
    with pytest.raises(ValueError, match=r"state\[0\] must be \[B=2, memory, 8\]"):
        model(d, [s[:1] for s in state], torch.tensor([2, 2]))
    with pytest.raises(ValueError, match="prev_n_actions must be"):
        model(
            dict(d, prev_n_actions=torch.zeros(4, 3, dtype=torch.long)), state, torch.tensor([2, 2])
        )
    with pytest.raises(ValueError, match="lacks 'prev_n_rewards'"):
        model({k: v for k, v in d.items() if k != "prev_n_rewards"}, state, torch.tensor([2, 2]))
    with pytest.raises(ValueError, match="head_dim must be >= 1"):
        GTrXLNet(OBS, gym.spaces.Discrete(2), 2, {}, "g", head_dim=0)
    with pytest.raises(ValueError, match="1-D Box"):
        GTrXLNet(gym.spaces.Box(0, 1, (2, 2)), gym.spaces.Discrete(2), 2, {}, "g")


CATALOG_CFG = {
    "use_attention": True,
    "fcnet_hiddens": [8],
    "attention_dim": 8,
    "attention_head_dim": 4,
    "attention_memory_inference": 3,
    "attention_memory_training": 3,
    "attention_position_wise_mlp_dim": 8,
}
WRAPPER = AttentionWrapper


@pytest.mark.parametrize("kind", ["fc", "vision", "complex"])
def test_catalog_wraps_default_models(kind):
    check_catalog_wraps_default_model(kind, CATALOG_CFG, WRAPPER)
