"""Replay sampling for Atari DQN: rlblocks' C++ buffer vs its numpy twin and SB3.

The case: 4 envs of DeepMind Atari observations (4 stacked 84x84 uint8 frames, channels
first, int64 actions), episodes of ~500 steps, a buffer filled past its capacity (the ring
has wrapped), then batches of 32 transitions with 3-step returns sampled from it.

* ``rlblocks``: :class:`rlblocks.replay.ReplayBuffer` (``frame_stack=4, stack_axis=0,
  n_step=3``): each frame stored once, stacks and n-step returns assembled in C++.
* ``rlblocks numpy twin``: the same buffer on the pure-numpy reference (``RLBLOCKS_IMPL=numpy``).
* ``... out=``: the same, writing into a reused batch (``sample(32, out=batch)``): no
  allocation, so none of the page faults that fresh ~1 MB output arrays cost.
* ``sb3 optimize_memory_usage``: Stable-Baselines3's ``ReplayBuffer(optimize_memory_usage=True,
  handle_timeout_termination=False)``: stacked observations stored once per step (the next
  observation is the following row), 1-step transitions only (SB3 has no n-step variant of it).
* ``sb3 NStepReplayBuffer``: SB3's n-step buffer (``n_steps=3``), which stores both
  observations of every step (it refuses ``optimize_memory_usage``).

SB3 returns torch tensors (a copy on the CPU device); rlblocks returns numpy arrays (torch
can wrap them without a copy). ``bytes/step`` is all preallocated storage divided by the
steps it holds, on the filled buffer. ``us_per_item`` is per sampled batch.

Usage: ``python benchmarks/bench_replay.py [--quick] [--capacity 20000] [--batch 32]
[--min-time 0.5] [--json FILE]``. Prints one JSON line per method, then two tables.

Examples:
    >>> rb = filled_rlblocks(capacity=64, num_envs=2, n_step=3, seed=0, native=True)
    >>> len(rb) > 0, rb.bytes_per_step < 7100
    (True, True)
    >>> s = rb.sample(4)
    >>> s.obs.shape, s.next_obs.dtype
    ((4, 4, 84, 84), dtype('uint8'))
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import rlblocks
from _harness import available, format_rows, skip_note
from rlblocks import _impl
from rlblocks.benchmarking.harness import Result, measure, report
from rlblocks.replay import ReplayBuffer

K, H, W = 4, 84, 84
EPISODE = 500  # mean episode length of the stream
POOL = 64  # distinct random frames the stream cycles through


def atari_steps(num_envs: int, steps: int, seed: int) -> Iterator[tuple[np.ndarray, ...]]:
    """(obs, actions, rewards, terminated, truncated, next_obs) of a frame-stacked stream."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, (POOL, H, W), dtype=np.uint8)
    history: list[list[int]] = [[] for _ in range(num_envs)]
    for _ in range(steps):
        obs = np.empty((num_envs, K, H, W), np.uint8)
        nxt = np.empty_like(obs)
        ends = rng.random(num_envs) < 1.0 / EPISODE
        for e in range(num_envs):
            if not history[e]:
                history[e] = [int(rng.integers(POOL))] * K
            obs[e] = pool[history[e][-K:]]
            history[e].append(int(rng.integers(POOL)))
            del history[e][:-K]
            nxt[e] = pool[history[e]]
            if ends[e]:
                history[e] = []
        actions = rng.integers(0, 6, num_envs)
        rewards = rng.choice(np.array([-1.0, 0.0, 1.0], np.float32), num_envs)
        terminated = ends & (rng.random(num_envs) < 0.5)
        yield obs, actions, rewards, terminated, ends & ~terminated, nxt


