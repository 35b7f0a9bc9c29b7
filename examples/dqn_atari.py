"""DQN on an Atari game: RLlib's DQN with rlblocks' Q-network, frames and replay buffer.

RLlib's DQN (new API stack) drives the run; rlblocks supplies:

* the Q-network: :class:`rlblocks.rllib.RLBlocksDQNRLModule` (rlblocks' vision network with
  RLlib's default 84x84 conv stack, then a dueling Q head), via
  ``rl_module_spec(model, algo="DQN")``;
* the env side of the DeepMind pipeline: ``gymnasium.make(id, frameskip=1, ...)`` wrapped by
  ``rlblocks.wrappers.atari.wrap_deepmind(warp=False)`` (noop reset, 4-frame skip with
  max-pooling, episodic life, FIRE reset), registered with ``ray.tune.register_env``;
* the frame side: ``env_to_module(model, atari=True, stack_in_episode=False)`` grays and
  resizes the frames of all episodes in one C++ call and feeds the module 4-frame stacks,
  while each episode keeps one 84x84 frame per step;
* the replay buffer: ``atari_replay_buffer_config(model, capacity)`` (RLlib's prioritized
  episode buffer that stacks the frames of each sampled n-step transition), so the buffer
  holds each frame once, not four times. ``--stack-in-episode`` runs the old way (stacks in
  the episodes, RLlib's own buffer) for comparison; the learner sees the same batches.

``--measure-buffer`` fills both kinds of buffer with the same number of steps of the game
(random actions, RLlib's env runner) and prints their memory per stored step.

Run: ``python examples/dqn_atari.py`` (``--env ALE/Breakout-v5`` for another game) trains
until ``--stop-reward`` or ``--stop-timesteps``; reaching good Pong scores takes millions of
steps, i.e. a GPU (used when there is one) and hours, not a laptop CPU. ``--smoke`` trains a
few hundred steps in seconds; ``--measure-buffer`` (with ``--smoke``: 500 steps) only
measures. Needs ``pip install "rlblocks[ray,atari]"``.
"""

from __future__ import annotations

import argparse
import math
import time
import tracemalloc
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import torch
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.utils.from_config import from_config
from ray.rllib.utils.replay_buffers import ReplayBuffer
from ray.tune import register_env
from rlblocks.rllib import atari_replay_buffer_config, env_to_module, rl_module_spec
from rlblocks.wrappers.atari import wrap_deepmind

ENV_NAME = "rlblocks-dqn-atari"
#: rlblocks' model config: 84x84 gray frames, 4 stacked, RLlib's default conv stack for them.
MODEL = {"dim": 84, "framestack": True}


def make_env(env_config: dict[str, Any]) -> gym.Env:
    """The ALE game (every frame, no sticky actions) with the env-side DeepMind wrappers."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(
        env_config["id"], frameskip=1, repeat_action_probability=0.0, full_action_space=False
    )
    return wrap_deepmind(env, dim=MODEL["dim"], noframeskip=True, warp=False)


def replay_buffer_config(capacity: int, stack_in_episode: bool) -> dict[str, Any]:
    """rlblocks' frame-stacking buffer, or RLlib's own for episodes that hold the stacks."""
    if stack_in_episode:
        return {
            "type": "PrioritizedEpisodeReplayBuffer",
            "capacity": capacity,
            "alpha": 0.6,
            "beta": 0.4,
        }
    return atari_replay_buffer_config(MODEL, capacity)


def build_config(args: argparse.Namespace, stack_in_episode: bool) -> DQNConfig:
    """The DQN config: the Nature DQN's rhythm (one update of 32 per 4 env steps) with
    RLlib's double-Q, dueling head, 3-step returns and prioritized replay."""
    smoke = args.smoke
    return (
        DQNConfig()
        .environment(ENV_NAME, env_config={"id": args.env})
        .rl_module(rl_module_spec=rl_module_spec(MODEL, algo="DQN"))
        .env_runners(
            num_env_runners=args.num_env_runners,
            num_envs_per_env_runner=1,
            rollout_fragment_length=4,
            env_to_module_connector=env_to_module(
                MODEL, atari=True, stack_in_episode=stack_in_episode
            ),
        )
        .learners(num_learners=0, num_gpus_per_learner=1 if torch.cuda.is_available() else 0)
        .training(
            lr=1e-4,
            gamma=0.99,
            n_step=3,
            train_batch_size_per_learner=16 if smoke else 32,
            double_q=True,
            dueling=True,
            grad_clip=10.0,
            target_network_update_freq=200 if smoke else 8000,
            epsilon=[(0, 1.0), (1000 if smoke else 250_000, 0.01)],
            num_steps_sampled_before_learning_starts=100 if smoke else 20_000,
            # smoke: one update per 16 sampled steps (the full run's is one per 4)
            training_intensity=1.0 if smoke else None,
            replay_buffer_config=replay_buffer_config(args.capacity, stack_in_episode),
        )
        .reporting(
            min_time_s_per_iteration=0, min_sample_timesteps_per_iteration=100 if smoke else 1000
        )
        .debugging(seed=args.seed)
    )


