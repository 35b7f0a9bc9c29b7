"""Q-learning to a target return: RLlib vs rlblocks inside RLlib vs Stable-Baselines3.

Measures the env steps and wall seconds each implementation needs to reach a mean episode
return of

* DQN on CartPole-v1: 150 (mean of the last 20 episodes),
* SAC on Pendulum-v1: -400 (mean of the last 5 episodes),

for four implementations, in the same process and run, one seed after the other:

1. ``rllib``: RLlib's new API stack with its own default RLModule and connectors
   (``fcnet_hiddens=[64, 64]``, tanh or ``--activation relu``, no extra head layers).
2. ``rlblocks-module-in-rllib``: ``rlblocks.rllib``'s module (``rl_module_spec(model,
   algo=...)``) and ``env_to_module(model)`` connector inside RLlib's own env runner,
   replay buffer, algorithm and learner: issue 23's starting point.
3. ``rlblocks-on-rllib``: the same RLlib algorithm config as ``rlblocks train --backend
   rllib`` builds it: that module and connector, ``VectorEnvRunner``, and ``RLBlocksDQN`` /
   ``RLBlocksSAC`` (replay on arrays) with ``RLBlocksDQNTorchLearner`` /
   ``RLBlocksSACTorchLearner`` (fused optimizer steps, in-place target updates, SAC's
   update in closed form).
4. ``sb3``: Stable-Baselines3's DQN / SAC with the same network sizes and, where SB3 has
   them, the same hyperparameters (learning rates, batch, buffer, learning starts, gamma,
   target updates, one gradient step per 4 (DQN) or 1 (SAC) env steps, epsilon schedule,
   n-step returns, gradient clipping). SB3's DQN has neither dueling heads nor double Q
   (RLlib's defaults, on here); the output says what else SB3 lacks.

Every run stops at the target or at its wall-time cap (DQN 240 s, SAC 300 s; ``--quick``:
90 s and 120 s, one seed) and reports whether it got there. RLlib reports its smoothed
return once per training iteration (1000 env steps for DQN, 100 for SAC); the SB3 callback
checks its own running mean (same window) at the same step counts, so both stop on the same
grid. Wall time is training only: building the algorithm / model is reported apart
(``build_s``). Every run uses the same number of torch threads (``--torch-threads``,
default 1: these networks are small, and two threads on a busy 2-core machine were several
times slower); each JSON line carries the 1-minute load average before and after the run,
so runs slowed by other work on the machine can be told apart. Ray and Stable-Baselines3 are
optional: an implementation whose package is missing is skipped with a note.

Usage: ``python benchmarks/bench_qlearning.py [--quick] [--seeds N]
[--torch-threads T] [--algos DQN,SAC]
[--impls rllib,rlblocks-module-in-rllib,rlblocks-on-rllib,sb3]``.
Prints one JSON object per run, then a table per algorithm and implementation (medians
over the runs that reached the target).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import deque
from typing import Any

import numpy as np
import torch
from _harness import emit, format_rows, median, skip_note

try:
    import ray
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.algorithms.sac import SACConfig
    from rlblocks.rllib import (
        RLBlocksDQN,
        RLBlocksDQNTorchLearner,
        RLBlocksSAC,
        RLBlocksSACTorchLearner,
        VectorEnvRunner,
        env_to_module,
        rl_module_spec,
    )
except ImportError:
    ray = None

try:
    import stable_baselines3 as sb3
    from stable_baselines3.common.callbacks import BaseCallback
except ImportError:
    sb3 = None

IMPLS = ("rllib", "rlblocks-module-in-rllib", "rlblocks-on-rllib", "sb3")
MODEL = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"}  # --activation sets it
RLLIB_MODEL = {**MODEL, "head_fcnet_hiddens": []}
ACTIVATIONS = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}


def set_activation(name: str) -> None:
    """The hidden activation of every implementation's network."""
    MODEL["fcnet_activation"] = RLLIB_MODEL["fcnet_activation"] = name


# algo -> (env, target return, smoothing window, env steps per RLlib iteration, caps in s)
TASKS: dict[str, dict[str, Any]] = {
    "DQN": {
        "env": "CartPole-v1",
        "target": 150.0,
        "window": 20,
        "iteration_steps": 1000,
        "cap_s": 240.0,
        "quick_cap_s": 90.0,
    },
    "SAC": {
        "env": "Pendulum-v1",
        "target": -400.0,
        "window": 5,
        "iteration_steps": 100,
        "cap_s": 300.0,
        "quick_cap_s": 120.0,
    },
}

