"""MODEL_DEFAULTS and the validated ModelConfig."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rlblocks.config import DEPRECATED_VALUE, MODEL_DEFAULTS, ConvFilter, ModelConfig

# RLlib's keys, in RLlib's order (docs/rllib_behavior.md section 5).
RLLIB_KEYS = [
    "fcnet_hiddens", "fcnet_activation", "fcnet_weights_initializer",
    "fcnet_weights_initializer_config", "fcnet_bias_initializer", "fcnet_bias_initializer_config",
    "conv_filters", "conv_activation", "conv_kernel_initializer",
    "conv_kernel_initializer_config", "conv_bias_initializer", "conv_bias_initializer_config",
    "conv_transpose_kernel_initializer", "conv_transpose_kernel_initializer_config",
    "conv_transpose_bias_initializer", "conv_transpose_bias_initializer_config",
    "post_fcnet_hiddens", "post_fcnet_activation", "post_fcnet_weights_initializer",
    "post_fcnet_weights_initializer_config", "post_fcnet_bias_initializer",
    "post_fcnet_bias_initializer_config", "free_log_std", "log_std_clip_param",
    "no_final_linear", "vf_share_layers", "use_lstm", "max_seq_len", "lstm_cell_size",
    "lstm_use_prev_action", "lstm_use_prev_reward", "lstm_weights_initializer",
    "lstm_weights_initializer_config", "lstm_bias_initializer", "lstm_bias_initializer_config",
    "_time_major", "use_attention", "attention_num_transformer_units", "attention_dim",
    "attention_num_heads", "attention_head_dim", "attention_memory_inference",
    "attention_memory_training", "attention_position_wise_mlp_dim",
    "attention_init_gru_gate_bias", "attention_use_n_prev_actions",
    "attention_use_n_prev_rewards", "framestack", "dim", "grayscale", "zero_mean",
    "custom_model", "custom_model_config", "custom_action_dist", "custom_preprocessor",
    "encoder_latent_dim", "always_check_shapes", "lstm_use_prev_action_reward",
    "_use_default_native_models", "_disable_preprocessor_api", "_disable_action_flattening",
]  # fmt: skip


RLBLOCKS_KEYS = [
    "sequence_max_len", "sequence_truncate", "graph_max_nodes", "graph_max_edges",
    "text_max_length", "text_charset", "text_encoding", "text_truncate", "entity_encoder",
    "graph_encoder", "logits_weights_initializer", "logits_weights_initializer_config",
    "vf_weights_initializer", "vf_weights_initializer_config", "log_std_init",
]  # fmt: skip


def test_defaults_keys_order_and_values():
    assert list(MODEL_DEFAULTS) == RLLIB_KEYS + RLBLOCKS_KEYS
    assert MODEL_DEFAULTS["fcnet_hiddens"] == [256, 256]
    assert MODEL_DEFAULTS["fcnet_activation"] == "tanh"
    assert MODEL_DEFAULTS["post_fcnet_activation"] == "relu"
    assert MODEL_DEFAULTS["vf_share_layers"] is True
    assert MODEL_DEFAULTS["max_seq_len"] == 20 and MODEL_DEFAULTS["lstm_cell_size"] == 256
    assert MODEL_DEFAULTS["attention_init_gru_gate_bias"] == 2.0
    assert MODEL_DEFAULTS["log_std_clip_param"] == 20.0
    assert MODEL_DEFAULTS["lstm_use_prev_action_reward"] == DEPRECATED_VALUE
    assert MODEL_DEFAULTS["custom_model_config"] == {}
    assert all(MODEL_DEFAULTS[k] is None for k in RLLIB_KEYS if "initializer" in k)


def test_empty_and_none_give_defaults():
    assert ModelConfig.from_dict({}) == ModelConfig() == ModelConfig.from_dict(None)
    assert ModelConfig().to_dict() == MODEL_DEFAULTS


def test_to_dict_is_a_fresh_copy():
    d = ModelConfig().to_dict()
    d["fcnet_hiddens"].append(3)
    d["custom_model_config"]["x"] = 1
    assert MODEL_DEFAULTS["fcnet_hiddens"] == [256, 256]
    assert MODEL_DEFAULTS["custom_model_config"] == {}
    assert ModelConfig()["fcnet_hiddens"] == [256, 256]


def test_typed_attributes_and_mapping_view():
    cfg = ModelConfig.from_dict(
        {"fcnet_hiddens": [64, 32], "_time_major": True, "conv_filters": [[8, 3, [2, 1]]]}
    )
    assert cfg.fcnet_hiddens == (64, 32)
    assert cfg.time_major is True and cfg["_time_major"] is True
    assert cfg.conv_filters == (ConvFilter(8, (3, 3), (2, 1)),)
    assert cfg["conv_filters"] == [[8, [3, 3], [2, 1]]]
    assert list(cfg) == RLLIB_KEYS + RLBLOCKS_KEYS and len(cfg) == len(MODEL_DEFAULTS)
    assert "dim" in cfg and "nope" not in cfg
    assert cfg.get("nope", 5) == 5
    with pytest.raises(KeyError):
        cfg["nope"]
    assert ModelConfig.from_dict(cfg) is cfg


def test_frozen_and_replace_validates():
    cfg = ModelConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.dim = 42  # type: ignore[misc]
    assert cfg.replace(dim=42).dim == 42 and cfg.dim == 84
    with pytest.raises(ValueError, match="dim must be an int >= 1"):
        cfg.replace(dim=0)
    with pytest.raises(ValueError, match="unknown model config key 'dimm'"):
        cfg.replace(dimm=3)


@pytest.mark.parametrize(
    "key, suggestion",
    [("fcnet_hidden", "fcnet_hiddens"), ("use_lstn", "use_lstm"),
     ("conv_filter", "conv_filters"), ("time_major", "_time_major"),
     ("custom_model_cfg", "custom_model_config")],
)  # fmt: skip
def test_unknown_key_suggests_closest(key, suggestion):
    with pytest.raises(ValueError, match=f"unknown model config key '{key}'.*'{suggestion}'"):
        ModelConfig.from_dict({key: 1})


def test_unknown_key_without_close_match_points_to_custom_model_config():
    with pytest.raises(ValueError, match="custom_model_config"):
        ModelConfig.from_dict({"qqqqqqqqqq": 1})


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("fcnet_hiddens", 256, "fcnet_hiddens must be a list"),
        ("fcnet_hiddens", [256, 0], r"fcnet_hiddens\[1\] must be an int >= 1"),
        ("fcnet_hiddens", [1.5], r"fcnet_hiddens\[0\] must be an int"),
        ("fcnet_hiddens", [True], r"fcnet_hiddens\[0\] must be an int"),
        ("post_fcnet_hiddens", "64", "post_fcnet_hiddens must be a list"),
        ("fcnet_activation", "sigmoid", r"fcnet_activation: Unknown activation \('sigmoid'\)"),
        ("conv_activation", "gelu", "conv_activation: Unknown activation"),
        ("post_fcnet_activation", 3, "post_fcnet_activation: activation must be"),
        ("conv_filters", [[16, [8, 8]]], r"conv_filters\[0\]: each filter must be"),
        ("conv_filters", [[16, [8, 8, 8], 4]], r"conv_filters\[0\] kernel must be"),
        ("conv_filters", [[0, 3, 1]], r"conv_filters\[0\] out_channels must be an int >= 1"),
        ("conv_filters", "16x8", "conv_filters must be None or a list"),
        ("free_log_std", "yes", "free_log_std must be True or False"),
        ("vf_share_layers", 1, "vf_share_layers must be True or False"),
        ("log_std_clip_param", -1.0, "log_std_clip_param must be a positive number"),
        ("log_std_clip_param", "big", "log_std_clip_param must be a number"),
        ("max_seq_len", 0, "max_seq_len must be an int >= 1"),
        ("lstm_cell_size", 2.0, "lstm_cell_size must be an int >= 1"),
        ("attention_use_n_prev_actions", -1, "attention_use_n_prev_actions must be an int >= 0"),
        ("dim", True, "dim must be an int >= 1"),
        ("custom_model", 3, "custom_model must be None, a registered name"),
        ("custom_model_config", [1], "custom_model_config must be a dict"),
        ("fcnet_weights_initializer_config", 3, "must be None or a dict"),
        ("encoder_latent_dim", 0, "encoder_latent_dim must be an int >= 1"),
    ],
)
def test_wrong_types_and_ranges(key, value, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_dict({key: value})


def test_lstm_and_attention_together_rejected():
    with pytest.raises(ValueError, match="use_lstm and use_attention cannot both be True"):
        ModelConfig.from_dict({"use_lstm": True, "use_attention": True})
    assert ModelConfig.from_dict({"use_lstm": True}).use_lstm


def test_custom_preprocessor_rejected():
    with pytest.raises(ValueError, match="custom_preprocessor is not supported"):
        ModelConfig.from_dict({"custom_preprocessor": "mine"})


def test_deprecated_prev_action_reward_warns_and_maps():
    with pytest.warns(DeprecationWarning, match="lstm_use_prev_action_reward"):
        cfg = ModelConfig.from_dict({"lstm_use_prev_action_reward": True})
    assert cfg.lstm_use_prev_action and cfg.lstm_use_prev_reward
    assert cfg["lstm_use_prev_action_reward"] == DEPRECATED_VALUE
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="contradicts"):
        ModelConfig.from_dict({"lstm_use_prev_action_reward": True, "lstm_use_prev_action": False})


def test_deprecated_native_models_warns():
    with pytest.warns(DeprecationWarning, match="_use_default_native_models"):
        cfg = ModelConfig.from_dict({"_use_default_native_models": True})
    assert cfg["_use_default_native_models"] == DEPRECATED_VALUE


def test_deprecated_marker_value_is_silent():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ModelConfig.from_dict(dict(MODEL_DEFAULTS))


def test_non_mapping_rejected():
    with pytest.raises(ValueError, match="model config must be a dict"):
        ModelConfig.from_dict([("dim", 3)])  # type: ignore[arg-type]


_hiddens = st.lists(st.integers(1, 512), max_size=4)
_overrides = st.fixed_dictionaries(
    {},
    optional={
        "fcnet_hiddens": _hiddens,
        "post_fcnet_hiddens": _hiddens,
        "fcnet_activation": st.sampled_from(["tanh", "relu", "swish", "linear", None, "ELU"]),
        "free_log_std": st.booleans(),
        "vf_share_layers": st.booleans(),
        "max_seq_len": st.integers(1, 100),
        "conv_filters": st.none()
        | st.lists(
            st.tuples(st.integers(1, 64), st.integers(1, 11), st.integers(1, 4)).map(list),
            min_size=1,
            max_size=3,
        ),
        "custom_model_config": st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    },
)


@settings(max_examples=60, deadline=None)
@given(_overrides)
def test_round_trip(overrides):
    cfg = ModelConfig.from_dict(overrides)
    again = ModelConfig.from_dict(cfg.to_dict())
    assert again == cfg
    for key, value in overrides.items():
        if key == "conv_filters" and value is not None:
            assert cfg[key] == [[o, [k, k], s] for o, k, s in value]
        else:
            assert cfg[key] == value


def test_the_activations_checked_without_torch_are_the_resolvers_own() -> None:
    """config.py checks the plain activation names without importing torch: they must be
    exactly the names :func:`rlblocks.activations.get_activation_fn` resolves by alias."""
    from rlblocks import activations
    from rlblocks.config import PLAIN_ACTIVATIONS

    assert PLAIN_ACTIVATIONS == {*activations._ALIASES, "linear"}
    for name in PLAIN_ACTIVATIONS:
        activations.get_activation_fn(name)
