"""The standard suites against rl-baselines3-zoo's published table (its benchmark.md).

Each row is a tuned config (``rlblocks tuned``) run through the CLI in a fresh process at no
more than the zoo's step budget, for several seeds, then a deterministic evaluation of the
final checkpoint (``rlblocks evaluate``, ``--episodes`` episodes). Optionally, per row, the
CLI's defaults (``rlblocks train --env ID --algo ALGO``, no tuned config) at the same budget,
and Stable-Baselines3 with the zoo's hyperparameters at the same budget (wall time of both
measured in the same invocation). Every run is one JSON line on stdout and one line appended
to the results file (``benchmarks/results/suites.jsonl``), so partial work counts; the table
(``--table`` or at the end) and ``--write-docs`` (the table in docs/benchmarks.md between its
markers) are made from that file, never by hand.

Usage::

    python benchmarks/bench_suites.py --rows cartpole_ppo,acrobot_dqn --seeds 0 1 2 [--sb3]
        [--defaults] [--episodes 10] [--results FILE] [--table] [--write-docs]

Examples:
    >>> ROWS["cartpole_dqn"].zoo_return, ROWS["cartpole_dqn"].budget
    (500.0, 50000)
    >>> summary([{"row": "x", "method": "tuned", "eval_mean": 1.0, "wall_s": 2.0, "steps": 10},
    ...          {"row": "x", "method": "tuned", "eval_mean": 3.0, "wall_s": 4.0, "steps": 20}])
    {('x', 'tuned'): {'mean': 2.0, 'std': 1.414, 'n': 2, 'wall_s': 3.0, 'steps': 15, 'cpu_s': None}}
    >>> scaled(-100.0, random=-500.0, tuned=-80.0)
    0.952
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "suites.jsonl"
DOCS = ROOT / "docs" / "benchmarks.md"
#: The tuned configs' copy of the table's figures, which ``rlblocks tuned`` shows.
TUNED_SUITES = ROOT / "python" / "rlblocks" / "train" / "tuned_configs" / "suites.json"
BEGIN, END = "<!-- bench_suites: begin -->", "<!-- bench_suites: end -->"


@dataclass(frozen=True)
class Row:
    """One line of the zoo's table and the tuned config that answers it.

    Attributes:
        tuned: The tuned config's name.
        env: The gymnasium id.
        algo: PPO, DQN, SAC or TD3.
        zoo_return: The zoo's published mean return (None: the zoo publishes none).
        zoo_budget: The zoo's step budget (0: the zoo has no entry for the env).
        budget: Steps run here (<= ``zoo_budget``).
        sb3: SB3 constructor arguments from the zoo's hyperparameter file (None: not compared).
        sb3_envs: Vectorised envs SB3 runs (the zoo's ``n_envs``).
        sb3_normalize: Whether the zoo wraps the env in ``VecNormalize``.
        sb3_wrapper: The zoo's ``env_wrapper`` as ``"module:Class"`` (empty: none).
        not_here: Why this machine does not run it (empty: it does).
        sb3_noise: The standard deviation of the zoo's Gaussian action noise for SB3's
            TD3 (``noise_type: normal``; None: no noise object).
        needs: A module the env needs beyond the core (``mujoco``: rlblocks' ``mujoco``
            extra); rows whose module is missing are left out of the default ``--rows``.
        tuned_is_defaults: The tuned config is the CLI's defaults for the env's spaces, key
            for key (``tests/test_train_defaults.py`` trains both and compares), so the
            defaults column is the tuned one where no ``--defaults`` run was recorded.
        to_budget: Train to the budget, the stop return lifted (MiniGrid: a training return
            of sampled actions past 0.9 says nothing of the greedy policy the deterministic
            evaluation runs, which can still turn in place until the step limit).
        sampled: Also evaluate with sampled actions (``rlblocks evaluate --explore``; SB3's
            ``deterministic=False``) beside the deterministic headline: rl_zoo3's own
            evaluation samples on MiniGrid (its ``enjoy.py``: stochastic for Atari and
            MiniGrid unless ``--deterministic``).
    """

    tuned: str
    env: str
    algo: str
    zoo_return: float | None
    zoo_budget: int
    budget: int
    sb3: dict[str, Any] | None = None
    sb3_envs: int = 1
    sb3_normalize: bool = False
    sb3_wrapper: str = ""
    not_here: str = ""
    sb3_noise: float | None = None
    needs: str = ""
    tuned_is_defaults: bool = False
    to_budget: bool = False
    sampled: bool = False

    @property
    def target(self) -> float:
        """The return the row must reach: the zoo's, or 0.9 (a solved MiniGrid grid) where
        the zoo publishes none."""
        return self.zoo_return if self.zoo_return is not None else 0.9


_DQN_ACROBOT = dict(learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0,
                    gamma=0.99, target_update_interval=250, train_freq=4, gradient_steps=-1,
                    exploration_fraction=0.12, exploration_final_eps=0.1,
                    policy_kwargs={"net_arch": [256, 256]})  # fmt: skip
_PPO_LUNAR = dict(n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999, n_epochs=4,
                  ent_coef=0.01)  # fmt: skip
_PPO_MINIGRID = dict(n_steps=128, batch_size=64, gae_lambda=0.95, gamma=0.99, n_epochs=10,
                     ent_coef=0.0, learning_rate=2.5e-4, clip_range=0.2)  # fmt: skip
_FLAT_MINIGRID = "minigrid.wrappers:FlatObsWrapper"


def _minigrid(
    name: str, env: str, zoo_budget: int, budget: int, tuned_is_defaults: bool = False
) -> Row:
    """A MiniGrid PPO row: no zoo return (0.9, a solved grid, is the target), SB3 with the
    zoo's MiniGrid settings (its ``&minigrid-defaults`` entry, which its DoorKey-5x5 and
    KeyCorridorS3R1 entries keep), trained to the budget, evaluated greedy and sampled."""
    return Row(name, env, "PPO", None, zoo_budget, budget, _PPO_MINIGRID, 8, True,
               _FLAT_MINIGRID, tuned_is_defaults=tuned_is_defaults, to_budget=True,
               sampled=True)  # fmt: skip


# rl-zoo3's td3.yml MuJoCo defaults (HalfCheetah, Hopper, ...; noise_type normal, std 0.1)
_TD3_MUJOCO = dict(learning_rate=1e-3, batch_size=256, buffer_size=1_000_000,
                   learning_starts=10_000, train_freq=1, gradient_steps=1,
                   policy_kwargs={"net_arch": [400, 300]})  # fmt: skip
#: The MuJoCo TD3 rows' budget here: 40k+ gradient steps of [400, 300] nets per run is
#: minutes of CPU each, and the suite runs seed by seed beside SB3 on 2 shared cores.
_TD3_BUDGET = 20_000
# rl-zoo3's ppo.yml Hopper entry (normalize: true; ortho_init False; ReLU; separate nets)
_PPO_HOPPER = dict(n_steps=512, batch_size=32, gamma=0.999, learning_rate=9.80828e-05,
                   ent_coef=0.00229519, clip_range=0.2, n_epochs=5, gae_lambda=0.99,
                   max_grad_norm=0.7, vf_coef=0.835671,
                   policy_kwargs={"log_std_init": -2, "ortho_init": False,
                                  "activation_fn": "relu",
                                  "net_arch": {"pi": [256, 256], "vf": [256, 256]}})  # fmt: skip
# rl-zoo3's ppo.yml HalfCheetah entry (normalize: true; ortho_init False; ReLU; separate nets)
_PPO_HALFCHEETAH = dict(n_steps=512, batch_size=64, gamma=0.98, learning_rate=2.0633e-05,
                        ent_coef=0.000401762, clip_range=0.1, n_epochs=20, gae_lambda=0.92,
                        max_grad_norm=0.8, vf_coef=0.58096,
                        policy_kwargs=_PPO_HOPPER["policy_kwargs"])  # fmt: skip
# rl-zoo3's ppo.yml Walker2d entry (normalize: true; no policy_kwargs: SB3's default policy)
_PPO_WALKER = dict(n_steps=512, batch_size=32, gamma=0.99, learning_rate=5.05041e-05,
                   ent_coef=0.000585045, clip_range=0.1, n_epochs=20, gae_lambda=0.95,
                   max_grad_norm=1.0, vf_coef=0.871923)  # fmt: skip
# rl-zoo3's ppo.yml Ant and Swimmer entries: normalize (Swimmer: gamma 0.9999), SB3's defaults
_PPO_MUJOCO_DEFAULTS = dict(n_steps=2048, batch_size=64, n_epochs=10, learning_rate=3e-4,
                            gae_lambda=0.95, clip_range=0.2, ent_coef=0.0)  # fmt: skip
# rl-zoo3's sac.yml MuJoCo entries: 10k random steps first (Swimmer: gamma 0.9999)
_SAC_MUJOCO = dict(learning_starts=10_000)
#: The MuJoCo SAC rows' budget here, as the TD3 rows': 1M steps (1M updates of [256, 256]
#: nets) is hours of CPU per run on 2 shared cores; at 20k (10k random steps, then 10k
#: updates) each seed runs beside Stable-Baselines3's in minutes.
_SAC_BUDGET = 20_000
# rl-zoo3's sac.yml LunarLanderContinuous and BipedalWalker entries, run at _SAC_BUDGET as
# the MuJoCo SAC rows (LunarLander's rate is held at 7.3e-4, as lunarlandercontinuous_sac
# holds it: the zoo's falls linearly to 0 over 500k steps; BipedalWalker's is the gSDE
# entry, which bipedalwalker_sac leaves out)
_SAC_LUNAR = dict(learning_rate=7.3e-4, batch_size=256, buffer_size=1_000_000,
                  ent_coef="auto", gamma=0.99, tau=0.01, train_freq=1, gradient_steps=1,
                  learning_starts=10_000, policy_kwargs={"net_arch": [400, 300]})  # fmt: skip
_SAC_BIPEDAL = dict(learning_rate=7.3e-4, buffer_size=300_000, batch_size=256,
                    ent_coef="auto", gamma=0.98, tau=0.02, train_freq=64, gradient_steps=64,
                    learning_starts=10_000, use_sde=True,
                    policy_kwargs={"log_std_init": -3, "net_arch": [400, 300]})  # fmt: skip

#: The rows, by tuned config name (``<env>_<algo>``).
ROWS: dict[str, Row] = {
    "cartpole_ppo": Row(
        "cartpole_ppo", "CartPole-v1", "PPO", 500.0, 100_000, 100_000,
        dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
             ent_coef=0.0, learning_rate=1e-3), 8),
    "cartpole_dqn": Row(
        "cartpole_dqn", "CartPole-v1", "DQN", 500.0, 50_000, 50_000,
        dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
             gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
             exploration_fraction=0.16, exploration_final_eps=0.04,
             policy_kwargs={"net_arch": [256, 256]})),
    "acrobot_ppo": Row(
        "acrobot_ppo", "Acrobot-v1", "PPO", -73.506, 1_000_000, 1_000_000,
        dict(n_steps=256, gae_lambda=0.94, gamma=0.99, n_epochs=4, ent_coef=0.0), 16, True),
    "acrobot_dqn": Row("acrobot_dqn", "Acrobot-v1", "DQN", -76.639, 100_000, 100_000,
                       _DQN_ACROBOT),
    "mountaincar_dqn": Row(
        "mountaincar_dqn", "MountainCar-v0", "DQN", -100.849, 120_000, 120_000,
        dict(learning_rate=4e-3, batch_size=128, buffer_size=10_000, learning_starts=1000,
             gamma=0.98, target_update_interval=600, train_freq=16, gradient_steps=8,
             exploration_fraction=0.2, exploration_final_eps=0.07,
             policy_kwargs={"net_arch": [256, 256]})),
    "mountaincarcontinuous_sac": Row(
        "mountaincarcontinuous_sac", "MountainCarContinuous-v0", "SAC", 94.679, 50_000, 50_000,
        dict(learning_rate=3e-4, buffer_size=50_000, batch_size=512, ent_coef=0.1,
             train_freq=32, gradient_steps=32, gamma=0.9999, tau=0.01, learning_starts=0,
             use_sde=True, policy_kwargs={"log_std_init": -3.67, "net_arch": [64, 64]})),
    "pendulum_ppo": Row(
        "pendulum_ppo", "Pendulum-v1", "PPO", -172.225, 100_000, 100_000,
        dict(n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0,
             learning_rate=1e-3, use_sde=True, sde_sample_freq=4), 4, tuned_is_defaults=True),
    "pendulum_sac": Row(
        "pendulum_sac", "Pendulum-v1", "SAC", -156.995, 20_000, 20_000,
        dict(learning_rate=1e-3)),
    "pendulum_td3": Row(
        "pendulum_td3", "Pendulum-v1", "TD3", -151.855, 20_000, 20_000,
        dict(learning_rate=1e-3, gamma=0.98, buffer_size=200_000, learning_starts=10_000,
             gradient_steps=1, train_freq=1, policy_kwargs={"net_arch": [400, 300]})),
    "lunarlander_ppo": Row("lunarlander_ppo", "LunarLander-v3", "PPO", 242.119, 1_000_000,
                           1_000_000, _PPO_LUNAR, 16),
    "lunarlander_dqn": Row(
        "lunarlander_dqn", "LunarLander-v3", "DQN", 154.382, 100_000, 100_000,
        dict(learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0,
             gamma=0.99, target_update_interval=250, train_freq=4, gradient_steps=-1,
             exploration_fraction=0.12, exploration_final_eps=0.1,
             policy_kwargs={"net_arch": [256, 256]})),
    "lunarlandercontinuous_sac": Row(
        "lunarlandercontinuous_sac", "LunarLanderContinuous-v3", "SAC", 260.390, 500_000,
        _SAC_BUDGET, _SAC_LUNAR, needs="Box2D"),
    "bipedalwalker_sac": Row(
        "bipedalwalker_sac", "BipedalWalker-v3", "SAC", 297.668, 500_000, _SAC_BUDGET,
        _SAC_BIPEDAL, needs="Box2D"),
    # rl_zoo3's ppo.yml: Empty-Random-5x5 and DoorKey-5x5 1e5 steps, KeyCorridorS3R1 5e5;
    # no entry for Empty-8x8 or DoorKey-8x8 (budgets set here: the 5x5 grids' and
    # KeyCorridorS3R1's), no MiniGrid line in its benchmark.md
    "minigrid_empty8x8_ppo": _minigrid(
        "minigrid_empty8x8_ppo", "MiniGrid-Empty-8x8-v0", 0, 100_000, True),
    "minigrid_doorkey5x5_ppo": _minigrid(
        "minigrid_doorkey5x5_ppo", "MiniGrid-DoorKey-5x5-v0", 100_000, 100_000, True),
    "minigrid_doorkey8x8_ppo": _minigrid(
        "minigrid_doorkey8x8_ppo", "MiniGrid-DoorKey-8x8-v0", 0, 500_000, True),
    "minigrid_keycorridors3r1_ppo": _minigrid(
        "minigrid_keycorridors3r1_ppo", "MiniGrid-KeyCorridorS3R1-v0", 500_000, 500_000, True),
    "hopper_td3": Row("hopper_td3", "Hopper-v5", "TD3", 3606.0, 1_000_000, _TD3_BUDGET,
                      _TD3_MUJOCO, sb3_noise=0.1, needs="mujoco"),
    "halfcheetah_td3": Row("halfcheetah_td3", "HalfCheetah-v5", "TD3", 9656.0, 1_000_000,
                           _TD3_BUDGET, _TD3_MUJOCO, sb3_noise=0.1, needs="mujoco"),
    "hopper_ppo": Row("hopper_ppo", "Hopper-v5", "PPO", 2410.435, 1_000_000, 1_000_000,
                      _PPO_HOPPER, 1, True, needs="mujoco", tuned_is_defaults=True),
    "halfcheetah_ppo": Row("halfcheetah_ppo", "HalfCheetah-v5", "PPO", 5819.099, 1_000_000,
                           1_000_000, _PPO_HALFCHEETAH, 1, True, needs="mujoco"),
    "walker2d_ppo": Row("walker2d_ppo", "Walker2d-v5", "PPO", 3478.798, 1_000_000, 1_000_000,
                        _PPO_WALKER, 1, True, needs="mujoco", tuned_is_defaults=True),
    "ant_ppo": Row("ant_ppo", "Ant-v5", "PPO", 1327.158, 1_000_000, 1_000_000,
                   _PPO_MUJOCO_DEFAULTS, 1, True, needs="mujoco"),
    "swimmer_ppo": Row("swimmer_ppo", "Swimmer-v5", "PPO", 281.561, 1_000_000, 1_000_000,
                       dict(_PPO_MUJOCO_DEFAULTS, gamma=0.9999), 1, True, needs="mujoco"),
    "halfcheetah_sac": Row("halfcheetah_sac", "HalfCheetah-v5", "SAC", 9535.451, 1_000_000,
                           _SAC_BUDGET, _SAC_MUJOCO, needs="mujoco"),
    "hopper_sac": Row("hopper_sac", "Hopper-v5", "SAC", 2325.547, 1_000_000, _SAC_BUDGET,
                      _SAC_MUJOCO, needs="mujoco"),
    "walker2d_sac": Row("walker2d_sac", "Walker2d-v5", "SAC", 3863.203, 1_000_000, _SAC_BUDGET,
                        _SAC_MUJOCO, needs="mujoco"),
    "ant_sac": Row("ant_sac", "Ant-v5", "SAC", 4615.791, 1_000_000, _SAC_BUDGET, _SAC_MUJOCO,
                   needs="mujoco"),
    "swimmer_sac": Row("swimmer_sac", "Swimmer-v5", "SAC", 345.568, 1_000_000, _SAC_BUDGET,
                       dict(_SAC_MUJOCO, gamma=0.9999), needs="mujoco"),
}  # fmt: skip

#: What each ``needs`` module is, for the table's "not installed" text.
_NEEDS = {"mujoco": "MuJoCo", "Box2D": "Box2D"}

#: Rows the zoo reports that this machine does not run: (env, algo, tuned config, the zoo's
#: return, the zoo's budget, the module the env needs (empty: none), why not).
NOT_RUN: tuple[tuple[str, str, str, float, int, str, str], ...] = (
    ("PongNoFrameskip", "PPO", "pong", 20.989, 10_000_000, "", "no Atari ROMs, no GPU here"),
    ("BreakoutNoFrameskip", "PPO", "breakout", 398.033, 10_000_000, "", "no Atari ROMs, no GPU"),
)


def not_run_reason(why: str, needs: str) -> str:
    """Why a row has no run: "<module> is not installed here" where the env's module
    (``needs``) cannot be imported, else ``why``.

    Examples:
        >>> not_run_reason("no GPU", ""), not_run_reason("no config", "json")
        ('no GPU', 'no config')
        >>> not_run_reason("no config", "no_such_module_here")
        'no_such_module_here is not installed here'
    """
    if not _importable(needs):
        return f"{_NEEDS.get(needs, needs)} is not installed here"
    return why


def _cli(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """``rlblocks ARGS`` in a fresh process, with the rlblocks this process imports (the
    installed package, or the checkout's ``python/`` where ``PYTHONPATH`` names it)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    code = "from rlblocks.cli import main; raise SystemExit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True
    )


