"""Benchmark: sequence chopping (C++ vs numpy), LSTM wrapper overhead, GTrXL step latency.

Cases (all measured in one process, one run):

* ``chop_into_sequences 64k rows``: a PPO-like batch (obs [N, 16] float32, actions, rewards,
  dones, logp, two LSTM state columns [N, 64]), episodes of random length, max_seq_len 20;
  rlblocks (C++ kernel) vs the same function on the numpy reference (``RLBLOCKS_IMPL=numpy``).
* ``pad kernel 64k rows``: the padding kernel alone (``_core.pad_sequences`` vs the numpy twin).
* ``lstm forward B=64 T=20``: ``LSTMWrapper`` around an FC model without hidden layers vs a
  bare ``nn.LSTM`` + the same two linear heads (forward, no grad); and the default FC
  ([256, 256]) wrapper vs the bare FC + LSTM + heads.
* ``gtrxl step B=...``: per-step inference latency of ``AttentionWrapper`` (default attention
  config) carrying its memory, at B=1 and B=64 (reported; no alternative).

Run ``rlblocks bench sequences [--quick]``.
"""

from __future__ import annotations

import argparse
import sys

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlblocks import _impl
from rlblocks._reference import sequences as ref
from rlblocks.benchmarking.harness import Result, measure, report
from rlblocks.sequences import chop_into_sequences


