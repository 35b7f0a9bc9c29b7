"""Frame stacking through view requirements: the model asks for the last n observations.

Re-creates RLlib's models guide, "Using the Trajectory View API" example: a plain feed-forward model
declares in ``view_requirements`` that it reads ``obs`` at shifts ``-(n-1):0`` (the last
n observations, current one included) and ``actions`` / ``rewards`` at ``-n:-1``; the
trainer then builds those columns (``prev_n_obs``, ``prev_n_actions``, ``prev_n_rewards``)
for it, with no RNN state. On ``rlblocks/StatelessCartPole-v0`` (velocities hidden) the
stacked positions let the model recover the velocities.

Run: ``python examples/framestack_model.py`` (until mean return 150), ``--smoke`` for a
few seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import rlblocks.envs  # noqa: F401  (registers rlblocks/StatelessCartPole-v0)
import torch
from _runner import budget, example_parser, report, train
from rlblocks.catalog import ModelCatalog
from rlblocks.models import ModelV2
from rlblocks.train import PPOConfig
from rlblocks.views import ViewRequirement
from torch import nn


class StackedFramesModel(ModelV2):
    """MLP over the last ``num_frames`` observations, one-hot actions and rewards.

    Args:
        obs_space: A 1-D Box.
        action_space: ``Discrete(k)``.
        num_outputs: Logits size.
        model_config: The RLlib model config.
        name: Model name.
        num_frames: How many steps of history the model sees.
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any],
        name: str,
        num_frames: int = 4,
    ):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        assert isinstance(action_space, gym.spaces.Discrete)
        self.num_frames = n = num_frames
        self.num_actions = int(action_space.n)
        obs_size = int(torch.Size(obs_space.shape).numel())
        in_size = n * (obs_size + self.num_actions + 1)
        self.torso = nn.Sequential(nn.Linear(in_size, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
        self.logits = nn.Linear(64, int(num_outputs or 0))
        self.value = nn.Linear(64, 1)
        self._features: torch.Tensor | None = None
        self.view_requirements["prev_n_obs"] = ViewRequirement(
            "obs", shift=f"-{n - 1}:0", space=obs_space
        )
        self.view_requirements["prev_n_actions"] = ViewRequirement(
            "actions", shift=f"-{n}:-1", space=action_space
        )
        self.view_requirements["prev_n_rewards"] = ViewRequirement("rewards", shift=f"-{n}:-1")

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: Any
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        obs = torch.as_tensor(input_dict["prev_n_obs"]).float().flatten(1)
        actions = torch.as_tensor(input_dict["prev_n_actions"]).long()
        one_hot = nn.functional.one_hot(actions, self.num_actions).float().flatten(1)
        rewards = torch.as_tensor(input_dict["prev_n_rewards"]).float()
        self._features = self.torso(torch.cat([obs, one_hot, rewards], -1))
        return self.logits(self._features), state

    def value_function(self) -> torch.Tensor:
        assert self._features is not None, "call forward() first"
        return self.value(self._features).squeeze(-1)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Trains PPO with the frame-stacking model on StatelessCartPole; returns the result."""
    parser = example_parser(__doc__, stop_reward=150.0, stop_timesteps=300_000)
    args = parser.parse_args(argv)

    ModelCatalog.register_custom_model("stacked_frames", StackedFramesModel)
    config = PPOConfig.from_dict(
        {
            "env": "rlblocks/StatelessCartPole-v0",
            "model": {"custom_model": "stacked_frames", "custom_model_config": {"num_frames": 4}},
            **budget(args.smoke, batch=(64, 2048), minibatch=(32, 256)),
            "lr": 1e-3,
            "seed": args.seed,
        }
    )
    result = train(config, args)
    report("frame-stacking model", result)
    return result


if __name__ == "__main__":
    main()
