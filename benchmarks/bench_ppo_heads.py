"""Native PPO per action head: steps/s on one nested-Dict env family, one run.

The env (:class:`NestedHeads`) observes DictCartPole's kind of nested Dict (a Discrete code
and a Dict of Boxes) and acts with the head under test: ``discrete`` (Discrete(4), the
baseline), ``multidiscrete`` (MultiDiscrete([4, 2])), ``tuple`` (Tuple(Discrete(3),
Box(-1, 1, (1,)))) or ``masked`` (Discrete(4) with RLlib's ``action_mask`` around the
nested Dict). Every head trains ``--steps`` env steps with the same PPO settings, on
rlblocks' fast paths and with ``fast_paths=False`` (the torch module and autograd: the
reference), interleaved head by head so a busy machine slows all rows alike. Each run
prints one JSON line; the table gives steps/s, the ratio to the Discrete baseline of the
same method (target: every head within 1.3x, i.e. ``vs_discrete >= 0.77``), the same by
CPU time (steadier than wall time on a shared machine) and the fast paths' speed-up over
the reference. Nothing here asserts timing.

Usage: ``python benchmarks/bench_ppo_heads.py [--quick] [--steps 16384] [--repeats 3]``.

Examples:
    >>> env = NestedHeads({"action": "masked"})
    >>> obs, _ = env.reset(seed=0)
    >>> sorted(obs), obs["action_mask"].shape, env.action_space
    (['action_mask', 'observations'], (4,), Discrete(4))
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np
from _harness import emit, format_rows, median
from gymnasium.spaces import Box, Dict, Discrete, MultiDiscrete, Tuple

KINDS = ("discrete", "multidiscrete", "tuple", "masked")


class NestedHeads(gym.Env):
    """A nested-Dict observation with the action head ``config["action"]`` (module
    docstring); random observations, episodes of 20-40 steps, reward 1 for a first action
    component equal to the code (so learning moves the policy)."""

    def __init__(self, config: dict | None = None):
        self.kind = (config or {}).get("action", "discrete")
        nested = Dict(
            {"code": Discrete(3), "inner": Dict({"noise": Box(-1, 1, (2,)), "v": Box(-1, 1, (3,))})}
        )
        self.action_space = {
            "discrete": Discrete(4),
            "multidiscrete": MultiDiscrete([4, 2]),
            "tuple": Tuple((Discrete(3), Box(-1, 1, (1,), np.float32))),
            "masked": Discrete(4),
        }[self.kind]
        self.observation_space = (
            Dict({"action_mask": Box(0, 1, (4,), np.float32), "observations": nested})
            if self.kind == "masked"
            else nested
        )
        self._left = 0
        self._code = 0

    def _obs(self) -> Any:
        r = self.np_random
        self._code = int(r.integers(3))
        nested = {
            "code": self._code,
            "inner": {
                "noise": r.uniform(-1, 1, 2).astype(np.float32),
                "v": r.uniform(-1, 1, 3).astype(np.float32),
            },
        }
        if self.kind != "masked":
            return nested
        mask = (r.random(4) < 0.6).astype(np.float32)
        mask[int(r.integers(4))] = 1.0
        return {"action_mask": mask, "observations": nested}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._left = int(self.np_random.integers(20, 41))
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self._left -= 1
        first = action[0] if isinstance(action, (tuple, np.ndarray)) else action
        reward = float(int(first) == self._code)
        return self._obs(), reward, self._left <= 0, False, {}


def config_for(kind: str, seed: int, steps: int, fast: bool) -> dict[str, Any]:
    """The PPO config of one run (the same for every head; a batch of at most ``steps``)."""
    return {
        "env": NestedHeads,
        "env_config": {"action": kind},
        "num_envs": 8,
        "train_batch_size": min(2048, steps),
        "sgd_minibatch_size": min(256, steps),
        "num_sgd_iter": 6,
        "lr": 3e-4,
        "entropy_coeff": 0.01,
        "seed": seed,
        "fast_paths": fast,
        "model": {"fcnet_hiddens": [64, 64]},
    }


def run(kind: str, seed: int, steps: int, fast: bool) -> dict[str, Any]:
    """One training run: steps/s over ``steps`` env steps (setup excluded)."""
    from rlblocks.train import PPOTrainer

    with PPOTrainer(config_for(kind, seed, steps, fast)) as trainer:
        t0, c0 = time.perf_counter(), time.process_time()
        result = trainer.fit(stop_timesteps=steps, progress=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    done = int(result["timesteps_total"])
    return {
        "case": f"PPO {kind}",
        "method": "rlblocks" if fast else "reference (fast_paths=False)",
        "seed": seed,
        "steps": done,
        "wall_s": wall,
        "steps_per_s": done / wall,
        "cpu_s": cpu,
        "steps_per_cpu_s": done / cpu,
        "return": float(result.get("episode_return_mean", float("nan"))),
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Runs every head, prints the JSON lines and the table; returns the table's rows."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4096 steps, one repeat")
    parser.add_argument("--steps", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--no-reference", action="store_true", help="skip fast_paths=False")
    args = parser.parse_args(argv)
    steps, repeats = (4096, 1) if args.quick else (args.steps, args.repeats)
    kinds = [k for k in args.kinds.split(",") if k]
    if "discrete" not in kinds:
        kinds.insert(0, "discrete")
    import torch

    torch.set_num_threads(1)
    methods = [True] if args.no_reference else [True, False]
    rows: list[dict[str, Any]] = []
    for rep in range(repeats):
        for kind in kinds:
            for fast in methods:
                row = run(kind, rep, steps, fast)
                emit(row)
                rows.append(row)
    table = []

    def med(kind: str, method: str, key: str) -> float | None:
        return median(r[key] for r in rows if r["case"] == f"PPO {kind}" and r["method"] == method)

    for kind in kinds:
        for method in dict.fromkeys(r["method"] for r in rows):
            value, cpu = med(kind, method, "steps_per_s"), med(kind, method, "steps_per_cpu_s")
            base = med("discrete", method, "steps_per_s")
            base_cpu = med("discrete", method, "steps_per_cpu_s")
            ref = med(kind, "reference (fast_paths=False)", "steps_per_s")
            table.append(
                {
                    "case": f"PPO {kind}",
                    "method": method,
                    "steps_per_s": value,
                    "steps_per_cpu_s": cpu,
                    "vs_discrete": None if value is None or not base else value / base,
                    "cpu_vs_discrete": None if cpu is None or not base_cpu else cpu / base_cpu,
                    "vs_reference": None if ref is None or value is None else value / ref,
                }
            )
    print(
        format_rows(
            table,
            [
                ("case", "case", "<18"),
                ("method", "method", "<30"),
                ("steps/s", "steps_per_s", ">9.0f"),
                ("per CPU s", "steps_per_cpu_s", ">10.0f"),
                ("vs discrete", "vs_discrete", ">12.2f"),
                ("CPU vs discrete", "cpu_vs_discrete", ">16.2f"),
                ("vs reference", "vs_reference", ">13.2f"),
            ],
        )
    )
    return table


if __name__ == "__main__":
    main()
    sys.exit(0)
