"""Goal-conditioned envs with hindsight replay: rlblocks' tuned configs beside SB3 SAC + HER.

Each row is a tuned config (``rlblocks tuned``) run through the CLI in a fresh process
(``rlblocks train --tuned NAME --seed S``) for the row's whole step budget, then a
deterministic evaluation of the final checkpoint (``rlblocks evaluate``); and, in the same
invocation at the same budget, Stable-Baselines3's SAC with ``HerReplayBuffer`` and the
zoo's hyperparameters (rl-baselines3-zoo's ``sac.yml`` / ``her.yml``), also in a fresh
process, evaluated deterministically on as many episodes. Runs go one at a time. Each run
is one JSON line on stdout and one line appended to the results file
(``benchmarks/results/goals.jsonl``); the table is made from that file. Wall time and CPU
time are those of the training process (the machine is shared: CPU time is the process
tree's user + system time, which other load does not inflate the way it inflates wall time).

The envs need the ``robotics`` extra (FetchReach, PointMaze) or the ``highway`` extra
(parking); a row whose env package is missing is skipped with a note.

Usage::

    python benchmarks/bench_goals.py --rows fetchreach_sac_her --seeds 0 1 2
        [--no-sb3] [--no-rlblocks] [--episodes 50] [--results FILE] [--table] [--quick]

Examples:
    >>> ROWS["fetchreach_sac_her"].budget, ROWS["fetchreach_sac_her"].sb3["gamma"]
    (20000, 0.95)
    >>> rows = [{"row": "r", "lib": "rlblocks", "success": 1.0, "eval_mean": -2.0,
    ...          "wall_s": 100.0, "cpu_s": 90.0, "budget": 10},
    ...         {"row": "r", "lib": "rlblocks", "success": 0.9, "eval_mean": -4.0,
    ...          "wall_s": 120.0, "cpu_s": 110.0, "budget": 10},
    ...         {"row": "r", "lib": "sb3", "success": 1.0, "eval_mean": -1.0,
    ...          "wall_s": 440.0, "cpu_s": 400.0, "budget": 10}]
    >>> [(s["lib"], s["success"], s["n"], s["wall_ratio"]) for s in summary(rows)]
    [('rlblocks', '0.95 ± 0.07', 2, 0.25), ('sb3', '1.00 ± 0.00', 1, 1.0)]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import available, format_rows, skip_note  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "goals.jsonl"


@dataclass(frozen=True)
class Row:
    """One goal env: the tuned config that answers it and SB3's settings for it.

    Attributes:
        tuned: The tuned config's name.
        env: The gymnasium id.
        module: The package that registers the env (skipped when missing).
        extra: The rlblocks extra that installs it.
        budget: Steps run by both libraries.
        target: The success rate the tuned config must reach.
        sb3: SAC constructor arguments (the zoo's, HER settings included).
        sb3_normalize: Whether the zoo wraps the env in ``VecNormalize`` (observations only).
    """

    tuned: str
    env: str
    module: str
    extra: str
    budget: int
    target: float
    sb3: dict[str, Any] = field(default_factory=dict)
    sb3_normalize: bool = False


_HER = {"goal_selection_strategy": "future", "n_sampled_goal": 4}
# rl-baselines3-zoo sac.yml, FetchReach-v1 (the zoo's HER row); PointMaze has no zoo entry
# and takes the same settings.
_ZOO_FETCH = dict(buffer_size=1_000_000, ent_coef="auto", batch_size=256, gamma=0.95,
                  learning_rate=1e-3, learning_starts=1000, replay_buffer_kwargs=_HER,
                  policy_kwargs={"net_arch": [64, 64]})  # fmt: skip
# rl-baselines3-zoo her.yml, parking-v0 (SAC, the HER paper's settings; 200k steps there).
# It keeps SB3's learning_starts of 100, but SB3's HerReplayBuffer cannot sample before the
# first episode ends, and parking-v0's episodes run up to 500 steps (100 s at 5 steps
# a second): with 100, seed 1 raises at its first update. 501 is the least that never does.
_ZOO_PARKING = dict(buffer_size=1_000_000, batch_size=256, gamma=0.95, learning_rate=1e-3,
                    learning_starts=501, replay_buffer_kwargs=_HER,
                    policy_kwargs={"net_arch": [256, 256, 256]})  # fmt: skip

#: The rows, by tuned config name.
ROWS: dict[str, Row] = {
    "fetchreach_sac_her": Row("fetchreach_sac_her", "FetchReach-v4", "gymnasium_robotics",
                              "robotics", 20_000, 0.95, _ZOO_FETCH, sb3_normalize=True),
    "pointmaze_sac_her": Row("pointmaze_sac_her", "PointMaze_UMaze-v3", "gymnasium_robotics",
                             "robotics", 50_000, 0.9, _ZOO_FETCH, sb3_normalize=True),
    "parking_sac_her": Row("parking_sac_her", "parking-v0", "highway_env", "highway", 50_000,
                           0.9, _ZOO_PARKING),
}  # fmt: skip


def _children_cpu() -> float:
    """User + system seconds of this process's finished (waited-for) children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _python(args: Sequence[str]) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """``python ARGS`` in a fresh process (one torch thread): the result, wall and CPU s."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cpu, start = _children_cpu(), time.perf_counter()
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True)
    return done, time.perf_counter() - start, _children_cpu() - cpu


