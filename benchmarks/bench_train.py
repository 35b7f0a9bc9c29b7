"""Training benchmark: rlblocks PPO against Stable-Baselines3 PPO, same settings, one run.

Cases (each prints one JSON line per run, then a summary table):

* ``cartpole``: CartPole-v1, wall time and environment steps until the mean return of the
  last 100 episodes reaches 475, for rlblocks and SB3 with the same network (two tanh
  layers of 64 with SB3's orthogonal init, heads included, separate policy and value nets),
  8 envs and matching hyperparameters
  (the rl-baselines3-zoo CartPole settings with a constant learning rate), 10 seeds.
  The summary gives the ratio of median wall times (target, issue 48: rlblocks <= 0.3x SB3), and
  a phase table: CPU time of one iteration's rollout and update in each library.
* ``stateless_lstm`` / ``stateless_attention``: rlblocks on StatelessCartPole with
  ``use_lstm`` / ``use_attention``; steps until mean return 150 (report only). The LSTM
  case also runs sb3-contrib's ``RecurrentPPO`` with the same settings, the recurrent
  baseline (when ``sb3_contrib`` imports).
* ``pong``: ALE Pong, DeepMind preprocessing, SB3's Nature CNN in both, a fixed number of
  frames (200k);
  full-loop agent steps per second (rollout + learning), rlblocks vs SB3 (report only).

SB3 rows appear only when ``stable_baselines3`` imports; ``pong`` only when ``ale_py`` does.
Both libraries run with the same ``torch.set_num_threads``. Nothing here asserts timing.

Usage: ``python benchmarks/bench_train.py [--quick] [--cases cartpole]``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from _harness import available, emit, median, skip_note
from _ppo_runs import (
    RunResult,
    cartpole_settings,
    pong_settings,
    rlblocks_config,
    run_rlblocks,
    run_sb3,
    sb3_cartpole,
    sb3_pong,
    sb3_recurrent,
)

CASES = ("cartpole", "stateless_lstm", "stateless_attention", "pong")


def _pong_vector_env(env_config: dict[str, Any]) -> Any:
    """rlblocks' batched DeepMind pipeline (``AtariVectorEnv``: 84x84 gray, stack 4, frame
    skip 4 with max-pooling, noop 30, episodic life, FIRE reset), sticky actions off."""
    from rlblocks.wrappers.vector import make_vector_env

    return make_vector_env(
        "ALE/Pong-v5",
        env_config["num_envs"],
        {"dim": 84, "framestack": True},
        vectorization_mode="atari",
        noframeskip=True,
        frameskip=1,
        repeat_action_probability=0.0,
    )


def _nature_cnn_class() -> type:
    """A ModelV2 with SB3's ``NatureCNN`` + linear policy/value heads (the same network)."""
    import torch
    from rlblocks.models import ModelV2
    from torch import nn

    class NatureCNNModel(ModelV2):
        """Conv(32, 8, 4) -> Conv(64, 4, 2) -> Conv(64, 3, 1) -> Dense(512), shared torso;
        ``[B, 84, 84, 4]`` uint8 frames scaled by 1/255, as SB3's CnnPolicy."""

        def __init__(
            self, obs_space: Any, action_space: Any, num_outputs: Any, model_config: Any, name: str
        ) -> None:
            super().__init__(obs_space, action_space, num_outputs, model_config, name)
            channels = int(obs_space.shape[-1])
            self.torso = nn.Sequential(
                nn.Conv2d(channels, 32, 8, 4),
                nn.ReLU(),
                nn.Conv2d(32, 64, 4, 2),
                nn.ReLU(),
                nn.Conv2d(64, 64, 3, 1),
                nn.ReLU(),
                nn.Flatten(),
                nn.Linear(64 * 7 * 7, 512),
                nn.ReLU(),
            )
            self.logits = nn.Linear(512, int(num_outputs))
            self.value = nn.Linear(512, 1)
            self._features: torch.Tensor | None = None

        def forward(
            self, input_dict: dict[str, Any], state: list[Any], seq_lens: Any
        ) -> tuple[Any, list[Any]]:
            x = torch.as_tensor(input_dict["obs"]).float().permute(0, 3, 1, 2) / 255.0
            self._features = self.torso(x)
            return self.logits(self._features), state

        def value_function(self) -> Any:
            assert self._features is not None
            return self.value(self._features).squeeze(-1)

    return NatureCNNModel


