"""``PolicyGraph``: a trained policy as one tensors-in, tensors-out module (what is exported).

Inputs, in order: ``obs`` (float32 ``(B, size)``, the preprocessor's flat layout), then for
recurrent models ``state_in_0 ...`` (``(B, *shape)``), then ``prev_actions``
(``(B, n, *action_shape)``) and ``prev_rewards`` (``(B, n)``) where the model reads them.
Outputs, in order: one deterministic action per leaf of the action space (argmax / mean /
squashed mean, in the space's dtype with its offset), ``dist_inputs``, ``value`` and
``state_out_0 ...``. The observation filter's statistics are constants of the graph; a model
that masks its logits (parametric actions, or RLlib's ``Dict(action_mask, observations)``
convention through :class:`rlblocks.models.action_mask.ActionMaskModel`) does so inside, as
in training: the mask is part of the ``obs`` input (its columns are the sidecar's
``observation.action_mask``), so the deterministic actions are never masked ones.

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks.train.trainer_config import PPOConfig
    >>> from rlblocks.train.policy import Policy
    >>> pol = Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2, start=5), PPOConfig())
    >>> g = PolicyGraph(pol, obs_shape=(4,))
    >>> g.input_names, g.output_names
    (['obs'], ['action', 'dist_inputs', 'value'])
    >>> action, logits, value = g(torch.zeros(3, 4))
    >>> action.dtype, int(action.min()) >= 5, value.shape
    (torch.int64, True, torch.Size([3]))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlblocks.filters import MeanStdFilter, NoFilter
from rlblocks.spaces import space_path_items
from rlblocks.train.policy import Policy

__all__ = ["PolicyGraph", "action_leaves"]


def action_leaves(space: gym.Space) -> list[tuple[str, tuple[Any, ...], gym.Space]]:
    """``(output name, path, leaf space)`` per action leaf: ``action`` for a flat space,
    ``action.0``, ``action.1.key`` ... for Tuple/Dict (space order).

    Examples:
        >>> space = gym.spaces.Tuple((gym.spaces.Discrete(2),
        ...                           gym.spaces.Dict({"x": gym.spaces.Box(-1, 1)})))
        >>> [name for name, _, _ in action_leaves(space)]
        ['action.0', 'action.1.x']
    """
    return [
        (".".join(["action", *map(str, path)]), path, leaf)
        for path, leaf in space_path_items(space)
    ]


def _torch_dtype(dtype: Any) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=np.dtype(dtype))).dtype


class PolicyGraph(nn.Module):
    """A policy's model, filter and deterministic action selection as one module.

    Args:
        policy: The trainer's :class:`~rlblocks.train.policy.Policy` (shares its model).
        obs_shape: The preprocessor's output shape (the flat input is reshaped to it).
        obs_filter: ``NoFilter``, ``MeanStdFilter`` or ``ConcurrentMeanStdFilter``; its
            current statistics become constants, its passthrough columns pass unchanged.

    Raises:
        ValueError: A filter whose statistics cannot be baked in, or a model that reads a
            window of past observations.
    """

    def __init__(self, policy: Policy, obs_shape: Sequence[int], obs_filter: Any = None):
        super().__init__()
        if policy.n_obs_frames:
            raise ValueError(
                "export: models that read past observations (an obs window view "
                "requirement) are not supported"
            )
        self.policy = policy
        self.model = policy.model
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.size = int(np.prod(self.obs_shape, dtype=np.int64))
        self.has_filter = False
        self.clip = float("inf")
        mean = np.zeros(self.obs_shape, np.float32)
        denom = np.ones(self.obs_shape, np.float32)
        passed = np.zeros(self.obs_shape, bool)
        if isinstance(obs_filter, MeanStdFilter):
            if obs_filter.passthrough is not None:
                passed[..., obs_filter.passthrough] = True
            stats = obs_filter.running_stats
            self.has_filter = True
            if obs_filter.demean:
                mean = np.asarray(stats.mean, np.float64).astype(np.float32)
            if obs_filter.destd:
                denom = (np.asarray(stats.std, np.float32) + np.float32(1e-6)).astype(np.float32)
            if obs_filter.clip:
                self.clip = float(obs_filter.clip)
        elif obs_filter is not None and not isinstance(obs_filter, NoFilter):
            raise ValueError(
                f"export: cannot bake the observation filter "
                f"{type(obs_filter).__name__} into the graph (MeanStdFilter and "
                "NoFilter can be)"
            )
        self.register_buffer("filter_mean", torch.from_numpy(mean))
        self.register_buffer("filter_denom", torch.from_numpy(denom))
        # the filter's passthrough columns (counts, indices, the action mask), or None
        self.register_buffer("filter_passed", torch.from_numpy(passed) if passed.any() else None)
        self.state_shapes = [tuple(s.shape) for s in self.model.get_initial_state()]
        self.leaves = action_leaves(policy.action_space)
        names = ["obs"] + [f"state_in_{i}" for i in range(len(self.state_shapes))]
        if policy.n_prev_actions:
            names.append("prev_actions")
        if policy.n_prev_rewards:
            names.append("prev_rewards")
        self.input_names = names
        self.output_names = (
            [name for name, _, _ in self.leaves]
            + ["dist_inputs", "value"]
            + [f"state_out_{i}" for i in range(len(self.state_shapes))]
        )

    def example_inputs(self, batch: int = 2) -> tuple[torch.Tensor, ...]:
        """Zeros of every input for ``batch`` rows (the initial state for the state)."""
        pol = self.policy
        inputs = [torch.zeros(batch, self.size)]
        inputs += [s.detach().cpu() for s in pol.initial_state(batch)]
        if pol.n_prev_actions:
            inputs.append(
                torch.as_tensor(
                    np.broadcast_to(
                        pol.initial_prev_action, (batch, pol.n_prev_actions, *pol.action_shape)
                    ).copy()
                )
            )
        if pol.n_prev_rewards:
            inputs.append(torch.zeros(batch, pol.n_prev_rewards))
        return tuple(inputs)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pol = self.policy
        named = dict(zip(self.input_names, inputs, strict=True))
        obs = named["obs"].reshape(-1, *self.obs_shape)
        if self.has_filter:
            mean, denom = self.get_buffer("filter_mean"), self.get_buffer("filter_denom")
            normalised = (obs - mean) / denom
            if self.clip != float("inf"):
                normalised = normalised.clamp(-self.clip, self.clip)
            passed = self.get_buffer("filter_passed") if self.filter_passed is not None else None
            obs = normalised if passed is None else torch.where(passed, obs, normalised)
        state = [named[f"state_in_{i}"] for i in range(len(self.state_shapes))]
        prev_actions = named.get("prev_actions")
        prev_rewards = named.get("prev_rewards")
        input_dict = pol.input_dict(obs, prev_actions, prev_rewards, is_training=False)
        seq_lens = None
        if pol.recurrent:
            seq_lens = torch.ones(obs.shape[0], dtype=torch.int64, device=obs.device)
        out, state_out = self.model(input_dict, state, seq_lens)
        value = self.model.value_function().reshape(-1)
        dist = pol.dist_class(out, self.model)
        actions = dist.deterministic_sample()
        flat = []
        for _, path, leaf in self.leaves:
            a = actions
            for key in path:
                a = a[key]
            flat.append(a.to(_torch_dtype(leaf.dtype)))
        return (*flat, dist.inputs, value, *state_out)
