"""Environment wrappers: DeepMind Atari wrappers and batched vector-env preprocessing."""

from __future__ import annotations

from rlblocks.wrappers.atari import (
    ClipRewardEnv,
    EpisodicLifeEnv,
    FireResetEnv,
    FrameStack,
    GenericPixelEnv,
    MaxAndSkipEnv,
    NoopResetEnv,
    PaletteFrame,
    VectorAtariPreprocessing,
    VectorGenericPixel,
    WarpFrame,
    is_atari,
    make_atari_env,
    preprocess_env,
    wrap_deepmind,
)
from rlblocks.wrappers.atari_vector import AtariVectorEnv
from rlblocks.wrappers.vector import make_vector_env

__all__ = [
    "AtariVectorEnv",
    "ClipRewardEnv",
    "EpisodicLifeEnv",
    "FireResetEnv",
    "FrameStack",
    "GenericPixelEnv",
    "MaxAndSkipEnv",
    "NoopResetEnv",
    "PaletteFrame",
    "VectorAtariPreprocessing",
    "VectorGenericPixel",
    "WarpFrame",
    "is_atari",
    "make_atari_env",
    "make_vector_env",
    "preprocess_env",
    "wrap_deepmind",
]
