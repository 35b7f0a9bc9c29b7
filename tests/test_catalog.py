"""ModelCatalog: default model choice, custom models, model interfaces, preprocessors."""

from __future__ import annotations

import importlib.util
import uuid

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks import ModelCatalog, get_preprocessor
from rlblocks.config import ModelConfig
from rlblocks.models import (
    ComplexInputNetwork,
    ContinuousActionQModel,
    DuelingQModel,
    FullyConnectedNetwork,
    ModelInterface,
    ModelV2,
    TorchModelV2,
    VisionNetwork,
)
from torch import nn

DISCRETE3 = gym.spaces.Discrete(3)


def unique(name: str) -> str:
    return f"{name}_{uuid.uuid4().hex[:8]}"


def flat_space(space: gym.Space) -> gym.Space:
    return get_preprocessor(space)(space).observation_space


class KwargsModel(ModelV2):
    def __init__(
        self, obs_space, action_space, num_outputs, model_config, name, width=4, bias=True
    ):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.width = width
        self.hidden = nn.Linear(obs_space.shape[0], width, bias=bias)
        self.out = nn.Linear(width, num_outputs)
        self.config_seen = model_config

    def forward(self, input_dict, state, seq_lens):
        return self.out(torch.relu(self.hidden(input_dict["obs_flat"]))), state


