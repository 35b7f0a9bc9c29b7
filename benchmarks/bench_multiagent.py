"""Multi-agent PPO throughput: rlblocks' native trainer vs RLlib and SB3 + SuperSuit.

PettingZoo MPE ``simple_spread`` (``mpe2.simple_spread_v3.parallel_env(N=3, max_cycles=25,
continuous_actions=False)``): 3 agents, 8 env copies, one policy shared by all agents, the
same PPO settings everywhere: 128 env steps per copy per iteration (1024 env steps, 3072
agent steps), minibatches of 256 agent steps, 4 epochs, lr 3e-4, gamma 0.99, GAE lambda 0.95,
clip 0.2, value loss weight 0.5 (not clipped), no entropy bonus, no KL penalty, gradient norm
clipped at 0.5; policy and value networks of two tanh layers of 64 each (separate).

* ``env``: the env alone, the same copies stepped with random actions and no policy: the
  ceiling of every framework's rate; each framework's ``non-env ms/iter`` is its time per
  iteration minus the env's for the same steps (policy, bookkeeping and learning).
* ``rlblocks``: ``rlblocks.train.MultiAgentPPOTrainer`` (``policy_mapping: shared``);
  ``rlblocks_workers``: the same, its env copies in ``--env-workers`` processes.
* ``rllib``: RLlib's multi-agent PPO on the new API stack with its default module, the env
  wrapped in ``ParallelPettingZooEnv``, one module for all agents (``policy_mapping_fn``),
  no remote env runners (``num_env_runners=0``, ``num_envs_per_env_runner=8``); it runs in
  the Ray venv's interpreter (``--ray-python``).
* ``sb3``: Stable-Baselines3 PPO on SuperSuit's ``pettingzoo_env_to_vec_env_v1`` +
  ``concat_vec_envs_v1`` (each agent of each copy is one of 24 vector envs; homogeneous
  agents only). SuperSuit 3.11's SB3 wrapper has no ``seed`` for SB3 2.x's ``PPO(seed=...)``
  (``ConcatVecEnv`` lacks it), so the envs are seeded by one ``reset(seed=...)`` before
  training and torch / numpy by SB3's ``set_random_seed``.

``--case adversarial_pursuit``: magent2's ``adversarial_pursuit_v4.parallel_env(max_cycles=
500)`` instead, 75 agents (25 predators, 50 prey with other spaces), 2 copies of 32 steps
per iteration (4,800 agent steps), minibatches of 1,200, the same PPO settings, one policy
shared by all (``shared``: the union layout; RLlib: a module per role, its default module
takes no union); SB3 + SuperSuit needs equal spaces and is skipped.

Each framework runs in its own subprocess: it builds the trainer, runs one warm-up
iteration, then times ``--iters`` iterations (sampling + learning): agent steps/s = agent
steps collected / wall time of the timed iterations (``per CPU s``: / the CPU time of the
process and its env workers, all threads; steadier on a shared machine; Ray's daemons are
not counted); ``episode_return_mean``: the mean return (summed over agents) of the recent
episodes (SB3: its ``VecMonitor``'s per-agent return times the number of agents). A
framework whose packages are missing is skipped with the reason.

Usage: ``python benchmarks/bench_multiagent.py [--quick] [--iters 5] [--case simple_spread]
[--frameworks env rlblocks rlblocks_workers rllib sb3] [--env-workers 2] [--ray-python PATH]
[--json FILE]``. Prints one JSON line per framework,
then a table.

Examples:
    >>> s = settings(quick=False)
    >>> s["num_envs"] * s["rollout_fragment_length"] * s["n_agents"], s["minibatch"]
    (3072, 256)
    >>> sb3_vec_envs(s), sb3_minibatch(s)
    (24, 256)
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _harness import Column, available, emit, format_rows, tree_cpu_s

FRAMEWORKS = ("env", "rlblocks", "rlblocks_workers", "rllib", "sb3")
ENV_ID = "mpe2.simple_spread_v3:parallel_env"
#: Per case: the env, the packages it needs, agents, env kwargs, copies, steps, minibatch.
CASES: dict[str, dict[str, Any]] = {
    "simple_spread": {
        "env_id": ENV_ID,
        "modules": ["pettingzoo", "mpe2"],
        "n_agents": 3,
        "env_config": {"N": 3, "max_cycles": 25, "continuous_actions": False},
    },
    "adversarial_pursuit": {
        "env_id": "magent2.environments.adversarial_pursuit_v4:parallel_env",
        "modules": ["pettingzoo", "magent2"],
        "n_agents": 75,
        "env_config": {"max_cycles": 500},
        "num_envs": 2,
        "rollout_fragment_length": 32,
        "minibatch": 1200,
    },
}
DEFAULT_RAY_PYTHON = "/work/venv-ray/bin/python"
LABELS = {
    "env": "env alone (random actions)",
    "rlblocks": "rlblocks MultiAgentPPOTrainer",
    "rlblocks_workers": "rlblocks, env worker processes",
    "rllib": "RLlib PPO (default module)",
    "sb3": "SB3 PPO + SuperSuit",
}


def settings(quick: bool, case: str = "simple_spread", env_workers: int = 2) -> dict[str, Any]:
    """The PPO settings every framework uses (``quick``: a tiny run for smoke tests)."""
    own = CASES[case]
    full = {k: own[k] for k in ("num_envs", "rollout_fragment_length", "minibatch") if k in own}
    return {
        "case": case,
        "env_id": own["env_id"],
        "modules": own["modules"],
        "n_agents": own["n_agents"],
        "env_config": own["env_config"],
        "env_workers": env_workers,
        "num_envs": 2 if quick else 8,
        "rollout_fragment_length": 16 if quick else 128,  # env steps per copy per iteration
        "minibatch": 32 if quick else 256,  # agent steps
        "epochs": 1 if quick else 4,
        "lr": 3e-4,
        "gamma": 0.99,
        "lambda": 0.95,
        "clip_param": 0.2,
        "vf_loss_coeff": 0.5,
        "entropy_coeff": 0.0,
        "grad_clip": 0.5,
        "hiddens": [64, 64],
        **({} if quick else full),
    }


def env_config(s: dict[str, Any]) -> dict[str, Any]:
    """The env's keyword arguments."""
    return dict(s["env_config"])