# shared hyperparameters (the values the project's RLlib tests learn with)
DQN_HP = {
    "lr": 1e-3,
    "gamma": 0.99,
    "batch": 64,
    "n_step": 3,
    "target_update": 500,
    "eps_start": 1.0,
    "eps_end": 0.02,
    "eps_steps": 5000,
    "buffer": 50_000,
    "learning_starts": 1000,
    "rollout": 4,
    "grad_clip": 40.0,
}
SAC_HP = {
    "lr": 1e-3,
    "gamma": 0.99,
    "batch": 128,
    "tau": 0.01,
    "buffer": 50_000,
    "learning_starts": 500,
    "initial_alpha": 1.0,
}


# --- RLlib -----------------------------------------------------------------------------------
def _rllib_config(algo: str, ours: bool, seed: int) -> Any:
    task = TASKS[algo]
    if algo == "DQN":
        hp = DQN_HP
        config = (
            DQNConfig()
            .environment(task["env"])
            .env_runners(
                num_env_runners=0, num_envs_per_env_runner=1, rollout_fragment_length=hp["rollout"]
            )
            .training(
                lr=hp["lr"],
                gamma=hp["gamma"],
                train_batch_size_per_learner=hp["batch"],
                n_step=hp["n_step"],
                target_network_update_freq=hp["target_update"],
                epsilon=[(0, hp["eps_start"]), (hp["eps_steps"], hp["eps_end"])],
                replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": hp["buffer"]},
                num_steps_sampled_before_learning_starts=hp["learning_starts"],
                dueling=True,
                double_q=True,
            )
        )
    else:
        hp = SAC_HP
        config = (
            SACConfig()
            .environment(task["env"])
            .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
            .training(
                actor_lr=hp["lr"],
                critic_lr=hp["lr"],
                alpha_lr=hp["lr"],
                gamma=hp["gamma"],
                tau=hp["tau"],
                train_batch_size_per_learner=hp["batch"],
                replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": hp["buffer"]},
                num_steps_sampled_before_learning_starts=hp["learning_starts"],
                twin_q=True,
                initial_alpha=hp["initial_alpha"],
            )
        )
    config = (
        config.learners(num_learners=0)
        .reporting(min_time_s_per_iteration=0, metrics_num_episodes_for_smoothing=task["window"])
        .debugging(seed=seed)
    )
    if ours:
        config.algo_class = RLBlocksDQN if algo == "DQN" else RLBlocksSAC
        learner = RLBlocksDQNTorchLearner if algo == "DQN" else RLBlocksSACTorchLearner
        config = config.learners(learner_class=learner)
        return config.rl_module(rl_module_spec=rl_module_spec(MODEL, algo=algo)).env_runners(
            env_to_module_connector=env_to_module(MODEL), env_runner_cls=VectorEnvRunner
        )
    return config.rl_module(model_config=RLLIB_MODEL)


def module_in_rllib_config(algo: str, seed: int) -> Any:
    """rlblocks' module and connector in RLlib's own runner, buffer, algorithm and learner
    (issue 23's starting point)."""
    from ray.rllib.algorithms.dqn import DQN
    from ray.rllib.algorithms.sac import SAC
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    config = _rllib_config(algo, True, seed).env_runners(env_runner_cls=SingleAgentEnvRunner)
    config.algo_class = DQN if algo == "DQN" else SAC
    config._learner_class = None
    return config


def run_rllib(algo: str, impl: str, seed: int, cap_s: float) -> dict[str, Any]:
    target = TASKS[algo]["target"]
    t0 = time.perf_counter()
    if impl == "rlblocks-module-in-rllib":
        config = module_in_rllib_config(algo, seed)
    else:
        config = _rllib_config(algo, impl == "rlblocks-on-rllib", seed)
    trainer = config.build_algo()
    build_s = time.perf_counter() - t0
    start, steps, ret = time.perf_counter(), 0, float("nan")
    try:
        while time.perf_counter() - start < cap_s:
            runners = trainer.train()["env_runners"]
            steps = int(runners.get("num_env_steps_sampled_lifetime", steps))
            value = runners.get("episode_return_mean")
            if value is not None and np.isfinite(value):
                ret = float(value)
                if ret >= target:
                    break
    finally:
        wall = time.perf_counter() - start
        trainer.stop()
    return {
        "reached": bool(ret >= target),
        "steps": steps,
        "wall_s": wall,
        "final_return": ret,
        "build_s": build_s,
    }