def _importable(module: str) -> bool:
    """Whether ``module`` (empty: nothing needed) can be imported here."""
    return not module or importlib.util.find_spec(module) is not None


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _evaluate(run_dir: Path, episodes: int, seed: int, explore: bool = False) -> dict[str, Any]:
    """``rlblocks evaluate`` of the run's final checkpoint (greedy; ``explore``: sampled)."""
    args = ["evaluate", str(run_dir), "--episodes", str(episodes), "--seed", str(seed)]
    done = _cli([*args, "--explore"] if explore else args)
    if done.returncode != 0:
        raise RuntimeError(f"rlblocks evaluate {run_dir}: {done.stderr.strip()[-400:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_rlblocks(
    row: Row, seed: int, method: str, episodes: int, work: Path, budget: int
) -> dict[str, Any]:
    """One training run through the CLI (``tuned``: the row's tuned config; ``defaults``:
    ``--env --algo`` alone) at the row's budget, then the deterministic evaluation."""
    from rlblocks.train.logger import read_progress

    run_dir = work / f"{row.tuned}_{method}_{seed}"
    source = ["--tuned", row.tuned] if method == "tuned" else ["--algo", row.algo, "--env", row.env]
    stop_reward = 1e9 if row.to_budget else row.target
    cpu = _children_cpu()
    start = time.perf_counter()
    done = _cli(
        ["train", *source, "--seed", str(seed), "--stop-timesteps", str(budget),
         "--stop-reward", str(stop_reward), "--no-progress", "--run-dir", str(run_dir)]
    )  # fmt: skip
    wall = time.perf_counter() - start
    cpu = _children_cpu() - cpu
    if done.returncode != 0:
        raise RuntimeError(f"rlblocks train {row.tuned} ({method}): {done.stderr.strip()[-400:]}")
    last = read_progress(run_dir)[-1]
    evaluation = _evaluate(run_dir, episodes, 10_000 + seed)
    sampled = _evaluate(run_dir, episodes, 10_000 + seed, explore=True) if row.sampled else None
    return {
        "row": row.tuned, "method": method, "seed": seed, "budget": budget,
        "steps": int(last["timesteps_total"]), "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1), "load": round(os.getloadavg()[0], 2),
        "train_return": round(float(last["episode_return_mean"]), 3),
        "eval_mean": round(float(evaluation["episode_return_mean"]), 3),
        "eval_std": round(float(evaluation["episode_return_std"]), 3), "episodes": episodes,
        **_sampled_fields(sampled),
    }  # fmt: skip


