"""Vector envs with the preprocessing RLlib would pick: :func:`make_vector_env`.

It builds on :mod:`rlblocks.wrappers.atari` (per-env DeepMind wrappers) and
:mod:`rlblocks.wrappers.atari_vector` (batched vector wrappers, the multi-process Atari
vector env).

Examples:
    >>> venv = make_vector_env("CartPole-v1", 2)
    >>> venv.num_envs, venv.single_observation_space.shape
    (2, (4,))
    >>> venv.close()
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
from gymnasium.vector import VectorEnv

from rlblocks.wrappers.atari import (
    check_preprocessor_pref,
    image_options,
    is_atari,
    wrap_deepmind,
)
from rlblocks.wrappers.atari_vector import (
    AtariVectorEnv,
    VectorAtariPreprocessing,
    VectorGenericPixel,
)

__all__ = ["make_vector_env"]


class _DeepMindEnvFn:
    """Picklable sub-env factory for async vector envs."""

    def __init__(
        self,
        env_id: str,
        noframeskip: bool,
        warp: bool,
        dim: int,
        framestack: bool,
        make_kwargs: dict[str, Any],
    ) -> None:
        self.env_id, self.noframeskip, self.warp = env_id, noframeskip, warp
        self.dim, self.framestack, self.make_kwargs = dim, framestack, make_kwargs

    def __call__(self) -> gym.Env:
        if self.env_id.startswith("ALE/"):
            import ale_py

            gym.register_envs(ale_py)
        env = gym.make(self.env_id, **self.make_kwargs)
        return wrap_deepmind(env, self.dim, self.framestack, self.noframeskip, warp=self.warp)


def make_vector_env(
    env_id: str,
    num_envs: int,
    model_config: Mapping[str, Any] | None = None,
    preprocessor_pref: str | None = "deepmind",
    *,
    vectorization_mode: str = "sync",
    noframeskip: bool = False,
    **make_kwargs: Any,
) -> VectorEnv:
    """A vector env of ``env_id`` with the pipeline picked from the model config.

    * ``"deepmind"``: each sub-env gets :func:`wrap_deepmind` up to FireReset; warping and
      stacking (``dim``, ``framestack``) run batched in :class:`VectorAtariPreprocessing`.
    * ``"rllib"``: raw sub-envs + :class:`VectorGenericPixel` (``dim``, ``grayscale``,
      ``zero_mean``).
    * ``None`` (or a non-Atari id): raw sub-envs.

    Args:
        env_id: a gymnasium id (``"ALE/Pong-v5"``).
        num_envs: sub-envs.
        model_config: RLlib model options (``dim``, ``grayscale``, ``zero_mean``,
            ``framestack``); missing keys take RLlib's defaults.
        preprocessor_pref: ``"deepmind"``, ``"rllib"`` or ``None``.
        vectorization_mode: ``"sync"``, ``"async"`` (one process per sub-env, gymnasium's
            AsyncVectorEnv) or ``"atari"`` (DeepMind pipeline only:
            :class:`~rlblocks.wrappers.atari_vector.AtariVectorEnv`, the fastest; same
            observations, rewards and flags as ``"sync"``).
        noframeskip: the env is made with ``frameskip=1``; MaxAndSkip(4) is added.
        **make_kwargs: passed to ``gym.make`` (e.g. ``frameskip=1``).

    Returns:
        The (wrapped) vector env.
    """
    cfg = image_options(model_config)
    check_preprocessor_pref(preprocessor_pref)
    if vectorization_mode not in ("sync", "async", "atari"):
        raise ValueError(
            f"vectorization_mode must be 'sync', 'async' or 'atari', got {vectorization_mode!r}"
        )
    deepmind = preprocessor_pref == "deepmind" and is_atari(env_id)
    if vectorization_mode == "atari":
        if not deepmind:
            raise ValueError(
                "vectorization_mode='atari' runs the DeepMind pipeline: it needs "
                f"an ALE env id and preprocessor_pref='deepmind', got {env_id!r}, "
                f"{preprocessor_pref!r}"
            )
        return AtariVectorEnv(
            env_id,
            num_envs,
            dim=cfg["dim"],
            framestack=4 if cfg["framestack"] else None,
            noframeskip=noframeskip,
            **make_kwargs,
        )
    if deepmind:
        fns: list[Any] = [
            _DeepMindEnvFn(env_id, noframeskip, False, cfg["dim"], cfg["framestack"], make_kwargs)
            for _ in range(num_envs)
        ]
    else:
        fns = [_PlainEnvFn(env_id, make_kwargs) for _ in range(num_envs)]
    # The preprocessing wrappers consume each raw batch at once, so the vector env need not
    # copy it out of its buffers (shared memory for async) first.
    processed = is_atari(env_id) and preprocessor_pref is not None
    venv: VectorEnv
    if vectorization_mode == "sync":
        venv = gym.vector.SyncVectorEnv(fns, copy=not processed)
    else:
        venv = gym.vector.AsyncVectorEnv(fns, copy=not processed)
    if deepmind:
        return VectorAtariPreprocessing(venv, cfg["dim"], True, 4 if cfg["framestack"] else None)
    if preprocessor_pref == "rllib" and is_atari(env_id):
        return VectorGenericPixel(venv, cfg["dim"], cfg["grayscale"], cfg["zero_mean"])
    return venv


class _PlainEnvFn:
    def __init__(self, env_id: str, make_kwargs: dict[str, Any]) -> None:
        self.env_id, self.make_kwargs = env_id, make_kwargs

    def __call__(self) -> gym.Env:
        if self.env_id.startswith("ALE/"):
            import ale_py

            gym.register_envs(ale_py)
        return gym.make(self.env_id, **self.make_kwargs)