def make_env(s: dict[str, Any]) -> Any:
    """One parallel env of the case."""
    import importlib

    module, name = s["env_id"].split(":")
    return getattr(importlib.import_module(module), name)(**env_config(s))


def env_steps_per_iter(s: dict[str, Any]) -> int:
    """Env steps (summed over copies) per training iteration."""
    return int(s["num_envs"] * s["rollout_fragment_length"])


def sb3_vec_envs(s: dict[str, Any]) -> int:
    """SuperSuit's vector env has one entry per agent of every copy."""
    return int(s["num_envs"] * s["n_agents"])


def sb3_minibatch(s: dict[str, Any]) -> int:
    """SB3's ``batch_size`` (agent steps, as everywhere here)."""
    return int(s["minibatch"])


# --------------------------------------------------------------------------------------------
# workers (each runs in its own process and prints one JSON line)


def _row(framework: str, s: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "case": f"{s['case']} ({s['n_agents']} agents)",
        "framework": framework,
        "method": LABELS[framework],
        "num_envs": s["num_envs"],
        "agent_steps_per_iter": env_steps_per_iter(s) * s["n_agents"],
        **fields,
    }


def _now() -> tuple[float, float]:
    return time.perf_counter(), tree_cpu_s()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    """Wall and CPU seconds (this process and its env workers, all threads) since ``start``."""
    wall, cpu = _now()
    return wall - start[0], cpu - start[1]


