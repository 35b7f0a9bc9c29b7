"""Numpy action heads: the torch distributions' draws on the distribution inputs, in numpy.

A head turns a batch of distribution inputs ``[B, K]`` (float32) into ``(actions, logp)``:
a draw (``explore``) or the deterministic action, scored under the full distribution. The
random numbers come from torch's generator, drawn exactly as the torch distribution draws
them (number, shape and order of the ``torch.rand`` / ``torch.randn`` calls; filled into
a buffer kept per thread and shape, the same numbers without a new tensor per call), so
the actions equal the module path's for the same seed and the generator ends in the same
state:

* :class:`CategoricalHead` (Categorical, MaskedCategorical): one uniform per row, the
  inverse CDF (``_core.categorical_draw`` or its numpy twin; with the action mask beside
  the logits, masking and draw in one ``_core.masked_categorical_draw``);
* :class:`MultiCategoricalHead` (MultiCategorical, MaskedMultiCategorical; MultiDiscrete
  and integer Box actions): one uniform per row and component (row-major), the same
  inverse CDF per component, blocks padded to the largest with zero-probability slots;
* :class:`GaussianHead` (DiagGaussian): one normal per row and action dimension
  (``_core.diag_gaussian_draw`` or its numpy twin);
* :class:`MultiActionHead` (MultiActionDistribution over Tuple / Dict actions): the
  children's heads in flatten order (Dict keys sorted), as the torch distribution draws
  its children, returned in the action space's structure.

:func:`numpy_head` picks the head for a distribution (an instance built on zeros) or says
why there is none; :func:`torch_head` serves the other distributions that never read the
model (Beta, SquashedGaussian, Deterministic, Dirichlet, a tempered Categorical) with the
torch distribution itself on the numpy forward's output; :func:`mask_logits` is
:func:`rlblocks.masks.apply_action_mask` in numpy for rows the acting door has checked
(:func:`rlblocks.masks.check_action_mask`).

Examples:
    >>> import torch, numpy as np
    >>> from rlblocks.distributions import MultiCategorical
    >>> import gymnasium as gym
    >>> space = gym.spaces.MultiDiscrete([2, 3])
    >>> dist = MultiCategorical(torch.zeros(1, 5), None, action_space=space)
    >>> head = numpy_head(dist)
    >>> logits = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    >>> _ = torch.manual_seed(0)
    >>> actions, logp = head.draw(logits, True)
    >>> _ = torch.manual_seed(0)
    >>> ref = MultiCategorical(torch.from_numpy(logits), None, action_space=space).sample()
    >>> bool((actions == ref.numpy()).all()), actions.dtype.name, logp.shape
    (True, 'int64', (4,))
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import numpy as np
import torch

from rlblocks import _core
from rlblocks._impl import native
from rlblocks._reference import categorical as reference
from rlblocks._reference import diag_gaussian as gaussian_reference
from rlblocks.distributions import (
    Beta,
    Categorical,
    Deterministic,
    DiagGaussian,
    Dirichlet,
    MaskedCategorical,
    MaskedMultiCategorical,
    MultiActionDistribution,
    MultiCategorical,
    SquashedGaussian,
)
from rlblocks.distributions.base import FLOAT_MIN, LOG_BOUND, MASK_THRESHOLD
from rlblocks.distributions.categorical import _multi_categorical_layout
from rlblocks.distributions.multi_action import _unflatten
from rlblocks.masks import MaskLayout
from rlblocks.nest import tree_map

__all__ = [
    "CategoricalHead",
    "GaussianHead",
    "Head",
    "MultiActionHead",
    "MultiCategoricalHead",
    "TorchHead",
    "mask_logits",
    "numpy_head",
    "torch_head",
]


class Head(Protocol):
    """What every head answers."""

    def draw(self, out: np.ndarray, explore: bool) -> tuple[Any, np.ndarray]:
        """``(actions, logp [B] float32)`` for the distribution inputs ``out [B, K]``."""
        ...


def _categorical(logits: np.ndarray, uniforms: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    draw = _core.categorical_draw if native() else reference.categorical_draw
    return draw(np.ascontiguousarray(logits, np.float32), uniforms)  # type: ignore[no-any-return]


def _masked_categorical(
    logits: np.ndarray, mask: np.ndarray, uniforms: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    draw = _core.masked_categorical_draw if native() else reference.masked_categorical_draw
    return draw(logits, mask, uniforms)  # type: ignore[no-any-return]


#: Per thread: ``(fill, numpy view)`` of a reused torch buffer per (kind, shape, dtype).
_scratch = threading.local()


def _torch_draws(kind: str, shape: tuple[int, ...]) -> np.ndarray:
    """``torch.rand(shape)`` (``kind`` "uniform") or ``torch.randn(shape)`` ("normal") as
    numpy: the same numbers from torch's default generator (those functions fill a new
    tensor with ``uniform_`` / ``normal_``; this fills a buffer kept per thread, shape and
    default dtype, without the allocation and argument parsing). The array is the buffer:
    valid until the next draw of that shape on this thread."""
    cache: dict[Any, tuple[Any, np.ndarray]] | None = getattr(_scratch, "cache", None)
    if cache is None:
        cache = _scratch.cache = {}
    key = (kind, shape, torch.get_default_dtype())
    entry = cache.get(key)
    if entry is None:
        if len(cache) >= 64:  # a bound on the batch sizes kept
            cache.clear()
        buf = torch.empty(shape)
        entry = cache[key] = (buf.uniform_ if kind == "uniform" else buf.normal_, buf.numpy())
    fill, view = entry
    fill()
    return view


def _floor_masked(logits: np.ndarray) -> tuple[np.ndarray, bool]:
    """The masked distributions' rule: a logit ``<= -1e8`` marks a masked action
    (``FLOAT_MIN``); and whether the rule changed a logit (it may then have left a row
    or component with no legal action: :func:`_refuse_fully_masked`)."""
    low = logits <= MASK_THRESHOLD
    if not low.any():
        return logits, False
    return np.where(low, np.float32(FLOAT_MIN), logits), True


def _refuse_fully_masked(rows: np.ndarray, message: str) -> None:
    """The torch distribution's ValueError ``message`` where a row of ``rows`` (a batch
    row, or one component's padded block) has no legal logit, rather than a draw of a
    masked action."""
    if (rows.max(axis=1) <= MASK_THRESHOLD).any():
        raise ValueError(message)


class CategoricalHead:
    """Categorical (temperature 1) and MaskedCategorical: one uniform per row."""

    def __init__(self, start: int, masked: bool) -> None:
        self.start, self.masked = start, masked

    def draw(
        self, out: np.ndarray, explore: bool, floored: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(actions int64 [B], logp [B])``; ``floored``: the caller knows every logit is
        ``FLOAT_MIN`` or above the masked rule's threshold (the rule changes nothing)."""
        logits, changed = _floor_masked(out) if self.masked and not floored else (out, False)
        if changed:
            _refuse_fully_masked(logits, MaskedCategorical._fully_masked)
        uniforms = _torch_draws("uniform", (len(logits),)) if explore else None
        index, logp = _categorical(logits, uniforms)
        return (index + self.start if self.start else index), logp

    def draw_masked(
        self, out: np.ndarray, mask: np.ndarray, explore: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``(masked logits, actions, logp)`` for float32 ``out`` and a float32 ``mask`` of
        its shape in one kernel call (``masked_categorical_draw``): the model's masking
        (``FLOAT_MIN`` where ``mask <= 0``) and :meth:`draw` on the result. None where the
        kernel refuses the batch (a row without a legal action, or with none above the
        masked rule's floor; non-finite logits): the caller's checked path raises the
        acting doors' message there (the batch's uniforms are drawn by then)."""
        uniforms = _torch_draws("uniform", (len(out),)) if explore else None
        try:
            masked, index, logp = _masked_categorical(out, mask, uniforms)
        except ValueError:
            return None
        return masked, (index + self.start if self.start else index), logp


class MultiCategoricalHead:
    """MultiCategorical and MaskedMultiCategorical: one uniform per row and component."""

    def __init__(
        self,
        lens: list[int],
        offsets: np.ndarray,
        shape: tuple[int, ...],
        out_of_bounds: np.ndarray | None,
        masked: bool,
    ) -> None:
        self.k, self.nmax = len(lens), max(lens)
        self.offsets = offsets if np.any(offsets) else None
        self.shape = shape
        self.illegal = None if out_of_bounds is None else out_of_bounds > 0
        self.masked = masked
        # where each input column lands in a grid of blocks padded to the largest (the
        # padding: zero-probability slots)
        self.dest: np.ndarray | None = None
        if any(n != self.nmax for n in lens):
            self.dest = np.concatenate(
                [np.arange(i * self.nmax, i * self.nmax + n) for i, n in enumerate(lens)]
            )

    def draw(
        self, out: np.ndarray, explore: bool, floored: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(actions int64 [B, *action_shape], logp [B])``; ``floored``: as
        :meth:`CategoricalHead.draw`'s."""
        b = len(out)
        logits, changed = _floor_masked(out) if self.masked and not floored else (out, False)
        if self.illegal is not None:
            logits = np.where(self.illegal, np.float32(FLOAT_MIN), logits)
        if self.dest is not None:
            grid = np.full((b, self.k * self.nmax), FLOAT_MIN, np.float32)
            grid[:, self.dest] = logits
        else:
            grid = np.ascontiguousarray(logits, np.float32)
        grid = grid.reshape(b * self.k, self.nmax)
        if changed:
            _refuse_fully_masked(grid, MaskedMultiCategorical._fully_masked)
        uniforms = _torch_draws("uniform", (b * self.k,)) if explore else None
        index, logp = _categorical(grid, uniforms)
        actions = index.reshape(b, self.k)
        if self.offsets is not None:
            actions = actions + self.offsets
        return actions.reshape(b, *self.shape), logp.reshape(b, self.k).sum(1, dtype=np.float32)


class GaussianHead:
    """DiagGaussian: means then log-stds; one normal per row and action dimension."""

    def __init__(self, scalar: bool) -> None:
        self.scalar = scalar  # Box(()) actions: [B], not [B, 1]

    def draw(self, out: np.ndarray, explore: bool) -> tuple[np.ndarray, np.ndarray]:
        """``(actions float32 [B, d] (or [B]), logp [B])``."""
        out = np.asarray(out, np.float32)
        noise = _torch_draws("normal", (len(out), out.shape[1] // 2)) if explore else None
        draw = _core.diag_gaussian_draw if native() else gaussian_reference.diag_gaussian_draw
        actions, logp = draw(out, noise, LOG_BOUND)
        return (actions[:, 0] if self.scalar else actions), logp


class MultiActionHead:
    """MultiActionDistribution: the children's heads over consecutive input slices, drawn
    in flatten order, the actions in the space's structure and the log-probs summed."""

    def __init__(self, children: list[Head], lens: list[int], space_order: Any) -> None:
        self.children = children
        ends = np.cumsum(lens).tolist()
        self.slices = [slice(a, b) for a, b in zip([0, *ends[:-1]], ends, strict=True)]
        self.space_order = space_order
        # a flat Tuple / Dict (every leaf one level down): built directly
        self._flat: tuple[str, list[Any], list[int]] | None = None
        if all(len(path) == 1 for path, _ in space_order):
            keys = [path[0] for path, _ in space_order]
            order = [i for _, i in space_order]
            if keys == list(range(len(keys))):
                self._flat = ("tuple", keys, order)
            elif all(isinstance(key, str) for key in keys):
                self._flat = ("dict", keys, order)

    def draw(self, out: np.ndarray, explore: bool) -> tuple[Any, np.ndarray]:
        """``(actions in the action space's structure, logp [B])``."""
        actions: list[Any] = []
        logp: np.ndarray | None = None
        for head, part in zip(self.children, self.slices, strict=True):
            a, lp = head.draw(out[:, part], explore)
            actions.append(a)
            logp = lp if logp is None else logp + lp
        assert logp is not None
        logp = logp.astype(np.float32, copy=False)
        if self._flat is None:
            return _unflatten(self.space_order, actions), logp
        kind, keys, order = self._flat
        if kind == "tuple":
            return tuple(actions[i] for i in order), logp
        return {key: actions[i] for key, i in zip(keys, order, strict=True)}, logp


#: Distributions that never read the model: a :class:`TorchHead` may build them on the
#: numpy forward's output.
_MODEL_FREE = (
    Beta,
    Categorical,
    DiagGaussian,
    Deterministic,
    Dirichlet,
    MaskedCategorical,
    MaskedMultiCategorical,
    MultiCategorical,
    SquashedGaussian,
)


class TorchHead:
    """A head numpy does not draw, built on the numpy forward's output: the torch
    distribution itself (so its draws and arithmetic are the module path's by
    construction); the module's ``nn.Module`` calls are what it saves.

    ``sampled_logp``: a draw is scored with ``sampled_action_logp`` (the native policy's
    module path), else with ``logp(actions)`` (RLlib's ``GetActions``).

    Attributes:
        name: The distribution's class name.
        inputs: The distribution inputs of the last draw as the distribution holds them
            (``dist.inputs``: Beta's concentrations, where the raw output differs).
    """

    def __init__(self, dist_class: Any, model: Any, sampled_logp: bool, name: str) -> None:
        self.dist_class, self.model, self.sampled_logp = dist_class, model, sampled_logp
        self.name = name  # the distribution's class name
        self.inputs: np.ndarray | None = None

    def draw(self, out: np.ndarray, explore: bool, logp: bool = True) -> tuple[Any, Any]:
        """``(actions, logp [B] float32)``; ``logp`` False: ``(actions, None)`` (a point
        mass has no density: Deterministic's ``logp`` raises, as on the module path)."""
        with torch.no_grad():
            dist = self.dist_class(torch.from_numpy(np.ascontiguousarray(out)), self.model)
            actions = dist.sample() if explore else dist.deterministic_sample()
            score = None
            if logp:
                sampled = explore and self.sampled_logp
                score = dist.sampled_action_logp() if sampled else dist.logp(actions)
                score = score.numpy().astype(np.float32)
            self.inputs = dist.inputs.detach().numpy()
        return tree_map(lambda a: a.detach().numpy(), actions), score


def torch_head(dist: Any, dist_class: Any, model: Any, sampled_logp: bool) -> TorchHead | str:
    """The :class:`TorchHead` for ``dist_class`` (``dist``: an instance) when the
    distribution (and every child of a multi-action one) never reads the model; else why
    not (``"<class> head"``)."""
    kind = type(dist)
    if kind is MultiActionDistribution:
        for child in dist.flat_child_distributions:
            if type(child) not in _MODEL_FREE:
                return f"{kind.__name__} head (a child: {type(child).__name__} head)"
    elif kind not in _MODEL_FREE:
        return f"{kind.__name__} head"
    return TorchHead(dist_class, model, sampled_logp, kind.__name__)


def numpy_head(dist: Any) -> Head | str:
    """The numpy head that draws as ``dist`` (a distribution instance, e.g. built on zeros)
    draws, or why there is none (``"<class> head"``)."""
    kind = type(dist)
    if kind in (Categorical, MaskedCategorical) and dist.temperature == 1.0:
        return CategoricalHead(dist._start, kind is MaskedCategorical)
    if kind in (MultiCategorical, MaskedMultiCategorical):
        lens, offsets, shape, out_of_bounds = _multi_categorical_layout(
            dist.input_lens, dist.action_space
        )
        return MultiCategoricalHead(
            lens, offsets, shape, out_of_bounds, kind is MaskedMultiCategorical
        )
    if kind is DiagGaussian:
        return GaussianHead(dist._scalar)
    if kind is MultiActionDistribution:
        children: list[Head] = []
        for child in dist.flat_child_distributions:
            head = numpy_head(child)
            if isinstance(head, str):
                return f"{kind.__name__} head (a child: {head})"
            children.append(head)
        return MultiActionHead(children, dist.input_lens, dist._space_order)
    if kind in (Categorical, MaskedCategorical):
        return f"{kind.__name__} head with temperature {dist.temperature}"
    return f"{kind.__name__} head"


def mask_logits(out: np.ndarray, mask: np.ndarray, layout: MaskLayout) -> np.ndarray:
    """:func:`~rlblocks.masks.apply_action_mask` in numpy, for a mask whose every component
    has a legal action (what :func:`~rlblocks.masks.check_action_mask` lets through): every
    masked action's logit set to ``FLOAT_MIN``."""
    illegal = np.asarray(mask).reshape(len(out), layout.size) <= 0
    if layout.size == layout.num_outputs and all(p[0] == "mask" for p in layout.pieces):
        # every output is a mask entry, in order: the blocks make up the whole row
        return np.where(illegal, np.float32(FLOAT_MIN), out).astype(np.float32, copy=False)
    parts = []
    for kind, a, b in layout.pieces:
        if kind == "mask":
            parts.append(illegal[:, a:b])
        else:
            parts.append(np.zeros((len(out), a), bool))
    full = np.concatenate(parts, 1)
    return np.where(full, np.float32(FLOAT_MIN), out).astype(np.float32, copy=False)