def _cli(args: Sequence[str]) -> tuple[subprocess.CompletedProcess[str], float, float]:
    return _python(["-c", "from rlblocks.cli import main; raise SystemExit(main())", *args])


def run_rlblocks(row: Row, seed: int, episodes: int, work: Path, budget: int) -> dict[str, Any]:
    """The tuned config through the CLI for the whole budget (its stop return is lifted so
    both libraries train as long), then ``rlblocks evaluate`` (deterministic)."""
    run_dir = work / f"{row.tuned}_{seed}"
    done, wall, cpu = _cli(
        ["train", "--tuned", row.tuned, "--seed", str(seed), "--stop-timesteps", str(budget),
         "--stop-reward", "1e9", "--no-progress", "--run-dir", str(run_dir)]
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"rlblocks train {row.tuned}: {done.stderr.strip()[-600:]}")
    evaluated, _, _ = _cli(
        ["evaluate", str(run_dir), "--episodes", str(episodes), "--seed", str(10_000 + seed)]
    )
    if evaluated.returncode != 0:
        raise RuntimeError(f"rlblocks evaluate {run_dir}: {evaluated.stderr.strip()[-600:]}")
    result = json.loads(evaluated.stdout.strip().splitlines()[-1])
    return {
        "row": row.tuned, "env": row.env, "lib": "rlblocks", "config": config_id(row.tuned),
        "seed": seed, "budget": budget,
        "success": result.get("success_rate"),
        "eval_mean": round(float(result["episode_return_mean"]), 3),
        "eval_std": round(float(result["episode_return_std"]), 3), "episodes": episodes,
        "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
    }  # fmt: skip


def config_id(name: str) -> str:
    """The first 8 hex digits of the tuned config file's SHA-1 (runs of an older version of
    the file are kept apart in the table)."""
    from rlblocks.train.tuned import load_tuned

    return hashlib.sha1(load_tuned(name).path.read_bytes()).hexdigest()[:8]


def run_sb3(row: Row, seed: int, episodes: int, budget: int) -> dict[str, Any]:
    """SB3 SAC + HER in a fresh process (:func:`sb3_child`): wall and CPU time of that
    process's training, its deterministic evaluation."""
    me = str(Path(__file__).resolve())
    done, _, _ = _python([me, "--sb3-child", row.tuned, str(seed), str(budget), str(episodes)])
    if done.returncode != 0:
        raise RuntimeError(f"sb3 {row.tuned}: {done.stderr.strip()[-600:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def sb3_child(name: str, seed: int, budget: int, episodes: int) -> dict[str, Any]:
    """One SB3 run (called in the child process): trains, then evaluates deterministically.
    Wall and CPU time count from the start of this function (imports included, as the CLI's
    count its own) to the end of training."""
    start, cpu = time.perf_counter(), time.process_time()
    import gymnasium as gym
    from stable_baselines3 import SAC, HerReplayBuffer
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    row = ROWS[name]
    gym.register_envs(__import__(row.module))
    vec: Any = make_vec_env(row.env, n_envs=1, seed=seed)
    if row.sb3_normalize:
        vec = VecNormalize(vec, norm_reward=False)
    model = SAC("MultiInputPolicy", vec, replay_buffer_class=HerReplayBuffer, seed=seed,
                device="cpu", **row.sb3)  # fmt: skip
    model.learn(total_timesteps=budget)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    test: Any = make_vec_env(row.env, n_envs=1, seed=10_000 + seed)
    if row.sb3_normalize:
        test = VecNormalize(test, training=False, norm_reward=False)
        test.obs_rms = vec.obs_rms
    returns, wins, total = [], [], 0.0
    obs = test.reset()
    while len(returns) < episodes:
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, done, infos = test.step(action)
        total += float(reward[0])
        if done[0]:
            returns.append(total)
            total = 0.0
            flag = infos[0].get("is_success", infos[0].get("success"))
            if flag is not None:
                wins.append(float(flag))
    return {
        "row": name, "env": row.env, "lib": "sb3", "seed": seed, "budget": budget,
        "success": statistics.fmean(wins) if wins else None,
        "eval_mean": round(statistics.fmean(returns), 3),
        "eval_std": round(statistics.pstdev(returns), 3), "episodes": episodes,
        "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
    }  # fmt: skip


def read_results(path: Path) -> list[dict[str, Any]]:
    """The runs in the results file (the last line per row, library, budget and seed wins)."""
    if not path.is_file():
        return []
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            run = json.loads(line)
            latest[(run["row"], run["lib"], run.get("config"), run["budget"], run["seed"])] = run
    return list(latest.values())


def _mean_std(values: Sequence[float], digits: int) -> str:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.{digits}f} ± {std:.{digits}f}"