def _timed(
    framework: str,
    s: dict[str, Any],
    iters: int,
    wall: float,
    cpu: float,
    agent_steps: float,
    ret: float,
) -> dict[str, Any]:
    return _row(
        framework,
        s,
        iters=iters,
        agent_steps=int(agent_steps),
        wall_s=wall,
        cpu_s=cpu,
        agent_steps_per_s=agent_steps / wall,
        agent_steps_per_cpu_s=agent_steps / cpu,
        episode_return_mean=ret if math.isfinite(ret) else None,
    )


def _missing(modules: Sequence[str]) -> list[str]:
    return [m for m in modules if not available(m)]


def run_env(s: dict[str, Any], iters: int, seed: int, threads: int) -> dict[str, Any]:
    """The env alone: the same copies stepped with uniform random actions, no policy (the
    ceiling every framework's rate approaches)."""
    missing = _missing(s["modules"])
    if missing:
        return _row("env", s, skipped=f"missing {', '.join(missing)}")
    import numpy as np

    envs = [make_env(s) for _ in range(s["num_envs"])]
    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
    rng = np.random.default_rng(seed)
    returns: list[float] = []
    running = [0.0] * len(envs)

    def iteration() -> int:
        agent_steps = 0
        for _ in range(s["rollout_fragment_length"]):
            for i, env in enumerate(envs):
                actions = {a: int(rng.integers(env.action_space(a).n)) for a in env.agents}
                _, rewards, terms, truncs, _ = env.step(actions)
                agent_steps += len(actions)
                running[i] += float(sum(rewards.values()))
                if not env.agents:
                    returns.append(running[i])
                    running[i] = 0.0
                    env.reset()
        return agent_steps

    iteration()
    start = _now()
    done = sum(iteration() for _ in range(iters))
    wall, cpu = _since(start)
    recent = returns[-100:]
    ret = sum(recent) / len(recent) if recent else math.nan
    return _timed("env", s, iters, wall, cpu, done, ret)


def run_rlblocks(
    s: dict[str, Any], iters: int, seed: int, threads: int, framework: str = "rlblocks"
) -> dict[str, Any]:
    """rlblocks' native multi-agent PPO; one warm-up iteration, then ``iters`` timed."""
    missing = _missing(s["modules"])
    if missing:
        return _row(framework, s, skipped=f"missing {', '.join(missing)}")
    import rlblocks.train

    trainer_cls = getattr(rlblocks.train, "MultiAgentPPOTrainer", None)
    if trainer_cls is None:
        return _row(framework, s, skipped="rlblocks.train has no MultiAgentPPOTrainer")
    config = {
        "env": s["env_id"],
        "env_config": env_config(s),
        "num_envs": s["num_envs"],
        "train_batch_size": env_steps_per_iter(s),
        "rollout_fragment_length": s["rollout_fragment_length"],
        "sgd_minibatch_size": s["minibatch"],
        "num_sgd_iter": s["epochs"],
        "lr": s["lr"],
        "gamma": s["gamma"],
        "lambda": s["lambda"],
        "clip_param": s["clip_param"],
        "vf_clip_param": None,
        "vf_loss_coeff": s["vf_loss_coeff"],
        "entropy_coeff": s["entropy_coeff"],
        "kl_coeff": 0.0,
        "grad_clip": s["grad_clip"],
        "model": {
            "fcnet_hiddens": list(s["hiddens"]),
            "fcnet_activation": "tanh",
            "vf_share_layers": False,
        },
        "multiagent": {"policy_mapping": "shared"},
        "num_threads": threads,
        "seed": seed,
    }
    if framework == "rlblocks_workers":
        config["num_env_workers"] = s["env_workers"]
    trainer = trainer_cls(config)
    try:
        result = trainer.train()
        before = float(result["agent_timesteps_total"])
        start = _now()
        for _ in range(iters):
            result = trainer.train()
        wall, cpu = _since(start)
        done = float(result["agent_timesteps_total"]) - before
        ret = float(result.get("episode_return_mean", math.nan))
    finally:
        trainer.close()
    row = _timed(framework, s, iters, wall, cpu, done, ret)
    if framework == "rlblocks_workers":
        row["env_workers"] = s["env_workers"]
    return row


