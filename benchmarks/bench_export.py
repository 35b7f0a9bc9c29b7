"""Benchmark: single-observation action latency of an exported policy (JSON lines + a table).

Cases: the CartPole default net (two tanh layers of 64, Discrete(2)) and the default 84x84x4
vision net (uint8 frames, Discrete(6)), each from a fresh ``PPOTrainer`` (untrained weights
time the same as trained ones). One raw observation in, one deterministic action out:

* ``rlblocks OnnxPolicy.compute_single_action``: the C++ preprocessor, then onnxruntime
  (1 thread) on the exported ``.onnx`` (model, filter and argmax inside).
* ``rlblocks TorchExportPolicy.compute_single_action``: the same with the ``.pt2`` program.
* ``trainer.compute_single_action``: the trainer's own path (preprocessor, filter, policy;
  the FC net takes its numpy fast path there).
* ``torch model forward``: ``model({"obs": x})`` and ``argmax`` under
  ``torch.inference_mode`` on an already preprocessed tensor (no preprocessing, no
  distribution object): the bare cost of the network in torch.
* ``torch model forward + value``: the same plus ``model.value_function()``, which the
  other rows compute too (the default vision net has a separate value tower, run only when
  the value is asked for).

Run ``python benchmarks/bench_export.py [--quick]``; needs the ``export`` extra.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from rlblocks.benchmarking import harness

__all__ = ["main"]


class _FrameEnv(gym.Env):
    """84x84x4 uint8 frames and 6 actions (no emulator needed to time the policy)."""

    observation_space = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    action_space = gym.spaces.Discrete(6)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> Any:
        return self.observation_space.sample(), 0.0, False, False, {}


def _cases() -> dict[str, dict[str, Any]]:
    return {
        "CartPole net (64x64 tanh)": {"env": "CartPole-v1"},
        "vision net 84x84x4": {"env": lambda _cfg: _FrameEnv()},
    }


def run(quick: bool = False, min_time: float = 0.5) -> list[harness.Result]:
    """Measures every method of every case; returns the rows (ratios not yet set)."""
    from rlblocks.export.exporter import export_policy
    from rlblocks.export.onnx_policy import OnnxPolicy
    from rlblocks.export.torch_policy import TorchExportPolicy
    from rlblocks.train.ppo import PPOTrainer

    rows: list[harness.Result] = []
    repeats = 3 if quick else 7
    min_time = min_time / 4 if quick else min_time
    with tempfile.TemporaryDirectory() as tmp:
        for case, config in _cases().items():
            trainer = PPOTrainer({**config, "num_envs": 1, "seed": 0, "num_threads": 1})
            try:
                onnx_policy = OnnxPolicy(export_policy(trainer, Path(tmp) / "p.onnx"))
                pt2_policy = TorchExportPolicy(
                    export_policy(trainer, Path(tmp) / "p.pt2", "torch-export")
                )
                env = trainer.evaluation_env()
                obs, _ = env.reset(seed=0)
                env.close()
                x = torch.from_numpy(
                    np.asarray(trainer.preprocessor.transform_batch([obs]), np.float32)
                )
                model = trainer.model
                model.eval()

                def torch_forward(model: Any = model, x: torch.Tensor = x) -> Any:
                    with torch.inference_mode():
                        return model({"obs": x})[0].argmax(-1)

                def torch_forward_value(model: Any = model, x: torch.Tensor = x) -> Any:
                    with torch.inference_mode():
                        return model({"obs": x})[0].argmax(-1), model.value_function()

                a_onnx, _ = onnx_policy.compute_single_action(obs)
                a_trainer, _ = trainer.compute_single_action(obs)
                same = bool(np.asarray(a_onnx) == np.asarray(a_trainer))
                methods = [
                    (
                        "rlblocks OnnxPolicy",
                        lambda p=onnx_policy, o=obs: p.compute_single_action(o),
                    ),
                    (
                        "rlblocks TorchExportPolicy",
                        lambda p=pt2_policy, o=obs: p.compute_single_action(o),
                    ),
                    (
                        "trainer.compute_single_action",
                        lambda t=trainer, o=obs: t.compute_single_action(o),
                    ),
                    ("torch model forward", torch_forward),
                    ("torch model forward + value", torch_forward_value),
                ]
                for name, fn in methods:
                    rows.append(
                        harness.measure(
                            case, name, fn, 1, min_time=min_time, repeats=repeats, same_action=same
                        )
                    )
            finally:
                trainer.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timings")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    harness.report(run(quick=args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