def summary(runs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (row, budget, library, config version): success rate and return as mean ± sample
    std over seeds, mean wall and CPU seconds, and their ratios to SB3's at the same row and
    budget."""
    groups: dict[tuple[str, int, str, str], list[Mapping[str, Any]]] = {}
    for run in runs:
        key = (run["row"], run["budget"], run["lib"], run.get("config") or "")
        groups.setdefault(key, []).append(run)
    out = []
    for (name, budget, lib, config), mine in sorted(groups.items()):
        wins = [float(r["success"]) for r in mine if r.get("success") is not None]
        sb3 = groups.get((name, budget, "sb3", ""), [])
        item: dict[str, Any] = {
            "row": name, "lib": lib, "config": config or None, "budget": budget, "n": len(mine),
            "episodes": "/".join(sorted({str(r.get("episodes", "?")) for r in mine})),
            "success": _mean_std(wins, 2) if wins else None,
            "return": _mean_std([float(r["eval_mean"]) for r in mine], 2),
            "wall_s": statistics.fmean(float(r["wall_s"]) for r in mine),
            "cpu_s": statistics.fmean(float(r["cpu_s"]) for r in mine),
        }  # fmt: skip
        for key in ("wall", "cpu"):
            theirs = statistics.fmean(float(r[f"{key}_s"]) for r in sb3) if sb3 else None
            item[f"{key}_ratio"] = round(item[f"{key}_s"] / theirs, 2) if theirs else None
        out.append(item)
    return out


COLUMNS = [
    ("row", "row", "<19"), ("lib", "lib", "<8"), ("config", "config", "<8"),
    ("budget", "budget", ">7,"),
    ("seeds", "n", ">5"), ("eps", "episodes", ">3"), ("success", "success", ">11"),
    ("return", "return", ">15"),
    ("wall s", "wall_s", ">7.0f"), ("cpu s", "cpu_s", ">7.0f"),
    ("wall/SB3", "wall_ratio", ">8.2f"), ("cpu/SB3", "cpu_ratio", ">7.2f"),
]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the chosen rows and seeds one at a time, appends each run to the results file,
    prints the table of that file."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="fetchreach_sac_her")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument(
        "--episodes",
        type=int,
        default=50,
        help="deterministic evaluation episodes per run (50: a rate's standard error is "
        "about 0.05 near 0.85, 0.08 with 20)",
    )
    p.add_argument("--budget", type=int, default=None, help="steps (default: the row's)")
    p.add_argument("--rlblocks", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--sb3", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 1 seed, 1,500 steps, 2 evaluation episodes, into a temporary "
        "results file (unless --results)",
    )
    p.add_argument("--table", action="store_true", help="only print the table of the results")
    p.add_argument("--work", type=Path, default=None, help="keep rlblocks' run directories here")
    p.add_argument("--sb3-child", nargs=4, metavar=("ROW", "SEED", "BUDGET", "EPISODES"),
                   help=argparse.SUPPRESS)  # fmt: skip
    args = p.parse_args(argv)
    if args.sb3_child:
        name, seed, budget, episodes = args.sb3_child
        print(json.dumps(sb3_child(name, int(seed), int(budget), int(episodes))), flush=True)
        return 0
    names = [n for n in args.rows.split(",") if n]
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        p.error(f"--rows: unknown {unknown} (known: {', '.join(ROWS)})")
    with tempfile.TemporaryDirectory(prefix="bench_goals_") as tmp:
        if args.quick:
            args.seeds, args.episodes, args.budget = args.seeds[:1], 2, 1500
            if args.results == RESULTS:
                args.results = Path(tmp) / "goals.jsonl"
        _run(args, [] if args.table else names, args.work or Path(tmp))
    print(format_rows(summary(read_results(args.results)), COLUMNS))
    return 0


def _run(args: argparse.Namespace, names: Sequence[str], tmp: Path) -> None:
    args.results.parent.mkdir(parents=True, exist_ok=True)
    for name in names:
        row = ROWS[name]
        if not available(row.module):
            print(skip_note(f"{name} ({row.module})", f"rlblocks[{row.extra}]"))
            continue
        sb3 = args.sb3 and available("stable_baselines3")
        if args.sb3 and not sb3:
            print(skip_note("sb3", "rlblocks[bench]"))
        budget = args.budget or row.budget
        for seed in args.seeds:
            if args.rlblocks:
                _record(args.results, run_rlblocks(row, seed, args.episodes, tmp, budget))
            if sb3:
                _record(args.results, run_sb3(row, seed, args.episodes, budget))


def _record(path: Path, run: Mapping[str, Any]) -> None:
    """Prints one run's JSON line and appends it to the results file at once."""
    print(json.dumps(run), flush=True)
    with path.open("a") as f:
        f.write(json.dumps(run) + "\n")


if __name__ == "__main__":
    sys.exit(main())
