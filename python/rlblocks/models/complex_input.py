"""``ComplexInputNetwork``: RLlib's default model for nested (Dict/Tuple) observations.

Each leaf of the original space (``flatten_space`` order: Dict keys sorted, Tuple in order)
gets its own encoder: a rank-3 Box goes through a :class:`VisionNetwork` (flattened conv
features), a Discrete/MultiDiscrete through a :class:`FullyConnectedNetwork` on its one-hot
(``fcnet_hiddens``), any other Box/MultiBinary through a FullyConnectedNetwork on its
flattened values. The encodings are concatenated and go through ``post_fc_stack`` (an FC
stack of ``post_fcnet_hiddens`` with ``post_fcnet_activation``), then a linear
``logits_layer`` and ``value_layer`` (normc(0.01)).

Departure from RLlib (DESIGN 17): the encoders are registered once (``cnns.<i>``,
``one_hot.<i>``, ``flatten.<i>``; RLlib also registers every one a second time under
``cnn_<i>`` etc.) and have no value heads (RLlib builds value towers that are never used),
so the parameter count is RLlib's minus those unused towers.

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
            ``post_fcnet_activation`` (post-FC stack), ``_disable_preprocessor_api``.
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
        self.cnns = nn.ModuleDict()
        self.one_hot = nn.ModuleDict()
        self.flatten = nn.ModuleDict()
        self.flatten_dims: dict[str, int] = {}
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
                self.cnns[key] = enc
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
                self.one_hot[key] = enc
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
                self.flatten[key] = enc
                self.flatten_dims[key] = size
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
        self.post_fc_stack = FullyConnectedNetwork(
            Box(-np.inf, np.inf, (concat_size,), np.float32),
            action_space,
            None,
            post_cfg,
            "post_fc_stack",
            value_branch=False,
        )
        features = self.post_fc_stack.num_outputs
        assert features is not None
        self.logits_layer: SlimFC | None = None
        self.value_layer: SlimFC | None = None
        if self.num_outputs:
            self.logits_layer = SlimFC(features, self.num_outputs, normc_initializer(0.01), None)
            self.value_layer = SlimFC(features, 1, normc_initializer(0.01), None)
        else:
            self.num_outputs = features
        self._value_out: torch.Tensor | None = None

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: torch.Tensor | None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        obs = input_dict["obs"]
        if isinstance(obs, torch.Tensor):
            from rlblocks.restore import restore_original_dimensions

            obs = restore_original_dimensions(obs, self.processed_obs_space, "torch")
        outs = []
        for i, (path, leaf) in enumerate(self._leaves):
            key = str(i)
            component = _leaf(obs, path)
            if key in self.cnns:
                out, _ = self.cnns[key]({"obs": component})
            elif key in self.one_hot:
                if not torch.is_floating_point(component):
                    from rlblocks.utils import torch_one_hot

                    component = torch_one_hot(component, leaf)
                out, _ = self.one_hot[key]({"obs": component})
            else:
                flat = component.reshape(-1, self.flatten_dims[key])
                out, _ = self.flatten[key]({"obs": flat})
            outs.append(out)
        out, _ = self.post_fc_stack({"obs": torch.cat(outs, dim=1)})
        if self.logits_layer is None or self.value_layer is None:
            return out, []
        self._value_out = self.value_layer(out).reshape(-1)
        return self.logits_layer(out), []

    def value_function(self) -> torch.Tensor:
        if self.value_layer is None:
            raise ValueError(f"{self.name}: built with num_outputs=None, it has no value head")
        if self._value_out is None:
            raise ValueError(f"{self.name}: call the model on a batch before value_function()")
        return self._value_out
