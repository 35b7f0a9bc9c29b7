"""Episode replay buffers for RLlib's DQN (new API stack) that store each Atari frame once.

RLlib's episode replay buffers keep the observations of the episodes they are given. With
:class:`~rlblocks.rllib.connectors.AtariFramesBatched`'s default (frames stacked in the
episode), each step's observation is a ``(84, 84, 4)`` stack, so every frame is stored four
times (in four consecutive observations). With ``stack_in_episode=False`` the episodes hold
one warped ``(84, 84, 1)`` frame per step, and the buffers here rebuild the stacks of each
sampled n-step transition ``(o_t, a_t, R, o_{t+n})`` when it is sampled: ``OBS`` is the
stack of the frames ``t-k+1 .. t`` and ``NEXT_OBS`` that of ``t+n-k+1 .. t+n`` of the stored
episode, with the episode's first frame repeated before its start. These are exactly the
observations the in-episode stacking gives, so the learner sees the same batch while the
buffer holds a quarter of the pixels.

Why the buffer rebuilds the stacks, not a learner connector: RLlib's n-step sampling hands
each transition to the learner as a new one-step episode holding only ``o_t`` and
``o_{t+n}``, with no lookback, so the frames before them never reach the learner's
connector pipeline. The stored episodes have them.

* :class:`FrameStackEpisodeReplayBuffer`: uniform sampling (RLlib's
  ``EpisodeReplayBuffer``).
* :class:`FrameStackPrioritizedEpisodeReplayBuffer`: prioritized sampling (RLlib's
  ``PrioritizedEpisodeReplayBuffer``, DQN's default).
* :func:`atari_replay_buffer_config`: the ``replay_buffer_config`` that names one of them.

An episode is stored from its first step unless the buffer evicted its beginning while it
was still running (capacity shorter than the episode); its stacks then start at the oldest
frame the buffer still holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Box

from rlblocks.config import ModelConfig
from rlblocks.config_fields import as_int
from rlblocks.rllib._ray import EpisodeReplayBuffer, PrioritizedEpisodeReplayBuffer

__all__ = [
    "FrameStackEpisodeReplayBuffer",
    "FrameStackPrioritizedEpisodeReplayBuffer",
    "atari_replay_buffer_config",
]


def _window(episode: Any, index: int, k: int) -> np.ndarray:
    """The frames ``index-k+1 .. index`` of a stored episode stacked on the last axis (oldest
    first; indices before the episode's first step repeat its first frame)."""
    frames = episode.get_observations(indices=[max(0, i) for i in range(index - k + 1, index + 1)])
    return np.concatenate(list(frames), axis=-1)


class _FrameStacking:
    """What both buffers share: the ``framestack`` option and the rebuilding of the sampled
    observations from the stored frames."""

    framestack: int

    def __init__(self, *args: Any, framestack: int = 4, **kwargs: Any) -> None:
        framestack = as_int(framestack, f"{type(self).__name__}: framestack")
        super().__init__(*args, **kwargs)
        self.framestack = framestack

    def _stacked(
        self, sampled: list[Any], sources: Sequence[tuple[Any, int]], to_numpy: bool
    ) -> list[Any]:
        """``sampled`` (one-step episodes) with ``o_t`` / ``o_{t+n}`` replaced by the stacks
        of their stored episodes (``sources``: the stored episode and ``t`` of each)."""
        k = self.framestack
        space: Box | None = None
        for ep, (stored, t) in zip(sampled, sources, strict=True):
            # RLlib clips a transition at the end of the stored episode (uniform sampling)
            nxt = min(t + int(ep.get_extra_model_outputs("n_step", 0)), len(stored))
            first, last = stored.get_observations(t), stored.get_observations(nxt)
            if np.shape(first)[-1] != 1:
                raise ValueError(
                    f"{type(self).__name__} stacks single frames, but the episodes hold "
                    f"observations of shape {np.shape(first)}; give the env runners "
                    "env_to_module(model_config, atari=True, stack_in_episode=False)"
                )
            if not (
                np.array_equal(first, ep.get_observations(0))
                and np.array_equal(last, ep.get_observations(-1))
            ):
                raise RuntimeError(
                    f"{type(self).__name__}: a sampled transition does not "
                    "match its stored episode (an RLlib version this buffer "
                    "does not know?)"
                )
            obs, next_obs = _window(stored, t, k), _window(stored, nxt, k)
            if space is None:
                space = Box(0, 255, obs.shape, obs.dtype)
            ep.set_observations(at_indices=0, new_data=obs)
            ep.set_observations(at_indices=-1, new_data=next_obs)
            ep.observation_space = space
            if to_numpy:
                ep.to_numpy()
        return sampled


class FrameStackEpisodeReplayBuffer(_FrameStacking, EpisodeReplayBuffer):  # type: ignore[misc]
    """RLlib's uniform ``EpisodeReplayBuffer`` over single-frame episodes, whose sampled
    n-step transitions carry ``framestack``-frame stacks (see the module docstring).

    Args:
        capacity: Environment steps stored (RLlib's meaning).
        framestack: Frames per stacked observation (``k``).
        **kwargs: RLlib's ``EpisodeReplayBuffer`` options.

    Raises:
        ValueError: A bad ``framestack``; from :meth:`sample`, a sequence sample or episodes
            that hold stacked observations.
    """

    def sample(
        self,
        num_items: int | None = None,
        *,
        batch_length_T: int | None = None,
        sample_episodes: bool | None = False,
        to_numpy: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """RLlib's n-step episode sample (``sample_episodes=True``, what DQN asks for) with
        stacked observations."""
        if not sample_episodes or batch_length_T:
            raise ValueError(
                f"{type(self).__name__} samples n-step transitions only "
                "(sample_episodes=True, no batch_length_T); recurrent modules "
                "and sequence batches are not supported"
            )
        sampled = super().sample(
            num_items, batch_length_T=batch_length_T, sample_episodes=True, **kwargs
        )
        evicted = self._num_episodes_evicted
        sources = [
            (self.episodes[self.episode_id_to_index[ep.id_] - evicted], ep.t_started)
            for ep in sampled
        ]
        return self._stacked(sampled, sources, to_numpy)


class FrameStackPrioritizedEpisodeReplayBuffer(  # type: ignore[misc]
    _FrameStacking, PrioritizedEpisodeReplayBuffer
):
    """RLlib's ``PrioritizedEpisodeReplayBuffer`` over single-frame episodes, whose sampled
    n-step transitions carry ``framestack``-frame stacks (see the module docstring).
    Priorities, importance weights and their updates are RLlib's.

    Args:
        capacity: Environment steps stored (RLlib's meaning).
        framestack: Frames per stacked observation (``k``).
        **kwargs: RLlib's ``PrioritizedEpisodeReplayBuffer`` options (``alpha``, ...).

    Raises:
        ValueError: A bad ``framestack``; from :meth:`sample`, episodes that hold stacked
            observations.
    """

    def sample(
        self, num_items: int | None = None, *, to_numpy: bool = False, **kwargs: Any
    ) -> list[Any]:
        """RLlib's prioritized n-step sample with stacked observations."""
        sampled = super().sample(num_items, **kwargs)
        evicted = self._num_episodes_evicted
        sources = []
        for tree_idx in self._last_sampled_indices:  # one per sampled transition, in order
            episode_idx, t = self._indices[self._tree_idx_to_sample_idx[tree_idx]][:2]
            sources.append((self.episodes[episode_idx - evicted], t))
        return self._stacked(sampled, sources, to_numpy)


def atari_replay_buffer_config(
    model_config: Mapping[str, Any] | None = None,
    capacity: int = 50000,
    *,
    prioritized: bool = True,
    **options: Any,
) -> dict[str, Any]:
    """The ``replay_buffer_config`` for ``DQNConfig().training(...)`` that stores each frame of
    ``env_to_module(model_config, atari=True, stack_in_episode=False)`` once.

    Args:
        model_config: rlblocks model config (its ``framestack``: 4 frames, or 1).
        capacity: Environment steps stored.
        prioritized: :class:`FrameStackPrioritizedEpisodeReplayBuffer` (DQN's default kind,
            with RLlib's default ``alpha=0.6``, ``beta=0.4``) or
            :class:`FrameStackEpisodeReplayBuffer`.
        **options: More buffer options (override the above).

    Raises:
        ValueError: An invalid model config or capacity.

    Examples:
        >>> cfg = atari_replay_buffer_config(capacity=1000, prioritized=False)
        >>> cfg["type"].rsplit(".", 1)[1], cfg["capacity"], cfg["framestack"]
        ('FrameStackEpisodeReplayBuffer', 1000, 4)
    """
    capacity = as_int(capacity, "capacity")
    framestack = 4 if ModelConfig.from_dict(model_config).framestack else 1
    # a class path, not the class: RLlib recognizes episode buffers by their type's name
    cls = FrameStackPrioritizedEpisodeReplayBuffer if prioritized else FrameStackEpisodeReplayBuffer
    config: dict[str, Any] = {
        "type": f"{cls.__module__}.{cls.__name__}",
        "capacity": capacity,
        "framestack": framestack,
    }
    if prioritized:
        config.update(alpha=0.6, beta=0.4)
    config.update(options)
    return config