def run_case(
    case: str, seeds: Sequence[int], quick: bool, with_sb3: bool, pong_frames: int = 200_000
) -> list[RunResult]:
    """Runs one case for every seed (rlblocks, then SB3 with the same seed)."""
    results: list[RunResult] = []

    def add(r: RunResult) -> None:
        emit(r)
        results.append(r)

    if case == "cartpole":
        settings = cartpole_settings()
        stop_reward, budget = (475.0, 300_000) if not quick else (475.0, 20_000)
        for seed in seeds:
            add(run_rlblocks(case, rlblocks_config(settings, seed), seed, stop_reward, budget))
            if with_sb3:
                add(run_sb3(case, sb3_cartpole(settings), seed, stop_reward, budget))
    elif case in ("stateless_lstm", "stateless_attention"):
        import rlblocks.envs  # noqa: F401  (registers the StatelessCartPole id)

        settings = {
            **cartpole_settings(),
            "env": "rlblocks/StatelessCartPole-v0",
            "hiddens": [64],
            "train_batch_size": 1024,
            "sgd_minibatch_size": 256,
            "num_sgd_iter": 6,
            "lr": 1e-3,
            # Short horizon and a small value weight: the memory's bounded features fit
            # small value targets quickly and the policy gradient dominates the shared part.
            "gamma": 0.95,
            "lambda": 0.95,
            "vf_loss_coeff": 0.01,
        }
        if case == "stateless_lstm":
            wrapper = {
                "use_lstm": True,
                "lstm_cell_size": 64,
                "max_seq_len": 16,
                "lstm_use_prev_action": True,
            }
        else:
            wrapper = {
                "use_attention": True,
                "attention_dim": 32,
                "attention_num_transformer_units": 1,
                "attention_num_heads": 2,
                "attention_head_dim": 16,
                "attention_memory_inference": 16,
                "attention_memory_training": 16,
                "attention_use_n_prev_actions": 1,
                "max_seq_len": 16,
            }
        stop_reward, budget = (150.0, 200_000) if not quick else (150.0, 4_096)
        for seed in seeds:
            cfg = rlblocks_config(settings, seed, sb3_heads=False)
            cfg["model"] = {**cfg["model"], **wrapper}
            add(run_rlblocks(case, cfg, seed, stop_reward, budget))
            if case == "stateless_lstm" and with_sb3 and available("sb3_contrib"):
                add(run_sb3(case, sb3_recurrent(settings), seed, stop_reward, budget))
    elif case == "pong":
        if not available("ale_py"):
            print(skip_note("pong", "rlblocks[atari]"), file=sys.stderr)
            return results
        settings = pong_settings()
        frames = pong_frames if not quick else 8_192
        steps = frames // 4  # frame skip 4: one agent step is 4 emulator frames
        cfg = rlblocks_config(
            settings,
            seeds[0],
            env=_pong_vector_env,
            vector_mode="native",
            model={"custom_model": "bench_nature_cnn"},
        )
        from rlblocks.catalog import ModelCatalog

        ModelCatalog.register_custom_model("bench_nature_cnn", _nature_cnn_class())
        add(run_rlblocks(case, cfg, seeds[0], None, steps))
        if with_sb3:
            add(run_sb3(case, sb3_pong(settings), seeds[0], None, steps))
    else:
        raise ValueError(f"unknown case {case!r}; known: {', '.join(CASES)}")
    return results


def _best_cpu_ms(fn: Callable[[], Any], reps: int = 10, rounds: int = 5) -> float:
    """Best-of-``rounds`` process CPU time of ``fn`` in ms (robust to other jobs' load)."""
    fn()
    best = math.inf
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(reps):
            fn()
        best = min(best, (time.process_time() - start) / reps * 1e3)
    return best


def cartpole_phases(with_sb3: bool) -> list[dict[str, Any]]:
    """CPU ms of one CartPole iteration's two phases, per library: the rollout (32 steps of
    8 envs, policy forward included) and the update (20 SGD steps on the 256-step batch).

    Independent of how many steps a seed needs, so it isolates the per-step speed.
    """
    import numpy as np
    from rlblocks.train import PPOConfig, PPOTrainer

    settings = cartpole_settings()
    n_steps = settings["n_steps"]
    trainer = PPOTrainer(PPOConfig.from_dict(rlblocks_config(settings, seed=0)))
    trainer.train()
    batch = trainer.runner.collect(n_steps)
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = [
        {
            "method": "rlblocks",
            "rollout_ms": _best_cpu_ms(lambda: trainer.runner.collect(n_steps)),
            "update_ms": _best_cpu_ms(lambda: trainer.learner.update(batch, rng)),
        }
    ]
    trainer.close()
    if with_sb3:
        from stable_baselines3.common.callbacks import BaseCallback

        class _Continue(BaseCallback):
            def _on_step(self) -> bool:
                return True

        model = sb3_cartpole(settings)(0)
        model.learn(total_timesteps=settings["train_batch_size"])
        callback = _Continue()
        callback.init_callback(model)

        def sb3_rollout() -> None:
            model.rollout_buffer.reset()
            model.collect_rollouts(
                model.env, callback, model.rollout_buffer, n_rollout_steps=n_steps
            )

        rows.append(
            {
                "method": "sb3",
                "rollout_ms": _best_cpu_ms(sb3_rollout),
                "update_ms": _best_cpu_ms(model.train),
            }
        )
    for row in rows:
        row["case"] = "cartpole_phases"
        row["iteration_ms"] = row["rollout_ms"] + row["update_ms"]
        emit(row)
    return rows


