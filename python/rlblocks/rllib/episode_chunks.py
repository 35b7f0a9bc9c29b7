"""The ``SingleAgentEpisode`` chunks :class:`~rlblocks.rllib.env_runner.VectorEnvRunner`
builds once per ``sample()`` from its per-step arrays: what one call collected
(:class:`Steps`), each sub-env's episode as of the last call (:class:`Lane`: its id, start
and lookback), and the chunk of an episode with its lookback buffers (:func:`episode_chunk`),
in the layout RLlib's learners and learner connectors take unchanged.

RLlib's ``SingleAgentEpisode`` constructor re-derives each buffer's space struct and
validates the lengths (``validate``, which flattens nested observations): about half of a
chunk's cost. :class:`EpisodeBuilder` sets the same attributes directly (the structs
derived once per runner); its first chunk is built both ways and compared attribute by
attribute, and a mismatch (another Ray's constructor) keeps the constructor for the run."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlblocks.nest import stack_rows, tree_map
from rlblocks.rllib._ray import (
    REWARDS_SPACE,
    WEIGHTS_SEQ_NO,
    InfiniteLookbackBuffer,
    SingleAgentEpisode,
    get_base_struct_from_space,
)

__all__ = [
    "EpisodeBuilder",
    "Lane",
    "StepArrays",
    "Steps",
    "episode_chunk",
    "lane_after",
    "rows",
]

logger = logging.getLogger(__name__)


def rows(struct: Any, index: Any) -> Any:
    """``x[index]`` of every array leaf of ``struct`` (in its structure)."""
    if isinstance(struct, np.ndarray):  # the common case, without the tree walk
        return struct[index]
    if type(struct) is dict and all(type(v) is np.ndarray for v in struct.values()):
        return {k: v[index] for k, v in struct.items()}  # a flat dict (a masked observation)
    return tree_map(lambda x: x[index], struct)


def concat(parts: list[Any]) -> Any:
    if all(isinstance(x, np.ndarray) for x in parts):
        return np.concatenate(parts, axis=0)
    return tree_map(lambda *xs: np.concatenate(xs, axis=0), *parts)


def lookback_buffer(data: Any, lookback: int, space: Any = None) -> Any:
    """A finalized (numpy) lookback buffer; RLlib's constructor measures nested data by its
    number of keys, so the lookback is set after."""
    buf = InfiniteLookbackBuffer(data=data, space=space)
    buf.lookback = lookback
    return buf


@dataclass
class Lane:
    """One sub-env's episode as of the end of the last ``sample()``: its id, where the
    current chunk starts, and the lookback (what ``SingleAgentEpisode.cut`` keeps)."""

    id_: str = field(default_factory=lambda: uuid.uuid4().hex)
    t_started: int = 0
    lookback: int = 0
    obs: Any = None  # the lookback observations before the current one, [L, ...]
    infos: list[dict] = field(default_factory=list)  # their infos
    actions: Any = None  # [L, ...]
    rewards: np.ndarray | None = None  # [L]
    extra: dict[str, Any] = field(default_factory=dict)  # [L, ...] each
    needs_reset: bool = False  # the last step ended the episode: the next one resets it
    start_time: float = field(default_factory=time.perf_counter)


@dataclass
class Steps:
    """What one ``sample()`` collected, per step (batched over the envs)."""

    first_obs: Any
    first_infos: list[dict]
    first_time: float
    obs: list[Any] = field(default_factory=list)  # O[0..K]
    infos: list[list[dict]] = field(default_factory=list)  # with each observation
    actions: list[Any] = field(default_factory=list)
    rewards: list[Any] = field(default_factory=list)
    terminated: list[Any] = field(default_factory=list)
    truncated: list[Any] = field(default_factory=list)
    extra: list[dict[str, Any]] = field(default_factory=list)
    real: list[np.ndarray] = field(default_factory=list)  # not an autoreset step, per env
    done_at: list[tuple[int, int]] = field(default_factory=list)  # (step, env) that ended
    times: list[float] = field(default_factory=list)  # when each observation arrived

    def __post_init__(self) -> None:
        self.obs.append(self.first_obs)
        self.infos.append(list(self.first_infos))
        self.times.append(self.first_time)

    def add(
        self,
        obs: Any,
        infos: Any,
        actions: Any,
        rewards: Any,
        terminated: Any,
        truncated: Any,
        extra: dict[str, Any],
        real: np.ndarray,
    ) -> None:
        self.obs.append(obs)
        self.infos.append(list(infos))
        self.actions.append(actions)
        self.rewards.append(rewards)
        self.terminated.append(terminated)
        self.truncated.append(truncated)
        self.extra.append(extra)
        self.real.append(real)
        self.times.append(time.perf_counter())

    def stacked(self) -> Any:
        """Every column as one array ``[K(+1), B, ...]`` (nested where the column is)."""

        def stack(items: list[Any]) -> Any:
            first = items[0]
            if isinstance(first, np.ndarray):
                return stack_rows(items)
            keys = first.keys() if type(first) is dict else None
            if (
                keys is not None
                and all(type(v) is np.ndarray for v in first.values())
                and all(type(item) is dict and item.keys() == keys for item in items)
            ):
                # a flat dict (a masked observation, the extra model outputs): per key,
                # without the tree walk over every step
                return {k: stack_rows([item[k] for item in items]) for k in keys}
            return tree_map(lambda *xs: stack_rows(xs), *items)

        return StepArrays(
            obs=stack(self.obs),
            actions=stack(self.actions),
            rewards=stack_rows(self.rewards),
            terminated=stack_rows(self.terminated).astype(bool),
            truncated=stack_rows(self.truncated).astype(bool),
            extra=stack(self.extra) if self.extra[0] else {},
        )


@dataclass
class StepArrays:
    """A :class:`Steps`' columns as arrays ``[K(+1), B, ...]``."""

    obs: Any
    actions: Any
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    extra: dict[str, Any]


