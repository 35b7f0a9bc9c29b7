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

import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rlblocks.config_fields import (
    Check,
    as_bool,
    as_float,
    as_int,
    checks_of,
    config_keys,
    is_int,
    one_of,
    option,
    optional,
    unknown_key_message,
)

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
            as_int(out, f"{where} out_channels"),
            _pair(kernel, f"{where} kernel"),
            _pair(stride, f"{where} stride"),
        )

    def to_list(self) -> list[Any]:
        """The RLlib form ``[out, [kh, kw], stride]`` (stride an int when square)."""
        stride: Any = self.stride[0] if self.stride[0] == self.stride[1] else list(self.stride)
        return [self.out_channels, list(self.kernel), stride]


def _pair(value: Any, what: str) -> tuple[int, int]:
    if is_int(value):
        v = as_int(value, what)
        return (v, v)
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return (as_int(value[0], what), as_int(value[1], what))
    raise ValueError(f"{what} must be a positive int or a pair of them, got {value!r}")


def _hiddens(value: Any, key: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{key} must be a list of positive ints (layer sizes), got {value!r}")
    return tuple(as_int(v, f"{key}[{i}]") for i, v in enumerate(value))


def _count(minimum: int) -> Check:
    return lambda value, key: as_int(value, key, minimum)


def _positive_float(value: Any, key: str) -> float:
    return as_float(value, key, positive=True)


#: ``log_std_init`` stays within the Gaussian's clamp of the log-std (``[-20, 20]``,
#: ``rlblocks.distributions.base.LOG_BOUND``): beyond it the start would be clamped flat.
LOG_STD_INIT_BOUND = 20.0


def _log_std_init(value: Any, key: str) -> float:
    out = as_float(value, key)
    if not -LOG_STD_INIT_BOUND <= out <= LOG_STD_INIT_BOUND:
        raise ValueError(
            f"{key} must be a number in [-{LOG_STD_INIT_BOUND:g}, {LOG_STD_INIT_BOUND:g}] (the "
            f"Gaussian's clamp of the log-std), got {value!r}"
        )
    return out


#: The activation names :func:`rlblocks.activations.get_activation_fn` resolves without a
#: torch lookup (its aliases and "linear"), checked here without importing torch
#: (tests/test_config.py keeps them equal).
PLAIN_ACTIVATIONS = frozenset({"linear", "relu", "tanh", "elu", "swish", "silu", "softmax"})


def _activation(value: Any, key: str) -> Any:
    if value is None or (isinstance(value, str) and value in PLAIN_ACTIVATIONS):
        return value
    from rlblocks.activations import get_activation_fn

    try:
        get_activation_fn(value)
    except ValueError as err:
        raise ValueError(f"{key}: {err}") from None
    return value


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
    if value is None or isinstance(value, str) or callable(value):
        return value
    raise ValueError(f"{key} must be None, an initializer name or a callable, got {value!r}")


def _initializer_config(value: Any, key: str) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, Mapping):
        raise ValueError(f"{key} must be None or a dict of keyword arguments, got {value!r}")
    return None if value is None else dict(value)


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


def _choice(*allowed: str) -> Check:
    return lambda value, key: str(one_of(value, key, allowed))


def _charset(value: Any, key: str) -> str | None:
    if value is not None and (
        not isinstance(value, str) or not value or len(set(value)) != len(value)
    ):
        raise ValueError(
            f"{key} must be None (printable ASCII) or a non-empty str of distinct characters, "
            f"got {value!r}"
        )
    return value


def _sub_config(table: dict[str, tuple[Any, Check]]) -> Check:
    """A nested config dict: its keys checked, the missing ones taken from the defaults."""

    def check(value: Any, key: str) -> dict[str, Any]:
        given = _mapping(value, key)
        for sub in given:
            if sub not in table:
                raise ValueError(f"unknown key {key}.{sub!s}; known: {', '.join(table)}")
        merged = {**{sub: default for sub, (default, _) in table.items()}, **given}
        return {sub: table[sub][1](v, f"{key}.{sub}") for sub, v in merged.items()}

    return check


_POOLS = _choice("mean", "max", "sum", "attention")

