"""Off-policy training to a target return: rlblocks' native DQN / SAC / TD3 vs Stable-Baselines3.

Measures the env steps, wall seconds and CPU seconds each implementation needs to reach a
mean episode return of

* DQN on CartPole-v1: 150 (mean of the last 20 episodes),
* SAC and TD3 on Pendulum-v1: -400 (mean of the last 5 episodes),

(the targets, windows and hyperparameters of ``bench_qlearning.py``), for

1. ``rlblocks``: ``rlblocks.train.DQNTrainer`` / ``SACTrainer`` with SB3's algorithm (DQN
   with ``dueling=False, double_q=False``: SB3's DQN has neither) and SB3's initialisation
   (torch's default for every linear layer, :func:`use_torch_default_init`, where
   rlblocks' models draw RLlib's normc weights);
2. ``rlblocks-defaults`` (DQN only): the same with rlblocks' default dueling head and
   double Q;
3. ``rlblocks-autograd`` (SAC and TD3): ``rlblocks`` with the closed-form update declined
   (a no-op forward hook on the actor), so that the two update paths are timed side by side
   (``steps/cpu s``);
4. ``sb3``: Stable-Baselines3's DQN / SAC / TD3 (TD3: Gaussian action noise 0.1, target
   noise 0.2 clipped at 0.5, the actor every second update, Polyak 0.005);
5. ``rlblocks-on-rllib`` (not TD3): ``bench_qlearning.py``'s RLlib run with rlblocks' module and
   connector (RLlib's DQN with dueling and double Q, so compare it with
   ``rlblocks-defaults``), in the Ray venv's interpreter (``--ray-python``; skipped with a
   note when there is none).

Every implementation has the same network (DQN: two ReLU layers of 64, ``fcnet_hiddens`` /
``net_arch``; SAC: two of 256 for the actor and each critic) and the same hyperparameters:
learning rate, batch, buffer, ``learning_starts``, gamma, 3-step returns (DQN), Huber loss,
gradient clipping, target updates (DQN: a copy every 500 env steps; SAC: Polyak 0.01 every
step), one gradient step every 4 (DQN) or 1 (SAC) env steps, the epsilon schedule (1.0 to
0.02 over 5000 steps), SAC's initial alpha and automatic entropy target. Each run stops at
the target or at its wall-time cap; the return is checked on the same grid everywhere
(every 1000 env steps for DQN, 100 for SAC: one rlblocks / RLlib iteration; SB3's callback
checks its running mean at the same step counts). Wall time is training only (building is
``build_s``). Each run is its own subprocess with one torch thread (``--torch-threads``);
each JSON line carries the 1-minute load average before and after the run. The runs go
seed by seed, the implementations in turn, so that a machine whose speed drifts during the
run slows them alike.

A last row per implementation pair: Pong DQN throughput (``ALE/Pong-v5``, frameskip 1
emulator, sticky actions off, the DeepMind pipeline: noop 30, frame skip 4 with max-pool,
84x84 gray, 4 stacked frames; Nature CNN (rlblocks: its filters in RLlib's layout, the
512-unit layer a conv over the last 11x11 map); batch 32, one gradient step per 4 env steps):
rlblocks ``DQNTrainer({"env": "ALE/Pong-v5", "vector_mode": "native", ...})`` (plain Q head;
``rlblocks-defaults``: dueling, double Q) vs SB3's
``make_atari_env`` + ``VecFrameStack`` + ``CnnPolicy`` DQN, env steps/s over the steps after
``learning_starts`` (a report; no target).

Usage: ``python benchmarks/bench_offpolicy.py [--quick] [--seeds 5] [--algos DQN,SAC,TD3,PONG]
[--impls rlblocks,rlblocks-defaults,rlblocks-autograd,sb3,rlblocks-on-rllib] [--rllib-seeds N]
[--ray-python PATH] [--torch-threads 1]``. Prints one JSON object per run, then a table
(medians over the runs that reached the target; ``wall/sb3``: the median wall time over
SB3's; ``total/sb3``: the wall time of all the runs over SB3's, which with bimodal steps to
the target tells the expected cost where the median tells the typical run).

Examples:
    >>> cfg = rlblocks_config("DQN", "rlblocks", seed=0)
    >>> cfg["dueling"], cfg["double_q"], cfg["train_freq"], cfg["epsilon"]
    (False, False, 4, [[0, 1.0], [5000, 0.02]])
    >>> rlblocks_config("DQN", "rlblocks-defaults", seed=0)["dueling"]
    True
    >>> rows = ratio_rows([
    ...     {"algo": "DQN", "impl": "sb3", "runs": 2, "median_wall_s": 4.0, "total_wall_s": 20.0},
    ...     {"algo": "DQN", "impl": "rlblocks", "runs": 2, "median_wall_s": 1.0,
    ...      "total_wall_s": 4.0}])
    >>> rows[1]["wall_vs_sb3"], rows[1]["total_vs_sb3"]
    (0.25, 0.2)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _harness import available, emit, format_rows, median

IMPLS = ("rlblocks", "rlblocks-defaults", "rlblocks-autograd", "sb3", "rlblocks-on-rllib")
ALGOS = ("DQN", "SAC", "TD3", "PONG")
DEFAULT_RAY_PYTHON = "/work/venv-ray/bin/python"

# algo -> env, target, smoothing window, env steps between return checks, caps (s)
TASKS: dict[str, dict[str, Any]] = {
    "DQN": {
        "env": "CartPole-v1",
        "target": 150.0,
        "window": 20,
        "iteration_steps": 1000,
        "cap_s": 240.0,
        "quick_cap_s": 10.0,
        "hiddens": [64, 64],
    },
    "SAC": {
        "env": "Pendulum-v1",
        "target": -400.0,
        "window": 5,
        "iteration_steps": 100,
        "cap_s": 300.0,
        "quick_cap_s": 10.0,
        "hiddens": [256, 256],
    },
    "TD3": {
        "env": "Pendulum-v1",
        "target": -400.0,
        "window": 5,
        "iteration_steps": 100,
        "cap_s": 300.0,
        "quick_cap_s": 10.0,
        "hiddens": [256, 256],
    },
}

# the values of bench_qlearning.py (the project's RLlib tests learn with them)
DQN_HP: dict[str, Any] = {
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
    "train_freq": 4,
    "grad_clip": 40.0,
}
SAC_HP: dict[str, Any] = {
    "lr": 1e-3,
    "gamma": 0.99,
    "batch": 128,
    "tau": 0.01,
    "buffer": 50_000,
    "learning_starts": 500,
    "initial_alpha": 1.0,
}
# the TD3 paper's (and SB3's TD3 defaults, rl-zoo3's Pendulum noise), on SAC's batch/buffer
TD3_HP: dict[str, Any] = {
    "lr": 1e-3,
    "gamma": 0.99,
    "batch": 128,
    "tau": 0.005,
    "buffer": 50_000,
    "learning_starts": 500,
    "noise": 0.1,
    "policy_delay": 2,
    "target_noise": 0.2,
    "target_noise_clip": 0.5,
}
# Pong throughput: env steps collected before timing, then timed (quick: fewer)
PONG: dict[str, Any] = {
    "env_kwargs": {"frameskip": 1, "repeat_action_probability": 0.0},
    "batch": 32,
    "buffer": 20_000,
    "learning_starts": 2000,
    "timed_steps": 4000,
    "quick_learning_starts": 200,
    "quick_timed_steps": 200,
    "train_freq": 4,
    "lr": 1e-4,
    "target_update": 1000,
    # Nature CNN's filters in RLlib's layout ("same" padding but the last layer): 32 8x8/4,
    # 64 4x4/2, 64 3x3/1, then the 512-unit dense layer as a conv over the 11x11 map
    "model": {
        "dim": 84,
        "framestack": True,
        "conv_filters": [[32, [8, 8], 4], [64, [4, 4], 2], [64, [3, 3], 1], [512, [11, 11], 1]],
        "conv_activation": "relu",
    },
}


# --- rlblocks --------------------------------------------------------------------------------
def rlblocks_config(algo: str, impl: str, seed: int) -> dict[str, Any]:
    """The native trainer's config dict for ``algo`` (``DQN`` / ``SAC`` / ``TD3``)."""
    task = TASKS[algo]
    model = {"fcnet_hiddens": list(task["hiddens"]), "fcnet_activation": "relu"}
    common = {
        "env": task["env"],
        "seed": seed,
        "num_threads": None,  # the worker sets torch's threads
        "metrics_smoothing_episodes": task["window"],
        "timesteps_per_iteration": task["iteration_steps"],
        "model": model,
    }
    if algo == "DQN":
        hp = DQN_HP
        return {
            **common,
            "lr": hp["lr"],
            "gamma": hp["gamma"],
            "train_batch_size": hp["batch"],
            "n_step": hp["n_step"],
            "target_network_update_freq": hp["target_update"],
            "tau": 1.0,
            "epsilon": [[0, hp["eps_start"]], [hp["eps_steps"], hp["eps_end"]]],
            "replay_capacity": hp["buffer"],
            "learning_starts": hp["learning_starts"],
            "train_freq": hp["train_freq"],
            "gradient_steps": 1,
            "grad_clip": hp["grad_clip"],
            "td_error_loss_fn": "huber",
            "dueling": impl == "rlblocks-defaults",
            "double_q": impl == "rlblocks-defaults",
        }
    if algo == "TD3":
        hp = TD3_HP
        return {
            **common,
            "lr": hp["lr"],
            "gamma": hp["gamma"],
            "train_batch_size": hp["batch"],
            "tau": hp["tau"],
            "replay_capacity": hp["buffer"],
            "learning_starts": hp["learning_starts"],
            "train_freq": 1,
            "gradient_steps": 1,
            "policy_delay": hp["policy_delay"],
            "target_noise": hp["target_noise"],
            "target_noise_clip": hp["target_noise_clip"],
            "exploration_noise": "gaussian",
            "exploration_sigma": hp["noise"],
            "q_model": dict(model),
        }
    hp = SAC_HP
    return {
        **common,
        "lr": hp["lr"],
        "gamma": hp["gamma"],
        "train_batch_size": hp["batch"],
        "tau": hp["tau"],
        "target_network_update_freq": 1,
        "replay_capacity": hp["buffer"],
        "learning_starts": hp["learning_starts"],
        "train_freq": 1,
        "gradient_steps": 1,
        "initial_alpha": hp["initial_alpha"],
        "target_entropy": "auto",
        "grad_clip": None,
        "q_model": dict(model),
    }


