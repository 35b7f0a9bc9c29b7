""":class:`MeanStdFilterBatched`: rlblocks' MeanStdFilter over the newest observation of all
episodes in one call, with a state that merges across env runners exactly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box

from rlblocks.filters import MeanStdFilter, unfiltered_columns
from rlblocks.rllib.connectors.newest_observation import NewestObservationPiece
from rlblocks.rllib.connectors.observation_spaces import with_original_space
from rlblocks.running_stat import RunningStat

__all__ = ["MeanStdFilterBatched"]


class MeanStdFilterBatched(NewestObservationPiece):
    """rlblocks' MeanStdFilter over the newest observation of all episodes, in one call.

    Put it after :class:`~rlblocks.rllib.connectors.FlattenObservationsBatched` (it
    normalises a Box, or the ``observations`` of the action-mask form; the columns that
    describe the observation's structure, :func:`~rlblocks.filters.unfiltered_columns` of
    the flattened space's layout, pass through). State, as RLlib's
    protocol wants it: ``get_state`` returns the stats as of the last sync (``base``),
    everything seen since (``buffer``) and the current ``running`` stats; ``merge_states``
    adds every env runner's buffer to the base (exact parallel merge, so nothing is counted
    twice while the merged state is broadcast back with ``set_state``).

    Args:
        input_observation_space: Set by the pipeline.
        input_action_space: Set by the pipeline.
        demean: Subtract the running mean.
        destd: Divide by the running std.
        clip: Clip to ``[-clip, clip]`` (None or 0: no clipping).
        update_stats: Push observations into the stats (False for pure inference).
    """

    def __init__(
        self,
        input_observation_space: gym.Space | None = None,
        input_action_space: gym.Space | None = None,
        *,
        demean: bool = True,
        destd: bool = True,
        clip: float | None = 10.0,
        update_stats: bool = True,
        **kwargs: Any,
    ) -> None:
        self._settings: dict[str, Any] = {
            "demean": bool(demean),
            "destd": bool(destd),
            "clip": clip,
        }
        MeanStdFilter((), **self._settings)  # validates the settings early
        self.update_stats = bool(update_stats)
        self._filter: MeanStdFilter | None = None
        self._base: RunningStat | None = None
        super().__init__(input_observation_space, input_action_space, **kwargs)

    @property
    def filter(self) -> MeanStdFilter:
        """The rlblocks filter (raises ValueError before the input space is known)."""
        if self._filter is None:
            raise ValueError("MeanStdFilterBatched: the input observation space is not set yet")
        return self._filter

    def _inner_output_space(self, inner: gym.Space) -> gym.Space:
        if not isinstance(inner, Box):
            raise ValueError(
                f"MeanStdFilterBatched needs Box observations (put FlattenObservationsBatched "
                f"first), got {inner}"
            )
        shape = tuple(inner.shape)
        lay = getattr(inner, "layout", None)
        keep = unfiltered_columns(lay) if lay is not None else np.empty(0, np.int64)
        f = self._filter
        kept: Any = f.passthrough if f is not None and f.passthrough is not None else []
        if f is None or f.shape != shape or not np.array_equal(kept, keep):
            f = self._filter = MeanStdFilter(shape, **self._settings, passthrough=keep)
            self._base = RunningStat(shape)
        bound = f.clip if f.clip else np.inf
        low = np.full(shape, -bound, np.float32)
        high = np.full(shape, bound, np.float32)
        passed = f.passthrough
        if passed is not None:  # counts and indices keep the input's own bounds
            low[passed], high[passed] = inner.low[passed], inner.high[passed]
        return with_original_space(
            Box(low, high, shape, np.float32), getattr(inner, "original_space", None), lay
        )

    def __call__(self, *, batch: dict[str, Any], episodes: list[Any], **kwargs: Any) -> Any:
        # RLlib passes rl_module, explore, shared_data, metrics...: unused here
        eps, last, inner = self._gather(episodes)
        if not eps:
            return batch
        rows = self.filter(np.stack(inner), update=self.update_stats)
        self._write(eps, last, rows)
        return batch

    # --- RLlib's state protocol ----------------------------------------------------------------
    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        f = self.filter
        assert self._base is not None
        return {
            "shape": list(f.shape),
            "demean": f.demean,
            "destd": f.destd,
            "clip": f.clip,
            "base": self._base.state(),
            "running": f.running_stats.state(),
            "buffer": f.buffer.state(),
        }

    def _check_state(self, state: Any) -> dict[str, Any]:
        keys = ("shape", "demean", "destd", "clip", "base", "running", "buffer")
        if not isinstance(state, Mapping) or any(k not in state for k in keys):
            raise ValueError(f"MeanStdFilterBatched: a state needs the keys {list(keys)}")
        if tuple(state["shape"]) != self.filter.shape:
            raise ValueError(
                f"MeanStdFilterBatched: state of shape {tuple(state['shape'])}, "
                f"the filter has {self.filter.shape}"
            )
        return dict(state)

    def set_state(self, state: dict[str, Any]) -> None:
        if not state:
            return
        state = self._check_state(state)
        f = self.filter
        shape = f.shape
        f.load_state_dict(
            {
                "shape": list(shape),
                "demean": state["demean"],
                "destd": state["destd"],
                "clip": state["clip"],
                "running_stats": state["running"],
                "buffer": state["buffer"],
            }
        )
        self._base = RunningStat.from_state(shape, state["base"])

    def merge_states(self, states: list[dict[str, Any]]) -> dict[str, Any]:
        """One state from those of several env runners: the newest base (most samples)
        plus every runner's buffer; the result's buffer is empty."""
        if not states:
            return {}
        checked = [self._check_state(s) for s in states]
        shape = self.filter.shape
        bases = [RunningStat.from_state(shape, s["base"]) for s in checked]
        merged = max(bases, key=lambda b: b.n).copy()
        for s in checked:
            merged.update(RunningStat.from_state(shape, s["buffer"]))
        first = checked[0]
        merged_state = merged.state()
        return {
            "shape": list(shape),
            "demean": first["demean"],
            "destd": first["destd"],
            "clip": first["clip"],
            "base": merged_state,
            "running": merged_state,
            "buffer": RunningStat(shape).state(),
        }
