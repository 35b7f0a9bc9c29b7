"""One-hot helpers for numpy and torch (RLlib's ``one_hot`` semantics)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["one_hot", "one_hot_multidiscrete", "torch_one_hot"]


def one_hot(
    x: Any, depth: int = 0, on_value: float = 1.0, off_value: float = 0.0, dtype: Any = np.float32
) -> np.ndarray:
    """One-hot encodes integer array ``x`` into ``x.shape + (depth,)``.

    ``depth=0`` uses ``max(x) + 1``; a bool array always gets depth 2; a torch tensor is
    converted to numpy.

    Examples:
        >>> one_hot([0, 2])
        array([[1., 0., 0.],
               [0., 0., 1.]], dtype=float32)
        >>> one_hot(1, depth=3, on_value=5.0)
        array([0., 5., 0.], dtype=float32)
    """
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        x = np.array(x, dtype=np.int32)
    x = np.asarray(x)
    if x.dtype == np.bool_:
        x = x.astype(np.int64)
        depth = 2
    if not (np.issubdtype(x.dtype, np.integer) or x.size == 0):
        raise ValueError(f"one_hot: expected integers, got dtype {x.dtype}")
    if depth == 0:
        depth = int(x.max()) + 1 if x.size else 0
    if x.size and (x.min() < 0 or x.max() >= depth):
        raise ValueError(
            f"one_hot: values must be in 0..{depth - 1}, got min {x.min()} max {x.max()}"
        )
    out = np.full(x.shape + (depth,), off_value, dtype=np.float64)
    np.put_along_axis(out, x[..., None].astype(np.int64), on_value, axis=-1)
    return out.astype(dtype)


def one_hot_multidiscrete(x: Any, depths: list[int]) -> np.ndarray:
    """Concatenated one-hots of the columns of ``x`` (``[..., len(depths)]``), float32.

    Examples:
        >>> one_hot_multidiscrete([[1, 0]], [2, 3])
        array([[0., 1., 1., 0., 0.]], dtype=float32)
    """
    x = np.asarray(x)
    if x.shape[-1] != len(depths):
        raise ValueError(f"one_hot_multidiscrete: last dim {x.shape[-1]} != {len(depths)} depths")
    return np.concatenate([one_hot(x[..., i], depth=d) for i, d in enumerate(depths)], axis=-1)


def torch_one_hot(x: Any, space: gym.Space) -> Any:
    """One-hot of a torch tensor of Discrete / MultiDiscrete actions (``start`` honoured).

    Discrete: ``[*B] -> [*B, n]``; MultiDiscrete with ``nvec`` of shape S:
    ``[*B, *S] -> [*B, sum(nvec)]`` (components in row-major order). The result is float32.

    Examples:
        >>> import torch, gymnasium as gym
        >>> torch_one_hot(torch.tensor([1, 0]), gym.spaces.Discrete(2)).tolist()
        [[0.0, 1.0], [1.0, 0.0]]
    """
    import torch
    import torch.nn.functional as F

    if isinstance(space, gym.spaces.Discrete):
        idx = x.long() - int(space.start)
        return F.one_hot(idx, int(space.n)).float()
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec).reshape(-1)
        start = np.broadcast_to(np.asarray(space.start), np.asarray(space.nvec).shape).reshape(-1)
        batch = x.shape[: x.dim() - np.asarray(space.nvec).ndim]
        flat = x.reshape(*batch, len(nvec)).long()
        parts = [F.one_hot(flat[..., i] - int(start[i]), int(n)) for i, n in enumerate(nvec)]
        return torch.cat(parts, dim=-1).float()
    raise ValueError(f"torch_one_hot: expected a Discrete or MultiDiscrete space, got {space}")