def filled_rlblocks(
    capacity: int, num_envs: int, n_step: int, seed: int, native: bool
) -> ReplayBuffer:
    """An rlblocks buffer (C++ or numpy twin) filled with 1.25x its capacity."""
    before = _impl.native()
    _impl.use_numpy_reference(not native)
    try:
        rb = ReplayBuffer(
            capacity,
            num_envs,
            (K, H, W),
            np.uint8,
            n_step=n_step,
            frame_stack=K,
            stack_axis=0,
            seed=seed,
        )
    finally:
        _impl.use_numpy_reference(not before)
    for step in atari_steps(num_envs, capacity * 5 // 4 // num_envs, seed):
        rb.add(*step)
    return rb


def sb3_bytes_per_step(rb: Any) -> float:
    arrays = [rb.observations, rb.actions, rb.rewards, rb.dones, rb.timeouts]
    if not rb.optimize_memory_usage:
        arrays.append(rb.next_observations)
    return sum(a.nbytes for a in arrays) / (rb.buffer_size * rb.n_envs)


def filled_sb3(capacity: int, num_envs: int, n_step: int, seed: int) -> Any:
    """SB3's optimize_memory_usage buffer (n_step == 1) or its NStepReplayBuffer."""
    import gymnasium as gym
    from stable_baselines3.common.buffers import NStepReplayBuffer
    from stable_baselines3.common.buffers import ReplayBuffer as SB3Buffer

    obs_space = gym.spaces.Box(0, 255, (K, H, W), np.uint8)
    act_space = gym.spaces.Discrete(6)
    if n_step == 1:
        rb = SB3Buffer(
            capacity,
            obs_space,
            act_space,
            "cpu",
            n_envs=num_envs,
            optimize_memory_usage=True,
            handle_timeout_termination=False,
        )
    else:
        rb = NStepReplayBuffer(
            capacity, obs_space, act_space, "cpu", n_envs=num_envs, n_steps=n_step, gamma=0.99
        )
    for obs, actions, rewards, term, trunc, nxt in atari_steps(
        num_envs, capacity * 5 // 4 // num_envs, seed
    ):
        infos = [{"TimeLimit.truncated": bool(t)} for t in trunc]
        rb.add(obs, nxt, actions[:, None], rewards, term | trunc, infos)
    return rb


def run(
    capacity: int, num_envs: int, batch: int, n_step: int, min_time: float, repeats: int
) -> tuple[list[Result], list[dict[str, Any]]]:
    case = f"sample {batch} x {K}x{H}x{W} (n={n_step})"
    threads = rlblocks.get_num_threads()
    results: list[Result] = []
    memory: list[dict[str, Any]] = []
    for method, native in (("rlblocks", True), ("rlblocks numpy twin", False)):
        rb = filled_rlblocks(capacity, num_envs, n_step, 0, native)
        bps = rb.bytes_per_step
        extra = {"bytes_per_step": bps, "n_step": n_step, "threads": threads if native else 1}
        results.append(
            measure(
                case,
                method,
                lambda rb=rb: rb.sample(batch),
                1,
                batch=batch,
                min_time=min_time,
                repeats=repeats,
                **extra,
            )
        )
        reused = rb.sample(batch)
        results.append(
            measure(
                case,
                f"{method} out=",
                lambda rb=rb, o=reused: rb.sample(batch, out=o),
                1,
                batch=batch,
                min_time=min_time,
                repeats=repeats,
                **extra,
            )
        )
        memory.append({"method": method, "n_step": n_step, "bytes_per_step": bps})
        del rb, reused
    if available("stable_baselines3"):
        for method, n in (("sb3 optimize_memory_usage", 1), ("sb3 NStepReplayBuffer", n_step)):
            rb3 = filled_sb3(capacity, num_envs, n, 0)
            bps = sb3_bytes_per_step(rb3)
            results.append(
                measure(
                    case,
                    method,
                    lambda rb3=rb3: rb3.sample(batch),
                    1,
                    batch=batch,
                    min_time=min_time,
                    repeats=repeats,
                    bytes_per_step=bps,
                    n_step=n,
                )
            )
            memory.append({"method": method, "n_step": n, "bytes_per_step": bps})
            del rb3
    else:
        print(skip_note("sb3", "rlblocks[bench]"))
    return results, memory


def main(argv: Sequence[str] | None = None) -> list[Result]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny buffer, short timings")
    parser.add_argument("--capacity", type=int, default=20_000, help="steps held (all envs)")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--n-step", type=int, default=3)
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds per method")
    parser.add_argument("--json", type=Path, help="also write the JSON lines here")
    args = parser.parse_args(argv)
    capacity, min_time, repeats = args.capacity, args.min_time, 5
    if args.quick:
        capacity, min_time, repeats = 400, 0.02, 2
    results, memory = run(capacity, args.num_envs, args.batch, args.n_step, min_time, repeats)
    report(results, sys.stdout)
    print()
    print(
        format_rows(
            memory,
            [
                ("method", "method", "<28"),
                ("n", "n_step", ">2"),
                ("bytes/step", "bytes_per_step", ">11,.0f"),
            ],
        )
    )
    if args.json:
        with args.json.open("w") as f:
            for r in results:
                f.write(json.dumps(r.__dict__) + "\n")
    return results


if __name__ == "__main__":
    main()
