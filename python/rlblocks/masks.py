"""RLlib's action-mask convention, shared by the native trainer, export and ``rlblocks.rllib``
(the model wrapper that masks a model's outputs is
:class:`~rlblocks.models.action_mask.ActionMaskModel`).

An environment masks actions by observing ``Dict(action_mask=..., observations=...)``
(exactly these two keys): ``observations`` is the real observation (any space) and
``action_mask`` a 1-D ``MultiBinary`` or ``Box`` whose entries say which actions are legal
(``> 0`` legal, ``<= 0`` masked).

Mask layout. The mask covers the *discrete* components of the action space, concatenated in
the action space's flatten order (Tuple positions in order, Dict keys sorted: RLlib's
``flatten_space`` order, which is also the order of the action distribution's inputs):

* ``Discrete(n)``: ``n`` entries, entry ``i`` for action ``start + i``;
* ``MultiDiscrete(nvec)``: ``sum(nvec)`` entries, one block per component (RLlib's
  convention), component ``j``'s block for its ``nvec[j]`` values;
* an integer ``Box`` (a multi-categorical): one block of ``high - low + 1`` entries per
  element;
* continuous components (float ``Box``, ``Simplex``) take no entries and are never masked.

For example ``Tuple(Discrete(3), Box(-1, 1, (2,)), MultiDiscrete([2, 2]))`` has a mask of
``3 + 2 + 2 = 7`` entries: ``[d0 d1 d2 | m0_0 m0_1 | m1_0 m1_1]``.

Masked logits are set to the float32 minimum (``FLOAT_MIN``), so a masked action has
probability exactly 0: it is never sampled and never the argmax. A component whose mask
block has no legal entry cannot be acted on: :func:`check_action_mask` raises a
``ValueError`` at every acting door (the native policy, the exported runtime, the RLlib
module's inference/exploration pass); inside the model such a block is left unmasked
(these rows are the zero padding of recurrent training sequences, which no loss reads).

Examples:
    >>> import gymnasium as gym, torch
    >>> from gymnasium.spaces import Box, Dict, Discrete, MultiBinary
    >>> space = Dict({"action_mask": MultiBinary(3), "observations": Box(-1, 1, (4,))})
    >>> is_mask_space(space)
    True
    >>> layout = mask_layout(Discrete(3), 3, space[MASK_KEY])
    >>> apply_action_mask(torch.zeros(1, 3), torch.tensor([[1.0, 0.0, 1.0]]), layout)[0, 1] < -1e38
    tensor(True)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box, Discrete, MultiBinary, MultiDiscrete

from rlblocks.config import ModelConfig
from rlblocks.distributions import (
    FLOAT_MIN,
    MaskedCategorical,
    MaskedMultiCategorical,
    select_action_dist,
)
from rlblocks.layout import layout
from rlblocks.mask_keys import (
    MASK_KEY,
    OBS_KEY,
    PZ_OBS_KEY,
    is_mask_space,
    mask_form,
    mask_form_space,
    refuse_unread_mask,
)
from rlblocks.spaces import format_path, space_path_items

__all__ = [
    "MASK_KEY",
    "OBS_KEY",
    "PZ_OBS_KEY",
    "MaskLayout",
    "action_mask_fill",
    "apply_action_mask",
    "check_action_mask",
    "is_mask_space",
    "mask_form",
    "mask_form_space",
    "mask_layout",
    "masked_action_rows",
    "masked_dist",
    "refuse_unread_mask",
]


@dataclass(frozen=True)
class _Leaf:
    """One discrete action component group (a Discrete / MultiDiscrete / integer Box leaf)."""

    path: tuple[Any, ...]
    space: gym.Space
    logit_offset: int  # first logit column of the leaf in the distribution's inputs
    mask_offset: int  # first mask entry of the leaf
    nvec: tuple[int, ...]  # categories per component (Discrete: one component)
    starts: tuple[int, ...]  # lowest action value per component


@dataclass(frozen=True)
class MaskLayout:
    """Where each mask entry lands among the model's outputs.

    Attributes:
        size: The mask's length (sum of the discrete components' categories).
        num_outputs: The model's output size (the distribution's inputs).
        leaves: The discrete leaves, flatten order.
        pieces: ``(kind, a, b)`` covering the outputs left to right: ``("mask", start, end)``
            takes mask entries ``start:end``, ``("open", width, 0)`` is a continuous part.
        segments: ``(start, end)`` mask block of each categorical component.
    """

    size: int
    num_outputs: int
    leaves: tuple[_Leaf, ...]
    pieces: tuple[tuple[str, int, int], ...]
    segments: tuple[tuple[int, int], ...]

    def describe(self) -> str:
        """One line: the components the mask covers, in order."""
        parts = []
        for leaf in self.leaves:
            where = format_path(leaf.path, "action") if leaf.path else "action"
            parts.append(f"{where} {leaf.space}: {sum(leaf.nvec)} entries at {leaf.mask_offset}")
        return "; ".join(parts)


def _discrete_leaf(space: gym.Space) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(nvec, starts)`` of a discrete leaf; None for a continuous one."""
    if isinstance(space, Discrete):
        return (int(space.n),), (int(space.start),)
    if isinstance(space, MultiDiscrete):
        nvec = tuple(int(v) for v in np.asarray(space.nvec).ravel())
        starts = tuple(
            int(v)
            for v in np.broadcast_to(
                np.asarray(getattr(space, "start", 0)), np.asarray(space.nvec).shape
            ).ravel()
        )
        return nvec, starts
    if isinstance(space, Box) and np.issubdtype(space.dtype, np.integer):
        lo, hi = int(np.min(space.low)), int(np.max(space.high))
        k = int(np.prod(space.shape, dtype=np.int64))
        return (hi - lo + 1,) * k, (lo,) * k
    return None


