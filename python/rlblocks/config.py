"""The model config: RLlib's ``MODEL_DEFAULTS`` dict and its typed, validated view.

Users hand rlblocks the same plain dict RLlib takes (any subset of ``MODEL_DEFAULTS``).
It is checked once, at the edge, by :meth:`ModelConfig.from_dict`; everything inside the
library then reads typed attributes. A :class:`ModelConfig` is also a read-only mapping
keyed by the RLlib names, so code written against RLlib's dict keeps working.

Examples:
    >>> cfg = ModelConfig.from_dict({"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"})
    >>> cfg.fcnet_hiddens, cfg["fcnet_activation"], cfg.vf_share_layers
    ((64, 64), 'relu', True)
    >>> ModelConfig.from_dict({"fcnet_hidden": [64]})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown model config key 'fcnet_hidden'; did you mean 'fcnet_hiddens' or ...
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "DEPRECATED_VALUE",
    "ENTITY_ENCODER_DEFAULTS",
    "GRAPH_ENCODER_DEFAULTS",
    "LAYOUT_DEFAULTS",
    "PRINTABLE_ASCII",
    "MODEL_DEFAULTS",
    "ConvFilter",
    "ModelConfig",
    "SEPARATE_VALUE_ALGOS",
    "algorithm_model_config",
    "config_mapping",
    "validate_model_config",
]

#: Marker RLlib uses for deprecated keys that were not set.
DEPRECATED_VALUE = -1

#: The characters of a string observation when ``text_charset`` is None: printable ASCII,
#: space to tilde (95 characters; character i has id i).
PRINTABLE_ASCII = "".join(chr(c) for c in range(32, 127))

#: rlblocks' keys that size the variable parts of an observation's flat layout
#: (:mod:`rlblocks.layout`): gymnasium Sequence, Graph and string spaces.
LAYOUT_DEFAULTS: dict[str, Any] = {
    "sequence_max_len": 64,
    "sequence_truncate": False,
    "graph_max_nodes": 64,
    "graph_max_edges": 256,
    "text_max_length": 64,
    "text_charset": None,
    "text_encoding": "one_hot",
    "text_truncate": False,
}

#: The encoder of Repeated / Sequence leaves (and, after a character embedding, of text) in
#: ``ComplexInputNetwork``: ``type`` "attention" (masked self-attention), "deepsets" or
#: "flatten" (RLlib's: an FC stack over the zero-padded block); ``pool`` "sum" (the
#: default: the pooled encoding then says how many items there are, which "mean", "max" and
#: "attention" pooling lose), "mean", "max" or "attention".
ENTITY_ENCODER_DEFAULTS: dict[str, Any] = {
    "type": "attention",
    "dim": 64,
    "heads": 4,
    "layers": 1,
    "pool": "sum",
}

#: The encoder of Graph leaves: ``layers`` rounds of message passing of width ``dim``, then
#: a pooled readout (``pool`` as the entity encoder's); ``backend`` "auto" (torch_geometric
#: when importable), "torch" or "pyg".
GRAPH_ENCODER_DEFAULTS: dict[str, Any] = {
    "dim": 64,
    "layers": 2,
    "pool": "mean",
    "backend": "auto",
}

#: RLlib's model defaults, every key, in RLlib's order; then rlblocks' own keys (the layout
#: of Sequence, Graph and string observations, and the encoders that read them).
MODEL_DEFAULTS: dict[str, Any] = {
    "fcnet_hiddens": [256, 256],
    "fcnet_activation": "tanh",
    "fcnet_weights_initializer": None,
    "fcnet_weights_initializer_config": None,
    "fcnet_bias_initializer": None,
    "fcnet_bias_initializer_config": None,
    "conv_filters": None,
    "conv_activation": "relu",
    "conv_kernel_initializer": None,
    "conv_kernel_initializer_config": None,
    "conv_bias_initializer": None,
    "conv_bias_initializer_config": None,
    "conv_transpose_kernel_initializer": None,
    "conv_transpose_kernel_initializer_config": None,
    "conv_transpose_bias_initializer": None,
    "conv_transpose_bias_initializer_config": None,
    "post_fcnet_hiddens": [],
    "post_fcnet_activation": "relu",
    "post_fcnet_weights_initializer": None,
    "post_fcnet_weights_initializer_config": None,
    "post_fcnet_bias_initializer": None,
    "post_fcnet_bias_initializer_config": None,
    "free_log_std": False,
    "log_std_clip_param": 20.0,
    "no_final_linear": False,
    "vf_share_layers": True,
    "use_lstm": False,
    "max_seq_len": 20,
    "lstm_cell_size": 256,
    "lstm_use_prev_action": False,
    "lstm_use_prev_reward": False,
    "lstm_weights_initializer": None,
    "lstm_weights_initializer_config": None,
    "lstm_bias_initializer": None,
    "lstm_bias_initializer_config": None,
    "_time_major": False,
    "use_attention": False,
    "attention_num_transformer_units": 1,
    "attention_dim": 64,
    "attention_num_heads": 1,
    "attention_head_dim": 32,
    "attention_memory_inference": 50,
    "attention_memory_training": 50,
    "attention_position_wise_mlp_dim": 32,
    "attention_init_gru_gate_bias": 2.0,
    "attention_use_n_prev_actions": 0,
    "attention_use_n_prev_rewards": 0,
    "framestack": True,
    "dim": 84,
    "grayscale": False,
    "zero_mean": True,
    "custom_model": None,
    "custom_model_config": {},
    "custom_action_dist": None,
    "custom_preprocessor": None,
    "encoder_latent_dim": None,
    "always_check_shapes": False,
    "lstm_use_prev_action_reward": DEPRECATED_VALUE,
    "_use_default_native_models": DEPRECATED_VALUE,
    "_disable_preprocessor_api": False,
    "_disable_action_flattening": False,
    # rlblocks' own keys (RLlib has none of these spaces' encoders)
    **LAYOUT_DEFAULTS,
    "entity_encoder": ENTITY_ENCODER_DEFAULTS,
    "graph_encoder": GRAPH_ENCODER_DEFAULTS,
}

#: Algorithms whose default model keeps separate policy and value layers
#: (``vf_share_layers=False``, as RLlib's new API stack does for PPO): the value loss of an
#: actor-critic then never reaches the policy's layers (difference 25).
SEPARATE_VALUE_ALGOS = ("PPO", "APPO", "IMPALA")


def algorithm_model_config(model_config: Mapping[str, Any] | None, algo: str) -> dict[str, Any]:
    """``model_config`` (a copy) with ``algo``'s model defaults for the keys it does not set.

    ``MODEL_DEFAULTS`` stays RLlib's (``vf_share_layers`` True, which DQN and SAC keep); PPO,
    APPO and IMPALA get ``vf_share_layers=False`` unless the config sets it (difference 25).

    Examples:
        >>> algorithm_model_config({"fcnet_hiddens": [64, 64]}, "PPO")
        {'fcnet_hiddens': [64, 64], 'vf_share_layers': False}
        >>> algorithm_model_config({"vf_share_layers": True}, "APPO")
        {'vf_share_layers': True}
        >>> algorithm_model_config(None, "DQN")
        {}
    """
    config = dict(model_config or {})
    if algo.upper() in SEPARATE_VALUE_ALGOS:
        config.setdefault("vf_share_layers", False)
    return config


# RLlib key -> attribute name (leading underscores dropped).
_ATTR = {key: key.lstrip("_") for key in MODEL_DEFAULTS}
_KEY = {attr: key for key, attr in _ATTR.items()}

_INITIALIZER_KEYS = tuple(k for k in MODEL_DEFAULTS if "initializer" in k)


@dataclass(frozen=True)
class ConvFilter:
    """One conv layer of ``conv_filters``: ``[out_channels, kernel, stride]``.

    Examples:
        >>> ConvFilter.parse([16, [8, 8], 4])
        ConvFilter(out_channels=16, kernel=(8, 8), stride=(4, 4))
        >>> ConvFilter(32, (3, 3), (1, 1)).to_list()
        [32, [3, 3], 1]
    """

    out_channels: int
    kernel: tuple[int, int]
    stride: tuple[int, int]

    @classmethod
    def parse(cls, entry: Any, where: str = "conv_filters") -> ConvFilter:
        """Parses ``[out_channels, kernel, stride]``; kernel and stride are an int or a pair."""
        if isinstance(entry, ConvFilter):
            return entry
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise ValueError(
                f"{where}: each filter must be [out_channels, kernel, stride] "
                f"(e.g. [16, [8, 8], 4]), got {entry!r}"
            )
        out, kernel, stride = entry
        return cls(
            _positive_int(out, f"{where} out_channels"),
            _pair(kernel, f"{where} kernel"),
            _pair(stride, f"{where} stride"),
        )

    def to_list(self) -> list[Any]:
        """The RLlib form ``[out, [kh, kw], stride]`` (stride an int when square)."""
        stride: Any = self.stride[0] if self.stride[0] == self.stride[1] else list(self.stride)
        return [self.out_channels, list(self.kernel), stride]


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _positive_int(value: Any, what: str, minimum: int = 1) -> int:
    if not _is_int(value) or int(value) < minimum:
        raise ValueError(f"{what} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _pair(value: Any, what: str) -> tuple[int, int]:
    if _is_int(value):
        v = _positive_int(value, what)
        return (v, v)
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return (_positive_int(value[0], what), _positive_int(value[1], what))
    raise ValueError(f"{what} must be a positive int or a pair of them, got {value!r}")


def _hiddens(value: Any, key: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{key} must be a list of positive ints (layer sizes), got {value!r}")
    return tuple(_positive_int(v, f"{key}[{i}]") for i, v in enumerate(value))


def _bool(value: Any, key: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{key} must be True or False, got {value!r}")
    return bool(value)


def _float(value: Any, key: str, positive: bool = False) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise ValueError(f"{key} must be a number, got {value!r}")
    out = float(value)
    if math.isnan(out) or (positive and out <= 0):
        raise ValueError(f"{key} must be a {'positive ' if positive else ''}number, got {value!r}")
    return out


def _activation(value: Any, key: str) -> Any:
    from rlblocks.activations import get_activation_fn

    try:
        get_activation_fn(value)
    except ValueError as err:
        raise ValueError(f"{key}: {err}") from None
    return value


def _optional(check: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    def run(value: Any, key: str) -> Any:
        return None if value is None else check(value, key)

    return run


def _conv_filters(value: Any, key: str) -> tuple[ConvFilter, ...] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise ValueError(
            f"{key} must be None or a list of [out_channels, kernel, stride], got {value!r}"
        )
    return tuple(ConvFilter.parse(f, f"{key}[{i}]") for i, f in enumerate(value))


def _name_or_class(value: Any, key: str) -> Any:
    if value is None or isinstance(value, str) or callable(value):
        return value
    raise ValueError(f"{key} must be None, a registered name (str) or a class, got {value!r}")


def _initializer(value: Any, key: str) -> Any:
    if key.endswith("_config"):
        if value is not None and not isinstance(value, Mapping):
            raise ValueError(f"{key} must be None or a dict of keyword arguments, got {value!r}")
        return None if value is None else dict(value)
    if value is None or isinstance(value, str) or callable(value):
        return value
    raise ValueError(f"{key} must be None, an initializer name or a callable, got {value!r}")


def _mapping(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{key} must be a dict, got {value!r}")
    return dict(value)


def _custom_preprocessor(value: Any, key: str) -> None:
    if value is not None:
        raise ValueError(
            "custom_preprocessor is not supported (RLlib deprecated custom preprocessors): "
            "preprocess observations with a gymnasium.ObservationWrapper instead"
        )
    return None


def _deprecated(value: Any, key: str) -> Any:
    return value


def _choice(*allowed: str) -> Callable[[Any, str], str]:
    def check(value: Any, key: str) -> str:
        if value not in allowed:
            raise ValueError(f"{key} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
        return str(value)

    return check


def _charset(value: Any, key: str) -> str | None:
    if value is not None and (
        not isinstance(value, str) or not value or len(set(value)) != len(value)
    ):
        raise ValueError(
            f"{key} must be None (printable ASCII) or a non-empty str of distinct characters, "
            f"got {value!r}"
        )
    return value


def _sub_config(
    defaults: dict[str, Any], checks: dict[str, Callable[[Any, str], Any]]
) -> Callable[[Any, str], dict[str, Any]]:
    """A nested config dict: its keys checked, the missing ones taken from ``defaults``."""

    def check(value: Any, key: str) -> dict[str, Any]:
        given = _mapping(value, key)
        for sub in given:
            if sub not in defaults:
                raise ValueError(f"unknown key {key}.{sub!s}; known: {', '.join(defaults)}")
        merged = {**defaults, **given}
        return {sub: checks[sub](v, f"{key}.{sub}") for sub, v in merged.items()}

    return check


_ENTITY_CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "type": _choice("attention", "deepsets", "flatten"),
    "dim": _positive_int,
    "heads": _positive_int,
    "layers": _positive_int,
    "pool": _choice("mean", "max", "sum", "attention"),
}
_GRAPH_CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "dim": _positive_int,
    "layers": _positive_int,
    "pool": _choice("mean", "max", "sum", "attention"),
    "backend": _choice("auto", "torch", "pyg"),
}


_CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "fcnet_hiddens": _hiddens,
    "fcnet_activation": _activation,
    "conv_filters": _conv_filters,
    "conv_activation": _activation,
    "post_fcnet_hiddens": _hiddens,
    "post_fcnet_activation": _activation,
    "free_log_std": _bool,
    "log_std_clip_param": lambda v, k: _float(v, k, positive=True),
    "no_final_linear": _bool,
    "vf_share_layers": _bool,
    "use_lstm": _bool,
    "max_seq_len": _positive_int,
    "lstm_cell_size": _positive_int,
    "lstm_use_prev_action": _bool,
    "lstm_use_prev_reward": _bool,
    "_time_major": _bool,
    "use_attention": _bool,
    "attention_num_transformer_units": _positive_int,
    "attention_dim": _positive_int,
    "attention_num_heads": _positive_int,
    "attention_head_dim": _positive_int,
    "attention_memory_inference": _positive_int,
    "attention_memory_training": _positive_int,
    "attention_position_wise_mlp_dim": _positive_int,
    "attention_init_gru_gate_bias": _float,
    "attention_use_n_prev_actions": lambda v, k: _positive_int(v, k, minimum=0),
    "attention_use_n_prev_rewards": lambda v, k: _positive_int(v, k, minimum=0),
    "framestack": _bool,
    "dim": _positive_int,
    "grayscale": _bool,
    "zero_mean": _bool,
    "custom_model": _name_or_class,
    "custom_model_config": _mapping,
    "custom_action_dist": _name_or_class,
    "custom_preprocessor": _custom_preprocessor,
    "encoder_latent_dim": _optional(_positive_int),
    "always_check_shapes": _bool,
    "lstm_use_prev_action_reward": _deprecated,
    "_use_default_native_models": _deprecated,
    "_disable_preprocessor_api": _bool,
    "_disable_action_flattening": _bool,
    **{k: _initializer for k in _INITIALIZER_KEYS},
    "sequence_max_len": _positive_int,
    "sequence_truncate": _bool,
    "graph_max_nodes": _positive_int,
    "graph_max_edges": _positive_int,
    "text_max_length": _positive_int,
    "text_charset": _charset,
    "text_encoding": _choice("one_hot", "ids"),
    "text_truncate": _bool,
    "entity_encoder": _sub_config(ENTITY_ENCODER_DEFAULTS, _ENTITY_CHECKS),
    "graph_encoder": _sub_config(GRAPH_ENCODER_DEFAULTS, _GRAPH_CHECKS),
}
assert set(_CHECKS) == set(MODEL_DEFAULTS)


@dataclass(frozen=True)
class ModelConfig(Mapping[str, Any]):
    """The validated model config: one attribute per ``MODEL_DEFAULTS`` key.

    Attribute names are RLlib's keys without leading underscores (``_time_major`` ->
    ``time_major``). Layer lists are tuples and ``conv_filters`` holds :class:`ConvFilter`
    entries; ``config["key"]`` (the mapping view) gives the RLlib form of every value.
    Build one with :meth:`from_dict`; never mutate it (use :meth:`replace`).

    Examples:
        >>> cfg = ModelConfig.from_dict({"conv_filters": [[16, [4, 4], 2]]})
        >>> cfg.conv_filters[0].kernel, cfg["conv_filters"]
        ((4, 4), [[16, [4, 4], 2]])
        >>> cfg.replace(vf_share_layers=False).vf_share_layers
        False
    """

    fcnet_hiddens: tuple[int, ...] = (256, 256)
    fcnet_activation: Any = "tanh"
    fcnet_weights_initializer: Any = None
    fcnet_weights_initializer_config: dict[str, Any] | None = None
    fcnet_bias_initializer: Any = None
    fcnet_bias_initializer_config: dict[str, Any] | None = None
    conv_filters: tuple[ConvFilter, ...] | None = None
    conv_activation: Any = "relu"
    conv_kernel_initializer: Any = None
    conv_kernel_initializer_config: dict[str, Any] | None = None
    conv_bias_initializer: Any = None
    conv_bias_initializer_config: dict[str, Any] | None = None
    conv_transpose_kernel_initializer: Any = None
    conv_transpose_kernel_initializer_config: dict[str, Any] | None = None
    conv_transpose_bias_initializer: Any = None
    conv_transpose_bias_initializer_config: dict[str, Any] | None = None
    post_fcnet_hiddens: tuple[int, ...] = ()
    post_fcnet_activation: Any = "relu"
    post_fcnet_weights_initializer: Any = None
    post_fcnet_weights_initializer_config: dict[str, Any] | None = None
    post_fcnet_bias_initializer: Any = None
    post_fcnet_bias_initializer_config: dict[str, Any] | None = None
    free_log_std: bool = False
    log_std_clip_param: float = 20.0
    no_final_linear: bool = False
    vf_share_layers: bool = True
    use_lstm: bool = False
    max_seq_len: int = 20
    lstm_cell_size: int = 256
    lstm_use_prev_action: bool = False
    lstm_use_prev_reward: bool = False
    lstm_weights_initializer: Any = None
    lstm_weights_initializer_config: dict[str, Any] | None = None
    lstm_bias_initializer: Any = None
    lstm_bias_initializer_config: dict[str, Any] | None = None
    time_major: bool = False
    use_attention: bool = False
    attention_num_transformer_units: int = 1
    attention_dim: int = 64
    attention_num_heads: int = 1
    attention_head_dim: int = 32
    attention_memory_inference: int = 50
    attention_memory_training: int = 50
    attention_position_wise_mlp_dim: int = 32
    attention_init_gru_gate_bias: float = 2.0
    attention_use_n_prev_actions: int = 0
    attention_use_n_prev_rewards: int = 0
    framestack: bool = True
    dim: int = 84
    grayscale: bool = False
    zero_mean: bool = True
    custom_model: Any = None
    custom_model_config: dict[str, Any] = field(default_factory=dict)
    custom_action_dist: Any = None
    custom_preprocessor: None = None
    encoder_latent_dim: int | None = None
    always_check_shapes: bool = False
    lstm_use_prev_action_reward: Any = DEPRECATED_VALUE
    use_default_native_models: Any = DEPRECATED_VALUE
    disable_preprocessor_api: bool = False
    disable_action_flattening: bool = False
    sequence_max_len: int = 64
    sequence_truncate: bool = False
    graph_max_nodes: int = 64
    graph_max_edges: int = 256
    text_max_length: int = 64
    text_charset: str | None = None
    text_encoding: str = "one_hot"
    text_truncate: bool = False
    entity_encoder: dict[str, Any] = field(default_factory=lambda: dict(ENTITY_ENCODER_DEFAULTS))
    graph_encoder: dict[str, Any] = field(default_factory=lambda: dict(GRAPH_ENCODER_DEFAULTS))

    @classmethod
    def from_dict(cls, config: Mapping[str, Any] | ModelConfig | None = None) -> ModelConfig:
        """Validates an RLlib model config dict (any subset of ``MODEL_DEFAULTS``).

        Args:
            config: The dict (missing keys take their defaults), an existing
                ``ModelConfig`` (returned as is) or None (all defaults).

        Returns:
            The typed config.

        Raises:
            ValueError: An unknown key (the message suggests the closest known keys), a value
                of the wrong type or out of range, ``use_lstm`` together with
                ``use_attention``, or a set ``custom_preprocessor``.

        Deprecated keys warn (``DeprecationWarning``): ``lstm_use_prev_action_reward`` sets
        both ``lstm_use_prev_action`` and ``lstm_use_prev_reward``;
        ``_use_default_native_models`` has no effect.

        Examples:
            >>> ModelConfig.from_dict({"use_lstm": True, "use_attention": True})
            Traceback (most recent call last):
            ...
            ValueError: use_lstm and use_attention cannot both be True: pick one auto-wrapper
        """
        if isinstance(config, ModelConfig):
            return config
        config = config_mapping(config, "model config")
        for key in config:
            if key not in MODEL_DEFAULTS:
                raise ValueError(_unknown_key_message(key))
        values: dict[str, Any] = {}
        for key, value in config.items():
            values[_ATTR[key]] = _CHECKS[key](value, key)

        legacy = values.get("lstm_use_prev_action_reward", DEPRECATED_VALUE)
        if legacy is not DEPRECATED_VALUE and legacy != DEPRECATED_VALUE:
            flag = _bool(legacy, "lstm_use_prev_action_reward")
            warnings.warn(
                "model config key 'lstm_use_prev_action_reward' is deprecated: use "
                "'lstm_use_prev_action' and 'lstm_use_prev_reward'",
                DeprecationWarning,
                stacklevel=2,
            )
            for key in ("lstm_use_prev_action", "lstm_use_prev_reward"):
                if key in values and values[key] != flag:
                    raise ValueError(
                        f"lstm_use_prev_action_reward={flag} contradicts {key}={values[key]}; "
                        "set only lstm_use_prev_action and lstm_use_prev_reward"
                    )
                values[key] = flag
        values["lstm_use_prev_action_reward"] = DEPRECATED_VALUE
        native = values.get("use_default_native_models", DEPRECATED_VALUE)
        if native is not DEPRECATED_VALUE and native != DEPRECATED_VALUE:
            warnings.warn(
                "model config key '_use_default_native_models' is deprecated and has no effect",
                DeprecationWarning,
                stacklevel=2,
            )
        values["use_default_native_models"] = DEPRECATED_VALUE

        if values.get("use_lstm") and values.get("use_attention"):
            raise ValueError(
                "use_lstm and use_attention cannot both be True: pick one auto-wrapper"
            )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """A fresh plain dict with every key in RLlib's form and order (a full model config).

        Examples:
            >>> d = ModelConfig().to_dict()
            >>> d == MODEL_DEFAULTS and d is not MODEL_DEFAULTS
            True
        """
        return {key: self[key] for key in MODEL_DEFAULTS}

    def replace(self, **changes: Any) -> ModelConfig:
        """A validated copy with some values changed; keys may be attribute or RLlib names.

        Examples:
            >>> ModelConfig().replace(fcnet_hiddens=[8], _time_major=True).time_major
            True
        """
        d = self.to_dict()
        for name, value in changes.items():
            key = _KEY.get(name, name)
            if key not in MODEL_DEFAULTS:
                raise ValueError(_unknown_key_message(name))
            d[key] = value
        return ModelConfig.from_dict(d)

    # Mapping view in RLlib's key space ---------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        try:
            attr = _ATTR[key]
        except KeyError:
            raise KeyError(key) from None
        value = getattr(self, attr)
        if key in ("fcnet_hiddens", "post_fcnet_hiddens"):
            return list(value)
        if key == "conv_filters":
            return None if value is None else [f.to_list() for f in value]
        if isinstance(value, dict):
            return dict(value)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(MODEL_DEFAULTS)

    def __len__(self) -> int:
        return len(MODEL_DEFAULTS)

    def __contains__(self, key: object) -> bool:
        return key in MODEL_DEFAULTS

    __hash__ = None  # type: ignore[assignment]


def config_mapping(config: Any, what: str) -> Mapping[str, Any]:
    """A config given as a dict: None is ``{}``; anything but a mapping raises.

    Raises:
        ValueError: ``config`` is not a mapping (``what`` names it in the message).

    Examples:
        >>> config_mapping(None, "model config")
        {}
        >>> config_mapping([1], "model config")
        Traceback (most recent call last):
        ...
        ValueError: model config must be a dict, got list
    """
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise ValueError(f"{what} must be a dict, got {type(config).__name__}")
    return config


def _unknown_key_message(key: Any) -> str:
    close = difflib.get_close_matches(str(key), list(MODEL_DEFAULTS), n=3, cutoff=0.6)
    if not close:
        close = difflib.get_close_matches(str(key), list(MODEL_DEFAULTS), n=3, cutoff=0.4)
    hint = (
        "; did you mean " + " or ".join(repr(c) for c in close) + "?"
        if close
        else "; see rlblocks.MODEL_DEFAULTS for the allowed keys (custom options go in "
        "'custom_model_config')"
    )
    return f"unknown model config key {key!r}{hint}"


def validate_model_config(config: Mapping[str, Any] | ModelConfig | None) -> ModelConfig:
    """Shorthand for :meth:`ModelConfig.from_dict`.

    Examples:
        >>> validate_model_config({"dim": 42}).dim
        42
    """
    return ModelConfig.from_dict(config)


assert [f.name for f in dataclasses.fields(ModelConfig)] == [_ATTR[k] for k in MODEL_DEFAULTS]
