"""The ``SingleAgentEpisode`` chunks :class:`~rlblocks.rllib.env_runner.VectorEnvRunner`
builds once per ``sample()`` from its per-step arrays: what one call collected
(:class:`Steps`), each sub-env's episode as of the last call (:class:`Lane`: its id, start
and lookback), and the chunk of an episode with its lookback buffers (:func:`episode_chunk`),
in the layout RLlib's learners and learner connectors take unchanged."""

from __future__ import annotations

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
)

__all__ = ["Lane", "StepArrays", "Steps", "episode_chunk", "lane_after", "rows"]


def rows(struct: Any, index: Any) -> Any:
    if isinstance(struct, np.ndarray):  # the common case, without the tree walk
        return struct[index]
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
            if isinstance(items[0], np.ndarray):
                return stack_rows(items)
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


def episode_chunk(
    steps: Steps,
    cols: StepArrays,
    e: int,
    a: int,
    b: int,
    lane: Lane | None,
    is_done: bool,
    spaces: tuple[Any, Any],
    seq_no: np.ndarray,
) -> Any:
    """Env ``e``'s ``SingleAgentEpisode`` from observation ``a`` to ``b`` (steps
    ``a..b-1``) of ``steps`` (``cols``: its arrays), after ``lane``'s lookback (None: a
    fresh episode); ``spaces``: the episode's observation and action spaces; ``seq_no``:
    the weights' sequence number of each step."""
    obs_space, act_space = spaces
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
    ep = SingleAgentEpisode(
        id_=lane.id_ if lane is not None else None,
        observations=lookback_buffer(o, lb),
        observation_space=obs_space,
        infos=InfiniteLookbackBuffer(data=infos, lookback=lb),
        actions=lookback_buffer(ac, lb),
        action_space=act_space,
        rewards=lookback_buffer(rw, lb, REWARDS_SPACE),
        extra_model_outputs={key: lookback_buffer(v, lb) for key, v in ex.items()},
        terminated=bool(is_done and cols.terminated[b - 1, e]),
        truncated=bool(is_done and cols.truncated[b - 1, e]),
        t_started=lane.t_started if lane is not None else 0,
        len_lookback_buffer=lb,
    )
    # RLlib's clock: the reset (the step before a, or the full reset), the last step
    ep._start_time = lane.start_time if lane is not None else steps.times[a]
    ep._last_step_time = steps.times[b]
    return ep
