"""One TD3 update at the MuJoCo settings: rlblocks' closed form against Stable-Baselines3's.

Both are matrix-multiply bound at ``[400, 300]`` nets and batches of 256, so this prints,
for Hopper's shapes (11 observation, 3 action dimensions; no MuJoCo needed):

* the multiply-add FLOPs of one update, counted layer by layer (the actor step, every
  second update, counts half): rlblocks' and SB3's, whose ``actor_loss.backward()`` also
  fills the first critic's weight gradients (the next critic step zeroes them);
* the CPU milliseconds per update of each, one thread, and the GFLOP/s they reach;
* the wall-clock milliseconds per update on two threads: rlblocks with the twin critics'
  passes side by side (``parallel_critics=True``, :mod:`rlblocks.train.fast.side_thread`)
  against SB3 on torch's default threads (one intra-op thread per core), with one JSON
  line per timing;
* the same matrix multiplies run bare (float32, one thread, each at its shape; in torch,
  and in numpy, whose BLAS the closed form's products run on): the floor of an update at
  equal work on this core, and the ratio to SB3 it allows;
* with ``--dtypes``, those matmuls in bfloat16 and float16 (torch, one thread) and their
  relative error against float64: whether cheaper arithmetic would lower that floor.

Run: ``PYTHONPATH=python python benchmarks/bench_td3_update.py
[--updates 300] [--quick] [--dtypes]`` (one BLAS thread for numpy too).

Examples:
    >>> round(flops(update_matmuls(2 * ACT)) / 1e6)  # rlblocks' actor has 2 * dim(A) outputs
    735
    >>> len(update_matmuls(ACT))  # 25 in every update, 14 in every second (the actor step)
    39
"""

from __future__ import annotations

import argparse
import json
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from threadpoolctl import threadpool_limits

OBS, ACT, BATCH, HIDDEN = 11, 3, 256, (400, 300)


def _layers(n_in: int, n_out: int) -> list[tuple[int, int]]:
    sizes = [n_in, *HIDDEN, n_out]
    return list(zip(sizes[:-1], sizes[1:], strict=True))


