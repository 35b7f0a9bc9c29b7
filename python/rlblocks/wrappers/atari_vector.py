"""Atari for vector envs: batched preprocessing of any vector env's frames, and a vector env
dedicated to the DeepMind pipeline.

:class:`VectorAtariPreprocessing` (WarpFrame + FrameStack) and :class:`VectorGenericPixel`
(RLlib's ``preprocessor_pref="rllib"`` pipeline) wrap a gymnasium vector env and process
every sub-env's frame in one batched C++ call; the frame stacks restart correctly under
every autoreset mode.

:class:`AtariVectorEnv` runs ``wrap_deepmind`` (up to WarpFrame) over
:func:`~rlblocks.wrappers.atari_env.make_atari_env` sub-envs, split over worker processes
(ALE's ``act`` holds the GIL, so threads would not overlap) and the calling process, which
steps its own share while the workers step theirs. Each sub-env writes its warped
``(dim, dim, 1)`` frame and a few scalars straight into shared memory; a step is one byte
down and one byte back per worker. The frame stacks are kept in the calling process.

Semantics are those of ``make_vector_env(..., vectorization_mode="sync")`` with the
DeepMind pipeline: every sub-env is ``wrap_deepmind(env, dim, framestack=False,
noframeskip)`` (episode statistics, NoopReset(30), MaxAndSkip(4) when ``noframeskip``,
EpisodicLife, FireReset where the game has FIRE, WarpFrame), the stacks hold the last
``framestack`` frames oldest first, and sub-envs autoreset like gymnasium's default
(``NEXT_STEP``: the step after a sub-env finished resets it, returning its reset frame with
reward 0 and both flags False, and its stack restarts from that frame).
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space

from rlblocks import image
from rlblocks.framestack import FrameStacker
from rlblocks.wrappers.atari import push_frame, wrap_deepmind
from rlblocks.wrappers.atari_env import make_atari_env

__all__ = ["AtariVectorEnv", "VectorAtariPreprocessing", "VectorGenericPixel"]

_INFO_INT = ("lives", "episode_frame_number", "frame_number")


class _Shared:
    """Per-sub-env slots in shared memory (views over ``RawArray`` s)."""

    def __init__(self, raw: dict[str, Any], num_envs: int, dim: int) -> None:
        self.raw = raw

        def view(name: str, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
            return np.frombuffer(raw[name], dtype=dtype).reshape(shape)

        self.obs = view("obs", np.uint8, (num_envs, dim, dim, 1))
        self.actions = view("actions", np.int64, (num_envs,))
        self.reward = view("reward", np.float64, (num_envs,))
        self.flags = view("flags", np.uint8, (num_envs, 4))  # terminated, truncated, reset, ep
        self.ints = view("ints", np.int64, (num_envs, len(_INFO_INT)))
        self.episode = view("episode", np.float64, (num_envs, 3))  # r, l, t

    @staticmethod
    def allocate(ctx: Any, num_envs: int, dim: int) -> dict[str, Any]:
        sizes = {
            "obs": ("B", num_envs * dim * dim),
            "actions": ("q", num_envs),
            "reward": ("d", num_envs),
            "flags": ("B", num_envs * 4),
            "ints": ("q", num_envs * len(_INFO_INT)),
            "episode": ("d", num_envs * 3),
        }
        return {k: ctx.RawArray(t, n) for k, (t, n) in sizes.items()}


class _EnvFactory:
    """Picklable: one DeepMind sub-env up to WarpFrame."""

    def __init__(
        self, env_id: str, dim: int, noframeskip: bool, make_kwargs: dict[str, Any]
    ) -> None:
        self.env_id, self.dim, self.noframeskip = env_id, dim, noframeskip
        self.make_kwargs = make_kwargs

    def __call__(self) -> gym.Env:
        return wrap_deepmind(
            make_atari_env(self.env_id, **self.make_kwargs),
            self.dim,
            framestack=False,
            noframeskip=self.noframeskip,
        )


class _Group:
    """The sub-envs ``first .. first + len(envs) - 1``, stepped in this process."""

    def __init__(self, factory: _EnvFactory, first: int, count: int, shared: _Shared) -> None:
        self.first, self.shared = first, shared
        self.envs = [factory() for _ in range(count)]
        self.needs_reset = [True] * count

    def _write(
        self,
        i: int,
        obs: np.ndarray,
        reward: float,
        terminated: bool,
        truncated: bool,
        reset: bool,
        info: Mapping[str, Any],
    ) -> None:
        s, g = self.shared, self.first + i
        s.obs[g] = obs
        s.reward[g] = reward
        ep = info.get("episode")
        s.flags[g] = (terminated, truncated, reset, ep is not None)
        s.ints[g] = [int(info.get(k, 0)) for k in _INFO_INT]
        if ep is not None:
            s.episode[g] = (float(ep["r"]), float(ep["l"]), float(ep["t"]))
        self.needs_reset[i] = terminated or truncated

    def reset(self, seeds: Sequence[int | None]) -> None:
        for i, env in enumerate(self.envs):
            obs, info = env.reset(seed=seeds[i])
            self._write(i, obs, 0.0, False, False, True, info)

    def step(self) -> None:
        actions = self.shared.actions
        for i, env in enumerate(self.envs):
            if self.needs_reset[i]:
                obs, info = env.reset()
                self._write(i, obs, 0.0, False, False, True, info)
            else:
                obs, reward, terminated, truncated, info = env.step(int(actions[self.first + i]))
                self._write(i, obs, float(reward), bool(terminated), bool(truncated), False, info)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _worker(
    conn: Any,
    factory: _EnvFactory,
    first: int,
    count: int,
    raw: dict[str, Any],
    num_envs: int,
    dim: int,
) -> None:
    group = None
    try:
        group = _Group(factory, first, count, _Shared(raw, num_envs, dim))
        conn.send_bytes(b"k")
        while True:
            msg = conn.recv_bytes()
            if msg == b"s":
                group.step()
            elif msg == b"c":
                break
            else:
                group.reset(pickle.loads(msg))
            conn.send_bytes(b"k")
    except (KeyboardInterrupt, EOFError, BrokenPipeError):
        pass
    except Exception:  # reported to the caller, which raises it
        try:
            conn.send_bytes(b"e" + traceback.format_exc().encode())
        except (BrokenPipeError, OSError):
            pass
    finally:
        if group is not None:
            group.close()
        conn.close()


class AtariVectorEnv(VectorEnv):
    """``num_envs`` DeepMind-wrapped ALE games, stepped in parallel processes.

    Observations are ``(num_envs, dim, dim, framestack)`` uint8 stacks, oldest frame first.
    ``info`` holds ``lives``, ``episode_frame_number`` and ``frame_number`` (with their
    ``_key`` masks, as gymnasium's vector envs do) and, for sub-envs whose episode ended,
    ``episode`` = ``{"r", "l", "t"}`` from RecordEpisodeStatistics (``_episode`` mask).

    Args:
        env_id: an ALE id (``"ALE/Pong-v5"``).
        num_envs: sub-envs.
        dim: side of the warped frame.
        framestack: frames per stack (``None`` or 1: no stacking).
        noframeskip: the game is made with ``frameskip=1`` and MaxAndSkip(4) is added (the
            standard DQN pipeline; pass ``frameskip=1`` too).
        num_workers: worker processes; the sub-envs are split into ``num_workers + 1``
            nearly equal groups and the first group runs in this process. Default
            ``num_envs - 1`` (one sub-env each). 0 steps everything here.
        context: multiprocessing start method (``None``: the platform's default).
        **make_kwargs: passed to :func:`~rlblocks.wrappers.atari_env.make_atari_env` (e.g.
            ``frameskip=1, repeat_action_probability=0.0``).

    Examples:
        >>> venv = AtariVectorEnv("ALE/Pong-v5", 2, noframeskip=True, frameskip=1,
        ...                       repeat_action_probability=0.0)  # doctest: +SKIP
        >>> venv.reset(seed=0)[0].shape  # doctest: +SKIP
        (2, 84, 84, 4)
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        *,
        dim: int = 84,
        framestack: int | None = 4,
        noframeskip: bool = False,
        num_workers: int | None = None,
        context: str | None = None,
        **make_kwargs: Any,
    ) -> None:
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"AtariVectorEnv: num_envs must be a positive int, got {num_envs!r}")
        if not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"AtariVectorEnv: dim must be a positive int, got {dim!r}")
        k = 1 if framestack is None else framestack
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"AtariVectorEnv: framestack must be None or >= 1, got {framestack!r}")
        workers = num_envs - 1 if num_workers is None else num_workers
        if not isinstance(workers, (int, np.integer)) or not 0 <= workers < num_envs:
            raise ValueError(
                f"AtariVectorEnv: num_workers must be in [0, {num_envs - 1}], got {num_workers!r}"
            )
        self.closed = True
        self.num_envs, self.dim, self.k = int(num_envs), int(dim), int(k)
        self.metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}
        self.autoreset_mode = AutoresetMode.NEXT_STEP
        ctx: Any = mp.get_context(context)
        raw = _Shared.allocate(ctx, self.num_envs, self.dim)
        self._shared = _Shared(raw, self.num_envs, self.dim)
        factory = _EnvFactory(env_id, self.dim, bool(noframeskip), dict(make_kwargs))
        bounds = [int(v) for v in np.linspace(0, self.num_envs, int(workers) + 2).round()]
        self._bounds = bounds
        # The calling process's own share first: it also checks the env id and arguments.
        self._group = _Group(factory, 0, bounds[1], self._shared)
        self.closed = False
        self._conns: list[Any] = []
        self._procs: list[Any] = []
        try:
            for w in range(int(workers)):
                parent, child = ctx.Pipe()
                first, count = bounds[w + 1], bounds[w + 2] - bounds[w + 1]
                proc = ctx.Process(
                    target=_worker,
                    name=f"AtariVectorEnv-{w}",
                    daemon=True,
                    args=(child, factory, first, count, raw, self.num_envs, self.dim),
                )
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
            self._wait()
        except BaseException:
            self.close()
            raise
        env0 = self._group.envs[0]
        self.single_action_space = env0.action_space
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.single_observation_space = gym.spaces.Box(
            0, 255, (self.dim, self.dim, self.k), dtype=np.uint8
        )
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        if not isinstance(self.single_action_space, gym.spaces.Discrete):
            self.close()
            raise ValueError(
                f"AtariVectorEnv needs a Discrete action space, got {self.single_action_space}"
            )
        self._n_actions = int(self.single_action_space.n)
        self._stack: np.ndarray | None = None
        self._stacker = FrameStacker(self.num_envs, self.k, (self.dim, self.dim, 1))
        self.spec = None

    # ------------------------------------------------------------------ plumbing

    def _wait(self) -> None:
        errors = []
        for w, conn in enumerate(self._conns):
            try:
                msg = conn.recv_bytes()
            except (EOFError, OSError):
                errors.append(f"worker {w} died (exit code {self._procs[w].exitcode})")
                continue
            if msg != b"k":
                errors.append(f"worker {w}:\n{msg[1:].decode(errors='replace')}")
        if errors:
            self.close()
            raise RuntimeError("AtariVectorEnv: " + "\n".join(errors))

    def _send(self, msgs: Sequence[bytes]) -> None:
        """Sends ``msgs[w]`` to worker ``w``."""
        if self.closed:
            raise RuntimeError("AtariVectorEnv: the env is closed")
        for w, (conn, msg) in enumerate(zip(self._conns, msgs, strict=True)):
            try:
                conn.send_bytes(msg)
            except (BrokenPipeError, OSError):
                code = self._procs[w].exitcode
                self.close()
                raise RuntimeError(f"AtariVectorEnv: worker {w} died (exit code {code})") from None

    def _info(self) -> dict[str, Any]:
        s = self._shared
        every = np.ones(self.num_envs, dtype=bool)
        info: dict[str, Any] = {}
        for j, key in enumerate(_INFO_INT):
            info[key] = s.ints[:, j].copy()
            info[f"_{key}"] = every
        ended = s.flags[:, 3].astype(bool)
        if ended.any():
            ep = s.episode
            info["episode"] = {
                "r": np.where(ended, ep[:, 0], 0.0),
                "l": np.where(ended, ep[:, 1], 0).astype(np.int64),
                "t": np.where(ended, ep[:, 2], 0.0),
                "_r": ended,
                "_l": ended,
                "_t": ended,
            }
            info["_episode"] = ended
        return info

    def _stacked(self, restart: np.ndarray | None) -> np.ndarray:
        frames = self._shared.obs
        if restart is None or self._stack is None:
            stack = self._stacker.reset(frames)
        else:
            stack = self._stacker.push(frames, reset_mask=restart)
        self._stack = stack
        return stack

    # ------------------------------------------------------------------ VectorEnv API

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Resets every sub-env: ``seed`` int -> sub-env ``i`` gets ``seed + i``; a list gives
        one seed (or None) per sub-env. ``options`` are not supported (must be None)."""
        if options:
            raise ValueError(f"AtariVectorEnv.reset: options are not supported, got {options!r}")
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = [None if s is None else int(s) for s in seed]
            if len(seeds) != self.num_envs:
                raise ValueError(
                    f"AtariVectorEnv.reset: expected {self.num_envs} seeds, got {len(seeds)}"
                )
        super().reset(seed=None)
        b = self._bounds
        self._send([pickle.dumps(seeds[b[w + 1] : b[w + 2]]) for w in range(len(self._conns))])
        try:
            self._group.reset(seeds[: b[1]])
        finally:
            self._wait()
        return self._stacked(None), self._info()

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._stack is None:
            raise RuntimeError("AtariVectorEnv.step called before reset")
        a = np.asarray(actions)
        if a.shape != (self.num_envs,) or not (
            np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_
        ):
            raise ValueError(
                f"AtariVectorEnv.step: actions must be {self.num_envs} integers, "
                f"got {a.dtype} array of shape {a.shape}"
            )
        if a.size and (a.min() < 0 or a.max() >= self._n_actions):
            bad = a.min() if a.min() < 0 else a.max()
            raise ValueError(
                f"AtariVectorEnv.step: action {bad} is out of range [0, {self._n_actions})"
            )
        s = self._shared
        s.actions[:] = a
        self._send([b"s"] * len(self._conns))
        try:
            self._group.step()
        finally:  # the workers' replies are read even if this process's share failed
            self._wait()
        restart = s.flags[:, 2].astype(bool)
        obs = self._stacked(restart)
        return (
            obs,
            s.reward.copy(),
            s.flags[:, 0].astype(bool),
            s.flags[:, 1].astype(bool),
            self._info(),
        )

    def close(self, **kwargs: Any) -> None:
        if getattr(self, "closed", True):
            return
        self.closed = True
        for conn in self._conns:
            try:
                conn.send_bytes(b"c")
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=1)
        for conn in self._conns:
            conn.close()
        self._group.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: modules may already be gone
            pass

    def __repr__(self) -> str:
        return f"AtariVectorEnv(num_envs={self.num_envs}, workers={len(self._procs)})"


def _done_mask(terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
    return np.logical_or(np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool))


class _StackedFrames:
    """Per-env frame stacks ``(N, H, W, C*k)`` built from batched ``(N, H, W, C)`` frames."""

    def __init__(self, k: int, channels: int) -> None:
        self.k, self.c = k, channels
        self.stack: np.ndarray | None = None

    def restart(self, frames: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Fills the stacks of ``mask``'s envs (all if None) with their frame, k times."""
        full = np.tile(frames, (1, 1, 1, self.k))
        if mask is None or self.stack is None:
            self.stack = full
        else:
            stack = self.stack.copy()
            stack[mask] = full[mask]
            self.stack = stack
        return self.stack

    def push(self, frames: np.ndarray, restart: np.ndarray | None = None) -> np.ndarray:
        """Appends a frame to every stack; envs in ``restart`` start a new stack instead."""
        assert self.stack is not None
        stack = push_frame(self.stack, frames)
        if restart is not None and restart.any():
            stack[restart] = np.tile(frames[restart], (1, 1, 1, self.k))
        self.stack = stack
        return stack


