""":class:`AtariFramesBatched`: the DeepMind frame pipeline (gray, resize, frame stack) for
the newest frames of all episodes in one C++ call."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box

from rlblocks.rllib._ray import Columns, ConnectorV2

__all__ = ["AtariFramesBatched"]


class AtariFramesBatched(ConnectorV2):  # type: ignore[misc]
    """The DeepMind frame pipeline for raw RGB frames: gray + ``dim``x``dim`` INTER_AREA resize
    of the newest frame of all episodes in one C++ call (:func:`rlblocks.image.gray_resize`),
    then each episode's last ``k`` frames stacked (channel-last, oldest first; an episode
    starts with ``k`` copies of its first frame), as RLlib's ``wrap_deepmind`` /
    ``FrameStack`` produce them. The env-side parts of that pipeline (noop reset, frame
    skip, episodic life, FIRE reset) change the env's dynamics and stay env wrappers
    (:func:`rlblocks.wrappers.atari.wrap_deepmind` with ``warp=False``).

    Where the stack lives is ``stack_in_episode``'s choice:

    * True (default): each episode step holds the stacked ``(dim, dim, k)`` observation, so
      every RLlib learner (PPO's included) and replay buffer reads it as is; a replay buffer
      then stores each frame ``k`` times (in ``k`` consecutive observations).
    * False: each episode step holds only its warped ``(dim, dim, 1)`` frame, and this piece
      puts the stacked observations into the module's batch itself. A replay buffer then
      stores each frame once; the learner's stacks come from
      :class:`~rlblocks.rllib.replay.FrameStackEpisodeReplayBuffer` (or its prioritized
      twin), which rebuilds ``OBS`` and ``NEXT_OBS`` of each sampled transition from the
      stored frames. Only for algorithms that learn from those buffers (RLlib's DQN; SAC
      samples its transitions the same way); a learner fed the episodes themselves (PPO)
      would see single frames.

    Either way the stacks are kept here per episode (not read back from the episode), so an
    episode's chunk boundaries change nothing.

    Args:
        input_observation_space: ``Box(0, 255, (H, W, 3), uint8)`` (set by the pipeline).
        input_action_space: Set by the pipeline.
        dim: Side of the warped frame (the model config's ``dim``).
        framestack: Frames per observation (``k``; the model config's ``framestack``: 4).
        stack_in_episode: Whether the episodes keep the stacked observations (True) or the
            single frames (False); see above.

    Raises:
        ValueError: A bad ``dim`` / ``framestack`` or non-RGB-uint8 observations.
    """

    def __init__(
        self,
        input_observation_space: gym.Space | None = None,
        input_action_space: gym.Space | None = None,
        *,
        dim: int = 84,
        framestack: int = 4,
        stack_in_episode: bool = True,
        **kwargs: Any,
    ) -> None:
        if (
            isinstance(dim, bool)
            or int(dim) < 1
            or isinstance(framestack, bool)
            or int(framestack) < 1
        ):
            raise ValueError(
                f"AtariFramesBatched: dim and framestack must be ints >= 1, got "
                f"{dim!r} and {framestack!r}"
            )
        self.dim, self.k = int(dim), int(framestack)
        self.stack_in_episode = bool(stack_in_episode)
        #: The space of what each episode step holds (the stack, or one frame).
        self.episode_observation_space = Box(
            0, 255, (self.dim, self.dim, self.k if self.stack_in_episode else 1), np.uint8
        )
        self._stacks = np.zeros((0, self.dim, self.dim, self.k), np.uint8)
        self._slots: dict[Any, int] = {}
        self._seen_t: dict[Any, int] = {}
        self._finished: set[Any] = set()
        self._free: list[int] = []
        super().__init__(input_observation_space, input_action_space, **kwargs)

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        if input_observation_space is None:
            return None
        space = input_observation_space
        if not (
            isinstance(space, Box)
            and space.dtype == np.uint8
            and len(space.shape) == 3
            and space.shape[2] == 3
        ):
            raise ValueError(
                f"AtariFramesBatched needs RGB uint8 frames Box(0, 255, (H, W, 3)), got {space}"
            )
        return Box(0, 255, (self.dim, self.dim, self.k), np.uint8)

    def _slot(self, key: Any) -> int:
        if key in self._slots:
            return self._slots[key]
        if not self._free:
            old = self._stacks.shape[0]
            grow = np.zeros((max(8, old), *self._stacks.shape[1:]), np.uint8)
            self._stacks = np.concatenate([self._stacks, grow])
            self._free = list(range(self._stacks.shape[0] - 1, old - 1, -1))
        self._slots[key] = slot = self._free.pop()
        return slot

    def _release_finished(self, present: set[Any]) -> None:
        """Gives back the stacks of finished episodes that this call no longer passes (a
        finished episode still gets its batch row in the call that saw its last frame)."""
        for key in [k for k in self._finished if k not in present]:
            self._finished.discard(key)
            self._free.append(self._slots.pop(key))
            del self._seen_t[key]

    def __call__(self, *, batch: dict[str, Any], episodes: list[Any], **kwargs: Any) -> Any:
        # RLlib passes rl_module, explore, shared_data, metrics...: unused here
        from rlblocks.image import gray_resize

        eps = list(self.single_agent_episode_iterator(episodes, agents_that_stepped_only=True))
        self._release_finished({ep.id_ for ep in eps})
        new = [ep for ep in eps if self._seen_t.get(ep.id_) != ep.t]
        if new:
            fresh = np.array([ep.id_ not in self._slots for ep in new])
            slots = np.array([self._slot(ep.id_) for ep in new])
            frames = gray_resize(np.stack([ep.get_observations(-1) for ep in new]), self.dim)
            stacks = self._stacks
            # oldest first: shift every continuing stack by one frame, then write the new one
            old = slots[~fresh]
            stacks[old, :, :, :-1] = stacks[old, :, :, 1:]
            stacks[old, :, :, -1:] = frames[~fresh]
            stacks[slots[fresh]] = np.repeat(frames[fresh], self.k, axis=-1)
            space = self.episode_observation_space
            for ep, slot, frame in zip(new, slots, frames, strict=True):
                ep.set_observations(
                    at_indices=-1,
                    new_data=(stacks[slot].copy() if self.stack_in_episode else frame),
                )
                ep.observation_space = space
                self._seen_t[ep.id_] = ep.t
                if ep.is_done:
                    self._finished.add(ep.id_)
        if not self.stack_in_episode and eps:
            # the module's input: the stacks (one fancy-indexed copy: they change next step)
            rows = self._stacks[np.array([self._slots[ep.id_] for ep in eps])]
            for ep, row in zip(eps, rows, strict=True):
                self.add_batch_item(batch, Columns.OBS, row, single_agent_episode=ep)
        return batch