def stored_frames_bytes(buffer: Any) -> int:
    """Bytes of the observations a replay buffer's episodes hold."""
    return sum(int(ep.get_observations().nbytes) for ep in buffer.episodes)


def measure_buffer(args: argparse.Namespace, steps: int) -> list[dict[str, Any]]:
    """Fills a replay buffer with ``steps`` env steps (random actions, RLlib's env runner and
    the frame connector), once with stacks in the episodes and RLlib's buffer, once with
    single frames and rlblocks' buffer; the memory each buffer took (tracemalloc: its
    copies of the episodes, observations and everything else) and its observations' bytes."""
    rows = []
    for stack_in_episode in (True, False):
        runner = SingleAgentEnvRunner(config=build_config(args, stack_in_episode))
        episodes = runner.sample(num_timesteps=steps, random_actions=True)
        runner.stop()
        buffer = from_config(ReplayBuffer, replay_buffer_config(2 * steps, stack_in_episode))
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        buffer.add(episodes)
        total = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        stored = buffer.get_num_timesteps()
        rows.append(
            {
                "storage": "stacks in episode" if stack_in_episode else "single frames",
                "buffer": type(buffer).__name__,
                "steps": stored,
                "obs_per_step": stored_frames_bytes(buffer) / stored,
                "total_per_step": total / stored,
            }
        )
    print(
        f"\nreplay buffer memory, {args.env}, {MODEL['dim']}x{MODEL['dim']} frames, 4 "
        "stacked (bytes per stored step):"
    )
    print(f"{'storage':<18} {'buffer':<41} {'steps':>6} {'observations':>13} {'total':>9}")
    for row in rows:
        print(
            f"{row['storage']:<18} {row['buffer']:<41} {row['steps']:>6} "
            f"{row['obs_per_step']:>13.0f} {row['total_per_step']:>9.0f}"
        )
    print(
        f"single frames use {rows[1]['total_per_step'] / rows[0]['total_per_step']:.1%} of "
        "the memory of stacks in episode"
    )
    return rows


def train(args: argparse.Namespace) -> dict[str, Any]:
    """Trains until the stop reward or timesteps (``--smoke``: 200 steps); returns the last
    iteration's summary."""
    stop_timesteps = 200 if args.smoke else args.stop_timesteps
    algo = build_config(args, args.stack_in_episode).build_algo()
    start = time.perf_counter()
    summary: dict[str, Any] = {}
    try:
        while True:
            result = algo.train()
            runners = result.get("env_runners", {})
            learner = result.get("learners", {}).get("default_policy", {})
            steps = int(runners.get("num_env_steps_sampled_lifetime", 0))
            summary = {
                "training_iteration": int(result["training_iteration"]),
                "timesteps_total": steps,
                "episode_return_mean": float(runners.get("episode_return_mean", math.nan)),
                "qf_loss": float(learner.get("qf_loss", math.nan)),
            }
            print(
                f"iter {summary['training_iteration']:>4}  steps {steps:>8}  return "
                f"{summary['episode_return_mean']:>6.1f}  qf_loss {summary['qf_loss']:.4f}  "
                f"{time.perf_counter() - start:7.1f} s"
            )
            if steps >= stop_timesteps or summary["episode_return_mean"] >= args.stop_reward:
                break
        buffer = algo.local_replay_buffer
        stored = buffer.get_num_timesteps()
        summary["buffer_obs_bytes_per_step"] = stored_frames_bytes(buffer) / max(stored, 1)
        print(
            f"replay buffer ({type(buffer).__name__}): {stored} stored steps, "
            f"{summary['buffer_obs_bytes_per_step']:.0f} observation bytes per stored step"
        )
    finally:
        algo.stop()
    return summary


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Trains (or with ``--measure-buffer`` measures); returns the summary."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--env", default="ALE/Pong-v5", help="an ALE id")
    parser.add_argument("--smoke", action="store_true", help="a few hundred steps")
    parser.add_argument("--stop-reward", type=float, default=18.0)
    parser.add_argument("--stop-timesteps", type=int, default=10_000_000)
    parser.add_argument(
        "--capacity", type=int, default=100_000, help="replay buffer capacity (env steps)"
    )
    parser.add_argument(
        "--stack-in-episode",
        action="store_true",
        help="keep the 4-frame stacks in the episodes (RLlib's own buffer)",
    )
    parser.add_argument(
        "--measure-buffer",
        type=int,
        nargs="?",
        const=5000,
        default=None,
        metavar="STEPS",
        help="only measure both buffers' memory at STEPS "
        "stored steps (default 5000; 500 with --smoke)",
    )
    parser.add_argument("--num-env-runners", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    register_env(ENV_NAME, make_env)
    if args.measure_buffer is not None:
        steps = min(args.measure_buffer, 500) if args.smoke else args.measure_buffer
        rows = measure_buffer(args, steps)
        return {"buffer_rows": rows}
    return train(args)


if __name__ == "__main__":
    main()
