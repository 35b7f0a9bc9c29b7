"""``ComplexInputNetwork``: RLlib's default model for nested (Dict/Tuple) observations.

Each leaf of the original space (``flatten_space`` order: Dict keys sorted, Tuple in order)
gets its own encoder: a rank-3 Box goes through a :class:`VisionNetwork` (flattened conv
features), a Discrete/MultiDiscrete through a :class:`FullyConnectedNetwork` on its one-hot
(``fcnet_hiddens``), any other Box/MultiBinary through a FullyConnectedNetwork on its
flattened values. The encodings are concatenated and go through ``post_fc_stack`` (an FC
stack of ``post_fcnet_hiddens`` with ``post_fcnet_activation``), then a linear
``logits_layer`` and ``value_layer`` (normc(0.01)).

Departure from RLlib (difference 18): the encoders are registered once (``cnns.<i>``,
``one_hot.<i>``, ``flatten.<i>``; RLlib also registers every one a second time under
``cnn_<i>`` etc.) and have no value heads (RLlib builds value towers that are never used),
so the parameter count is RLlib's minus those unused towers.

``vf_share_layers`` (difference 25; RLlib ignores the key here and always shares): when
False, ``value_layer`` sits on ``value_trunk``, a second set of encoders and post-FC stack of
the same architecture (``value_trunk.cnns.<i>``, ``value_trunk.post_fc_stack``, ...), so the
value loss never changes the policy's layers.

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks import get_preprocessor
    >>> space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (3,)),
    ...                          "kind": gym.spaces.Discrete(4)})
    >>> flat = get_preprocessor(space)(space).observation_space
    >>> m = ComplexInputNetwork(flat, gym.spaces.Discrete(2), 2, {"fcnet_hiddens": [8]}, "c")
    >>> out, _ = m({"obs": torch.zeros(5, 7)})
    >>> out.shape, m.value_function().shape
    (torch.Size([5, 2]), torch.Size([5]))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box, Discrete, MultiBinary, MultiDiscrete
from torch import nn

from rlblocks.config import ModelConfig
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.models.misc import SlimFC, normc_initializer
from rlblocks.models.modelv2 import ModelV2
from rlblocks.models.visionnet import VisionNetwork
from rlblocks.spaces import space_path_items

__all__ = ["ComplexInputNetwork"]


def _leaf(obs: Any, path: tuple) -> Any:
    for key in path:
        obs = obs[key]
    return obs


class _Trunk(nn.Module):
    """The value function's own encoders and post-FC stack (``vf_share_layers`` False)."""

    def __init__(
        self,
        cnns: nn.ModuleDict,
        one_hot: nn.ModuleDict,
        flatten: nn.ModuleDict,
        post_fc_stack: FullyConnectedNetwork,
    ):
        super().__init__()
        self.cnns, self.one_hot, self.flatten = cnns, one_hot, flatten
        self.post_fc_stack = post_fc_stack


