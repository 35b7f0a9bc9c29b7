"""Benchmark: forward latency of the built-in models against a plain ``nn.Sequential``.

Cases: ``FullyConnectedNetwork`` (fcnet_hiddens [256, 256], tanh) on a 64-float
observation, and ``VisionNetwork`` (default 84x84 filters) on 84x84x4 frames, at B=1 and
B=256, inference mode (``torch.inference_mode``). The alternative is an ``nn.Sequential``
of the same layers with the same weights, so the difference is the ModelV2 call overhead
(input dict, obs restore check, value-function bookkeeping). Rows:

* ``rlblocks model(input_dict)``: ``model({"obs": x})``, the logits.
* ``rlblocks model + value_function``: the same plus ``model.value_function()``.
* ``nn.Sequential``: the logits from the bare layers.
* ``RLlib model(input_dict)``: RLlib's own torch model with the same weights, only when
  ``ray[rllib]`` is importable (e.g. run this with a scratch venv's Python).

Run ``python benchmarks/bench_models.py [--quick] [--threads N]``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch
from rlblocks.benchmarking import harness
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.models.misc import SlimConv2d, SlimFC
from rlblocks.models.visionnet import VisionNetwork
from torch import nn

__all__ = ["main"]

FC_OBS = 64
N_ACTIONS = 6


def _layers(module: nn.Module) -> list[nn.Module]:
    """The primitive layers (Linear, Conv2d, padding, activations) in forward order."""
    if isinstance(module, (SlimFC, SlimConv2d)):
        return list(module._model)
    if isinstance(module, nn.Sequential):
        return [layer for child in module for layer in _layers(child)]
    return [module]


class _NHWCToNCHW(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 3, 1, 2)


def build_fc() -> tuple[FullyConnectedNetwork, nn.Sequential, tuple[int, ...]]:
    """The FC model and an ``nn.Sequential`` sharing its layers (same weights)."""
    model = FullyConnectedNetwork(
        gym.spaces.Box(-1, 1, (FC_OBS,)),
        gym.spaces.Discrete(N_ACTIONS),
        N_ACTIONS,
        _FC_CONFIG,
        "fc",
    )
    assert model._logits is not None
    seq = nn.Sequential(*_layers(model._hidden_layers), *_layers(model._logits))
    return model, seq, (FC_OBS,)


def build_vision() -> tuple[VisionNetwork, nn.Sequential, tuple[int, ...]]:
    """The vision model and an ``nn.Sequential`` sharing its layers (same weights)."""
    model = VisionNetwork(
        gym.spaces.Box(0, 1, (84, 84, 4)), gym.spaces.Discrete(N_ACTIONS), N_ACTIONS, {}, "cnn"
    )
    assert model._logits is not None
    seq = nn.Sequential(
        _NHWCToNCHW(), *_layers(model._convs), *_layers(model._logits), nn.Flatten()
    )
    return model, seq, (84, 84, 4)


_FC_CONFIG: dict[str, Any] = {"fcnet_hiddens": [256, 256], "fcnet_activation": "tanh"}


def _rllib_twin(model: Any) -> nn.Module | None:
    """RLlib's model of the same class and config, holding the same weights (if installed)."""
    try:
        from ray.rllib.models.catalog import MODEL_DEFAULTS as RLLIB_DEFAULTS
        from ray.rllib.models.torch.fcnet import FullyConnectedNetwork as RLlibFC
        from ray.rllib.models.torch.visionnet import VisionNetwork as RLlibVision
    except ImportError:
        return None
    config = dict(RLLIB_DEFAULTS)
    if isinstance(model, FullyConnectedNetwork):
        cls: Any = RLlibFC
        config.update(_FC_CONFIG)
    else:
        cls = RLlibVision
    twin = cls(model.obs_space, model.action_space, model.num_outputs, config, "rllib")
    twin.load_state_dict(model.state_dict())
    twin.eval()
    return twin


def _check_same(model: nn.Module, seq: nn.Module, x: torch.Tensor) -> None:
    with torch.inference_mode():
        ours = model({"obs": x})[0]
        ref = seq(x)
    if not torch.allclose(ours, ref, atol=1e-5, rtol=1e-4):
        raise RuntimeError("benchmark setup error: the nn.Sequential differs from the model")


def run_case(
    name: str,
    build: Callable[[], tuple[Any, nn.Sequential, tuple[int, ...]]],
    batches: list[int],
    threads: int,
    min_time: float,
) -> list[harness.Result]:
    model, seq, obs_shape = build()
    model.eval()
    seq.eval()
    rllib = _rllib_twin(model)
    results = []
    for batch in batches:
        x = torch.rand(batch, *obs_shape)
        _check_same(model, seq, x)
        input_dict = {"obs": x}

        def ours(input_dict: dict = input_dict) -> Any:
            with torch.inference_mode():
                return model(input_dict)[0]

        def ours_value(input_dict: dict = input_dict) -> Any:
            with torch.inference_mode():
                out = model(input_dict)[0]
                return out, model.value_function()

        def plain(x: torch.Tensor = x) -> Any:
            with torch.inference_mode():
                return seq(x)

        methods: list[tuple[str, Callable[[], Any]]] = [
            ("nn.Sequential", plain),
            ("rlblocks model(input_dict)", ours),
            ("rlblocks model + value_function", ours_value),
        ]
        if rllib is not None:
            _check_same(rllib, seq, x)

            def theirs(input_dict: dict = input_dict) -> Any:
                with torch.inference_mode():
                    return rllib(dict(input_dict))[0]  # type: ignore[misc]

            methods.append(("RLlib model(input_dict)", theirs))
        for method, fn in methods:
            results.append(
                harness.measure(
                    name, method, fn, batch, batch=batch, threads=threads, min_time=min_time
                )
            )
    return results


def main(argv: list[str] | None = None) -> int:
    """Runs every case in this process and prints JSON lines and a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing runs")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    min_time = 0.05 if args.quick else 0.5
    results = run_case("fc[256,256] obs=64", build_fc, [1, 256], args.threads, min_time)
    results += run_case("vision 84x84x4", build_vision, [1, 256], args.threads, min_time)
    harness.report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
