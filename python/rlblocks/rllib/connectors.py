"""Env-to-module ConnectorV2 pieces backed by rlblocks' C++ core, batched over episodes.

RLlib calls an env runner's env-to-module pipeline once per step with every episode of the
runner. Each piece here gathers the newest observation of all those episodes, processes
them in ONE batched call (RLlib's own ``FlattenObservations`` and ``MeanStdFilter`` work
one observation at a time in Python), and writes the rows back into the episodes, where
RLlib's default pieces pick them up.

* :class:`FlattenObservationsBatched`: any nested Dict/Tuple/Discrete/MultiDiscrete/
  ``Repeated`` observation -> the flat float32 vector of rlblocks' preprocessor
  (``transform_batch``); the output Box carries ``original_space`` so that Dict/Tuple
  models see the nested structure again. A gymnasium ``Sequence`` is read as a
  ``Repeated`` of at most ``sequence_max_len`` items (default: the config's
  ``max_seq_len``), zero-padded; a longer sequence is a ValueError. The action-mask form
  ``Dict(action_mask=..., observations=...)`` keeps ``action_mask`` untouched and
  flattens ``observations`` only.
* :class:`MeanStdFilterBatched`: rlblocks' :class:`~rlblocks.filters.MeanStdFilter` on the
  (flat) observations, whose state merges across env runners exactly (parallel merge):
  the merged stats equal those of one filter that saw every observation.
* :class:`AtariFramesBatched`: the DeepMind frame pipeline (gray + resize of all episodes'
  newest frames in one C++ call, per-episode frame stacks); with
  ``stack_in_episode=False`` the episodes keep one frame per step (a replay buffer stores
  each frame once) and the stacks go straight into the module's batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box

from rlblocks.catalog import ModelCatalog
from rlblocks.config import ModelConfig
from rlblocks.filters import MeanStdFilter, RunningStat
from rlblocks.preprocessors import NoPreprocessor, Preprocessor, get_preprocessor
from rlblocks.rllib._ray import Columns, ConnectorV2
from rlblocks.rllib.module import MASK_KEY, OBS_KEY, is_mask_space, model_views
from rlblocks.spaces import Repeated

__all__ = ["FILTERS", "EnvToModule", "FlatRepeatedObservations", "FlattenObservationsBatched",
           "MeanStdFilterBatched", "ModelViewObservations", "AtariFramesBatched",
           "env_to_module", "has_repeated", "sequence_as_repeated", "sequence_values_as_lists"]

#: Accepted ``observation_filter`` values.
FILTERS = ("NoFilter", "MeanStdFilter", "ConcurrentMeanStdFilter")


def sequence_as_repeated(space: gym.Space, max_len: int) -> gym.Space:
    """``space`` with every gymnasium ``Sequence`` replaced by ``Repeated(child, max_len)``.

    Examples:
        >>> sequence_as_repeated(gym.spaces.Sequence(gym.spaces.Discrete(3)), 4)
        Repeated(Discrete(3), max_len=4)
    """
    if isinstance(space, gym.spaces.Sequence):
        return Repeated(sequence_as_repeated(space.feature_space, max_len), max_len)
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({k: sequence_as_repeated(s, max_len)
                                for k, s in space.spaces.items()})
    if isinstance(space, gym.spaces.Tuple):
        return gym.spaces.Tuple(tuple(sequence_as_repeated(s, max_len) for s in space.spaces))
    return space


def _holds(space: gym.Space, kind: type[gym.Space]) -> bool:
    """Whether a ``kind`` space is anywhere in ``space``'s tree (Dict/Tuple children)."""
    if isinstance(space, kind):
        return True
    children = (space.spaces.values() if isinstance(space, gym.spaces.Dict)
                else space.spaces if isinstance(space, gym.spaces.Tuple) else ())
    return any(_holds(s, kind) for s in children)


def _has_sequence(space: gym.Space) -> bool:
    return _holds(space, gym.spaces.Sequence)


