"""DQN on an Atari game: rlblocks' native DQN trainer, or RLlib's DQN with rlblocks' parts.

The default (``--backend native``) is :class:`rlblocks.train.DQNTrainer`, no Ray needed:

* the DeepMind pipeline: ``vector_mode="native"`` steps the games in
  :class:`~rlblocks.wrappers.atari_vector.AtariVectorEnv` worker processes (noop reset,
  4-frame skip with max-pooling, episodic life, FIRE reset, 84x84 gray frames through shared
  memory, 4 stacked), ``preprocessor_pref="deepmind"``;
* the Q-network: the catalog's default conv stack for 84x84 inputs (the Nature DQN's
  8x8/4, 4x4/2, 11x11 convolutions) feeding a dueling double-Q head;
* the replay buffer: :class:`rlblocks.replay.ReplayBuffer` in the C++ core stores each
  84x84 frame once and assembles a sampled transition's stacked ``o_t`` and ``o_{t+n}`` at
  sample time (``bytes_per_step``: ~7.1 KB per stored step, where a stored stack alone takes
  28 KB), so a 1M-step buffer fits in ~7 GB.

The settings are rl-baselines3-zoo's Atari DQN (one update of 32 per 4 env steps, Adam
1e-4, target copied every 1,000 steps, epsilon 1 -> 0.01 over the first 10% of 10M steps)
with RLlib's double Q and dueling head; ``rlblocks train --tuned pong_dqn`` (or
``breakout_dqn``) runs the same from the command line.

``--backend rllib`` runs the same game with RLlib's DQN (new API stack) and rlblocks'
``RLBlocksDQNRLModule``, frame connector (``env_to_module(model, atari=True,
stack_in_episode=False)``) and frame-stacking episode buffer
(``atari_replay_buffer_config``); ``--stack-in-episode`` keeps RLlib's own buffer for
comparison and ``--measure-buffer`` fills both kinds with the same steps and prints their
memory per stored step. It needs ``pip install "rlblocks[ray,atari]"``.

Run: ``python examples/dqn_atari.py`` (``--env ALE/Breakout-v5`` for another game) trains
until ``--stop-reward`` or ``--stop-timesteps``; good Pong scores take millions of steps,
i.e. a GPU (used when there is one) and hours, not a laptop CPU. ``--smoke`` trains one
short iteration in seconds. Needs ``pip install "rlblocks[atari]"``.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import time
from collections.abc import Sequence
from typing import Any

#: rlblocks' model config: 84x84 gray frames, 4 stacked, the default conv stack for them.
MODEL = {"dim": 84, "framestack": True}
#: Bytes of one stacked 4x84x84 uint8 observation (what a buffer storing stacks keeps per step).
STACK_BYTES = 4 * 84 * 84
ENV_NAME = "rlblocks-dqn-atari"


# --- the native trainer -----------------------------------------------------------------------
def native_config(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~rlblocks.train.DQNConfig` keys (``--smoke``: a tiny buffer and an early
    start, so that one 200-step iteration runs a few updates)."""
    smoke = args.smoke
    return {
        "env": args.env,
        "vector_mode": "native",  # AtariVectorEnv: worker processes, shared-memory frames
        "preprocessor_pref": "deepmind",
        "model": MODEL,
        "device": "auto",
        "seed": args.seed,
        "num_envs": 2 if smoke else args.num_envs,
        "replay_capacity": 2_000 if smoke else args.capacity,
        "learning_starts": 100 if smoke else 100_000,
        "train_batch_size": 16 if smoke else 32,
        "train_freq": 8 if smoke else 4,
        "gradient_steps": 1,
        "target_network_update_freq": 100 if smoke else 1_000,
        "lr": 1e-4,
        "gamma": 0.99,
        "double_q": True,
        "dueling": True,
        "grad_clip": 10.0,
        "epsilon": [[0, 1.0], [1_000 if smoke else 1_000_000, 0.01]],
        "timesteps_per_iteration": 200 if smoke else 10_000,
    }


def train_native(args: argparse.Namespace) -> dict[str, Any]:
    """Trains with :class:`~rlblocks.train.DQNTrainer` until the stop reward or timesteps
    (``--smoke``: one iteration); returns the last iteration's metrics and the buffer's
    bytes per stored step."""
    from rlblocks.train import DQNTrainer

    start = time.perf_counter()
    trainer = DQNTrainer(native_config(args))
    try:
        while True:
            result = trainer.train()
            print(
                f"iter {result['training_iteration']:>4}  steps {result['timesteps_total']:>8}  "
                f"return {result['episode_return_mean']:>6.1f}  "
                f"qf_loss {result.get('qf_loss', math.nan):.4f}  "
                f"epsilon {result['epsilon']:.3f}  {result['steps_per_s']:6.0f} steps/s  "
                f"{time.perf_counter() - start:7.1f} s",
                flush=True,
            )
            if (
                args.smoke
                or result["timesteps_total"] >= args.stop_timesteps
                or result["episode_return_mean"] >= args.stop_reward
            ):
                break
        replay = trainer.replay
        result["buffer_bytes_per_step"] = replay.bytes_per_step
        print(
            f"replay buffer (rlblocks.replay, each frame once): {len(replay)} stored steps, "
            f"{replay.bytes_per_step:,.0f} bytes per stored step ({replay.nbytes / 2**20:.1f} "
            f"MiB preallocated for {replay.capacity:,}); one stored 4x84x84 stack alone is "
            f"{STACK_BYTES:,}"
        )
    finally:
        trainer.close()
    return result


