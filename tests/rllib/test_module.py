"""RLBlocksRLModule: the same numbers as the rlblocks model it wraps, RLlib's state columns,
masks, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from gymnasium.spaces import Box, Dict, Discrete, MultiDiscrete, Tuple  # noqa: E402
from ray.rllib.core.columns import Columns  # noqa: E402
from rlblocks import ModelCatalog, get_preprocessor  # noqa: E402
from rlblocks.compat.rllib import load_rllib_state_dict  # noqa: E402
from rlblocks.distributions import FLOAT_MIN, MaskedCategorical  # noqa: E402
from rlblocks.models import ComplexInputNetwork, FullyConnectedNetwork, ModelV2  # noqa: E402
from rlblocks.models.visionnet import VisionNetwork  # noqa: E402
from rlblocks.rllib import (  # noqa: E402
    FlattenObservationsBatched,
    RLBlocksAPPORLModule,
    RLBlocksRLModule,
    rl_module_spec,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rllib"


def build(
    obs_space: gym.Space, action_space: gym.Space, config: dict | None = None, appo: bool = False
) -> RLBlocksRLModule:
    spec = rl_module_spec(config, appo=appo)
    spec.observation_space, spec.action_space = obs_space, action_space
    return spec.build()


def twin(module: RLBlocksRLModule, obs_space: gym.Space, config: dict) -> ModelV2:
    """The rlblocks model for the same config, holding the module's weights."""
    # the module's own config: rl_module_spec adds PPO's vf_share_layers=False (difference 25)
    config = {**config, "vf_share_layers": module.rlblocks_config.vf_share_layers}
    _, n = ModelCatalog.get_action_dist(module.action_space, config)
    model = ModelCatalog.get_model_v2(obs_space, module.action_space, n, config)
    model.load_state_dict(module.model.state_dict())
    return model


def flat_space(space: gym.Space) -> gym.Space:
    return FlattenObservationsBatched(space, None).observation_space


@pytest.mark.parametrize("case", ["fc", "complex", "vision"])
def test_forward_equals_the_rlblocks_model(case):
    torch.manual_seed(0)
    if case == "fc":
        env_space, config = Box(-1, 1, (7,)), {"fcnet_hiddens": [16, 8]}
    elif case == "complex":
        env_space = Dict(
            {
                "img": Box(0, 1, (10, 10, 3)),
                "kind": Discrete(3),
                "pos": Tuple((Box(-1, 1, (2,)), MultiDiscrete([2, 3]))),
            }
        )
        config = {"conv_filters": [[4, [3, 3], 2], [8, [5, 5], 1]], "fcnet_hiddens": [16]}
    else:
        env_space, config = Box(0, 1, (42, 42, 3)), {}
    obs_space = flat_space(env_space)
    module = build(obs_space, Discrete(4), config)
    expected_cls = {
        "fc": FullyConnectedNetwork,
        "complex": ComplexInputNetwork,
        "vision": VisionNetwork,
    }[case]
    assert type(module.model) is expected_cls
    model = twin(module, obs_space, config)
    prep = get_preprocessor(env_space)(env_space)
    env_space.seed(0)
    obs = torch.from_numpy(prep.transform_batch([env_space.sample() for _ in range(5)])).float()
    with torch.no_grad():
        out = module.forward_inference({Columns.OBS: obs})
        expected, _ = model({"obs": obs})
        values = module.compute_values({Columns.OBS: obs})
        expected_values = model.value_function()
    torch.testing.assert_close(out[Columns.ACTION_DIST_INPUTS], expected)
    torch.testing.assert_close(values, expected_values)
    train = module.forward_train({Columns.OBS: obs})
    torch.testing.assert_close(train[Columns.EMBEDDINGS].detach(), expected_values)
    torch.testing.assert_close(
        module.compute_values({}, train[Columns.EMBEDDINGS]), train[Columns.EMBEDDINGS]
    )


