"""The default fully connected model's actor: the policy's door when that model serves.

:class:`FCActor` answers :class:`~rlblocks.train.actor.Actor`'s three calls for the
catalog's FullyConnectedNetwork without ``nn.Module`` calls:

* ``act`` / ``values`` on numpy observations run in numpy: at a rollout's batch of a few
  rows each torch op costs several times numpy's dispatch, so two small MLPs, a softmax
  and an inverse-CDF draw are cheaper in numpy (up to :data:`FUSED_ROWS` rows each branch's
  layers run in one native call, ``_core.dense_forward``: numpy's three dispatches per
  layer cost more than the arithmetic there). This covers float32 CPU models with a
  head that :func:`~rlblocks.train.fast.heads.numpy_head` draws (Categorical,
  MultiCategorical, their masked forms, DiagGaussian, Tuple / Dict of those; the others
  that never read the model: torch's draw on the numpy forward) (``docs/benchmarks.md``
  has figures); :meth:`FCActor.sample` is RLlib's runner's door (the mask handed beside
  the observation);
* ``forward`` without autograd runs the layers as plain tensors
  (:meth:`~rlblocks.train.fast.dense_layers.FCLayers.infer`), for any head and device.

Everything else (a graph for the loss, a tensor input, a hook set or a layer replaced
since the build: :meth:`~rlblocks.train.fast.dense_layers.FCLayers.matches_model`) goes
to the ``fallback`` actor, which calls the module.

The random numbers come from torch's generator, drawn exactly as the torch distributions
draw them (:mod:`rlblocks.train.fast.heads`: one uniform per row and component for the
categorical heads, one normal per action dimension for DiagGaussian), so seeding,
checkpoints and ``fork_rng`` work as before, and both paths give the same actions for
the same seed. The weights are numpy views of the model's
parameters, so every optimizer step is seen.

Examples:
    >>> import gymnasium as gym, numpy as np, torch
    >>> from rlblocks.train.trainer_config import PPOConfig
    >>> from rlblocks.train.policy import Policy
    >>> pol = Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), PPOConfig())
    >>> isinstance(pol.actor, FCActor), pol.actor.description
    (True, 'fast numpy FC (2 hidden layers)')
    >>> obs = np.zeros((5, 4), np.float32)
    >>> _ = torch.manual_seed(0)
    >>> fast = pol.act(obs, [], explore=True)
    >>> _ = torch.manual_seed(0)
    >>> with torch.no_grad():
    ...     dist, _, _ = pol.actor.fallback.forward(pol.input_dict(obs), [], None)
    ...     ref = dist.sample()
    >>> bool((fast["actions"] == ref.numpy()).all())
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlblocks import _core
from rlblocks._impl import native
from rlblocks.distributions.base import FLOAT_MIN, MASK_THRESHOLD
from rlblocks.masks import MASK_KEY, OBS_KEY, MaskLayout, check_action_mask
from rlblocks.models.action_mask import ActionMaskModel
from rlblocks.train.fast.dense_layers import FCLayers, NumpyWeights, numpy_weights, run_numpy
from rlblocks.train.fast.heads import (
    CategoricalHead,
    Head,
    MultiCategoricalHead,
    TorchHead,
    mask_logits,
    numpy_head,
    torch_head,
)

if TYPE_CHECKING:
    from rlblocks.models.modelv2 import ModelV2
    from rlblocks.train.actor import Actor, ActorInput, Forward

__all__ = ["FUSED_ROWS", "FCActor", "MaskColumns"]

#: Up to this many rows the actor's numpy forward runs each branch's layers in one
#: ``_core.dense_forward`` call (numpy's three dispatches per layer cost more there); from
#: about 128 rows on numpy's BLAS matmul is as fast or faster (docs/benchmarks.md).
FUSED_ROWS = 64

_data_ptr = torch.Tensor.data_ptr
_FLOAT_MIN = np.float32(FLOAT_MIN)


def _model_input(obs: Any) -> np.ndarray:
    """``obs`` as the float32 rows ``[B, features]`` the first layer takes (no copy when
    it already is)."""
    if type(obs) is np.ndarray and obs.ndim == 2 and obs.dtype == np.float32:
        return obs
    return np.asarray(obs).reshape(len(obs), -1).astype(np.float32, copy=False)


@dataclass(frozen=True)
class MaskColumns:
    """Where an :class:`~rlblocks.models.action_mask.ActionMaskModel`'s flat observation
    holds the mask and the wrapped model's input, and the model itself (its hooks count)."""

    wrapper: ModelV2
    mask: slice
    obs: slice


