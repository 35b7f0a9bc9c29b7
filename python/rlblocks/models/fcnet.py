"""``FullyConnectedNetwork``: RLlib's default model for flat observations.

Layout (RLlib's, so parameter counts and state-dict keys match): hidden layers
``fcnet_hiddens + post_fcnet_hiddens`` (all with ``fcnet_activation``, or
``post_fcnet_activation`` when ``fcnet_hiddens`` is empty; normc(1.0) weights and zero
biases unless ``fcnet_*_initializer`` / ``post_fcnet_*_initializer`` name others) in
``_hidden_layers``; a linear ``_logits`` layer (normc(0.01)); a linear ``_value_branch``
(normc(0.01), one unit) on the shared features, or on its own copy of the hidden stack
(``_value_branch_separate``) when ``vf_share_layers`` is False. rlblocks' model-config keys
``logits_weights_initializer`` / ``vf_weights_initializer`` (with their ``_config``) replace
the heads' normc(0.01) weights, e.g. with Stable-Baselines3's orthogonal gains 0.01 / 1.0.

Examples:
    >>> import gymnasium as gym, torch
    >>> m = FullyConnectedNetwork(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), 2,
    ...                           {"fcnet_hiddens": [32, 32]}, "fc")
    >>> out, _ = m({"obs": torch.zeros(7, 4)})
    >>> out.shape, m.value_function().shape
    (torch.Size([7, 2]), torch.Size([7]))
    >>> sum(p.numel() for p in m.parameters()) == (4*32+32) + (32*32+32) + (32*2+2) + (32+1)
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rlblocks.config import ModelConfig
from rlblocks.models.misc import (
    AppendBiasLayer,
    SlimFC,
    get_initializer,
    normc_initializer,
    torch_default_initializer,
)
from rlblocks.models.modelv2 import ModelV2, flatten_obs_space_size

__all__ = ["FullyConnectedNetwork"]


class FullyConnectedNetwork(ModelV2):
    """A multi-layer perceptron with a logits head and a value head.

    Args:
        obs_space: The flat observation space (its size is the input size).
        action_space: The action space.
        num_outputs: Logits size. None/0 means no logits layer: the output is the last
            hidden layer (or the input) and ``self.num_outputs`` becomes its size.
        model_config: RLlib model config (dict or :class:`ModelConfig`). Read:
            ``fcnet_hiddens``, ``fcnet_activation``, ``post_fcnet_hiddens``,
            ``post_fcnet_activation``, ``free_log_std`` and ``log_std_init`` (the free
            log-std's start), ``no_final_linear``,
            ``vf_share_layers`` and the ``fcnet_*`` / ``post_fcnet_*`` weight and bias
            initializers (for the hidden layers), ``logits_weights_initializer`` and
            ``vf_weights_initializer`` (the heads; unset: normc(0.01)).
        name: Model name.
        value_branch: Build the value head (False for feature extractors nested in other
            models; ``value_function()`` then raises).

    Raises:
        ValueError: ``free_log_std`` with an odd ``num_outputs``; a head initializer set for
            a head this net does not build (no logits layer, or ``value_branch=False``); a
            nonzero ``log_std_init`` without ``free_log_std`` and logits, or for an action
            space that is not a Box.
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any] | ModelConfig | None,
        name: str,
        *,
        value_branch: bool = True,
    ):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        cfg = self.config
        in_size = flatten_obs_space_size(obs_space)
        hiddens = list(cfg.fcnet_hiddens) + list(cfg.post_fcnet_hiddens)
        activation = cfg.fcnet_activation if cfg.fcnet_hiddens else cfg.post_fcnet_activation
        self.free_log_std = cfg.free_log_std
        n_out = self.num_outputs or 0
        if cfg.log_std_init != 0.0 and not isinstance(action_space, gym.spaces.Box):
            raise ValueError(
                f"log_std_init={cfg.log_std_init:g} sets the start of a Gaussian's log-std: the "
                f"action space must be a Box, got {type(action_space).__name__}; unset "
                "log_std_init"
            )
        if self.free_log_std and n_out:
            if n_out % 2:
                raise ValueError(
                    f"free_log_std=True needs an even num_outputs (means and log-stds), got {n_out}"
                )
            n_out //= 2

        inits = _hidden_initializers(cfg, len(hiddens))
        layers: list[nn.Module] = []
        prev = in_size
        for size, (w_init, b_init) in zip(hiddens[:-1], inits, strict=False):
            layers.append(SlimFC(prev, size, w_init, activation, bias_init=b_init))
            prev = size
        self._logits: SlimFC | None = None
        if not n_out or cfg.no_final_linear:
            _refuse_unbuilt_head(cfg, "logits", "logits layer (num_outputs 0 or no_final_linear)")
        if not value_branch:
            _refuse_unbuilt_head(cfg, "vf", "value head (value_branch=False)")
        if cfg.no_final_linear and n_out:
            w_init, b_init = inits[-1] if inits else (normc_initializer(1.0), 0.0)
            layers.append(SlimFC(prev, n_out, w_init, activation, bias_init=b_init))
            prev = n_out
        else:
            if hiddens:
                w_init, b_init = inits[-1]
                layers.append(SlimFC(prev, hiddens[-1], w_init, activation, bias_init=b_init))
                prev = hiddens[-1]
            if n_out:
                logits_init = _head_initializer(cfg, "logits")
                self._logits = SlimFC(
                    prev, n_out, logits_init, None, bias_init=_default_bias(logits_init)
                )
            else:
                self.num_outputs = prev
        self._append_free_log_std: AppendBiasLayer | None = None
        if self.free_log_std and n_out:
            # RLlib skips this with no_final_linear and then fails in forward(); here the
            # learned log-stds are appended in both layouts.
            self._append_free_log_std = AppendBiasLayer(n_out, cfg.log_std_init)
        elif cfg.log_std_init != 0.0:
            raise ValueError(
                f"log_std_init={cfg.log_std_init:g} sets the start of a free log-std: it needs "
                "free_log_std=True and logits to append it to (num_outputs > 0); this net's "
                "log-stds, if any, are outputs of its last layer: unset log_std_init"
            )
        self._hidden_layers = nn.Sequential(*layers)

        self._value_branch_separate: nn.Sequential | None = None
        self._value_branch: SlimFC | None = None
        if value_branch:
            vf_in = prev
            if not cfg.vf_share_layers:
                vf_layers: list[nn.Module] = []
                vf_in = in_size
                for size, (w_init, b_init) in zip(hiddens, inits, strict=True):
                    vf_layers.append(SlimFC(vf_in, size, w_init, activation, bias_init=b_init))
                    vf_in = size
                self._value_branch_separate = nn.Sequential(*vf_layers)
            vf_init = _head_initializer(cfg, "vf")
            self._value_branch = SlimFC(vf_in, 1, vf_init, None, bias_init=_default_bias(vf_init))
        self._features: torch.Tensor | None = None
        self._last_flat_in: torch.Tensor | None = None

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: torch.Tensor | None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        obs = input_dict["obs_flat"].float()
        flat = obs.reshape(obs.shape[0], -1)
        features = _run(self._hidden_layers, flat)
        # Plain attributes (kept for value_function); __dict__ skips nn.Module's slow setattr.
        self.__dict__["_last_flat_in"] = flat
        self.__dict__["_features"] = features
        out = _run(self._logits._model, features) if self._logits is not None else features
        if self._append_free_log_std is not None:
            out = self._append_free_log_std(out)
        return out, state

    def value_function(self) -> torch.Tensor:
        if self._value_branch is None:
            raise ValueError(f"{self.name}: built with value_branch=False, it has no value head")
        if self._features is None or self._last_flat_in is None:
            raise ValueError(f"{self.name}: call the model on a batch before value_function()")
        features = self._features
        if self._value_branch_separate is not None:
            features = _run(self._value_branch_separate, self._last_flat_in)
        return _run(self._value_branch._model, features).squeeze(1)