def _rllib_agent_steps(env_runners: dict[str, Any]) -> float:
    """Lifetime agent steps sampled (RLlib reports them per agent id)."""
    steps = env_runners["num_agent_steps_sampled_lifetime"]
    return float(sum(steps.values()) if isinstance(steps, dict) else steps)


def run_rllib(s: dict[str, Any], iters: int, seed: int, threads: int) -> dict[str, Any]:
    """RLlib's multi-agent PPO with its default module, one module shared by all agents."""
    missing = _missing(["ray", *s["modules"]])
    if missing:
        return _row("rllib", s, skipped=f"missing {', '.join(missing)} in {sys.executable}")
    import ray
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
    from ray.tune.registry import register_env

    torch.set_num_threads(threads)
    register_env("bench_multiagent", lambda cfg: ParallelPettingZooEnv(make_env(s)))
    roles = sorted({a.split("_")[0] for a in make_env(s).possible_agents})
    shared = s["case"] == "simple_spread"  # the default module takes one space per module
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    config = (
        PPOConfig()
        .environment("bench_multiagent", env_config=env_config(s))
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=s["num_envs"],
            rollout_fragment_length=s["rollout_fragment_length"],
        )
        .multi_agent(
            policies={"shared"} if shared else set(roles),
            policy_mapping_fn=lambda agent_id, episode, **kwargs: (
                "shared" if shared else agent_id.split("_")[0]
            ),
        )
        .training(
            train_batch_size_per_learner=env_steps_per_iter(s),  # env steps (count_steps_by)
            minibatch_size=s["minibatch"],  # rows of the module's batch: agent steps
            num_epochs=s["epochs"],
            lr=s["lr"],
            gamma=s["gamma"],
            lambda_=s["lambda"],
            clip_param=s["clip_param"],
            vf_clip_param=math.inf,
            vf_loss_coeff=s["vf_loss_coeff"],
            entropy_coeff=s["entropy_coeff"],
            use_kl_loss=False,
            kl_coeff=0.0,
            grad_clip=s["grad_clip"],
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=list(s["hiddens"]),
                fcnet_activation="tanh",
                vf_share_layers=False,
            )
        )
        .debugging(seed=seed)
        .experimental(_validate_config=shared)  # it compares env- with agent-step batches
    )
    algo = config.build_algo()
    try:
        result = algo.train()
        before = _rllib_agent_steps(result["env_runners"])
        start = _now()
        for _ in range(iters):
            result = algo.train()
        wall, cpu = _since(start)
        done = _rllib_agent_steps(result["env_runners"]) - before
        ret = float(result["env_runners"].get("episode_return_mean", math.nan))
    finally:
        algo.stop()
        ray.shutdown()
    row = _timed("rllib", s, iters, wall, cpu, done, ret)
    row["version"] = f"ray {ray.__version__}"
    return row


