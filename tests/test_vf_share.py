"""``vf_share_layers`` (difference 25): with False, no value gradient reaches a policy layer in
any default model (FC, vision, ComplexInputNetwork, LSTM and attention wrappers); with True
the value loss moves shared layers; PPO / APPO / IMPALA default to separate value layers."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks import get_preprocessor
from rlblocks.catalog import ModelCatalog
from rlblocks.compat.rllib import load_rllib_state_dict
from rlblocks.config import MODEL_DEFAULTS, ModelConfig, algorithm_model_config
from rlblocks.models import ComplexInputNetwork, FullyConnectedNetwork, VisionNetwork
from rlblocks.models.attention import AttentionWrapper
from rlblocks.models.recurrent import LSTMWrapper
from rlblocks.train import PPOConfig, PPOTrainer

DISCRETE3 = gym.spaces.Discrete(3)
IMAGE = gym.spaces.Box(0.0, 1.0, (7, 7, 3), np.float32)
RANK2 = gym.spaces.Box(-1.0, 1.0, (3, 4), np.float32)
NESTED = gym.spaces.Dict(
    {
        "img": gym.spaces.Box(0.0, 1.0, (6, 6, 2), np.float32),
        "kind": gym.spaces.Discrete(4),
        "pos": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    }
)
FLAT = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
SMALL = {"fcnet_hiddens": [8, 8], "post_fcnet_hiddens": [6], "conv_filters": None}
LSTM = {
    "fcnet_hiddens": [8],
    "use_lstm": True,
    "lstm_cell_size": 6,
    "max_seq_len": 4,
    "lstm_use_prev_action": True,
}
ATTENTION = {
    "fcnet_hiddens": [8],
    "use_attention": True,
    "attention_dim": 8,
    "attention_head_dim": 4,
    "attention_num_heads": 2,
    "attention_memory_inference": 3,
    "attention_memory_training": 3,
    "attention_position_wise_mlp_dim": 8,
    "max_seq_len": 4,
    "attention_use_n_prev_actions": 2,
}

# (case, observation space, model config, the class the catalog must pick)
CASES = [
    ("fc", FLAT, {"fcnet_hiddens": [8, 8]}, FullyConnectedNetwork),
    ("vision", IMAGE, {}, VisionNetwork),
    ("vision_post_fc", IMAGE, {"post_fcnet_hiddens": [5]}, VisionNetwork),
    ("complex_rank2_box", RANK2, SMALL, ComplexInputNetwork),
    ("complex_dict", NESTED, SMALL, ComplexInputNetwork),
    ("lstm_fc", FLAT, LSTM, LSTMWrapper),
    ("lstm_vision", IMAGE, {**LSTM, "lstm_use_prev_action": False}, LSTMWrapper),
    ("attention_fc", FLAT, ATTENTION, AttentionWrapper),
    ("attention_complex", NESTED, ATTENTION, AttentionWrapper),
]


def build(space: gym.Space, config: dict, share: bool):
    prep = get_preprocessor(space)(space)
    cfg = {**config, "vf_share_layers": share}
    return ModelCatalog.get_model_v2(prep.observation_space, DISCRETE3, 3, cfg), prep


def run(model, prep, space: gym.Space, seed: int = 0):
    """One forward pass on 2 sequences of 4 steps: ``(logits, values)``."""
    space.seed(seed)
    rows = 8
    obs = torch.from_numpy(prep.transform_batch([space.sample() for _ in range(rows)]))
    input_dict = {
        "obs": obs,
        "prev_actions": torch.tensor([0, 1, 2, 0, 1, 2, 0, 1]),
        "prev_n_actions": torch.tensor([[0, 1], [1, 2]] * 4),
        "prev_rewards": torch.ones(rows),
    }
    state = [torch.randn(2, *s.shape) for s in model.get_initial_state()]
    out, _ = model(input_dict, state, torch.tensor([4, 3]) if state else None)
    return out, model.value_function()


def grads(model, loss: torch.Tensor) -> dict[str, torch.Tensor | None]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {name: p.grad for name, p in model.named_parameters()}


def is_value_param(name: str) -> bool:
    return "value" in name  # _value_branch(_separate), value_layer, value_trunk.*


@pytest.mark.parametrize("case, space, config, cls", CASES, ids=[c[0] for c in CASES])
def test_separate_value_layers_get_no_policy_gradient(case, space, config, cls):
    torch.manual_seed(0)
    model, prep = build(space, config, share=False)
    assert isinstance(model, cls)
    out, value = run(model, prep, space)
    value_grads = grads(model, (value - 1.0).pow(2).sum())
    out, value = run(model, prep, space)
    policy_grads = grads(model, (out * torch.randn_like(out)).sum())

    policy = [n for n, _ in model.named_parameters() if not is_value_param(n)]
    assert policy
    for name in policy:
        g = value_grads[name]
        assert g is None or not g.any(), f"{case}: the value loss reaches policy layer {name}"
    # the policy parameters are what the logits are made of ...
    reached = [n for n in policy if policy_grads[n] is not None and policy_grads[n].any()]
    assert len(reached) >= 0.9 * len(policy), sorted(set(policy) - set(reached))
    # ... and the value function learns through layers of its own
    own = [n for n, g in value_grads.items() if g is not None and g.any()]
    assert any(n.endswith("weight") and "value_trunk" in n or "_separate" in n for n in own)
    assert all(policy_grads[n] is None or not policy_grads[n].any() for n in own)


@pytest.mark.parametrize("case, space, config, cls", CASES, ids=[c[0] for c in CASES])
def test_shared_layers_get_value_gradient(case, space, config, cls):
    torch.manual_seed(0)
    model, prep = build(space, config, share=True)
    assert not any(
        "value_trunk" in n or "_separate" in n
        for n, _ in model.named_parameters()
        if not n.startswith("wrapped.")
    )
    out, value = run(model, prep, space)
    value_grads = grads(model, (value - 1.0).pow(2).sum())
    shared = [
        n for n, g in value_grads.items() if not is_value_param(n) and g is not None and g.any()
    ]
    assert shared, f"{case}: with vf_share_layers=True the value loss must move shared layers"


@pytest.mark.parametrize("config, n_share, n_separate", [(LSTM, 2, 4), (ATTENTION, 1, 2)])
def test_recurrent_state_has_the_value_path(config, n_share, n_separate):
    shared, _ = build(FLAT, config, share=True)
    separate, prep = build(FLAT, config, share=False)
    assert len(shared.get_initial_state()) == n_share
    assert len(separate.get_initial_state()) == n_separate
    assert {f"state_in_{i}" for i in range(n_separate)} <= set(separate.view_requirements)
    # the policy's state does not depend on the value path's
    state = [torch.randn(2, *s.shape) for s in separate.get_initial_state()]
    obs = torch.from_numpy(prep.transform_batch([FLAT.sample() for _ in range(8)]))
    extra = {
        "prev_actions": torch.zeros(8, dtype=torch.long),
        "prev_n_actions": torch.zeros(8, 2, dtype=torch.long),
    }
    out_a, st_a = separate({"obs": obs, **extra}, state, torch.tensor([4, 4]))
    other = state[:n_share] + [torch.randn_like(s) for s in state[n_share:]]
    out_b, st_b = separate({"obs": obs, **extra}, other, torch.tensor([4, 4]))
    torch.testing.assert_close(out_a, out_b)
    for a, b in zip(st_a[:n_share], st_b[:n_share], strict=True):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="state"):
        separate({"obs": obs, **extra}, state[:n_share], torch.tensor([4, 4]))


def test_copied_value_path_equals_the_shared_model():
    """RLlib weights (one shared trunk) load into a separate-value model as two copies (the
    LSTM case: the RLlib fixture in test_rllib_import.py)."""
    torch.manual_seed(1)
    for space, config in ((RANK2, SMALL), (NESTED, SMALL)):
        shared, prep = build(space, config, share=True)
        separate, _ = build(space, config, share=False)
        load_rllib_state_dict(separate, shared.state_dict())
        torch.manual_seed(2)
        out_a, v_a = run(shared, prep, space)
        torch.manual_seed(2)
        out_b, v_b = run(separate, prep, space)
        torch.testing.assert_close(out_a, out_b)
        torch.testing.assert_close(v_a, v_b)


# --- the algorithm defaults -------------------------------------------------------------------
def test_model_defaults_stay_rllib():
    assert MODEL_DEFAULTS["vf_share_layers"] is True
    assert ModelConfig.from_dict({}).vf_share_layers is True


@pytest.mark.parametrize("algo", ["PPO", "APPO", "IMPALA", "ppo"])
def test_actor_critic_algorithms_default_to_separate_layers(algo):
    cfg = algorithm_model_config({"fcnet_hiddens": [64, 64]}, algo)
    assert cfg == {"fcnet_hiddens": [64, 64], "vf_share_layers": False}
    assert algorithm_model_config({"vf_share_layers": True}, algo)["vf_share_layers"] is True


@pytest.mark.parametrize("algo", ["DQN", "SAC"])
def test_q_learning_algorithms_are_unaffected(algo):
    assert algorithm_model_config({"fcnet_hiddens": [8]}, algo) == {"fcnet_hiddens": [8]}


def test_native_ppo_default_is_separate():
    assert PPOConfig.from_dict({"env": "CartPole-v1"}).model_config().vf_share_layers is False
    cfg = PPOConfig.from_dict({"env": "CartPole-v1", "model": {"vf_share_layers": True}})
    assert cfg.model_config().vf_share_layers is True


@pytest.mark.ray
def test_rl_module_spec_default_is_separate():
    from rlblocks.rllib import rl_module_spec

    for algo in ("PPO", "APPO", "IMPALA"):
        spec = rl_module_spec({"fcnet_hiddens": [64, 64]}, algo=algo)
        assert spec.model_config["vf_share_layers"] is False
        shared = rl_module_spec({"fcnet_hiddens": [64], "vf_share_layers": True}, algo=algo)
        assert shared.model_config["vf_share_layers"] is True
    assert rl_module_spec({"fcnet_hiddens": [8]}, algo="DQN").model_config["vf_share_layers"]


# --- learning: a contextual bandit with a rank-2 Box observation (ComplexInputNetwork) -------
class Rank2Bandit(gym.Env):
    """Box(-1, 1, (3, 4)) observations whose sign (under noise) says which of 2 actions pays 1;
    one step per episode, so a random policy's return is 0.5."""

    observation_space = RANK2
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict | None = None):
        self._context = 0

    def _obs(self) -> np.ndarray:
        sign = 1.0 if self._context else -1.0
        noise = self.np_random.uniform(-0.4, 0.4, (3, 4))
        return np.clip(0.5 * sign + noise, -1.0, 1.0).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._context = int(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == self._context)
        self._context = int(self.np_random.integers(2))
        return self._obs(), reward, True, False, {}


def test_rank2_box_bandit_learns_with_default_model(tmp_path):
    config = {
        "env": Rank2Bandit,
        "num_envs": 4,
        "train_batch_size": 256,
        "sgd_minibatch_size": 64,
        "num_sgd_iter": 4,
        "lr": 1e-3,
        "seed": 5,
    }
    trainer = PPOTrainer(config, run_dir=tmp_path / "run")
    try:
        assert isinstance(trainer.model, ComplexInputNetwork)
        assert trainer.model.value_trunk is not None  # the PPO default: separate layers
        for _ in range(8):
            metrics = trainer.train()
    finally:
        trainer.runner.close()
    assert metrics["episode_return_mean"] > 0.8, metrics["episode_return_mean"]
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["model"].get("conv_filters") is None  # no image here