def format_phases(rows: Sequence[dict[str, Any]]) -> str:
    """The phase table, plus rlblocks' iteration time relative to SB3's."""
    lines = [f"{'cartpole phase (CPU ms)':<24} {'rollout':>8} {'update':>8} {'iteration':>9}"]
    for r in rows:
        lines.append(
            f"{r['method']:<24} {r['rollout_ms']:>8.2f} {r['update_ms']:>8.2f} "
            f"{r['iteration_ms']:>9.2f}"
        )
    by = {r["method"]: r for r in rows}
    if "sb3" in by:
        ratio = by["rlblocks"]["iteration_ms"] / by["sb3"]["iteration_ms"]
        lines.append(f"cartpole: rlblocks/sb3 time per iteration (same steps): {ratio:.2f}x")
    return "\n".join(lines)


def summarize(results: Sequence[RunResult]) -> str:
    """A table: per case and method, median wall time and steps, runs that reached the
    target, steps/s; plus rlblocks' wall-time ratio to SB3 (median over seeds).

    Examples:
        >>> rows = [RunResult("c", "rlblocks", 0, 10.0, 1000, True, 480.0),
        ...         RunResult("c", "sb3", 0, 40.0, 1200, True, 476.0)]
        >>> "rlblocks/sb3 median wall time: 0.25x" in summarize(rows)
        True
    """
    lines = [
        f"{'case':<20} {'method':<9} {'runs':>4} {'reached':>7} {'median wall s':>13} "
        f"{'median steps':>12} {'steps/s':>9}"
    ]
    lines.append("-" * len(lines[0]))
    medians: dict[tuple[str, str], float] = {}
    for case in dict.fromkeys(r.case for r in results):
        for method in dict.fromkeys(r.method for r in results if r.case == case):
            rows = [r for r in results if r.case == case and r.method == method]
            wall = median(r.wall_s for r in rows)
            steps = median(r.env_steps for r in rows)
            reached = sum(1 for r in rows if r.reached)
            target = "-" if rows[0].reached is None else f"{reached}/{len(rows)}"
            rate = median(r.env_steps / r.wall_s for r in rows)
            medians[(case, method)] = wall
            lines.append(
                f"{case:<20} {method:<9} {len(rows):>4} {target:>7} {wall:>13.1f} "
                f"{steps:>12,.0f} {rate:>9,.0f}"
            )
        if (case, "rlblocks") in medians and (case, "sb3") in medians:
            ratio = medians[(case, "rlblocks")] / medians[(case, "sb3")]
            lines.append(f"{case}: rlblocks/sb3 median wall time: {ratio:.2f}x")
            if all("cpu_s" in r.extra for r in results if r.case == case):
                cpu = {
                    m: [float(r.extra["cpu_s"]) for r in results if (r.case, r.method) == (case, m)]
                    for m in ("rlblocks", "sb3")
                }
                lines.append(
                    f"{case}: CPU s per run, rlblocks median {median(cpu['rlblocks']):.1f} total "
                    f"{sum(cpu['rlblocks']):.1f}, sb3 median {median(cpu['sb3']):.1f} total "
                    f"{sum(cpu['sb3']):.1f}: rlblocks/sb3 median CPU time "
                    f"{median(cpu['rlblocks']) / median(cpu['sb3']):.2f}x"
                )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[RunResult]:
    """Runs the chosen cases, prints JSON lines and the summary; returns the runs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny budgets, one seed")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (both libs)")
    parser.add_argument("--pong-frames", type=int, default=200_000, help="emulator frames")
    parser.add_argument("--no-sb3", action="store_true", help="rlblocks rows only")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    # torch's first optimizer imports torch._dynamo (over a second of CPU): paid here, not
    # by whichever library's run comes first
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    seeds = args.seeds or ([0] if args.quick else list(range(10)))
    with_sb3 = not args.no_sb3 and available("stable_baselines3")
    if not with_sb3 and not args.no_sb3:
        print(skip_note("the Stable-Baselines3 rows", "rlblocks[bench]"), file=sys.stderr)
    results: list[RunResult] = []
    phases: list[dict[str, Any]] = []
    for case in args.cases:
        print(f"# case {case}", file=sys.stderr, flush=True)
        results.extend(run_case(case, seeds, args.quick, with_sb3, args.pong_frames))
        if case == "cartpole" and not args.quick:
            phases = cartpole_phases(with_sb3)
    print(summarize(results), flush=True)
    if phases:
        print(format_phases(phases), flush=True)
    return results


if __name__ == "__main__":
    main()
