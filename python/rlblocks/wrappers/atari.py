"""DeepMind Atari wrappers (gymnasium API), one env at a time.

The single-env wrappers follow RLlib's ``env/wrappers/atari_wrappers.py`` in order and
semantics, with its stale-frame bugs fixed (docs/differences.md, difference 17):

* ``MaxAndSkipEnv`` returns the max of the last two frames *of this step*; when the
  episode ends early it uses the terminal frame (RLlib: the previous step's frames), and
  ``reset`` starts a fresh pair (RLlib: never cleared).
* ``FireResetEnv`` returns the observation of the reset that follows a FIRE step that ended
  the episode (RLlib: the stale pre-reset frame).
* ``EpisodicLifeEnv`` does a real reset after a truncation or when its no-op step ends the
  game (RLlib: steps a finished game).
* ``NoopResetEnv`` re-resets without re-seeding when a no-op ends the episode.

Image work (gray + INTER_AREA resize, max-pool) runs in the C++ kernels of
:mod:`rlblocks.image`; :class:`WarpFrame` and the max-pool read the palette-index screens of
:func:`rlblocks.wrappers.atari_env.make_atari_env` directly. :func:`preprocess_env` picks
the pipeline from an RLlib model config. Whole vector envs are preprocessed in batches by
:mod:`rlblocks.wrappers.atari_vector`; :func:`rlblocks.wrappers.vector.make_vector_env`
builds them.

Examples:
    >>> import gymnasium as gym
    >>> import numpy as np
    >>> env = gym.make("CartPole-v1")  # any env works for the reward clipper
    >>> ClipRewardEnv(env).reward(-3.5)
    -1.0
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from rlblocks import _core, _impl, image
from rlblocks.framestack import FrameStacker
from rlblocks.wrappers.atari_env import PaletteFrame

__all__ = [
    "ClipRewardEnv",
    "EpisodicLifeEnv",
    "FireResetEnv",
    "FrameStack",
    "GenericPixelEnv",
    "MaxAndSkipEnv",
    "NoopResetEnv",
    "NormalizedImageEnv",
    "WarpFrame",
    "check_preprocessor_pref",
    "image_options",
    "is_atari",
    "preprocess_env",
    "push_frame",
    "wrap_deepmind",
]


def _meanings(env: gym.Env) -> list[str]:
    get = getattr(env.unwrapped, "get_action_meanings", None)
    return list(get()) if callable(get) else []


def _reset_kwargs_without_seed(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if k != "seed"}


def is_atari(env: gym.Env | str) -> bool:
    """RLlib's ``is_atari``: an ``ALE/...`` or ``ale_py:...`` id, or an ALE env object with
    image observations.

    Examples:
        >>> is_atari("ALE/Pong-v5"), is_atari("CartPole-v1")
        (True, False)
    """
    if isinstance(env, str):
        return env.startswith(("ALE/", "ale_py:"))
    shape = getattr(env.observation_space, "shape", None)
    if shape is None or len(shape) <= 2:
        return False
    return "AtariEnv<ALE" in str(env)


class NoopResetEnv(gym.Wrapper):
    """On reset, takes a random number of no-ops in ``[1, noop_max]`` (from the unwrapped
    env's ``np_random``; ``override_num_noops`` fixes it).

    Args:
        env: an env whose action 0 is ``NOOP``.
        noop_max: the most no-ops.
    """

    def __init__(self, env: gym.Env, noop_max: int = 30) -> None:
        super().__init__(env)
        meanings = _meanings(env)
        if not meanings or meanings[0] != "NOOP":
            raise ValueError(f"NoopResetEnv needs action 0 to be NOOP, got meanings {meanings}")
        if noop_max < 1:
            raise ValueError(f"NoopResetEnv: noop_max must be >= 1, got {noop_max}")
        self.noop_max = int(noop_max)
        self.override_num_noops: int | None = None
        self.noop_action = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        if self.override_num_noops is not None:
            noops = self.override_num_noops
        else:
            noops = int(self.unwrapped.np_random.integers(1, self.noop_max + 1))
        for _ in range(noops):
            obs, _, terminated, truncated, info = self.env.step(self.noop_action)
            if terminated or truncated:
                obs, info = self.env.reset(**_reset_kwargs_without_seed(kwargs))
        return obs, info


class MaxAndSkipEnv(gym.Wrapper):
    """Repeats the action ``skip`` times, sums the rewards and returns the element-wise max
    of the last two frames seen in this step (flicker removal).

    If the episode ends after the first repeat, the max is over that terminal frame and the
    frame just before it (the last one of the previous step, or the reset frame). The env
    must return a new observation array on each step (gymnasium's ALE does); frames are
    kept by reference, not copied.

    A :class:`WarpFrame` stacked above (through wrappers that pass observations on
    unchanged) fuses the max into its resize: it switches this wrapper to return the last
    raw frame and takes both frames from :meth:`pooled_pair` instead, saving a full-frame
    pass per step; the warped result is identical.

    Args:
        env: the env to step.
        skip: repeats per agent step (>= 1).
    """

    def __init__(self, env: gym.Env, skip: int = 4) -> None:
        super().__init__(env)
        if skip < 1:
            raise ValueError(f"MaxAndSkipEnv: skip must be >= 1, got {skip}")
        self._skip = int(skip)
        self._last: np.ndarray | None = None
        self.defer_max = False  # set by a WarpFrame above that pools the pair itself
        self._pair: tuple[Any, Any] | None = None

    def pooled_pair(self, obs: Any) -> tuple[Any, Any] | None:
        """``(previous, obs)`` when ``obs`` is the unpooled frame this wrapper returned last
        (``defer_max`` mode), else None."""
        pair = self._pair
        return pair if pair is not None and pair[1] is obs else None

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._last = obs
        self._pair = None
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        total = 0.0
        prev = self._last  # the frame just before this step's first one
        obs: Any = None
        terminated = truncated = False
        info: dict[str, Any] = {}
        for i in range(self._skip):
            if i > 0:
                prev = obs
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        self._last = obs
        self._pair = None
        if self._skip == 1 or prev is None:
            return obs, total, terminated, truncated, info
        if self.defer_max:
            self._pair = (prev, obs)
            return obs, total, terminated, truncated, info
        return np.maximum(prev, obs), total, terminated, truncated, info


class EpisodicLifeEnv(gym.Wrapper):
    """Ends an episode on every life lost; resets the game only when it is really over.

    Args:
        env: an ALE env (``env.unwrapped.ale.lives()``).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.was_real_terminated = True

    def _ale_lives(self) -> int:
        return int(self.env.unwrapped.ale.lives())  # type: ignore[attr-defined]

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.was_real_terminated = bool(terminated or truncated)
        lives = self._ale_lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self.was_real_terminated:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)  # no-op past the lost life
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.lives = self._ale_lives()
        return obs, info


class FireResetEnv(gym.Wrapper):
    """Presses FIRE (then action 2) on reset, for games that wait for it.

    Args:
        env: an env whose action 1 is ``FIRE`` and that has at least 3 actions.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = _meanings(env)
        if len(meanings) < 3 or meanings[1] != "FIRE":
            raise ValueError(
                f"FireResetEnv needs action 1 to be FIRE and >= 3 actions, got meanings {meanings}"
            )

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        again = _reset_kwargs_without_seed(kwargs)
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(1)
        if terminated or truncated:
            self.env.reset(**again)
        obs, _, terminated, truncated, info = self.env.step(2)
        if terminated or truncated:
            obs, info = self.env.reset(**again)
        return obs, info


class WarpFrame(gym.ObservationWrapper):
    """Grayscale (OpenCV luminance) and INTER_AREA resize to ``dim x dim``, uint8.

    Args:
        env: an env with RGB uint8 ``(H, W, 3)`` observations.
        dim: output side.
        grayscale: ``(dim, dim, 1)`` gray if True, else ``(dim, dim, 3)`` colour.
    """

    def __init__(self, env: gym.Env, dim: int = 84, grayscale: bool = True) -> None:
        super().__init__(env)
        shape = getattr(env.observation_space, "shape", None)
        if shape is None or len(shape) != 3 or shape[2] != 3:
            raise ValueError(
                f"WarpFrame needs RGB (H, W, 3) observations, got {env.observation_space}"
            )
        self.dim = int(dim)
        self.grayscale = bool(grayscale)
        self.observation_space = gym.spaces.Box(
            0, 255, (self.dim, self.dim, 1 if grayscale else 3), dtype=np.uint8
        )
        self._skip = _find_max_and_skip(env)
        if self._skip is not None:
            self._skip.defer_max = True

    def observation(self, observation: np.ndarray) -> np.ndarray:
        pair = self._skip.pooled_pair(observation) if self._skip is not None else None
        prev = pair[0] if pair is not None else None
        if type(observation) is PaletteFrame and (prev is None or type(prev) is PaletteFrame):
            index, second = observation.index, None if prev is None else prev.index
            if (
                _impl.native()
                and index.flags.c_contiguous
                and (second is None or (second.shape == index.shape and second.flags.c_contiguous))
            ):
                # Per-step path: screens straight from ALE (C-contiguous uint8 (H, W)) and the
                # env's (256, 3) table; the core validates them all the same.
                d = self.dim
                out = np.empty((1, d, d, 1 if self.grayscale else 3), dtype=np.uint8)
                _core.image_palette_resize(
                    index[None],
                    observation.palette,
                    d,
                    d,
                    self.grayscale,
                    out,
                    None if second is None else second[None],
                )
                return out[0]
            return image.palette_resize(
                index, observation.palette, self.dim, gray=self.grayscale, max_with=second
            )
        if type(observation) is PaletteFrame or type(prev) is PaletteFrame:
            observation = np.asarray(observation)
            prev = None if prev is None else np.asarray(prev)
        if self.grayscale:
            return image.gray_resize(observation, self.dim, max_with=prev)
        return image.resize(observation, self.dim, max_with=prev)


def _find_max_and_skip(env: gym.Env) -> MaxAndSkipEnv | None:
    """The MaxAndSkipEnv right below ``env`` through wrappers that pass observations on
    unchanged (so its pooling can be fused into WarpFrame's resize), or None."""
    transparent = (
        EpisodicLifeEnv,
        FireResetEnv,
        gym.wrappers.RecordEpisodeStatistics,
        gym.wrappers.common.OrderEnforcing,
        gym.wrappers.common.PassiveEnvChecker,
    )
    e: Any = env
    while True:
        if type(e) is MaxAndSkipEnv:
            return e
        if type(e) not in transparent:
            return None
        e = e.env


class FrameStack(gym.Wrapper):
    """Stacks the last ``k`` observations along the last axis, oldest first: ``(H, W, C*k)``.

    On reset the first observation fills all ``k`` slots. Each returned array is new (never
    modified afterwards).

    Args:
        env: an env with ``(H, W, C)`` Box observations.
        k: frames per stack.
    """

    def __init__(self, env: gym.Env, k: int) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3:
            raise ValueError(f"FrameStack needs (H, W, C) Box observations, got {space}")
        if k < 1:
            raise ValueError(f"FrameStack: k must be >= 1, got {k}")
        self.k = int(k)
        self._channels = space.shape[2]
        self._stack: np.ndarray | None = None
        self.observation_space = gym.spaces.Box(
            np.repeat(space.low, k, axis=2), np.repeat(space.high, k, axis=2), dtype=space.dtype
        )
        try:  # the ring-buffer stacker (C++ core); numpy for dtypes it does not take
            self._stacker: FrameStacker | None = FrameStacker(1, self.k, space.shape, space.dtype)
        except ValueError:
            self._stacker = None

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        if self._stacker is not None:
            self._stack = self._stacker.reset(np.asarray(obs)[None])[0]
        else:
            self._stack = np.concatenate([obs] * self.k, axis=2)
        return self._stack, info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._stack is None:
            raise RuntimeError("FrameStack.step called before reset")
        if self._stacker is not None:
            self._stack = self._stacker.push(np.asarray(obs)[None])[0]
        else:
            self._stack = push_frame(self._stack, obs)
        return self._stack, reward, terminated, truncated, info


class ClipRewardEnv(gym.RewardWrapper):
    """Rewards become their sign: -1.0, 0.0 or 1.0."""

    def reward(self, reward: SupportsFloat) -> float:
        return float(np.sign(float(reward)))


class NormalizedImageEnv(gym.ObservationWrapper):
    """uint8 images to float32 ``(obs - 128) / 128`` in ``[-1, 1)``; observation space
    ``Box(-1, 1, shape, float32)`` (RLlib's wrapper of the same name): 0 -> -1.0,
    128 -> 0.0, 255 -> 0.9921875.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or space.dtype != np.uint8:
            raise ValueError(f"NormalizedImageEnv needs uint8 Box observations, got {space}")
        self.observation_space = gym.spaces.Box(-1.0, 1.0, space.shape, dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        scaled = np.asarray(observation, dtype=np.float32) - np.float32(128.0)
        scaled *= np.float32(1.0 / 128.0)
        return scaled


class GenericPixelEnv(gym.ObservationWrapper):
    """RLlib's ``preprocessor_pref="rllib"`` pixel pipeline as an observation wrapper
    (:func:`rlblocks.image.generic_pixel`): float32 ``(dim, dim, 1 | 3)``."""

    def __init__(
        self, env: gym.Env, dim: int = 84, grayscale: bool = False, zero_mean: bool = True
    ) -> None:
        super().__init__(env)
        self.dim, self.grayscale, self.zero_mean = int(dim), bool(grayscale), bool(zero_mean)
        low = -1.0 if zero_mean else 0.0
        shape = (self.dim, self.dim, 1 if grayscale else 3)
        self.observation_space = gym.spaces.Box(low, 1.0, shape, dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return image.generic_pixel(observation, self.dim, self.grayscale, self.zero_mean)


def wrap_deepmind(
    env: gym.Env,
    dim: int = 84,
    framestack: bool = True,
    noframeskip: bool = False,
    *,
    warp: bool = True,
) -> gym.Env:
    """RLlib's ``wrap_deepmind``: episode statistics -> NoopReset(30) -> MaxAndSkip(4) (only
    when ``noframeskip`` and the env has a spec, i.e. the env does not skip frames itself)
    -> EpisodicLife -> FireReset (if the game has FIRE) -> WarpFrame(dim) -> FrameStack(4)
    (if ``framestack``). No reward clipping, like RLlib.

    Args:
        env: an ALE env (RGB observations).
        dim: side of the warped frame.
        framestack: stack the last 4 frames.
        noframeskip: the env returns every frame (``frameskip=1``), so skip here.
        warp: False stops before WarpFrame/FrameStack (the per-env part of a vector pipeline
            whose frames :class:`VectorAtariPreprocessing` processes in one batch).

    Returns:
        The wrapped env.
    """
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = NoopResetEnv(env, noop_max=30)
    if env.spec is not None and noframeskip is True:
        env = MaxAndSkipEnv(env, skip=4)
    env = EpisodicLifeEnv(env)
    if "FIRE" in _meanings(env):
        env = FireResetEnv(env)
    if warp:
        env = WarpFrame(env, dim)
        if framestack is True:
            env = FrameStack(env, 4)
    return env


def preprocess_env(
    env: gym.Env,
    model_config: Mapping[str, Any] | None = None,
    preprocessor_pref: str | None = "deepmind",
    noframeskip: bool = False,
) -> gym.Env:
    """Wraps one env with the pipeline RLlib would pick for this model config.

    * ``"deepmind"`` and an Atari env: :func:`wrap_deepmind` with the config's ``dim`` and
      ``framestack``.
    * ``"rllib"`` and an Atari env: :class:`GenericPixelEnv` (``dim``, ``grayscale``,
      ``zero_mean``), the GenericPixelPreprocessor's output.
    * ``None`` or a non-Atari env: unchanged.

    Examples:
        >>> import gymnasium as gym
        >>> env = gym.make("CartPole-v1")
        >>> preprocess_env(env, {"dim": 42}) is env
        True
    """
    cfg = image_options(model_config)
    check_preprocessor_pref(preprocessor_pref)
    if preprocessor_pref is None or not is_atari(env):
        return env
    if preprocessor_pref == "deepmind":
        return wrap_deepmind(env, cfg["dim"], cfg["framestack"], noframeskip)
    return GenericPixelEnv(env, cfg["dim"], cfg["grayscale"], cfg["zero_mean"])


def check_preprocessor_pref(pref: str | None) -> None:
    """Raises ValueError unless ``pref`` is ``"deepmind"``, ``"rllib"`` or None."""
    if pref not in ("deepmind", "rllib", None):
        raise ValueError(f"preprocessor_pref must be 'deepmind', 'rllib' or None, got {pref!r}")


def image_options(model_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The image keys of an RLlib model config (``dim``, ``grayscale``, ``zero_mean``,
    ``framestack``), RLlib's defaults for those it lacks.

    Raises:
        ValueError: ``dim`` is not a positive int.

    Examples:
        >>> image_options({"dim": 42, "fcnet_hiddens": [64]})
        {'dim': 42, 'grayscale': False, 'zero_mean': True, 'framestack': True}
    """
    defaults = {"dim": 84, "grayscale": False, "zero_mean": True, "framestack": True}
    cfg = dict(defaults)
    if model_config:
        cfg.update({k: model_config[k] for k in defaults if k in model_config})
    if not isinstance(cfg["dim"], (int, np.integer)) or cfg["dim"] < 1:
        raise ValueError(f"model config 'dim' must be a positive int, got {cfg['dim']!r}")
    return cfg


def push_frame(stack: np.ndarray, frame: np.ndarray) -> np.ndarray:
    """A new stack ``(..., H, W, C*k)``: ``stack`` without its oldest ``C`` channels, then
    ``frame (..., H, W, C)``. One contiguous shifted copy plus one strided write (much faster
    than concatenating along the last axis).

    Examples:
        >>> s = np.arange(8, dtype=np.uint8).reshape(1, 2, 4)
        >>> push_frame(s, np.array([[[9], [9]]], dtype=np.uint8))[0].tolist()
        [[1, 2, 3, 9], [5, 6, 7, 9]]
    """
    c = frame.shape[-1]
    new = np.empty_like(stack)
    flat_new, flat_old = new.reshape(-1), np.ascontiguousarray(stack).reshape(-1)
    flat_new[:-c] = flat_old[c:]  # pixel p's channels j + c land in slots j; the tail is
    new[..., -c:] = frame  # overwritten here by the newest frame
    return new
