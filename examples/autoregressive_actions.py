"""Autoregressive actions: sample ``a1``, then ``a2`` conditioned on it, ``P(a1) P(a2 | a1)``.

Re-creates RLlib's models guide, "Autoregressive Action Distributions" section on its correlated-
actions task (``rlblocks/CorrelatedActions-v0``: observe a bit, reward 5 for ``a1 == obs``
plus 5 for ``a2 == a1``). The custom model outputs a 16-wide context vector encoding the
observation and exposes ``action_model(context, actions)`` returning the logits of ``a1``
(from the context) and of ``a2`` (from the context and ``a1``). The library's
``BinaryAutoregressiveDistribution`` drives it: sampling calls the action model once per
component, ``logp`` once with both actions.

Run: ``python examples/autoregressive_actions.py`` (until mean return 190 of 200),
``--smoke`` for a few seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import rlblocks.envs  # noqa: F401  (registers rlblocks/CorrelatedActions-v0)
import torch
from _runner import budget, example_parser, report, train
from rlblocks.catalog import ModelCatalog
from rlblocks.distributions import BinaryAutoregressiveDistribution
from rlblocks.models import ModelV2
from rlblocks.models.misc import normc_initializer
from rlblocks.train import PPOConfig
from torch import nn


def _dense(in_size: int, out_size: int, std: float) -> nn.Linear:
    layer = nn.Linear(in_size, out_size)
    normc_initializer(std)(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


class AutoregressiveActionsModel(ModelV2):
    """Context = tanh(Dense(obs)); a1 logits from the context; a2 logits from (context, a1).

    Args:
        obs_space: The (one-hot) observation space.
        action_space: ``Tuple(Discrete(2), Discrete(2))``.
        num_outputs: Context size (16, from the distribution).
        model_config: The RLlib model config.
        name: Model name.

    Raises:
        ValueError: Another action space.
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any],
        name: str,
    ):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        expected = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(2)))
        if action_space != expected:
            raise ValueError(f"this model only supports {expected}, got {action_space}")
        in_size = int(torch.Size(obs_space.shape).numel())
        ctx = int(num_outputs or 16)
        self.context_net = nn.Sequential(_dense(in_size, ctx, 1.0), nn.Tanh())
        self.value_branch = _dense(ctx, 1, 0.01)
        self.a1_logits = _dense(ctx, 2, 0.01)
        self.a2_hidden = nn.Sequential(_dense(ctx + 1, 16, 1.0), nn.Tanh())
        self.a2_logits = _dense(16, 2, 0.01)
        self._context: torch.Tensor | None = None

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: Any
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        self._context = self.context_net(input_dict["obs_flat"].float())
        return self._context, state

    def value_function(self) -> torch.Tensor:
        assert self._context is not None, "call forward() first"
        return self.value_branch(self._context).squeeze(-1)

    def action_model(
        self, context: torch.Tensor, actions: list[torch.Tensor]
    ) -> list[torch.Tensor]:
        """Logits of ``a1`` and of ``a2 | a1``; ``actions[0]`` is ``a1`` (zeros when unset)."""
        a1 = actions[0].float().unsqueeze(-1)
        a2_logits = self.a2_logits(self.a2_hidden(torch.cat([context, a1], -1)))
        return [self.a1_logits(context), a2_logits]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Trains PPO with the autoregressive model and distribution; returns the last result."""
    parser = example_parser(__doc__, stop_reward=190.0, stop_timesteps=200_000)
    args = parser.parse_args(argv)

    ModelCatalog.register_custom_model("autoregressive_model", AutoregressiveActionsModel)
    ModelCatalog.register_custom_action_dist("binary_autoreg", BinaryAutoregressiveDistribution)
    config = PPOConfig.from_dict(
        {
            "env": "rlblocks/CorrelatedActions-v0",
            "model": {
                "custom_model": "autoregressive_model",
                "custom_action_dist": "binary_autoreg",
            },
            **budget(args.smoke, batch=(80, 1600), minibatch=(40, 400)),
            "lr": 1e-3,
            "gamma": 0.5,  # the reward is immediate: a short horizon keeps the credit clear
            "seed": args.seed,
        }
    )
    result = train(config, args)
    report("autoregressive actions", result, " (max 200)")
    return result


if __name__ == "__main__":
    main()