def _sampled_fields(sampled: Mapping[str, Any] | None) -> dict[str, float]:
    """The sampled-action evaluation's fields of a result line (none without one)."""
    if sampled is None:
        return {}
    return {
        "sampled_mean": round(float(sampled["episode_return_mean"]), 3),
        "sampled_std": round(float(sampled["episode_return_std"]), 3),
    }


def run_sb3(row: Row, seed: int, episodes: int, budget: int) -> dict[str, Any]:
    """Stable-Baselines3 with the zoo's hyperparameters at the row's budget, evaluated
    deterministically on ``episodes`` episodes."""
    import importlib

    import gymnasium as gym
    import numpy as np
    import stable_baselines3 as sb3
    from rlblocks.train.envs import registered_id
    from rlblocks.train.tuned import load_tuned
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import VecNormalize

    assert row.sb3 is not None
    env_id = registered_id(row.env)  # imports the package that registers a third-party id
    wrapper = None
    if row.sb3_wrapper:
        module, _, name = row.sb3_wrapper.partition(":")
        wrapper = getattr(importlib.import_module(module), name)
    # The env as the tuned config makes it (ant_ppo: Ant-v5 without its contact forces).
    env_kwargs = dict(load_tuned(row.tuned).config.get("env_config") or {})
    vec = make_vec_env(env_id, n_envs=row.sb3_envs, seed=seed, wrapper_class=wrapper,
                       env_kwargs=env_kwargs)  # fmt: skip
    if row.sb3_normalize:
        vec = VecNormalize(vec, gamma=row.sb3.get("gamma", 0.99))
    kwargs = dict(row.sb3)
    policy = dict(kwargs.get("policy_kwargs", {}))
    if isinstance(policy.get("activation_fn"), str):  # the zoo's nn.ReLU, kept as a name
        import torch

        policy["activation_fn"] = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[
            policy["activation_fn"]
        ]
        kwargs["policy_kwargs"] = policy
    if row.sb3_noise is not None:
        n = vec.action_space.shape[0]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(n), np.full(n, row.sb3_noise))
    cpu = time.process_time()
    start = time.perf_counter()
    model = getattr(sb3, row.algo)("MlpPolicy", vec, seed=seed, device="cpu", **kwargs)
    model.learn(total_timesteps=budget)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    if row.sb3_normalize:
        vec.training, vec.norm_reward = False, False
        eval_env: Any = vec
    else:
        eval_env = gym.make(env_id, **env_kwargs)
        eval_env = wrapper(eval_env) if wrapper is not None else eval_env
        eval_env.reset(seed=10_000 + seed)
    mean, std = evaluate_policy(model, eval_env, n_eval_episodes=episodes, deterministic=True)
    sampled = None
    if row.sampled:
        s_mean, s_std = evaluate_policy(model, eval_env, n_eval_episodes=episodes,
                                        deterministic=False)  # fmt: skip
        sampled = {"episode_return_mean": s_mean, "episode_return_std": s_std}
    return {
        "row": row.tuned, "method": "sb3", "seed": seed, "budget": budget,
        "steps": budget, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
        "load": round(os.getloadavg()[0], 2), "train_return": None,
        "eval_mean": round(float(mean), 3), "eval_std": round(float(std), 3),
        "episodes": episodes, "obs_shape": list(vec.observation_space.shape or ()),
        **_sampled_fields(sampled),
    }  # fmt: skip


