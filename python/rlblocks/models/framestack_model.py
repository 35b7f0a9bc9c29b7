"""The frame-stacking model of RLlib's models guide: the last n observations, actions and
rewards as inputs.

A feed-forward model that asks for history through view requirements instead of an RNN
(RLlib's ``TorchFrameStackingCartPoleModel`` from
``examples/models/trajectory_view_utilizing_models.py``):

* ``prev_n_obs``: column ``obs`` at shifts ``-(n-1):0`` (the current one included),
* ``prev_n_rewards``: column ``rewards`` at shifts ``-n:-1``,
* ``prev_n_actions``: column ``actions`` at shifts ``-n:-1`` (one-hot encoded here).

Build those inputs from a trajectory with :func:`rlblocks.views.build_view_inputs`.

Examples:
    >>> import gymnasium as gym, numpy as np, torch
    >>> from rlblocks.views import build_view_inputs
    >>> m = FrameStackingModel(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), 2, {},
    ...                        "fs", num_frames=3)
    >>> traj = {"obs": np.zeros((5, 4), np.float32), "actions": np.array([0, 1, 1, 0, 1]),
    ...         "rewards": np.ones(5, np.float32)}
    >>> views = build_view_inputs(traj, m.view_requirements)
    >>> views["prev_n_obs"].shape, views["prev_n_actions"].shape
    ((5, 3, 4), (5, 3))
    >>> out, _ = m({k: torch.as_tensor(v) for k, v in views.items()})
    >>> out.shape, m.value_function().shape
    (torch.Size([5, 2]), torch.Size([5]))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch

from rlblocks.models.misc import SlimFC
from rlblocks.models.modelv2 import ModelV2
from rlblocks.models.recurrent import action_input_size, prev_actions_to_input
from rlblocks.views import ViewRequirement

__all__ = ["FrameStackingModel", "TorchFrameStackingCartPoleModel"]


class FrameStackingModel(ModelV2):
    """Two ReLU layers of ``hidden`` units over the stacked obs, one-hot actions and rewards.

    Args:
        obs_space: a 1-D Box.
        action_space: Discrete, MultiDiscrete or Box (actions one-hot / flattened).
        num_outputs: logits size.
        model_config: the model config (unused beyond ModelV2's).
        name: the model name.
        num_frames: n, the frames stacked.
        hidden: width of both hidden layers (RLlib: 256).
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any] | Any,
        name: str,
        num_frames: int = 3,
        hidden: int = 256,
    ) -> None:
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        if obs_space.shape is None or len(obs_space.shape) != 1:
            raise ValueError(
                f"FrameStackingModel needs a 1-D Box observation space, got {obs_space}"
            )
        if int(num_frames) < 1:
            raise ValueError(f"num_frames must be >= 1, got {num_frames}")
        if num_outputs is None:
            raise ValueError("FrameStackingModel needs num_outputs (its logits size)")
        self.num_frames = int(num_frames)
        self.obs_dim = int(obs_space.shape[0])
        self.action_dim = action_input_size(action_space)
        in_size = self.num_frames * (self.obs_dim + self.action_dim + 1)
        self.layer1 = SlimFC(in_size, hidden, activation_fn="relu")
        self.layer2 = SlimFC(hidden, hidden, activation_fn="relu")
        self.out = SlimFC(hidden, int(num_outputs))
        self.values = SlimFC(hidden, 1)
        self._last_value: torch.Tensor | None = None
        n = self.num_frames
        self.view_requirements["prev_n_obs"] = ViewRequirement(
            "obs", shift=f"-{n - 1}:0", space=obs_space
        )
        self.view_requirements["prev_n_rewards"] = ViewRequirement("rewards", shift=f"-{n}:-1")
        self.view_requirements["prev_n_actions"] = ViewRequirement(
            "actions", shift=f"-{n}:-1", space=action_space
        )

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: Any
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        for key in ("prev_n_obs", "prev_n_rewards", "prev_n_actions"):
            if key not in input_dict:
                raise ValueError(
                    f"FrameStackingModel: input_dict lacks {key!r} (build it with "
                    "rlblocks.views.build_view_inputs)"
                )
        obs = torch.as_tensor(input_dict["prev_n_obs"]).float()
        b = obs.shape[0]
        obs = obs.reshape(b, self.num_frames * self.obs_dim)
        rewards = torch.as_tensor(input_dict["prev_n_rewards"]).float().reshape(b, self.num_frames)
        acts = torch.as_tensor(input_dict["prev_n_actions"])
        acts = acts.reshape(b * self.num_frames, *acts.shape[2:])
        acts = prev_actions_to_input(acts, self.action_space).reshape(b, -1)
        x = torch.cat([obs, acts, rewards], dim=-1)
        features = self.layer2(self.layer1(x))
        self._last_value = self.values(features).squeeze(-1)
        return self.out(features), []

    def value_function(self) -> torch.Tensor:
        if self._last_value is None:
            raise ValueError("FrameStackingModel.value_function: call forward() first")
        return self._last_value


#: RLlib's name for the torch version of the guide's example model.
TorchFrameStackingCartPoleModel = FrameStackingModel