def has_repeated(space: gym.Space) -> bool:
    """Whether a ``Repeated`` space is anywhere in ``space``'s tree (Dict/Tuple children)."""
    return _holds(space, Repeated)


def _unstack(space: gym.Space, value: Any, i: int) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {k: _unstack(s, value[k], i) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_unstack(s, v, i) for s, v in zip(space.spaces, value, strict=True))
    return value[i]


def _stacked_len(space: gym.Space, value: Any) -> int:
    if isinstance(space, gym.spaces.Dict):
        return _stacked_len(next(iter(space.spaces.values())), value[next(iter(space.spaces))])
    if isinstance(space, gym.spaces.Tuple):
        return _stacked_len(space.spaces[0], value[0])
    return len(value)


def sequence_values_as_lists(space: gym.Space, value: Any) -> Any:
    """An observation of ``space`` with every ``Sequence`` value as a list of items (what
    ``Repeated`` takes); stacked sequences (``stack=True``) are split into items."""
    if isinstance(space, gym.spaces.Sequence):
        child = space.feature_space
        if space.stack:
            items = [_unstack(child, value, i) for i in range(_stacked_len(child, value))]
        else:
            items = list(value)
        return [sequence_values_as_lists(child, v) for v in items]
    if isinstance(space, gym.spaces.Dict):
        return {k: sequence_values_as_lists(s, value[k]) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(sequence_values_as_lists(s, v)
                     for s, v in zip(space.spaces, value, strict=True))
    return value


def _with_original(space: Box, original: gym.Space | None) -> Box:
    if original is not None:
        space.original_space = original  # type: ignore[attr-defined]
    return space


def _inner_space(space: gym.Space, masked: bool) -> gym.Space:
    return space[OBS_KEY] if masked and isinstance(space, gym.spaces.Dict) else space


def _mask_dict(space: gym.Space, out: gym.Space) -> gym.spaces.Dict:
    assert isinstance(space, gym.spaces.Dict)
    return gym.spaces.Dict({MASK_KEY: space[MASK_KEY], OBS_KEY: out})


class FlatRepeatedObservations(gym.ObservationWrapper):  # type: ignore[type-arg]
    """Env side of ``Repeated`` observations on RLlib: each observation -> the flat float32
    row of rlblocks' preprocessor (the row :class:`FlattenObservationsBatched` would make).

    gymnasium's vector env batches a custom space such as ``Repeated`` as a Tuple of
    per-env lists, which RLlib's env runner cannot unbatch; a flat Box it can. The Box
    carries ``original_space`` (the ``Repeated``-holding space), so the module restores the
    structure exactly as after the connector's flattening, and the connector passes the
    rows through (a flat Box needs no preprocessor). The action-mask form
    ``Dict(action_mask=..., observations=...)`` keeps ``action_mask`` and flattens
    ``observations`` only. A gymnasium ``Sequence`` inside is read as a ``Repeated`` of at
    most the config's ``max_seq_len`` items, as the connector reads it.

    Args:
        env: The env (its observation space holds a ``Repeated``).
        model_config: rlblocks model config (preprocessor options).
    """

    def __init__(self, env: gym.Env, model_config: Mapping[str, Any] | None = None) -> None:
        super().__init__(env)
        options = ModelConfig.from_dict(model_config).to_dict()
        space = env.observation_space
        self._masked = is_mask_space(space)
        inner = _inner_space(space, self._masked)
        self._sequence_space = inner if _has_sequence(inner) else None
        if self._sequence_space is not None:
            inner = sequence_as_repeated(inner, options["max_seq_len"])
        self._prep = get_preprocessor(inner)(inner, options)
        out = _with_original(Box(-np.inf, np.inf, self._prep.shape, np.float32), inner)
        self.observation_space = _mask_dict(space, out) if self._masked else out

    def observation(self, observation: Any) -> Any:
        inner = observation[OBS_KEY] if self._masked else observation
        if self._sequence_space is not None:
            inner = sequence_values_as_lists(self._sequence_space, inner)
        row = np.asarray(self._prep.transform(inner), np.float32)
        if self._masked:
            return {MASK_KEY: observation[MASK_KEY], OBS_KEY: row}
        return row


class _BatchedObservationPiece(ConnectorV2):  # type: ignore[misc]
    """Shared gather / write-back of the newest observation of every episode."""

    _masked = False

    def _gather(self, episodes: list[Any]) -> tuple[list[Any], list[Any]]:
        eps = list(self.single_agent_episode_iterator(episodes, agents_that_stepped_only=True))
        return eps, [ep.get_observations(-1) for ep in eps]

    def _write(self, eps: list[Any], last: list[Any], rows: np.ndarray) -> None:
        space = self.observation_space
        for i, ep in enumerate(eps):
            new = {MASK_KEY: last[i][MASK_KEY], OBS_KEY: rows[i]} if self._masked else rows[i]
            ep.set_observations(at_indices=-1, new_data=new)
            ep.observation_space = space


class FlattenObservationsBatched(_BatchedObservationPiece):
    """Flattens the newest observation of all episodes in one C++ ``transform_batch`` call.

    Args:
        input_observation_space: The env's (single) observation space (set by the pipeline).
        input_action_space: The env's (single) action space.
        model_config: rlblocks model config (preprocessor options, e.g. ``grayscale``).
        sequence_max_len: The most items of a gymnasium ``Sequence`` observation (default:
            the config's ``max_seq_len``).
    """

    def __init__(
        self,
        input_observation_space: gym.Space | None = None,
        input_action_space: gym.Space | None = None,
        *,
        model_config: Mapping[str, Any] | None = None,
        sequence_max_len: int | None = None,
        **kwargs: Any,
    ) -> None:
        self._options = ModelConfig.from_dict(model_config).to_dict()
        bound = self._options["max_seq_len"] if sequence_max_len is None else sequence_max_len
        if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
            raise ValueError(f"sequence_max_len must be an int >= 1, got {bound!r}")
        self._sequence_max_len = bound
        self._sequence_space: gym.Space | None = None
        self._prep: Preprocessor | None = None
        super().__init__(input_observation_space, input_action_space, **kwargs)

    @property
    def preprocessor(self) -> Preprocessor | None:
        """The rlblocks preprocessor in use (None until the input space is known)."""
        return self._prep

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        if input_observation_space is None:
            return None
        self._masked = is_mask_space(input_observation_space)
        inner = _inner_space(input_observation_space, self._masked)
        self._sequence_space = inner if _has_sequence(inner) else None
        if self._sequence_space is not None:
            inner = sequence_as_repeated(inner, self._sequence_max_len)
        prep = get_preprocessor(inner)(inner, self._options)
        self._prep = prep
        if isinstance(prep, NoPreprocessor):
            out = inner
        else:
            out = _with_original(Box(-np.inf, np.inf, prep.shape, np.float32), inner)
        if self._masked:
            return _mask_dict(input_observation_space, out)
        return out

    # A non-empty state on purpose: RLlib's pipeline pairs the merged states with its pieces
    # by position among the pieces that HAVE a state, so a stateless piece in front of
    # MeanStdFilterBatched would shift the filter's state onto the wrong piece.
    def get_state(self, components: Any = None, *, not_components: Any = None,
                  **kwargs: Any) -> dict[str, Any]:
        prep = self._prep
        return {"preprocessor": type(prep).__name__ if prep is not None else None,
                "shape": list(prep.shape) if prep is not None else None}

    def set_state(self, state: dict[str, Any]) -> None:
        mine = self.get_state()
        if state and mine["shape"] is not None and state.get("shape") not in (None, mine["shape"]):
            raise ValueError(f"FlattenObservationsBatched: state for output shape "
                             f"{state.get('shape')}, this piece makes {mine['shape']}")

    def merge_states(self, states: list[dict[str, Any]]) -> dict[str, Any]:
        return dict(states[0]) if states else {}

    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: list[Any],
                 explore: bool | None = None, shared_data: dict | None = None,
                 **kwargs: Any) -> Any:
        if self._prep is None or isinstance(self._prep, NoPreprocessor):
            return batch
        eps, last = self._gather(episodes)
        if not eps:
            return batch
        inner = [o[OBS_KEY] for o in last] if self._masked else last
        if self._sequence_space is not None:
            inner = [sequence_values_as_lists(self._sequence_space, o) for o in inner]
        self._write(eps, last, self._prep.transform_batch(inner))
        return batch


