"""Env copies stepped in worker processes: :class:`WorkerVectorEnv`, a
:class:`~rlblocks.multiagent.envs.MultiAgentVectorEnv` whose copies live in ``num_workers``
forked processes (``num_env_workers`` of the multi-agent PPO config).

Worker ``w`` holds a contiguous share of the copies, ``lo <= e < hi``, and steps them with a
``MultiAgentVectorEnv`` of its own (the same step code as in process, its errors naming the
global copy index): its lanes are the contiguous rows ``lo * k`` to ``hi * k`` of every
policy (``k`` agents per copy). Per step the parent writes each policy's actions into
shared memory, sends each worker one message, and each worker writes its rows of the
rewards, the ``terminated`` / ``truncated`` / ``valid`` / ``starts`` / ``live`` flags and the
observations into shared memory in place: a ``Box`` union as it is, any other union (masks,
``OneOf`` blocks) as the policy's preprocessed rows, written by the C++ preprocessor straight
into shared memory (the runner then skips its own call: :class:`~rlblocks.wrappers.
vector_steps.Preprocessed`). Its one reply carries only what is rare or irregular: truncated
agents' final observations, finished episodes' returns, and the raw observations when
there is no preprocessor, or the rows would be refused (a value outside its space, a
non-finite value: the runner then refuses them with the in-process message). Shared memory
is anonymous ``mmap`` inherited through ``fork`` (nothing to unlink; POSIX only).

Seeds and checkpoints are those of the in-process env: copy ``e`` is reset with ``seed + e``
(the same first observations), :meth:`WorkerVectorEnv.snapshot` gathers every worker's
copies into the in-process layout, so a checkpoint resumes with or without workers.

Shutdown: :meth:`WorkerVectorEnv.close` (or the context manager, or garbage collection)
asks every worker to close its copies, then terminates what has not exited within a few
seconds; workers ignore Ctrl-C (the parent closes them) and exit by themselves when the
parent dies (their pipe closes, or the parent process changes).

Examples:
    >>> from rlblocks.envs.multiagent_zoo import parallel_env
    >>> with WorkerVectorEnv(parallel_env, num_envs=4, num_workers=2) as hub:
    ...     raw = hub.reset_lanes("shared", seed=0)
    ...     live = hub.live_lanes("shared")
    ...     out = hub.step({"shared": np.zeros(len(live), np.int64)})
    ...     bool((out["shared"].valid == live).all()), hub.num_workers
    (True, 2)
"""

from __future__ import annotations

import mmap
import multiprocessing as mp
import os
import pickle
import signal
import weakref
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np

from rlblocks.multiagent.envs import MultiAgentVectorEnv
from rlblocks.multiagent.turns import is_turn_based_env
from rlblocks.nest import tree_map
from rlblocks.wrappers.vector_steps import Preprocessed, StepResult

__all__ = ["WorkerVectorEnv"]

#: Seconds ``close`` waits for a worker to exit before terminating it.
CLOSE_WAIT_S = 5.0
#: Seconds between a waiting worker's checks that its parent is alive.
PARENT_CHECK_S = 1.0