class VectorAtariPreprocessing(VectorWrapper):
    """WarpFrame + FrameStack for every sub-env of a vector env, in one batched C++ call.

    The sub-envs return RGB frames (typically after :func:`wrap_deepmind` with
    ``warp=False``); each step converts all of them at once with
    :func:`rlblocks.image.gray_resize` (or colour :func:`~rlblocks.image.resize`) and pushes
    them on per-env stacks ``(dim, dim, C*k)``, oldest first. A sub-env's stack restarts from
    its reset frame: on the step after it finished (``NEXT_STEP`` autoreset), on the same
    step (``SAME_STEP``; ``info["final_obs"]`` then holds the processed final stacks), or on
    ``reset(options={"reset_mask": ...})`` (``DISABLED``).

    Args:
        env: a gymnasium vector env with ``(H, W, 3)`` uint8 observations.
        dim: side of the warped frame.
        grayscale: gray ``C=1`` (OpenCV luminance) or colour ``C=3``.
        framestack: frames per stack (``None`` or 1: no stacking, ``(dim, dim, C)``).
    """

    def __init__(
        self, env: VectorEnv, dim: int = 84, grayscale: bool = True, framestack: int | None = 4
    ) -> None:
        super().__init__(env)
        space = env.single_observation_space
        if (
            not isinstance(space, gym.spaces.Box)
            or len(space.shape) != 3
            or space.shape[2] != 3
            or space.dtype != np.uint8
        ):
            raise ValueError(
                f"VectorAtariPreprocessing needs uint8 (H, W, 3) observations, got {space}"
            )
        self.dim, self.grayscale = int(dim), bool(grayscale)
        self.k = int(framestack or 1)
        if self.dim < 1 or self.k < 1:
            raise ValueError(f"dim and framestack must be >= 1, got {dim}, {framestack}")
        c = 1 if self.grayscale else 3
        self.single_observation_space = gym.spaces.Box(
            0, 255, (self.dim, self.dim, c * self.k), dtype=np.uint8
        )
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.autoreset_mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self._frames = _StackedFrames(self.k, c)
        self._prev_done = np.zeros(self.num_envs, dtype=bool)

    def _warp(self, obs: np.ndarray) -> np.ndarray:
        if self.grayscale:
            return image.gray_resize(obs, self.dim)
        return image.resize(obs, self.dim)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        mask = None if options is None else options.get("reset_mask")  # read first: the
        obs, info = self.env.reset(seed=seed, options=options)  # vector env may pop it
        frames = self._warp(obs)
        if mask is not None and self._frames.stack is not None:
            mask = np.asarray(mask, dtype=bool)
            self._prev_done[mask] = False
            return self._frames.restart(frames, mask), info
        self._prev_done[:] = False
        return self._frames.restart(frames), info

    def step(self, actions: Any) -> tuple[np.ndarray, Any, Any, Any, dict[str, Any]]:
        if self._frames.stack is None:
            raise RuntimeError("VectorAtariPreprocessing.step called before reset")
        obs, reward, terminated, truncated, info = self.env.step(actions)
        done = _done_mask(terminated, truncated)
        frames = self._warp(obs)
        if self.autoreset_mode == AutoresetMode.SAME_STEP and done.any():
            if "final_obs" in info:
                final = info["final_obs"]
                idx = np.flatnonzero(done)
                final_frames = self._warp(np.stack([final[i] for i in idx]))
                pushed = push_frame(self._frames.stack[idx], final_frames)
                new_final = np.array(final, dtype=object, copy=True)
                for j, i in enumerate(idx):
                    new_final[i] = pushed[j]
                info = {**info, "final_obs": new_final}
            stack = self._frames.push(frames, restart=done)
        elif self.autoreset_mode == AutoresetMode.NEXT_STEP:
            stack = self._frames.push(frames, restart=self._prev_done)
            self._prev_done = done
        else:
            stack = self._frames.push(frames)
        return stack, reward, terminated, truncated, info


class VectorGenericPixel(VectorWrapper):
    """RLlib's GenericPixelPreprocessor over every sub-env's frame in one batched call
    (float32 ``(N, dim, dim, 1 | 3)``)."""

    def __init__(
        self, env: VectorEnv, dim: int = 84, grayscale: bool = False, zero_mean: bool = True
    ) -> None:
        super().__init__(env)
        self.dim, self.grayscale, self.zero_mean = int(dim), bool(grayscale), bool(zero_mean)
        low = -1.0 if zero_mean else 0.0
        self.single_observation_space = gym.spaces.Box(
            low, 1.0, (self.dim, self.dim, 1 if grayscale else 3), dtype=np.float32
        )
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)

    def _process(self, obs: np.ndarray) -> np.ndarray:
        return image.generic_pixel(obs, self.dim, self.grayscale, self.zero_mean)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return self._process(obs), info

    def step(self, actions: Any) -> tuple[np.ndarray, Any, Any, Any, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        return self._process(obs), reward, terminated, truncated, info