@pytest.mark.parametrize("kind", ["lstm", "attention"])
def test_recurrent_state_columns_sequence_equals_steps(kind):
    torch.manual_seed(1)
    config = (
        {"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [16], "max_seq_len": 5}
        if kind == "lstm"
        else {
            "use_attention": True,
            "attention_dim": 8,
            "attention_head_dim": 4,
            "attention_num_heads": 2,
            "attention_memory_inference": 3,
            "attention_memory_training": 3,
            "attention_position_wise_mlp_dim": 8,
            "fcnet_hiddens": [16],
            "max_seq_len": 5,
        }
    )
    module = build(Box(-1, 1, (3,)), Discrete(2), config)
    assert module.is_stateful() and module.model_config["max_seq_len"] == 5
    init = module.get_initial_state()
    b, t = 4, 5
    state = {k: torch.from_numpy(v)[None].repeat(b, *([1] * v.ndim)) for k, v in init.items()}
    obs = torch.randn(b, t, 3)
    with torch.no_grad():
        seq = module.forward_train({Columns.OBS: obs, Columns.STATE_IN: state})
        s = state
        steps = []
        for i in range(t):
            out = module.forward_exploration({Columns.OBS: obs[:, i : i + 1], Columns.STATE_IN: s})
            steps.append(out[Columns.ACTION_DIST_INPUTS])
            s = out[Columns.STATE_OUT]
    torch.testing.assert_close(
        seq[Columns.ACTION_DIST_INPUTS], torch.cat(steps, 1), atol=1e-5, rtol=1e-5
    )
    for k in init:
        torch.testing.assert_close(seq[Columns.STATE_OUT][k], s[k], atol=1e-5, rtol=1e-5)
    assert seq[Columns.EMBEDDINGS].shape == (b, t)
    with pytest.raises(ValueError, match="needs batch\\['state_in'\\]"):
        module.forward_train({Columns.OBS: obs})
    with pytest.raises(ValueError, match=r"observations \[B, T, ...\]"):
        module.forward_train({Columns.OBS: obs[:, 0], Columns.STATE_IN: state})
    # the rlblocks model on flat [B*T] rows with seq_lens gives the same logits
    model = twin(module, Box(-1, 1, (3,)), config)
    with torch.no_grad():
        flat, _ = model(
            {"obs": obs.reshape(b * t, 3)}, [state[k] for k in sorted(state)], torch.full((b,), t)
        )
    torch.testing.assert_close(seq[Columns.ACTION_DIST_INPUTS].reshape(b * t, -1), flat)
    # a loss mask shortens the sequences: padded steps do not change the state
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[:, 3:] = False
    with torch.no_grad():
        short = module.forward_train(
            {Columns.OBS: obs, Columns.STATE_IN: state, Columns.LOSS_MASK: mask}
        )
        three = module.forward_train({Columns.OBS: obs[:, :3], Columns.STATE_IN: state})
    for k in init:
        torch.testing.assert_close(
            short[Columns.STATE_OUT][k], three[Columns.STATE_OUT][k], atol=1e-5, rtol=1e-5
        )


def test_action_mask_observations():
    torch.manual_seed(2)
    space = Dict({"action_mask": Box(0, 1, (5,)), "observations": Box(-1, 1, (4,))})
    module = build(space, Discrete(5), {"fcnet_hiddens": [8]})
    assert module.masked and module.dist_fn.func is MaskedCategorical
    mask = torch.tensor([[1, 0, 1, 0, 0], [0, 0, 0, 0, 1.0]])
    obs = torch.randn(2, 4)
    with torch.no_grad():
        logits = module.forward_inference(
            {Columns.OBS: {"action_mask": mask, "observations": obs}}
        )[Columns.ACTION_DIST_INPUTS]
        raw, _ = twin(module, space["observations"], {"fcnet_hiddens": [8]})({"obs": obs})
    torch.testing.assert_close(logits[mask > 0], raw[mask > 0])
    assert bool((logits[mask == 0] == FLOAT_MIN).all())
    dist = module.get_exploration_action_dist_cls().from_logits(logits)
    for _ in range(20):
        a = dist.sample()
        assert bool(mask.gather(1, a[:, None]).all())
    with pytest.raises(ValueError, match="needs a Discrete or MultiDiscrete"):
        build(space, Box(-1, 1, (5,)))


def test_rllib_weights_migrate_into_the_module():
    data = torch.load(FIXTURES / "fc_default.pt", weights_only=True)
    # the RLlib model's config: MODEL_DEFAULTS' shared layers, which PPO's module would
    # otherwise replace by separate ones (difference 25)
    module = build(Box(-1, 1, (5,)), Discrete(4), {"vf_share_layers": True, **data["overrides"]})
    load_rllib_state_dict(module.model, data["state_dict"])
    with torch.no_grad():
        out = module.forward_inference({Columns.OBS: data["obs"]})[Columns.ACTION_DIST_INPUTS]
        values = module.compute_values({Columns.OBS: data["obs"]})
    torch.testing.assert_close(out, data["out"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(values, data["value"], atol=1e-5, rtol=1e-5)


class _Scaled(FullyConnectedNetwork):
    def __init__(self, obs_space, action_space, num_outputs, model_config, name, scale=1.0):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.scale = scale

    def forward(self, input_dict, state, seq_lens):
        out, state = super().forward(input_dict, state, seq_lens)
        return out * self.scale, state


def test_registered_custom_model_travels_as_a_class():
    ModelCatalog.register_custom_model("rllib_test_scaled", _Scaled)
    spec = rl_module_spec(
        {"custom_model": "rllib_test_scaled", "custom_model_config": {"scale": 3.0}}
    )
    assert spec.model_config["custom_model"] is _Scaled
    spec.observation_space, spec.action_space = Box(-1, 1, (3,)), Discrete(2)
    module = spec.build()
    assert isinstance(module.model, _Scaled) and module.model.scale == 3.0


def test_appo_module_has_a_target_network():
    module = build(Box(-1, 1, (3,)), Discrete(2), {"fcnet_hiddens": [8]}, appo=True)
    assert isinstance(module, RLBlocksAPPORLModule)
    module.make_target_networks()
    ((main, target),) = module.get_target_network_pairs()
    assert main is module.model and target is not main
    obs = torch.randn(6, 3)
    out = module.forward_target({Columns.OBS: obs})
    with torch.no_grad():
        expected = module.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    torch.testing.assert_close(next(iter(out.values())), expected)


def test_bad_configs_and_spaces():
    with pytest.raises(ValueError, match="fcnet_hidden"):
        rl_module_spec({"fcnet_hidden": [3]})
    with pytest.raises(ValueError, match="not registered"):
        rl_module_spec({"custom_model": "no_such_model_here"})
    with pytest.raises(ValueError, match="env_to_module"):
        build(Dict({"a": Discrete(2)}), Discrete(2))
    with pytest.raises(ValueError, match=r"the model reads \['prev_actions'\]"):
        build(Box(-1, 1, (3,)), Discrete(2), {"use_lstm": True, "lstm_use_prev_action": True})
    # RLlib's new-stack keys merged in by AlgorithmConfig are ignored, not errors
    spec = rl_module_spec({"fcnet_hiddens": [4]})
    spec.model_config = {**spec.model_config, "head_fcnet_hiddens": [7]}
    spec.observation_space, spec.action_space = Box(-1, 1, (3,)), Discrete(2)
    assert list(spec.build().rlblocks_config.fcnet_hiddens) == [4]
    np.testing.assert_equal(len(build(Box(-1, 1, (3,)), Discrete(2)).get_initial_state()), 0)


@pytest.mark.parametrize("kind", ["lstm", "attention", "framestack"])
def test_view_inputs_previous_observations_actions_rewards(kind):
    from rlblocks.models.framestack_model import FrameStackingModel

    torch.manual_seed(3)
    if kind == "lstm":
        n, names = 1, ("prev_actions", "prev_rewards")
        config = {
            "use_lstm": True,
            "lstm_cell_size": 8,
            "lstm_use_prev_action": True,
            "lstm_use_prev_reward": True,
        }
    elif kind == "attention":
        n, names = 2, ("prev_n_actions", "prev_n_rewards")
        config = {
            "use_attention": True,
            "attention_dim": 8,
            "attention_head_dim": 4,
            "attention_num_heads": 2,
            "attention_memory_inference": 3,
            "attention_memory_training": 3,
            "attention_position_wise_mlp_dim": 8,
            "attention_use_n_prev_actions": n,
            "attention_use_n_prev_rewards": n,
        }
    else:
        n, names = 3, ("prev_n_actions", "prev_n_rewards")
        config = {
            "custom_model": FrameStackingModel,
            "custom_model_config": {"num_frames": n, "hidden": 16},
        }
    config.update(fcnet_hiddens=[16], max_seq_len=4)
    spaces = {
        "observations": Box(-1, 1, (3,)),
        names[0]: MultiDiscrete([3] * n),
        names[1]: Box(-np.inf, np.inf, (n,), np.float32),
    }
    if kind == "framestack":
        spaces["prev_n_obs"] = Box(-1, 1, (n, 3))
    space = Dict(spaces)
    module = build(space, Discrete(3), config)
    b, t = (2, 4) if kind != "framestack" else (8, None)
    lead = (b, t) if t else (b,)
    rows = b * (t or 1)
    obs = {
        "observations": torch.randn(*lead, 3),
        names[0]: torch.randint(0, 3, (*lead, n)),
        names[1]: torch.randn(*lead, n),
    }
    if kind == "framestack":
        obs["prev_n_obs"] = torch.randn(b, n, 3)
    batch = {Columns.OBS: obs}
    init = module.get_initial_state()
    state = {k: torch.from_numpy(v)[None].repeat(b, *([1] * v.ndim)) for k, v in init.items()}
    if state:
        batch[Columns.STATE_IN] = state
    flat = {k: v.reshape(rows, *v.shape[len(lead) :]) for k, v in obs.items()}
    extra = {k: v for k, v in flat.items() if k != "observations"}
    if kind == "lstm":
        extra = {k: v[:, 0] for k, v in extra.items()}
    with torch.no_grad():
        out = module.forward_train(batch)[Columns.ACTION_DIST_INPUTS]
        model = twin(module, space["observations"], config)
        expected, _ = model(
            {"obs": flat["observations"], **extra},
            [state[k] for k in sorted(state)],
            torch.full((b,), t) if t else None,
        )
    torch.testing.assert_close(out.reshape(rows, -1), expected)
    # the previous actions change the output (they are really read)
    moved_obs = dict(obs, **{names[0]: (obs[names[0]] + 1) % 3})
    with torch.no_grad():
        moved = module.forward_train({**batch, Columns.OBS: moved_obs})
    assert not torch.allclose(moved[Columns.ACTION_DIST_INPUTS], out)
    with pytest.raises(ValueError, match="observations must be dicts with the keys"):
        module.forward_train({**batch, Columns.OBS: obs["observations"]})
    with pytest.raises(ValueError, match="the model reads"):
        build(Box(-1, 1, (3,)), Discrete(3), config)
    with pytest.raises(ValueError, match="unexpected observation keys"):
        build(Dict({**spaces, "other": Box(0, 1, (1,))}), Discrete(3), config)


def test_registered_custom_action_dist_travels_as_a_class():
    from rlblocks.distributions import Beta

    ModelCatalog.register_custom_action_dist("rllib_test_beta", Beta)
    spec = rl_module_spec({"custom_action_dist": "rllib_test_beta"})
    assert spec.model_config["custom_action_dist"] is Beta
    spec.observation_space, spec.action_space = Box(-1, 1, (3,)), Box(0.0, 2.0, (2,))
    module = spec.build()
    logits = module.forward_inference({Columns.OBS: torch.zeros(4, 3)})[Columns.ACTION_DIST_INPUTS]
    dist = module.get_inference_action_dist_cls().from_logits(logits)
    assert isinstance(dist.inner, Beta)
    a = dist.sample()
    assert a.shape == (4, 2) and bool(((a >= 0) & (a <= 2)).all())  # the space's bounds
    with pytest.raises(ValueError, match="custom_action_dist 'nope' is not registered"):
        rl_module_spec({"custom_action_dist": "nope"})