def zero_rows(like: Any, n: int) -> Any:
    return tree_map(lambda x: np.zeros((n, *x.shape[1:]), x.dtype), like)


def lane_after(ep: Any, horizon: int) -> Lane:
    """The lane continuing ``ep``: what ``SingleAgentEpisode.cut(horizon)`` keeps."""
    steps = len(ep.rewards.data)  # lookback + this chunk's steps
    lb = min(horizon, steps)
    take = slice(steps - lb, steps)  # the observations before the last one, and the steps
    return Lane(
        id_=ep.id_,
        t_started=ep.t,
        lookback=lb,
        obs=rows(ep.observations.data, take),
        infos=list(ep.infos.data[take]),
        actions=rows(ep.actions.data, take),
        rewards=np.asarray(ep.rewards.data[take]),
        extra={k: rows(v.data, take) for k, v in ep.extra_model_outputs.items()},
        start_time=ep._start_time,
    )


@dataclass
class Chunk:
    """An episode chunk's columns, lookback included: observations and infos ``[L + n +
    1]``, actions, rewards and each extra model output ``[L + n]``, ``lookback`` = L."""

    obs: Any
    infos: list[dict]
    actions: Any
    rewards: np.ndarray
    extra: dict[str, Any]
    lookback: int


class EpisodeBuilder:
    """``SingleAgentEpisode`` chunks as RLlib's constructor builds them from finalized
    lookback buffers, without its per-call work (module docstring).

    Args:
        obs_space, act_space: The episodes' observation and action spaces.

    Attributes:
        direct: None until the first chunk, then whether the attributes are set directly
            (the first chunk built both ways was identical) or the constructor runs.
    """

    def __init__(self, obs_space: Any, act_space: Any) -> None:
        self.obs_space, self.act_space = obs_space, act_space
        self._structs = {
            "obs": get_base_struct_from_space(obs_space),
            "act": get_base_struct_from_space(act_space),
            "rewards": get_base_struct_from_space(REWARDS_SPACE),
            "none": get_base_struct_from_space(None),
        }
        self.direct: bool | None = None

    def __call__(
        self, id_: str, chunk: Chunk, terminated: bool, truncated: bool, t_started: int
    ) -> Any:
        """The episode ``id_`` holding ``chunk``, as ``SingleAgentEpisode(...)`` builds it."""
        if self.direct:
            return self._direct(id_, chunk, terminated, truncated, t_started)
        ep = self._constructed(id_, chunk, terminated, truncated, t_started)
        if self.direct is None:
            try:
                twin = self._direct(id_, chunk, terminated, truncated, t_started)
                self.direct = _same_episode(ep, twin)
            except (AttributeError, TypeError):  # another Ray's episode (slots, say)
                self.direct = False
            if not self.direct:
                logger.info("VectorEnvRunner builds episodes through RLlib's constructor")
        return ep

    def _constructed(
        self, id_: str, chunk: Chunk, terminated: bool, truncated: bool, t_started: int
    ) -> Any:
        lb = chunk.lookback
        return SingleAgentEpisode(
            id_=id_,
            observations=lookback_buffer(chunk.obs, lb),
            observation_space=self.obs_space,
            infos=InfiniteLookbackBuffer(data=chunk.infos, lookback=lb),
            actions=lookback_buffer(chunk.actions, lb),
            action_space=self.act_space,
            rewards=lookback_buffer(chunk.rewards, lb, REWARDS_SPACE),
            extra_model_outputs={k: lookback_buffer(v, lb) for k, v in chunk.extra.items()},
            terminated=terminated,
            truncated=truncated,
            t_started=t_started,
            len_lookback_buffer=lb,
        )

    def _buffer(self, data: Any, lookback: int, space: Any, struct: str) -> Any:
        buf = _new_buffer(InfiniteLookbackBuffer)
        vars(buf).update(
            data=data,
            lookback=lookback,
            finalized=not isinstance(data, list),
            _space=space,
            _space_struct=self._structs[struct],
        )
        return buf

    def _direct(
        self, id_: str, chunk: Chunk, terminated: bool, truncated: bool, t_started: int
    ) -> Any:
        lb = chunk.lookback
        rewards = self._buffer(chunk.rewards, lb, REWARDS_SPACE, "rewards")
        ep = _new_episode(SingleAgentEpisode)
        for name, value in dict(
            id_=id_,
            agent_id=None,
            module_id=None,
            multi_agent_episode_id=None,
            _observation_space=self.obs_space,
            observations=self._buffer(chunk.obs, lb, self.obs_space, "obs"),
            infos=self._buffer(chunk.infos, min(lb, len(chunk.infos)), None, "none"),
            _action_space=self.act_space,
            actions=self._buffer(chunk.actions, lb, self.act_space, "act"),
            rewards=rewards,
            is_terminated=terminated,
            is_truncated=truncated,
            extra_model_outputs={
                k: self._buffer(v, lb, None, "none") for k, v in chunk.extra.items()
            },
            t_started=t_started,
            t=max(len(chunk.rewards) - lb, 0) + t_started,
            _custom_data={},
            _start_time=None,
            _last_step_time=None,
            _last_added_observation=None,
            _last_added_infos=None,
        ).items():
            setattr(ep, name, value)  # RLlib's episode has slots
        return ep