# --- Stable-Baselines3 -----------------------------------------------------------------------
def sb3_dqn_takes_n_steps() -> bool:
    import inspect

    return "n_steps" in inspect.signature(sb3.DQN.__init__).parameters


def _sb3_model(algo: str, seed: int, total: int) -> Any:
    import gymnasium as gym

    env = gym.make(TASKS[algo]["env"])
    arch = {"net_arch": [64, 64], "activation_fn": ACTIVATIONS[MODEL["fcnet_activation"]]}
    if algo == "DQN":
        hp = DQN_HP
        extra = {"n_steps": hp["n_step"]} if sb3_dqn_takes_n_steps() else {}
        return sb3.DQN(
            "MlpPolicy",
            env,
            learning_rate=hp["lr"],
            gamma=hp["gamma"],
            batch_size=hp["batch"],
            buffer_size=hp["buffer"],
            learning_starts=hp["learning_starts"],
            tau=1.0,
            target_update_interval=hp["target_update"],
            train_freq=hp["rollout"],
            gradient_steps=1,
            exploration_initial_eps=hp["eps_start"],
            exploration_final_eps=hp["eps_end"],
            exploration_fraction=hp["eps_steps"] / total,
            max_grad_norm=hp["grad_clip"],
            policy_kwargs=arch,
            seed=seed,
            device="cpu",
            **extra,
        )
    hp = SAC_HP
    return sb3.SAC(
        "MlpPolicy",
        env,
        learning_rate=hp["lr"],
        gamma=hp["gamma"],
        batch_size=hp["batch"],
        buffer_size=hp["buffer"],
        learning_starts=hp["learning_starts"],
        tau=hp["tau"],
        train_freq=1,
        gradient_steps=1,
        target_update_interval=1,
        ent_coef=f"auto_{hp['initial_alpha']}",
        target_entropy="auto",
        policy_kwargs=arch,
        seed=seed,
        device="cpu",
    )


def run_sb3(algo: str, seed: int, cap_s: float) -> dict[str, Any]:
    task = TASKS[algo]
    target, every = task["target"], task["iteration_steps"]

    class StopAtTarget(BaseCallback):
        """Keeps the last ``window`` episode returns; stops at the target or the cap."""

        def __init__(self) -> None:
            super().__init__()
            self.returns: deque[float] = deque(maxlen=task["window"])
            self.ret = float("nan")
            self.start = time.perf_counter()

        def _on_training_start(self) -> None:
            self.start = time.perf_counter()

        def _on_step(self) -> bool:
            for info in self.locals.get("infos", ()):
                if "episode" in info:  # added by SB3's Monitor wrapper at episode ends
                    self.returns.append(float(info["episode"]["r"]))
            if self.num_timesteps % every == 0 and self.returns:
                self.ret = float(np.mean(self.returns))
                if self.ret >= target:
                    return False
            return time.perf_counter() - self.start < cap_s

    total = 10_000_000  # never reached: the callback stops each run
    t0 = time.perf_counter()
    model = _sb3_model(algo, seed, total)
    callback = StopAtTarget()
    build_s = time.perf_counter() - t0
    model.learn(total_timesteps=total, callback=callback)
    wall = time.perf_counter() - callback.start
    model.env.close()
    return {
        "reached": bool(callback.ret >= target),
        "steps": int(model.num_timesteps),
        "wall_s": wall,
        "final_return": callback.ret,
        "build_s": build_s,
    }


