"""Multi-agent learning checks: MPE simple_spread and simple_adversary, rlblocks' CLI
defaults vs SB3 PPO + SuperSuit on the same budget of env steps.

* ``rlblocks``: ``rlblocks train --env mpe2.<env>_v3:parallel_env --stop-timesteps N`` (the
  CLI's defaults: one shared policy, 8 env copies, 2048 env steps per iteration, minibatch
  256, 10 epochs), then ``rlblocks evaluate RUN --episodes E --seed 1`` (greedy).
* ``sb3``: SB3 PPO on SuperSuit's ``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1``
  over 8 copies (each agent of each copy is one vector env; simple_adversary's smaller
  observations padded with ``pad_observations_v0``), with the same batch: 256 steps per
  vector env (2048 env steps of 8 copies), minibatch 256, 10 epochs, SB3's other defaults;
  evaluated greedily on E episodes of one copy.
* RLlib is not run here: its default multi-agent PPO did not finish one iteration in 9
  minutes on this machine (issue 45); ``bench_multiagent.py`` times it on small batches.

The return is the sum over an episode's agents (simple_adversary: also per side). Usage:
``python benchmarks/learn_multiagent.py [--quick] [--steps 200000] [--episodes 100]
[--envs simple_spread simple_adversary] [--frameworks rlblocks sb3] [--json FILE]``.

Examples:
    >>> env_id("simple_spread")
    'mpe2.simple_spread_v3:parallel_env'
    >>> sb3_batch(8, 3)  # 24 vector envs x 256 steps: 2048 env steps of 8 copies
    (256, 6144)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _harness import Column, available, emit, format_rows

ENVS = ("simple_spread", "simple_adversary")
FRAMEWORKS = ("rlblocks", "sb3")
ROOT = Path(__file__).resolve().parents[1]


def env_id(name: str) -> str:
    """The ``--env`` of an MPE env."""
    return f"mpe2.{name}_v3:parallel_env"


def sb3_batch(copies: int, agents: int, env_steps: int = 2048) -> tuple[int, int]:
    """SB3's ``n_steps`` per vector env and agent steps per update for ``env_steps`` env
    steps per iteration over ``copies`` env copies."""
    n_steps = env_steps // copies
    return n_steps, n_steps * copies * agents


def run_rlblocks(name: str, steps: int, episodes: int) -> dict[str, Any]:
    """The CLI's defaults, then a greedy evaluation (both in subprocesses)."""
    cli = [sys.executable, "-c", "from rlblocks.cli import main; main()"]
    with tempfile.TemporaryDirectory() as tmp:
        run = str(Path(tmp) / "run")
        start = time.perf_counter()
        subprocess.run(
            [*cli, "train", "--env", env_id(name), "--run-dir", run, "--no-progress"]
            + ["--stop-timesteps", str(steps)],
            check=True,
            capture_output=True,
        )
        wall = time.perf_counter() - start
        out = subprocess.run(
            [*cli, "evaluate", run, "--episodes", str(episodes), "--seed", "1"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    agents = {k.split("/", 1)[1]: v for k, v in result.items() if k.startswith("agent_episode")}
    return _row("rlblocks", name, steps, wall, result["episode_return_mean"], agents)


def run_sb3(name: str, steps: int, episodes: int) -> dict[str, Any]:
    """SB3 PPO + SuperSuit on the same budget, then a greedy evaluation."""
    missing = [m for m in ("stable_baselines3", "supersuit", "mpe2") if not available(m)]
    if missing:
        return {"framework": "sb3", "env": name, "skipped": f"missing {', '.join(missing)}"}
    import importlib

    import numpy as np
    import supersuit
    from stable_baselines3 import PPO

    module = importlib.import_module(f"mpe2.{name}_v3")

    def make() -> Any:
        return supersuit.pad_observations_v0(module.parallel_env())

    copies = 8
    venv = supersuit.concat_vec_envs_v1(
        supersuit.pettingzoo_env_to_vec_env_v1(make()), copies, base_class="stable_baselines3"
    )
    venv.venv.reset(seed=0)  # ConcatVecEnv has no seed() for PPO(seed=...)
    n_steps, _ = sb3_batch(copies, len(make().possible_agents))
    model = PPO("MlpPolicy", venv, n_steps=n_steps, batch_size=256, device="cpu", verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=steps * len(make().possible_agents))  # SB3 counts agent steps
    wall = time.perf_counter() - start
    venv.close()
    env = make()
    totals: list[float] = []
    per_agent: dict[str, list[float]] = {a: [] for a in env.possible_agents}
    for episode in range(episodes):
        obs, _ = env.reset(seed=1 + episode)
        returns = dict.fromkeys(env.possible_agents, 0.0)
        while env.agents:
            actions = {a: int(model.predict(obs[a], deterministic=True)[0]) for a in env.agents}
            obs, rewards, _, _, _ = env.step(actions)
            for a, r in rewards.items():
                returns[a] += float(r)
        totals.append(sum(returns.values()))
        for a, r in returns.items():
            per_agent[a].append(r)
    agents = {a: float(np.mean(v)) for a, v in per_agent.items()}
    return _row("sb3", name, steps, wall, float(np.mean(totals)), agents)


def _row(
    framework: str, name: str, steps: int, wall: float, ret: float, agents: dict[str, float]
) -> dict[str, Any]:
    return {
        "framework": framework,
        "env": name,
        "env_steps": steps,
        "wall_s": wall,
        "episode_return_mean": ret,
        "agent_returns": agents,
    }


COLUMNS: list[Column] = [
    ("env", "env", "<17"),
    ("framework", "framework", "<10"),
    ("env steps", "env_steps", ">10,"),
    ("wall s", "wall_s", ">7.0f"),
    ("greedy return", "episode_return_mean", ">13.2f"),
    ("note", lambda r: f"skipped: {r['skipped']}" if "skipped" in r else "", "<"),
]


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Trains and evaluates each (env, framework); prints JSON lines and a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2048 env steps, 5 episodes")
    parser.add_argument("--steps", type=int, default=200_000, help="env steps per run")
    parser.add_argument("--episodes", type=int, default=100, help="evaluation episodes")
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=ENVS)
    parser.add_argument("--frameworks", nargs="+", default=list(FRAMEWORKS), choices=FRAMEWORKS)
    parser.add_argument("--json", metavar="FILE", help="also write the JSON lines to FILE")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.episodes = 2048, 5
    runners = {"rlblocks": run_rlblocks, "sb3": run_sb3}
    rows = []
    for name in args.envs:
        for framework in args.frameworks:
            row = runners[framework](name, args.steps, args.episodes)
            emit(row)
            rows.append(row)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in rows)
    print(format_rows(rows, COLUMNS))
    return rows


if __name__ == "__main__":
    main()
