"""``Policy``: a catalog model plus its action distribution, and how to feed them.

The policy knows which extra columns the model reads (from its view requirements:
``prev_actions`` / ``prev_rewards`` for ``use_lstm``, ``prev_n_actions`` /
``prev_n_rewards`` for ``use_attention``, a window of past observations such as
``prev_n_obs`` with shift ``"-2:0"``), whether it is recurrent (a non-empty initial
state), and turns numpy inputs into the model's ``input_dict``. When the model reads past
observations, the observation the trainer carries is the stacked window ``[B, n, ...]``
(oldest first, see :meth:`Policy.stack_obs`). It samples actions for
rollouts and evaluation; the learner uses :meth:`Policy.forward` for the loss.

Examples:
    >>> import gymnasium as gym, numpy as np, torch
    >>> from rlblocks.train.config import PPOConfig
    >>> _ = torch.manual_seed(0)
    >>> pol = Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), PPOConfig())
    >>> out = pol.act(np.zeros((3, 4), np.float32), [], explore=True)
    >>> out["actions"].shape, out["logp"].shape, out["vf_preds"].shape, pol.recurrent
    ((3,), (3,), (3,), False)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.catalog import ModelCatalog
from rlblocks.masks import ActionMaskModel, check_action_mask, masked_action_rows
from rlblocks.models.fc_layers import FCLayers
from rlblocks.models.modelv2 import ModelV2
from rlblocks.train._tree import tree_map
from rlblocks.train.config import PPOConfig
from rlblocks.train.fast import FCActor

__all__ = ["Policy", "clip_actions"]


def clip_actions(actions: Any, space: gym.Space) -> Any:
    """Clips every Box part of ``actions`` (batched or not) to the space's bounds.

    Examples:
        >>> space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (2,))))
        >>> clip_actions((np.array([1]), np.array([[3.0, -0.5]])), space)[1].tolist()
        [[1.0, -0.5]]
    """
    if isinstance(space, gym.spaces.Box):
        return np.clip(actions, space.low, space.high).astype(space.dtype)
    if isinstance(space, gym.spaces.Tuple):
        return tuple(clip_actions(a, s) for a, s in zip(actions, space.spaces, strict=True))
    if isinstance(space, gym.spaces.Dict):
        return {k: clip_actions(actions[k], s) for k, s in space.spaces.items()}
    return actions


def _obs_window(model: ModelV2) -> tuple[str | None, int]:
    """``(key, n)`` of the model's view of the last ``n`` observations (shifts ``-n+1..0``)."""
    for key, vr in model.view_requirements.items():
        if key == "obs" or getattr(vr, "data_col", None) != "obs":
            continue
        shifts = np.atleast_1d(vr.shift_arr).tolist()
        n = len(shifts)
        if shifts != list(range(1 - n, 1)):
            raise ValueError(
                f"view requirement {key!r}: the trainer builds windows of observations ending "
                f"at the current one (shifts -n+1..0), got shifts {shifts}"
            )
        return key, n
    return None, 0


def _n_prev(model: ModelV2, key: str) -> int:
    vr = model.view_requirements.get(key)
    return 0 if vr is None else len(np.atleast_1d(vr.shift_arr))