def run_sb3(s: dict[str, Any], iters: int, seed: int, threads: int) -> dict[str, Any]:
    """SB3 PPO on SuperSuit's vectorised PettingZoo env (each agent a vector entry)."""
    missing = _missing(["stable_baselines3", "supersuit", *s["modules"]])
    if missing:
        return _row("sb3", s, skipped=f"missing {', '.join(missing)}")
    if s["case"] != "simple_spread":
        return _row("sb3", s, skipped="SuperSuit's vector env needs equal agent spaces")
    import numpy as np
    import stable_baselines3
    import supersuit
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.utils import set_random_seed
    from stable_baselines3.common.vec_env import VecMonitor

    torch.set_num_threads(threads)
    set_random_seed(seed)
    env = make_env(s)
    venv = supersuit.pettingzoo_env_to_vec_env_v1(env)
    venv = supersuit.concat_vec_envs_v1(
        venv, s["num_envs"], num_cpus=0, base_class="stable_baselines3"
    )
    venv.venv.reset(seed=seed)  # PPO(seed=...) fails: ConcatVecEnv has no seed()
    monitored = VecMonitor(venv)
    hiddens = list(s["hiddens"])
    model = PPO(
        "MlpPolicy",
        monitored,
        n_steps=s["rollout_fragment_length"],
        batch_size=sb3_minibatch(s),
        n_epochs=s["epochs"],
        learning_rate=s["lr"],
        gamma=s["gamma"],
        gae_lambda=s["lambda"],
        clip_range=s["clip_param"],
        clip_range_vf=None,
        vf_coef=s["vf_loss_coeff"],
        ent_coef=s["entropy_coeff"],
        max_grad_norm=s["grad_clip"],
        policy_kwargs={"net_arch": {"pi": hiddens, "vf": hiddens}, "activation_fn": torch.nn.Tanh},
        device="cpu",
        verbose=0,
    )
    per_iter = s["rollout_fragment_length"] * sb3_vec_envs(s)
    try:
        model.learn(total_timesteps=per_iter)
        before = model.num_timesteps
        start = _now()
        model.learn(total_timesteps=iters * per_iter, reset_num_timesteps=False)
        wall, cpu = _since(start)
        done = model.num_timesteps - before
        returns = [float(ep["r"]) for ep in model.ep_info_buffer or []]
        ret = float(np.mean(returns)) * s["n_agents"] if returns else math.nan
    finally:
        monitored.close()
    row = _timed("sb3", s, iters, wall, cpu, done, ret)
    row["version"] = f"sb3 {stable_baselines3.__version__}, supersuit {_version('supersuit')}"
    return row


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


WORKERS = {
    "env": run_env,
    "rlblocks": run_rlblocks,
    "rlblocks_workers": functools.partial(run_rlblocks, framework="rlblocks_workers"),
    "rllib": run_rllib,
    "sb3": run_sb3,
}


# --------------------------------------------------------------------------------------------
# the driver


def ray_python(given: str | None) -> str:
    """The RLlib worker's interpreter: ``given``, else the Ray venv's if it exists, or ours."""
    if given:
        return given
    return DEFAULT_RAY_PYTHON if os.path.exists(DEFAULT_RAY_PYTHON) else sys.executable


def launch(
    framework: str, python: str, args: argparse.Namespace, s: dict[str, Any]
) -> dict[str, Any]:
    """Runs one framework's worker in a subprocess and returns its row (or a skip row)."""
    if not os.path.exists(python):
        return _row(framework, s, skipped=f"no interpreter at {python}")
    cmd = [python, str(Path(__file__).resolve()), "--worker", framework]
    cmd += ["--iters", str(args.iters), "--seed", str(args.seed), "--threads", str(args.threads)]
    cmd += ["--case", args.case, "--env-workers", str(args.env_workers)]
    if args.quick:
        cmd.append("--quick")
    print(f"# {framework}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return _row(framework, s, skipped=f"timed out after {args.timeout} s")
    rows = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not rows:
        tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:]
        reason = tail[0] if tail else "no output"
        return _row(framework, s, skipped=f"worker failed (exit {proc.returncode}): {reason}")
    row: dict[str, Any] = json.loads(rows[-1])
    return row


