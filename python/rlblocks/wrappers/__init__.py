"""Environment wrappers: DeepMind Atari wrappers and batched vector-env preprocessing.

The package re-exports the public names of :mod:`~rlblocks.wrappers.atari` (single-env
wrappers), :mod:`~rlblocks.wrappers.atari_env` (the ALE game with palette-index screens),
:mod:`~rlblocks.wrappers.atari_vector` (vector wrappers, the Atari vector env)
and :mod:`~rlblocks.wrappers.vector` (:func:`make_vector_env`).

Examples:
    >>> from rlblocks.wrappers import make_vector_env, wrap_deepmind
    >>> make_vector_env.__module__, wrap_deepmind.__module__
    ('rlblocks.wrappers.vector', 'rlblocks.wrappers.atari')
"""

from __future__ import annotations

from rlblocks.wrappers import atari, atari_env, atari_vector, vector
from rlblocks.wrappers.atari import *  # noqa: F403
from rlblocks.wrappers.atari_env import *  # noqa: F403
from rlblocks.wrappers.atari_vector import *  # noqa: F403
from rlblocks.wrappers.vector import *  # noqa: F403

__all__ = [*atari.__all__, *atari_env.__all__, *atari_vector.__all__, *vector.__all__]