_new_buffer = object.__new__
_new_episode = object.__new__


def _attributes(obj: Any) -> dict[str, Any]:
    """The attributes set on ``obj``: its ``__dict__``, or its slots (RLlib's episode)."""
    if hasattr(obj, "__dict__"):
        return dict(vars(obj))
    names = [n for cls in type(obj).__mro__ for n in getattr(cls, "__slots__", ())]
    return {n: getattr(obj, n) for n in names if hasattr(obj, n)}


def _same_buffer(a: Any, b: Any) -> bool:
    va, vb = _attributes(a), _attributes(b)
    if type(a) is not type(b) or va.keys() != vb.keys():
        return False
    return all(va[k] is vb[k] or (k != "data" and bool(va[k] == vb[k])) for k in va)


def _same_episode(a: Any, b: Any) -> bool:
    """Whether two episodes hold the same attributes (the same data objects, equal
    buffers' metadata)."""
    va, vb = _attributes(a), _attributes(b)
    if type(a) is not type(b) or va.keys() != vb.keys():
        return False
    for k, x in va.items():
        y = vb[k]
        if isinstance(x, InfiniteLookbackBuffer):
            if not _same_buffer(x, y):
                return False
        elif k == "extra_model_outputs":
            if x.keys() != y.keys() or not all(_same_buffer(x[j], y[j]) for j in x):
                return False
        elif not (x is y or x == y):
            return False
    return True


def episode_chunk(
    steps: Steps,
    cols: StepArrays,
    e: int,
    a: int,
    b: int,
    lane: Lane | None,
    is_done: bool,
    build: EpisodeBuilder,
    seq_no: np.ndarray,
) -> Any:
    """Env ``e``'s ``SingleAgentEpisode`` from observation ``a`` to ``b`` (steps
    ``a..b-1``) of ``steps`` (``cols``: its arrays), after ``lane``'s lookback (None: a
    fresh episode); ``build``: the runner's :class:`EpisodeBuilder`; ``seq_no``: the
    weights' sequence number of each step."""
    span = (slice(a, b), e)
    o = rows(cols.obs, (slice(a, b + 1), e))
    infos = [steps.infos[k][e] for k in range(a, b + 1)]
    ac = rows(cols.actions, span)
    rw = cols.rewards[span]
    ex = {key: rows(v, span) for key, v in cols.extra.items()}
    ex[WEIGHTS_SEQ_NO] = seq_no[a:b]
    lb = lane.lookback if lane is not None else 0
    if lane is not None and lb:
        o = concat([lane.obs, o])
        infos = lane.infos + infos
        ac = concat([lane.actions, ac])
        rw = np.concatenate([lane.rewards, rw])
        ex = {key: concat([lane.extra.get(key, zero_rows(v, lb)), v]) for key, v in ex.items()}
    ep = build(
        lane.id_ if lane is not None else uuid.uuid4().hex,
        Chunk(o, infos, ac, rw, ex, lb),
        bool(is_done and cols.terminated[b - 1, e]),
        bool(is_done and cols.truncated[b - 1, e]),
        lane.t_started if lane is not None else 0,
    )
    # RLlib's clock: the reset (the step before a, or the full reset), the last step
    ep._start_time = lane.start_time if lane is not None else steps.times[a]
    ep._last_step_time = steps.times[b]
    return ep
