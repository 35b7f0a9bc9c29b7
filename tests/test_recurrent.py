"""RecurrentNetwork / LSTMWrapper: step-vs-sequence equivalence, padding invariance,
a supervised memory task, TorchScript export and bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.models.recurrent import LSTMWrapper, RecurrentNetwork
from rlblocks.sequences import chop_into_sequences
from wrapper_checks import check_catalog_wraps_default_model

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def make_lstm(action_space=None, seed=0, **cfg):
    action_space = action_space or gym.spaces.Discrete(3)
    torch.manual_seed(seed)
    config = {
        "fcnet_hiddens": [8],
        "lstm_cell_size": 6,
        "lstm_use_prev_action": True,
        "lstm_use_prev_reward": True,
        **cfg,
    }
    return LSTMWrapper(OBS, action_space, 4, config, "lstm", wrapped_cls=FullyConnectedNetwork)


def trajectory(rng, n, action_space):
    eps = np.repeat(np.arange(6), rng.multinomial(n - 6, [1 / 6] * 6) + 1)[:n]
    obs = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    acts = np.stack([action_space.sample() for _ in range(n)])
    rew = rng.normal(size=n).astype(np.float32)
    return eps, obs, acts, rew


def run_steps(model, eps, obs, prev_a, prev_r):
    """Inference one step at a time, state reset at episode starts."""
    outs, vals, h_in, c_in, h_out, c_out = [], [], [], [], [], []
    state = None
    for t in range(len(eps)):
        if t == 0 or eps[t] != eps[t - 1]:
            state = [s[None] for s in model.get_initial_state()]
        h_in.append(state[0][0])
        c_in.append(state[1][0])
        out, state = model(
            {
                "obs": torch.from_numpy(obs[t : t + 1]),
                "prev_actions": torch.as_tensor(prev_a[t : t + 1]),
                "prev_rewards": torch.from_numpy(prev_r[t : t + 1]),
            },
            state,
            torch.tensor([1]),
        )
        outs.append(out[0])
        vals.append(model.value_function()[0])
        h_out.append(state[0][0])
        c_out.append(state[1][0])
    st = torch.stack
    return st(outs), st(vals), st(h_in), st(c_in), st(h_out), st(c_out)


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize(
    "action_space",
    [
        gym.spaces.Discrete(3),
        gym.spaces.MultiDiscrete([2, 3]),
        gym.spaces.Box(-1, 1, (2,), np.float32),
    ],
)
def test_step_by_step_equals_sequence_forward(time_major, action_space):
    rng = np.random.default_rng(1)
    model = make_lstm(action_space, _time_major=time_major)
    action_space.seed(0)
    eps, obs, acts, rew = trajectory(rng, 40, action_space)
    prev_a = np.concatenate([np.zeros_like(acts[:1]), acts[:-1]])
    prev_r = np.concatenate([[0.0], rew[:-1]]).astype(np.float32)
    starts = np.flatnonzero(np.r_[True, eps[1:] != eps[:-1]])
    prev_a[starts] = 0
    prev_r[starts] = 0
    with torch.no_grad():
        outs, vals, h_in, c_in, h_out, c_out = run_steps(model, eps, obs, prev_a, prev_r)
        (o, pa, pr), (h0, c0), lens = chop_into_sequences(
            feature_columns=[obs, prev_a, prev_r],
            state_columns=[h_in.numpy(), c_in.numpy()],
            episode_ids=eps,
            max_seq_len=5,
        )
        assert len(set(lens.tolist())) > 1  # sequences of different lengths, padded
        out, (h, c) = model(
            {
                "obs": torch.from_numpy(o),
                "prev_actions": torch.from_numpy(pa),
                "prev_rewards": torch.from_numpy(pr),
            },
            [torch.from_numpy(h0), torch.from_numpy(c0)],
            torch.from_numpy(lens),
        )
        v = model.value_function()
    t = o.shape[0] // len(lens)
    valid = (np.arange(t)[None, :] < lens[:, None]).reshape(-1)
    torch.testing.assert_close(out[valid], outs, atol=1e-5, rtol=0)
    torch.testing.assert_close(v[valid], vals, atol=1e-5, rtol=0)
    assert (out[~valid] == 0).all() and (v[~valid] == 0).all()
    ends = np.cumsum(lens) - 1
    torch.testing.assert_close(h, h_out[ends], atol=1e-5, rtol=0)
    torch.testing.assert_close(c, c_out[ends], atol=1e-5, rtol=0)


def test_padding_changes_nothing():
    rng = np.random.default_rng(2)
    model = make_lstm()
    eps, obs, acts, rew = trajectory(rng, 30, gym.spaces.Discrete(3))
    h0 = rng.normal(size=(30, 6)).astype(np.float32)
    results = []
    for extra in (0, 4):
        (o, pa, pr), (h, c), lens = chop_into_sequences(
            feature_columns=[obs, acts, rew],
            state_columns=[h0, h0 * 0.5],
            episode_ids=eps,
            max_seq_len=4,
            _extra_padding=extra,
        )
        with torch.no_grad():
            out, state = model(
                {
                    "obs": torch.from_numpy(o),
                    "prev_actions": torch.from_numpy(pa),
                    "prev_rewards": torch.from_numpy(pr),
                },
                [torch.from_numpy(h), torch.from_numpy(c)],
                torch.from_numpy(lens),
            )
            t = o.shape[0] // len(lens)
            valid = torch.from_numpy((np.arange(t)[None, :] < lens[:, None]).reshape(-1))
            results.append((out[valid], model.value_function()[valid], state))
    (o1, v1, s1), (o2, v2, s2) = results
    torch.testing.assert_close(o1, o2, atol=1e-6, rtol=0)
    torch.testing.assert_close(v1, v2, atol=1e-6, rtol=0)
    for a, b in zip(s1, s2, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_zero_length_sequence_keeps_its_state():
    model = make_lstm(lstm_use_prev_action=False, lstm_use_prev_reward=False)
    h0 = torch.randn(2, 6)
    c0 = torch.randn(2, 6)
    with torch.no_grad():
        for t in (1, 3):
            out, (h, c) = model({"obs": torch.randn(2 * t, 3)}, [h0, c0], torch.tensor([t, 0]))
            torch.testing.assert_close(h[1], h0[1])
            torch.testing.assert_close(c[1], c0[1])
            assert (out.reshape(2, t, -1)[1] == 0).all()


def test_learns_to_recall_observation_k_steps_back():
    k, n_sym, t_len, batch = 5, 4, 12, 32
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    space = gym.spaces.Box(0.0, 1.0, (n_sym,), np.float32)
    model = LSTMWrapper(
        space,
        gym.spaces.Discrete(n_sym),
        n_sym,
        {"fcnet_hiddens": [16], "lstm_cell_size": 32},
        "mem",
        wrapped_cls=FullyConnectedNetwork,
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def batch_data():
        sym = rng.integers(0, n_sym, (batch, t_len))
        obs = np.eye(n_sym, dtype=np.float32)[sym].reshape(-1, n_sym)
        return torch.from_numpy(obs), torch.from_numpy(sym[:, :-k].copy())

    state0 = [s.expand(batch, -1) for s in model.get_initial_state()]
    lens = torch.full((batch,), t_len)
    acc = 0.0
    for _ in range(400):
        obs, target = batch_data()
        out, _ = model({"obs": obs}, state0, lens)
        logits = out.reshape(batch, t_len, n_sym)[:, k:]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, n_sym), target.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        acc = (logits.argmax(-1) == target).float().mean().item()
        if acc > 0.99:
            break
    with torch.no_grad():
        obs, target = batch_data()
        out, _ = model({"obs": obs}, state0, lens)
        acc = (out.reshape(batch, t_len, n_sym)[:, k:].argmax(-1) == target).float().mean().item()
    assert acc > 0.95, acc


class _Export(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, obs, prev_a, prev_r, h, c):
        lens = torch.ones(obs.shape[0], dtype=torch.int64)
        out, (h2, c2) = self.model(
            {"obs": obs, "prev_actions": prev_a, "prev_rewards": prev_r}, [h, c], lens
        )
        return out, self.model.value_function(), h2, c2


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_lstm_wrapped_fc_exports_with_state_in_and_out():
    model = make_lstm()
    model.eval()
    exp = _Export(model)

    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        return (
            torch.rand(5, 3, generator=g),
            torch.randint(0, 3, (5,), generator=g),
            torch.rand(5, generator=g),
            torch.randn(5, 6, generator=g),
            torch.randn(5, 6, generator=g),
        )

    with torch.no_grad():
        traced = torch.jit.trace(exp, inputs(0))
        for seed in (1, 2):
            for a, b in zip(traced(*inputs(seed)), exp(*inputs(seed)), strict=True):
                torch.testing.assert_close(a, b)
        # Carry state through the traced module: same as eager.
        x = inputs(3)
        _, _, h, c = traced(*x)
        out_t = traced(x[0], x[1], x[2], h, c)[0]
        _, _, h, c = exp(*x)
        torch.testing.assert_close(out_t, exp(x[0], x[1], x[2], h, c)[0])


class _CumsumRNN(RecurrentNetwork):
    def forward_rnn(self, inputs, state, seq_lens):
        axis = 0 if self.is_time_major() else 1
        out = inputs.cumsum(axis) + (state[0][None] if axis == 0 else state[0][:, None])
        last = out.select(axis, -1)
        return out, [last]

    def get_initial_state(self):
        return [torch.zeros(2)]


@pytest.mark.parametrize("time_major", [False, True])
def test_custom_recurrent_network_rows_keep_input_order(time_major):
    m = _CumsumRNN(
        gym.spaces.Box(-9, 9, (2,)), gym.spaces.Discrete(2), 2, {"_time_major": time_major}, "c"
    )
    x = torch.arange(12.0).reshape(6, 2)
    out, _ = m({"obs": x}, [torch.zeros(2, 2)], torch.tensor([3, 3]))
    want = torch.cat([x[:3].cumsum(0), x[3:].cumsum(0)])
    torch.testing.assert_close(out, want)
    with pytest.raises(NotImplementedError):
        RecurrentNetwork(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), 2, {}, "r")(
            {"obs": x}, [], torch.tensor([6])
        )


def test_bad_input_raises():
    model = make_lstm()
    h = [s.expand(2, -1) for s in model.get_initial_state()]
    d = {
        "obs": torch.zeros(6, 3),
        "prev_actions": torch.zeros(6, dtype=torch.long),
        "prev_rewards": torch.zeros(6),
    }
    with pytest.raises(ValueError, match="seq_lens are required"):
        model.forward(dict(d, obs_flat=d["obs"]), h, None)
    with pytest.raises(ValueError, match=r"seq_lens must be in \[0, T=3\]"):
        model(d, h, torch.tensor([4, 2]))
    with pytest.raises(ValueError, match="do not split"):
        model(d, h, torch.tensor([1, 1, 1, 1]))
    with pytest.raises(ValueError, match="integers"):
        model(d, h, torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"state h must be \[B=2, 6\]"):
        model(d, [torch.zeros(3, 6), torch.zeros(3, 6)], torch.tensor([3, 3]))
    with pytest.raises(ValueError, match="prev_actions"):
        model({"obs": torch.zeros(6, 3), "prev_rewards": torch.zeros(6)}, h, torch.tensor([3, 3]))
    with pytest.raises(ValueError, match="prev_rewards"):
        model(dict(d, prev_rewards=torch.zeros(5)), h, torch.tensor([3, 3]))
    with pytest.raises(ValueError, match="wrapped_cls"):
        LSTMWrapper(OBS, gym.spaces.Discrete(2), 2, {}, "x")
    with pytest.raises(ValueError, match="Discrete, MultiDiscrete, Box"):
        make_lstm(gym.spaces.Tuple([gym.spaces.Discrete(2)]))


def test_view_requirements():
    vr = make_lstm().view_requirements
    assert vr["prev_actions"].data_col == "actions" and vr["prev_actions"].shift == -1
    assert vr["prev_rewards"].data_col == "rewards" and vr["prev_rewards"].shift == -1
    assert vr["state_in_0"].shift_from is None and vr["state_in_1"].data_col == "state_out_1"


CATALOG_CFG = {"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [8]}
WRAPPER = LSTMWrapper


@pytest.mark.parametrize("kind", ["fc", "vision", "complex"])
def test_catalog_wraps_default_models(kind):
    check_catalog_wraps_default_model(kind, CATALOG_CFG, WRAPPER)


def test_lstm_wrapped_fc_torch_export_with_state_in_and_out():
    model = make_lstm()
    model.eval()
    exp = _Export(model)
    g = torch.Generator().manual_seed(0)

    def inputs():
        return (
            torch.rand(5, 3, generator=g),
            torch.randint(0, 3, (5,), generator=g),
            torch.rand(5, generator=g),
            torch.randn(5, 6, generator=g),
            torch.randn(5, 6, generator=g),
        )

    program = torch.export.export(exp, inputs())
    exported = program.module()
    with torch.no_grad():
        x = inputs()
        for a, b in zip(exported(*x), exp(*x), strict=True):
            torch.testing.assert_close(a, b)
        _, _, h, c = exported(*x)
        torch.testing.assert_close(
            exported(x[0], x[1], x[2], h, c)[0], exp(x[0], x[1], x[2], *exp(*x)[2:])[0]
        )