def update_matmuls(actor_outputs: int) -> list[tuple[int, int, int, float]]:
    """``(M, K, N, weight)`` of every matrix multiply of one update (weight 1/2: the actor
    step's, every second update)."""
    actor, critic = _layers(OBS, actor_outputs), _layers(OBS + ACT, 1)
    b = BATCH

    def fwd(layers: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
        return [(b, i, o) for i, o in layers]

    def wgrad(layers: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
        return [(o, b, i) for i, o in layers]

    def dx(layers: list[tuple[int, int]], first: bool) -> list[tuple[int, int, int]]:
        return [(b, o, i) for i, o in (layers if first else layers[1:])]

    every = fwd(actor) + 2 * fwd(critic) + 2 * (fwd(critic) + wgrad(critic) + dx(critic, False))
    half = fwd(actor) + fwd(critic) + dx(critic, True) + wgrad(actor) + dx(actor, False)
    return [(*s, 1.0) for s in every] + [(*s, 0.5) for s in half]


def flops(matmuls: Sequence[tuple[int, int, int, float]]) -> float:
    """Multiply-add FLOPs (2 per multiply-add) of the weighted matmuls."""
    return sum(2.0 * m * k * n * w for m, k, n, w in matmuls)


def _per_call(fn: Callable[[int], Any], n: int) -> tuple[float, float]:
    """``(CPU seconds, wall seconds)`` per call of ``fn``, after one call to warm up."""
    fn(0)
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(n):
        fn(i)
    return (time.process_time() - cpu) / n, (time.perf_counter() - wall) / n


def _cpu_per_call(fn: Callable[[int], Any], n: int) -> float:
    return _per_call(fn, n)[0]


def time_rlblocks(n: int, seed: int = 0, paired: bool = False) -> tuple[float, float]:
    """``(CPU, wall)`` seconds of one closed-form TD3 update (rlblocks' learner, torch's
    init, denormals flushed as the trainer flushes them); ``paired``: the twin critics'
    passes side by side."""
    from rlblocks.train.denormals import flush_denormals
    from rlblocks.train.learners.td3 import TD3Learner
    from rlblocks.train.offpolicy_config import TD3Config

    rng = np.random.default_rng(seed)
    nets = {"fcnet_hiddens": list(HIDDEN)}
    cfg = TD3Config(model=nets, q_model=nets, network_init="torch", parallel_critics=paired)
    learner = TD3Learner(
        gym.spaces.Box(-np.inf, np.inf, (OBS,)), gym.spaces.Box(-1, 1, (ACT,)), cfg
    )
    batches = [
        types.SimpleNamespace(
            obs=rng.standard_normal((BATCH, OBS)).astype(np.float32),
            next_obs=rng.standard_normal((BATCH, OBS)).astype(np.float32),
            actions=rng.uniform(-1, 1, (BATCH, ACT)).astype(np.float32),
            rewards=rng.standard_normal(BATCH).astype(np.float32),
            discounts=np.full(BATCH, 0.99, np.float32),
            weights=np.ones(BATCH, np.float32),
        )
        for _ in range(8)
    ]
    with flush_denormals():
        for i in range(20):
            learner.update(batches[i % 8], 0)
        fast = learner._backprop()
        assert fast is not None and fast.paired is paired, "the closed form declined"
        return _per_call(lambda i: learner.update(batches[i % 8], 0), n)


class _Shapes(gym.Env):  # type: ignore[type-arg]
    """An env of Hopper's spaces, for building SB3's model without MuJoCo."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float64)
    action_space = gym.spaces.Box(-1, 1, (ACT,), np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        return np.zeros(OBS), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return np.zeros(OBS), 0.0, False, False, {}


def time_sb3(n: int, seed: int = 0) -> tuple[float, float]:
    """``(CPU, wall)`` seconds of one update of SB3's TD3 (``train(gradient_steps=n)``) on
    torch's current threads."""
    from stable_baselines3 import TD3
    from stable_baselines3.common.logger import configure

    rng = np.random.default_rng(seed)
    model = TD3(
        "MlpPolicy", _Shapes(), learning_rate=1e-3, batch_size=BATCH, learning_starts=0,
        policy_kwargs={"net_arch": list(HIDDEN)}, device="cpu", seed=seed,
    )  # fmt: skip
    model.set_logger(configure(None, [""]))
    for _ in range(5000):
        o = rng.standard_normal((1, OBS))
        a = rng.uniform(-1, 1, (1, ACT))
        model.replay_buffer.add(o, 0.9 * o, a, np.ones(1), np.zeros(1, bool), [{}])
    model.train(gradient_steps=20, batch_size=BATCH)
    cpu, wall = time.process_time(), time.perf_counter()
    model.train(gradient_steps=n, batch_size=BATCH)
    return (time.process_time() - cpu) / n, (time.perf_counter() - wall) / n


def time_bare(
    matmuls: Sequence[tuple[int, int, int, float]],
    n: int,
    dtype: torch.dtype | None = torch.float32,
) -> float:
    """CPU seconds of the update's matmuls alone (the half-weighted ones every second time),
    in torch at ``dtype``, or in numpy's float32 (its BLAS, where the closed form runs its
    products) for ``dtype=None``."""
    rng = np.random.default_rng(0)

    def operand(rows: int, cols: int) -> Any:
        x = rng.standard_normal((rows, cols), np.float32)
        return x if dtype is None else torch.from_numpy(x).to(dtype)

    mats = [(operand(m, k), operand(k, c), w) for m, k, c, w in matmuls]

    def one(i: int) -> None:
        for x, y, w in mats:
            if w == 1.0 or i % 2 == 0:
                x @ y

    return _cpu_per_call(one, n)


def rel_error(matmuls: Sequence[tuple[int, int, int, float]], dtype: torch.dtype) -> float:
    """The largest relative error (Frobenius norm) of the matmuls' products in ``dtype``
    against float64, for inputs rounded to ``dtype`` (the product's own error)."""
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for m, k, c, _ in matmuls:
        x = torch.randn(m, k, generator=gen).to(dtype)
        y = torch.randn(k, c, generator=gen).to(dtype)
        ref = x.double() @ y.double()
        worst = max(worst, float(((x @ y).double() - ref).norm() / ref.norm()))
    return worst


def main(argv: Sequence[str] | None = None) -> int:
    """Prints the counts and the timings."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--updates", type=int, default=300, help="timed updates of each")
    p.add_argument("--quick", action="store_true", help="smoke run: 10 updates of each")
    p.add_argument("--no-sb3", dest="sb3", action="store_false")
    p.add_argument(
        "--dtypes", action="store_true", help="also the bare matmuls in bfloat16 and float16"
    )
    args = p.parse_args(argv)
    if args.quick:
        args.updates = 10
    default_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    threadpool_limits(1, user_api="blas")
    ours_mm = update_matmuls(2 * ACT)  # the actor's SquashedGaussian layout: 2 * dim(A) outputs
    f_ours = flops(ours_mm)
    # SB3: dim(A) actor outputs, and the actor step's backward fills critic 1's weight grads
    sb3_mm = update_matmuls(ACT) + [(o, BATCH, i, 0.5) for i, o in _layers(OBS + ACT, 1)]
    f_sb3 = flops(sb3_mm)
    t_ours, w_ours = time_rlblocks(args.updates)
    t_bare = time_bare(ours_mm, args.updates)
    print(f"FLOPs per update: rlblocks {f_ours / 1e6:.0f} M, SB3 {f_sb3 / 1e6:.0f} M")
    print(f"rlblocks closed form: {t_ours * 1e3:.2f} ms ({f_ours / t_ours / 1e9:.1f} GFLOP/s)")
    print(f"its matmuls alone:    {t_bare * 1e3:.2f} ms ({f_ours / t_bare / 1e9:.1f} GFLOP/s)")
    t_np = time_bare(ours_mm, args.updates, None)
    print(f"the same in numpy:    {t_np * 1e3:.2f} ms ({f_ours / t_np / 1e9:.1f} GFLOP/s)")
    if args.dtypes:
        for dtype in (torch.bfloat16, torch.float16):
            t_dt = time_bare(ours_mm, max(2, args.updates // 10), dtype)
            name = str(dtype).removeprefix("torch.")
            print(
                f"its matmuls in {name + ':':9s} {t_dt * 1e3:.2f} ms "
                f"({f_ours / t_dt / 1e9:.1f} GFLOP/s, {t_dt / t_bare:.1f}x float32's; "
                f"relative error up to {rel_error(ours_mm, dtype):.1e})"
            )
    rows = [("rlblocks", 1, t_ours, w_ours)]
    rows.append(("rlblocks, critics paired", 2, *time_rlblocks(args.updates, paired=True)))
    if args.sb3:
        t_sb3, w_sb3 = time_sb3(args.updates)
        rows.append(("SB3", 1, t_sb3, w_sb3))
        print(f"SB3 TD3.train:        {t_sb3 * 1e3:.2f} ms ({f_sb3 / t_sb3 / 1e9:.1f} GFLOP/s)")
        print(f"rlblocks / SB3: {t_ours / t_sb3:.2f}x; the bare matmuls: {t_bare / t_sb3:.2f}x")
        if default_threads > 1:
            torch.set_num_threads(default_threads)
            rows.append(("SB3", default_threads, *time_sb3(args.updates)))
            torch.set_num_threads(1)
    best_sb3 = min((w for name, _, _, w in rows if name == "SB3"), default=None)
    head = ("update", "threads", "CPU ms", "wall ms", "wall / SB3 best")
    print("\n{:26s} {:>7s} {:>7s} {:>8s} {:>15s}".format(*head))
    for name, threads, cpu, wall in rows:
        ratio = wall / best_sb3 if best_sb3 else None
        line = {"case": "td3_update", "method": name, "threads": threads}
        line |= {"cpu_ms": round(cpu * 1e3, 3), "wall_ms": round(wall * 1e3, 3)}
        print(json.dumps(line | {"wall_vs_best_sb3": ratio and round(ratio, 3)}))
        shown = f"{ratio:.2f}x" if ratio else "-"
        print(f"{name:26s} {threads:7d} {cpu * 1e3:7.2f} {wall * 1e3:8.2f} {shown:>15s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
