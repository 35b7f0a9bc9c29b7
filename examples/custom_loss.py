"""Supervised and self-supervised losses mixed into PPO through ``ModelV2.custom_loss``.

Re-creates RLlib's models guide, "Supervised Model Losses" and "Self-Supervised Model Losses"
sections on CartPole:

* ``--loss imitation``: an expert (a hand-written linear controller that balances the
  pole) plays some episodes; its observations and actions are written to an ``.npz`` file,
  standing in for offline storage. The model's ``custom_loss`` reads a minibatch from that
  file's data and adds a behaviour-cloning loss (negative log-likelihood of the expert's
  actions) to the PPO loss.
* ``--loss autoencoder``: the model's ``custom_loss`` adds a reconstruction loss: a
  decoder must rebuild the observation from the policy's hidden features.

``metrics()`` reports the extra loss. Run: ``python examples/custom_loss.py --loss
imitation`` (until mean return 475), ``--smoke`` for a few seconds.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from _runner import budget, example_parser, report, train
from rlblocks.catalog import ModelCatalog
from rlblocks.models import ModelV2
from rlblocks.train import PPOConfig
from torch import nn

#: The expert: push right when ``3 * theta + theta_dot > 0`` (balances CartPole for 500 steps).
EXPERT_GAINS = np.array([0.0, 0.0, 3.0, 1.0])


def write_expert_data(path: Path, episodes: int, seed: int = 0) -> int:
    """Plays the expert on CartPole-v1 and saves ``obs`` and ``actions`` to ``path``."""
    env = gym.make("CartPole-v1")
    obs_list, act_list = [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done = False
        while not done:
            action = int(EXPERT_GAINS @ obs > 0)
            obs_list.append(obs)
            act_list.append(action)
            obs, _, term, trunc, _ = env.step(action)
            done = term or trunc
    np.savez(path, obs=np.asarray(obs_list, np.float32), actions=np.asarray(act_list))
    return len(act_list)


class AuxLossModel(ModelV2):
    """Tanh MLP policy/value with an imitation or reconstruction loss in ``custom_loss``.

    Args:
        obs_space: A 1-D Box.
        action_space: ``Discrete(k)``.
        num_outputs: Logits size.
        model_config: The RLlib model config.
        name: Model name.
        loss: ``"imitation"`` or ``"autoencoder"``.
        expert_path: ``.npz`` with ``obs`` and ``actions`` (imitation only).
        aux_coeff: Weight of the extra loss.
        batch_size: Expert rows per loss evaluation.
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any],
        name: str,
        loss: str = "imitation",
        expert_path: str | None = None,
        aux_coeff: float = 1.0,
        batch_size: int = 128,
    ):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        if loss not in ("imitation", "autoencoder"):
            raise ValueError(f"loss must be 'imitation' or 'autoencoder', got {loss!r}")
        if loss == "imitation" and expert_path is None:
            raise ValueError("the imitation loss needs expert_path")
        obs_size = int(torch.Size(obs_space.shape).numel())
        self.torso = nn.Sequential(nn.Linear(obs_size, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
        self.logits = nn.Linear(64, int(num_outputs or 0))
        self.value_net = nn.Sequential(
            nn.Linear(obs_size, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1)
        )
        self.decoder = nn.Linear(64, obs_size)
        self.loss_kind, self.aux_coeff, self.batch_size = loss, aux_coeff, batch_size
        self.expert: dict[str, torch.Tensor] = {}
        if expert_path is not None:
            with np.load(expert_path) as data:
                self.expert = {k: torch.as_tensor(data[k]) for k in ("obs", "actions")}
        self._value: torch.Tensor | None = None
        self._aux_loss = 0.0
        self._rng = torch.Generator().manual_seed(0)

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: Any
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        obs = input_dict["obs_flat"].float()
        self._value = self.value_net(obs).squeeze(-1)
        return self.logits(self.torso(obs)), state

    def value_function(self) -> torch.Tensor:
        assert self._value is not None, "call forward() first"
        return self._value

    def custom_loss(self, policy_loss: Any, loss_inputs: Any) -> Any:
        if self.loss_kind == "imitation":
            rows = torch.randint(
                len(self.expert["actions"]), (self.batch_size,), generator=self._rng
            )
            logits = self.logits(self.torso(self.expert["obs"][rows]))
            aux = nn.functional.cross_entropy(logits, self.expert["actions"][rows])
        else:
            obs = torch.as_tensor(loss_inputs["obs"]).float().flatten(1)
            aux = nn.functional.mse_loss(self.decoder(self.torso(obs)), obs)
        self._aux_loss = float(aux.detach())
        return policy_loss + self.aux_coeff * aux

    def metrics(self) -> dict[str, Any]:
        return {f"{self.loss_kind}_loss": self._aux_loss}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Trains PPO on CartPole with an extra loss; returns the last training result."""
    parser = example_parser(__doc__, stop_reward=475.0, stop_timesteps=200_000)
    parser.add_argument("--loss", choices=["imitation", "autoencoder"], default="imitation")
    parser.add_argument("--expert-episodes", type=int, default=10)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        expert_path = Path(tmp) / "expert.npz"
        model_kwargs: dict[str, Any] = {"loss": args.loss}
        if args.loss == "imitation":
            rows = write_expert_data(expert_path, 1 if args.smoke else args.expert_episodes)
            print(f"expert data: {rows} steps in {expert_path.name}")
            model_kwargs["expert_path"] = str(expert_path)
        ModelCatalog.register_custom_model("aux_loss_model", AuxLossModel)
        config = PPOConfig.from_dict(
            {
                "env": "CartPole-v1",
                "model": {"custom_model": "aux_loss_model", "custom_model_config": model_kwargs},
                **budget(args.smoke, batch=(64, 1024), minibatch=(32, 256)),
                "lr": 1e-3,
                "seed": args.seed,
            }
        )
        result = train(config, args)
    aux_key = f"{args.loss}_loss"  # the trainer copies model.metrics() into the result
    report(f"custom loss ({args.loss})", result, f", {aux_key} {result.get(aux_key)}")
    return result


if __name__ == "__main__":
    main()