def use_torch_default_init(trainer: Any, seed: int) -> None:
    """Re-initialises the trainer's networks as SB3's are: every ``nn.Linear`` with torch's
    own ``reset_parameters`` (rlblocks' models draw RLlib's normc weights and zero biases),
    drawn from ``seed`` without touching the generator the trainer explores with; the
    target networks become copies."""
    import torch

    learner = trainer.learner
    trained, targets = (
        ([learner.actor, learner.critics], [learner.target_critics])
        if hasattr(learner, "critics")  # SAC, TD3 (whose learner has a method q)
        else ([learner.q], [learner.target])
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        for net in trained:
            for module in net.modules():
                if isinstance(module, torch.nn.Linear):
                    module.reset_parameters()
    # the online critics (DQN: the Q-network) are the last trained network
    targets[0].load_state_dict(trained[-1].state_dict())
    if hasattr(learner, "target_actor"):  # TD3's
        learner.target_actor.load_state_dict(learner.actor.state_dict())


def run_rlblocks(algo: str, impl: str, seed: int, cap_s: float) -> dict[str, Any]:
    from rlblocks.train import DQNTrainer, SACTrainer, TD3Trainer

    target = TASKS[algo]["target"]
    t0 = time.perf_counter()
    trainer_class = {"DQN": DQNTrainer, "SAC": SACTrainer, "TD3": TD3Trainer}[algo]
    trainer = trainer_class(rlblocks_config(algo, impl, seed))
    if impl in ("rlblocks", "rlblocks-autograd"):
        use_torch_default_init(trainer, seed)
    if impl == "rlblocks-autograd":  # a no-op hook: the closed-form update declines
        trainer.learner.actor.register_forward_pre_hook(lambda module, args: None)
    build_s = time.perf_counter() - t0
    cpu = time.process_time()
    start, steps, ret = time.perf_counter(), 0, float("nan")
    try:
        while time.perf_counter() - start < cap_s:
            metrics = trainer.train()
            steps = int(metrics["timesteps_total"])
            ret = float(metrics["episode_return_mean"])
            if np.isfinite(ret) and ret >= target:
                break
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
    finally:
        trainer.close()
    return {
        "reached": bool(ret >= target),
        "steps": steps,
        "wall_s": wall,
        "cpu_s": cpu,
        "final_return": ret,
        "build_s": build_s,
    }


def run_rlblocks_pong(impl: str, quick: bool, seed: int) -> dict[str, Any]:
    from rlblocks.train import DQNTrainer

    starts = PONG["quick_learning_starts" if quick else "learning_starts"]
    timed = PONG["quick_timed_steps" if quick else "timed_steps"]
    t0 = time.perf_counter()
    trainer = DQNTrainer(
        {
            "env": "ALE/Pong-v5",
            "env_config": dict(PONG["env_kwargs"]),
            "vector_mode": "native",
            "seed": seed,
            "lr": PONG["lr"],
            "train_batch_size": PONG["batch"],
            "replay_capacity": PONG["buffer"],
            "learning_starts": starts,
            "train_freq": PONG["train_freq"],
            "target_network_update_freq": PONG["target_update"],
            "timesteps_per_iteration": 100,
            "dueling": impl == "rlblocks-defaults",
            "double_q": impl == "rlblocks-defaults",
            "model": dict(PONG["model"]),
        }
    )
    build_s = time.perf_counter() - t0
    try:
        while trainer.timesteps_total < starts:
            trainer.train()
        before = trainer.timesteps_total
        start = time.perf_counter()
        while trainer.timesteps_total < before + timed:
            trainer.train()
        wall = time.perf_counter() - start
        steps = trainer.timesteps_total - before
    finally:
        trainer.close()
    return {"steps": steps, "wall_s": wall, "steps_per_s": steps / wall, "build_s": build_s}


# --- Stable-Baselines3 -----------------------------------------------------------------------
def _sb3_model(algo: str, seed: int, total: int) -> Any:
    import gymnasium as gym
    import stable_baselines3 as sb3
    import torch

    env = gym.make(TASKS[algo]["env"])
    arch = {"net_arch": list(TASKS[algo]["hiddens"]), "activation_fn": torch.nn.ReLU}
    if algo == "DQN":
        hp = DQN_HP
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
            train_freq=hp["train_freq"],
            gradient_steps=1,
            n_steps=hp["n_step"],
            exploration_initial_eps=hp["eps_start"],
            exploration_final_eps=hp["eps_end"],
            exploration_fraction=hp["eps_steps"] / total,
            max_grad_norm=hp["grad_clip"],
            policy_kwargs=arch,
            seed=seed,
            device="cpu",
        )
    if algo == "TD3":
        from stable_baselines3.common.noise import NormalActionNoise

        hp, n = TD3_HP, env.action_space.shape[0]
        return sb3.TD3(
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
            policy_delay=hp["policy_delay"],
            target_policy_noise=hp["target_noise"],
            target_noise_clip=hp["target_noise_clip"],
            action_noise=NormalActionNoise(np.zeros(n), np.full(n, hp["noise"])),
            policy_kwargs=arch,
            seed=seed,
            device="cpu",
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
    from stable_baselines3.common.callbacks import BaseCallback

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
            self.cpu = time.process_time()

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
    cpu = time.process_time() - callback.cpu
    model.env.close()
    return {
        "reached": bool(callback.ret >= target),
        "steps": int(model.num_timesteps),
        "wall_s": wall,
        "cpu_s": cpu,
        "final_return": callback.ret,
        "build_s": build_s,
    }


def run_sb3_pong(quick: bool, seed: int) -> dict[str, Any]:
    import ale_py
    import gymnasium as gym
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    starts = PONG["quick_learning_starts" if quick else "learning_starts"]
    timed = PONG["quick_timed_steps" if quick else "timed_steps"]
    gym.register_envs(ale_py)
    t0 = time.perf_counter()
    env = VecFrameStack(
        make_atari_env("ALE/Pong-v5", n_envs=1, seed=seed, env_kwargs=dict(PONG["env_kwargs"])),
        n_stack=4,
    )
    model = sb3.DQN(
        "CnnPolicy",
        env,
        learning_rate=PONG["lr"],
        batch_size=PONG["batch"],
        buffer_size=PONG["buffer"],
        learning_starts=starts,
        train_freq=PONG["train_freq"],
        gradient_steps=1,
        target_update_interval=PONG["target_update"],
        optimize_memory_usage=False,
        seed=seed,
        device="cpu",
    )
    build_s = time.perf_counter() - t0
    model.learn(total_timesteps=starts)
    start = time.perf_counter()
    model.learn(total_timesteps=timed, reset_num_timesteps=False)
    wall = time.perf_counter() - start
    env.close()
    return {"steps": timed, "wall_s": wall, "steps_per_s": timed / wall, "build_s": build_s}


# --- rlblocks on RLlib (bench_qlearning.py's run, in the Ray venv) ---------------------------
def run_rllib(algo: str, seed: int, cap_s: float) -> dict[str, Any]:
    import bench_qlearning as q

    q.set_activation("relu")
    q.MODEL["fcnet_hiddens"] = q.RLLIB_MODEL["fcnet_hiddens"] = list(TASKS[algo]["hiddens"])
    q.DQN_HP.update({**DQN_HP, "rollout": DQN_HP["train_freq"]})
    q.SAC_HP.update(SAC_HP)
    q.ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        return q.run_rllib(algo, True, seed, cap_s)
    finally:
        q.ray.shutdown()


# --- driver ----------------------------------------------------------------------------------
def worker(impl: str, algo: str, seed: int, cap_s: float, quick: bool, threads: int) -> None:
    """One run in this process: prints its JSON line."""
    import torch

    torch.set_num_threads(threads)
    load = os.getloadavg()[0]
    if algo == "PONG":
        if impl == "sb3":
            result = run_sb3_pong(quick, seed)
        else:
            result = run_rlblocks_pong(impl, quick, seed)
    elif impl == "sb3":
        result = run_sb3(algo, seed, cap_s)
    elif impl == "rlblocks-on-rllib":
        result = run_rllib(algo, seed, cap_s)
    else:
        result = run_rlblocks(algo, impl, seed, cap_s)
    emit(
        {
            "algo": algo,
            "impl": impl,
            "seed": seed,
            "env": TASKS[algo]["env"] if algo in TASKS else "ALE/Pong-v5",
            "target": TASKS[algo]["target"] if algo in TASKS else None,
            "cap_s": cap_s if algo in TASKS else None,
            **result,
            "torch_threads": threads,
            "load_avg_1min": [round(load, 2), round(os.getloadavg()[0], 2)],
        }
    )


def launch(python: str, impl: str, algo: str, seed: int, args: argparse.Namespace) -> Any:
    """Runs one worker subprocess; its JSON row, or a skip note (a string)."""
    cap = TASKS[algo]["quick_cap_s" if args.quick else "cap_s"] if algo in TASKS else 0.0
    cmd = [python, str(Path(__file__).resolve()), "--worker", impl, "--algos", algo]
    cmd += ["--seed", str(seed), "--cap", str(cap), "--torch-threads", str(args.torch_threads)]
    if args.quick:
        cmd.append("--quick")
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=cap + args.timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return f"{impl} {algo} seed {seed}: timed out"
    rows = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not rows:
        tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:]
        return f"{impl} {algo} seed {seed}: worker failed (exit {proc.returncode}): " + (
            tail[0] if tail else "no output"
        )
    return json.loads(rows[-1])


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (algo, impl): medians over the runs that reached the target."""
    rows = []
    for algo in ALGOS:
        for impl in IMPLS:
            mine = [r for r in runs if r["algo"] == algo and r["impl"] == impl]
            if not mine:
                continue
            if algo == "PONG":
                rows.append(
                    {
                        "algo": algo,
                        "impl": impl,
                        "runs": len(mine),
                        "reached": None,
                        "median_steps": median([r["steps"] for r in mine]),
                        "median_wall_s": median([r["wall_s"] for r in mine]),
                        "steps_per_s": median([r["steps_per_s"] for r in mine]),
                    }
                )
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
                    "total_wall_s": sum(r["wall_s"] for r in mine),
                    "steps_per_s": median([r["steps"] / r["wall_s"] for r in mine]),
                    "steps_per_cpu_s": median([r["steps"] / r["cpu_s"] for r in mine]),
                }
            )
    return ratio_rows(rows)


def ratio_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adds ``wall_vs_sb3`` (median wall time over SB3's; Pong: SB3's steps/s over the
    row's, so below 1 is faster there too) and, where both rows have it, ``total_vs_sb3``
    (the wall time of all the runs, capped ones included, over SB3's: with the same seeds,
    the ratio of the mean wall times) to each row."""
    for row in rows:
        base = next((r for r in rows if r["algo"] == row["algo"] and r["impl"] == "sb3"), {})
        both = base.get("total_wall_s") and row.get("total_wall_s") and base["runs"] == row["runs"]
        row["total_vs_sb3"] = row["total_wall_s"] / base["total_wall_s"] if both else None
        key = "steps_per_s" if row["algo"] == "PONG" else "median_wall_s"
        if not (base.get(key) and row.get(key)):
            row["wall_vs_sb3"] = None
        elif row["algo"] == "PONG":
            row["wall_vs_sb3"] = base[key] / row[key]
        else:
            row["wall_vs_sb3"] = row[key] / base[key]
    return rows


