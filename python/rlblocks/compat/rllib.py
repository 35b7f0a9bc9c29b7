"""RLlib compatibility: RLlib's class names, and loading weights saved from RLlib models.

``load_rllib_state_dict`` takes the ``state_dict()`` of an RLlib (old API stack) torch
model (``FullyConnectedNetwork``, ``VisionNetwork``, ``ComplexInputNetwork``) and loads it
into the rlblocks model built from the same spaces and model config. FC and vision models
share RLlib's parameter names; for ``ComplexInputNetwork`` the aliased duplicate entries
(``cnn_1.*`` next to ``cnns.1.*``) and the never-used value towers of the sub-models are
dropped after checking them. For ``LSTMWrapper`` (``use_lstm``) the wrapped model's
entries move under ``wrapped.``. Other model classes plug in their own key translation
with :func:`register_rllib_key_translator`.

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks.models import FullyConnectedNetwork
    >>> obs, act = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2)
    >>> src = FullyConnectedNetwork(obs, act, 2, {"fcnet_hiddens": [4]}, "a")
    >>> dst = FullyConnectedNetwork(obs, act, 2, {"fcnet_hiddens": [4]}, "b")
    >>> load_rllib_state_dict(dst, src.state_dict())
    >>> x = {"obs": torch.ones(1, 3)}
    >>> torch.equal(src(x)[0], dst(x)[0])
    True
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from rlblocks.models.modelv2 import ModelV2, TorchModelV2

__all__ = [
    "TorchModelV2",
    "load_rllib_state_dict",
    "register_rllib_key_translator",
    "translate_rllib_state_dict",
]

KeyTranslator = Callable[[nn.Module, Mapping[str, torch.Tensor]], dict[str, torch.Tensor]]
_TRANSLATORS: dict[type, KeyTranslator] = {}

_ALIAS = re.compile(r"^(cnn|one_hot|flatten)_(\d+)\.(.*)$")
_UNUSED_TOWER = re.compile(
    r"^(?:(?:cnns|one_hot|flatten)\.\d+|post_fc_stack)\._value_branch(?:_separate)?\."
)


def register_rllib_key_translator(model_class: type, translator: KeyTranslator) -> None:
    """Registers how RLlib's state-dict keys map onto ``model_class``'s keys.

    ``translator(model, rllib_state_dict)`` returns the state dict to load (strictly) into
    ``model``. The most specific registered class in the model's MRO wins.
    """
    if not isinstance(model_class, type) or not callable(translator):
        raise ValueError(
            "register_rllib_key_translator(model_class, translator): a class and a callable"
        )
    _TRANSLATORS[model_class] = translator


def _same_names(
    model: nn.Module, state_dict: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    return dict(state_dict)


def _complex_input(
    model: nn.Module, state_dict: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    aliases: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        match = _ALIAS.match(key)
        if match:
            kind, index, rest = match.groups()
            aliases[f"{'cnns' if kind == 'cnn' else kind}.{index}.{rest}"] = value
            continue
        if _UNUSED_TOWER.match(key):
            continue
        out[key] = value
    for key, value in aliases.items():
        if _UNUSED_TOWER.match(key):
            continue
        if key not in out:
            out[key] = value
        elif not torch.equal(out[key], value):
            raise ValueError(
                f"RLlib state dict: the aliased entries for {key!r} differ; the two names of "
                "one ComplexInputNetwork sub-model must hold the same tensor"
            )
    return out


def _lstm_wrapper(
    model: nn.Module, state_dict: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    # RLlib's LSTM wrapper is a subclass of the wrapped model, so the wrapped model's
    # parameters sit at the top level, and the wrapper's ``_value_branch`` replaced the wrapped
    # model's own value head (same attribute). Here the wrapped model is ``model.wrapped``.
    out: dict[str, torch.Tensor] = {}
    wrapped: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if key.startswith("lstm."):
            out[key] = value
        elif key.startswith(("_logits_branch._model.0.", "_value_branch._model.0.")):
            head, _, _, param = key.split(".")
            out[f"{head}.{param}"] = value
        else:
            wrapped[key] = value
    inner = model.wrapped
    assert isinstance(inner, nn.Module)
    for key, value in _translator_for(inner)(inner, wrapped).items():
        out[f"wrapped.{key}"] = value
    # The wrapped model's own value head has no RLlib counterpart and is never used by the
    # wrapper (its value comes from the LSTM features): keep its current values.
    for key, value in model.state_dict().items():
        if key.startswith("wrapped._value_branch.") and key not in out:
            out[key] = value
    return out


def _translator_for(model: nn.Module) -> KeyTranslator:
    for cls in type(model).__mro__:
        if cls in _TRANSLATORS:
            return _TRANSLATORS[cls]
    raise ValueError(
        f"load_rllib_state_dict: no RLlib key translation for {type(model).__name__}; "
        "supported: FullyConnectedNetwork, VisionNetwork, ComplexInputNetwork, LSTMWrapper "
        "(and classes registered with register_rllib_key_translator)"
    )


def translate_rllib_state_dict(
    model: ModelV2, state_dict: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """RLlib's state dict with keys renamed (and unused entries dropped) for ``model``.

    A model built with ``vf_share_layers=False`` whose RLlib twin shares its trunk anyway
    (ComplexInputNetwork, LSTMWrapper; difference 25) gets its ``value_trunk.<key>`` entries
    copied from the policy's ``<key>``, so its outputs and values equal RLlib's.
    """
    _register_builtins()
    out = _translator_for(model)(model, state_dict)
    prefix = "value_trunk."
    for key in model.state_dict():
        if key.startswith(prefix) and key not in out and key[len(prefix) :] in out:
            out[key] = out[key[len(prefix) :]].clone()
    return out


def load_rllib_state_dict(model: ModelV2, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Loads an RLlib torch model's ``state_dict`` into the equivalent rlblocks model.

    Args:
        model: The rlblocks model, built from the same spaces, ``num_outputs`` and model
            config as the RLlib model.
        state_dict: ``rllib_model.state_dict()`` (e.g. from ``torch.load``).

    Raises:
        ValueError: The model type is not supported, or keys/shapes do not match (the
            message lists the missing, unexpected and mis-shaped entries, which usually means
            the two models were built from different configs).
    """
    if not isinstance(state_dict, Mapping):
        raise ValueError(
            f"state_dict must be a mapping of tensors, got {type(state_dict).__name__}"
        )
    translated = translate_rllib_state_dict(model, state_dict)
    own = model.state_dict()
    missing = sorted(set(own) - set(translated))
    unexpected = sorted(set(translated) - set(own))
    mis_shaped = sorted(
        f"{k}: RLlib {tuple(v.shape)} vs rlblocks {tuple(own[k].shape)}"
        for k, v in translated.items()
        if k in own and tuple(v.shape) != tuple(own[k].shape)
    )
    if missing or unexpected or mis_shaped:
        parts = []
        if missing:
            parts.append(f"missing from the RLlib state dict: {missing}")
        if unexpected:
            parts.append(f"not in {type(model).__name__}: {unexpected}")
        if mis_shaped:
            parts.append(f"shape mismatch: {mis_shaped}")
        raise ValueError(
            "load_rllib_state_dict: the RLlib weights do not fit this model ("
            + "; ".join(parts)
            + "). Build the rlblocks model with the same spaces, num_outputs and model config."
        )
    model.load_state_dict(translated, strict=True)


