"""Tuple/Dict action spaces: MultiActionDistribution, and the catalog table
(:func:`select_action_dist`) that picks a distribution for every leaf (the two recurse
into each other, so they live together)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box, Dict, Discrete, MultiDiscrete, Tuple

from rlblocks.distributions.base import (
    ActionDistribution,
    TensorLike,
    UnsupportedSpaceError,
    _float_tensor,
    _index_tensor,
    _prod,
    _sum,
)
from rlblocks.distributions.categorical import Categorical, MultiCategorical
from rlblocks.distributions.continuous import (
    Deterministic,
    DiagGaussian,
    Dirichlet,
)
from rlblocks.nest import tree_from_paths
from rlblocks.spaces import Simplex, format_path, space_path_items


def _is_discrete_leaf(space: gym.Space) -> bool:
    return isinstance(space, (Discrete, MultiDiscrete)) or (
        isinstance(space, Box) and np.issubdtype(space.dtype, np.integer)
    )


def _leaf_action_shape(space: gym.Space, path: tuple = ()) -> tuple[int, ...]:
    """Shape of one action of a leaf space (``()`` for Discrete)."""
    if isinstance(space, Discrete):
        return ()
    if isinstance(space, (MultiDiscrete, Box, Simplex)):
        return tuple(space.shape or ())
    raise UnsupportedSpaceError(
        f"action space {format_path(path, 'action_space')} = {space!r} is not supported; "
        "leaves must be Discrete, MultiDiscrete, Box or Simplex"
    )


def _leaf_tensor(
    value: Any, space: gym.Space, batch: torch.Size, device: torch.device, what: str
) -> torch.Tensor:
    if _is_discrete_leaf(space):
        t = _index_tensor(value, what, device)
        if isinstance(space, Discrete) and t.dim() == len(batch) + 1 and t.shape[-1] == 1:
            t = t.squeeze(-1)
        return t
    return _float_tensor(value, what).to(device)


def _flatten_actions(
    paths: list[tuple[tuple, gym.Space]],
    actions: Any,
    batch: torch.Size,
    device: torch.device,
    who: str,
) -> list[torch.Tensor]:
    """Per-leaf action tensors from a structure (tuple/dict) or one flat ``[*batch, w]`` array.

    A flat array is split by the widths the action space defines (1 per Discrete, else the
    product of the leaf's shape), in flatten order (Dict keys sorted): no sampling needed.
    """
    if isinstance(actions, (torch.Tensor, np.ndarray)):
        x = actions if isinstance(actions, torch.Tensor) else torch.as_tensor(actions)
        shapes = [_leaf_action_shape(leaf, path) for path, leaf in paths]
        widths = [_prod(s) for s in shapes]
        if x.dim() != len(batch) + 1 or x.shape[-1] != sum(widths):
            raise ValueError(
                f"{who}: a flat action tensor needs shape {(*batch, sum(widths))} (leaf widths "
                f"{widths} in flatten order), got {tuple(x.shape)}"
            )
        out = []
        for (path, leaf), part, shape in zip(
            paths, torch.split(x, widths, -1), shapes, strict=True
        ):
            part = part.reshape(*batch, *shape)
            out.append(
                _leaf_tensor(part, leaf, batch, device, f"{who} {format_path(path, 'actions')}")
            )
        return out
    out = []
    for path, leaf in paths:
        node = actions
        for key in path:
            try:
                node = node[key]
            except (KeyError, IndexError, TypeError) as err:
                raise ValueError(
                    f"{who}: actions have no entry {format_path(path, 'actions')}; pass a "
                    "structure shaped like the action space or one flat tensor"
                ) from err
        out.append(_leaf_tensor(node, leaf, batch, device, f"{who} {format_path(path, 'actions')}"))
    return out


def _space_order(space: gym.Space) -> list[tuple[tuple, int]]:
    """``(path, index in flatten order)`` per leaf of ``space``, in the space's own order.

    The child distributions come in flatten order (Dict keys sorted, as RLlib's
    MultiActionDistribution); the actions are returned in the space's Dict order.
    """
    index = {path: i for i, (path, _) in enumerate(space_path_items(space, sort_dict_keys=True))}
    return [(path, index[path]) for path, _ in space_path_items(space)]


def _unflatten(space_order: list[tuple[tuple, int]], leaves: list[Any]) -> Any:
    """The action space's structure holding ``leaves`` (given in flatten order)."""
    return tree_from_paths([(path, leaves[i]) for path, i in space_order])


class _class_or_instance_method:
    """A method that receives the instance when called on one and the class otherwise."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj: Any, owner: type) -> Callable[..., Any]:
        return partial(self.fn, owner if obj is None else obj)


class MultiActionDistribution(ActionDistribution):
    """Independent child distributions over a nested Tuple/Dict action space.

    Inputs are split by ``input_lens`` (flatten order, Dict keys sorted) and each child is
    built as ``child(slice, model)``. ``sample`` and ``deterministic_sample`` return the
    action space's structure (tuples and dicts); ``logp`` takes that structure or one flat
    tensor; ``logp``, ``entropy``, ``kl`` and ``sampled_action_logp`` sum the children.

    Differences from RLlib (differences.md 13): a flat action tensor is split by widths read from
    the action space (1 per Discrete, else ``prod(shape)``), never by drawing a sample;
    discrete parts are int64; ``sampled_action_logp`` does not write into a child's tensor.

    Args:
        inputs: ``[*batch, sum(input_lens)]``.
        model: The model, passed on to the children.
        child_distributions: One distribution class (or partial) per leaf, flatten order.
        input_lens: Model outputs per leaf.
        action_space: The Tuple/Dict action space.

    Examples:
        >>> import torch, gymnasium as gym
        >>> space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (1,))))
        >>> cls, n = select_action_dist(space, {})
        >>> d = cls(torch.zeros(3, n), None)
        >>> a = d.sample()
        >>> type(a).__name__, a[0].shape, a[1].shape
        ('tuple', torch.Size([3]), torch.Size([3, 1]))
        >>> torch.allclose(d.logp(a), d.logp(torch.cat([a[0][:, None].float(), a[1]], 1)))
        True
    """

    def __init__(
        self,
        inputs: TensorLike,
        model: Any = None,
        *,
        child_distributions: Sequence[Callable[..., ActionDistribution]],
        input_lens: Sequence[int],
        action_space: gym.Space,
    ):
        super().__init__(inputs, model)
        self.action_space = action_space
        self._paths = space_path_items(action_space, sort_dict_keys=True)
        self._space_order = _space_order(action_space)
        lens = [int(n) for n in input_lens]
        if not (len(child_distributions) == len(lens) == len(self._paths)):
            raise ValueError(
                f"MultiActionDistribution: {len(self._paths)} leaves in {action_space}, but "
                f"{len(child_distributions)} child distributions and {len(lens)} input_lens"
            )
        if int(self.inputs.shape[-1]) != sum(lens):
            raise ValueError(
                f"MultiActionDistribution: inputs have {int(self.inputs.shape[-1])} entries in "
                f"the last dim, input_lens {lens} need {sum(lens)}"
            )
        self.input_lens = lens
        self._batch = self.inputs.shape[:-1]
        parts = torch.split(self.inputs, lens, dim=-1)
        self.flat_child_distributions = [
            cls(part, model) for cls, part in zip(child_distributions, parts, strict=True)
        ]

    def sample(self) -> Any:
        self.last_sample = _unflatten(
            self._space_order, [c.sample() for c in self.flat_child_distributions]
        )
        return self.last_sample

    def deterministic_sample(self) -> Any:
        return _unflatten(
            self._space_order, [c.deterministic_sample() for c in self.flat_child_distributions]
        )

    def logp(self, actions: Any) -> torch.Tensor:
        flat = _flatten_actions(
            self._paths, actions, self._batch, self.inputs.device, "MultiActionDistribution.logp"
        )
        return _sum(c.logp(a) for c, a in zip(self.flat_child_distributions, flat, strict=True))

    def sampled_action_logp(self) -> torch.Tensor:
        if self.last_sample is None:
            raise RuntimeError("MultiActionDistribution.sampled_action_logp() needs sample()")
        return _sum(c.sampled_action_logp() for c in self.flat_child_distributions)

    def entropy(self) -> torch.Tensor:
        return _sum(c.entropy() for c in self.flat_child_distributions)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        self._same_class(other)
        assert isinstance(other, MultiActionDistribution)
        if len(other.flat_child_distributions) != len(self.flat_child_distributions):
            raise ValueError("MultiActionDistribution.kl: the two have different children")
        return _sum(
            c.kl(o)
            for c, o in zip(
                self.flat_child_distributions, other.flat_child_distributions, strict=True
            )
        )

    @_class_or_instance_method
    def required_model_output_shape(  # type: ignore[override]
        self_or_cls: Any, action_space: gym.Space | None = None, model_config: Any = None
    ) -> int:
        """The model outputs the distribution needs: on an instance ``sum(input_lens)`` (as
        in RLlib, which takes and ignores ``action_space`` and ``model_config``); on the
        class, the sum over the leaves of ``action_space``.

        Examples:
            >>> space = gym.spaces.Tuple((Discrete(3), Box(-1, 1, (2,))))
            >>> MultiActionDistribution.required_model_output_shape(space, {})
            7
        """
        if isinstance(self_or_cls, MultiActionDistribution):
            return sum(self_or_cls.input_lens)
        if action_space is None:
            raise ValueError(
                "MultiActionDistribution.required_model_output_shape needs the "
                "action space when called on the class"
            )
        return int(select_action_dist(action_space, dict(model_config or {}))[1])


def _accepts_action_space(cls: Any) -> bool:
    try:
        return "action_space" in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


def _resolve(
    cls: Any,
    action_space: gym.Space,
    config: dict,
    custom_action_dists: Mapping[str, type] | None,
) -> tuple[Callable[..., ActionDistribution], int]:
    """(class bound to the space where it takes one, model outputs) for an explicit class."""
    if isinstance(cls, type) and issubclass(cls, MultiActionDistribution):
        if not isinstance(action_space, (Tuple, Dict)):
            raise ValueError(
                f"{cls.__name__} needs a Tuple or Dict action space, got {action_space}"
            )
        pairs = [
            select_action_dist(leaf, config, None, custom_action_dists)
            for _, leaf in space_path_items(action_space, sort_dict_keys=True)
        ]
        lens = [n for _, n in pairs]
        return (
            partial(
                cls,
                child_distributions=[c for c, _ in pairs],
                input_lens=lens,
                action_space=action_space,
            ),
            sum(lens),
        )
    size = int(cls.required_model_output_shape(action_space, config))
    if _accepts_action_space(cls):
        return partial(cls, action_space=action_space), size
    return cls, size


def select_action_dist(
    action_space: gym.Space,
    model_config: Mapping[str, Any] | None = None,
    dist_type: str | type | None = None,
    custom_action_dists: Mapping[str, type] | None = None,
) -> tuple[Callable[..., ActionDistribution], int]:
    """The action distribution for a space and how many model outputs it needs (RLlib table).

    ``ModelCatalog.get_action_dist`` delegates here. The table: Discrete -> Categorical (n);
    MultiDiscrete -> MultiCategorical (sum(nvec)); integer Box -> MultiCategorical
    (prod(shape) * (max(high) - min(low) + 1)); float Box of rank <= 1 -> DiagGaussian
    (2 * prod(shape)), or Deterministic (prod(shape)) with ``dist_type="deterministic"``;
    Simplex -> Dirichlet (prod(shape)); Tuple/Dict -> MultiActionDistribution over the
    flattened leaves (Dict keys sorted; sum of the children).

    Args:
        action_space: The action space.
        model_config: The model config dict; its ``custom_action_dist`` (a registered name or
            a class) overrides the table. Children of a Tuple/Dict get this config without
            ``custom_action_dist``.
        dist_type: None, ``"deterministic"``, or an ActionDistribution subclass to use.
        custom_action_dists: Registered custom distributions by name.

    A class chosen through ``custom_action_dist`` or ``dist_type`` whose constructor takes an
    ``action_space`` keyword comes back as ``partial(cls, action_space=action_space)`` (so
    e.g. ``SquashedGaussian`` and ``Beta`` take their bounds from the space); other classes
    come back unchanged, as in RLlib.

    Returns:
        ``(dist_class_or_partial, required_num_model_outputs)``; call the first with
        ``(model_outputs, model)``.

    Raises:
        UnsupportedSpaceError: The space has no distribution (float Box of rank >= 2, or a
            space type other than those above).
        ValueError: Unknown ``custom_action_dist`` name or bad ``dist_type``.

    Examples:
        >>> import gymnasium as gym
        >>> cls, n = select_action_dist(gym.spaces.Box(-1, 1, (3,)), {})
        >>> cls.func.__name__, n
        ('DiagGaussian', 6)
        >>> select_action_dist(gym.spaces.Box(-1, 1, (3,)), {}, "deterministic")[1]
        3
        >>> select_action_dist(gym.spaces.MultiDiscrete([2, 3]), {})[1]
        5
    """
    config = dict(model_config or {})
    custom = config.pop("custom_action_dist", None)
    if custom:
        if isinstance(custom, str):
            registry = dict(custom_action_dists or {})
            if custom not in registry:
                raise ValueError(
                    f"custom_action_dist {custom!r} is not registered; registered names: "
                    f"{sorted(registry)}"
                )
            cls = registry[custom]
        elif callable(custom):
            cls = custom
        else:
            raise ValueError(
                f"custom_action_dist must be a registered name or a distribution class, "
                f"got {custom!r}"
            )
        return _resolve(cls, action_space, config, custom_action_dists)

    if isinstance(dist_type, type):
        if not issubclass(dist_type, ActionDistribution):
            raise ValueError(
                f"dist_type must be an ActionDistribution subclass, got {dist_type.__name__}"
            )
        return _resolve(dist_type, action_space, config, custom_action_dists)
    if dist_type is not None and dist_type != "deterministic":
        raise ValueError(
            f"dist_type must be None, 'deterministic' or an ActionDistribution subclass, "
            f"got {dist_type!r}"
        )

    if isinstance(action_space, Box) and not isinstance(action_space, Simplex):
        if np.issubdtype(action_space.dtype, np.integer):
            lo, hi = int(np.min(action_space.low)), int(np.max(action_space.high))
            k = _prod(action_space.shape)
            return (
                partial(MultiCategorical, input_lens=[hi - lo + 1] * k, action_space=action_space),
                k * (hi - lo + 1),
            )
        if not np.issubdtype(action_space.dtype, np.floating):
            raise UnsupportedSpaceError(
                f"Box action space of dtype {action_space.dtype} is not supported; use an "
                "integer or float Box"
            )
        if len(action_space.shape) > 1:
            raise UnsupportedSpaceError(
                f"Action space has multiple dimensions {action_space.shape}. Consider reshaping "
                "this into a single dimension, using a custom action distribution, using a "
                "Tuple action space, or the multi-agent API."
            )
        if dist_type == "deterministic":
            return Deterministic, Deterministic.required_model_output_shape(action_space, config)
        return (
            partial(DiagGaussian, action_space=action_space),
            DiagGaussian.required_model_output_shape(action_space, config),
        )
    if isinstance(action_space, Discrete):
        if int(action_space.start) != 0:
            return partial(Categorical, action_space=action_space), int(action_space.n)
        return Categorical, int(action_space.n)
    if isinstance(action_space, (Tuple, Dict)):
        return _resolve(MultiActionDistribution, action_space, config, custom_action_dists)
    if isinstance(action_space, Simplex):
        shape = tuple(action_space.shape or ())
        if len(shape) > 1:
            return partial(Dirichlet, action_space=action_space), _prod(shape)
        return Dirichlet, _prod(shape)
    if isinstance(action_space, MultiDiscrete):
        nvec = [int(v) for v in np.asarray(action_space.nvec).ravel()]
        return partial(MultiCategorical, input_lens=nvec, action_space=action_space), sum(nvec)
    raise UnsupportedSpaceError(
        f"Unsupported action space {action_space!r}: no action distribution for "
        f"{type(action_space).__name__}. Supported: Discrete, MultiDiscrete, Box (integer, or "
        "float of rank <= 1), Simplex, and Tuple/Dict of these; or set custom_action_dist."
    )