# --- driver ----------------------------------------------------------------------------------
def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for algo in TASKS:
        for impl in IMPLS:
            mine = [r for r in runs if r["algo"] == algo and r["impl"] == impl]
            if not mine:
                continue
            done = [r for r in mine if r["reached"]]
            rows.append(
                {
                    "algo": algo,
                    "impl": impl,
                    "runs": len(mine),
                    "reached": len(done),
                    "median_steps": median([r["steps"] for r in done]),
                    "median_wall_s": median([r["wall_s"] for r in done]),
                    "steps_per_s": median([r["steps"] / r["wall_s"] for r in mine]),
                }
            )
    for row in rows:
        base = next((r for r in rows if r["algo"] == row["algo"] and r["impl"] == "rllib"), None)
        row["wall_vs_rllib"] = (
            row["median_wall_s"] / base["median_wall_s"]
            if base and base["median_wall_s"] and row["median_wall_s"]
            else None
        )
        module = next(
            (
                r
                for r in rows
                if r["algo"] == row["algo"] and r["impl"] == "rlblocks-module-in-rllib"
            ),
            None,
        )
        row["rate_vs_module"] = (
            row["steps_per_s"] / module["steps_per_s"] if module and module["steps_per_s"] else None
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, shorter time caps")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per implementation")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads for every run (default 1: small nets)",
    )
    parser.add_argument("--algos", default="DQN,SAC", help="comma-separated: DQN,SAC")
    parser.add_argument(
        "--activation",
        choices=sorted(ACTIVATIONS),
        default="tanh",
        help="hidden activation of every network (default tanh, RLlib's MODEL_DEFAULTS)",
    )
    parser.add_argument(
        "--impls", default=",".join(IMPLS), help="comma-separated subset of " + ",".join(IMPLS)
    )
    args = parser.parse_args()
    set_activation(args.activation)
    algos = [a.strip().upper() for a in args.algos.split(",") if a.strip()]
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    for name, known in (("algo", algos), ("impl", impls)):
        bad = sorted(set(known) - set(TASKS if name == "algo" else IMPLS))
        if bad:
            parser.error(f"unknown {name}(s): {', '.join(bad)}")
    seeds = range(1 if args.quick else args.seeds)

    if ray is None and set(impls) - {"sb3"}:
        print(skip_note(", ".join(i for i in impls if i != "sb3"), "rlblocks[ray]"))
        impls = [i for i in impls if i == "sb3"]
    if sb3 is None and "sb3" in impls:
        print(skip_note("sb3", "rlblocks[bench]"))
        impls = [i for i in impls if i != "sb3"]
    if not impls:
        return
    threads = args.torch_threads
    notes = [f"torch {torch.__version__}, {threads} torch thread(s), {os.cpu_count()} CPUs"]
    if ray is not None:
        notes.append(f"ray {ray.__version__}")
    if sb3 is not None:
        notes.append(f"stable-baselines3 {sb3.__version__}")
        if "sb3" in impls and "DQN" in algos:
            notes.append(
                "SB3 DQN: no dueling head, no double Q, "
                + (
                    f"{DQN_HP['n_step']}-step returns (n_steps)"
                    if sb3_dqn_takes_n_steps()
                    else "no n-step returns in this version (SB3 runs 1-step)"
                )
            )
    print("# " + "; ".join(notes))
    if set(impls) - {"sb3"}:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

    runs = []
    for algo in algos:
        cap = TASKS[algo]["quick_cap_s" if args.quick else "cap_s"]
        for impl in impls:
            for seed in seeds:
                torch.set_num_threads(threads)  # same torch threading for every run
                load = os.getloadavg()[0]
                if impl == "sb3":
                    result = run_sb3(algo, seed, cap)
                else:
                    result = run_rllib(algo, impl, seed, cap)
                run = {
                    "algo": algo,
                    "impl": impl,
                    "seed": seed,
                    "env": TASKS[algo]["env"],
                    "target": TASKS[algo]["target"],
                    "cap_s": cap,
                    **result,
                    "load_avg_1min": [round(load, 2), round(os.getloadavg()[0], 2)],
                }
                runs.append(run)
                emit(run)

    print(
        "\n"
        + format_rows(
            summarize(runs),
            [
                ("algo", "algo", "<4"),
                ("env", lambda r: TASKS[r["algo"]]["env"], "<12"),
                ("target", lambda r: TASKS[r["algo"]]["target"], ">7g"),
                ("impl", "impl", "<24"),
                ("reached", lambda r: f"{r['reached']}/{r['runs']}", ">8"),
                ("med steps", "median_steps", ">10,.0f"),
                ("med wall s", "median_wall_s", ">11.1f"),
                ("steps/s", "steps_per_s", ">8,.0f"),
                (
                    "wall/rllib",
                    lambda r: r["wall_vs_rllib"] and f"{r['wall_vs_rllib']:.2f}x",
                    ">11",
                ),
                (
                    "steps/s vs module-in-rllib",
                    lambda r: r["rate_vs_module"] and f"{r['rate_vs_module']:.2f}x",
                    ">27",
                ),
            ],
        )
    )
    print("(medians over the runs that reached the target; steps/s over all runs)")


if __name__ == "__main__":
    sys.exit(main())
