"""Benchmark: action distributions vs calling ``torch.distributions`` directly.

Each case builds the distribution from a ``[B, n]`` model output, then draws a sample,
scores it (``logp``) and computes the entropy, which is what a policy-gradient step does.
The alternatives do the same with ``torch.distributions`` written by hand: once with
torch's defaults (argument validation on) and once with ``validate_args=False``. One more
case times what SAC's closed-form update does with its squashed Gaussian (a reparameterised
draw, its log-density, and their gradient with respect to the actor's outputs): the native
kernels against their numpy twin and against autograd through ``SquashedGaussian``. Ratios
above 1 mean rlblocks is faster than the best alternative.

Run ``python benchmarks/bench_distributions.py [--quick] [--batch 4096]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial

import gymnasium as gym
import torch
from rlblocks import _core
from rlblocks import distributions as rd
from rlblocks._reference import squashed_gaussian as twin
from rlblocks.benchmarking import harness
from rlblocks.distributions.base import MAX_LOG_NN_OUTPUT, MIN_LOG_NN_OUTPUT

TD = torch.distributions


def _rl(make: Callable[[], rd.ActionDistribution]) -> Callable[[], object]:
    def step() -> object:
        d = make()
        a = d.sample()
        return d.logp(a), d.entropy()

    return step


def _cases(batch: int) -> list[tuple[str, Callable[[], object], Callable[[bool], object]]]:
    """(case, rlblocks step, alternative step taking ``validate``)."""
    g = torch.Generator().manual_seed(0)
    out: list[tuple[str, Callable[[], object], Callable[[bool], object]]] = []

    n = 16
    logits = torch.randn(batch, n, generator=g)

    def cat_alt(validate: bool) -> object:
        d = TD.Categorical(logits=logits, validate_args=validate)
        a = d.sample()
        return d.log_prob(a), d.entropy()

    out.append((f"categorical n={n}", _rl(lambda: rd.Categorical(logits, None)), cat_alt))

    mask = torch.rand(batch, n, generator=g) > 0.5
    mask[:, 0] = True
    masked = logits + torch.clamp(torch.log(mask.float()), min=rd.FLOAT_MIN)

    def masked_alt(validate: bool) -> object:
        d = TD.Categorical(logits=masked, validate_args=validate)
        a = d.sample()
        return d.log_prob(a), d.entropy()

    out.append((f"masked categorical n={n}", _rl(lambda: rd.MaskedCategorical(masked)), masked_alt))

    lens = [3, 4, 5, 6]
    mc_in = torch.randn(batch, sum(lens), generator=g)

    def mc_alt(validate: bool) -> object:
        ds = [TD.Categorical(logits=p, validate_args=validate) for p in mc_in.split(lens, 1)]
        a = torch.stack([d.sample() for d in ds], 1)
        logp = sum(d.log_prob(x) for d, x in zip(ds, a.unbind(1), strict=True))
        return logp, sum(d.entropy() for d in ds)

    out.append(
        ("multicategorical [3,4,5,6]", _rl(lambda: rd.MultiCategorical(mc_in, None, lens)), mc_alt)
    )

    d_act = 8
    gauss_in = torch.randn(batch, 2 * d_act, generator=g)

    def gauss_alt(validate: bool) -> object:
        mean, log_std = gauss_in.chunk(2, 1)
        d = TD.Normal(mean, log_std.exp(), validate_args=validate)
        a = d.sample()
        return d.log_prob(a).sum(1), d.entropy().sum(1)

    out.append(
        (f"diag gaussian d={d_act}", _rl(lambda: rd.DiagGaussian(gauss_in, None)), gauss_alt)
    )

    def beta_alt(validate: bool) -> object:
        conc = torch.nn.functional.softplus(gauss_in.clamp(-13.8155, 13.8155)) + 1.0
        alpha, beta = conc.chunk(2, 1)
        d = TD.Beta(alpha, beta, validate_args=validate)
        a = d.rsample()
        return d.log_prob(a).sum(1), d.entropy().sum(1)

    out.append((f"beta d={d_act}", _rl(lambda: rd.Beta(gauss_in, None)), beta_alt))

    dir_in = torch.randn(batch, d_act, generator=g)

    def dir_alt(validate: bool) -> object:
        d = TD.Dirichlet(dir_in.exp() + 1e-7, validate_args=validate)
        a = d.sample()
        return d.log_prob(a), d.entropy()

    out.append((f"dirichlet d={d_act}", _rl(lambda: rd.Dirichlet(dir_in, None)), dir_alt))

    space = gym.spaces.Tuple((gym.spaces.Discrete(5), gym.spaces.Box(-1, 1, (4,))))
    cls, width = rd.select_action_dist(space, {})
    ma_in = torch.randn(batch, width, generator=g)

    def ma_alt(validate: bool) -> object:
        c_in, g_in = ma_in.split([5, 8], 1)
        c = TD.Categorical(logits=c_in, validate_args=validate)
        mean, log_std = g_in.chunk(2, 1)
        n_ = TD.Normal(mean, log_std.exp(), validate_args=validate)
        a0, a1 = c.sample(), n_.sample()
        return c.log_prob(a0) + n_.log_prob(a1).sum(1), c.entropy() + n_.entropy().sum(1)

    out.append(("multi-action (Discrete(5), Box(4))", _rl(lambda: cls(ma_in, None)), ma_alt))

    sq_low, sq_high = -2.0, 3.0

    def squash_alt(validate: bool) -> object:
        mean, log_std = gauss_in.chunk(2, 1)
        base = TD.Normal(mean, log_std.clamp(-5, 2).exp(), validate_args=validate)
        scale = (sq_high - sq_low) / 2
        tfm = [TD.TanhTransform(), TD.AffineTransform(sq_low + scale, scale)]
        d = TD.TransformedDistribution(base, tfm, validate_args=validate)
        a = d.sample()
        return d.log_prob(a).sum(1)  # no closed-form entropy: sample + logp only

    def squash_rl() -> object:
        d = rd.SquashedGaussian(gauss_in, None, sq_low, sq_high)
        return d.logp(d.sample())

    out.append((f"squashed gaussian d={d_act} (no entropy)", squash_rl, squash_alt))
    return out


def _sac_case(batch: int, d: int = 8) -> tuple[str, list[tuple[str, Callable[[], object]]]]:
    """SAC's squashed Gaussian over ``[-1, 1]``: one draw per row, its logp, and the
    gradient of ``sum(d_action * action) + coef * sum(logp)`` for the actor's outputs."""
    g = torch.Generator().manual_seed(1)
    inputs = torch.randn(batch, 2 * d, generator=g)
    d_action = torch.randn(batch, d, generator=g)
    host, d_host, bounds, coef = inputs.numpy(), d_action.numpy(), (-5.0, 2.0), 0.01
    assert bounds == (MIN_LOG_NN_OUTPUT, MAX_LOG_NN_OUTPUT)

    def arrays(module: object) -> object:
        noise = torch.randn(batch, d).numpy()
        out = module.squashed_gaussian_sample(host, noise, *bounds)  # type: ignore[attr-defined]
        grad = module.squashed_gaussian_grad(host, noise, d_host, coef, *bounds)  # type: ignore[attr-defined]
        return out, grad

    def autograd() -> object:
        x = inputs.clone().requires_grad_(True)
        action, logp = rd.SquashedGaussian(x).rsample_and_logp()
        ((d_action * action).sum() + coef * logp.sum()).backward()
        return logp.detach(), x.grad

    methods: list[tuple[str, Callable[[], object]]] = [
        ("rlblocks (native)", partial(arrays, _core)),
        ("numpy twin", partial(arrays, twin)),
        ("torch autograd", autograd),
    ]
    return f"SAC squashed gaussian d={d} + grad", methods


