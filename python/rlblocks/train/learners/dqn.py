"""The DQN update: double / dueling / n-step / prioritized / distributional Q-learning.

One :meth:`DQNLearner.update` is one gradient step on a replay batch::

    expected (num_atoms = 1):
        a*      = argmax_a' Q_online(s', a')   (double_q; else Q_target) over legal actions
        target  = r + discount * Q_target(s', a*)      # r, discount: the n-step sum, gamma^k
        loss    = mean(w * huber(Q(s, a) - target))    # or mse; w: importance weights
    distributional (C51, num_atoms > 1):
        m       = the target distribution r + discount * z projected onto the support z
        loss    = mean(w * cross_entropy(m, softmax(logits(s, a))))

then gradient-norm clipping and an Adam step. The new priorities are ``|TD error|`` (C51:
the cross-entropy). A masked action (RLlib's ``action_mask`` observations) is never chosen:
not greedily, not at random (epsilon picks among the legal actions) and not in the
bootstrap; a next observation without a legal action bootstraps 0.

Examples:
    >>> import gymnasium as gym
    >>> from rlblocks.train.offpolicy_config import DQNConfig
    >>> learner = DQNLearner(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2),
    ...                      DQNConfig(model={"fcnet_hiddens": [8]}), "cpu")
    >>> learner.act(np.zeros((3, 4), np.float32), explore=False, timestep=0).shape
    (3,)
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from rlblocks.distributions import FLOAT_MIN, Categorical
from rlblocks.masks import MASK_KEY, mask_layout
from rlblocks.models.misc import mode_dependent
from rlblocks.train.algo_spaces import check_action_space
from rlblocks.train.fast import adam_step, make_adam, set_learning_rate
from rlblocks.train.fast.dense_layers import clip_numpy_grads
from rlblocks.train.fast.polyak import PolyakUpdate
from rlblocks.train.fast.q_layers import DenseQ
from rlblocks.train.fast.unwritten import clear_unwritten
from rlblocks.train.offpolicy_config import DQNConfig
from rlblocks.train.policy import Policy
from rlblocks.train.q_actor import QArgmaxActor
from rlblocks.train.qnetwork import QNetwork

__all__ = ["DQNLearner", "project_distribution"]


def project_distribution(
    probs: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor, support: torch.Tensor
) -> torch.Tensor:
    """C51's projection of ``r + discount * z`` (each atom ``z`` of ``support`` carrying
    ``probs``) back onto ``support``; rows ``[B, num_atoms]``.

    Examples:
        >>> z = torch.tensor([0.0, 1.0, 2.0])
        >>> project_distribution(torch.tensor([[0.0, 1.0, 0.0]]), torch.tensor([0.5]),
        ...                      torch.tensor([1.0]), z)
        tensor([[0.0000, 0.5000, 0.5000]])
    """
    v_min, v_max = float(support[0]), float(support[-1])
    atoms = support.shape[0]
    delta = (v_max - v_min) / (atoms - 1)
    tz = (rewards[:, None] + discounts[:, None] * support[None, :]).clamp(v_min, v_max)
    b = (tz - v_min) / delta
    lower, upper = b.floor().long(), b.ceil().long()
    # an exact atom (lower == upper) keeps all its mass there
    lower_w = torch.where(lower == upper, torch.ones_like(b), upper.float() - b)
    upper_w = torch.where(lower == upper, torch.zeros_like(b), b - lower.float())
    out = torch.zeros_like(probs)
    out.scatter_add_(1, lower, probs * lower_w)
    out.scatter_add_(1, upper, probs * upper_w)
    return out


class DQNLearner:
    """The Q-network, its target copy and optimizer (module docstring).

    Args:
        obs_space: The preprocessor's observation space (``original_space`` set).
        action_space: A ``Discrete`` action space.
        config: The DQN config.
        device: Torch device.
    """

    #: The statistics :meth:`update` returns (``progress.csv`` columns).
    STATS = ("qf_loss", "q_mean", "td_error_mean", "grad_norm")

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        config: DQNConfig,
        device: torch.device | str,
    ) -> None:
        check_action_space("DQN", action_space)
        assert isinstance(action_space, gym.spaces.Discrete)
        self.config = config
        self.device = torch.device(device)
        self.action_space = action_space
        self.start = int(action_space.start)
        self.q = QNetwork(
            obs_space,
            action_space,
            config.model_config(),
            dueling=config.dueling,
            num_atoms=config.num_atoms,
            v_min=config.v_min,
            v_max=config.v_max,
        ).to(self.device)
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.optimizer = make_adam(list(self.q.parameters()), config.lr, eps=1e-8)
        self.updates = 0
        self._modal = mode_dependent(self.q)
        self.q.eval()
        self._policy = self._build_policy()
        actor = self._policy.actor
        assert isinstance(actor, QArgmaxActor)
        self._actor = actor

    def _build_policy(self) -> Policy:
        """The Policy around the Q-network (a Categorical over its Q-values, the mask's
        layout and columns for an ``action_mask`` observation)."""
        policy = Policy(
            self.q.obs_space,
            self.action_space,
            self.config,
            self.device,
            model=self.q,
            dist_class=Categorical,
        )
        if self.q.masked:
            original: Any = self.q.obs_space.original_space  # type: ignore[attr-defined]
            policy.mask_layout = mask_layout(
                self.action_space, self.q.n_actions, original[MASK_KEY]
            )
            policy.mask_columns = self.q.mask_columns
        return policy

    # --- acting -------------------------------------------------------------------------------
    def _tensor(self, obs: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(obs, device=self.device)

    def greedy_q(self, obs: np.ndarray) -> torch.Tensor:
        """Masked Q-values ``[B, n]`` of a preprocessed batch (no gradient)."""
        with torch.no_grad():
            return self.q.masked_q(self._tensor(obs))

    def act(self, obs: np.ndarray, explore: bool, timestep: int) -> np.ndarray:
        """Greedy actions, or with ``explore`` epsilon-greedy ones (``config.epsilon`` at
        ``timestep``; the random action is uniform over the legal ones): the acting
        policy's :class:`~rlblocks.train.q_actor.QArgmaxActor`.

        Raises:
            ValueError: A row whose ``action_mask`` allows no action.
        """
        if explore:
            self._actor.epsilon = self.config.epsilon_at(timestep)
        return self._policy.act(obs, [], explore=explore, full=False)["actions"]

    def _fast_layers(self, net: QNetwork, training: bool) -> DenseQ | None:
        """``net`` as plain tensors when it is a fully connected Q-network (plain or
        dueling head, one atom, no mask) and no hook is set, else None (the module path)."""
        cache: dict[int, Any] = self.__dict__.setdefault("_fast_cache", {})
        key = id(net)
        if key not in cache or cache[key][0] is not net:
            cache[key] = (net, None if self._modal else DenseQ.from_network(net))
        layers: DenseQ | None = cache[key][1]
        if layers is None or not layers.matches(training):
            return None
        return layers

    # --- learning -----------------------------------------------------------------------------
    def _bootstrap_action(self, next_obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a*, has_legal)``: the bootstrap action of each next observation and whether it
        has any legal action."""
        net = self.q if self.config.double_q else self.target
        q_next = net.masked_q(next_obs)
        has_legal = (
            (q_next > FLOAT_MIN).any(dim=1)
            if net.masked
            else torch.ones_like(q_next[:, 0], dtype=torch.bool)
        )
        return q_next.argmax(dim=1), has_legal

    def _target(
        self,
        next_obs: torch.Tensor,
        rows: torch.Tensor,
        a_star: torch.Tensor,
        has_legal: torch.Tensor,
        rewards: torch.Tensor,
        discounts: torch.Tensor,
    ) -> torch.Tensor:
        """The TD target ``[B]`` (C51: the projected distribution ``[B, num_atoms]``)."""
        with torch.no_grad():
            discounts = torch.where(has_legal, discounts, torch.zeros_like(discounts))
            target_logits, _ = self.target.q_logits(next_obs)
            if self.config.num_atoms == 1:
                q_next = target_logits[rows, a_star, 0]
                return rewards + discounts * q_next
            probs_next = torch.softmax(target_logits[rows, a_star], dim=-1)
            return project_distribution(
                probs_next, rewards, discounts, self.q.get_buffer("support")
            )

    def _dense_update(
        self, fast: DenseQ, fast_target: DenseQ, batch: Any
    ) -> tuple[dict[str, float], np.ndarray]:
        """:meth:`update` for the fully connected Q-network on CPU (ReLU or linear layers,
        plain or dueling head, one atom, no mask, no hooks) in numpy: the forward passes on
        views of the weights and the loss's gradients in closed form, written into views of
        the ``.grad`` tensors (no autograd graph and no per-op torch dispatch: most of a
        small network's update time), then the same clipping and Adam step. With double Q
        the online network reads ``obs`` and ``next_obs`` in one pass."""
        cfg = self.config
        obs = np.asarray(batch.obs)
        b = len(obs)
        x = obs.reshape(b, -1).astype(np.float32, copy=False)
        nx = np.asarray(batch.next_obs).reshape(b, -1).astype(np.float32, copy=False)
        actions = np.asarray(batch.actions).reshape(b).astype(np.int64) - self.start
        rewards = np.asarray(batch.rewards, np.float32).reshape(b)
        discounts = np.asarray(batch.discounts, np.float32).reshape(b)
        weights = np.asarray(batch.weights, np.float32).reshape(b)
        rows = np.arange(b)
        acts = [np.concatenate([x, nx]) if cfg.double_q else x]
        q_both = fast.forward_numpy(acts[0], acts)
        q_next_target = fast_target.forward_numpy(nx)
        a_star = (q_both[b:] if cfg.double_q else q_next_target).argmax(axis=1)
        target = rewards + discounts * q_next_target[rows, a_star]
        q_taken = q_both[rows, actions]
        diff = q_taken - target
        abs_diff = np.abs(diff)
        scale = weights / np.float32(b)  # d mean(w * loss_row) / d loss_row
        if cfg.td_error_loss_fn == "huber":
            clipped = np.minimum(abs_diff, 1.0)  # huber: 0.5 d^2 below 1, |d| - 0.5 above
            per_row = clipped * (abs_diff - 0.5 * clipped)
            d_q = np.minimum(np.maximum(diff, -1.0), 1.0) * scale
        else:
            per_row = diff * diff
            d_q = 2.0 * diff * scale
        d_out = np.zeros((b, q_both.shape[1]), np.float32)
        d_out[rows, actions] = d_q
        # zero_grad(set_to_none=True) without the call: backward overwrites its layers'
        # gradients; the others (the model's unused value branch) go
        clear_unwritten(self._param_list(), fast)
        grads = fast.backward_numpy([a[:b] for a in acts], d_out)
        grad_norm = clip_numpy_grads(grads, cfg.grad_clip) if cfg.grad_clip is not None else 0.0
        if not adam_step(self.optimizer):
            self.optimizer.step()
        self.updates += 1
        stats = {
            "qf_loss": float(np.dot(weights, per_row)) / b,
            "q_mean": float(q_taken.sum()) / b,
            "td_error_mean": float(abs_diff.sum()) / b,
            "grad_norm": grad_norm,
        }
        return stats, abs_diff.astype(np.float64)

    def update(self, batch: Any, timestep: int = 0) -> tuple[dict[str, float], np.ndarray]:
        """One gradient step on a :class:`~rlblocks.replay.ReplaySample`; returns the
        statistics and the new priorities (``|TD error|``; C51: the cross-entropy)."""
        cfg = self.config
        if self.device.type == "cpu":
            fast = self._fast_layers(self.q, training=True)
            fast_target = self._fast_layers(self.target, training=False)
            if (
                fast is not None
                and fast_target is not None
                and all(d.weight.dtype == torch.float32 for d in fast.layers)
                # tanh: the closed-form gradient rounds differently from autograd's (1e-7)
                and all(d.activation != "tanh" for d in fast.layers)
            ):
                return self._dense_update(fast, fast_target, batch)
        obs = self._tensor(batch.obs)
        next_obs = self._tensor(batch.next_obs)
        actions = torch.as_tensor(np.asarray(batch.actions), device=self.device).long() - self.start
        rewards = torch.as_tensor(batch.rewards, device=self.device, dtype=torch.float32)
        discounts = torch.as_tensor(batch.discounts, device=self.device, dtype=torch.float32)
        weights = torch.as_tensor(batch.weights, device=self.device, dtype=torch.float32)
        rows = torch.arange(obs.shape[0], device=self.device)
        if self._modal:
            self.q.train()
        if cfg.double_q and not self._modal:
            # one pass over obs and next_obs (the online net picks the bootstrap action)
            both, mask = self.q.q_logits(torch.cat([obs, next_obs]))
            logits, next_logits = both.split(obs.shape[0])
            q_next = self.q.q_values(next_logits.detach())
            if mask is not None:
                q_next = q_next.masked_fill(mask[obs.shape[0] :] <= 0, FLOAT_MIN)
            a_star = q_next.argmax(dim=1)
            has_legal = (
                (q_next > FLOAT_MIN).any(dim=1)
                if self.q.masked
                else torch.ones_like(a_star, dtype=torch.bool)
            )
        else:
            logits, _ = self.q.q_logits(obs)
            with torch.no_grad():
                a_star, has_legal = self._bootstrap_action(next_obs)
        chosen = logits[rows, actions]  # [B, atoms]
        target = self._target(next_obs, rows, a_star, has_legal, rewards, discounts)
        if cfg.num_atoms == 1:
            q_taken = chosen.squeeze(-1)
            if cfg.td_error_loss_fn == "huber":
                per_row = F.huber_loss(q_taken, target, reduction="none", delta=1.0)
            else:
                per_row = (q_taken - target).pow(2)
            priorities = (q_taken - target).detach().abs()
            q_mean = q_taken.detach().mean()
        else:
            per_row = -(target * torch.log_softmax(chosen, dim=-1)).sum(-1)
            priorities = per_row.detach()
            q_mean = (torch.softmax(chosen.detach(), -1) * self.q.get_buffer("support")).sum(-1)
            q_mean = q_mean.mean()
        loss = (weights * per_row).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = (
            torch.nn.utils.clip_grad_norm_(self._param_list(), cfg.grad_clip)
            if cfg.grad_clip is not None
            else torch.tensor(0.0)
        )
        self.optimizer.step()
        if self._modal:
            self.q.eval()
        self.updates += 1
        stats = {
            "qf_loss": float(loss.detach()),
            "q_mean": float(q_mean),
            "td_error_mean": float(priorities.mean()),
            "grad_norm": float(grad_norm),
        }
        return stats, priorities.cpu().numpy().astype(np.float64)

    def set_lr(self, lr: float) -> None:
        """Sets the optimizer's learning rate."""
        set_learning_rate(lr, self.optimizer)

    def _param_list(self) -> list[torch.nn.Parameter]:
        """The Q-network's parameters, listed once (walking the module on every update costs
        more than a small network's arithmetic)."""
        params: list[torch.nn.Parameter] | None = self.__dict__.get("_params")
        if params is None:
            params = self.__dict__["_params"] = list(self.q.parameters())
        return params

    def sync_targets(self) -> None:
        """Moves the target network towards the online one by ``tau`` (1: a copy; buffers
        are copied): :class:`~rlblocks.train.fast.polyak.PolyakUpdate`."""
        update: PolyakUpdate | None = self.__dict__.get("_polyak")
        if update is None:
            update = self.__dict__["_polyak"] = PolyakUpdate.of_parameters(self.q, self.target)
        update(self.config.tau)

    # --- checkpoints, export ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The networks, the optimizer and the update count."""
        return {
            "q": self.q.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`."""
        self.q.load_state_dict(state["q"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])

    def acting_policy(self) -> Policy:
        """The :class:`~rlblocks.train.policy.Policy` around the Q-network that :meth:`act`
        calls (its :class:`~rlblocks.train.q_actor.QArgmaxActor`); its deterministic action
        is the greedy one (what :func:`rlblocks.export.export_policy` exports)."""
        return self._policy