# --- RLlib's DQN (the ray extra) ---------------------------------------------------------------
def make_env(env_config: dict[str, Any]) -> Any:
    """The ALE game (every frame, no sticky actions) with the env-side DeepMind wrappers."""
    import ale_py
    import gymnasium as gym
    from rlblocks.wrappers.atari import wrap_deepmind

    gym.register_envs(ale_py)
    env = gym.make(
        env_config["id"], frameskip=1, repeat_action_probability=0.0, full_action_space=False
    )
    return wrap_deepmind(env, dim=MODEL["dim"], noframeskip=True, warp=False)


def replay_buffer_config(capacity: int, stack_in_episode: bool) -> dict[str, Any]:
    """rlblocks' frame-stacking buffer, or RLlib's own for episodes that hold the stacks."""
    from rlblocks.rllib import atari_replay_buffer_config

    if stack_in_episode:
        return {
            "type": "PrioritizedEpisodeReplayBuffer",
            "capacity": capacity,
            "alpha": 0.6,
            "beta": 0.4,
        }
    return atari_replay_buffer_config(MODEL, capacity)


def build_rllib_config(args: argparse.Namespace, stack_in_episode: bool) -> Any:
    """RLlib's DQN config: the Nature DQN's rhythm (one update of 32 per 4 env steps) with
    RLlib's double-Q, dueling head, 3-step returns and prioritized replay."""
    import torch
    from ray.rllib.algorithms.dqn import DQNConfig
    from rlblocks.rllib import env_to_module, rl_module_spec

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
    """Bytes of the observations an RLlib replay buffer's episodes hold."""
    return sum(int(ep.get_observations().nbytes) for ep in buffer.episodes)


def measure_rllib_buffers(args: argparse.Namespace, steps: int) -> list[dict[str, Any]]:
    """Fills an RLlib replay buffer with ``steps`` env steps (random actions, RLlib's env
    runner and the frame connector), once with stacks in the episodes and RLlib's buffer,
    once with single frames and rlblocks' buffer; the memory each buffer took (tracemalloc:
    its copies of the episodes, observations and everything else) and its observations'
    bytes."""
    import tracemalloc

    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
    from ray.rllib.utils.from_config import from_config
    from ray.rllib.utils.replay_buffers import ReplayBuffer

    rows = []
    for stack_in_episode in (True, False):
        runner = SingleAgentEnvRunner(config=build_rllib_config(args, stack_in_episode))
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


def train_rllib(args: argparse.Namespace) -> dict[str, Any]:
    """Trains RLlib's DQN until the stop reward or timesteps (``--smoke``: 200 steps);
    returns the last iteration's summary."""
    stop_timesteps = 200 if args.smoke else args.stop_timesteps
    algo = build_rllib_config(args, args.stack_in_episode).build_algo()
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
    """Trains (or with ``--backend rllib --measure-buffer`` measures); returns the summary."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--backend",
        choices=("native", "rllib"),
        default="native",
        help="rlblocks' DQNTrainer (default) or RLlib's DQN (needs the ray extra)",
    )
    parser.add_argument("--env", default="ALE/Pong-v5", help="an ALE id")
    parser.add_argument("--smoke", action="store_true", help="one short iteration")
    parser.add_argument("--stop-reward", type=float, default=18.0)
    parser.add_argument("--stop-timesteps", type=int, default=10_000_000)
    parser.add_argument(
        "--capacity", type=int, default=100_000, help="replay buffer capacity (env steps)"
    )
    parser.add_argument("--num-envs", type=int, default=4, help="games stepped together (native)")
    parser.add_argument(
        "--stack-in-episode",
        action="store_true",
        help="(rllib) keep the 4-frame stacks in the episodes (RLlib's own buffer)",
    )
    parser.add_argument(
        "--measure-buffer",
        type=int,
        nargs="?",
        const=5000,
        default=None,
        metavar="STEPS",
        help="(rllib) only measure both RLlib buffers' memory at STEPS stored steps "
        "(default 5000; 500 with --smoke)",
    )
    parser.add_argument("--num-env-runners", type=int, default=0, help="(rllib)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if importlib.util.find_spec("ale_py") is None:
        parser.exit(1, 'dqn_atari.py needs the atari extra: pip install "rlblocks[atari]"\n')
    if args.backend == "native":
        if args.measure_buffer is not None or args.stack_in_episode:
            parser.error("--measure-buffer and --stack-in-episode need --backend rllib")
        return train_native(args)
    if importlib.util.find_spec("ray") is None:
        parser.exit(
            1,
            'dqn_atari.py --backend rllib needs the ray extra: pip install "rlblocks[ray,atari]"\n',
        )
    from ray.tune import register_env

    register_env(ENV_NAME, make_env)
    if args.measure_buffer is not None:
        steps = min(args.measure_buffer, 500) if args.smoke else args.measure_buffer
        return {"buffer_rows": measure_rllib_buffers(args, steps)}
    return train_rllib(args)


if __name__ == "__main__":
    main()
