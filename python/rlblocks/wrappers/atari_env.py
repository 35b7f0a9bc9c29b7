"""The ALE game with palette-index screens: :func:`make_atari_env`, :class:`PaletteFrame`.

ale_py converts every emulated frame to RGB; fetching the screen as palette indices is a
third of the bytes, and :class:`rlblocks.wrappers.atari.WarpFrame` resizes (and max-pools)
straight from the indices, so the DeepMind pipeline over :func:`make_atari_env` computes
exactly what it computes over ``gym.make``'s env, faster.

Examples:
    >>> import numpy as np
    >>> palette = np.zeros((256, 3), np.uint8)
    >>> palette[7] = (1, 2, 3)
    >>> frame = PaletteFrame(np.full((2, 2), 7, np.uint8), palette)
    >>> frame.shape, np.asarray(frame)[0, 0].tolist()
    ((2, 2, 3), [1, 2, 3])
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlblocks import _core, _impl, image

__all__ = ["PaletteFrame", "make_atari_env"]


class PaletteFrame:
    """One ALE screen as palette indices: ``np.asarray(frame)`` is the RGB frame
    (``palette[index]``, exactly what ``getScreenRGB`` returns).

    :class:`WarpFrame` resizes it (and max-pools a pair of them) straight from the indices,
    a third of the bytes; the screen itself is fetched much faster than in RGB
    (docs/benchmarks.md).

    Attributes:
        index: uint8 ``(H, W)`` palette indices.
        palette: uint8 ``(256, 3)`` RGB table; it knows every index in ``index`` (the
            env's table only ever gains entries, so it stays valid).
    """

    __slots__ = ("index", "palette")

    def __init__(self, index: np.ndarray, palette: np.ndarray) -> None:
        self.index, self.palette = index, palette

    @property
    def shape(self) -> tuple[int, int, int]:
        return (*self.index.shape, 3)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint8)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        rgb = self.palette[self.index]
        return rgb if dtype is None else rgb.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"PaletteFrame(shape={self.shape})"


def _palette_env_class() -> type:
    from ale_py.env import AtariEnv

    def unknown(index: np.ndarray, known: np.ndarray) -> bool:
        if _impl.native():
            return bool(_core.image_palette_unknown(index, known))
        return image.palette_unknown(index, known)

    class PaletteAtariEnv(AtariEnv):
        """ale_py's AtariEnv (``obs_type="rgb"``) whose observations are
        :class:`PaletteFrame` s: each screen is fetched as palette indices; a screen with an
        index the palette has not seen yet is fetched once in RGB to learn it, so every
        frame's RGB is exact."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if self._obs_type != "rgb":
                raise ValueError(f"make_atari_env needs obs_type='rgb', got {self._obs_type!r}")
            self._palette = np.zeros((256, 3), dtype=np.uint8)
            self._known = np.zeros(256, dtype=np.uint8)

        def _get_obs(self) -> PaletteFrame:  # type: ignore[override]
            index = self.ale.getScreen()
            if unknown(index, self._known):
                rgb = self.ale.getScreenRGB()
                flat = index.reshape(-1)
                self._palette[flat] = rgb.reshape(-1, 3)
                self._known[flat] = 1
            return PaletteFrame(index, self._palette)

    return PaletteAtariEnv


def make_atari_env(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make(env_id, **kwargs)`` for an ALE id, with :class:`PaletteFrame` observations
    (RGB frames fetched as palette indices; see :class:`PaletteFrame`).

    :func:`wrap_deepmind` over it computes exactly what it computes over ``gym.make``'s env,
    faster: the emulator does not convert every skipped frame to RGB, and WarpFrame reads
    the indices. Only ``obs_type="rgb"`` is supported. No env checker is added.

    Examples:
        >>> env = make_atari_env("ALE/Pong-v5", frameskip=1)  # doctest: +SKIP
        >>> wrap_deepmind(env, noframeskip=True).reset(seed=0)[0].shape  # doctest: +SKIP
        (84, 84, 4)
    """
    import dataclasses

    import ale_py

    gym.register_envs(ale_py)
    try:
        spec = gym.spec(env_id)
    except gym.error.Error as err:
        raise ValueError(f"make_atari_env: unknown env id {env_id!r} ({err})") from None
    if not (isinstance(spec.entry_point, str) and spec.entry_point.startswith("ale_py")):
        raise ValueError(
            f"make_atari_env needs an ALE env id, got {env_id!r} (entry point {spec.entry_point!r})"
        )
    merged = {**spec.kwargs, **kwargs}
    env: gym.Env = _palette_env_class()(**merged)
    env.unwrapped.spec = dataclasses.replace(spec, kwargs=merged)
    if spec.max_episode_steps is not None:
        env = gym.wrappers.TimeLimit(env, spec.max_episode_steps)
    return env