class Policy:
    """A model from ``ModelCatalog`` for ``config.model`` and its action distribution.

    Args:
        obs_space: The preprocessed observation space (``preprocessor.observation_space``).
        action_space: The env's (single) action space.
        config: The PPO config (its ``model`` dict picks the model and distribution).
        device: Torch device for the model.

    Attributes:
        model: The :class:`~rlblocks.models.ModelV2`.
        dist_class: The distribution class (or partial), called as ``dist_class(out, model)``.
        recurrent: Whether the model has RNN state (``use_lstm``, ``use_attention``, ...).
        n_prev_actions, n_prev_rewards: How many previous actions / rewards the model reads.
        prev_actions_key, prev_rewards_key: The input-dict keys they go under.
        mask_layout, mask_columns: For an ``action_mask`` observation (RLlib's convention,
            :mod:`rlblocks.masks`) the mask's :class:`~rlblocks.masks.MaskLayout` and its
            columns in the flat observation; None otherwise. :meth:`act` then refuses rows
            without a legal action and checks every action drawn against the mask.
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        config: PPOConfig,
        device: torch.device | str = "cpu",
    ) -> None:
        model_config = config.model_config()
        self.obs_space = obs_space
        self.action_space = action_space
        self.device = torch.device(device)
        self.dist_class, num_outputs = ModelCatalog.get_action_dist(action_space, model_config)
        self.model = ModelCatalog.get_model_v2(
            obs_space, action_space, num_outputs, model_config, framework="torch",
            name="ppo_model",
        ).to(self.device)
        self.recurrent = len(self.model.get_initial_state()) > 0
        # RLlib's action-mask convention (rlblocks.masks): the model masks its outputs; every
        # act call also refuses rows without a legal action and checks the sampled actions.
        mask_model = self.model if isinstance(self.model, ActionMaskModel) else None
        self.mask_layout = None if mask_model is None else mask_model.layout
        self.mask_columns = None if mask_model is None else mask_model.mask_columns
        # The default FC model's layers, run without module calls when no graph is needed,
        # and its numpy twin for rollout actions (both skipped while FCLayers.matches_model
        # is False: a forward hook is set or a layer changed).
        self._fc_layers = FCLayers.from_model(self.model) if config.fast_paths else None
        self._actor = (FCActor.build(self.model, self.dist_class)
                       if self._fc_layers is not None else None)
        self.obs_window_key, self.n_obs_frames = _obs_window(self.model)
        self.max_seq_len = int(model_config.max_seq_len)
        self.prev_actions_key, self.n_prev_actions = "prev_actions", _n_prev(
            self.model, "prev_actions")
        if self.n_prev_actions == 0:
            self.prev_actions_key = "prev_n_actions"
            self.n_prev_actions = _n_prev(self.model, "prev_n_actions")
        self.prev_rewards_key, self.n_prev_rewards = "prev_rewards", _n_prev(
            self.model, "prev_rewards")
        if self.n_prev_rewards == 0:
            self.prev_rewards_key = "prev_n_rewards"
            self.n_prev_rewards = _n_prev(self.model, "prev_n_rewards")
        if self.n_prev_actions and not isinstance(
            action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.Box)
        ):
            raise ValueError(
                f"the model reads previous actions, which needs a Discrete, MultiDiscrete or Box "
                f"action space, got {action_space}"
            )
        shape = action_space.shape if action_space.shape is not None else ()
        self.action_shape: tuple[int, ...] = tuple(shape)
        self.action_dtype = np.int64 if isinstance(
            action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)) else np.float32
        # The "previous action" before an episode's first step: the space's lowest integer
        # action (index 0 of its one-hot, RLlib's 0 for spaces that start at 0), 0.0 for Box.
        start = getattr(action_space, "start", 0)
        self.initial_prev_action = np.broadcast_to(
            np.asarray(start, self.action_dtype), self.action_shape).copy()

    # --- state ----------------------------------------------------------------------------
    def initial_state(self, batch_size: int) -> list[torch.Tensor]:
        """The model's initial state repeated for ``batch_size`` rows (``[B, ...]`` each)."""
        return [
            s.to(self.device).unsqueeze(0).repeat(batch_size, *([1] * s.dim())).clone()
            for s in self.model.get_initial_state()
        ]

    # --- inputs ---------------------------------------------------------------------------
    def input_dict(
        self,
        obs: Any,
        prev_actions: Any = None,
        prev_rewards: Any = None,
        is_training: bool = False,
    ) -> dict[str, Any]:
        """The model's input dict for ``[B, ...]`` observations and the model's extra columns.

        ``prev_actions`` is ``[B, n, *action_shape]`` and ``prev_rewards`` ``[B, n]`` (oldest
        first); with ``n == 1`` they are passed as ``[B, ...]`` under ``prev_actions`` /
        ``prev_rewards`` (the LSTM wrapper's keys).
        """
        d: dict[str, Any] = {"obs": self._tensor(obs), "is_training": is_training}
        if self.n_obs_frames and self.obs_window_key is not None:
            window = d["obs"]
            if window.dim() == 1 + len(self.obs_space.shape or ()):  # no history: repeat obs
                window = window.unsqueeze(1).expand(-1, self.n_obs_frames, *window.shape[1:])
            d["obs"] = window[:, -1]
            d[self.obs_window_key] = window
        b = d["obs"].shape[0]
        if self.n_prev_actions:
            pa = self._tensor(prev_actions if prev_actions is not None else np.broadcast_to(
                self.initial_prev_action, (b, self.n_prev_actions, *self.action_shape)))
            d[self.prev_actions_key] = pa[:, 0] if self.prev_actions_key == "prev_actions" else pa
        if self.n_prev_rewards:
            pr = self._tensor(prev_rewards) if prev_rewards is not None else torch.zeros(
                (b, self.n_prev_rewards), device=self.device)
            d[self.prev_rewards_key] = pr[:, 0] if self.prev_rewards_key == "prev_rewards" else pr
        return d

    def stack_obs(self, window: np.ndarray | None, obs: np.ndarray,
                  new_episode: np.ndarray | None = None) -> np.ndarray:
        """The observation to carry: ``obs`` itself, or for models that read the last ``n``
        observations the window ``[B, n, ...]`` advanced by ``obs``.

        A row starts (``window`` None, or its index in ``new_episode``) with ``n`` copies of
        its first observation, as the trajectory view API fills steps before an episode.

        Examples:
            >>> import gymnasium as gym, numpy as np
            >>> from rlblocks.train.config import PPOConfig
            >>> pol = Policy(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), PPOConfig())
            >>> pol.stack_obs(None, np.ones((1, 2))).shape   # no window view: unchanged
            (1, 2)
        """
        if not self.n_obs_frames:
            return obs
        obs = np.asarray(obs)
        if window is None:
            return np.repeat(obs[:, None], self.n_obs_frames, axis=1)
        out = np.concatenate([window[:, 1:], obs[:, None]], axis=1)
        if new_episode is not None and len(new_episode):
            out[new_episode] = obs[new_episode][:, None]
        return out

    def _tensor(self, x: Any) -> torch.Tensor:
        if isinstance(x, torch.Tensor):
            return x.to(self.device)
        return torch.as_tensor(np.asarray(x), device=self.device)

    def set_training(self, training: bool) -> None:
        """Puts the model in train or eval mode (batch norm, dropout), only if it changes."""
        if self.model.training != training:
            self.model.train(training)

    # --- calling --------------------------------------------------------------------------
    def _numpy_path(self, obs: Any) -> bool:
        """Whether :class:`FCActor` serves this call (numpy input, the layers match)."""
        return (self._actor is not None and isinstance(obs, np.ndarray)
                and self._actor.layers.matches_model())

    def forward(
        self,
        input_dict: dict[str, Any],
        state: list[torch.Tensor],
        seq_lens: torch.Tensor | None,
    ) -> tuple[Any, torch.Tensor, list[torch.Tensor]]:
        """``(distribution, values [B], state_out)`` for one batch."""
        fc = self._fc_layers
        if fc is not None and not torch.is_grad_enabled() and fc.matches_model():
            out, values = fc.infer(input_dict["obs"])
            return self.dist_class(out, self.model), values, state
        if self.recurrent and seq_lens is None:
            b = input_dict["obs"].shape[0]
            seq_lens = torch.ones(b, dtype=torch.int64, device=self.device)
        out, state_out = self.model(input_dict, state, seq_lens)
        values = self.model.value_function().reshape(-1)
        return self.dist_class(out, self.model), values, state_out

    @torch.no_grad()
    def act(
        self,
        obs: Any,
        state: list[torch.Tensor],
        prev_actions: Any = None,
        prev_rewards: Any = None,
        explore: bool = True,
        full: bool = True,
    ) -> dict[str, Any]:
        """Actions for a ``[B, ...]`` batch of preprocessed observations (model in eval mode).

        Returns:
            ``actions`` (numpy, the action space's structure), ``state_out``, and with
            ``full``: ``logp`` ``[B]``, ``vf_preds`` ``[B]``, ``dist_inputs`` ``[B, K]``.
        """
        if self._numpy_path(obs):
            assert self._actor is not None
            fast = self._actor.act(obs, explore)
            return fast if full else {k: fast[k] for k in ("actions", "state_out")}
        mask = None
        if self.mask_layout is not None:
            mask = self._tensor(obs)[..., self.mask_columns]
            check_action_mask(mask, self.mask_layout)
        self.set_training(False)
        dist, values, state_out = self.forward(
            self.input_dict(obs, prev_actions, prev_rewards, is_training=False), state, None
        )
        actions = dist.sample() if explore else dist.deterministic_sample()
        if mask is not None and self.mask_layout is not None:
            bad = masked_action_rows(actions, mask, self.mask_layout)
            if bad.any():
                dist_fn = getattr(self.dist_class, "func", self.dist_class)
                who = getattr(dist_fn, "__name__", None) or repr(dist_fn)
                raise ValueError(
                    f"the action distribution {who} chose a masked action (row "
                    f"{int(bad.argmax())}): it does not respect the FLOAT_MIN logits of "
                    "masked actions")
        result: dict[str, Any] = {
            "actions": tree_map(lambda a: a.detach().cpu().numpy(), actions),
            "state_out": [s.detach() for s in state_out],
        }
        if full:
            logp = dist.sampled_action_logp() if explore else dist.logp(actions)
            result["logp"] = logp.cpu().numpy().astype(np.float32)
            result["vf_preds"] = values.cpu().numpy().astype(np.float32)
            result["dist_inputs"] = dist.inputs.detach().cpu().numpy()
        return result

    @torch.no_grad()
    def values(
        self,
        obs: Any,
        state: list[torch.Tensor],
        prev_actions: Any = None,
        prev_rewards: Any = None,
    ) -> np.ndarray:
        """Value estimates ``[B]`` (no sampling, so no random numbers are drawn)."""
        if self._numpy_path(obs):
            assert self._actor is not None
            return self._actor.forward(obs)[1]
        self.set_training(False)
        _, values, _ = self.forward(
            self.input_dict(obs, prev_actions, prev_rewards, is_training=False), state, None
        )
        return values.cpu().numpy().astype(np.float32)
