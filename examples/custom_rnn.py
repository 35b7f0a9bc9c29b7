"""Custom recurrent model: subclass RecurrentNetwork (forward_rnn, get_initial_state).

Re-creates RLlib's models guide, "Implementing custom Recurrent Networks" section: instead of
``use_lstm=True``, a model subclasses ``RecurrentNetwork`` and implements
``get_initial_state`` and ``forward_rnn``, which receives time-ranked ``[B, T, F]`` inputs
and the state, and returns ``[B, T, num_outputs]`` plus the new state. This one runs a
GRU after a dense layer. It is trained on ``RepeatAfterMe`` (echo the observation of the
previous step), which a memoryless policy cannot solve (its expected return is 0).

Run: ``python examples/custom_rnn.py`` (until mean return 80 of 100), ``--smoke`` for a
few seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import rlblocks.envs  # noqa: F401  (registers rlblocks/RepeatAfterMe-v0)
import torch
from _runner import budget, example_parser, report, train
from rlblocks.catalog import ModelCatalog
from rlblocks.models import RecurrentNetwork
from rlblocks.train import PPOConfig
from torch import nn


class GRUModel(RecurrentNetwork):
    """Dense(fc_size) -> GRU(hidden_size) -> logits and value heads.

    Args:
        obs_space: The (flattened) observation space.
        action_space: The action space.
        num_outputs: Logits size.
        model_config: The RLlib model config.
        name: Model name.
        fc_size: Width of the dense layer before the GRU.
        hidden_size: GRU state size.
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any],
        name: str,
        fc_size: int = 64,
        hidden_size: int = 64,
    ):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        in_size = int(torch.Size(obs_space.shape).numel())
        self.hidden_size = hidden_size
        self.fc = nn.Sequential(nn.Linear(in_size, fc_size), nn.ReLU())
        self.gru = nn.GRU(fc_size, hidden_size, batch_first=True)
        self.logits = nn.Linear(hidden_size, int(num_outputs or 0))
        self.value = nn.Linear(hidden_size, 1)
        self._features: torch.Tensor | None = None

    def get_initial_state(self) -> list[torch.Tensor]:
        return [torch.zeros(self.hidden_size)]

    def forward_rnn(
        self, inputs: torch.Tensor, state: list[torch.Tensor], seq_lens: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        x = self.fc(inputs)
        out, h = self.gru(x, state[0].unsqueeze(0))
        self._features = out
        return self.logits(out), [h.squeeze(0)]

    def value_function(self) -> torch.Tensor:
        assert self._features is not None, "call forward() first"
        return self.value(self._features).reshape(-1)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Trains PPO with the GRU model on RepeatAfterMe; returns the last result."""
    parser = example_parser(__doc__, stop_reward=80.0, stop_timesteps=300_000)
    args = parser.parse_args(argv)

    ModelCatalog.register_custom_model("gru_model", GRUModel)
    config = PPOConfig.from_dict(
        {
            "env": "rlblocks/RepeatAfterMe-v0",
            "env_config": {"repeat_delay": 1},
            "model": {"custom_model": "gru_model", "max_seq_len": 20},
            **budget(args.smoke, batch=(80, 2000), minibatch=(40, 500)),
            "lr": 1e-3,
            "gamma": 0.9,
            "seed": args.seed,
        }
    )
    result = train(config, args)
    report("custom RNN", result)
    return result


if __name__ == "__main__":
    main()