class FCActor:
    """The FC model's actor; build it with :meth:`build` (a reason string when the model
    is not the default fully connected network).

    Attributes:
        layers: The model's layers as tensors.
        fallback: The actor that calls the module, for what this one does not cover.
        numpy: Whether ``act`` / ``values`` run in numpy (float32 CPU model, a head that
            :func:`~rlblocks.train.fast.heads.numpy_head` draws).
        declined: Why numpy does not serve (None when it does).
        head: The numpy head (None when numpy declined).
        mask_layout: The action mask's layout over the outputs (None without a mask).
        columns: For an ``ActionMaskModel``, where its observation holds the mask.
        description: What serves, for the policy's log line.
    """

    def __init__(
        self,
        layers: FCLayers,
        dist_class: Callable[..., Any],
        fallback: Actor,
        head: Head | str,
        mask_layout: MaskLayout | None = None,
        columns: MaskColumns | None = None,
    ) -> None:
        self.layers = layers
        self.dist_class = dist_class
        self.fallback = fallback
        self.head: Head | None = None if isinstance(head, str) else head
        self.declined: str | None = head if isinstance(head, str) else None
        self.numpy = self.head is not None
        self.mask_layout = mask_layout
        # a mask whose blocks make up the whole output row, in order (discrete actions
        # alone): checked and applied in a few whole-array operations
        self._whole_mask = mask_layout is not None and all(
            piece[0] == "mask" for piece in mask_layout.pieces
        )
        self._block_starts = [a for a, _ in mask_layout.segments] if mask_layout else []
        # one masked Categorical block over the whole row: masking and draw in one kernel call
        self._fused = (
            self._whole_mask
            and len(self._block_starts) == 1
            and isinstance(self.head, CategoricalHead)
            and self.head.masked
        )
        self.columns = columns
        hidden = f"{len(layers.trunk)} hidden layers"
        if isinstance(self.head, TorchHead):
            hidden += f"; {self.head.name} head drawn by torch"
        self.description = (
            f"fast numpy FC ({hidden})"
            if self.numpy
            else f"module-free torch FC ({hidden}; numpy declined: {self.declined})"
        )
        self._params = list(layers.model.parameters())
        self._key: tuple[int, ...] = ()
        self._weights: tuple[NumpyWeights, NumpyWeights, NumpyWeights, NumpyWeights] | None = None
        self._policy_stack: NumpyWeights = []  # trunk then logits layer, for dense_forward
        self._value_stack: NumpyWeights = []  # a separate value trunk then the value layer

    @classmethod
    def build(
        cls,
        model: ModelV2,
        dist_class: Callable[..., Any],
        fallback: Actor,
        mask_layout: MaskLayout | None = None,
        sampled_logp: bool = True,
    ) -> FCActor | str:
        """The actor for ``model`` with ``dist_class``, or why there is none (not the
        default FC model, alone or inside an ``ActionMaskModel`` that hands it the
        observations). ``mask_layout``: the layout of a mask the caller hands
        :meth:`masked` itself (RLlib's module). ``sampled_logp``: how a
        :class:`~rlblocks.train.fast.heads.TorchHead` scores a draw (the policy's
        ``sampled_action_logp``, else RLlib's ``logp(actions)``)."""
        columns = None
        inner = model
        if isinstance(model, ActionMaskModel):
            if model.full_obs:
                return "an action-mask model whose wrapped model reads the mask"
            inner, mask_layout = model.inner, model.layout
            columns = MaskColumns(model, model.mask_columns, model.obs_columns)
        layers = FCLayers.from_model(inner, complex_input=True)
        if layers is None:
            return "not the default fully connected model"
        if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in model.parameters()):
            return cls(layers, dist_class, fallback, "not float32 on the CPU", mask_layout, columns)
        probe = dist_class(torch.zeros(1, int(model.num_outputs or 0)), model)
        head = numpy_head(probe)
        if isinstance(head, str):
            head = torch_head(probe, dist_class, model, sampled_logp)
        return cls(layers, dist_class, fallback, head, mask_layout, columns)

    # --- the door -------------------------------------------------------------------------
    def forward(self, input_dict: dict[str, Any], state: list[Any], seq_lens: Any) -> Forward:
        """``(distribution, values [B], state_out)``: the layers as tensors when no graph
        is needed (and no mask model wraps them), else the module."""
        if self.columns is not None or torch.is_grad_enabled() or not self.matches_model():
            return self.fallback.forward(input_dict, state, seq_lens)
        out, values = self.layers.infer(input_dict["obs"])
        return self.dist_class(out, self.layers.model), values, state

    def act(self, inputs: ActorInput, explore: bool, full: bool) -> dict[str, Any]:
        """:meth:`Policy.act <rlblocks.train.policy.Policy.act>`'s result."""
        if not self._serves(inputs.obs):
            return self.fallback.act(inputs, explore, full)
        obs = inputs.obs
        mask = None
        if self.columns is not None:
            flat = obs.reshape(len(obs), -1)
            obs, mask = flat[:, self.columns.obs], flat[:, self.columns.mask]
        out, values = self.forward_numpy(obs)
        if mask is not None:
            out = self.masked(out, mask)
        if isinstance(self.head, TorchHead):
            actions, logp = self.head.draw(out, explore, logp=full)
            dist_inputs = self.head.inputs
        else:
            actions, logp = self.draw(out, explore)
            dist_inputs = out
        if not full:
            return {"actions": actions, "state_out": []}
        return {
            "actions": actions,
            "state_out": [],
            "logp": logp,
            "vf_preds": values,
            "dist_inputs": dist_inputs,
        }

    def values(self, inputs: ActorInput) -> np.ndarray:
        """Value estimates ``[B]`` (float32)."""
        if not self._serves(inputs.obs):
            return self.fallback.values(inputs)
        obs = inputs.obs
        if self.columns is not None:
            obs = obs.reshape(len(obs), -1)[:, self.columns.obs]
        return self.forward_numpy(obs)[1]

    def _serves(self, obs: Any) -> bool:
        return self.numpy and isinstance(obs, np.ndarray) and self.matches_model()

    def matches_model(self) -> bool:
        """Whether a pass through the layers still equals calling the model (no hooks on
        it, nor on an action-mask model around it; no layer replaced)."""
        if self.columns is not None:
            wrapper = self.columns.wrapper
            if wrapper._forward_hooks or wrapper._forward_pre_hooks:
                return False
        return self.layers.matches_model()

    # --- weights --------------------------------------------------------------------------
    def _arrays(self) -> tuple[NumpyWeights, NumpyWeights, NumpyWeights, NumpyWeights]:
        """Numpy views of the weights (re-taken if a parameter's storage moved)."""
        key = tuple(map(_data_ptr, self._params))
        if key != self._key or self._weights is None:
            views = numpy_weights
            lay = self.layers
            self._weights = (
                views(lay.trunk),
                views([lay.logits] if lay.logits else []),
                views(lay.value_trunk),
                views([lay.value_head]),
            )
            trunk, head, value_trunk, value_head = self._weights
            self._policy_stack = trunk + head
            self._value_stack = value_trunk + value_head
            self._key = key
        return self._weights

    # --- forward --------------------------------------------------------------------------
    def forward_numpy(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(distribution inputs [B, K], values [B])`` as float32 arrays (the FC model's
        own input: without the mask columns). Up to :data:`FUSED_ROWS` rows the layers
        run in one native call per branch (``_core.dense_forward``), else in numpy."""
        trunk, head, value_trunk, value_head = self._arrays()
        x = _model_input(obs)
        if len(x) <= FUSED_ROWS and native():
            if self.layers.value_trunk is not None:
                out = _core.dense_forward(x, self._policy_stack)
                values = _core.dense_forward(x, self._value_stack)
            else:
                features = _core.dense_forward(x, trunk)
                out = _core.dense_forward(features, head)
                values = _core.dense_forward(features, value_head)
            return self._with_log_std(out), values[:, 0]
        features = run_numpy(trunk, x)
        out = self._with_log_std(run_numpy(head, features))
        vf_in = run_numpy(value_trunk, x) if self.layers.value_trunk is not None else features
        return out, run_numpy(value_head, vf_in)[:, 0]

    def policy_numpy(self, obs: np.ndarray) -> np.ndarray:
        """The distribution inputs ``[B, K]`` alone (float32; no value branch; one native
        call up to :data:`FUSED_ROWS` rows)."""
        trunk, head, _, _ = self._arrays()
        x = _model_input(obs)
        if len(x) <= FUSED_ROWS and native():
            return self._with_log_std(_core.dense_forward(x, self._policy_stack))
        return self._with_log_std(run_numpy(head, run_numpy(trunk, x)))

    def _with_log_std(self, out: np.ndarray) -> np.ndarray:
        if self.layers.free_log_std is None:
            return out
        log_std = self.layers.free_log_std.detach().numpy()
        return np.concatenate([out, np.broadcast_to(log_std, (len(out), len(log_std)))], 1)

    def dist_inputs(self, obs: Any) -> np.ndarray | None:
        """The distribution inputs ``[B, K]`` for RLlib's batched observation (a
        ``{observations, action_mask}`` dict when a mask is handed to this actor, the mask
        applied), or None for what numpy does not take (a tensor)."""
        if self.mask_layout is not None and self.columns is None:
            if not isinstance(obs, dict):
                return None
            return self.masked(self.policy_numpy(obs[OBS_KEY]), obs[MASK_KEY])
        return self.policy_numpy(obs) if isinstance(obs, np.ndarray) else None

    def masked(self, out: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """``out`` with the masked actions' logits at ``FLOAT_MIN``, as the model masks
        them; refuses (ValueError, the acting doors' message) a row that leaves some
        component no legal action."""
        return self._masked(out, mask)[0]

    def _masked(self, out: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, bool]:
        """``(masked logits, floored)``: :meth:`masked`'s result, and whether the masked
        distributions' rule (a logit ``<= -1e8`` counts as ``FLOAT_MIN``) changes nothing
        in it (every raw logit above the threshold: known on the fast path alone)."""
        layout = self.mask_layout
        assert layout is not None
        m = mask
        if self._whole_mask and type(m) is np.ndarray and m.shape == (len(out), layout.size):
            legal = m > 0
            if len(self._block_starts) == 1:
                every = legal.any(1).all()
            else:
                every = np.logical_or.reduceat(legal, self._block_starts, axis=1).all()
            if every and out.dtype == np.float32:
                return np.where(m <= 0, _FLOAT_MIN, out), bool(out.min() > MASK_THRESHOLD)
        check_action_mask(mask, layout)  # raises for a row without a legal action
        return mask_logits(out, mask, layout), False

    def sample(self, obs: Any, explore: bool) -> tuple[np.ndarray, Any, np.ndarray] | None:
        """``(distribution inputs, actions, logp)`` for RLlib's batched observation:
        :meth:`dist_inputs` then :meth:`draw` (None where :meth:`dist_inputs` is); a masked
        Categorical over the whole row masks and draws in one kernel call
        (:meth:`~rlblocks.train.fast.heads.CategoricalHead.draw_masked`), a batch it refuses
        goes the checked path, which raises the acting doors' message."""
        if self.mask_layout is None or self.columns is not None or not isinstance(obs, dict):
            logits = self.dist_inputs(obs)
            if logits is None:
                return None
            return (logits, *self.draw(logits, explore))
        out, mask = self.policy_numpy(obs[OBS_KEY]), obs[MASK_KEY]
        head = self.head
        if self._fused and type(mask) is np.ndarray and mask.shape == out.shape:
            assert isinstance(head, CategoricalHead)
            fused = head.draw_masked(out, mask.astype(np.float32, copy=False), explore)
            if fused is not None:
                return fused
        logits, floored = self._masked(out, mask)
        if floored and isinstance(head, (CategoricalHead, MultiCategoricalHead)):
            return (logits, *head.draw(logits, explore, floored=True))
        return (logits, *self.draw(logits, explore))

    def draw(self, out: np.ndarray, explore: bool) -> tuple[Any, np.ndarray]:
        """``(actions, logp)`` for the distribution inputs ``out``: a draw (``explore``) or
        the deterministic action, scored under the full distribution; the random numbers
        are torch's, drawn as the torch distribution draws them."""
        assert self.head is not None
        return self.head.draw(out, explore)