def _env(algo: str) -> str:
    return str(TASKS[algo]["env"]) if algo in TASKS else "ALE/Pong-v5"


COLUMNS: list[Any] = [
    ("algo", "algo", "<4"),
    ("env", lambda r: _env(r["algo"]), "<12"),
    ("target", lambda r: TASKS[r["algo"]]["target"] if r["algo"] in TASKS else None, ">7g"),
    ("impl", "impl", "<18"),
    ("reached", lambda r: None if r["reached"] is None else f"{r['reached']}/{r['runs']}", ">8"),
    ("med steps", "median_steps", ">10,.0f"),
    ("med wall s", "median_wall_s", ">11.1f"),
    ("steps/s", "steps_per_s", ">8,.0f"),
    ("steps/cpu s", lambda r: r.get("steps_per_cpu_s"), ">12,.0f"),
    ("wall/sb3", lambda r: r["wall_vs_sb3"] and f"{r['wall_vs_sb3']:.2f}x", ">9"),
    ("total wall s", "total_wall_s", ">13.1f"),
    ("total/sb3", lambda r: r["total_vs_sb3"] and f"{r['total_vs_sb3']:.2f}x", ">10"),
]


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Runs the benchmark (or, with ``--worker``, one run); returns the summary rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, short caps (smoke)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 per implementation")
    parser.add_argument(
        "--rllib-seeds", type=int, help="seeds of the rlblocks-on-rllib runs (default --seeds)"
    )
    parser.add_argument(
        "--algos", default="DQN,SAC,TD3,PONG", help="comma-separated: DQN,SAC,TD3,PONG"
    )
    parser.add_argument("--impls", default=",".join(IMPLS), help="comma-separated subset")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch threads per run")
    parser.add_argument(
        "--ray-python",
        default=DEFAULT_RAY_PYTHON,
        help=f"interpreter with Ray for rlblocks-on-rllib (default {DEFAULT_RAY_PYTHON})",
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds a worker may take beyond its cap"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the JSON lines to FILE")
    parser.add_argument("--worker", choices=IMPLS, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--cap", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    algos = [a.strip().upper() for a in args.algos.split(",") if a.strip()]
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    for name, given, known in (("algo", algos, ALGOS), ("impl", impls, IMPLS)):
        bad = sorted(set(given) - set(known))
        if bad:
            parser.error(f"unknown {name}(s): {', '.join(bad)}; known: {', '.join(known)}")
    if args.worker:
        worker(args.worker, algos[0], args.seed, args.cap, args.quick, args.torch_threads)
        return []

    notes = [f"{args.torch_threads} torch thread(s), {os.cpu_count()} CPUs"]
    if not available("stable_baselines3") and "sb3" in impls:
        print('# sb3: skipped; pip install "rlblocks[bench]" to run this comparison')
        impls.remove("sb3")
    if "rlblocks-on-rllib" in impls and not os.path.exists(args.ray_python):
        print(f"# rlblocks-on-rllib: skipped; no Ray interpreter at {args.ray_python}")
        impls.remove("rlblocks-on-rllib")
    if "sb3" in impls:
        import stable_baselines3

        notes.append(
            f"stable-baselines3 {stable_baselines3.__version__}: DQN without dueling head "
            "or double Q (the 'rlblocks' row matches it; 'rlblocks-defaults' has both)"
        )
    if "rlblocks-on-rllib" in impls:
        notes.append(f"rlblocks-on-rllib: RLlib DQN (dueling, double Q) via {args.ray_python}")
    print("# " + "; ".join(notes), flush=True)
    if not impls:
        return []
    seeds = 1 if args.quick else args.seeds
    rllib_seeds = 1 if args.quick else (args.rllib_seeds or args.seeds)
    runs, skipped = [], []
    for algo in algos:
        # seed by seed, each implementation in turn: a machine whose speed drifts during
        # the run slows every implementation alike
        plan: list[tuple[str, int, str]] = []
        for impl in impls:
            if impl == "rlblocks-defaults" and algo in ("SAC", "TD3"):
                continue  # SAC and TD3 have one rlblocks variant
            if impl == "rlblocks-autograd" and algo not in ("SAC", "TD3"):
                continue  # the closed-form update against autograd: SAC's and TD3's
            if impl == "rlblocks-on-rllib" and algo in ("PONG", "TD3"):
                continue  # RLlib 2.60 has no TD3 on its new stack
            n = rllib_seeds if impl == "rlblocks-on-rllib" else seeds
            if algo == "PONG":
                n = 1
                if not available("ale_py"):
                    skipped.append(f"{impl} PONG: ale_py is not installed")
                    continue
            python = args.ray_python if impl == "rlblocks-on-rllib" else sys.executable
            plan += [(impl, seed, python) for seed in range(n)]
        for impl, seed, python in sorted(plan, key=lambda p: p[1]):
            row = launch(python, impl, algo, seed, args)
            if isinstance(row, str):
                print(f"# {row}", flush=True)
                skipped.append(row)
                continue
            runs.append(row)
            emit(row)
    rows = summarize(runs)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in runs)
    print("\n" + format_rows(rows, COLUMNS))
    print(
        "(medians over the runs that reached the target; steps/s over all runs; total wall "
        "s: all runs, capped ones included; PONG: env steps/s after learning_starts, "
        "wall/sb3 = SB3's steps/s over the row's)"
    )
    return rows


if __name__ == "__main__":
    main()
