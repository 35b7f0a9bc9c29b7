"""Replay buffer for off-policy learning (DQN, SAC), stored and sampled in the C++ core.

:class:`ReplayBuffer` takes one step of ``num_envs`` vector envs per :meth:`~ReplayBuffer.add`
and returns batches of transitions with n-step returns (:class:`ReplaySample`).

* **Storage.** ``capacity`` is split over the envs: each env owns a ring of
  ``capacity // num_envs`` entries, allocated once (``capacity`` reports the total used);
  when a ring is full its oldest entries are overwritten. An add stores, per env, the step
  (``obs``, action, reward, terminated / truncated) and, for an env whose episode ended at
  that step, one more entry with its final observation ``next_obs[e]`` (not sampled itself).
* **n-step returns at sample time.** A sampled step t gives ``rewards = sum_{i<k} gamma^i
  r_{t+i}`` and ``next_obs = o_{t+k}``, where k stops early at the step that terminated
  (``discounts = 0``) or was truncated (``discounts = gamma^k``, bootstrapping from the stored
  final observation), and at the env's newest step (k < n until the later steps are added).
  A transition never crosses an episode end. ``terminated`` wins when both flags are set.
* **Frame-once storage** (``frame_stack=k``): observations are stacks of k frames on
  ``stack_axis`` (0: ``(k, H, W)``, -1: ``(H, W, k)``) whose oldest frames are the previous
  steps' newest ones, as :class:`rlblocks.framestack.FrameStacker` makes them. Only the
  newest frame of each step is stored; stacks are assembled at sample time, and before an
  episode's first step its first frame repeats (a reset fills the stack with it). A step
  whose earlier frames were overwritten is no longer sampled. An Atari step (4x84x84 uint8)
  costs ~7.09 KB instead of SB3's 28 KB.
* **Prioritized** (``prioritized=True``): proportional prioritization on a sum tree with
  stratified sampling (sample i draws from the i-th of ``batch_size`` equal slices of the
  total priority). A new step gets the largest ``(p + priority_eps) ** alpha`` set so far
  (1 at first); :meth:`~ReplayBuffer.update_priorities` sets ``(p + priority_eps) ** alpha``.
  ``alpha`` lies in [0, ``MAX_ALPHA`` = 10], and ``(p + priority_eps) ** alpha`` must stay
  <= 2**960 (``MAX_LEAF``, so that the tree's sum over any capacity is finite): a priority
  beyond that is refused with a message naming it, alpha and the largest priority allowed.
  Importance weights are ``(N * P(i)) ** -beta`` divided by the largest weight any
  sampleable step could get, ``(N * min_j P(j)) ** -beta`` (a min tree; RLlib's choice),
  computed in log space as ``(leaf_i / min_leaf) ** -beta``, so they lie in (0, 1]; a weight
  below float32's smallest normal number (1.2e-38) is raised to it. Uniform buffers return
  weights of 1.
* **Frame stacks are checked.** An add whose stack's older frames are not the frames the
  buffer holds for the env's previous steps (or, at an episode's first step, its first
  frame) is refused with a ValueError naming the env and the frame: storing only the newest
  frame would otherwise return other observations than the ones added.
* **Sizes.** ``frame_stack=k > 1`` needs ``capacity // num_envs >= k + 1`` (else no step
  ever becomes sampleable), and a buffer whose storage (:func:`replay_bytes`: frames,
  actions, rewards, flags, offsets, counts and trees) exceeds this machine's memory is
  refused with the bytes it needs against the memory. :meth:`~ReplayBuffer.load_state_dict`
  checks every invariant of the state before accepting it (counts, never-written slots, the
  episode structure of the flags, offsets, sample bits, leaves against ``max_leaf``).
* **Randomness** comes from a numpy ``Generator`` seeded by ``seed``; its uniform numbers
  are handed to the kernels, so the native buffer and its numpy twin
  (``RLBLOCKS_IMPL=numpy``, :mod:`rlblocks._reference.replay`) sample the same batches bit
  for bit. :meth:`~ReplayBuffer.state_dict` holds the storage and the generator's state.

Copies and stack assembly run in C++ with the GIL released, split over
:func:`rlblocks.set_num_threads` threads for large batches.

Examples:
    >>> import numpy as np
    >>> from rlblocks.replay import ReplayBuffer
    >>> rb = ReplayBuffer(8, num_envs=1, obs_shape=(1,), obs_dtype=np.float32, n_step=2,
    ...                   gamma=0.5, seed=0)
    >>> for t in range(3):
    ...     o = np.array([[t]], np.float32)
    ...     rb.add(o, [t], [1.0], [t == 2], [False], o + 1)
    >>> len(rb)  # steps 0, 1, 2 (step 2 terminated; its final observation is stored)
    3
    >>> seen = set()  # (obs, n-step reward, discount) of the steps drawn
    >>> for _ in range(20):
    ...     s = rb.sample(3)  # with replacement
    ...     seen |= set(zip(s.obs[:, 0].tolist(), s.rewards.tolist(), s.discounts.tolist()))
    >>> sorted(seen)
    [(0.0, 1.5, 0.25), (1.0, 1.5, 0.0), (2.0, 1.0, 0.0)]
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from rlblocks import _core, _impl
from rlblocks._reference import replay as _ref
from rlblocks._reference import replay_checks as _chk

__all__ = ["MAX_ALPHA", "MAX_LEAF", "ReplayBuffer", "ReplaySample", "replay_bytes"]

#: The largest priority exponent ``alpha``: beyond it ``(p + eps) ** alpha`` leaves float64's
#: range for ordinary priorities (and the importance weights underflow).
MAX_ALPHA = 10.0
#: The largest tree leaf ``(p + priority_eps) ** alpha`` (2**960).
MAX_LEAF = _chk.MAX_LEAF
_TINY32 = float(np.finfo(np.float32).tiny)


class ReplaySample(NamedTuple):
    """A batch of B transitions (see :class:`ReplayBuffer` for the semantics)."""

    obs: np.ndarray  #: [B, *obs_shape], stacks assembled
    actions: np.ndarray  #: [B, *action_shape]
    rewards: np.ndarray  #: [B] float32, sum_{i<k} gamma^i r_{t+i}
    next_obs: np.ndarray  #: [B, *obs_shape], o_{t+k}
    discounts: np.ndarray  #: [B] float32, gamma^k, or 0 after a terminal step
    weights: np.ndarray  #: [B] float32 importance weights (ones when uniform)
    indices: np.ndarray  #: [B] int64, for update_priorities


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValueError(f"{name}: expected an int, got {value!r}")
    return int(value)


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name}: expected a bool, got {value!r}")
    return bool(value)


def _real(value: Any, name: str, lo: float, hi: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name}: expected a number in [{lo}, {hi}], got {value!r}")
    v = float(value)
    if not (math.isfinite(v) and lo <= v <= hi):
        raise ValueError(f"{name}: expected a number in [{lo}, {hi}], got {value!r}")
    return v


def replay_bytes(
    capacity: int,
    num_envs: int,
    obs_shape: tuple[int, ...],
    obs_dtype: Any,
    action_shape: tuple[int, ...] = (),
    action_dtype: Any = np.int64,
    *,
    frame_stack: int = 0,
    stack_axis: int = -1,
    prioritized: bool = False,
) -> int:
    """Bytes a :class:`ReplayBuffer` of these settings allocates: frames, actions, rewards,
    flags, offsets, counts and the sum (+ min) trees; it equals the buffer's ``nbytes``.

    The buffer refuses settings whose bytes exceed this machine's memory; this computes
    them without allocating anything (e.g. to check a trainer's ``replay_capacity``).

    Raises:
        ValueError: An invalid setting, naming it (as :class:`ReplayBuffer` does).

    Examples:
        >>> import numpy as np
        >>> replay_bytes(1000, 1, (4,), np.float32)  # 16 + 8 + 6 per step, 16 per tree leaf
        46392
    """
    s = _chk.settings(
        capacity,
        num_envs,
        obs_shape,
        obs_dtype,
        action_shape,
        action_dtype,
        1,
        0.99,
        frame_stack,
        stack_axis,
        bool(prioritized),
    )
    return s.storage()["total"]


class ReplayBuffer:
    """Transitions of ``num_envs`` vector envs, sampled with n-step returns.

    Args:
        capacity: Steps kept in all (>= 2 * num_envs); each env keeps ``capacity // num_envs``.
        num_envs: Envs per :meth:`add` (the leading dimension of its arrays).
        obs_shape: One observation's shape (a stack of ``frame_stack`` frames if stacking).
        obs_dtype: Observation dtype (bool/int/uint/float).
        action_shape: One action's shape (``()`` for discrete actions).
        action_dtype: Action dtype.
        n_step: Steps per return (>= 1).
        gamma: Discount in [0, 1].
        frame_stack: 0 (observations stored whole) or k, the frames per stack on ``stack_axis``.
        stack_axis: 0 (``(k, H, W)``) or -1 (``(H, W, k)``).
        prioritized: Proportional prioritized replay instead of uniform.
        alpha: Priority exponent in [0, ``MAX_ALPHA`` = 10], prioritized only.
        priority_eps: Added to every priority before the exponent (>= 0).
        seed: Seed of the sampling generator.

    Raises:
        ValueError: An invalid setting, naming it.

    Examples:
        >>> import numpy as np
        >>> rb = ReplayBuffer(1000, 2, (4, 84, 84), np.uint8, frame_stack=4, stack_axis=0)
        >>> rb.capacity, rb.bytes_per_step < 7100
        (1000, True)
    """

    def __init__(
        self,
        capacity: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        obs_dtype: Any,
        action_shape: tuple[int, ...] = (),
        action_dtype: Any = np.int64,
        *,
        n_step: int = 1,
        gamma: float = 0.99,
        frame_stack: int = 0,
        stack_axis: int = -1,
        prioritized: bool = False,
        alpha: float = 0.6,
        priority_eps: float = 1e-6,
        seed: int | None = None,
    ) -> None:
        g = _real(gamma, "gamma", 0.0, 1.0)
        self._alpha = _real(alpha, "alpha", 0.0, MAX_ALPHA)
        self._eps = _real(priority_eps, "priority_eps", 0.0)
        if seed is not None:
            _int(seed, "seed")
        args = (capacity, num_envs, obs_shape, obs_dtype, action_shape, action_dtype, n_step, g)
        rest = (frame_stack, stack_axis, _bool(prioritized, "prioritized"))
        if _impl.native():
            self._impl: Any = _core.ReplayCore(*args, *rest)
        else:
            self._impl = _ref.ReplayCore(*args, *rest)
        self._rng = np.random.default_rng(seed)

    @property
    def native(self) -> bool:
        """Whether this buffer runs on the C++ core (else the numpy twin)."""
        return isinstance(self._impl, _core.ReplayCore)

    @property
    def storage(self) -> Any:
        """The storage core (``rlblocks._core.ReplayCore`` or its numpy twin), for samplers
        that read it (:mod:`rlblocks.her`)."""
        return self._impl

    def uniforms(self, n: int) -> np.ndarray:
        """``n`` uniform numbers in [0, 1) from the buffer's generator (part of its state)."""
        return self._rng.random(n)

    @property
    def capacity(self) -> int:
        """Steps kept in all: ``num_envs * (capacity // num_envs)``."""
        return int(self._impl.capacity)

    @property
    def num_envs(self) -> int:
        return int(self._impl.num_envs)

    @property
    def prioritized(self) -> bool:
        return bool(self._impl.prioritized)

    @property
    def nbytes(self) -> int:
        """Bytes of all preallocated storage (frames, actions, rewards, flags, trees)."""
        return int(self._impl.nbytes)

    @property
    def bytes_per_step(self) -> float:
        """``nbytes / capacity``."""
        return self.nbytes / self.capacity

    def __len__(self) -> int:
        """Transitions that can be sampled now."""
        return len(self._impl)

    def add(
        self,
        obs: Any,
        actions: Any,
        rewards: Any,
        terminated: Any,
        truncated: Any,
        next_obs: Any,
        valid: Any = None,
    ) -> None:
        """Stores one step of every env (leading dimension ``num_envs`` everywhere).

        ``next_obs[e]`` is read only for envs whose episode ended at this step (terminated or
        truncated): it is the final observation and is stored too. For the others the next
        add's ``obs`` is their next observation. ``valid`` (a bool per env; None: all) skips
        the envs whose step is not a transition, e.g. the reset step of a vector env with
        next-step autoreset (its action is ignored and its observation starts an episode).

        Observations are cast to ``obs_dtype`` when numpy calls the cast "safe" (integer and
        bool buffers: no wrap-around) or, for float buffers, "same_kind" (e.g. float64 into
        float32); actions under "same_kind"; rewards of any int or float dtype to float32.

        Raises:
            ValueError: A wrong shape or dtype (naming the argument; nothing is stored).
        """
        self._impl.add(obs, actions, rewards, terminated, truncated, next_obs, valid)

    def sample(
        self, batch_size: int, beta: float = 0.4, *, out: ReplaySample | None = None
    ) -> ReplaySample:
        """Draws ``batch_size`` transitions (with replacement).

        Args:
            batch_size: 1 <= batch_size <= len(self).
            beta: Importance-weight exponent (prioritized only), >= 0.
            out: A :class:`ReplaySample` of this batch size (e.g. an earlier result) to write
                into instead of allocating new arrays: it is returned, overwritten. Reusing
                it skips the allocation and its page faults (most of the time of a fresh
                Atari batch).

        Raises:
            ValueError: A batch larger than the sampleable steps, a bad beta or ``out``.

        Examples:
            >>> import numpy as np
            >>> rb = ReplayBuffer(8, 1, (2,), np.float32, seed=0)
            >>> for t in range(4):
            ...     o = np.full((1, 2), t, np.float32)
            ...     rb.add(o, [t], [1.0], [False], [False], o)
            >>> batch = rb.sample(2)
            >>> rb.sample(2, out=batch) is batch
            True
        """
        b = _int(batch_size, "batch_size")
        n = len(self)
        if not 1 <= b <= n:
            raise ValueError(
                f"batch_size: expected 1 <= batch_size <= {n} (the sampleable steps, "
                f"len(buffer)), got {b}"
            )
        be = _real(beta, "beta", 0.0)
        if out is not None:
            w = getattr(out, "weights", None)
            if not (
                isinstance(out, ReplaySample)
                and isinstance(w, np.ndarray)
                and w.dtype == np.float32
                and w.shape == (b,)
                and w.flags.writeable
            ):
                raise ValueError(
                    f"out: expected a ReplaySample of batch size {b} (writeable arrays), "
                    f"got {type(out).__name__}"
                )
        if out is None:
            out = self._new_batch(b)
        u = self._rng.random(b)
        arrays = out[:5] + (out.indices,)
        obs, actions, rewards, next_obs, discounts, indices, leaves, N, min_leaf = (
            self._impl.sample(u, arrays)
        )
        if self.prioritized:
            # (N P_i)^-b / (N P_min)^-b = (leaf_i / min_leaf)^-b: no total, no overflow
            w = np.exp(-be * (np.log(leaves) - math.log(min_leaf)))
            weights = np.maximum(w, _TINY32).astype(np.float32)
        else:
            weights = np.ones(b, np.float32)
        out.weights[...] = weights
        return out

    def _new_batch(self, b: int) -> ReplaySample:
        """Fresh arrays for a batch of b, views of ONE allocation: a single block, once
        freed, is reused by the next batch without being handed back to the OS (separate
        ~1 MB arrays are, and page-faulting them in again cost most of a sample)."""
        i = self._impl
        specs = [
            (np.dtype(i.obs_dtype), (b, *i.obs_shape)),
            (np.dtype(i.action_dtype), (b, *i.action_shape)),
            (np.dtype(np.float32), (b,)),
            (np.dtype(i.obs_dtype), (b, *i.obs_shape)),
            (np.dtype(np.float32), (b,)),
            (np.dtype(np.float32), (b,)),
            (np.dtype(np.int64), (b,)),
        ]
        offsets, total = [], 0
        for dt, shape in specs:
            offsets.append(total)
            total += -(-int(np.prod(shape, dtype=np.int64)) * dt.itemsize // 64) * 64
        block = np.empty(total, np.uint8)
        views = [
            block[o : o + int(np.prod(shape, dtype=np.int64)) * dt.itemsize].view(dt).reshape(shape)
            for o, (dt, shape) in zip(offsets, specs, strict=True)
        ]
        return ReplaySample(*views)

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Sets the priorities of sampled steps (e.g. their |TD error|).

        Args:
            indices: ``ReplaySample.indices`` (or a subset).
            priorities: Finite values >= 0, one per index, with ``(p + priority_eps) ** alpha
                <= 2**960``.

        Raises:
            ValueError: A uniform buffer, NaN / inf / negative priorities, a priority whose
                ``(p + priority_eps) ** alpha`` exceeds 2**960 (naming it, alpha and the
                largest priority allowed), or indices that are out of range or no longer
                sampleable (nothing is changed).
        """
        if not self.prioritized:
            raise ValueError("update_priorities: this buffer is uniform (prioritized=False)")
        try:
            p = np.asarray(priorities)
        except (TypeError, ValueError) as err:
            raise ValueError(f"priorities: expected a 1-d real array, got {priorities!r}") from err
        if p.dtype.kind not in "fiu" or p.ndim != 1:
            raise ValueError(
                f"priorities: expected a 1-d real array, got {p.dtype} array of shape {p.shape}"
            )
        p = p.astype(np.float64)
        bad = np.flatnonzero(~(np.isfinite(p) & (p >= 0.0)))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"priorities[{i}] = {float(p[i])!r}: expected a finite value >= 0")
        with np.errstate(over="ignore"):
            leaves = np.power(p + self._eps, self._alpha)
        bad = np.flatnonzero(~(leaves <= MAX_LEAF))
        if bad.size:
            i = int(bad[0])
            a = self._alpha
            limit = 2.0 ** (960.0 / a) - self._eps
            raise ValueError(
                f"priorities[{i}] = {float(p[i])!r}: (priority + priority_eps) ** alpha = "
                f"({float(p[i])!r} + {self._eps!r}) ** {a!r} exceeds 2**960, the largest priority "
                f"weight the sum tree holds; with alpha={a!r} priorities must be <= {limit:.6g}"
            )
        self._impl.set_leaves(indices, leaves)

    def _config(self) -> dict[str, Any]:
        i = self._impl
        return {
            "capacity": int(i.capacity),
            "num_envs": int(i.num_envs),
            "obs_shape": tuple(int(d) for d in i.obs_shape),
            "obs_dtype": str(np.dtype(i.obs_dtype)),
            "action_shape": tuple(int(d) for d in i.action_shape),
            "action_dtype": str(np.dtype(i.action_dtype)),
            "n_step": int(i.n_step),
            "gamma": float(i.gamma),
            "frame_stack": int(i.frame_stack),
            "stack_axis": int(i.stack_axis),
            "prioritized": bool(i.prioritized),
            "alpha": self._alpha,
            "priority_eps": self._eps,
        }

    def state_dict(self) -> dict[str, Any]:
        """The storage (numpy arrays), the settings and the sampling generator's state."""
        state = dict(self._impl.get_state())
        state["config"] = self._config()
        state["rng"] = self._rng.bit_generator.state
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` of a buffer with the same settings, exactly.

        Raises:
            ValueError: Other settings, missing / malformed arrays, or a state that breaks an
                invariant of the buffer (counts, flags, offsets, sample bits, leaves), naming
                the field (nothing is changed).
        """
        if not isinstance(state, dict) or "config" not in state or "rng" not in state:
            raise ValueError("state: expected a dict from ReplayBuffer.state_dict()")
        mine = self._config()
        if not isinstance(state["config"], dict):
            raise ValueError("state['config']: expected a dict from ReplayBuffer.state_dict()")
        theirs = dict(state["config"])
        for key, value in mine.items():
            other = theirs.get(key)
            if isinstance(value, tuple) and other is not None:
                other = tuple(other)
            if other != value:
                raise ValueError(
                    f"state['config']['{key}']: this buffer has {value!r}, got {other!r}"
                )
        rng = np.random.default_rng()
        try:
            rng.bit_generator.state = state["rng"]
        except (TypeError, ValueError, KeyError) as err:
            raise ValueError(f"state['rng']: not a numpy PCG64 state ({err})") from err
        self._impl.set_state(state)
        self._rng = rng
