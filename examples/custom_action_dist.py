"""Custom action distribution: an epsilon-smoothed categorical, registered by name.

Re-creates RLlib's models guide, "Custom Action Distributions" section: a subclass of
``ActionDistribution`` defines ``required_model_output_shape`` (how many model outputs it
needs), ``sample``, ``logp``, ``entropy`` (and ``kl``, ``deterministic_sample``), is
registered with ``ModelCatalog.register_custom_action_dist`` and picked through
``model["custom_action_dist"]``. The distribution receives the model, and reads its
``epsilon`` from ``model.model_config["custom_model_config"]``: every action keeps at
least ``epsilon / n`` probability, ``p = (1 - epsilon) * softmax(logits) + epsilon / n``.

Run: ``python examples/custom_action_dist.py`` (CartPole until mean return 475),
``--smoke`` for a few seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import torch
from _runner import budget, example_parser, report, train
from rlblocks.catalog import ModelCatalog
from rlblocks.distributions import ActionDistribution
from rlblocks.train import PPOConfig


class EpsilonCategorical(ActionDistribution):
    """``(1 - epsilon) * softmax(logits) + epsilon / n`` over ``Discrete(n)``.

    Args:
        inputs: ``[B, n]`` logits.
        model: The model; ``model.model_config["custom_model_config"]["epsilon"]``
            (default 0.05) sets the smoothing.
    """

    def __init__(self, inputs: Any, model: Any = None):
        super().__init__(inputs, model)
        custom = (getattr(model, "model_config", None) or {}).get("custom_model_config") or {}
        self.epsilon = float(custom.get("epsilon", 0.05))
        n = self.inputs.shape[-1]
        probs = (1.0 - self.epsilon) * torch.softmax(self.inputs, -1) + self.epsilon / n
        self.log_probs = probs.log()

    @staticmethod
    def required_model_output_shape(action_space: gym.Space, model_config: Any) -> int:
        assert isinstance(action_space, gym.spaces.Discrete)
        return int(action_space.n)

    def sample(self) -> torch.Tensor:
        self.last_sample = torch.multinomial(self.log_probs.exp(), 1).squeeze(-1)
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        return self.log_probs.argmax(-1)

    def logp(self, actions: Any) -> torch.Tensor:
        idx = torch.as_tensor(actions, device=self.inputs.device).long().unsqueeze(-1)
        return self.log_probs.gather(-1, idx).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.log_probs.exp() * self.log_probs).sum(-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        assert isinstance(other, EpsilonCategorical)
        return (self.log_probs.exp() * (self.log_probs - other.log_probs)).sum(-1)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Trains PPO on CartPole with the custom distribution; returns the last result."""
    parser = example_parser(__doc__, stop_reward=475.0, stop_timesteps=200_000)
    args = parser.parse_args(argv)

    ModelCatalog.register_custom_action_dist("epsilon_categorical", EpsilonCategorical)
    config = PPOConfig.from_dict(
        {
            "env": "CartPole-v1",
            "model": {
                "custom_action_dist": "epsilon_categorical",
                "custom_model_config": {"epsilon": 0.02},
            },
            **budget(args.smoke, batch=(64, 1024), minibatch=(32, 256)),
            "lr": 1e-3,
            "seed": args.seed,
        }
    )
    result = train(config, args)
    report("custom action dist", result)
    return result


if __name__ == "__main__":
    main()