def mask_layout(
    action_space: gym.Space,
    num_outputs: int | None,
    mask_space: gym.Space,
    model_config: Mapping[str, Any] | ModelConfig | None = None,
) -> MaskLayout:
    """The layout of ``mask_space`` over the outputs of a model for ``action_space``.

    Args:
        action_space: The action space.
        num_outputs: The model's output size (what the action distribution takes).
        mask_space: The ``action_mask`` observation space (1-D MultiBinary or Box).
        model_config: The model config (picks the continuous leaves' output sizes).

    Raises:
        ValueError: A mask that is not 1-D, an action space without a discrete component,
            a mask of the wrong length (expected vs given), or outputs that do not have the
            layout of the catalog's distributions.

    Examples:
        >>> from gymnasium.spaces import Tuple
        >>> lay = mask_layout(Tuple((Discrete(3), Box(-1, 1, (2,)))), 7, MultiBinary(3))
        >>> lay.size, lay.pieces
        (3, (('mask', 0, 3), ('open', 4, 0)))
    """
    if not isinstance(mask_space, (MultiBinary, Box)) or len(mask_space.shape or ()) != 1:
        raise ValueError(
            f"the {MASK_KEY!r} observation must be a 1-D MultiBinary or Box, got {mask_space}"
        )
    given = int(mask_space.shape[0])
    config = ModelConfig.from_dict(model_config).to_dict()
    config["custom_action_dist"] = None
    leaves: list[_Leaf] = []
    pieces: list[tuple[str, int, int]] = []
    segments: list[tuple[int, int]] = []
    logit, entry = 0, 0
    nested = isinstance(action_space, (gym.spaces.Tuple, gym.spaces.Dict))
    for path, leaf in space_path_items(action_space, sort_dict_keys=True):
        found = _discrete_leaf(leaf)
        if found is None:
            if not nested:
                break
            width = int(select_action_dist(leaf, config)[1])
            pieces.append(("open", width, 0))
            logit += width
            continue
        nvec, starts = found
        leaves.append(_Leaf(path, leaf, logit, entry, nvec, starts))
        pieces.append(("mask", entry, entry + sum(nvec)))
        for n in nvec:
            segments.append((entry, entry + n))
            entry += n
        logit += sum(nvec)
    if not leaves:
        raise ValueError(
            f"an {MASK_KEY!r} observation needs a Discrete or MultiDiscrete action space (or an "
            f"integer Box, or a Tuple / Dict with such a component) to mask, got {action_space}"
        )
    if given != entry:
        raise ValueError(
            f"{MASK_KEY!r} has {given} entries but the action space {action_space} needs "
            f"{entry} (one per category of each discrete component, flatten order: "
            f"{MaskLayout(entry, logit, tuple(leaves), (), ()).describe()})"
        )
    if num_outputs is not None and int(num_outputs) != logit:
        raise ValueError(
            f"cannot place the {MASK_KEY!r} over the model outputs: the action space "
            f"{action_space} gives {logit} distribution inputs in the catalog's layout, the "
            f"action distribution takes {num_outputs} (a custom_action_dist with another "
            "layout cannot be masked)"
        )
    return MaskLayout(entry, logit, tuple(leaves), tuple(pieces), tuple(segments))