def _head_initializer(cfg: ModelConfig, head: str) -> Any:
    """The weight initializer of the ``"logits"`` or ``"vf"`` head: the config's
    ``<head>_weights_initializer`` (with its ``_config``), else RLlib's normc(0.01)."""
    chosen = get_initializer(
        cfg[f"{head}_weights_initializer"], cfg[f"{head}_weights_initializer_config"]
    )
    return chosen or normc_initializer(0.01)


def _default_bias(weight_init: Any) -> float | None:
    """The bias start that goes with a weight initializer when no bias initializer is set:
    torch's own (None) after ``"torch_default"`` weights, else RLlib's zero."""
    return None if weight_init is torch_default_initializer else 0.0


def _refuse_unbuilt_head(cfg: ModelConfig, head: str, why: str) -> None:
    """ValueError when ``<head>_weights_initializer`` is set for a head that is not built."""
    if cfg[f"{head}_weights_initializer"] is not None:
        raise ValueError(
            f"{head}_weights_initializer={cfg[f'{head}_weights_initializer']!r}: this "
            f"FullyConnectedNetwork builds no {why}, so nothing would read it; unset it"
        )


def _hidden_initializers(cfg: ModelConfig, n_layers: int) -> list[tuple[Any, Any]]:
    """``(weight, bias)`` initializers of each hidden layer: ``fcnet_*_initializer`` for the
    ``fcnet_hiddens`` layers, ``post_fcnet_*_initializer`` for the ``post_fcnet_hiddens``
    ones; unset keys keep RLlib's normc(1.0) weights and zero biases (torch's own bias
    under ``"torch_default"`` weights)."""
    n_fc = len(cfg.fcnet_hiddens)
    out = []
    for i in range(n_layers):
        prefix = "fcnet" if i < n_fc else "post_fcnet"
        w = get_initializer(
            cfg[f"{prefix}_weights_initializer"], cfg[f"{prefix}_weights_initializer_config"]
        )
        b = get_initializer(
            cfg[f"{prefix}_bias_initializer"], cfg[f"{prefix}_bias_initializer_config"]
        )
        out.append((w or normc_initializer(1.0), b or _default_bias(w)))
    return out


def _run(layers: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """Applies a Sequential of SlimFCs (or of plain layers) primitive by primitive.

    Calling the Linear/activation modules directly saves two module calls per SlimFC, which
    is most of the Python overhead at batch size 1; hooks on the primitives still run.
    """
    for layer in layers:
        if isinstance(layer, SlimFC):
            for primitive in layer._model:
                x = primitive(x)
        else:
            x = layer(x)
    return x