def random_return(env_id: str, episodes: int = 20, seed: int = 0) -> float:
    """Mean return of uniformly random actions (the 0 of the scaled defaults column)."""
    import gymnasium as gym
    from rlblocks.train.envs import registered_id

    env = gym.make(registered_id(env_id))
    env.action_space.seed(seed)
    total = 0.0
    for i in range(episodes):
        env.reset(seed=seed + i)
        done = False
        while not done:
            _, reward, term, trunc, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = term or trunc
    env.close()
    return total / episodes


def scaled(value: float, random: float, tuned: float) -> float:
    """``value`` on the scale random = 0, tuned = 1 (rounded to 3 digits)."""
    return round((value - random) / (tuned - random), 3) if tuned != random else 1.0


def read_results(path: Path) -> list[dict[str, Any]]:
    """The runs in the results file (the last line per row, method and seed wins; per budget
    for ``--budget`` probes). A run of a config since changed carries ``"superseded"`` (why)
    and is left out."""
    if not path.is_file():
        return []
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            run = json.loads(line)
            if run.get("superseded"):
                continue
            probe = run.get("budget") if run.get("probe") else None
            latest[(run["row"], run["method"], run.get("seed"), probe)] = run
    return list(latest.values())


def summary(runs: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (row, method): mean and sample std over seeds of the final evaluations, the number
    of seeds, the mean wall time (``sampled``: the same of the sampled-action evaluations,
    where every run has one)."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for run in runs:
        if run.get("eval_mean") is not None:
            groups.setdefault((run["row"], run["method"]), []).append(run)
    out = {}
    for key, mine in groups.items():
        values = [float(r["eval_mean"]) for r in mine]
        out[key] = {
            "mean": round(statistics.fmean(values), 3),
            "std": round(statistics.stdev(values), 3) if len(values) > 1 else 0.0,
            "n": len(values),
            "wall_s": round(statistics.fmean(float(r["wall_s"]) for r in mine), 1),
            "steps": round(statistics.fmean(int(r["steps"]) for r in mine)),
            "cpu_s": (
                round(statistics.fmean(float(r["cpu_s"]) for r in mine), 1)
                if all(r.get("cpu_s") is not None for r in mine)
                else None
            ),
        }
        if all(r.get("sampled_mean") is not None for r in mine):
            out[key]["sampled"] = _mean_std([float(r["sampled_mean"]) for r in mine])
    return out


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value), rounded to 3 digits."""
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return round(statistics.fmean(values), 3), round(std, 3)


def _cell(stats: Mapping[str, Any] | None, digits: int = 1) -> str:
    if stats is None:
        return "-"
    mean, std = f"{stats['mean']:.{digits}f}", f"{stats['std']:.{digits}f}"
    cell = f"{mean} ± {std} ({stats['n']}; {stats['steps']:,} steps)"
    if "sampled" in stats:
        s_mean, s_std = stats["sampled"]
        cell += f"; sampled actions {s_mean:.{digits}f} ± {s_std:.{digits}f}"
    return cell


def _digits(target: float) -> int:
    """Decimals for a row's returns: 3 where the solved return is below 10 (MiniGrid's 0.9),
    else 1."""
    return 3 if abs(target) < 10 else 1


def _stopped_short(run: Mapping[str, Any]) -> bool:
    """Whether ``run`` is of a ``to_budget`` row and ended before its budget."""
    row = ROWS.get(run["row"])
    return row is not None and row.to_budget and int(run["steps"]) < int(run["budget"])


def table(runs: Sequence[Mapping[str, Any]], randoms: Mapping[str, float]) -> str:
    """The markdown table: every row (those not run marked so), the zoo's number beside ours.
    A ``--budget`` probe (another budget than the row's) and a ``to_budget`` row's run that
    stopped short of its budget (run before the row trained to it) stay in the results file,
    out of the row's cells, but for a row with no run at its own budget: its largest probe
    (:func:`largest_probes`) fills its cells, marked as run to that budget."""
    stats = summary(_table_runs(runs))
    probes = largest_probes(runs)
    lines = [
        "| env | algo | tuned config | steps (zoo's) | rlblocks tuned: eval mean ± std "
        "(seeds; mean steps run) | zoo | reached | defaults (scaled) | SB3 + zoo settings "
        "| wall s: ours / SB3 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in ROWS.items():
        tuned = stats.get((name, "tuned"))
        zoo = "-" if row.zoo_return is None else f"{row.zoo_return:.1f}"
        target = row.target
        steps = f"{row.budget:,} ({row.zoo_budget:,})" if row.zoo_budget else f"{row.budget:,} (-)"
        ran_to = ""
        if tuned is None and (name, "tuned") in probes:  # the largest budget that fitted
            budget, tuned = probes[(name, "tuned")]
            ran_to = f"run to {budget:,} steps, the largest budget that fitted here: "
        if tuned is None:
            reason = row.not_here or not_run_reason(
                "not run yet (did not fit the session on the shared machine)", row.needs
            )
            lines.append(
                f"| {row.env} | {row.algo} | {name} | {steps} | {reason} | {zoo} | - "
                f"| {_cell(stats.get((name, 'defaults')))} | - | - |"
            )
            continue
        d = _digits(target)
        gap = tuned["mean"] - target
        reached = "yes" if tuned["mean"] >= target else f"no (gap {gap:.{d}f})"
        if ran_to:
            reached += f" at {budget:,}"
        default = stats.get((name, "defaults"))
        if ran_to and probes.get((name, "defaults"), (None,))[0] == budget:
            default = probes[(name, "defaults")][1]  # the defaults at the tuned cell's budget
        default_cell = _cell(default, d)
        if default is None and row.tuned_is_defaults:
            default = tuned
            default_cell = "the tuned config (it is the defaults)"
        if default is not None and name in randoms:
            default_cell += f", {scaled(default['mean'], randoms[name], tuned['mean']):.0%}"
        sb3 = stats.get((name, "sb3"))
        walls = (
            f"{tuned['wall_s']:.0f} / {sb3['wall_s']:.0f}" if sb3 else f"{tuned['wall_s']:.0f} / -"
        )
        if sb3 and tuned["cpu_s"] is not None and sb3["cpu_s"] is not None:
            walls += f" (CPU {tuned['cpu_s']:.0f} / {sb3['cpu_s']:.0f})"
        lines.append(
            f"| {row.env} | {row.algo} | {name} | {steps} | {ran_to}{_cell(tuned, d)} | {zoo} "
            f"| {reached} | {default_cell} | {_cell(sb3, d)} | {walls} |"
        )
    for env, algo, tuned_name, zoo_return, budget, needs, why in NOT_RUN:
        lines.append(
            f"| {env} | {algo} | {tuned_name} | - ({budget:,}) "
            f"| not run here: {not_run_reason(why, needs)} "
            f"| {zoo_return:.1f} | - | - | - | - |"
        )
    return "\n".join(lines)


def largest_probes(
    runs: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, str], tuple[int, dict[str, Any]]]:
    """Per (row, method): the largest ``--budget`` probe below the row's budget and the
    summary of its runs, which the table shows where a row has no run at its own budget
    (marked so).

    Examples:
        >>> runs = [{"row": "x", "method": "tuned", "eval_mean": v, "wall_s": 1.0,
        ...          "steps": b, "budget": b, "probe": True} for v, b in ((1.0, 10), (3.0, 20))]
        >>> largest_probes(runs)[("x", "tuned")]
        (20, {'mean': 3.0, 'std': 0.0, 'n': 1, 'wall_s': 1.0, 'steps': 20, 'cpu_s': None})
    """
    probes: dict[tuple[str, str], dict[int, list[Mapping[str, Any]]]] = {}
    for run in runs:
        row = ROWS.get(run["row"])
        if run.get("probe") and (row is None or int(run["budget"]) < row.budget):
            by_budget = probes.setdefault((run["row"], run["method"]), {})
            by_budget.setdefault(int(run["budget"]), []).append(run)
    out = {}
    for key, by_budget in probes.items():
        budget = max(by_budget)
        found = summary(by_budget[budget]).get(key)
        if found is not None:
            out[key] = (budget, found)
    return out


def _table_runs(runs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The runs the table counts: not ``--budget`` probes, not a ``to_budget`` row's runs
    that stopped short of its budget."""
    return [r for r in runs if not r.get("probe") and not _stopped_short(r)]


def tuned_figures(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per row with tuned runs in the table (or, where it has none at its own budget, its
    largest ``--budget`` probe, as the table shows it): the evaluations' mean and std, the
    seeds, how many reached the zoo's return (0.9 where it publishes none) and the mean
    steps run, for ``rlblocks tuned`` (``suites.json`` beside the tuned configs).

    Examples:
        >>> runs = [{"row": "cartpole_dqn", "method": "tuned", "eval_mean": v, "wall_s": 1.0,
        ...          "steps": 50_000, "budget": 50_000} for v in (500.0, 490.0)]
        >>> tuned_figures(runs)["cartpole_dqn"]
        {'mean': 495.0, 'std': 7.071, 'seeds': 2, 'target': 500.0, 'reached': '1/2', 'steps': 50000}
    """
    out = {}
    counted = [r for r in _table_runs(runs) if r.get("eval_mean") is not None]
    probes = largest_probes(runs)
    for name, row in ROWS.items():
        mine = [r for r in counted if r["row"] == name and r["method"] == "tuned"]
        if not mine and (name, "tuned") in probes:  # the largest budget run, as in the table
            budget = probes[(name, "tuned")][0]
            mine = [
                r
                for r in runs
                if (r["row"], r["method"]) == (name, "tuned")
                and r.get("probe")
                and int(r["budget"]) == budget
                and r.get("eval_mean") is not None
            ]
        if not mine:
            continue
        stats = summary(mine)[(name, "tuned")]
        passed = sum(float(r["eval_mean"]) >= row.target for r in mine)
        out[name] = {
            "mean": stats["mean"], "std": stats["std"], "seeds": stats["n"], "target": row.target,
            "reached": f"{passed}/{stats['n']}", "steps": stats["steps"],
        }  # fmt: skip
    return dict(sorted(out.items()))


def write_docs(text: str, path: Path = DOCS) -> None:
    """Replaces what lies between the markers in docs/benchmarks.md with ``text``."""
    doc = path.read_text()
    if BEGIN not in doc or END not in doc:
        raise ValueError(f"{path}: the markers {BEGIN} and {END} are missing")
    head, rest = doc.split(BEGIN, 1)
    path.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")


def _randoms(path: Path) -> dict[str, float]:
    """Random-policy returns per row, kept beside the results (measured once per env)."""
    cache = path.with_name("suites_random.json")
    data: dict[str, float] = json.loads(cache.read_text()) if cache.is_file() else {}
    return data


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the chosen rows and seeds, appends each run to the results file, prints the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = [n for n, r in ROWS.items() if not r.not_here and _importable(r.needs)]
    p.add_argument("--rows", default=",".join(here))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--episodes", type=int, default=10, help="evaluation episodes per run")
    p.add_argument("--sb3", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--defaults", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--tuned", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument(
        "--budget",
        type=int,
        default=None,
        help="steps per run instead of the row's budget (a probe, unless it is the row's "
        "budget: such runs are kept in the results file, out of the table)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 1 seed, 2,000 steps, 2 evaluation episodes, into a temporary "
        "results file (unless --results), the table of that file",
    )
    p.add_argument("--table", action="store_true", help="only print the table of the results")
    p.add_argument("--write-docs", action="store_true", help="(re)write docs/benchmarks.md's table")
    args = p.parse_args(argv)
    names = [n for n in args.rows.split(",") if n]
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        p.error(f"--rows: unknown {unknown} (known: {', '.join(ROWS)})")
    with tempfile.TemporaryDirectory(prefix="bench_suites_") as tmp:
        if args.quick:
            args.seeds, args.episodes = args.seeds[:1], 2
            if args.results == RESULTS:
                args.results = Path(tmp) / "suites.jsonl"
        return _run(args, names, Path(tmp))


def _run(args: argparse.Namespace, names: Sequence[str], tmp: Path) -> int:
    args.results.parent.mkdir(parents=True, exist_ok=True)
    randoms = _randoms(args.results)
    for name in [] if args.table else names:
        row = ROWS[name]
        if args.defaults and name not in randoms:
            randoms[name] = round(random_return(row.env), 3)
            cache = args.results.with_name("suites_random.json")
            cache.write_text(json.dumps(randoms, indent=1, sort_keys=True) + "\n")
        budget = min(row.budget, 2000) if args.quick else (args.budget or row.budget)
        methods = [m for m, on in (("tuned", args.tuned), ("defaults", args.defaults)) if on]
        for seed in args.seeds:
            runs = [run_rlblocks(row, seed, m, args.episodes, tmp, budget) for m in methods]
            if args.sb3 and row.sb3 is not None:
                runs.append(run_sb3(row, seed, args.episodes, budget))
            with args.results.open("a") as f:
                for run in runs:
                    if budget != row.budget and not args.quick:  # a --budget probe
                        run["probe"] = True
                    print(json.dumps(run), flush=True)
                    f.write(json.dumps(run) + "\n")
    runs = read_results(args.results)
    text = table(runs, randoms)
    print(text)
    if args.write_docs:
        write_docs(text)
        TUNED_SUITES.write_text(json.dumps(tuned_figures(runs), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
