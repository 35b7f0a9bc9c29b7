"""Loading state dicts saved from RLlib's torch models (fixtures made once with ray 2.60.0).

The fixtures come from ``tests/fixtures/rllib/generate_rllib_fixtures.py``; no Ray needed.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from rlblocks import ModelCatalog, get_preprocessor
from rlblocks.compat import rllib as compat
from rlblocks.compat.rllib import load_rllib_state_dict, register_rllib_key_translator
from rlblocks.models import ComplexInputNetwork, FullyConnectedNetwork, ModelV2, VisionNetwork

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "rllib"
_spec = importlib.util.spec_from_file_location(
    "rllib_fixture_cases", FIXTURES / "generate_rllib_fixtures.py"
)
assert _spec is not None and _spec.loader is not None
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)

CLASSES = {"fc": FullyConnectedNetwork, "vision": VisionNetwork, "complex": ComplexInputNetwork}
UNUSED = re.compile(r"^(cnn_\d+|one_hot_\d+|flatten_\d+)\.|_value_branch")


def build(case_name: str) -> tuple[ModelV2, dict]:
    data = torch.load(FIXTURES / f"{case_name}.pt", weights_only=True)
    space = cases.build_space(data["space"])
    obs_space = get_preprocessor(space)(space).observation_space
    action_space = cases.build_space(cases.ACTION_SPACES.get(case_name, ["Discrete", 2]))
    args = (obs_space, action_space, data["num_outputs"], data["overrides"])
    if data["kind"] == "lstm":
        model = ModelCatalog.get_model_v2(*args, name=case_name)
    else:
        model = CLASSES[data["kind"]](*args, case_name)
    return model, data


@pytest.mark.parametrize("case_name", [c[0] for c in cases.CASES])
def test_outputs_and_values_match_rllib(case_name):
    model, data = build(case_name)
    load_rllib_state_dict(model, data["state_dict"])
    with torch.no_grad():
        if data["kind"] == "lstm":
            input_dict = {k: data[k] for k in ("obs", "prev_actions", "prev_rewards")}
            # vf_share_layers False: rlblocks' value LSTM (a copy of RLlib's shared one after
            # loading, difference 25) has its own [h_v, c_v], fed the same state here.
            n_state = len(model.get_initial_state())
            state_in = list(data["state_in"]) * (n_state // len(data["state_in"]))
            out, state = model(input_dict, state_in, data["seq_lens"])
            theirs_out = list(data["state_out"]) * (n_state // len(data["state_out"]))
            for ours, theirs in zip(state, theirs_out, strict=True):
                torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
        else:
            out, _ = model({"obs": data["obs"]})
        value = model.value_function()
    torch.testing.assert_close(out, data["out"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(value, data["value"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case_name", [c[0] for c in cases.CASES])
def test_parameter_counts_match_rllib(case_name):
    model, data = build(case_name)
    ours = sum(p.numel() for p in model.parameters())
    if data["kind"] == "lstm":
        # rlblocks keeps the wrapped model's own value head (unused by the wrapper); RLlib's
        # wrapper overwrote that attribute.
        head = sum(p.numel() for p in model.wrapped._value_branch.parameters())
        # vf_share_layers False: rlblocks' separate value path (difference 25)
        trunk = model.value_trunk
        separate = 0 if trunk is None else sum(p.numel() for p in trunk.parameters())
        assert (separate > 0) == (data["overrides"].get("vf_share_layers") is False)
        assert ours == data["num_params"] + head + separate
    elif data["kind"] != "complex":
        assert ours == data["num_params"]
    else:
        # RLlib's ComplexInputNetwork also holds value towers it never uses (difference 18).
        unused = sum(
            v.numel()
            for k, v in data["state_dict"].items()
            if UNUSED.search(k) and not re.match(r"^(cnn|one_hot|flatten)_\d+\.", k)
        )
        assert unused > 0
        assert ours == data["num_params"] - unused


def test_complex_aliases_must_agree():
    model, data = build("complex_tuple")
    state = dict(data["state_dict"])
    key = next(k for k in state if k.startswith("one_hot_1.") and "_hidden_layers" in k)
    state[key] = state[key] + 1.0
    with pytest.raises(ValueError, match="aliased entries .* differ"):
        load_rllib_state_dict(model, state)


def test_mismatched_config_is_reported():
    _, data = build("fc_default")
    space = cases.build_space(data["space"])
    wrong = FullyConnectedNetwork(space, gym.spaces.Discrete(2), 4, {"fcnet_hiddens": [16, 9]}, "w")
    with pytest.raises(ValueError, match="shape mismatch: .*_hidden_layers.1._model.0.weight"):
        load_rllib_state_dict(wrong, data["state_dict"])
    separate = FullyConnectedNetwork(
        space, gym.spaces.Discrete(2), 4, {"fcnet_hiddens": [16, 8], "vf_share_layers": False}, "s"
    )
    with pytest.raises(
        ValueError, match="missing from the RLlib state dict: .*_value_branch_separate"
    ):
        load_rllib_state_dict(separate, data["state_dict"])


def test_unsupported_model_and_registration():
    class Custom(ModelV2):
        def __init__(self, obs_space, action_space, num_outputs, model_config, name):
            super().__init__(obs_space, action_space, num_outputs, model_config, name)
            self.layer = torch.nn.Linear(2, 2)

    m = Custom(gym.spaces.Box(0, 1, (2,)), gym.spaces.Discrete(2), 2, {}, "c")
    with pytest.raises(ValueError, match="no RLlib key translation for Custom"):
        load_rllib_state_dict(m, {"layer.weight": torch.zeros(2, 2)})
    register_rllib_key_translator(
        Custom, lambda model, sd: {k.replace("lin.", "layer."): v for k, v in sd.items()}
    )
    load_rllib_state_dict(m, {"lin.weight": torch.ones(2, 2), "lin.bias": torch.zeros(2)})
    assert torch.all(m.layer.weight == 1)


def test_rllib_names():
    assert compat.TorchModelV2 is ModelV2
    assert compat.TorchFC is FullyConnectedNetwork and compat.TorchVisionNet is VisionNetwork
    assert compat.TorchDuelingQModel.__name__ == "DuelingQModel"
    with pytest.raises(AttributeError):
        compat.NotAName  # noqa: B018
