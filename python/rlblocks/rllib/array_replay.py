"""RLlib's episode replay on rlblocks' C++ :class:`~rlblocks.replay.ReplayBuffer`.

RLlib's DQN and SAC (new API stack) keep sampled episode chunks in an episode replay buffer
and, per update, draw ``B`` n-step transitions as ``B`` new one-step ``SingleAgentEpisode``
objects, which the learner connector pipeline turns back into a train batch: a few Python
objects and pipeline passes per transition, most of an iteration's time. :class:`EpisodeArrayReplay`
stores the chunks' arrays in a :class:`~rlblocks.replay.ReplayBuffer` (one ring per sub-env,
n-step returns computed in C++) and hands out the train batch itself, in the columns RLlib's
DQN / SAC losses read (``obs``, ``new_obs``, ``actions``, ``rewards``, ``terminateds``,
``truncateds``, ``n_step``, ``weights``).

The semantics are RLlib's: uniform (``EpisodeReplayBuffer``) or proportional prioritized
(``PrioritizedEpisodeReplayBuffer``: priority ``max(|td|, 1e-12) ** alpha``, new steps at the
largest priority so far, importance weights ``(N P(i)) ** -beta`` over the largest possible
one); an n-step transition stops at its episode's end (``terminateds``: no bootstrap) and at
a truncation (bootstrapping from the final observation); ``capacity`` counts env steps. One
departure: at the newest steps of an episode still running, a transition has fewer than n
steps so far and is discounted by ``gamma ** k`` for the ``k`` steps it has (``n_step`` says
``k``); RLlib's ``EpisodeReplayBuffer`` slices the same ``k`` steps but reports ``n_step = n``,
so its learner bootstraps them with ``gamma ** n``.

Chunks carry no sub-env index, so the rings are assigned by episode: a chunk continuing an
episode goes to that episode's ring, a new episode takes a ring whose episode ended. There
are as many rings as sub-envs sample at once (``num_env_runners * num_envs_per_env_runner``);
a ring whose episode stopped arriving (its runner was recreated) is reclaimed when a new
episode finds no free one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlblocks.replay import ReplayBuffer

__all__ = ["EpisodeArrayReplay", "array_replay_refusal"]


def _prioritized(buffer_type: Any) -> bool | None:
    """Whether a ``replay_buffer_config["type"]`` is RLlib's prioritized episode buffer
    (True), its uniform one (False) or another buffer (None)."""
    from rlblocks.rllib import _ray

    for name, prioritized in (
        ("EpisodeReplayBuffer", False),
        ("PrioritizedEpisodeReplayBuffer", True),
    ):
        if buffer_type == name or buffer_type is getattr(_ray, name):
            return prioritized
    return None


#: The ``replay_buffer_config`` keys the arrays take. ``batch_size_B`` / ``batch_length_T``
#: are sequence-sampling sizes that RLlib's DQN / SAC sampling of n-step transitions does
#: not read either, and ``metrics_num_episodes_for_smoothing`` (which RLlib's algorithm
#: always sets) smooths the buffer's own ``replay_buffer`` metrics, which the arrays do not
#: report; any other key keeps RLlib's buffer, which reads it.
ARRAY_REPLAY_KEYS = frozenset(
    {
        "type",
        "capacity",
        "alpha",
        "beta",
        "batch_size_B",
        "batch_length_T",
        "metrics_num_episodes_for_smoothing",
    }
)


def array_replay_refusal(config: Any) -> str | None:
    """Why :class:`EpisodeArrayReplay` cannot stand in for the config's replay buffer (None:
    it can): another buffer type, a key of ``replay_buffer_config`` it does not honour, a
    range of n-steps, a recurrent (sequence-sampled) module or a multi-agent run."""
    buffer_config = config.replay_buffer_config or {}
    buffer_type = buffer_config.get("type")
    if _prioritized(buffer_type) is None:
        return f"replay buffer {buffer_type!r} (not RLlib's (Prioritized)EpisodeReplayBuffer)"
    others = sorted(set(buffer_config) - ARRAY_REPLAY_KEYS)
    if others:
        return f"replay_buffer_config key(s) {others} (the arrays take {sorted(ARRAY_REPLAY_KEYS)})"
    if not isinstance(config.n_step, int):
        return f"n_step={config.n_step!r} (a range of n-steps)"
    if config.is_multi_agent:
        return "a multi-agent run"
    if config.model_config.get("use_lstm") or config.model_config.get("use_attention"):
        return "a recurrent module (sequences are sampled)"
    return None


class EpisodeArrayReplay:
    """n-step transitions of RLlib episode chunks in a C++ ring buffer (module doc).

    Args:
        capacity: Env steps kept in all.
        num_rings: Sub-envs sampling at once (one ring each).
        n_step: Steps per return.
        gamma: Discount.
        prioritized: Proportional prioritized replay (RLlib's ``PrioritizedEpisodeReplayBuffer``).
        alpha: Priority exponent.
        seed: Seed of the sampling generator.

    Examples:
        >>> import numpy as np
        >>> from ray.rllib.env.single_agent_episode import SingleAgentEpisode
        >>> ep = SingleAgentEpisode(observations=[np.zeros(2, np.float32)])
        >>> for t in range(3):
        ...     ep.add_env_step(np.full(2, t + 1, np.float32), t % 2, 1.0, terminated=t == 2)
        >>> replay = EpisodeArrayReplay(100, num_rings=1, n_step=2, gamma=0.5, seed=0)
        >>> replay.add([ep.to_numpy()])
        >>> len(replay)
        3
        >>> batch = replay.sample(3)
        >>> sorted(batch)
        ['actions', 'n_step', 'new_obs', 'obs', 'rewards', 'terminateds', 'truncateds', 'weights']
    """

    def __init__(
        self,
        capacity: int,
        num_rings: int,
        n_step: int = 1,
        gamma: float = 0.99,
        *,
        prioritized: bool = False,
        alpha: float = 0.6,
        seed: int | None = None,
    ) -> None:
        self.num_rings = int(num_rings)
        self.capacity = max(int(capacity), 2 * self.num_rings)
        self.n_step, self.gamma = int(n_step), float(gamma)
        self.prioritized, self.alpha, self.seed = bool(prioritized), float(alpha), seed
        self._buffer: ReplayBuffer | None = None
        self._open: dict[str, int] = {}  # episode id -> ring, for episodes not done yet
        self._last_add: dict[str, int] = {}  # episode id -> the add() that last extended it
        self._adds = 0
        self._indices: np.ndarray | None = None  # of the last sample, for update_priorities

    @classmethod
    def for_config(cls, config: Any) -> EpisodeArrayReplay:
        """The replay a DQN / SAC ``AlgorithmConfig`` asks for (its ``replay_buffer_config``,
        ``n_step``, ``gamma``, ``seed``; one ring per sub-env of its env runners); see
        :func:`array_replay_refusal` first."""
        replay = config.replay_buffer_config
        return cls(
            replay.get("capacity", 50_000),
            max(1, config.num_env_runners) * config.num_envs_per_env_runner,
            config.n_step,
            config.gamma,
            prioritized=bool(_prioritized(replay["type"])),
            alpha=replay.get("alpha", 1.0),
            seed=config.seed,
        )

    def __len__(self) -> int:
        return 0 if self._buffer is None else len(self._buffer)

    @staticmethod
    def holds_arrays(episodes: Sequence[Any]) -> bool:
        """Whether the chunks' observations and actions are plain arrays (what the rings
        store): numpy episodes of a flattened (or Box) observation space."""
        for ep in episodes:
            if len(ep) and not (
                isinstance(ep.get_observations(0), np.ndarray)
                and isinstance(ep.get_actions(0), np.ndarray | np.generic | int | float)
            ):
                return False
        return True

    def _make_buffer(self, obs: np.ndarray, actions: np.ndarray) -> ReplayBuffer:
        return ReplayBuffer(
            self.capacity,
            self.num_rings,
            obs.shape[1:],
            obs.dtype,
            actions.shape[1:],
            actions.dtype,
            n_step=self.n_step,
            gamma=self.gamma,
            prioritized=self.prioritized,
            alpha=self.alpha,
            priority_eps=0.0,
            seed=self.seed,
        )

    def _ring_for(self, episode_id: str, free: list[int]) -> int:
        ring = self._open.pop(episode_id, None)
        if ring is not None:
            return ring
        if not free:  # an episode stopped arriving (its runner was recreated): reclaim its ring
            stale = min(self._open, key=self._last_add.__getitem__)
            free.append(self._open.pop(stale))
            del self._last_add[stale]
        return free.pop()

    def add(self, episodes: Sequence[Any]) -> None:
        """Stores the steps of numpy ``SingleAgentEpisode`` chunks (a ``sample()``'s result)."""
        chunks = [ep for ep in episodes if len(ep)]
        if not chunks:
            return
        self._adds += 1
        # continuing episodes first: the rings of those that end are free for the new ones
        chunks.sort(key=lambda ep: ep.id_ not in self._open)
        in_use = set(self._open.values())
        free = [r for r in range(self.num_rings - 1, -1, -1) if r not in in_use]
        per_ring: list[list[Any]] = [[] for _ in range(self.num_rings)]
        for ep in chunks:
            ring = self._ring_for(ep.id_, free)
            per_ring[ring].append(ep)
            if ep.is_done:
                self._last_add.pop(ep.id_, None)
                free.insert(0, ring)
            else:
                self._open[ep.id_] = ring
                self._last_add[ep.id_] = self._adds
        self._store(per_ring)

    def _store(self, per_ring: list[list[Any]]) -> None:
        """Adds each ring's chunks, in order, one step of every ring per buffer add."""
        steps = [sum(len(ep) for ep in eps) for eps in per_ring]
        horizon = max(steps)
        first = next(ep for eps in per_ring for ep in eps)
        obs0, act0 = first.get_observations(), first.get_actions()
        if self._buffer is None:
            self._buffer = self._make_buffer(obs0, act0)
        r = self.num_rings
        obs = np.zeros((r, horizon, *obs0.shape[1:]), obs0.dtype)
        final = np.zeros_like(obs)
        actions = np.zeros((r, horizon, *act0.shape[1:]), act0.dtype)
        rewards = np.zeros((r, horizon), np.float32)
        terminated = np.zeros((r, horizon), bool)
        truncated = np.zeros((r, horizon), bool)
        valid = np.zeros((r, horizon), bool)
        for ring, eps in enumerate(per_ring):
            t = 0
            for ep in eps:
                n = len(ep)
                o = ep.get_observations()
                obs[ring, t : t + n] = o[:n]
                actions[ring, t : t + n] = ep.get_actions()
                rewards[ring, t : t + n] = ep.get_rewards()
                valid[ring, t : t + n] = True
                t += n
                if ep.is_done:
                    final[ring, t - 1] = o[n]
                    terminated[ring, t - 1] = ep.is_terminated
                    truncated[ring, t - 1] = ep.is_truncated and not ep.is_terminated
        for t in range(horizon):
            self._buffer.add(
                obs[:, t],
                actions[:, t],
                rewards[:, t],
                terminated[:, t],
                truncated[:, t],
                final[:, t],
                valid[:, t],
            )

    def sample(self, batch_size: int, beta: float = 0.4) -> dict[str, np.ndarray]:
        """A train batch of ``batch_size`` n-step transitions in RLlib's columns.

        ``n_step`` is the number of steps summed, but ``n`` for a transition that ends its
        episode (``terminateds``): the losses multiply its bootstrap term by zero.
        ``truncateds`` is all False: a transition cut by a truncation bootstraps from the
        final observation (``new_obs``), as a running one does.
        """
        assert self._buffer is not None, "sample() before any add()"
        s = self._buffer.sample(batch_size, beta)
        self._indices = s.indices
        terminated = s.discounts == 0.0
        if 0.0 < self.gamma < 1.0:
            # the k of gamma ** k (the loss raises gamma to n_step)
            k = np.log(np.where(terminated, 1.0, s.discounts)) / math.log(self.gamma)
            n_step = np.where(terminated, self.n_step, np.rint(k)).astype(np.int64)
        else:
            n_step = np.full(batch_size, self.n_step, np.int64)
        return {
            "obs": s.obs,
            "new_obs": s.next_obs,
            "actions": s.actions,
            "rewards": s.rewards,
            "terminateds": terminated,
            "truncateds": np.zeros(batch_size, bool),
            "n_step": n_step,
            "weights": s.weights,
        }

    def update_priorities(self, td_errors: np.ndarray) -> None:
        """Priorities ``max(|td|, 1e-12) ** alpha`` for the last sample's transitions."""
        if not self.prioritized or self._buffer is None or self._indices is None:
            return
        td = np.abs(np.asarray(td_errors, np.float64).reshape(-1))
        if td.shape[0] != self._indices.shape[0]:
            raise ValueError(
                f"td_errors: expected {self._indices.shape[0]} (the last batch), got {td.shape[0]}"
            )
        self._buffer.update_priorities(self._indices, np.maximum(td, 1e-12))
        self._indices = None