_BUILTINS_DONE = False


def _register_builtins() -> None:
    global _BUILTINS_DONE
    if _BUILTINS_DONE:
        return
    from rlblocks.models.complex_input import ComplexInputNetwork
    from rlblocks.models.fcnet import FullyConnectedNetwork
    from rlblocks.models.visionnet import VisionNetwork

    _TRANSLATORS.setdefault(FullyConnectedNetwork, _same_names)
    _TRANSLATORS.setdefault(VisionNetwork, _same_names)
    _TRANSLATORS.setdefault(ComplexInputNetwork, _complex_input)
    try:
        from rlblocks.models.recurrent import LSTMWrapper
    except ImportError:  # the recurrent models are optional here
        pass
    else:
        _TRANSLATORS.setdefault(LSTMWrapper, _lstm_wrapper)
    _BUILTINS_DONE = True


# RLlib's torch names -> rlblocks objects (loaded on first use).
_ALIASES: dict[str, tuple[str, str]] = {
    "TorchFC": ("rlblocks.models.fcnet", "FullyConnectedNetwork"),
    "FullyConnectedNetwork": ("rlblocks.models.fcnet", "FullyConnectedNetwork"),
    "TorchVisionNet": ("rlblocks.models.visionnet", "VisionNetwork"),
    "VisionNetwork": ("rlblocks.models.visionnet", "VisionNetwork"),
    "ComplexInputNetwork": ("rlblocks.models.complex_input", "ComplexInputNetwork"),
    "TorchDuelingQModel": ("rlblocks.models.heads", "DuelingQModel"),
    "TorchContActionQModel": ("rlblocks.models.heads", "ContinuousActionQModel"),
    "SlimFC": ("rlblocks.models.misc", "SlimFC"),
    "SlimConv2d": ("rlblocks.models.misc", "SlimConv2d"),
    "AppendBiasLayer": ("rlblocks.models.misc", "AppendBiasLayer"),
    "normc_initializer": ("rlblocks.models.misc", "normc_initializer"),
    "same_padding": ("rlblocks.models.misc", "same_padding"),
    "valid_padding": ("rlblocks.models.misc", "valid_padding"),
    "get_activation_fn": ("rlblocks.activations", "get_activation_fn"),
    "get_filter_config": ("rlblocks.models.misc", "get_filter_config"),
    "MODEL_DEFAULTS": ("rlblocks.config", "MODEL_DEFAULTS"),
    "ModelCatalog": ("rlblocks.catalog", "ModelCatalog"),
    "TorchDistributionWrapper": ("rlblocks.distributions", "ActionDistribution"),
    "TorchCategorical": ("rlblocks.distributions", "Categorical"),
    "TorchMultiCategorical": ("rlblocks.distributions", "MultiCategorical"),
    "TorchDiagGaussian": ("rlblocks.distributions", "DiagGaussian"),
    "TorchSquashedGaussian": ("rlblocks.distributions", "SquashedGaussian"),
    "TorchBeta": ("rlblocks.distributions", "Beta"),
    "TorchDeterministic": ("rlblocks.distributions", "Deterministic"),
    "TorchDirichlet": ("rlblocks.distributions", "Dirichlet"),
    "TorchMultiActionDistribution": ("rlblocks.distributions", "MultiActionDistribution"),
    "TorchBinaryAutoregressiveDistribution": (
        "rlblocks.distributions",
        "BinaryAutoregressiveDistribution",
    ),
    "TorchAutoregressiveActionModel": (
        "rlblocks.models.autoregressive",
        "AutoregressiveActionModel",
    ),
    "TorchParametricActionsModel": ("rlblocks.models.parametric", "ParametricActionsModel"),
    "TorchFrameStackingCartPoleModel": ("rlblocks.models.framestack_model", "FrameStackingModel"),
}


def __getattr__(name: str) -> Any:
    if name not in _ALIASES:
        raise AttributeError(f"module 'rlblocks.compat.rllib' has no attribute {name!r}")
    module, attr = _ALIASES[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value