class ComplexInputNetwork(ModelV2):
    """Per-component encoders, concatenation, a post-FC stack, logits and value heads.

    Args:
        obs_space: The flattening preprocessor's observation space (carrying
            ``original_space``) or the nested Dict/Tuple space itself.
        action_space: The action space.
        num_outputs: Logits size, or None/0 to output the post-FC-stack features.
        model_config: RLlib model config (dict or :class:`ModelConfig`). Read:
            ``conv_filters``, ``conv_activation`` (image encoders), ``fcnet_hiddens``,
            ``fcnet_activation`` (other encoders), ``post_fcnet_hiddens``,
            ``post_fcnet_activation`` (post-FC stack), ``vf_share_layers``,
            ``_disable_preprocessor_api``.
        name: Model name.

    Raises:
        ValueError: A component that no encoder supports (Repeated, Text, ...).
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any] | ModelConfig | None,
        name: str,
    ):
        original = getattr(obs_space, "original_space", obs_space)
        super().__init__(original, action_space, num_outputs, model_config, name)
        cfg = self.config
        self.original_space = original
        self.processed_obs_space = original if cfg.disable_preprocessor_api else obs_space
        self._leaves: list[tuple[tuple, gym.Space]] = space_path_items(
            original, sort_dict_keys=True
        )
        self.cnns, self.one_hot, self.flatten, self.post_fc_stack = self._build_trunk(cfg)
        self.flatten_dims: dict[str, int] = {
            str(i): int(np.prod(leaf.shape or (), dtype=np.int64))
            for i, (_, leaf) in enumerate(self._leaves)
            if str(i) in self.flatten
        }
        features = self.post_fc_stack.num_outputs
        assert features is not None
        self.logits_layer: SlimFC | None = None
        self.value_layer: SlimFC | None = None
        if self.num_outputs:
            self.logits_layer = SlimFC(features, self.num_outputs, normc_initializer(0.01), None)
            self.value_layer = SlimFC(features, 1, normc_initializer(0.01), None)
        else:
            self.num_outputs = features
        # vf_share_layers False: the value head sits on its own copy of the encoders and the
        # post-FC stack (difference 25), so the value loss never reaches the policy's layers.
        self.value_trunk: _Trunk | None = None
        if not cfg.vf_share_layers and self.value_layer is not None:
            self.value_trunk = _Trunk(*self._build_trunk(cfg))
        self._value_out: torch.Tensor | None = None

    def _build_trunk(
        self, cfg: ModelConfig
    ) -> tuple[nn.ModuleDict, nn.ModuleDict, nn.ModuleDict, FullyConnectedNetwork]:
        """One set of per-component encoders (cnns, one_hot, flatten) and the post-FC stack."""
        action_space = self.action_space
        cnns, one_hot, flatten = nn.ModuleDict(), nn.ModuleDict(), nn.ModuleDict()
        encoder_cfg = ModelConfig.from_dict(
            {
                "fcnet_hiddens": list(cfg.fcnet_hiddens),
                "fcnet_activation": cfg.fcnet_activation,
                "conv_filters": cfg["conv_filters"],
                "conv_activation": cfg.conv_activation,
                "post_fcnet_hiddens": [],
            }
        )
        concat_size = 0
        for i, (path, leaf) in enumerate(self._leaves):
            key = str(i)
            where = "obs" + "".join(f"[{p!r}]" for p in path)
            if isinstance(leaf, Box) and len(leaf.shape) == 3:
                enc: ModelV2 = VisionNetwork(
                    leaf, action_space, None, encoder_cfg, f"cnn_{i}", value_branch=False
                )
                cnns[key] = enc
            elif isinstance(leaf, (Discrete, MultiDiscrete)):
                size = int(leaf.n) if isinstance(leaf, Discrete) else int(np.sum(leaf.nvec))
                enc = FullyConnectedNetwork(
                    Box(-1.0, 1.0, (size,), np.float32),
                    action_space,
                    None,
                    encoder_cfg,
                    f"one_hot_{i}",
                    value_branch=False,
                )
                one_hot[key] = enc
            elif isinstance(leaf, (Box, MultiBinary)):
                size = int(np.prod(leaf.shape, dtype=np.int64))
                enc = FullyConnectedNetwork(
                    Box(-1.0, 1.0, (size,), np.float32),
                    action_space,
                    None,
                    encoder_cfg,
                    f"flatten_{i}",
                    value_branch=False,
                )
                flatten[key] = enc
            else:
                raise ValueError(
                    f"ComplexInputNetwork: component {where} is a {type(leaf).__name__}; "
                    "supported components are Box (rank 3 -> CNN, others -> FC), Discrete, "
                    "MultiDiscrete and MultiBinary. Write a custom model for this space."
                )
            assert enc.num_outputs is not None
            concat_size += enc.num_outputs
        self.concat_size = concat_size

        post_cfg = ModelConfig.from_dict(
            {
                "fcnet_hiddens": list(cfg.post_fcnet_hiddens),
                "fcnet_activation": cfg.post_fcnet_activation,
                "post_fcnet_hiddens": [],
            }
        )
        post_fc_stack = FullyConnectedNetwork(
            Box(-np.inf, np.inf, (concat_size,), np.float32),
            action_space,
            None,
            post_cfg,
            "post_fc_stack",
            value_branch=False,
        )
        return cnns, one_hot, flatten, post_fc_stack

    def _encode(
        self,
        obs: Any,
        cnns: nn.ModuleDict,
        one_hot: nn.ModuleDict,
        flatten: nn.ModuleDict,
        post_fc_stack: nn.Module,
    ) -> torch.Tensor:
        outs = []
        for i, (path, leaf) in enumerate(self._leaves):
            key = str(i)
            component = _leaf(obs, path)
            if key in cnns:
                out, _ = cnns[key]({"obs": component})
            elif key in one_hot:
                if not torch.is_floating_point(component):
                    from rlblocks.utils import torch_one_hot

                    component = torch_one_hot(component, leaf)
                out, _ = one_hot[key]({"obs": component})
            else:
                flat = component.reshape(-1, self.flatten_dims[key])
                out, _ = flatten[key]({"obs": flat})
            outs.append(out)
        out, _ = post_fc_stack({"obs": torch.cat(outs, dim=1)})
        return out

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: torch.Tensor | None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        obs = input_dict["obs"]
        if isinstance(obs, torch.Tensor):
            from rlblocks.restore import restore_original_dimensions

            obs = restore_original_dimensions(obs, self.processed_obs_space, "torch")
        out = self._encode(obs, self.cnns, self.one_hot, self.flatten, self.post_fc_stack)
        if self.logits_layer is None or self.value_layer is None:
            return out, []
        vt = self.value_trunk
        value_features = (
            out
            if vt is None
            else self._encode(obs, vt.cnns, vt.one_hot, vt.flatten, vt.post_fc_stack)
        )
        self._value_out = self.value_layer(value_features).reshape(-1)
        return self.logits_layer(out), []

    def value_function(self) -> torch.Tensor:
        if self.value_layer is None:
            raise ValueError(f"{self.name}: built with num_outputs=None, it has no value head")
        if self._value_out is None:
            raise ValueError(f"{self.name}: call the model on a batch before value_function()")
        return self._value_out