class MeanStdFilterBatched(_BatchedObservationPiece):
    """rlblocks' MeanStdFilter over the newest observation of all episodes, in one call.

    Put it after :class:`FlattenObservationsBatched` (it normalises a Box, or the
    ``observations`` of the action-mask form). State, as RLlib's protocol wants it:
    ``get_state`` returns the stats as of the last sync (``base``), everything seen since
    (``buffer``) and the current ``running`` stats; ``merge_states`` adds every env
    runner's buffer to the base (exact parallel merge, so nothing is counted twice while
    the merged state is broadcast back with ``set_state``).

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
        self._settings: dict[str, Any] = {"demean": bool(demean), "destd": bool(destd),
                                          "clip": clip}
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

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        if input_observation_space is None:
            return None
        self._masked = is_mask_space(input_observation_space)
        inner = _inner_space(input_observation_space, self._masked)
        if not isinstance(inner, Box):
            raise ValueError(
                f"MeanStdFilterBatched needs Box observations (put FlattenObservationsBatched "
                f"first), got {inner}"
            )
        shape = tuple(inner.shape)
        if self._filter is None or self._filter.shape != shape:
            self._filter = MeanStdFilter(shape, **self._settings)
            self._base = RunningStat(shape)
        clip = self._filter.clip
        bound = clip if clip else np.inf
        out = _with_original(Box(-bound, bound, shape, np.float32),
                             getattr(inner, "original_space", None))
        if self._masked:
            return _mask_dict(input_observation_space, out)
        return out

    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: list[Any],
                 explore: bool | None = None, shared_data: dict | None = None,
                 **kwargs: Any) -> Any:
        eps, last = self._gather(episodes)
        if not eps:
            return batch
        inner = [o[OBS_KEY] for o in last] if self._masked else last
        rows = self.filter(np.stack(inner), update=self.update_stats)
        self._write(eps, last, rows)
        return batch

    # --- RLlib's state protocol ----------------------------------------------------------------
    def get_state(self, components: Any = None, *, not_components: Any = None,
                  **kwargs: Any) -> dict[str, Any]:
        f = self.filter
        assert self._base is not None
        return {
            "shape": list(f.shape), "demean": f.demean, "destd": f.destd, "clip": f.clip,
            "base": self._base.state(),
            "running": f.running_stats.state(),
            "buffer": f.buffer.state(),
        }

    def _check_state(self, state: Any) -> dict[str, Any]:
        keys = ("shape", "demean", "destd", "clip", "base", "running", "buffer")
        if not isinstance(state, Mapping) or any(k not in state for k in keys):
            raise ValueError(f"MeanStdFilterBatched: a state needs the keys {list(keys)}")
        if tuple(state["shape"]) != self.filter.shape:
            raise ValueError(f"MeanStdFilterBatched: state of shape {tuple(state['shape'])}, "
                             f"the filter has {self.filter.shape}")
        return dict(state)

    def set_state(self, state: dict[str, Any]) -> None:
        if not state:
            return
        state = self._check_state(state)
        f = self.filter
        shape = f.shape
        f.load_state_dict({"shape": list(shape), "demean": state["demean"],
                           "destd": state["destd"], "clip": state["clip"],
                           "running_stats": state["running"], "buffer": state["buffer"]})
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
            "shape": list(shape), "demean": first["demean"], "destd": first["destd"],
            "clip": first["clip"], "base": merged_state, "running": merged_state,
            "buffer": RunningStat(shape).state(),
        }


def _repeat_space(space: gym.Space, n: int) -> gym.Space:
    """The space of ``n`` stacked values of ``space`` (oldest first)."""
    if isinstance(space, gym.spaces.Discrete):
        return gym.spaces.MultiDiscrete(np.full(n, int(space.n)),
                                        start=np.full(n, int(space.start)))
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec)
        return gym.spaces.MultiDiscrete(np.stack([nvec] * n), start=np.stack([space.start] * n))
    assert isinstance(space, Box)
    return Box(np.stack([space.low] * n), np.stack([space.high] * n), dtype=space.dtype)


class ModelViewObservations(ConnectorV2):  # type: ignore[misc]
    """Puts what the model's view requirements read from the trajectory next to the
    observation: ``{"observations": obs, name: [n, ...], ...}`` (an ``action_mask`` stays),
    e.g. ``prev_actions`` / ``prev_rewards`` (``lstm_use_prev_action`` / ``_reward``),
    ``prev_n_actions`` / ``prev_n_rewards`` (``attention_use_n_prev_*``), ``prev_n_obs``
    (the models guide's frame-stacking model). Past observations before the episode start
    repeat its first one, past actions and rewards are zeros (the trajectory view API's
    fill). Each episode's history is kept here, so chunk boundaries change nothing; the
    values are stored in the episodes, so the learner sees the same inputs. Put it after
    the flattening and filter pieces.

    Args:
        input_observation_space: Set by the pipeline.
        input_action_space: Set by the pipeline.
        model_config: rlblocks model config; the catalog model for it tells the views.
        views: Instead of ``model_config``: ``{name: (column, shifts, time_axis)}`` as
            :func:`rlblocks.rllib.module.model_views` returns them.

    Raises:
        ValueError: Both or neither of ``model_config`` / ``views``, or a view of an action
            space that cannot be stacked.
    """

    def __init__(self, input_observation_space: gym.Space | None = None,
                 input_action_space: gym.Space | None = None, *,
                 model_config: Mapping[str, Any] | None = None,
                 views: Mapping[str, tuple[str, list[int], bool]] | None = None,
                 **kwargs: Any) -> None:
        if (model_config is None) == (views is None):
            raise ValueError("ModelViewObservations: give model_config or views")
        self._options = (None if model_config is None
                         else ModelConfig.from_dict(model_config).to_dict())
        self.views: dict[str, tuple[str, list[int], bool]] = dict(views or {})
        self._masked = False
        self._history: dict[Any, dict[str, list[Any]]] = {}
        self._seen_t: dict[Any, int] = {}
        super().__init__(input_observation_space, input_action_space, **kwargs)

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        if input_observation_space is None or input_action_space is None:
            return input_observation_space
        self._masked = is_mask_space(input_observation_space)
        inner = _inner_space(input_observation_space, self._masked)
        if self._options is not None:
            _, n = ModelCatalog.get_action_dist(input_action_space, self._options)
            model = ModelCatalog.get_model_v2(inner, input_action_space, n, self._options)
            self.views = model_views(model)
        if not self.views:
            return input_observation_space
        spaces = (dict(input_observation_space.spaces)
                  if isinstance(input_observation_space, gym.spaces.Dict) and self._masked
                  else {OBS_KEY: input_observation_space})
        for name, (column, shifts, _) in self.views.items():
            if column == "obs":
                spaces[name] = _repeat_space(inner, len(shifts))
            elif column == "actions":
                if not isinstance(input_action_space, (gym.spaces.Discrete,
                                                       gym.spaces.MultiDiscrete, Box)):
                    raise ValueError(f"ModelViewObservations: view {name!r} of actions needs a "
                                     f"Discrete, MultiDiscrete or Box action space, got "
                                     f"{input_action_space}")
                spaces[name] = _repeat_space(input_action_space, len(shifts))
            else:
                spaces[name] = Box(-np.inf, np.inf, (len(shifts),), np.float32)
        return gym.spaces.Dict(spaces)

    def recompute_output_action_space(self, input_observation_space: gym.Space,
                                      input_action_space: gym.Space) -> gym.Space:
        # the views depend on both spaces, whichever of them is set last
        if input_observation_space is not None and input_action_space is not None:
            self._observation_space = self.recompute_output_observation_space(
                input_observation_space, input_action_space)
        return input_action_space

    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: list[Any],
                 explore: bool | None = None, shared_data: dict | None = None,
                 **kwargs: Any) -> Any:
        if not self.views:
            return batch
        space = self.observation_space
        keep = {c: max(-min(sh) for col, sh, _ in self.views.values() if col == c) + 1
                for c in ("obs", "actions", "rewards")
                if any(col == c for col, _, _ in self.views.values())}
        zero_action = np.zeros(self.input_action_space.shape or (),
                               self.input_action_space.dtype or np.float32)
        for ep in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=True):
            if self._seen_t.get(ep.id_) == ep.t:
                continue  # this observation was processed already
            hist = self._history.get(ep.id_)
            if hist is None:
                hist = self._history[ep.id_] = {"obs": [], "actions": [], "rewards": []}
            elif len(ep) > 0:
                hist["actions"].append(np.asarray(ep.get_actions(-1)))
                hist["rewards"].append(np.float32(ep.get_rewards(-1)))
            obs = ep.get_observations(-1)
            hist["obs"].append(obs[OBS_KEY] if self._masked else obs)
            for c, n in keep.items():
                del hist[c][:-n]
            new = dict(obs) if self._masked else {OBS_KEY: obs}
            for name, (column, shifts, _) in self.views.items():
                items = hist[column]
                if column == "obs":  # shift 0 is the current observation
                    picked = [items[max(0, len(items) - 1 + s)] for s in shifts]
                else:  # shift -1 is the last action / reward
                    picked = [items[len(items) + s] if len(items) + s >= 0 else
                              (zero_action if column == "actions" else np.float32(0.0))
                              for s in shifts]
                new[name] = np.stack([np.asarray(p) for p in picked]).astype(
                    np.float32 if column == "rewards" else np.asarray(picked[0]).dtype)
            ep.set_observations(at_indices=-1, new_data=new)
            ep.observation_space = space
            self._seen_t[ep.id_] = ep.t
            if ep.is_done:
                del self._history[ep.id_], self._seen_t[ep.id_]
        return batch


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

    def __init__(self, input_observation_space: gym.Space | None = None,
                 input_action_space: gym.Space | None = None, *, dim: int = 84,
                 framestack: int = 4, stack_in_episode: bool = True, **kwargs: Any) -> None:
        if isinstance(dim, bool) or int(dim) < 1 or isinstance(framestack, bool) or \
                int(framestack) < 1:
            raise ValueError(f"AtariFramesBatched: dim and framestack must be ints >= 1, got "
                             f"{dim!r} and {framestack!r}")
        self.dim, self.k = int(dim), int(framestack)
        self.stack_in_episode = bool(stack_in_episode)
        #: The space of what each episode step holds (the stack, or one frame).
        self.episode_observation_space = Box(
            0, 255, (self.dim, self.dim, self.k if self.stack_in_episode else 1), np.uint8)
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
        if not (isinstance(space, Box) and space.dtype == np.uint8 and len(space.shape) == 3
                and space.shape[2] == 3):
            raise ValueError(f"AtariFramesBatched needs RGB uint8 frames Box(0, 255, (H, W, 3)),"
                             f" got {space}")
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

    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: list[Any],
                 explore: bool | None = None, shared_data: dict | None = None,
                 **kwargs: Any) -> Any:
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
                ep.set_observations(at_indices=-1, new_data=(
                    stacks[slot].copy() if self.stack_in_episode else frame))
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


class EnvToModule:
    """The value for ``config.env_runners(env_to_module_connector=...)``: called by RLlib as
    ``(env, spaces, device)``, returns the pieces (picklable, so it travels to env runners).
    """

    def __init__(self, model_config: Mapping[str, Any] | None = None,
                 observation_filter: str = "NoFilter",
                 sequence_max_len: int | None = None, atari: bool = False,
                 stack_in_episode: bool = True) -> None:
        if observation_filter not in FILTERS:
            raise ValueError(f"observation_filter must be one of {FILTERS}, got "
                             f"{observation_filter!r}")
        self.model_config = ModelConfig.from_dict(model_config).to_dict()
        self.observation_filter = observation_filter
        self.sequence_max_len = sequence_max_len
        self.atari = bool(atari)
        self.stack_in_episode = bool(stack_in_episode)
        if self.atari and observation_filter != "NoFilter":
            raise ValueError("atari=True frames are not mean/std filtered; use "
                             "observation_filter='NoFilter'")
        if not self.stack_in_episode and not self.atari:
            raise ValueError("stack_in_episode=False is an option of the Atari frame pipeline; "
                             "give atari=True")
        FlattenObservationsBatched(model_config=self.model_config,
                                   sequence_max_len=sequence_max_len)  # validates early

    def __call__(self, env: Any = None, spaces: Any = None, device: Any = None) -> list[Any]:
        if self.atari:
            cfg = self.model_config
            return [AtariFramesBatched(dim=cfg["dim"], framestack=4 if cfg["framestack"] else 1,
                                       stack_in_episode=self.stack_in_episode)]
        pieces: list[Any] = [FlattenObservationsBatched(
            model_config=self.model_config, sequence_max_len=self.sequence_max_len)]
        if self.observation_filter != "NoFilter":
            pieces.append(MeanStdFilterBatched())
        cfg = self.model_config
        if (cfg["custom_model"] or (cfg["use_lstm"] and (cfg["lstm_use_prev_action"]
                                                         or cfg["lstm_use_prev_reward"]))
                or (cfg["use_attention"] and (cfg["attention_use_n_prev_actions"]
                                              or cfg["attention_use_n_prev_rewards"]))):
            # the model may read past observations/actions/rewards (its view requirements)
            pieces.append(ModelViewObservations(model_config=cfg))
        return pieces


def env_to_module(model_config: Mapping[str, Any] | None = None,
                  observation_filter: str = "NoFilter",
                  sequence_max_len: int | None = None, atari: bool = False,
                  stack_in_episode: bool = True) -> EnvToModule:
    """The env-to-module connector factory for ``config.env_runners(...)``.

    Args:
        model_config: rlblocks model config (preprocessor options).
        observation_filter: ``"NoFilter"`` or ``"MeanStdFilter"``
            (``"ConcurrentMeanStdFilter"`` is the same here: each env runner has its own).
        sequence_max_len: The most items of a gymnasium ``Sequence`` observation (default:
            the config's ``max_seq_len``).
        atari: Raw RGB Atari frames: the DeepMind frame pipeline
            (:class:`AtariFramesBatched` with the config's ``dim`` and ``framestack``).
        stack_in_episode: With ``atari``: False keeps one frame per episode step (a replay
            buffer stores each frame once; pair it with
            :func:`rlblocks.rllib.atari_replay_buffer_config`), True the stacked frames
            (what on-policy learners such as PPO's read).

    Raises:
        ValueError: An unknown filter, an invalid model config or ``sequence_max_len``, a
            filter together with ``atari``, or ``stack_in_episode=False`` without ``atari``.
    """
    return EnvToModule(model_config, observation_filter, sequence_max_len, atari,
                       stack_in_episode)
