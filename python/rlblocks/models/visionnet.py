"""``VisionNetwork``: RLlib's default CNN for image observations ``[B, H, W, C]``.

Layout (RLlib's, so parameter counts and state-dict keys match): every conv but the last
uses TF-"same" zero padding, the last one "valid"; all use ``conv_activation``
(``_convs``). The logits come from a 1x1 conv (``_logits``, xavier init, no activation)
whose ``[B, num_outputs, 1, 1]`` output is squeezed; with ``post_fcnet_hiddens`` the conv
features are flattened and go through normc(1.0) FC layers instead, the last of which is
``_logits``. The value head is ``_value_branch`` (one unit, normc(0.01)) on the shared
features, or a separate conv tower ending in a 1x1 conv (``_value_branch_separate``) when
``vf_share_layers`` is False.

Default filters: RLlib's ``get_filter_config`` table for the sizes it has (96, 84, 64, 42,
10 square), a derived stack ending at 1x1 for every other size, and for 64x64 when the
logits or a separate value tower need 1x1 (RLlib's 64x64 stack ends at 3x3) (difference 26:
:func:`~rlblocks.models.misc.default_filter_config`); the filters used are written back
into ``model_config["conv_filters"]`` (see :func:`resolved_conv_filters`).

Departure from RLlib (difference 18): the last post-FC hidden layer gets
``post_fcnet_activation`` (RLlib leaves it linear), and the shared value head sits on the
actual feature size when ``post_fcnet_hiddens`` is set (RLlib builds it for the conv
channels and fails at ``value_function()``). The "last conv must give 1x1" check runs when
the model is built, not at the first forward pass.

Examples:
    >>> import gymnasium as gym, torch
    >>> obs = gym.spaces.Box(0, 255, (84, 84, 4))
    >>> m = VisionNetwork(obs, gym.spaces.Discrete(6), 6, {}, "cnn")
    >>> out, _ = m({"obs": torch.zeros(2, 84, 84, 4)})
    >>> out.shape, m.value_function().shape
    (torch.Size([2, 6]), torch.Size([2]))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rlblocks.config import ConvFilter, ModelConfig
from rlblocks.models.misc import (
    SlimConv2d,
    SlimFC,
    default_filter_config,
    normc_initializer,
    same_padding,
)
from rlblocks.models.modelv2 import ModelV2

__all__ = ["VisionNetwork", "conv_stack_output_size", "resolved_conv_filters"]


def _valid_out(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1


def conv_stack_output_size(
    image_hw: Sequence[int], filters: Sequence[ConvFilter]
) -> tuple[int, int]:
    """Spatial size after ``filters`` ("same" padding for all but the last, "valid" last).

    Examples:
        >>> f = [ConvFilter.parse(x) for x in default_filter_config((84, 84, 4))]
        >>> conv_stack_output_size((84, 84), f)
        (1, 1)
    """
    h, w = int(image_hw[0]), int(image_hw[1])
    for f in filters[:-1]:
        _, (h, w) = same_padding((h, w), f.kernel, f.stride)
    last = filters[-1]
    return _valid_out(h, last.kernel[0], last.stride[0]), _valid_out(
        w, last.kernel[1], last.stride[1]
    )


def _conv_tower(
    in_hw: tuple[int, int],
    in_channels: int,
    filters: Sequence[ConvFilter],
    activation: Any,
    last_out_channels: int | None = None,
) -> list[nn.Module]:
    layers: list[nn.Module] = []
    size = in_hw
    for f in filters[:-1]:
        padding, size = same_padding(size, f.kernel, f.stride)
        layers.append(
            SlimConv2d(
                in_channels, f.out_channels, f.kernel, f.stride, padding, activation_fn=activation
            )
        )
        in_channels = f.out_channels
    last = filters[-1]
    out = last.out_channels if last_out_channels is None else last_out_channels
    layers.append(
        SlimConv2d(in_channels, out, last.kernel, last.stride, None, activation_fn=activation)
    )
    return layers


class VisionNetwork(ModelV2):
    """A conv net with a logits head and a value head, for ``[B, H, W, C]`` images.

    Args:
        obs_space: A rank-3 Box ``(H, W, C)``.
        action_space: The action space.
        num_outputs: Logits size, or None/0 to output the flattened conv features
            (``self.num_outputs`` becomes their size).
        model_config: RLlib model config (dict or :class:`ModelConfig`). Read:
            ``conv_filters`` (default: ``default_filter_config(obs_space.shape)``: RLlib's
            table for its sizes, a derived stack ending at 1x1 for any other),
            ``conv_activation``, ``post_fcnet_hiddens``, ``post_fcnet_activation``,
            ``no_final_linear``, ``vf_share_layers``.
        name: Model name.
        value_branch: Build the value head (False for feature extractors nested in other
            models; ``value_function()`` then raises).

    Raises:
        ValueError: The space is not a rank-3 Box, or the conv stack does not end at 1x1
            when it has to.
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
        shape = getattr(obs_space, "shape", None)
        if shape is None or len(shape) != 3:
            raise ValueError(
                f"VisionNetwork needs a rank-3 Box observation space (H, W, C), got {obs_space}"
            )
        if cfg.conv_filters:
            filters = tuple(cfg.conv_filters)
        else:
            need_1x1 = bool(self.num_outputs) or (value_branch and not cfg.vf_share_layers)
            filters = tuple(
                ConvFilter.parse(f) for f in default_filter_config(shape, need_1x1=need_1x1)
            )
        self.filters: tuple[ConvFilter, ...] = filters
        self.model_config["conv_filters"] = [f.to_list() for f in filters]
        activation = cfg.conv_activation
        post_hiddens = list(cfg.post_fcnet_hiddens)
        post_activation = cfg.post_fcnet_activation
        h, w, in_channels = (int(d) for d in shape)
        n_out = self.num_outputs or 0
        out_hw = conv_stack_output_size((h, w), filters)
        last = filters[-1]

        self._logits: nn.Module | None = None
        self.last_layer_is_flattened = False
        if cfg.no_final_linear and n_out:
            conv_out = last.out_channels if post_hiddens else n_out
            layers = _conv_tower((h, w), in_channels, filters, activation, conv_out)
            sizes = post_hiddens[:-1] + ([n_out] if post_hiddens else [])
            if sizes:
                self._check_1x1(out_hw, "the post-FC stack")
                layers.append(nn.Flatten())
                self.last_layer_is_flattened = True
                prev = conv_out
                for size in sizes:
                    layers.append(SlimFC(prev, size, normc_initializer(1.0), post_activation))
                    prev = size
            else:
                self._check_1x1(out_hw, "the outputs")
            feature_size = n_out
        else:
            layers = _conv_tower((h, w), in_channels, filters, activation)
            feature_size = last.out_channels
            if n_out:
                if post_hiddens:
                    self._check_1x1(out_hw, "the post-FC stack")
                    layers.append(nn.Flatten())
                    self.last_layer_is_flattened = True
                    prev = last.out_channels
                    for size in post_hiddens:
                        layers.append(SlimFC(prev, size, normc_initializer(1.0), post_activation))
                        prev = size
                    feature_size = prev
                    self._logits = SlimFC(prev, n_out, normc_initializer(1.0), None)
                else:
                    self._check_1x1(out_hw, "the logits")
                    self._logits = SlimConv2d(
                        last.out_channels, n_out, [1, 1], 1, (0, 0, 0, 0), activation_fn=None
                    )
            else:
                layers.append(nn.Flatten())
                self.last_layer_is_flattened = True
                feature_size = last.out_channels * out_hw[0] * out_hw[1]
                self.num_outputs = feature_size
        self._convs = nn.Sequential(*layers)

        self._value_branch_separate: nn.Sequential | None = None
        self._value_branch: SlimFC | None = None
        if value_branch:
            if cfg.vf_share_layers:
                self._value_branch = SlimFC(feature_size, 1, normc_initializer(0.01), None)
            else:
                self._check_1x1(out_hw, "the separate value tower")
                vf_layers = _conv_tower((h, w), in_channels, filters, activation)
                vf_layers.append(SlimConv2d(last.out_channels, 1, 1, 1, None, activation_fn=None))
                self._value_branch_separate = nn.Sequential(*vf_layers)
        self._features: torch.Tensor | None = None

    def _check_1x1(self, out_hw: tuple[int, int], what: str) -> None:
        if out_hw != (1, 1):
            raise ValueError(
                f"{self.name}: conv_filters {self.model_config['conv_filters']} turn the "
                f"{self.obs_space.shape} observation into a {out_hw[0]}x{out_hw[1]} "
                f"feature map, but {what} need it to be 1x1 (a [B, channels, 1, 1] output). "
                "Adjust the last filter's kernel/stride (e.g. kernel equal to the incoming "
                "spatial size with stride 1), or pass num_outputs=None to get flattened features."
            )

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: torch.Tensor | None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        images = input_dict["obs"].float().permute(0, 3, 1, 2)
        conv_out = self._convs(images)
        features = images if self._value_branch_separate is not None else conv_out
        self.__dict__["_features"] = features  # a plain attribute; skips nn.Module.__setattr__
        if self.last_layer_is_flattened:
            out = conv_out if self._logits is None else self._logits(conv_out)
            return out, state
        if self._logits is not None:
            conv_out = self._logits(conv_out)
        return conv_out.flatten(1), state

    def value_function(self) -> torch.Tensor:
        if self._value_branch is None and self._value_branch_separate is None:
            raise ValueError(f"{self.name}: built with value_branch=False, it has no value head")
        if self._features is None:
            raise ValueError(f"{self.name}: call the model on a batch before value_function()")
        if self._value_branch_separate is not None:
            return self._value_branch_separate(self._features).flatten(1).squeeze(1)
        assert self._value_branch is not None
        return self._value_branch(self._features.flatten(1)).squeeze(1)


def resolved_conv_filters(model: nn.Module) -> list[list[Any]] | None:
    """The ``conv_filters`` every :class:`VisionNetwork` inside ``model`` uses (the model
    itself, a wrapped model, the image encoders of a ComplexInputNetwork), in RLlib's list
    form; None when it holds none or they differ (images of different sizes).

    Examples:
        >>> m = VisionNetwork(gym.spaces.Box(0, 1, (7, 7, 3)), gym.spaces.Discrete(3), 3, {}, "v")
        >>> resolved_conv_filters(m)
        [[16, [3, 3], 1], [32, [3, 3], 1], [256, [7, 7], 1]]
    """
    found = {
        m.filters: [f.to_list() for f in m.filters]
        for m in model.modules()
        if isinstance(m, VisionNetwork)
    }
    return next(iter(found.values())) if len(found) == 1 else None