def _batch(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    lengths = rng.geometric(1 / 60, size=n // 10 + 10)
    eps = np.repeat(np.arange(len(lengths)), lengths)[:n]
    return {
        "obs": rng.normal(size=(n, 16)).astype(np.float32),
        "actions": rng.integers(0, 4, n),
        "rewards": rng.normal(size=n).astype(np.float32),
        "dones": rng.random(n) < 0.01,
        "logp": rng.normal(size=n).astype(np.float32),
        "h": rng.normal(size=(n, 64)).astype(np.float32),
        "c": rng.normal(size=(n, 64)).astype(np.float32),
        "eps_id": eps,
    }


def bench_chop(n: int, min_time: float, threads: int) -> list[Result]:
    rng = np.random.default_rng(0)
    b = _batch(n, rng)

    def chop() -> object:
        return chop_into_sequences(
            feature_columns=[b["obs"], b["actions"], b["rewards"], b["dones"], b["logp"]],
            state_columns=[b["h"], b["c"]],
            episode_ids=b["eps_id"],
            max_seq_len=20,
        )

    import rlblocks
    from rlblocks import _core

    case = f"chop_into_sequences {n // 1024}k rows"
    lens = ref.seq_lens_from_ids(b["eps_id"], None, None, 20)
    leaves = [b["obs"], b["actions"], b["rewards"], b["dones"], b["logp"]]
    pad_case = f"pad kernel {n // 1024}k rows"
    saved = _impl.native()
    results = []
    try:
        _impl.use_numpy_reference(False)
        for thr in sorted({1, threads}):
            rlblocks.set_num_threads(thr)
            name = "rlblocks C++" + (f" ({thr} threads)" if thr > 1 else "")
            results.append(measure(case, name, chop, n, batch=n, threads=thr, min_time=min_time))
            results.append(
                measure(
                    pad_case,
                    name,
                    lambda: _core.pad_sequences(leaves, lens, 20, False),
                    n,
                    batch=n,
                    threads=thr,
                    min_time=min_time,
                )
            )
        _impl.use_numpy_reference(True)
        results.append(measure(case, "numpy reference", chop, n, batch=n, min_time=min_time))
        results.append(
            measure(
                pad_case,
                "numpy reference",
                lambda: ref.pad_sequences(leaves, lens, 20, False),
                n,
                batch=n,
                min_time=min_time,
            )
        )
    finally:
        _impl.use_numpy_reference(not saved)
        rlblocks.set_num_threads(threads)
    results.sort(key=lambda r: r.case)
    return results


class _BareLSTM(nn.Module):
    def __init__(self, in_size: int, hiddens: list[int], cell: int, num_outputs: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for h in hiddens:
            layers += [nn.Linear(in_size, h), nn.Tanh()]
            in_size = h
        self.fc = nn.Sequential(*layers)
        self.lstm = nn.LSTM(in_size, cell, batch_first=True)
        self.logits = nn.Linear(cell, num_outputs)
        self.value = nn.Linear(cell, 1)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, b: int) -> object:
        x = self.fc(x)
        x = x.reshape(b, -1, x.shape[-1])
        out, (h2, c2) = self.lstm(x, (h[None], c[None]))
        return self.logits(out).reshape(-1, self.logits.out_features), self.value(out), h2, c2


def bench_lstm(min_time: float) -> list[Result]:
    from rlblocks.models.fcnet import FullyConnectedNetwork
    from rlblocks.models.recurrent import LSTMWrapper

    b, t, obs_dim, cell, n_out = 64, 20, 64, 256, 6
    obs_space = gym.spaces.Box(-1, 1, (obs_dim,), np.float32)
    x = torch.randn(b * t, obs_dim)
    lens = torch.full((b,), t)
    h, c = torch.zeros(b, cell), torch.zeros(b, cell)
    results = []
    for hiddens in ([], [256, 256]):
        torch.manual_seed(0)
        cfg = {"fcnet_hiddens": hiddens, "lstm_cell_size": cell}
        model = LSTMWrapper(
            obs_space,
            gym.spaces.Discrete(n_out),
            n_out,
            cfg,
            "lstm",
            wrapped_cls=FullyConnectedNetwork,
        )
        bare = _BareLSTM(obs_dim, hiddens, cell, n_out)
        case = f"lstm fwd B=64 T=20 fc={hiddens}"

        def ours(model: LSTMWrapper = model) -> object:
            with torch.no_grad():
                out, state = model({"obs": x}, [h, c], lens)
                return out, model.value_function(), state

        def theirs(bare: nn.Module = bare) -> object:
            with torch.no_grad():
                return bare(x, h, c, b)

        results.append(
            measure(case, "rlblocks LSTMWrapper", ours, b * t, batch=b, min_time=min_time)
        )
        results.append(
            measure(case, "bare nn.LSTM + heads", theirs, b * t, batch=b, min_time=min_time)
        )
    return results


def bench_gtrxl(min_time: float) -> list[Result]:
    from rlblocks.models.attention import AttentionWrapper
    from rlblocks.models.fcnet import FullyConnectedNetwork

    results = []
    obs_space = gym.spaces.Box(-1, 1, (16,), np.float32)
    torch.manual_seed(0)
    model = AttentionWrapper(
        obs_space,
        gym.spaces.Discrete(4),
        4,
        {"fcnet_hiddens": [64]},
        "att",
        wrapped_cls=FullyConnectedNetwork,
    )
    model.eval()
    for b in (1, 64):
        obs = torch.randn(b, 16)
        lens = torch.ones(b, dtype=torch.int64)
        holder = {
            "state": [s[None].expand(b, -1, -1).contiguous() for s in model.get_initial_state()]
        }

        def step(
            obs: torch.Tensor = obs, lens: torch.Tensor = lens, holder: dict = holder
        ) -> object:
            with torch.no_grad():
                out, holder["state"] = model({"obs": obs}, holder["state"], lens)
                return out

        results.append(
            measure(
                f"gtrxl step B={b} (per step)",
                "rlblocks AttentionWrapper",
                step,
                1,
                batch=b,
                min_time=min_time,
                memory=50,
                attention_dim=64,
            )
        )
    return results


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints JSON lines plus a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short timings (smoke run)")
    parser.add_argument("--rows", type=int, default=65536, help="rows for the chop benchmark")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads; the C++ rows also run with this many",
    )
    args = parser.parse_args(argv)
    import rlblocks

    rlblocks.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    min_time = 0.05 if args.quick else 0.5
    results = bench_chop(args.rows, min_time, args.threads)
    torch_results = bench_lstm(min_time) + bench_gtrxl(min_time)
    for r in torch_results:
        r.threads = args.threads
    results += torch_results
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