class SeedStyleModel(TorchModelV2, nn.Module):
    """The models guide's form: no **kwargs, reads its options from model_config."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.scale = model_config["custom_model_config"].get("scale", 1.0)
        self.layer = nn.Linear(obs_space.shape[0], num_outputs)

    def forward(self, input_dict, state, seq_lens):
        return self.scale * self.layer(input_dict["obs"]), state


@pytest.mark.parametrize(
    "space, expected",
    [
        (gym.spaces.Box(0, 1, (84, 84, 4)), VisionNetwork),
        (gym.spaces.Box(-1, 1, (7,)), FullyConnectedNetwork),
        (flat_space(gym.spaces.Discrete(5)), FullyConnectedNetwork),
        (flat_space(gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (3,)),
                                     "b": gym.spaces.Discrete(2)})), FullyConnectedNetwork),
        (flat_space(gym.spaces.Dict({"img": gym.spaces.Box(0, 1, (10, 10, 3)),
                                     "b": gym.spaces.Discrete(2)})), ComplexInputNetwork),
        (flat_space(gym.spaces.Tuple((gym.spaces.Box(0, 1, (4, 4)),))), ComplexInputNetwork),
        (gym.spaces.Box(0, 1, (4, 4)), ComplexInputNetwork),
        (gym.spaces.Discrete(4), ComplexInputNetwork),
    ],
)  # fmt: skip
def test_default_model_class(space, expected):
    assert ModelCatalog.default_model_class(space) is expected


def test_get_model_v2_default_models():
    m = ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (4,)), DISCRETE3, 3, {"fcnet_hiddens": [8]})
    assert type(m) is FullyConnectedNetwork and m.name == "default_model"
    assert m.config.fcnet_hiddens == (8,)
    v = ModelCatalog.get_model_v2(gym.spaces.Box(0, 1, (10, 10, 3)), DISCRETE3, 3, None, name="cnn")
    assert type(v) is VisionNetwork and v.name == "cnn"
    assert v({"obs": torch.rand(2, 10, 10, 3)})[0].shape == (2, 3)


def test_raw_discrete_observation_goes_through_one_hot():
    m = ModelCatalog.get_model_v2(gym.spaces.Discrete(4), DISCRETE3, 3, {"fcnet_hiddens": [5]})
    out, _ = m({"obs": torch.tensor([0, 3, 1])})
    assert out.shape == (3, 3)


def test_default_model_override():
    m = ModelCatalog.get_model_v2(
        gym.spaces.Box(-1, 1, (4,)), DISCRETE3, 3, {}, default_model=KwargsModel, width=6
    )
    assert type(m) is KwargsModel and m.width == 6


def test_custom_model_by_name_with_kwargs():
    name = unique("kw")
    ModelCatalog.register_custom_model(name, KwargsModel)
    cfg = {"custom_model": name, "custom_model_config": {"width": 7}}
    m = ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (4,)), DISCRETE3, 3, cfg, name="mine")
    assert type(m) is KwargsModel and m.width == 7 and m.name == "mine"
    assert isinstance(m.config_seen, dict) and m.config_seen["custom_model"] == name
    out, _ = m({"obs": torch.rand(5, 4)})
    assert out.shape == (5, 3)


def test_custom_model_by_class_and_explicit_kwargs():
    cfg = {"custom_model": KwargsModel, "custom_model_config": {"width": 2}}
    m = ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (4,)), DISCRETE3, 3, cfg, bias=False)
    assert m.width == 2 and m.hidden.bias is None


def test_seed_style_model_without_kwargs_warns_and_still_builds():
    name = unique("seed")
    ModelCatalog.register_custom_model(name, SeedStyleModel)
    cfg = {"custom_model": name, "custom_model_config": {"scale": 3.0}}
    with pytest.warns(UserWarning, match=r"does not accept custom_model_config keys \['scale'\]"):
        m = ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (4,)), DISCRETE3, 3, cfg)
    assert m.scale == 3.0
    x = torch.rand(2, 4)
    torch.testing.assert_close(m({"obs": x})[0], 3.0 * m.layer(x))


def test_custom_model_errors():
    with pytest.raises(ValueError, match="custom_model 'nope_not_there' is not registered"):
        ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (4,)), DISCRETE3, 3,
                                  {"custom_model": "nope_not_there"})  # fmt: skip
    name = unique("similar")
    ModelCatalog.register_custom_model(name, KwargsModel)
    with pytest.raises(ValueError, match=f"did you mean '{name}'"):
        ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (4,)), DISCRETE3, 3,
                                  {"custom_model": name[:-1]})  # fmt: skip
    with pytest.raises(ValueError, match="expected a subclass of rlblocks.models.ModelV2"):
        ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (4,)), DISCRETE3, 3,
                                  {"custom_model": nn.Linear})  # fmt: skip
    with pytest.raises(ValueError, match="expected a subclass of rlblocks.models.ModelV2"):
        ModelCatalog.register_custom_model("linear", nn.Linear)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty str"):
        ModelCatalog.register_custom_model("", KwargsModel)


def test_framework_and_config_errors():
    with pytest.raises(ValueError, match="framework must be 'torch'"):
        ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (4,)), DISCRETE3, 3, {}, framework="tf2")
    with pytest.raises(ValueError, match="unknown model config key 'fcnet_hidens'"):
        ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (4,)), DISCRETE3, 3, {"fcnet_hidens": []})
    with pytest.raises(ValueError, match="use_lstm and use_attention"):
        ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (4,)), DISCRETE3, 3,
                                  {"use_lstm": True, "use_attention": True})  # fmt: skip


@pytest.mark.parametrize(
    "key, module",
    [("use_lstm", "rlblocks.models.recurrent"), ("use_attention", "rlblocks.models.attention")],
)
def test_auto_wrappers(key, module):
    obs = gym.spaces.Box(-1, 1, (4,))
    if importlib.util.find_spec(module) is None:
        with pytest.raises(ImportError, match=f"model config {key}=True needs {module}"):
            ModelCatalog.get_model_v2(obs, DISCRETE3, 3, {key: True, "fcnet_hiddens": [8]})
    else:
        wrapper = "LSTMWrapper" if key == "use_lstm" else "AttentionWrapper"
        m = ModelCatalog.get_model_v2(obs, DISCRETE3, 3, {key: True, "fcnet_hiddens": [8]})
        assert type(m).__name__ == wrapper and isinstance(m, ModelV2)


def test_dueling_q_interface_on_default_model():
    obs = gym.spaces.Box(-1, 1, (4,))
    m = ModelCatalog.get_model_v2(
        obs, DISCRETE3, 3, {"fcnet_hiddens": [8]}, model_interface=DuelingQModel, name="dq"
    )
    assert isinstance(m, DuelingQModel) and type(m.base_model) is FullyConnectedNetwork
    assert m.base_model.num_outputs == 3 and m.num_outputs == 3
    x = torch.rand(5, 4)
    out, state = m({"obs": x})
    torch.testing.assert_close(out, m.base_model({"obs": x})[0])
    assert m.value_function().shape == (5,)
    a, v = m.A(out), m.V(out)
    torch.testing.assert_close(m.get_q_values(out), v + a - a.mean(dim=1, keepdim=True))
    assert m._logits is m.base_model._logits  # base attributes stay reachable
    names = [n for n, _ in m.named_parameters()]
    assert any(n.startswith("base_model.") for n in names) and "A._model.0.weight" in names


def test_continuous_q_interface_on_custom_model():
    obs, act = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Box(-1, 1, (2,))
    cfg = {"custom_model": KwargsModel, "fcnet_hiddens": [6]}

    class FeatureModel(FullyConnectedNetwork):
        pass

    m = ModelCatalog.get_model_v2(
        obs, act, 4, {"fcnet_hiddens": [6]}, model_interface=ContinuousActionQModel,
        default_model=FeatureModel,
    )  # fmt: skip
    assert type(m.base_model) is FeatureModel and m.base_model.num_outputs == 6  # no logits
    feats, _ = m({"obs": torch.rand(3, 4)})
    assert feats.shape == (3, 6)
    q = m.get_single_q_value(feats, torch.rand(3, 2))
    assert q.shape == (3, 1)
    assert m.q_head.obs_space.shape == (8,)
    with pytest.raises(ValueError, match="expected a subclass"):
        ModelCatalog.get_model_v2(obs, act, 4, dict(cfg, custom_model=nn.Linear),
                                  model_interface=ContinuousActionQModel)  # fmt: skip


def test_bad_model_interface():
    with pytest.raises(ValueError, match="model_interface must be a subclass"):
        ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (4,)), DISCRETE3, 3, {},
                                  model_interface=KwargsModel)  # type: ignore[arg-type]  # fmt: skip
    with pytest.raises(ValueError, match="needs a Box action space"):
        ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (4,)), DISCRETE3, 3, {},
                                  model_interface=ContinuousActionQModel)  # fmt: skip


def test_interface_subclass_composes_without_new_classes():
    class Extra(ModelInterface):
        def twice(self, x):
            return 2 * x

    m = ModelCatalog.get_model_v2(gym.spaces.Box(0, 1, (10, 10, 3)), DISCRETE3, 3, {},
                                  model_interface=Extra)  # fmt: skip
    assert type(m) is Extra and type(m.base_model) is VisionNetwork
    out, _ = m({"obs": torch.rand(2, 10, 10, 3)})
    torch.testing.assert_close(m.twice(out), 2 * out)
    assert m.value_function().shape == (2,)


def test_get_preprocessor_for_space():
    p = ModelCatalog.get_preprocessor_for_space(gym.spaces.MultiDiscrete([2, 3]))
    assert type(p).__name__ == "OneHotPreprocessor" and p.shape == (5,)
    np.testing.assert_array_equal(p.transform([1, 2]), [0, 1, 0, 0, 1])
    with pytest.raises(ValueError, match="unknown model config key 'dimension'"):
        ModelCatalog.get_preprocessor_for_space(gym.spaces.Discrete(2), {"dimension": 42})
    mb = ModelCatalog.get_preprocessor_for_space(
        gym.spaces.MultiBinary(3), include_multi_binary=True
    )
    assert mb.transform(np.array([1, 0, 1], dtype=np.int8)).dtype == np.float32
    p = ModelCatalog.get_preprocessor_for_space(gym.spaces.Discrete(2), ModelConfig())
    assert p.size == 2


def test_get_action_dist():
    pytest.importorskip("rlblocks.distributions", reason="distributions land separately")
    cls, n = ModelCatalog.get_action_dist(DISCRETE3, {})
    assert n == 3
    cls, n = ModelCatalog.get_action_dist(gym.spaces.Box(-1, 1, (2,)), None)
    assert n == 4
    cls, n = ModelCatalog.get_action_dist(gym.spaces.Box(-1, 1, (2,)), {}, "deterministic")
    assert n == 2
    with pytest.raises(ValueError, match="framework must be 'torch'"):
        ModelCatalog.get_action_dist(DISCRETE3, {}, framework="tf")
    with pytest.raises(ValueError, match="unknown model config key"):
        ModelCatalog.get_action_dist(DISCRETE3, {"custom_actoin_dist": "x"})


def test_register_custom_action_dist():
    dists = pytest.importorskip("rlblocks.distributions", reason="distributions land separately")
    name = unique("dist")

    class Mine(dists.Categorical):
        @staticmethod
        def required_model_output_shape(action_space, model_config):
            return 7

    ModelCatalog.register_custom_action_dist(name, Mine)
    cls, n = ModelCatalog.get_action_dist(DISCRETE3, {"custom_action_dist": name})
    assert n == 7 and (cls is Mine or getattr(cls, "func", None) is Mine)
    with pytest.raises(ValueError, match="expected a distribution class"):
        ModelCatalog.register_custom_action_dist(unique("bad"), 3)


class FeatureModel(ModelV2):
    """With num_outputs=None (as wrappers build it) it outputs ``width`` features."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name, width=4):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.width = width
        self.num_outputs = num_outputs or width
        self.layer = nn.Linear(obs_space.shape[0], self.num_outputs)

    def forward(self, input_dict, state, seq_lens):
        return torch.tanh(self.layer(input_dict["obs_flat"])), state


def test_interface_on_top_of_lstm_wrapped_custom_model():
    pytest.importorskip("rlblocks.models.recurrent", reason="the LSTM wrapper lands separately")
    cfg = {
        "custom_model": FeatureModel,
        "custom_model_config": {"width": 5},
        "use_lstm": True,
        "lstm_cell_size": 6,
    }
    m = ModelCatalog.get_model_v2(
        gym.spaces.Box(-1, 1, (4,)), DISCRETE3, 3, cfg, model_interface=DuelingQModel
    )
    lstm = m.base_model
    assert type(lstm).__name__ == "LSTMWrapper" and lstm.wrapped.width == 5
    state = [s.expand(2, -1) for s in m.get_initial_state()]
    out, state_out = m({"obs": torch.rand(2, 4)}, state, torch.tensor([1, 1]))
    assert out.shape == (2, 3) and len(state_out) == 2
    assert m.get_q_values(out).shape == (2, 3) and m.value_function().shape == (2,)