def _open_blocks(mask: torch.Tensor, layout: MaskLayout) -> torch.Tensor:
    """Bool ``[B, size]``: entries whose whole component block is masked (left open)."""
    legal = mask > 0
    parts = []
    for start, end in layout.segments:
        none = ~legal[:, start:end].any(-1, keepdim=True)
        parts.append(none.expand(-1, end - start))
    return torch.cat(parts, -1)


def apply_action_mask(logits: torch.Tensor, mask: torch.Tensor, layout: MaskLayout) -> torch.Tensor:
    """``logits`` with every masked action's logit set to ``FLOAT_MIN``.

    A component whose block has no legal entry is left as it is (see the module docstring:
    the acting doors refuse such rows with :func:`check_action_mask`). Traceable by
    ``torch.export`` (no data-dependent control flow).

    Raises:
        ValueError: ``mask``'s last dim or ``logits``' last dim does not fit ``layout``.
    """
    mask = mask.to(logits.device)
    if mask.shape[-1] != layout.size or logits.shape[-1] != layout.num_outputs:
        raise ValueError(
            f"{MASK_KEY} of shape {tuple(mask.shape)} and logits of shape "
            f"{tuple(logits.shape)}: expected {layout.size} mask entries over "
            f"{layout.num_outputs} outputs"
        )
    lead = logits.shape[:-1]
    full = action_mask_fill(mask.reshape(-1, layout.size), layout)
    return logits.masked_fill(full.reshape(*lead, layout.num_outputs), FLOAT_MIN)


def action_mask_fill(mask: torch.Tensor, layout: MaskLayout) -> torch.Tensor:
    """Bool ``[B, num_outputs]``: the outputs :func:`apply_action_mask` sets to ``FLOAT_MIN``
    for the mask rows ``mask [B, size]`` (a component without a legal entry left open).

    Examples:
        >>> lay = mask_layout(Discrete(3), 3, MultiBinary(3))
        >>> action_mask_fill(torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]), lay)
        tensor([[False,  True, False],
                [False, False, False]])
    """
    illegal = (mask <= 0) & ~_open_blocks(mask, layout)
    parts = []
    for kind, a, b in layout.pieces:
        if kind == "mask":
            parts.append(illegal[:, a:b])
        else:
            parts.append(
                torch.zeros((illegal.shape[0], a), dtype=torch.bool, device=illegal.device)
            )
    return torch.cat(parts, -1)


