"""Layer helpers shared by the built-in models, with RLlib's init schemes and layer layout.

``SlimFC`` and ``SlimConv2d`` keep RLlib's module structure (``_model.0.weight`` ...), so
state dicts saved from RLlib map onto them one to one.

Examples:
    >>> import torch
    >>> fc = SlimFC(4, 3, initializer=normc_initializer(1.0), activation_fn="tanh")
    >>> [tuple(p.shape) for p in fc.parameters()]
    [(3, 4), (3,)]
    >>> round(float(fc._model[0].weight.detach().norm(dim=1)[0]), 4)
    1.0
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from rlblocks.activations import (  # re-exported: RLlib keeps them in its model utils
    Tanh,
    get_activation_fn,
    is_symbolic,
    make_activation,
    tanh_cpu,
)

__all__ = [
    "AppendBiasLayer",
    "SlimConv2d",
    "SlimFC",
    "Tanh",
    "default_filter_config",
    "derive_filter_config",
    "get_activation_fn",
    "get_filter_config",
    "get_initializer",
    "is_symbolic",
    "mode_dependent",
    "normc_initializer",
    "same_padding",
    "tanh_cpu",
    "torch_default_initializer",
    "valid_padding",
]


# get_filter_config's table, checked in this order: (size, filters).
_FILTER_TABLE: tuple[tuple[int, list[list[Any]]], ...] = (
    (96, [[16, [8, 8], 4], [32, [4, 4], 2], [256, [11, 11], 2]]),
    (84, [[16, [8, 8], 4], [32, [4, 4], 2], [256, [11, 11], 1]]),
    (64, [[16, [4, 4], 2], [32, [4, 4], 2], [64, [4, 4], 2], [128, [4, 4], 2]]),
    (42, [[16, [4, 4], 2], [32, [4, 4], 2], [256, [11, 11], 1]]),
    (10, [[16, [5, 5], 2], [32, [5, 5], 2]]),
)


def mode_dependent(module: nn.Module) -> bool:
    """Whether ``module`` computes differently in train and eval mode (it holds a dropout
    or normalisation layer). Switching a module without such layers changes nothing but
    costs a walk over its modules, which the off-policy learners skip.

    Examples:
        >>> mode_dependent(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
        False
        >>> mode_dependent(nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1)))
        True
    """
    return any(
        isinstance(m, (nn.modules.batchnorm._NormBase, nn.modules.dropout._DropoutNd))
        for m in module.modules()
    )


def normc_initializer(std: float = 1.0) -> Callable[[torch.Tensor], None]:
    """An initializer that draws N(0, 1) and scales every row of ``[out, in]`` to norm ``std``.

    Examples:
        >>> w = torch.empty(5, 7)
        >>> normc_initializer(0.01)(w)
        >>> torch.allclose(w.norm(dim=1), torch.full((5,), 0.01))
        True
    """

    def initializer(tensor: torch.Tensor) -> None:
        with torch.no_grad():
            tensor.normal_(0.0, 1.0)
            tensor.mul_(std / tensor.pow(2).sum(dim=1, keepdim=True).sqrt())

    return initializer


def torch_default_initializer(tensor: torch.Tensor) -> None:
    """torch's own start for a Linear or Conv weight: kaiming-uniform with ``a = sqrt(5)``
    (what ``nn.Linear.reset_parameters`` draws; SB3's ``ortho_init=False``). As a
    :class:`SlimFC`'s ``bias_init`` (or None there) the bias starts as torch starts it too:
    uniform in ``+-1/sqrt(in_features)`` (a bias alone does not know its fan-in, so only
    ``SlimFC`` can draw it); the default model does so for every layer whose weights are
    ``"torch_default"`` and whose bias initializer is unset. The name ``"torch_default"`` in
    a model config's ``*_initializer``.

    Examples:
        >>> fc = SlimFC(16, 3, torch_default_initializer, bias_init=torch_default_initializer)
        >>> bias = fc._model[0].bias.detach().abs()
        >>> bool(bias.max() <= 0.25), bool(bias.max() > 0)
        (True, True)
    """
    with torch.no_grad():
        nn.init.kaiming_uniform_(tensor, a=math.sqrt(5))


def get_initializer(
    spec: str | Callable[..., Any] | None, config: Mapping[str, Any] | None = None
) -> Callable[[torch.Tensor], None] | None:
    """The initializer a model config's ``*_initializer`` / ``*_initializer_config`` pair names.

    ``spec`` is None (the model's own default applies: returns None), a callable taking the
    tensor, or the name of a ``torch.nn.init`` function with or without its trailing
    underscore, in any case (``"orthogonal"``, ``"xavier_uniform_"``, ``"Zeros"``),
    ``"normc"``, or ``"torch_default"`` (torch's own Linear / Conv start,
    :func:`torch_default_initializer`, which takes no keyword arguments); ``config`` holds
    its keyword arguments (``{"gain": 1.41}``, ``{"std": 0.01}``).

    Raises:
        ValueError: An unknown name, or keyword arguments the initializer does not take
            (names are tried on a scratch tensor, so errors surface when the model is built).

    Examples:
        >>> w = torch.empty(4, 4)
        >>> get_initializer("orthogonal", {"gain": 2.0})(w)
        >>> torch.allclose(w @ w.T, 4.0 * torch.eye(4), atol=1e-5)
        True
        >>> get_initializer(None) is None
        True
    """
    if spec is None:
        return None
    kwargs = dict(config or {})
    if callable(spec):
        fn: Callable[..., Any] = spec
    elif isinstance(spec, str):
        name = spec.lower().rstrip("_")
        if name == "torch_default":
            if kwargs:
                raise ValueError(f"initializer 'torch_default' takes no arguments, got {kwargs}")
            return torch_default_initializer
        if name == "normc":
            try:
                fn = normc_initializer(**kwargs)
            except TypeError as err:
                raise ValueError(f"initializer 'normc' takes only std, got {kwargs}") from err
            kwargs = {}
        else:
            found = getattr(nn.init, name + "_", None)
            if not callable(found):
                names = sorted(
                    n[:-1] for n in dir(nn.init) if n.endswith("_") and not n.startswith("_")
                )
                raise ValueError(
                    f"unknown initializer {spec!r}: use 'normc', 'torch_default', one of {names} "
                    "(torch.nn.init's, trailing underscore optional) or a callable"
                )
            fn = found
    else:
        raise ValueError(f"an initializer must be None, a name or a callable, got {spec!r}")

    def initializer(tensor: torch.Tensor) -> None:
        with torch.no_grad():
            fn(tensor, **kwargs)

    if isinstance(spec, str):
        try:
            with torch.random.fork_rng(devices=[]):  # the check draws nothing from the RNG
                initializer(torch.empty(2, 2))
        except TypeError as err:
            raise ValueError(f"initializer {spec!r} does not accept {kwargs}: {err}") from err
    return initializer


def _pair(value: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(value, (int, float)):
        return int(value), int(value)
    a, b = value
    return int(a), int(b)


def same_padding(
    in_size: Sequence[int], filter_size: int | Sequence[int], stride_size: int | Sequence[int]
) -> tuple[tuple[int, int, int, int], tuple[int, int]]:
    """TF-style "same" zero padding for a conv layer.

    Returns:
        ``(left, right, top, bottom)`` and the output ``(height, width)``
        (``ceil(in / stride)``); the odd pixel of padding goes right/bottom.

    Examples:
        >>> same_padding((84, 84), 8, 4)
        ((2, 2, 2, 2), (21, 21))
        >>> same_padding((21, 21), (4, 4), 2)
        ((1, 2, 1, 2), (11, 11))
    """
    in_h, in_w = _pair(in_size)
    k_h, k_w = _pair(filter_size)
    s_h, s_w = _pair(stride_size)
    out_h, out_w = math.ceil(in_h / s_h), math.ceil(in_w / s_w)
    pad_h = max((out_h - 1) * s_h + k_h - in_h, 0)
    pad_w = max((out_w - 1) * s_w + k_w - in_w, 0)
    top, left = pad_h // 2, pad_w // 2
    return (left, pad_w - left, top, pad_h - top), (out_h, out_w)


def valid_padding(
    in_size: Sequence[int], filter_size: int | Sequence[int], stride_size: int | Sequence[int]
) -> tuple[int, int]:
    """Output ``(height, width)`` of an unpadded ("valid") conv: ``ceil((in - k + 1) / s)``.

    Examples:
        >>> valid_padding((11, 11), 11, 1)
        (1, 1)
    """
    in_h, in_w = _pair(in_size)
    k_h, k_w = _pair(filter_size)
    s_h, s_w = _pair(stride_size)
    return math.ceil((in_h - k_h + 1) / s_h), math.ceil((in_w - k_w + 1) / s_w)


def get_filter_config(shape: Sequence[int]) -> list[list[Any]]:
    """RLlib's default ``conv_filters`` for an image shape (HWC, or CHW for the last two dims).

    Raises:
        ValueError: No default for this shape (set ``conv_filters`` explicitly).

    Examples:
        >>> get_filter_config((42, 42, 3))
        [[16, [4, 4], 2], [32, [4, 4], 2], [256, [11, 11], 1]]
    """
    dims = [int(d) for d in shape]
    if len(dims) in (2, 3):
        for size, filters in _FILTER_TABLE:
            if dims[:2] == [size, size] or dims[1:] == [size, size]:
                return [[f[0], list(f[1]), f[2]] for f in filters]
    advice = ""
    if dims == [210, 160, 3]:
        advice = (
            " For Atari frames, resize to 84x84 first (rlblocks.wrappers.atari.wrap_deepmind or "
            "the Atari preprocessor with dim=84)."
        )
    raise ValueError(
        f"No default CNN configuration for obs shape {dims}: defaults exist for "
        "96x96, 84x84, 64x64, 42x42 and 10x10 images; set model config 'conv_filters' to a "
        "list of [out_channels, [kernel_h, kernel_w], stride], or start from "
        f"default_filter_config(shape), which the vision net uses.{advice}"
    )


#: Derived conv stacks halve every side longer than this, then cover the rest with one conv
#: (RLlib's own stacks end with an 11x11 kernel on an 11x11 map).
DERIVED_MAX_FINAL_KERNEL = 11


def derive_filter_config(shape: Sequence[int]) -> list[list[Any]]:
    """A conv stack for any ``(H, W[, C])`` image that ends in a 1x1 map (difference 26).

    While a side is longer than ``DERIVED_MAX_FINAL_KERNEL`` (11), a conv with kernel 4 and
    stride 2 on that side ("same" padding, as the vision net pads every conv but the last)
    halves it, rounding up; a side already short enough gets stride 1 and kernel
    ``min(3, side)``. Channels go 16, 32, 64, 64, ... A map that needs no halving (MiniGrid's
    7x7) gets two stride-1 convs of 16 and 32 channels instead. The last conv has 256
    channels and a kernel equal to the remaining map, stride 1, "valid" padding, so its
    output is 1x1.

    Raises:
        ValueError: ``shape`` is not ``(H, W)`` or ``(H, W, C)`` with positive sides.

    Examples:
        >>> derive_filter_config((7, 7, 3))
        [[16, [3, 3], 1], [32, [3, 3], 1], [256, [7, 7], 1]]
        >>> derive_filter_config((1, 40))
        [[16, [1, 4], [1, 2]], [32, [1, 4], [1, 2]], [256, [1, 10], 1]]
    """
    dims = [int(d) for d in shape]
    if len(dims) not in (2, 3) or min(dims) < 1:
        raise ValueError(
            f"derive_filter_config: an image shape is (H, W) or (H, W, C) with positive sizes, "
            f"got {dims}"
        )
    h, w = dims[0], dims[1]
    limit = DERIVED_MAX_FINAL_KERNEL
    filters: list[list[Any]] = []
    channels = 16
    while h > limit or w > limit:
        sh, sw = (2 if h > limit else 1), (2 if w > limit else 1)
        kernel = [4 if sh == 2 else min(3, h), 4 if sw == 2 else min(3, w)]
        filters.append([channels, kernel, sh if sh == sw else [sh, sw]])
        h, w = math.ceil(h / sh), math.ceil(w / sw)
        channels = min(2 * channels, 64)
    if not filters:
        kernel = [min(3, h), min(3, w)]
        filters = [[16, list(kernel), 1], [32, list(kernel), 1]]
    filters.append([256, [h, w], 1])
    return filters


def default_filter_config(shape: Sequence[int], need_1x1: bool = True) -> list[list[Any]]:
    """The vision net's default ``conv_filters`` for an ``(H, W[, C])`` image.

    RLlib's table (:func:`get_filter_config`) where ``H == W`` is one of its sizes (96, 84,
    64, 42, 10); :func:`derive_filter_config` for every other size (difference 26). RLlib's
    64x64 stack ends at a 3x3 map, which logits or a separate value tower cannot take (RLlib
    fails there); with ``need_1x1`` such a table entry gives way to the derived stack (for
    64x64: RLlib's first three layers, then ``[256, [8, 8], 1]``).

    Examples:
        >>> default_filter_config((84, 84, 4)) == get_filter_config((84, 84, 4))
        True
        >>> default_filter_config((9, 9, 3))[-1]
        [256, [9, 9], 1]
        >>> default_filter_config((64, 64, 3))[-1], default_filter_config((64, 64, 3), False)[-1]
        ([256, [8, 8], 1], [128, [4, 4], 2])
    """
    dims = [int(d) for d in shape]
    if len(dims) in (2, 3):
        for size, filters in _FILTER_TABLE:
            if dims[:2] == [size, size]:
                table = [[f[0], list(f[1]), f[2]] for f in filters]
                if not need_1x1 or _ends_at_1x1(dims[:2], table):
                    return table
    return derive_filter_config(dims)


def _ends_at_1x1(hw: Sequence[int], filters: Sequence[Sequence[Any]]) -> bool:
    """Whether ``filters`` ("same" padding, the last one "valid") end at a 1x1 map."""
    size = (int(hw[0]), int(hw[1]))
    for f in filters[:-1]:
        _, size = same_padding(size, f[1], f[2])
    kh, kw = _pair(filters[-1][1])
    sh, sw = _pair(filters[-1][2])
    return (size[0] - kh) // sh + 1 == 1 and (size[1] - kw) // sw + 1 == 1


class SlimFC(nn.Module):
    """A linear layer plus an optional activation, RLlib's layout (``_model.0`` is the Linear).

    Args:
        in_size: Input features.
        out_size: Output features.
        initializer: Called on the weight; default ``nn.init.xavier_uniform_``;
            :func:`torch_default_initializer` keeps the weight torch drew.
        activation_fn: Activation name, class, instance, callable, or None (linear).
        use_bias: Whether the Linear has a bias.
        bias_init: Constant the bias starts at, or an initializer called on the bias; None or
            :func:`torch_default_initializer` keeps the bias torch drew
            (uniform in ``+-1/sqrt(in_size)``).

    Examples:
        >>> SlimFC(3, 2, activation_fn="relu")(torch.zeros(5, 3)).shape
        torch.Size([5, 2])
    """

    def __init__(
        self,
        in_size: int,
        out_size: int,
        initializer: Callable[[torch.Tensor], Any] | None = None,
        activation_fn: Any = None,
        use_bias: bool = True,
        bias_init: float | Callable[[torch.Tensor], Any] | None = 0.0,
    ):
        super().__init__()
        linear = nn.Linear(int(in_size), int(out_size), bias=use_bias)  # torch's start drawn
        if initializer is not torch_default_initializer:
            (initializer or nn.init.xavier_uniform_)(linear.weight)
        if use_bias and bias_init is not None and bias_init is not torch_default_initializer:
            if callable(bias_init):
                bias_init(linear.bias)
            else:
                nn.init.constant_(linear.bias, bias_init)
        layers: list[nn.Module] = [linear]
        act = make_activation(activation_fn)
        if act is not None:
            layers.append(act)
        self._model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self._model:  # the layers directly: one module call less than Sequential
            x = layer(x)
        return x


class SlimConv2d(nn.Module):
    """``[ZeroPad2d] -> Conv2d -> [activation]``, RLlib's layout.

    The conv is ``_model.1`` when ``padding`` is given (even all zeros) and ``_model.0``
    otherwise, exactly as in RLlib, so RLlib state dicts load without renaming.

    When the kernel covers the whole (unpadded) input, as in the last layers of RLlib's
    default vision nets (an 11x11 kernel on an 11x11 map, 1x1 logits on a 1x1 map), the
    conv is computed as the equivalent matrix product, which torch runs much faster than
    its conv kernel at small batch sizes (docs/benchmarks.md). The result is the same up to
    float rounding.

    Args:
        in_channels: Input channels.
        out_channels: Output channels.
        kernel: Kernel size (int or pair).
        stride: Stride (int or pair).
        padding: ``(left, right, top, bottom)`` zero padding, or None for none.
        initializer: Called on the weight; ``"default"`` is ``nn.init.xavier_uniform_``.
        activation_fn: ``"default"`` is ReLU; otherwise as for :func:`get_activation_fn`.
        bias_init: Constant the bias starts at, or an initializer called on the bias.

    Examples:
        >>> conv = SlimConv2d(4, 16, 8, 4, (2, 2, 2, 2))
        >>> conv(torch.zeros(1, 4, 84, 84)).shape
        torch.Size([1, 16, 21, 21])
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel: int | Sequence[int],
        stride: int | Sequence[int],
        padding: Sequence[int] | None,
        initializer: Any = "default",
        activation_fn: Any = "default",
        bias_init: float = 0.0,
    ):
        super().__init__()
        layers: list[nn.Module] = []
        if padding is not None:
            left, right, top, bottom = (int(p) for p in padding)
            layers.append(nn.ZeroPad2d((left, right, top, bottom)))
        self._conv_index = len(layers)
        self._unpadded = padding is None or not any(int(p) for p in padding)
        self._kernel = _pair(kernel)
        conv = nn.Conv2d(int(in_channels), int(out_channels), self._kernel, _pair(stride))
        (nn.init.xavier_uniform_ if initializer == "default" else initializer)(conv.weight)
        assert conv.bias is not None
        nn.init.constant_(conv.bias, bias_init)
        layers.append(conv)
        act = nn.ReLU() if activation_fn == "default" else make_activation(activation_fn)
        if act is not None:
            layers.append(act)
        self._has_activation = act is not None
        self._model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._unpadded and x.dim() == 4 and tuple(x.shape[2:]) == self._kernel:
            conv = self._model[self._conv_index]
            assert isinstance(conv, nn.Conv2d)
            y = nn.functional.linear(x.flatten(1), conv.weight.flatten(1), conv.bias)
            y = y[:, :, None, None]
            return self._model[-1](y) if self._has_activation else y
        return self._model(x)


class AppendBiasLayer(nn.Module):
    """Appends a learned, input-independent vector (``log_std``, init ``init``, RLlib's 0)
    to every row.

    Examples:
        >>> AppendBiasLayer(2)(torch.ones(3, 2)).tolist()[0]
        [1.0, 1.0, 0.0, 0.0]
        >>> AppendBiasLayer(1, init=-2.0)(torch.ones(1, 1)).tolist()
        [[1.0, -2.0]]
    """

    def __init__(self, num_bias_vars: int, init: float = 0.0):
        super().__init__()
        self.log_std = nn.Parameter(torch.full((int(num_bias_vars),), float(init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.log_std.unsqueeze(0).expand(x.shape[0], -1)], dim=1)