def _shared(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A zeroed array in anonymous shared memory (inherited by forked workers)."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = mmap.mmap(-1, max(size, 1))
    return np.frombuffer(buf, dtype, int(np.prod(shape, dtype=np.int64))).reshape(shape)


def _array_layout(space: gym.Space, actions: bool) -> tuple[tuple[int, ...], Any] | None:
    """``(shape, dtype)`` of one value of ``space`` held in an array, None: sent pickled."""
    if isinstance(space, gym.spaces.Box):
        return tuple(space.shape), space.dtype
    if actions and isinstance(space, gym.spaces.Discrete):
        return (), np.int64
    if actions and isinstance(space, gym.spaces.MultiDiscrete):
        return tuple(space.shape), np.int64
    if actions and isinstance(space, gym.spaces.MultiBinary):
        return tuple(space.shape), space.dtype
    return None


class _Buffers:
    """One policy's shared arrays: flags, rewards, and (when they fit an array) union
    observations and actions."""

    FLAGS = ("terminated", "truncated", "valid", "starts", "live")

    def __init__(
        self, lanes: int, obs_space: gym.Space, action_space: gym.Space, preprocessor: Any
    ) -> None:
        self.flags = _shared((len(self.FLAGS), lanes), bool)
        self.rewards = _shared((lanes,), np.float32)
        obs = _array_layout(obs_space, actions=False)
        act = _array_layout(action_space, actions=True)
        self.obs = None if obs is None else _shared((lanes, *obs[0]), obs[1])
        self.actions = None if act is None else _shared((lanes, *act[0]), act[1])
        #: Not a Box: the preprocessor's rows (None: the raw values go through the pipe).
        self.preprocessor = None if obs is not None else preprocessor
        self.flat = (
            None if self.preprocessor is None else _shared((lanes, *preprocessor.shape), np.float32)
        )

    def write_obs(self, rows: slice, raw: Any) -> bool:
        """Writes a worker's rows of observations; False: they go through the pipe."""
        try:
            if self.obs is not None:
                self.obs[rows] = raw
                return True
            if self.flat is not None and self.preprocessor is not None:
                x = self.preprocessor.transform_batch(raw, out=self.flat[rows])
                return bool(np.isfinite(x).all())
        except ValueError:  # a value that does not fit: refused by the parent's runner
            pass
        return False


class _WorkerHub(MultiAgentVectorEnv):
    """A worker's share of the copies; remembers the episodes it finished for the parent."""

    finished: list[tuple[dict[Any, float], int]]
    last_raw: dict[str, Any]

    def record_episode(self, returns: dict[Any, float], length: int) -> None:
        """Also keeps the episode for the step's reply."""
        super().record_episode(returns, length)
        self.finished.append((dict(returns), length))


def _serve(
    conn: Connection,
    others: list[Connection],
    make: Callable[[], Any],
    lo: int,
    hi: int,
    hub_args: tuple[Any, ...],
    buffers: dict[str, _Buffers],
    envs: list[Any] | None,
    parent: int,
) -> None:
    """A worker's loop: builds its copies, then answers one message per command."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent closes the workers
    for other in others:  # the parent's ends: EOF reaches the workers when the parent dies
        other.close()
    hub: _WorkerHub | None = None
    try:
        mapping, one_hot, clip, name, smoothing = hub_args
        hub = _WorkerHub(
            make, hi - lo, mapping, one_hot, clip, name, smoothing, envs=envs, first_copy=lo
        )
        hub.finished, hub.last_raw = [], {}
        conn.send(("ok", None))
        while True:
            if not conn.poll(PARENT_CHECK_S):
                if os.getppid() != parent:
                    return
                continue
            cmd, arg = conn.recv()
            if cmd == "close":
                return
            try:
                conn.send(("ok", _command(hub, cmd, arg, lo, hi, buffers)))
            except Exception as err:  # the user's env may fail in any way
                conn.send(("error", _picklable(err)))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return
    except Exception as err:  # building the copies failed
        try:
            conn.send(("error", _picklable(err)))
        except (OSError, EOFError):
            pass
    finally:
        if hub is not None:
            hub.close()
        conn.close()


def _picklable(err: BaseException) -> BaseException:
    """``err`` if it pickles (raised again in the parent as it is), else a ValueError with
    its message."""
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:
        return ValueError(str(err))


def _command(
    hub: _WorkerHub, cmd: str, arg: Any, lo: int, hi: int, buffers: dict[str, _Buffers]
) -> Any:
    """Runs one command of the parent in a worker; its reply's payload."""
    if cmd == "step":
        actions = {}
        for pid, buf in buffers.items():
            k = len(hub.specs[pid].agents)
            own = arg[pid] if buf.actions is None else buf.actions[lo * k : hi * k].copy()
            actions[pid] = own
        hub.finished = []
        results = hub.step(actions)
        return _write(hub, results, lo, buffers), hub.finished
    if cmd == "reset":
        raw = {pid: hub.reset_lanes(pid, arg) for pid in hub.policy_ids}
        results = {
            pid: StepResult(raw[pid], None, None, None, {}, live=hub.live_lanes(pid))  # type: ignore[arg-type]
            for pid in raw
        }
        return _write(hub, results, lo, buffers, reset=True), []
    if cmd == "raw":  # the last observations of a policy, as the env gave them
        return hub.last_raw[arg]
    if cmd == "snapshot":
        return hub.snapshot()
    if cmd == "resume":
        hub.resume(arg)
        for pid, buf in buffers.items():
            k = len(hub.specs[pid].agents)
            buf.flags[4, lo * k : hi * k] = hub.live_lanes(pid)
        return None
    raise ValueError(f"unknown worker command {cmd!r}")


def _write(
    hub: _WorkerHub,
    results: dict[str, StepResult],
    lo: int,
    buffers: dict[str, _Buffers],
    reset: bool = False,
) -> tuple[dict[str, list[tuple[int, Any]]], dict[str, list[Any]]]:
    """Writes a worker's rows of ``results`` into shared memory; the finals (global lane,
    value) and the observations that are not in shared memory."""
    finals: dict[str, list[tuple[int, Any]]] = {}
    pickled: dict[str, list[Any]] = {}
    for pid, res in results.items():
        buf = buffers[pid]
        k = len(hub.specs[pid].agents)
        rows = slice(lo * k, lo * k + len(res.raw))
        hub.last_raw[pid] = res.raw
        if not buf.write_obs(rows, res.raw):
            pickled[pid] = res.raw
        if reset:
            buf.flags[:, rows] = False
            buf.flags[4, rows] = res.live
            continue
        buf.rewards[rows] = res.rewards
        for i, flag in enumerate((res.terminated, res.truncated, res.valid, res.starts, res.live)):
            buf.flags[i, rows] = flag
        assert res.finals is not None
        finals[pid] = [(lo * k + j, v) for j, v in enumerate(res.finals) if v is not None]
    return finals, pickled


class _Worker:
    """The parent's handle on one worker process."""

    def __init__(self, process: Any, conn: Connection, lo: int, hi: int) -> None:
        self.process, self.conn, self.lo, self.hi = process, conn, lo, hi


def _stop(workers: list[_Worker]) -> None:
    """Closes ``workers``: asks each to exit, terminates those that do not in time."""
    for w in workers:
        try:
            w.conn.send(("close", None))
        except (OSError, ValueError):
            pass
    for w in workers:
        w.process.join(CLOSE_WAIT_S)
        if w.process.is_alive():
            w.process.terminate()
            w.process.join(CLOSE_WAIT_S)
        if w.process.is_alive():  # pragma: no cover - a worker ignoring SIGTERM
            w.process.kill()
            w.process.join()
        w.conn.close()
    workers.clear()


class WorkerVectorEnv(MultiAgentVectorEnv):
    """``num_envs`` copies of a multi-agent env stepped in ``num_workers`` processes (module
    docstring); the same interface and results as :class:`MultiAgentVectorEnv`.

    Args:
        make: Builds one env (called in the workers, and once here for the spaces).
        num_envs: Env copies.
        num_workers: Worker processes, 1 to ``num_envs``; each steps a contiguous share.
        policy_mapping, agent_id_one_hot, clip_actions, name, smoothing: As
            :class:`MultiAgentVectorEnv`'s.
        envs: Env copies restored from a snapshot (each worker takes its share).
        preprocessor_for: ``(policy id, union observation space) -> Preprocessor`` (the
            policy's own): the workers write the preprocessed rows of unions that are not a
            ``Box``; None: their raw values are sent.

    Raises:
        ValueError: ``num_workers`` out of range, no ``fork`` on this platform, a turn-based
            env, or what building the copies raised in a worker.
    """

    def __init__(
        self,
        make: Callable[[], Any],
        num_envs: int,
        num_workers: int,
        policy_mapping: str = "shared",
        agent_id_one_hot: bool = False,
        clip_actions: bool = True,
        name: str = "env",
        smoothing: int = 100,
        envs: list[Any] | None = None,
        preprocessor_for: Callable[[str, gym.Space], Any] | None = None,
    ) -> None:
        if not 1 <= num_workers <= num_envs:
            raise ValueError(
                f"num_env_workers={num_workers}: each worker process steps at least one of "
                f"the {num_envs} env copies (num_envs); use 1 to {num_envs}, or 0 to step "
                "them in this process"
            )
        if "fork" not in mp.get_all_start_methods():
            raise ValueError(
                f"num_env_workers={num_workers}: env worker processes need fork, which this "
                "platform lacks; use num_env_workers=0"
            )
        self._workers: list[_Worker] = []
        first = envs[0] if envs else make()
        if is_turn_based_env(first):
            _close_env(first)
            raise ValueError(
                f"num_env_workers={num_workers}: env {name!r} is a turn-based game; its copies "
                "are stepped in the trainer's process (num_env_workers=0)"
            )
        hub_args = (policy_mapping, agent_id_one_hot, clip_actions, name, smoothing)
        # this process's one copy gives the spaces and the return statistics' keys
        super().__init__(make, 1, *hub_args, envs=[self._adapt(first)])
        self.num_envs = num_envs
        self._buffers = {
            pid: _Buffers(
                num_envs * len(s.agents),
                s.observation_space,
                s.action_space,
                None if preprocessor_for is None else preprocessor_for(pid, s.observation_space),
            )
            for pid, s in self.specs.items()
        }
        self._pending_raw: dict[str, Any] = {}
        bounds = np.linspace(0, num_envs, num_workers + 1).round().astype(int)
        ctx = mp.get_context("fork")
        parent_ends: list[Connection] = []
        try:
            for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
                ours, theirs = ctx.Pipe()
                parent_ends.append(ours)
                share = None if envs is None else list(envs[lo:hi])
                process = ctx.Process(
                    target=_serve,
                    args=(theirs, list(parent_ends), make, int(lo), int(hi), hub_args),
                    kwargs={"buffers": self._buffers, "envs": share, "parent": os.getpid()},
                    name=f"rlblocks-env-worker-{len(self._workers)}",
                    daemon=True,
                )
                process.start()
                theirs.close()
                self._workers.append(_Worker(process, ours, int(lo), int(hi)))
            self._finalizer = weakref.finalize(self, _stop, self._workers)
            self._gather()  # each worker built its copies
        except BaseException:
            _stop(self._workers)
            MultiAgentVectorEnv.close(self)
            raise
        MultiAgentVectorEnv.close(self)  # the spaces are known: this process steps no copy

    @property
    def num_workers(self) -> int:
        """The worker processes (0 once closed)."""
        return len(self._workers)

    # --- talking to the workers ---------------------------------------------------------------
    def _send(self, cmd: str, args: list[Any]) -> None:
        for w, arg in zip(self._workers, args, strict=True):
            try:
                w.conn.send((cmd, arg))
            except (OSError, ValueError):
                pass  # a dead worker: reported by _gather

    def _gather(self) -> list[Any]:
        """Every worker's reply (all are read before the first error is raised)."""
        return self._gather_some(range(len(self._workers)))

    def _gather_some(self, which: Iterable[int]) -> list[Any]:
        if not self._workers:
            raise ValueError(f"env {self.name!r}: its env worker processes are closed")
        replies, error = [], None
        for w in (self._workers[i] for i in which):
            try:
                kind, payload = w.conn.recv()
            except (EOFError, OSError):
                w.process.join(0.1)
                kind, payload = (
                    "error",
                    ValueError(
                        f"env {self.name!r}: the worker process of copies {w.lo} to {w.hi - 1} "
                        f"exited (exit code {w.process.exitcode})"
                    ),
                )
            if kind == "error" and error is None:
                error = payload
            replies.append(payload)
        if error is not None:
            raise error
        return replies

    def _call(self, cmd: str, args: list[Any]) -> list[Any]:
        self._send(cmd, args)
        return self._gather()

    # --- the MultiAgentVectorEnv interface ----------------------------------------------------
    def reset_lanes(self, policy_id: str, seed: int | None) -> list[Any]:
        """As :meth:`MultiAgentVectorEnv.reset_lanes` (copy ``e`` seeded with ``seed + e``)."""
        if policy_id not in self._pending_raw:
            seeds = [None if seed is None else seed + w.lo for w in self._workers]
            replies = self._call("reset", seeds)
            self._pending_raw = self._observations(replies)
        return self._pending_raw.pop(policy_id)  # type: ignore[no-any-return]

    def live_lanes(self, policy_id: str) -> np.ndarray:
        """Bool per lane of ``policy_id``: an agent is in it now."""
        return self._buffers[policy_id].flags[4].copy()

    def _observations(self, replies: list[Any]) -> dict[str, Any]:
        """Each policy's observations: its union values in one array, its preprocessed rows
        (every worker wrote shared memory), or a list of the union values."""
        out: dict[str, Any] = {}
        for pid, buf in self._buffers.items():
            sent = [reply[0][1].get(pid) for reply in replies]
            if all(v is None for v in sent):
                if buf.obs is not None:
                    out[pid] = buf.obs.copy()
                else:
                    assert buf.flat is not None  # no rows to write: the values were sent
                    out[pid] = Preprocessed(buf.flat.copy())
                continue
            k = len(self.specs[pid].agents)
            if buf.obs is None:  # some rows were not written: every worker's values
                missing = [i for i, v in enumerate(sent) if v is None]
                for i in missing:
                    self._workers[i].conn.send(("raw", pid))
                got = iter(self._gather_some(missing))
                sent = [next(got) if v is None else v for v in sent]
            values: list[Any] = []
            for w, own in zip(self._workers, sent, strict=True):
                values.extend(own if own is not None else buf.obs[w.lo * k : w.hi * k])  # type: ignore[index]
            out[pid] = values
        return out

    def step(self, actions: dict[str, Any]) -> dict[str, StepResult]:
        """As :meth:`MultiAgentVectorEnv.step`, the copies stepped in the workers.

        Raises:
            ValueError: The env fails (the in-process message), or a worker died.
        """
        args: list[dict[str, Any]] = [{} for _ in self._workers]
        for pid, buf in self._buffers.items():
            if buf.actions is not None:
                buf.actions[...] = np.asarray(actions[pid]).reshape(buf.actions.shape)
                continue
            k = len(self.specs[pid].agents)
            for arg, w in zip(args, self._workers, strict=True):
                rows = slice(w.lo * k, w.hi * k)
                arg[pid] = tree_map(lambda x, rows=rows: x[rows], actions[pid])
        replies = self._call("step", args)
        for _, finished in replies:
            for returns, length in finished:
                self.record_episode(returns, length)
        raw = self._observations(replies)
        out = {}
        for pid, buf in self._buffers.items():
            final: list[Any] = [None] * len(buf.rewards)
            for (finals, _), _ in replies:
                for lane, value in finals[pid]:
                    final[lane] = value
            terminated, truncated, valid, starts, live = buf.flags.copy()
            out[pid] = StepResult(
                raw[pid],
                buf.rewards.copy(),
                terminated,
                truncated,
                {"final_obs": final},
                valid,
                starts,
                live,
                final,
            )
        return out

    def snapshot(self) -> bytes | None:
        """Every worker's copies in :meth:`MultiAgentVectorEnv.snapshot`'s layout (None
        when a copy cannot be saved with its state)."""
        parts = self._call("snapshot", [None] * len(self._workers))
        if any(p is None for p in parts):
            return None
        data = [pickle.loads(p) for p in parts]
        merged: dict[str, Any] = {k: [] for k in ("envs", "obs", "live", "ep_returns")}
        for d in data:
            for key in merged:
                merged[key].extend(d[key])
        merged["ep_len"] = np.concatenate([np.asarray(d["ep_len"]) for d in data])
        return pickle.dumps(merged)

    def resume(self, data: dict[str, Any]) -> None:
        """Continues the episodes of a :meth:`snapshot` (each worker its share)."""
        shares = [
            {
                "obs": data["obs"][w.lo : w.hi],
                "live": data["live"][w.lo : w.hi],
                "ep_returns": data["ep_returns"][w.lo : w.hi],
                "ep_len": np.asarray(data["ep_len"])[w.lo : w.hi],
            }
            for w in self._workers
        ]
        self._call("resume", shares)
        self._pending_raw = {}

    def close(self) -> None:
        """Closes every worker (and its copies); idempotent."""
        if self._workers:
            self._finalizer.detach()
            _stop(self._workers)

    def __enter__(self) -> WorkerVectorEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _close_env(env: Any) -> None:
    close = getattr(env, "close", None)
    if close is not None:
        close()