#: The encoder of Repeated / Sequence leaves (and, after a character embedding, of text) in
#: ``ComplexInputNetwork``: ``type`` "attention" (masked self-attention), "deepsets" or
#: "flatten" (RLlib's: an FC stack over the zero-padded block); ``pool`` "sum" (the
#: default: the pooled encoding then says how many items there are, which "mean", "max" and
#: "attention" pooling lose), "mean", "max" or "attention". Key -> (default, check).
_ENTITY_ENCODER: dict[str, tuple[Any, Check]] = {
    "type": ("attention", _choice("attention", "deepsets", "flatten")),
    "dim": (64, as_int),
    "heads": (4, as_int),
    "layers": (1, as_int),
    "pool": ("sum", _POOLS),
}
#: The encoder of Graph leaves: ``layers`` rounds of message passing of width ``dim``, then
#: a pooled readout (``pool`` as the entity encoder's); ``backend`` "auto" (torch_geometric
#: when importable), "torch" or "pyg". Key -> (default, check).
_GRAPH_ENCODER: dict[str, tuple[Any, Check]] = {
    "dim": (64, as_int),
    "layers": (2, as_int),
    "pool": ("mean", _POOLS),
    "backend": ("auto", _choice("auto", "torch", "pyg")),
}
#: The defaults of the entity and graph encoders' keys (``entity_encoder``, ``graph_encoder``).
ENTITY_ENCODER_DEFAULTS: dict[str, Any] = {k: d for k, (d, _) in _ENTITY_ENCODER.items()}
GRAPH_ENCODER_DEFAULTS: dict[str, Any] = {k: d for k, (d, _) in _GRAPH_ENCODER.items()}


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

    fcnet_hiddens: tuple[int, ...] = option((256, 256), _hiddens)
    fcnet_activation: Any = option("tanh", _activation)
    fcnet_weights_initializer: Any = option(None, _initializer)
    fcnet_weights_initializer_config: dict[str, Any] | None = option(None, _initializer_config)
    fcnet_bias_initializer: Any = option(None, _initializer)
    fcnet_bias_initializer_config: dict[str, Any] | None = option(None, _initializer_config)
    conv_filters: tuple[ConvFilter, ...] | None = option(None, _conv_filters)
    conv_activation: Any = option("relu", _activation)
    conv_kernel_initializer: Any = option(None, _initializer)
    conv_kernel_initializer_config: dict[str, Any] | None = option(None, _initializer_config)
    conv_bias_initializer: Any = option(None, _initializer)
    conv_bias_initializer_config: dict[str, Any] | None = option(None, _initializer_config)
    conv_transpose_kernel_initializer: Any = option(None, _initializer)
    conv_transpose_kernel_initializer_config: dict[str, Any] | None = option(
        None, _initializer_config
    )
    conv_transpose_bias_initializer: Any = option(None, _initializer)
    conv_transpose_bias_initializer_config: dict[str, Any] | None = option(
        None, _initializer_config
    )
    post_fcnet_hiddens: tuple[int, ...] = option((), _hiddens)
    post_fcnet_activation: Any = option("relu", _activation)
    post_fcnet_weights_initializer: Any = option(None, _initializer)
    post_fcnet_weights_initializer_config: dict[str, Any] | None = option(None, _initializer_config)
    post_fcnet_bias_initializer: Any = option(None, _initializer)
    post_fcnet_bias_initializer_config: dict[str, Any] | None = option(None, _initializer_config)
    free_log_std: bool = option(False, as_bool)
    log_std_clip_param: float = option(20.0, _positive_float)
    no_final_linear: bool = option(False, as_bool)
    vf_share_layers: bool = option(True, as_bool)
    use_lstm: bool = option(False, as_bool)
    max_seq_len: int = option(20, as_int)
    lstm_cell_size: int = option(256, as_int)
    lstm_use_prev_action: bool = option(False, as_bool)
    lstm_use_prev_reward: bool = option(False, as_bool)
    lstm_weights_initializer: Any = option(None, _initializer)
    lstm_weights_initializer_config: dict[str, Any] | None = option(None, _initializer_config)
    lstm_bias_initializer: Any = option(None, _initializer)
    lstm_bias_initializer_config: dict[str, Any] | None = option(None, _initializer_config)
    time_major: bool = option(False, as_bool, key="_time_major")
    use_attention: bool = option(False, as_bool)
    attention_num_transformer_units: int = option(1, as_int)
    attention_dim: int = option(64, as_int)
    attention_num_heads: int = option(1, as_int)
    attention_head_dim: int = option(32, as_int)
    attention_memory_inference: int = option(50, as_int)
    attention_memory_training: int = option(50, as_int)
    attention_position_wise_mlp_dim: int = option(32, as_int)
    attention_init_gru_gate_bias: float = option(2.0, as_float)
    attention_use_n_prev_actions: int = option(0, _count(0))
    attention_use_n_prev_rewards: int = option(0, _count(0))
    framestack: bool = option(True, as_bool)
    dim: int = option(84, as_int)
    grayscale: bool = option(False, as_bool)
    zero_mean: bool = option(True, as_bool)
    custom_model: Any = option(None, _name_or_class)
    custom_model_config: dict[str, Any] = option({}, _mapping)
    custom_action_dist: Any = option(None, _name_or_class)
    custom_preprocessor: None = option(None, _custom_preprocessor)
    encoder_latent_dim: int | None = option(None, optional(as_int))
    always_check_shapes: bool = option(False, as_bool)
    lstm_use_prev_action_reward: Any = option(DEPRECATED_VALUE, _deprecated)
    use_default_native_models: Any = option(
        DEPRECATED_VALUE, _deprecated, key="_use_default_native_models"
    )
    disable_preprocessor_api: bool = option(False, as_bool, key="_disable_preprocessor_api")
    disable_action_flattening: bool = option(False, as_bool, key="_disable_action_flattening")
    sequence_max_len: int = option(64, as_int)
    sequence_truncate: bool = option(False, as_bool)
    graph_max_nodes: int = option(64, as_int)
    graph_max_edges: int = option(256, as_int)
    text_max_length: int = option(64, as_int)
    text_charset: str | None = option(None, _charset)
    text_encoding: str = option("one_hot", _choice("one_hot", "ids"))
    text_truncate: bool = option(False, as_bool)
    entity_encoder: dict[str, Any] = option(ENTITY_ENCODER_DEFAULTS, _sub_config(_ENTITY_ENCODER))
    graph_encoder: dict[str, Any] = option(GRAPH_ENCODER_DEFAULTS, _sub_config(_GRAPH_ENCODER))
    logits_weights_initializer: Any = option(None, _initializer)
    logits_weights_initializer_config: dict[str, Any] | None = option(None, _initializer_config)
    vf_weights_initializer: Any = option(None, _initializer)
    vf_weights_initializer_config: dict[str, Any] | None = option(None, _initializer_config)
    log_std_init: float = option(0.0, _log_std_init)

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
            flag = as_bool(legacy, "lstm_use_prev_action_reward")
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
        return {key: self[key] for key in _ATTR}

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
    return unknown_key_message(
        key,
        MODEL_DEFAULTS,
        "model config",
        cutoffs=(0.6, 0.4),
        list_known=False,
        no_match="; see rlblocks.MODEL_DEFAULTS for the allowed keys (custom options go in "
        "'custom_model_config')",
    )


def validate_model_config(config: Mapping[str, Any] | ModelConfig | None) -> ModelConfig:
    """Shorthand for :meth:`ModelConfig.from_dict`.

    Examples:
        >>> validate_model_config({"dim": 42}).dim
        42
    """
    return ModelConfig.from_dict(config)


# The table's derived views: RLlib key <-> attribute name (leading underscores dropped), the
# checks by RLlib key, and the defaults in RLlib's form and order.
_ATTR = config_keys(ModelConfig)
_KEY = {attr: key for key, attr in _ATTR.items()}
_CHECKS: dict[str, Check] = checks_of(ModelConfig)

#: RLlib's model defaults, every key, in RLlib's order; then rlblocks' own keys (the layout
#: of Sequence, Graph and string observations, and the encoders that read them).
MODEL_DEFAULTS: dict[str, Any] = {key: ModelConfig()[key] for key in _ATTR}

#: rlblocks' keys that size the variable parts of an observation's flat layout
#: (:mod:`rlblocks.layout`): gymnasium Sequence, Graph and string spaces.
LAYOUT_DEFAULTS: dict[str, Any] = {
    key: MODEL_DEFAULTS[key]
    for key in _ATTR
    if key.startswith(("sequence_", "graph_max_", "text_"))
}
