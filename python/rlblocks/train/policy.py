"""``Policy``: a catalog model plus its action distribution, and how to feed them.

The policy knows which extra columns the model reads (from its view requirements:
``prev_actions`` / ``prev_rewards`` for ``use_lstm``, ``prev_n_actions`` /
``prev_n_rewards`` for ``use_attention``, a window of past observations such as
``prev_n_obs`` with shift ``"-2:0"``), whether it is recurrent (a non-empty initial
state), and turns numpy inputs into the model's ``input_dict``. When the model reads past
observations, the observation the trainer carries is the stacked window ``[B, n, ...]``
(oldest first, see :meth:`Policy.stack_obs`). It samples actions for
rollouts and evaluation; the learner uses :meth:`Policy.forward` for the loss.

All three calls go through one :class:`~rlblocks.train.actor.Actor`, chosen when the
policy is built by :func:`build_actor` and logged once (``rlblocks.train``, info):
:class:`~rlblocks.train.fast.FCActor` for the default fully connected model with
``fast_paths`` on (:class:`~rlblocks.train.fast.squashed_actor.SquashedActor` when its head
is SAC's SquashedGaussian), else :class:`ModuleActor`, which calls the torch module. SAC's
and DQN's learners hand their actor / Q-network to a ``Policy`` (``model=``,
``dist_class=``) for acting, evaluation and export.

Examples:
    >>> import gymnasium as gym, numpy as np, torch
    >>> from rlblocks.train.trainer_config import PPOConfig
    >>> _ = torch.manual_seed(0)
    >>> pol = Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), PPOConfig())
    >>> out = pol.act(np.zeros((3, 4), np.float32), [], explore=True)
    >>> out["actions"].shape, out["logp"].shape, out["vf_preds"].shape, pol.recurrent
    ((3,), (3,), (3,), False)
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.catalog import ModelCatalog
from rlblocks.masks import check_action_mask, masked_action_rows
from rlblocks.models.action_mask import ActionMaskModel
from rlblocks.models.modelv2 import ModelV2
from rlblocks.nest import tree_map
from rlblocks.train.acting_threads import acting_threads, model_size, torch_threads
from rlblocks.train.actor import Actor, ActorInput, Forward, State
from rlblocks.train.fast.choice import fast_actor
from rlblocks.train.q_actor import QArgmaxActor
from rlblocks.train.qnetwork import QNetwork
from rlblocks.train.trainer_config import TrainerConfig

__all__ = ["ModuleActor", "Policy", "action_format", "build_actor"]

logger = logging.getLogger("rlblocks.train")


def action_format(action_space: gym.Space) -> tuple[tuple[int, ...], type, np.ndarray]:
    """``(action_shape, action_dtype, initial_prev_action)`` of a policy's actions.

    The dtype is int64 for Discrete and MultiDiscrete spaces, float32 otherwise. The
    "previous action" before an episode's first step is the space's lowest integer action
    (index 0 of its one-hot, RLlib's 0 for spaces that start at 0), 0.0 for Box.

    Examples:
        >>> shape, dtype, initial = action_format(gym.spaces.Discrete(3, start=-1))
        >>> shape, dtype.__name__, initial.tolist()
        ((), 'int64', -1)
        >>> action_format(gym.spaces.Box(-1, 1, (2,)))[2].tolist()
        [0.0, 0.0]
    """
    shape: tuple[int, ...] = tuple(action_space.shape or ())
    dtype: type = (
        np.int64
        if isinstance(action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete))
        else np.float32
    )
    start = getattr(action_space, "start", 0)
    return shape, dtype, np.broadcast_to(np.asarray(start, dtype), shape).copy()


def _obs_window(model: ModelV2) -> tuple[str | None, int]:
    """``(key, n)`` of the model's view of the last ``n`` observations (shifts ``-n+1..0``)."""
    for key, vr in getattr(model, "view_requirements", {}).items():
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


def _prev_column(model: ModelV2, what: str) -> tuple[str, int]:
    """``(key, n)``: the model reads the previous ``n`` actions or rewards (``what``) under
    ``prev_{what}`` (the LSTM wrapper's key), else ``prev_n_{what}`` (the attention
    wrapper's; ``n`` is 0 when it reads neither)."""
    for key in (f"prev_{what}", f"prev_n_{what}"):
        vr = getattr(model, "view_requirements", {}).get(key)
        if vr is not None and len(np.atleast_1d(vr.shift_arr)):
            return key, len(np.atleast_1d(vr.shift_arr))
    return f"prev_n_{what}", 0


class Policy:
    """A model from ``ModelCatalog`` for ``config.model`` and its action distribution.

    Args:
        obs_space: The preprocessed observation space (``preprocessor.observation_space``).
        action_space: The env's (single) action space.
        config: The trainer's config (its ``model`` dict picks the model and distribution).
        device: Torch device for the model.
        model, dist_class: A model built elsewhere and its distribution (e.g. DQN's
            :class:`~rlblocks.train.qnetwork.QNetwork` with a Categorical: the greedy
            action, SAC's actor, an RLlib module's network for export), instead of the
            catalog's. Any ``nn.Module`` with ``get_initial_state`` and ``value_function``
            serves; one without ``view_requirements`` reads the observation alone.

    Attributes:
        model: The :class:`~rlblocks.models.ModelV2`.
        dist_class: The distribution class (or partial), called as ``dist_class(out, model)``.
        recurrent: Whether the model has RNN state (``use_lstm``, ``use_attention``, ...).
        actor: The :class:`~rlblocks.train.actor.Actor` that serves :meth:`forward`,
            :meth:`act` and :meth:`values`.
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
        config: TrainerConfig,
        device: torch.device | str = "cpu",
        model: ModelV2 | None = None,
        dist_class: Any = None,
    ) -> None:
        model_config = config.model_config()
        self.obs_space = obs_space
        self.action_space = action_space
        self.device = torch.device(device)
        if model is None:
            self.dist_class, num_outputs = ModelCatalog.get_action_dist(action_space, model_config)
            model = ModelCatalog.get_model_v2(
                obs_space,
                action_space,
                num_outputs,
                model_config,
                framework="torch",
                name="ppo_model",
            )
        else:
            self.dist_class = dist_class
        self.model = model.to(self.device)
        self.recurrent = len(self.model.get_initial_state()) > 0
        # RLlib's action-mask convention (rlblocks.masks): the model masks its outputs; every
        # act call also refuses rows without a legal action and checks the sampled actions.
        mask_model = self.model if isinstance(self.model, ActionMaskModel) else None
        self.mask_layout = None if mask_model is None else mask_model.layout
        self.mask_columns = None if mask_model is None else mask_model.mask_columns
        self.actor: Actor = build_actor(self, bool(getattr(config, "fast_paths", True)))
        self._size = model_size(self.model)  # picks the acting threads (acting_threads)
        logger.info("actor: %s", self.actor.description)
        self.obs_window_key, self.n_obs_frames = _obs_window(self.model)
        self.max_seq_len = int(model_config.max_seq_len)
        self.prev_actions_key, self.n_prev_actions = _prev_column(self.model, "actions")
        self.prev_rewards_key, self.n_prev_rewards = _prev_column(self.model, "rewards")
        if self.n_prev_actions and not isinstance(
            action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.Box)
        ):
            raise ValueError(
                f"the model reads previous actions, which needs a Discrete, MultiDiscrete or Box "
                f"action space, got {action_space}"
            )
        self.action_shape, self.action_dtype, self.initial_prev_action = action_format(action_space)

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
            pa = self._tensor(
                prev_actions
                if prev_actions is not None
                else np.broadcast_to(
                    self.initial_prev_action, (b, self.n_prev_actions, *self.action_shape)
                )
            )
            d[self.prev_actions_key] = pa[:, 0] if self.prev_actions_key == "prev_actions" else pa
        if self.n_prev_rewards:
            pr = (
                self._tensor(prev_rewards)
                if prev_rewards is not None
                else torch.zeros((b, self.n_prev_rewards), device=self.device)
            )
            d[self.prev_rewards_key] = pr[:, 0] if self.prev_rewards_key == "prev_rewards" else pr
        return d

    def stack_obs(
        self, window: np.ndarray | None, obs: np.ndarray, new_episode: np.ndarray | None = None
    ) -> np.ndarray:
        """The observation to carry: ``obs`` itself, or for models that read the last ``n``
        observations the window ``[B, n, ...]`` advanced by ``obs``.

        A row starts (``window`` None, or its index in ``new_episode``) with ``n`` copies of
        its first observation, as the trajectory view API fills steps before an episode.

        Examples:
            >>> import gymnasium as gym, numpy as np
            >>> from rlblocks.train.trainer_config import PPOConfig
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

    # --- calling: the actor's door ---------------------------------------------------------
    def forward(
        self, input_dict: dict[str, Any], state: State, seq_lens: torch.Tensor | None
    ) -> Forward:
        """``(distribution, values [B], state_out)`` for one batch."""
        return self.actor.forward(input_dict, state, seq_lens)

    def act(
        self,
        obs: Any,
        state: State,
        prev_actions: Any = None,
        prev_rewards: Any = None,
        explore: bool = True,
        full: bool = True,
    ) -> dict[str, Any]:
        """Actions for a ``[B, ...]`` batch of preprocessed observations (model in eval mode),
        on :func:`~rlblocks.train.acting_threads.acting_threads`' torch threads (the
        caller's restored after).

        Returns:
            ``actions`` (numpy, the action space's structure), ``state_out``, and with
            ``full``: ``logp`` ``[B]``, ``vf_preds`` ``[B]``, ``dist_inputs`` ``[B, K]``.
        """
        with torch_threads(acting_threads(self._size, _rows(obs))):
            return self.actor.act(ActorInput(obs, state, prev_actions, prev_rewards), explore, full)

    def values(
        self, obs: Any, state: State, prev_actions: Any = None, prev_rewards: Any = None
    ) -> np.ndarray:
        """Value estimates ``[B]`` (no sampling, so no random numbers are drawn)."""
        with torch_threads(acting_threads(self._size, _rows(obs))):
            return self.actor.values(ActorInput(obs, state, prev_actions, prev_rewards))


def _rows(obs: Any) -> int:
    """The batch rows of ``obs`` (1 for what has no length)."""
    try:
        return len(obs)
    except TypeError:
        return 1


def build_actor(policy: Policy, fast_paths: bool) -> Actor:
    """The actor that serves ``policy``, chosen once: the
    :class:`~rlblocks.train.q_actor.QArgmaxActor` for DQN's Q-network; with
    ``fast_paths`` on and the default FC network, the
    :class:`~rlblocks.train.fast.squashed_actor.SquashedActor` for a SquashedGaussian head
    (SAC's Box actions) or the
    :class:`~rlblocks.train.fast.FCActor` (numpy for the heads
    :func:`~rlblocks.train.fast.heads.numpy_head` draws, an action mask applied in numpy);
    else the :class:`ModuleActor`, which calls the torch module. The choice is
    :func:`~rlblocks.train.fast.choice.fast_actor`'s, which RLlib's ``VectorEnvRunner``
    makes through the same function.

    Examples:
        >>> import gymnasium as gym
        >>> from rlblocks.train.trainer_config import PPOConfig
        >>> pol = Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), PPOConfig())
        >>> type(build_actor(pol, False)).__name__, type(build_actor(pol, True)).__name__
        ('ModuleActor', 'FCActor')
    """
    if isinstance(policy.model, QNetwork):
        return QArgmaxActor(policy.model, ModuleActor(policy, "Q-network"), policy.device)
    if not fast_paths:
        return ModuleActor(policy, "fast_paths is off")
    module = ModuleActor(policy, "")
    fast = fast_actor(policy.model, policy.dist_class, module)
    if isinstance(fast, str):
        module.description = f"torch module ({fast})"
        return module
    return fast


class ModuleActor:
    """The torch module behind the :class:`~rlblocks.train.actor.Actor` door: input dicts,
    masks, sampling.

    ``act`` and ``values`` run the policy's :meth:`~Policy.forward` (so an FC actor that
    hands them over still serves the forward without module calls).
    """

    def __init__(self, policy: Policy, reason: str) -> None:
        self.policy = policy
        self.description = f"torch module ({reason})"

    def forward(self, input_dict: dict[str, Any], state: list[Any], seq_lens: Any) -> Forward:
        """:meth:`Policy.forward` through the module (a sequence length of one for a
        recurrent model called without them)."""
        pol = self.policy
        if pol.recurrent and seq_lens is None:
            b = input_dict["obs"].shape[0]
            seq_lens = torch.ones(b, dtype=torch.int64, device=pol.device)
        out, state_out = pol.model(input_dict, state, seq_lens)
        values = pol.model.value_function().reshape(-1)
        return pol.dist_class(out, pol.model), values, state_out

    def _evaluate(self, inputs: ActorInput) -> Forward:
        pol = self.policy
        pol.set_training(False)
        obs, state, prev_actions, prev_rewards = inputs
        input_dict = pol.input_dict(obs, prev_actions, prev_rewards, is_training=False)
        return pol.forward(input_dict, state, None)

    @torch.no_grad()
    def act(self, inputs: ActorInput, explore: bool, full: bool) -> dict[str, Any]:
        """:meth:`Policy.act`; checks the action mask before and the actions after."""
        pol = self.policy
        mask = None
        if pol.mask_layout is not None:
            mask = pol._tensor(inputs.obs)[..., pol.mask_columns]
            check_action_mask(mask, pol.mask_layout)
        dist, values, state_out = self._evaluate(inputs)
        actions = dist.sample() if explore else dist.deterministic_sample()
        if mask is not None and pol.mask_layout is not None:
            bad = masked_action_rows(actions, mask, pol.mask_layout)
            if bad.any():
                dist_fn = getattr(pol.dist_class, "func", pol.dist_class)
                who = getattr(dist_fn, "__name__", None) or repr(dist_fn)
                raise ValueError(
                    f"the action distribution {who} chose a masked action (row "
                    f"{int(bad.argmax())}): it does not respect the FLOAT_MIN logits of "
                    "masked actions"
                )
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
    def values(self, inputs: ActorInput) -> np.ndarray:
        """:meth:`Policy.values`."""
        _, values, _ = self._evaluate(inputs)
        return values.cpu().numpy().astype(np.float32)