def check_action_mask(mask: Any, layout: MaskLayout) -> None:
    """Raises unless every row of ``mask`` ``[B, size]`` leaves each component a legal action.

    Raises:
        ValueError: A row whose mask block of some component has no entry ``> 0`` (no legal
            action), or a mask of the wrong length.

    Examples:
        >>> lay = mask_layout(Discrete(2), 2, MultiBinary(2))
        >>> check_action_mask(np.array([[1, 0], [0, 0]]), lay)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: action_mask row 1 leaves no legal action for action Discrete(2) (mask ...
    """
    m = mask.detach().cpu().numpy() if isinstance(mask, torch.Tensor) else np.asarray(mask)
    m = m.reshape(-1, m.shape[-1]) if m.ndim else m.reshape(1, 1)
    if m.shape[-1] != layout.size:
        raise ValueError(f"{MASK_KEY} rows have {m.shape[-1]} entries, expected {layout.size}")
    legal = m > 0
    if not layout.segments or _every_block_open(legal, layout):
        return
    for leaf in layout.leaves:
        entry = leaf.mask_offset
        for j, n in enumerate(leaf.nvec):
            empty = ~legal[:, entry : entry + n].any(-1)
            if empty.any():
                row = int(np.flatnonzero(empty)[0])
                where = format_path(leaf.path, "action") if leaf.path else "action"
                comp = f" component {j}" if len(leaf.nvec) > 1 else ""
                raise ValueError(
                    f"{MASK_KEY} row {row} leaves no legal action for {where} {leaf.space}"
                    f"{comp} (mask entries {entry}:{entry + n} are all <= 0)"
                )
            entry += n


def _every_block_open(legal: np.ndarray, layout: MaskLayout) -> bool:
    """Whether every row of ``legal [B, size]`` has a True entry in each component's block
    (the blocks tile the mask in order: one reduction per block, all rows at once)."""
    if len(layout.segments) == 1:
        return bool(legal.any(-1).all())
    starts = [a for a, _ in layout.segments]
    return bool(np.logical_or.reduceat(legal, starts, axis=1).all())


def _leaf_actions(actions: Any, path: tuple[Any, ...]) -> np.ndarray:
    for key in path:
        actions = actions[key]
    a = actions.detach().cpu().numpy() if isinstance(actions, torch.Tensor) else actions
    return np.asarray(a)


def masked_action_rows(actions: Any, mask: Any, layout: MaskLayout) -> np.ndarray:
    """Bool ``[B]``: rows whose action (batched, the action space's structure) is masked.

    Examples:
        >>> lay = mask_layout(Discrete(3), 3, MultiBinary(3))
        >>> masked_action_rows(np.array([0, 1]), np.array([[1, 1, 0], [1, 0, 1]]), lay)
        array([False,  True])
    """
    m = mask.detach().cpu().numpy() if isinstance(mask, torch.Tensor) else np.asarray(mask)
    m = m.reshape(-1, layout.size)
    bad = np.zeros(m.shape[0], bool)
    rows = np.arange(m.shape[0])
    for leaf in layout.leaves:
        a = _leaf_actions(actions, leaf.path).reshape(m.shape[0], -1).astype(np.int64)
        entry = leaf.mask_offset
        for j, n in enumerate(leaf.nvec):
            idx = a[:, j] - leaf.starts[j]
            outside = (idx < 0) | (idx >= n)
            idx = np.clip(idx, 0, n - 1)
            bad |= outside | (m[rows, entry + idx] <= 0)
            entry += n
    return bad


def masked_dist(action_space: gym.Space) -> Any:
    """The masked twin of the catalog's default distribution for a Discrete or MultiDiscrete
    ``action_space`` (:class:`MaskedCategorical` / :class:`MaskedMultiCategorical`, which
    read legality from ``FLOAT_MIN`` logits); None for other spaces (their catalog
    distribution never draws a ``FLOAT_MIN`` logit either)."""
    if isinstance(action_space, Discrete):
        return partial(MaskedCategorical, action_space=action_space)
    if isinstance(action_space, MultiDiscrete):
        nvec = [int(v) for v in np.asarray(action_space.nvec).ravel()]
        return partial(MaskedMultiCategorical, input_lens=nvec, action_space=action_space)
    return None


def mask_columns(
    obs_space: gym.Space, options: Mapping[str, Any] | None = None
) -> tuple[slice, slice]:
    """``(mask, observations)`` column slices of the flat (preprocessed) observation of an
    action-mask Dict (``obs_space`` or its ``original_space``), in the Dict's key order;
    ``options``: the preprocessor options (the model config)."""
    original = getattr(obs_space, "original_space", obs_space)
    if not is_mask_space(original):
        raise ValueError(f"not an action-mask observation space: {original}")
    lay = layout(original, options)
    return lay.find((MASK_KEY,)).columns, lay.find((OBS_KEY,)).columns
