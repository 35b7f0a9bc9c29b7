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
    VectorAtariPreprocessing,
    VectorGenericPixel,
    WarpFrame,
    is_atari,
    make_vector_env,
    preprocess_env,
    wrap_deepmind,
)

__all__ = [
    "ClipRewardEnv",
    "EpisodicLifeEnv",
    "FireResetEnv",
    "FrameStack",
    "GenericPixelEnv",
    "MaxAndSkipEnv",
    "NoopResetEnv",
    "VectorAtariPreprocessing",
    "VectorGenericPixel",
    "WarpFrame",
    "is_atari",
    "make_vector_env",
    "preprocess_env",
    "wrap_deepmind",
]
