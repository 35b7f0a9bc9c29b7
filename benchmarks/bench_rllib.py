"""rlblocks inside RLlib against RLlib's own pieces, same process, same run (needs the ray extra).

1. ``connector``: microseconds per env step to turn the newest nested-Dict observation of B
   episodes into the flat model input: rlblocks' ``FlattenObservationsBatched`` (one C++
   ``transform_batch`` call for all episodes) vs RLlib's ``FlattenObservations`` (one
   Python flatten per episode). The cost of putting the raw observations back into the
   episodes before each call is measured alone and subtracted from both.
2. ``sampling``: env steps per second of one local env runner on rlblocks/DictCartPole-v0
   (a nested Dict observation), 8 envs, the same [64, 64] tanh policy: RLlib's
   ``SingleAgentEnvRunner`` with RLlib's pieces (``FlattenObservations``, its default
   module), the same runner with rlblocks' module and connector, rlblocks'
   ``VectorEnvRunner`` with them, the bare gymnasium vector env stepped with random actions
   (issue 23's yardstick), and the sub-envs alone stepped in a loop (the true floor:
   ``VectorEnvRunner`` steps the sub-envs itself and batches their observations in C++,
   so it skips the vector env's own batching and copies). Then the same on a nested-Dict
   env per action head (MultiDiscrete, Tuple(Discrete, Box), masked Discrete): RLlib's
   runner and ``VectorEnvRunner``, both with rlblocks' module and connector, and the bare
   vector env.
3. ``speed`` (``--speed``): RLlib PPO on CartPole-v1 (8 envs, batch 2048, minibatch 64, 10
   epochs, [64, 64] tanh, separate value layers): env steps/s of RLlib's default stack,
   of rlblocks' pieces (module, connector, ``VectorEnvRunner``,
   ``RLBlocksPPOTorchLearner``: what ``rlblocks train --backend rllib`` builds) and of
   rlblocks' native trainer; and DQN / SAC on RLlib with ``bench_qlearning``'s settings
   (one torch thread): RLlib's stack, rlblocks' module and connector in RLlib's runner,
   buffer and learner (issue 23's baseline), and what ``--backend rllib`` builds
   (``VectorEnvRunner``, ``RLBlocksDQN`` / ``RLBlocksSAC`` with the replay on arrays, the
   fused-optimizer learners), env steps/s over fixed iterations once the updates started.
4. ``ppo`` (``--ppo``): RLlib PPO to a mean return of 150 on CartPole-v1 and on
   rlblocks/DictCartPole-v0 (a nested Dict observation), RLlib's default module and
   connectors vs ``RLBlocksRLModule`` + ``env_to_module``: env steps and wall seconds.
5. ``scaling`` (``--scaling``): RLlib PPO steps/s with 1 vs 2 env runners on an env whose
   step costs ~1 ms of CPU.

Usage: ``python benchmarks/bench_rllib.py [--quick] [--speed] [--ppo] [--scaling]
[--seeds N] [--heads] [--repeats N] [--rllib-steps N]`` (``--heads``: the per-head rows
alone, ``--repeats`` rounds of them, medians).
Prints one JSON object per row, then a table.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box, Dict, Discrete, MultiDiscrete, Tuple

try:
    import ray
    from ray.rllib.connectors.env_to_module import FlattenObservations
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode
except ImportError:
    sys.exit('bench_rllib.py needs Ray: pip install "rlblocks[ray]"')

from _harness import emit, format_rows, median
from rlblocks.benchmarking.harness import Result, measure, report
from rlblocks.rllib import (
    FlattenObservationsBatched,
    VectorEnvRunner,
    env_to_module,
    rl_module_spec,
)

NESTED = Dict(
    {
        "a": Discrete(5),
        "b": Box(-1, 1, (16,)),
        "c": Dict({"d": MultiDiscrete([3, 4, 5]), "e": Box(-1, 1, (3, 4))}),
        "f": Tuple((Discrete(2), Box(-1, 1, (8,)))),
    }
)


def _episodes(batch: int) -> tuple[list[Any], list[Any]]:
    NESTED.seed(0)
    raw = [NESTED.sample() for _ in range(batch)]
    eps = []
    for o in raw:
        ep = SingleAgentEpisode(observation_space=NESTED, action_space=Discrete(2))
        ep.add_env_reset(observation=o)
        eps.append(ep)
    return eps, raw


def connector_rows(batches: list[int], min_time: float) -> list[Result]:
    rows: list[Result] = []
    ours = FlattenObservationsBatched(NESTED, Discrete(2))
    theirs = FlattenObservations(input_observation_space=NESTED, input_action_space=Discrete(2))
    for b in batches:
        eps, raw = _episodes(b)

        def reset(eps: list[Any] = eps, raw: list[Any] = raw) -> None:
            for ep, o in zip(eps, raw, strict=True):
                ep.set_observations(at_indices=-1, new_data=o)

        def call(piece: Any, eps: list[Any] = eps) -> None:
            reset()
            piece(rl_module=None, batch={}, episodes=eps, explore=True, shared_data={})

        # both give the same flat vectors (rlblocks follows RLlib's layout)
        call(ours)
        mine = np.stack([ep.get_observations(-1) for ep in eps])
        call(theirs)
        np.testing.assert_allclose(mine, np.stack([ep.get_observations(-1) for ep in eps]))
        base = measure(
            "connector: write-back only", "reset", reset, b, batch=b, min_time=min_time
        ).us_per_item
        for method, piece in (
            ("rlblocks FlattenObservationsBatched", ours),
            ("RLlib FlattenObservations", theirs),
        ):
            r = measure(
                "connector: nested Dict -> flat",
                method,
                lambda p=piece: call(p),
                b,
                batch=b,
                min_time=min_time,
            )
            gross = r.us_per_item
            r.us_per_item = max(gross - base, 1e-9)
            r.items_per_s = 1e6 / r.us_per_item
            r.extra = {"us_per_item_with_write_back": gross, "write_back_us": base}
            rows.append(r)
    return rows


def _ppo(env: str, ours: bool, seed: int, target: float, max_steps: int) -> dict[str, Any]:
    import rlblocks.envs  # noqa: F401  (registers rlblocks/DictCartPole-v0)
    from ray.rllib.algorithms.ppo import PPOConfig

    env_id = f"rlblocks.envs:{env}" if env.startswith("rlblocks/") else env
    model = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": False}
    config = (
        PPOConfig()
        .environment(env_id)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=8)
        .training(train_batch_size_per_learner=2048, minibatch_size=256, num_epochs=6, lr=3e-4)
        .debugging(seed=seed)
    )
    if ours:
        config = config.rl_module(rl_module_spec=rl_module_spec(model)).env_runners(
            env_to_module_connector=env_to_module(model)
        )
    else:
        from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

        config = config.rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[64, 64], fcnet_activation="tanh", vf_share_layers=False
            )
        )
        if isinstance(gym.make(env_id).observation_space, Dict):
            config = config.env_runners(
                env_to_module_connector=lambda env, spaces, device: FlattenObservations()
            )
    algo = config.build_algo()
    start, steps, best = time.perf_counter(), 0, -np.inf
    try:
        while steps < max_steps and best < target:
            result = algo.train()
            steps = int(result["env_runners"]["num_env_steps_sampled_lifetime"])
            ret = result["env_runners"].get("episode_return_mean")
            if ret is not None and np.isfinite(ret):
                best = max(best, float(ret))
    finally:
        algo.stop()
    return {
        "steps": steps,
        "wall_s": time.perf_counter() - start,
        "reached": best >= target,
        "best_return": best,
    }


def ppo_rows(seeds: int, target: float = 150.0, max_steps: int = 200_000) -> list[dict]:
    rows = []
    for env in ("CartPole-v1", "rlblocks/DictCartPole-v0"):
        for ours in (False, True):
            runs = [_ppo(env, ours, s, target, max_steps) for s in range(seeds)]
            rows.append(
                {
                    "case": f"RLlib PPO to {target:g}: {env}",
                    "method": "rlblocks module + env_to_module" if ours else "RLlib defaults",
                    "seeds": seeds,
                    "reached": sum(r["reached"] for r in runs),
                    "median_steps": median(r["steps"] for r in runs),
                    "median_wall_s": median(r["wall_s"] for r in runs),
                    "steps_per_s": median(r["steps"] / r["wall_s"] for r in runs),
                }
            )
    return rows


class BusyEnv(gym.Env):
    """Four random observations, two actions, 100-step episodes; each step spins ~1 ms."""

    def __init__(self, config: dict | None = None):
        self.observation_space = Box(-1, 1, (4,), np.float32)
        self.action_space = Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), {}

    def step(self, action):
        end = time.perf_counter() + 0.001
        while time.perf_counter() < end:
            pass
        self.t += 1
        obs = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return obs, float(action == 1), False, self.t >= 100, {}


def scaling_rows(iters: int) -> list[dict]:
    from ray.rllib.algorithms.ppo import PPOConfig as RLlibPPO

    rows = []
    model = {"fcnet_hiddens": [64, 64]}
    rates = {}
    for runners in (1, 2):
        config = (
            RLlibPPO()
            .environment(BusyEnv)
            .rl_module(rl_module_spec=rl_module_spec(model))
            .env_runners(
                num_env_runners=runners,
                num_envs_per_env_runner=4 // runners,
                num_cpus_per_env_runner=0.75,
                env_to_module_connector=env_to_module(model),
            )
            .training(train_batch_size_per_learner=1000, minibatch_size=500, num_epochs=1)
        )
        rates[runners] = _steps_per_s(config.build_algo(), iters)
        rows.append(
            {
                "case": "RLlib PPO, 1 ms/step env, 4 envs in total",
                "method": f"{runners} env runner(s)",
                "steps_per_s": rates[runners],
                "ratio": rates[runners] / rates[1],
            }
        )
    return rows


#: The policy of the sampling and speed rows, for RLlib's module and rlblocks' alike.
POLICY = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": False}


def _rllib_model_config() -> Any:
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    return DefaultModelConfig(
        fcnet_hiddens=POLICY["fcnet_hiddens"],
        fcnet_activation=POLICY["fcnet_activation"],
        vf_share_layers=False,
    )


def sampling_rows(steps: int, env: str = "rlblocks/DictCartPole-v0", envs: int = 8) -> list[dict]:
    """Env steps/s of one local runner (``sample(num_timesteps=steps)``, after a warm-up)."""
    import rlblocks.envs  # noqa: F401  (registers the env)
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    def config(ours: bool) -> Any:
        c = (
            PPOConfig()
            .environment(env)
            .env_runners(num_env_runners=0, num_envs_per_env_runner=envs)
        )
        if ours:
            return c.rl_module(rl_module_spec=rl_module_spec(POLICY)).env_runners(
                env_to_module_connector=env_to_module(POLICY)
            )
        return c.rl_module(model_config=_rllib_model_config()).env_runners(
            env_to_module_connector=lambda env, spaces, device: FlattenObservations()
        )

    def rate(runner_cls: Any, ours: bool) -> float:
        runner = runner_cls(config=config(ours))
        try:
            runner.sample(num_timesteps=steps // 10)
            start = time.perf_counter()
            runner.sample(num_timesteps=steps)
            return steps / (time.perf_counter() - start)
        finally:
            runner.stop()

    vec = gym.make_vec(env, num_envs=envs, vectorization_mode="sync")
    vec.reset(seed=0)
    n = steps // envs
    start = time.perf_counter()
    for _ in range(n):
        vec.step(vec.action_space.sample())
    bare = n * envs / (time.perf_counter() - start)
    # the floor under any runner: the sub-envs stepped in a loop, nothing batched
    subs = [gym.make(env) for _ in range(envs)]
    for i, sub in enumerate(subs):
        sub.reset(seed=i)
    start = time.perf_counter()
    for _ in range(n):
        for sub, action in zip(subs, vec.action_space.sample(), strict=True):
            if any(sub.step(action)[2:4]):
                sub.reset()
    alone = n * envs / (time.perf_counter() - start)
    vec.close()
    measured = [
        ("SingleAgentEnvRunner + RLlib's pieces", rate(SingleAgentEnvRunner, False)),
        ("SingleAgentEnvRunner + rlblocks' pieces", rate(SingleAgentEnvRunner, True)),
        ("VectorEnvRunner + rlblocks' pieces", rate(VectorEnvRunner, True)),
        ("bare vector env, random actions", bare),
        ("sub-envs alone in a loop, random actions", alone),
    ]
    base = measured[0][1]
    return [
        {
            "case": f"sampling {env}, {envs} envs",
            "method": method,
            "steps_per_s": value,
            "vs_rllib": value / base,
            "vs_bare": value / bare,
        }
        for method, value in measured
    ]


class NestedActions(gym.Env):
    """A nested-Dict observation (DictCartPole's kind: a Discrete code and a Dict of Boxes)
    with the action head under test (``config["action"]``): ``"multidiscrete"``
    (MultiDiscrete([4, 2])), ``"tuple"`` (Tuple(Discrete(3), Box(-1, 1, (1,)))) or
    ``"masked"`` (Discrete(4) with RLlib's ``action_mask`` around the nested Dict);
    random observations, episodes of 20-40 steps, a reward for action 0."""

    def __init__(self, config: dict | None = None):
        self.kind = (config or {}).get("action", "multidiscrete")
        nested = Dict(
            {"code": Discrete(3), "inner": Dict({"noise": Box(-1, 1, (2,)), "v": Box(-1, 1, (3,))})}
        )
        self.action_space = {
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

    def _obs(self) -> Any:
        r = self.np_random
        nested = {
            "code": int(r.integers(3)),
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

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._left = int(self.np_random.integers(20, 41))
        return self._obs(), {}

    def step(self, action):
        self._left -= 1
        first = action[0] if isinstance(action, (tuple, np.ndarray)) else action
        return self._obs(), float(int(first) == 0), self._left <= 0, False, {}


def action_head_rows(
    steps: int, envs: int = 8, repeats: int = 1, rllib_steps: int | None = None
) -> list[dict]:
    """Env steps/s of one local runner on :class:`NestedActions` per action head: RLlib's
    ``SingleAgentEnvRunner`` and ``VectorEnvRunner``, both with rlblocks' module and
    connector (the same [64, 64] policy), and the bare vector env with random actions;
    torch's default threads (``VectorEnvRunner`` picks its own), and RLlib's runner once
    more with one torch thread set by the caller. ``repeats`` rounds, head by head in
    each (a busy machine slows every row alike), medians; RLlib's runner samples
    ``rllib_steps`` (default ``steps``) per measurement. A full garbage collection before
    each timed call (Ray's and torch's heap makes one cost about half of a 16k-step
    ``VectorEnvRunner`` call when it falls inside)."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    def rate(runner_cls: Any, config: Any, n: int) -> tuple[float, float]:
        """Env steps per wall second and per CPU second (the process's)."""
        runner = runner_cls(config=config)
        try:
            runner.sample(num_timesteps=max(n // 10, envs))
            gc.collect()  # no full collection of the heap left to fall into the timed call
            start, cpu = time.perf_counter(), time.process_time()
            runner.sample(num_timesteps=n)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            return n / wall, n / cpu
        finally:
            runner.stop()

    def bare_rate(kind: str) -> tuple[float, float]:
        vec = gym.vector.SyncVectorEnv([lambda k=kind: NestedActions({"action": k})] * envs)
        vec.reset(seed=0)
        n = steps // envs
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            vec.step(vec.action_space.sample())
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        vec.close()
        return n * envs / wall, n * envs / cpu

    threads = torch.get_num_threads()
    methods = (
        f"SingleAgentEnvRunner + rlblocks' pieces, {threads} torch threads",
        "SingleAgentEnvRunner + rlblocks' pieces, 1 torch thread",
        "VectorEnvRunner + rlblocks' pieces",
        "bare vector env, random actions",
    )
    kinds = ("multidiscrete", "tuple", "masked")
    measured: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(repeats):
        for kind in kinds:
            config = (
                PPOConfig()
                .environment(NestedActions, env_config={"action": kind})
                .rl_module(rl_module_spec=rl_module_spec(POLICY))
                .env_runners(
                    num_env_runners=0,
                    num_envs_per_env_runner=envs,
                    env_to_module_connector=env_to_module(POLICY),
                )
            )
            theirs_n = rllib_steps or steps
            got = [bare_rate(kind), rate(SingleAgentEnvRunner, config, theirs_n)]
            got.append(rate(VectorEnvRunner, config, steps))
            torch.set_num_threads(1)  # the caller's choice that VectorEnvRunner makes itself
            try:
                got.append(rate(SingleAgentEnvRunner, config, theirs_n))
            finally:
                torch.set_num_threads(threads)
            bare, theirs, ours, theirs_1 = got
            for method, value in zip(methods, (theirs, theirs_1, ours, bare), strict=True):
                measured.setdefault((kind, method), []).append(value)
    rows = []
    for kind in kinds:
        space = NestedActions({"action": kind}).action_space

        def med(method: str, i: int, kind: str = kind) -> float:
            return float(median(v[i] for v in measured[(kind, method)]))

        for method in methods:
            rows.append(
                {
                    "case": f"sampling nested Dict, {space}",
                    "method": method,
                    "repeats": repeats,
                    "steps_per_s": med(method, 0),
                    "vs_rllib": med(method, 0) / med(methods[0], 0),
                    "vs_bare": med(method, 0) / med(methods[3], 0),
                    # a loaded machine: the CPU-time figures move less
                    "steps_per_cpu_s": med(method, 1),
                    "vs_rllib_cpu": med(method, 1) / med(methods[0], 1),
                    "vs_bare_cpu": med(method, 1) / med(methods[3], 1),
                    "rounds_steps_per_cpu_s": [v[1] for v in measured[(kind, method)]],
                }
            )
    return rows


def _steps_per_s(algo: Any, iters: int, warmup_steps: int = 0) -> float:
    """Env steps/s over ``iters`` training iterations, after one warm-up iteration and any
    more until ``warmup_steps`` env steps were sampled (the updates have started)."""
    try:
        lifetime0 = int(algo.train()["env_runners"]["num_env_steps_sampled_lifetime"])
        while lifetime0 < warmup_steps:
            lifetime0 = int(algo.train()["env_runners"]["num_env_steps_sampled_lifetime"])
        start = time.perf_counter()
        for _ in range(iters):
            result = algo.train()
        done = int(result["env_runners"]["num_env_steps_sampled_lifetime"]) - lifetime0
        return done / (time.perf_counter() - start)
    finally:
        algo.stop()


def speed_rows(iters: int) -> list[dict]:
    """RLlib's stack vs rlblocks' pieces inside RLlib: PPO CartPole, DQN, SAC."""
    from ray.rllib.algorithms.ppo import PPOConfig as RLlibPPO
    from rlblocks.rllib.algo_config import build_algo_config
    from rlblocks.train import PPOConfig, PPOTrainer

    case = "PPO CartPole-v1, 8 envs, batch 2048, mb 64, 10 epochs"
    training = {"train_batch_size": 2048, "minibatch_size": 64, "num_epochs": 10, "lr": 3e-4}
    rllib = (
        RLlibPPO()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=8)
        .rl_module(model_config=_rllib_model_config())
        .training(**training)
        .learners(num_learners=0)
        .debugging(seed=0)
    )
    cfg = {
        "env": "CartPole-v1",
        "num_envs": 8,
        "train_batch_size": 2048,
        "sgd_minibatch_size": 64,
        "num_sgd_iter": 10,
        "lr": 3e-4,
        "model": POLICY,
        "seed": 0,
    }
    rates = {
        "RLlib's default stack": _steps_per_s(rllib.build_algo(), iters),
        "rlblocks' pieces in RLlib (--backend rllib)": _steps_per_s(
            build_algo_config(PPOConfig.from_dict(cfg)).build_algo(), iters
        ),
    }
    native = PPOTrainer(cfg)
    try:
        native.train()
        start, steps0 = time.perf_counter(), native.timesteps_total
        for _ in range(iters):
            native.train()
        rates["rlblocks native trainer"] = (native.timesteps_total - steps0) / (
            time.perf_counter() - start
        )
    finally:
        native.close()
    rows = [
        {"case": case, "method": m, "steps_per_s": v, "ratio": v / rates["RLlib's default stack"]}
        for m, v in rates.items()
    ]
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_qlearning import _rllib_config, module_in_rllib_config

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # bench_qlearning's default for every implementation
    for algo, n in (("DQN", 2 * iters), ("SAC", 3 * iters)):  # DQN: 1000 steps per iteration
        warmup = 1000 if algo == "DQN" else 500  # bench_qlearning's learning starts
        configs = {
            "RLlib's stack": _rllib_config(algo, False, 0),
            "rlblocks' module + connector in RLlib's runner/buffer": module_in_rllib_config(
                algo, 0
            ),
            "rlblocks (--backend rllib: VectorEnvRunner, replay on arrays)": _rllib_config(
                algo, True, 0
            ),
        }
        label = f"{algo} on RLlib, bench_qlearning settings"
        measured = {m: _steps_per_s(c.build_algo(), n, warmup) for m, c in configs.items()}
        base = measured["RLlib's stack"]
        rows += [
            {"case": label, "method": m, "steps_per_s": v, "ratio": v / base}
            for m, v in measured.items()
        ]
    torch.set_num_threads(threads)
    return rows


def _show(rows: list[dict], columns: list[tuple[Any, ...]]) -> None:
    """One JSON line per row, then the table."""
    for row in rows:
        emit(row)
    print("\n" + format_rows(rows, columns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer batch sizes, shorter runs")
    parser.add_argument("--ppo", action="store_true", help="also time PPO to 150")
    parser.add_argument(
        "--speed", action="store_true", help="also PPO / DQN / SAC steps/s on RLlib"
    )
    parser.add_argument(
        "--scaling",
        action="store_true",
        help="also 1 vs 2 env runners",
    )
    parser.add_argument("--seeds", type=int, default=3, help="PPO seeds per case")
    parser.add_argument(
        "--heads", action="store_true", help="only the per-action-head sampling rows"
    )
    parser.add_argument("--repeats", type=int, default=1, help="rounds of the per-head rows")
    parser.add_argument(
        "--rllib-steps", type=int, default=None, help="RLlib's runner's steps in the per-head rows"
    )
    args = parser.parse_args()
    batches = [8, 64] if args.quick else [1, 8, 64, 256]
    steps = 4000 if args.quick else 16000
    rows = []
    if not args.heads:
        report(connector_rows(batches, 0.05 if args.quick else 0.3))
        rows = sampling_rows(steps)
    rows += action_head_rows(steps, repeats=args.repeats, rllib_steps=args.rllib_steps)
    _show(
        rows,
        [
            ("case", "case", "<40"),
            ("method", "method", "<42"),
            ("steps/s", "steps_per_s", ">9,.0f"),
            ("vs RLlib", lambda r: f"{r['vs_rllib']:.2f}x", ">9"),
            ("vs bare env", lambda r: f"{r['vs_bare']:.2f}x", ">12"),
            ("per CPU s", lambda r: f"{r.get('steps_per_cpu_s', 0):,.0f}", ">10"),
            ("CPU vs bare", lambda r: f"{r.get('vs_bare_cpu', 0):.2f}x", ">12"),
        ],
    )
    if args.ppo or args.scaling or args.speed:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rates = [
        ("case", "case", "<56"),
        ("method", "method", "<44"),
        ("steps/s", "steps_per_s", ">9,.0f"),
        ("ratio", lambda r: f"{r['ratio']:.2f}x", ">7"),
    ]
    if args.speed:
        _show(speed_rows(2 if args.quick else 4), rates)
    if args.scaling:
        _show(scaling_rows(2 if args.quick else 4), rates)
    if args.ppo:
        rows = ppo_rows(1 if args.quick else args.seeds)
        _show(
            rows,
            [
                ("case", "case", "<44"),
                ("method", "method", "<32"),
                ("reached", lambda r: f"{r['reached']}/{r['seeds']}", ">8"),
                ("steps", "median_steps", ">9,.0f"),
                ("wall s", "median_wall_s", ">8.1f"),
                ("steps/s", "steps_per_s", ">8,.0f"),
            ],
        )


if __name__ == "__main__":
    main()
