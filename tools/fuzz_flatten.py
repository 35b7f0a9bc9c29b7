#!/usr/bin/env python3
"""Differential fuzzer: the C++ flattening core against its numpy twin.

Random nested spaces (Dict / Tuple / Repeated to depth 3 over Discrete and MultiDiscrete
with ``start`` up to +-2**62, 1-d and 2-d ``nvec``, Box of every dtype, empty shapes,
MultiBinary) get valid batches and corrupted ones (wrong dtype, shape or keys, None,
strings, huge and negative integers, NaN, byte-swapped, non-contiguous and read-only
arrays, over-long lists, 0-row and 100,000-row batches, objects whose ``__index__`` empties
the list being read, huge finite and denormal floats). ``transform_batch(obs, out=buf)`` is
also driven with leaves that are views of ``buf`` itself (list and batched input, B = 1..3
and 2000): the result must equal the numpy twin's, which builds the rows before writing.
A MeanStdFilter is fed random observations mixing huge (1e308, 1e300, 3.4e38), denormal
and ordinary values one at a time: both implementations must refuse the same pushes and
give bit-identical outputs and statistics. The distribution kernels (categorical and
squashed Gaussian, tools/fuzz_kernels.py) get random shapes, dtypes and bad values: the
same acceptance, values and refusal message. Each implementation runs in its own subprocess,
so a crash is a finding, not the end of the run. A finding is: a crash, an output that
differs, one side accepting what the other refuses, a refusal message that differs (word
for word, path included), or an exception other than ValueError / TypeError.

    python tools/fuzz_flatten.py --cases 300 [--seed 0] [--jobs 2]

Every case is rebuilt from its seed in both workers, so a finding is reproduced with
``--seed S --cases 1`` (add ``--show`` to print the inputs' outcomes).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
from fuzz_kernels import flat_values, kernel_calls

STARTS = (0, 0, 0, -3, 7, 2**24 + 1, 2**40, -(2**62), 2**62)
BOX_DTYPES = (
    "float32",
    "float64",
    "float16",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
)
BIG_BATCH = 100_000
ALIAS_BIG_BATCH = 2000
HUGE = (1e308, -1e308, 1.7976931348623157e308, 1e300, -1e300, 3.4028235e38, 3.5e38, 1e154)
DENORMAL = (5e-324, -5e-324, 2.2250738585072014e-308 / 2, 1e-45, 1e-40)
FILTER_VALUES = (0.0, -0.0, 1.0, -1.0, 2.5, 1e20, -1e20, 1e154, 3.4e38) + HUGE + DENORMAL


# ------------------------------------------------------------------------ spaces


def random_space(rng: np.random.Generator, depth: int = 0) -> Any:
    import gymnasium as gym
    from rlblocks.spaces import Repeated

    kind = rng.choice(
        ["dict", "tuple", "repeated"]
        if depth == 0
        else ["discrete", "multidiscrete", "box", "multibinary"] * 2
        + (["dict", "tuple", "repeated"] if depth < 3 else [])
    )
    if kind == "dict":
        n = int(rng.integers(0, 4))
        return gym.spaces.Dict({f"k{i}": random_space(rng, depth + 1) for i in range(n)})
    if kind == "tuple":
        n = int(rng.integers(0, 4))
        return gym.spaces.Tuple([random_space(rng, depth + 1) for _ in range(n)])
    if kind == "repeated":
        return Repeated(random_space(rng, depth + 1), max_len=int(rng.integers(0, 4)))
    if kind == "discrete":
        return gym.spaces.Discrete(int(rng.integers(1, 6)), start=int(rng.choice(STARTS)))
    if kind == "multidiscrete":
        shape = [(2,), (3,), (2, 2), (1,)][int(rng.integers(0, 4))]
        nvec = rng.integers(1, 5, size=shape)
        start = np.full(shape, int(rng.choice(STARTS)), dtype=np.int64)
        return gym.spaces.MultiDiscrete(nvec, start=start)
    if kind == "box":
        shape = [(), (0,), (3,), (2, 3), (1, 2, 1)][int(rng.integers(0, 5))]
        dtype = np.dtype(str(rng.choice(BOX_DTYPES)))
        if dtype.kind == "f":
            return gym.spaces.Box(-2.0, 2.0, shape, dtype=dtype)
        return gym.spaces.Box(0, 3, shape, dtype=dtype)
    return gym.spaces.MultiBinary(int(rng.integers(1, 4)))


def stack(space: Any, samples: list) -> Any:
    """Per-env samples as one batched structure (Repeated: a list of per-env lists)."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Dict):
        return {k: stack(s, [x[k] for x in samples]) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(stack(s, [x[i] for x in samples]) for i, s in enumerate(space.spaces))
    if isinstance(
        space,
        (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary),
    ):
        dtype = space.dtype if space.dtype is not None else np.int64
        return np.asarray(samples, dtype=dtype).reshape((len(samples), *(space.shape or ())))
    return list(samples)


# ------------------------------------------------------------------------ corruptions


class ClearsListIndex:
    """An index whose ``__index__`` empties the list that holds it (then says 0)."""

    def __init__(self, holder: list):
        self.holder = holder

    def __index__(self) -> int:
        self.holder.clear()
        return 0

    def __repr__(self) -> str:
        return "ClearsListIndex()"


class ShrinkingMapping(Mapping):
    """A mapping whose ``__getitem__`` deletes every other key."""

    def __init__(self, data: dict):
        self.data = dict(data)

    def __getitem__(self, key: Any) -> Any:
        value = self.data[key]
        self.data = {key: value}
        return value

    def __iter__(self) -> Iterator:
        return iter(list(self.data))

    def __len__(self) -> int:
        return len(self.data)


class RenamingDict(dict):
    """A dict subclass whose ``__getitem__`` answers for a transformed value."""

    def __getitem__(self, key: Any) -> Any:
        return super().__getitem__(key) * 0


def leaf_paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    """Paths to every node of a sample (containers and leaves)."""
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaf_paths(v, path + (k,))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from leaf_paths(v, path + (i,))


def replace_at(value: Any, path: tuple, fn: Callable[[Any], Any]) -> Any:
    if not path:
        return fn(value)
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        out = dict(value)
        out[head] = replace_at(value[head], rest, fn)
        return out
    items = list(value)
    items[head] = replace_at(items[head], rest, fn)
    return tuple(items) if isinstance(value, tuple) else items


def corruptions(rng: np.random.Generator) -> list[tuple[str, Callable[[Any], Any]]]:
    """Named ways to damage one node of a sample."""

    def swapped(x: Any) -> Any:
        a = np.asarray(x)
        return a.astype(a.dtype.newbyteorder()) if a.dtype.kind in "iuf" else a

    def strided(x: Any) -> Any:
        a = np.asarray(x)
        return np.repeat(a, 2, axis=-1)[..., ::2] if a.ndim else a

    def read_only(x: Any) -> Any:
        a = np.array(x)
        a.setflags(write=False)
        return a

    def hostile(x: Any) -> Any:
        holder: list = [0, 0, 0]
        holder[0] = ClearsListIndex(holder)
        return holder if not isinstance(x, (int, np.integer)) else ClearsListIndex([])

    big = int(rng.choice([2**63, 2**70, -(2**70), 2**63 - 1, -(2**63), 2**24, 2**24 + 1]))
    return [
        ("None", lambda x: None),
        ("string", lambda x: "3"),
        ("complex", lambda x: np.asarray(x) + 1j if np.asarray(x).dtype != object else 1j),
        ("str array", lambda x: np.asarray(x).astype(str)),
        (
            "float",
            lambda x: (
                np.asarray(x, dtype=np.float64) + 0.5 if np.asarray(x).dtype != object else 0.5
            ),
        ),
        (
            "float16",
            lambda x: np.asarray(x).astype(np.float16) if np.asarray(x).dtype.kind in "iuf" else x,
        ),
        (
            "float32",
            lambda x: np.asarray(x).astype(np.float32) if np.asarray(x).dtype.kind in "iuf" else x,
        ),
        ("nan", lambda x: np.full(np.shape(x), np.nan)),
        ("huge int", lambda x: big),
        ("huge float", lambda x: float(big)),
        ("negative", lambda x: -1),
        ("byte-swapped", swapped),
        ("non-contiguous", strided),
        ("read-only", read_only),
        ("extra axis", lambda x: np.asarray(x)[None] if np.asarray(x).dtype != object else [x]),
        ("dropped axis", lambda x: np.asarray(x).reshape(-1)[:1] if np.size(x) else x),
        ("dict for tuple", lambda x: {"0": x}),
        ("tuple for dict", lambda x: tuple(x.values()) if isinstance(x, dict) else (x,)),
        ("missing key", lambda x: dict(list(x.items())[1:]) if isinstance(x, dict) else x),
        ("extra key", lambda x: {**x, "zz": 0} if isinstance(x, dict) else x),
        ("over-long", lambda x: list(x) * 4 + [x[0]] * 4 if isinstance(x, list) and x else x),
        ("hostile __index__", hostile),
        ("empty list", lambda x: []),
        ("0-d array", lambda x: np.asarray(0)),
        ("uint64 max", lambda x: np.full(np.shape(x), np.iinfo(np.uint64).max, np.uint64)),
        ("huge finite", lambda x: np.full(np.shape(x), float(rng.choice(HUGE)))),
        ("denormal", lambda x: np.full(np.shape(x), float(rng.choice(DENORMAL)))),
        ("float32 denormal", lambda x: np.full(np.shape(x), 1e-45, np.float32)),
        ("shrinking mapping", lambda x: ShrinkingMapping(x) if isinstance(x, dict) else x),
        ("dict subclass", lambda x: RenamingDict(x) if isinstance(x, dict) else x),
    ]


# ------------------------------------------------------------------------ one case


def case_inputs(seed: int) -> tuple[Any, list[tuple[str, str, Any]]]:
    """The space of case ``seed`` and its inputs: (name, method, value)."""
    rng = np.random.default_rng(seed)
    space = random_space(rng)
    space.seed(seed)
    batch = int(rng.choice([0, 1, 3]))
    samples = [space.sample() for _ in range(max(batch, 1))]
    inputs: list[tuple[str, str, Any]] = [
        ("valid", "transform", samples[0]),
        ("valid", "list", samples[:batch]),
        ("valid", "batched", stack(space, samples[:batch])),
    ]
    if seed % 25 == 0:  # a big batch now and then (the threaded, GIL-released path)
        big = [samples[0]] * BIG_BATCH
        inputs.append(("big", "batched", stack(space, big)))
    bad = corruptions(rng)
    for _ in range(10):
        name, fn = bad[int(rng.integers(len(bad)))]
        paths = list(leaf_paths(samples[0]))
        path = paths[int(rng.integers(len(paths)))]
        try:
            corrupt = replace_at(samples[0], path, fn)
        except Exception:  # the corruption does not apply to this node
            continue
        label = f"{name} at {path}"
        inputs.append((label, "transform", corrupt))
        inputs.append((label, "list", [samples[-1], corrupt] if batch else [corrupt]))
        try:
            batched = replace_at(stack(space, samples[: max(batch, 1)]), path, fn)
        except Exception:
            continue
        inputs.append((label, "batched", batched))
    return space, inputs


# ------------------------------------------------------------------------ out= aliasing


def alias_into(rng: np.random.Generator, value: Any, out_rows: np.ndarray) -> Any:
    """``value`` (one observation, or a batched structure when ``out_rows`` is 2-d) with its
    array leaves replaced by views of ``out_rows`` that hold the same values as float32
    (leaves float32 cannot hold exactly are kept). Leaves may overlap each other: later
    ones overwrite what earlier ones see, identically for both implementations."""
    if isinstance(value, dict):
        return {k: alias_into(rng, v, out_rows) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(alias_into(rng, v, out_rows) for v in value)
    if isinstance(value, list) or isinstance(value, Mapping):
        return value  # Repeated lists: kept as they are
    a = np.asarray(value)
    if a.dtype.kind not in "biuf":
        return value
    with np.errstate(all="ignore"):
        f = a.astype(np.float32)
        exact = np.array_equal(f.astype(a.dtype), a) and np.isfinite(f).all()
    width = out_rows.shape[-1]
    batched = out_rows.ndim == 2
    n = int(np.prod(a.shape[1:] if batched else a.shape, dtype=np.int64))
    rows_differ = batched and (a.ndim == 0 or a.shape[0] != len(out_rows))
    if not exact or n == 0 or n > width or rows_differ:
        return value
    j = int(rng.integers(0, width - n + 1))
    region = out_rows[..., j : j + n]
    region[...] = f.reshape(region.shape)
    view = region.reshape(a.shape)
    return view if np.shares_memory(view, out_rows) else value


def alias_inputs(seed: int, space: Any, samples: list) -> list[tuple[str, str, Any]]:
    """(name, method, (obs, out)) inputs whose leaves are views of ``out``."""
    from rlblocks import get_preprocessor

    rng = np.random.default_rng([seed, 1])
    size = get_preprocessor(space)(space).size
    if size == 0:
        return []
    inputs = []
    for batch in [len(samples)] + ([ALIAS_BIG_BATCH] if seed % 25 == 0 else []):
        rows = [samples[i % len(samples)] for i in range(batch)]
        out = rng.standard_normal((batch, size)).astype(np.float32)
        obs = alias_into(rng, stack(space, rows), out)
        inputs.append(("aliased out", "batched_out", (obs, out)))
        out = rng.standard_normal((batch, size)).astype(np.float32)
        obs = [alias_into(rng, r, out[i]) for i, r in enumerate(rows)]
        inputs.append(("aliased out", "list_out", (obs, out)))
    return inputs


# ------------------------------------------------------------------------ filters


def filter_outcomes(seed: int) -> Iterator[dict[str, Any]]:
    """Pushes random observations mixing huge, denormal and ordinary values one at a time
    (one observation or a 1-row batch) into a MeanStdFilter; yields each call's outcome and,
    at the end, the statistics."""
    from rlblocks.filters import MeanStdFilter

    rng = np.random.default_rng([seed, 2])
    shape = [(), (3,), (2, 2)][int(rng.integers(0, 3))]
    f = MeanStdFilter(shape, clip=float(rng.choice([10.0, 0.0])) or None)
    for _ in range(8):
        x = rng.choice(np.asarray(FILTER_VALUES), size=shape)
        if rng.random() < 0.5:  # mostly ordinary values, so that stats build up
            x = np.where(rng.random(shape) < 0.7, rng.standard_normal(shape), x)
        if rng.random() < 0.3:
            with np.errstate(over="ignore"):  # beyond float32: inf, refused by both
                x = x.astype(np.float32)
        if rng.random() < 0.3:
            x = x[None]
        update = bool(rng.random() < 0.8)
        yield outcome(lambda x=x, u=update: f(x, update=u))
    yield outcome(
        lambda: np.concatenate(
            [
                np.ravel(f.running_stats.mean),
                np.ravel(f.running_stats.std).astype(np.float64),
                [f.running_stats.n, f.buffer.n],
            ]
        )
    )


def outcome(fn: Callable[[], Any], tol: float | None = None) -> dict[str, Any]:
    """What one call gave: its exception and message, or its output's shape, dtype and
    digest (with ``tol``: a kernel's results, kept as values to compare within ``tol``)."""
    try:
        if tol is not None:
            values, meta = flat_values(fn())
            return {
                "shape": meta,
                "dtype": "kernel",
                "sha": "",
                "close": values.tolist(),
                "tol": tol,
            }
        out = np.asarray(fn())
    except (ValueError, TypeError) as err:
        return {"raises": type(err).__name__, "message": str(err)[:200]}
    except Exception as err:  # noqa: BLE001 - a finding, reported by the driver
        return {"raises": type(err).__name__, "message": str(err)[:200], "unexpected": True}
    digest = hashlib.sha256(np.ascontiguousarray(out).tobytes()).digest()
    return {
        "shape": list(out.shape),
        "dtype": str(out.dtype),
        "sha": base64.b64encode(digest[:12]).decode(),
    }


def same_output(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two accepted outcomes agree: the same shape and dtype, and the same bytes or,
    for the distribution kernels ("close": libm against numpy, about an ulp apart), the
    same values to float32 rounding (NaN where the other has NaN)."""
    if (a["shape"], a["dtype"]) != (b["shape"], b["dtype"]):
        return False
    if "close" in a or "close" in b:
        x = np.asarray(a.get("close", []), np.float64)
        y = np.asarray(b.get("close", []), np.float64)
        tol = max(a.get("tol", 0.0), b.get("tol", 0.0))
        return x.shape == y.shape and bool(np.allclose(x, y, rtol=tol, atol=tol, equal_nan=True))
    return a["sha"] == b["sha"]


def run_worker(first: int, cases: int, inject: str | None = None) -> None:
    """Runs cases [first, first + cases) with this process's implementation; one JSON line
    per input, flushed, so that a crash leaves what came before it. ``inject`` ("crash",
    "differ" or "message") sabotages the native worker, to show that the driver reports
    each."""
    import warnings

    import rlblocks as rb
    from rlblocks import _impl

    warnings.simplefilter("ignore")
    if inject and _impl.native():
        if inject == "crash":
            os.abort()
        cls = rb.preprocessors._FlatteningPreprocessor
        if inject == "message":  # the same refusals, reworded
            batch = cls.transform_batch

            def reworded(self: Any, obs: Any, out: Any = None) -> np.ndarray:
                try:
                    return batch(self, obs, out=out)
                except ValueError as err:
                    raise ValueError(f"{err} (reworded)") from None

            cls.transform_batch = reworded  # type: ignore[method-assign]
        real = cls.transform

        def off_by_one(self: Any, obs: Any) -> np.ndarray:
            return real(self, obs) + 1

        if inject == "differ":
            cls.transform = off_by_one  # type: ignore[method-assign]
    for seed in range(first, first + cases):
        space, inputs = case_inputs(seed)
        pre = rb.get_preprocessor(space)(space)
        samples = [inputs[0][2]] + [inputs[1][2][i] for i in range(len(inputs[1][2]))]
        inputs += alias_inputs(seed, space, samples)
        for i, (name, method, value) in enumerate(inputs):
            if method == "list" and not isinstance(value, list):
                continue
            if method.endswith("_out"):
                obs, out = value
                result = outcome(lambda p=pre, o=obs, b=out: p.transform_batch(o, out=b))
            else:
                fn = pre.transform if method == "transform" else pre.transform_batch
                result = outcome(lambda f=fn, v=value: f(v))  # type: ignore[misc]
            print(
                json.dumps({"seed": seed, "i": i, "input": name, "method": method, **result}),
                flush=True,
            )
        for j, result in enumerate(filter_outcomes(seed)):
            print(
                json.dumps(
                    {
                        "seed": seed,
                        "i": 10_000 + j,
                        "input": "filter push",
                        "method": "MeanStdFilter",
                        **result,
                    }
                ),
                flush=True,
            )
        for j, (name, call, tol) in enumerate(kernel_calls(seed)):
            result = outcome(call, tol)
            print(
                json.dumps(
                    {"seed": seed, "i": 20_000 + j, "input": "kernel", "method": name, **result}
                ),
                flush=True,
            )


# ------------------------------------------------------------------------ driver


def spawn(impl: str, first: int, cases: int, inject: str | None) -> subprocess.Popen:
    env = dict(os.environ, RLBLOCKS_IMPL=impl)
    cmd = [sys.executable, __file__, "--worker", "--seed", str(first), "--cases", str(cases)]
    return subprocess.Popen(
        cmd + (["--inject", inject] if inject else []),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def compare(
    first: int,
    cases: int,
    show: bool = False,
    inject: str | None = None,
) -> list[str]:
    """Runs both implementations over the cases; returns the findings (a refusal's message
    must match word for word)."""
    procs = {impl: spawn(impl, first, cases, inject) for impl in ("native", "numpy")}
    results, findings = {}, []
    for impl, proc in procs.items():
        out, err = proc.communicate()
        results[impl] = {(r["seed"], r["i"]): r for r in map(json.loads, out.splitlines())}
        if proc.returncode != 0:
            last = max(results[impl], default=None)
            findings.append(
                f"{impl} worker crashed (exit {proc.returncode}) after case {last}: "
                f"{err.strip()[-600:]}"
            )
    native, ref = results["native"], results["numpy"]
    for key in sorted(native.keys() & ref.keys()):
        a, b = native[key], ref[key]
        where = f"seed {key[0]} input {key[1]} ({a['input']}, {a['method']})"
        if show:
            print(
                where,
                "native:",
                a.get("raises") or a["sha"],
                "| numpy:",
                b.get("raises") or b["sha"],
            )
        for side, r in (("native", a), ("numpy", b)):
            if r.get("unexpected"):
                findings.append(f"{where}: {side} raised {r['raises']}: {r['message']}")
        if ("raises" in a) != ("raises" in b):
            findings.append(
                f"{where}: native {a.get('raises', 'accepts')} "
                f"({a.get('message', '')}) vs numpy {b.get('raises', 'accepts')} "
                f"({b.get('message', '')})"
            )
        elif "raises" in a and (a["raises"], a["message"]) != (b["raises"], b["message"]):
            findings.append(
                f"{where}: messages differ: native {a['raises']} ({a['message']}) vs numpy "
                f"{b['raises']} ({b['message']})"
            )
        elif "raises" not in a and not same_output(a, b):
            findings.append(f"{where}: outputs differ")
    return findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="first case")
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=1, help="pairs of workers at once")
    parser.add_argument("--chunk", type=int, default=50, help="cases per worker process")
    parser.add_argument("--show", action="store_true", help="print every input's outcome")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--inject", choices=["crash", "differ", "message"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        run_worker(args.seed, args.cases, args.inject)
        return 0
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.perf_counter()
    chunks = [
        (s, min(args.chunk, args.seed + args.cases - s))
        for s in range(args.seed, args.seed + args.cases, args.chunk)
    ]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        findings = [
            f
            for fs in pool.map(
                lambda c: compare(*c, show=args.show, inject=args.inject),
                chunks,
            )
            for f in fs
        ]
    for f in findings:
        print("FINDING:", f)
    print(
        f"fuzz_flatten: {args.cases} cases from seed {args.seed}, {len(findings)} findings, "
        f"{time.perf_counter() - t0:.0f} s"
    )
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