def _rate(rows: list[dict[str, Any]], framework: str) -> float | None:
    return next(
        (
            r["agent_steps_per_s"]
            for r in rows
            if r["framework"] == framework and "skipped" not in r
        ),
        None,
    )


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Adds to each timed framework row its agent steps/s relative to RLlib's (``vs_rllib``)
    and the milliseconds per iteration it spends outside the env (``non_env_ms_per_iter``:
    its time per iteration minus the env-alone row's for the same steps).

    Examples:
        >>> rows = [{"framework": "env", "agent_steps_per_s": 12000.0},
        ...         {"framework": "rllib", "agent_steps_per_s": 2000.0,
        ...          "agent_steps_per_iter": 3000},
        ...         {"framework": "rlblocks", "agent_steps_per_s": 6000.0,
        ...          "agent_steps_per_iter": 3000},
        ...         {"framework": "sb3", "skipped": "missing supersuit"}]
        >>> add_ratios(rows)
        >>> [r.get("vs_rllib") for r in rows], [r.get("non_env_ms_per_iter") for r in rows]
        ([None, 1.0, 3.0, None], [None, 1250.0, 250.0, None])
    """
    base, env = _rate(rows, "rllib"), _rate(rows, "env")
    for r in rows:
        if "skipped" in r or r["framework"] == "env":
            continue
        if base:
            r["vs_rllib"] = r["agent_steps_per_s"] / base
        if env:
            own = 1.0 / r["agent_steps_per_s"] - 1.0 / env
            r["non_env_ms_per_iter"] = own * r["agent_steps_per_iter"] * 1e3


COLUMNS: list[Column] = [
    ("method", "method", "<30"),
    ("envs", "num_envs", ">4"),
    ("iters", "iters", ">5"),
    ("agent steps", "agent_steps", ">11,"),
    ("wall s", "wall_s", ">7.2f"),
    ("agent steps/s", "agent_steps_per_s", ">13,.0f"),
    ("per CPU s", "agent_steps_per_cpu_s", ">9,.0f"),
    ("non-env ms/iter", "non_env_ms_per_iter", ">14.0f"),
    ("vs RLlib", lambda r: f"{r['vs_rllib']:.2f}x" if "vs_rllib" in r else None, ">8"),
    ("return", "episode_return_mean", ">7.1f"),
    ("note", lambda r: f"skipped: {r['skipped']}" if "skipped" in r else "", "<"),
]


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Runs the chosen frameworks, prints JSON lines and the table; returns the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 timed iteration, tiny settings")
    parser.add_argument("--iters", type=int, default=5, help="timed iterations (default 5)")
    parser.add_argument("--frameworks", nargs="+", default=list(FRAMEWORKS), choices=FRAMEWORKS)
    parser.add_argument("--case", choices=sorted(CASES), default="simple_spread")
    parser.add_argument("--env-workers", type=int, default=2, help="rlblocks_workers' processes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (every framework)")
    parser.add_argument(
        "--ray-python",
        metavar="PATH",
        help=f"interpreter with Ray for the RLlib run (default {DEFAULT_RAY_PYTHON} if it "
        "exists, else this one)",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per framework")
    parser.add_argument("--json", metavar="FILE", help="also write the JSON lines to FILE")
    parser.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.iters = 1
    if args.iters < 1:
        parser.error(f"--iters must be >= 1, got {args.iters}")
    s = settings(args.quick, args.case, args.env_workers)
    if args.worker:
        emit(WORKERS[args.worker](s, args.iters, args.seed, args.threads))
        return []
    rows = []
    for framework in args.frameworks:
        python = ray_python(args.ray_python) if framework == "rllib" else sys.executable
        row = launch(framework, python, args, s)
        if "skipped" in row:
            print(f"# {framework}: skipped: {row['skipped']}", file=sys.stderr, flush=True)
        rows.append(row)
    add_ratios(rows)
    for row in rows:
        emit(row)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in rows)
    steps = env_steps_per_iter(s)
    print(
        f"\n{s['case']} ({s['n_agents']} agents), {s['num_envs']} envs x "
        f"{s['rollout_fragment_length']} steps = {steps * s['n_agents']} agent steps/iter, "
        f"minibatch {s['minibatch']}, "
        f"{s['epochs']} epochs, {args.threads} torch thread(s)"
    )
    print(format_rows(rows, COLUMNS))
    return rows


if __name__ == "__main__":
    main()
