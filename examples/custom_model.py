"""Custom PyTorch model: subclass ModelV2, register it, train it with PPO on CartPole.

Re-creates RLlib's models guide, "Custom Models: Implementing your own Forward Logic" / "Custom
PyTorch Models" section: a model class implementing ``__init__``, ``forward`` and
``value_function`` is registered with ``ModelCatalog.register_custom_model`` and chosen
through ``model["custom_model"]``; ``model["custom_model_config"]`` reaches its
constructor as keyword arguments. Here the policy logits come from a built-in
``FullyConnectedNetwork`` and the value comes from a separate branch of our own.

Run: ``python examples/custom_model.py`` (until mean return 475), ``--smoke`` for a few
seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import torch
from _runner import budget, example_parser, report, train
from rlblocks.catalog import ModelCatalog
from rlblocks.models import FullyConnectedNetwork, ModelV2
from rlblocks.train import PPOConfig
from torch import nn


class PolicyAndValueModel(ModelV2):
    """Logits from a built-in FC network; the value from our own tanh MLP.

    Args:
        obs_space: The observation space.
        action_space: The action space.
        num_outputs: Logits size.
        model_config: The RLlib model config.
        name: Model name.
        value_hidden: Width of the value branch (from ``custom_model_config``).
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any],
        name: str,
        value_hidden: int = 64,
    ):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.policy = FullyConnectedNetwork(
            obs_space, action_space, num_outputs, model_config, f"{name}_policy"
        )
        in_size = int(torch.Size(obs_space.shape).numel())
        self.value_branch = nn.Sequential(
            nn.Linear(in_size, value_hidden),
            nn.Tanh(),
            nn.Linear(value_hidden, value_hidden),
            nn.Tanh(),
            nn.Linear(value_hidden, 1),
        )
        self._value: torch.Tensor | None = None

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: Any
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        obs = input_dict["obs_flat"].float()
        logits, _ = self.policy({"obs": obs})
        self._value = self.value_branch(obs).squeeze(-1)
        return logits, state

    def value_function(self) -> torch.Tensor:
        assert self._value is not None, "call forward() first"
        return self._value


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Trains PPO with the custom model; returns the last training result."""
    parser = example_parser(__doc__, stop_reward=475.0, stop_timesteps=200_000)
    args = parser.parse_args(argv)

    ModelCatalog.register_custom_model("policy_and_value", PolicyAndValueModel)
    config = PPOConfig.from_dict(
        {
            "env": "CartPole-v1",
            "model": {
                "custom_model": "policy_and_value",
                "custom_model_config": {"value_hidden": 64},
                "fcnet_hiddens": [64, 64],
                "fcnet_activation": "tanh",
            },
            **budget(args.smoke, batch=(64, 1024), minibatch=(32, 256)),
            "lr": 1e-3,
            "seed": args.seed,
        }
    )
    result = train(config, args)
    report("custom model", result)
    return result


if __name__ == "__main__":
    main()