def main(argv: list[str] | None = None) -> list[harness.Result]:
    """Runs every case in this process and prints JSON lines and a table.

    Methods of a case are measured in interleaved rounds and each keeps its best round, so
    a burst of load on a shared machine does not land on one method only.
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short timings (smoke test)")
    parser.add_argument("--batch", type=int, default=4096, help="batch size B")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    min_time = 0.05 if args.quick else 0.3
    repeats = 3 if args.quick else 5
    rounds = args.rounds or (1 if args.quick else 3)
    results: list[harness.Result] = []
    cases = [
        (
            case,
            [
                ("rlblocks", ours),
                ("torch.distributions", partial(alt, True)),
                ("torch.distributions(no validate)", partial(alt, False)),
            ],
        )
        for case, ours, alt in _cases(args.batch)
    ]
    for case, methods in [*cases, _sac_case(args.batch)]:
        best: dict[str, harness.Result] = {}
        for _ in range(rounds):
            for method, fn in methods:
                r = harness.measure(
                    case,
                    method,
                    fn,
                    args.batch,
                    batch=args.batch,
                    threads=args.threads,
                    min_time=min_time,
                    repeats=repeats,
                )
                if method not in best or r.us_per_item < best[method].us_per_item:
                    best[method] = r
        results.extend(best[m] for m, _ in methods)
    harness.report(results)
    slow = [(r.case, r.ratio) for r in results if r.ratio is not None and r.ratio < 1 / 1.1]
    if slow:
        names = ", ".join(f"{case} ({1 / ratio - 1:+.0%})" for case, ratio in slow)
        print(f"overhead above 10% vs the best alternative: {names}")
    else:
        print("rlblocks overhead is within 10% of the best alternative in every case")
    return results


if __name__ == "__main__":
    main()
