"""Parametric actions: score action embeddings from the observation and mask illegal slots.

Re-creates RLlib's models guide, "Variable-length / Parametric Action Spaces" section. The
environment (``rlblocks/ParametricCartPole-v0``) returns a Dict observation with an
``action_mask``, one embedding per action slot (``avail_actions``) and the real CartPole
observation (``cart``); the two real actions move to random slots every step. The custom
model computes an intent vector from ``cart``, takes its dot product with every slot's
embedding, and adds ``max(log(mask), FLOAT_MIN)`` so that masked slots are never chosen
(the environment raises if one is). As the guide advises for PPO, no observation filter is
used and the value comes from the same network as the intent vector.

Run: ``python examples/parametric_actions.py`` (until mean return 475, about 100k steps),
``--smoke`` for a few seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import rlblocks.envs  # noqa: F401  (registers rlblocks/ParametricCartPole-v0)
import torch
from _runner import budget, example_parser, report, train
from rlblocks.catalog import ModelCatalog
from rlblocks.models import FullyConnectedNetwork, ModelV2
from rlblocks.train import PPOConfig

FLOAT_MIN = float(torch.finfo(torch.float32).min)


class ParametricActionsModel(ModelV2):
    """Logits = ``avail_actions · intent(cart) + max(log(action_mask), FLOAT_MIN)``.

    Args:
        obs_space: The flattened Dict space (its ``original_space`` has the three keys).
        action_space: ``Discrete(max_avail_actions)``.
        num_outputs: ``max_avail_actions``.
        model_config: The RLlib model config (used by the intent network).
        name: Model name.
        action_embed_size: Size of the action embeddings.
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any],
        name: str,
        action_embed_size: int = 2,
    ):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        original = getattr(obs_space, "original_space", obs_space)
        cart_space = original["cart"]
        self.action_embed_model = FullyConnectedNetwork(
            gym.spaces.Box(-np.inf, np.inf, cart_space.shape, np.float32),
            action_space,
            action_embed_size,
            model_config,
            f"{name}_action_embed",
        )

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: Any
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        obs = input_dict["obs"]
        intent, _ = self.action_embed_model({"obs": obs["cart"].float()})
        # [B, A, E] * [B, 1, E] summed over E -> one logit per slot, [B, A].
        logits = (obs["avail_actions"].float() * intent.unsqueeze(1)).sum(-1)
        inf_mask = torch.clamp(torch.log(obs["action_mask"].float()), min=FLOAT_MIN)
        return logits + inf_mask, state

    def value_function(self) -> torch.Tensor:
        return self.action_embed_model.value_function()


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Trains PPO on ParametricCartPole; returns the last training result."""
    parser = example_parser(__doc__, stop_reward=475.0, stop_timesteps=300_000)
    args = parser.parse_args(argv)

    ModelCatalog.register_custom_model("parametric_actions", ParametricActionsModel)
    config = PPOConfig.from_dict(
        {
            "env": "rlblocks/ParametricCartPole-v0",
            "env_config": {"max_avail_actions": 10},
            "model": {"custom_model": "parametric_actions", "vf_share_layers": True},
            "observation_filter": "NoFilter",
            **budget(args.smoke, batch=(64, 1024), minibatch=(32, 256)),
            "lr": 1e-3,
            # The value shares the intent network: a small value weight keeps its large
            # targets from drowning the policy gradient there.
            "vf_loss_coeff": 0.01,
            "seed": args.seed,
        }
    )
    result = train(config, args)
    report("parametric actions", result)
    return result


if __name__ == "__main__":
    main()
