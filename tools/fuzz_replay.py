#!/usr/bin/env python3
"""Differential fuzzer: the C++ replay buffer against its numpy twin.

Each case builds a ``ReplayBuffer`` from random settings (sometimes invalid: int64
overflows, strings, capacities too small for the frame stack or too large for memory) and
runs a random sequence of operations on it: adds of consistent frame stacks (and corrupted
ones: a wrong older frame, shapes, dtypes, None, valid masks), samples with the seeded
generator (batch sizes out of range, bad betas, ``out=`` batches reused or corrupted),
priority updates (stale and out-of-range indices, NaN, negative, huge priorities whose
``p ** alpha`` overflows), ``state_dict`` round trips (half of them with one field
corrupted: counts, flags, offsets, leaves, max_leaf, dtypes, missing keys) and pickling.
Both implementations run the same case, each in its own subprocess (a crash is a finding,
not the end of the run), and report per operation either a digest of what came back (every
array bit for bit, ``len``) or the exception's type and message. A finding is: a crash,
outputs that differ, one side accepting what the other refuses, different messages, or an
exception other than ValueError.

    python tools/fuzz_replay.py --cases 200 [--seed 0] [--show]

A finding is reproduced with ``--seed S --cases 1`` (``--show`` prints every outcome).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import subprocess
import sys
from typing import Any

import numpy as np

OBS_DTYPES = ("float32", "float64", "int32", "uint8")
BAD_INIT = (
    {"capacity": 2**70},
    {"n_step": 2**70},
    {"frame_stack": 2**70},
    {"gamma": "0.9"},
    {"prioritized": "yes"},
    {"capacity": 10**13},
    {"obs_shape": (2**40, 2**40)},
    {"capacity": 3},
    {"alpha": 2000.0},
)


def digest(*values: Any) -> str:
    h = hashlib.sha1()
    for v in values:
        if isinstance(v, np.ndarray):
            h.update(f"{v.dtype}{v.shape}".encode())
            h.update(np.ascontiguousarray(v).tobytes())
        else:
            h.update(repr(v).encode())
    return h.hexdigest()[:16]


class Case:
    """One case's settings, consistent-stack generator and operations (rebuilt from its seed)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        r = self.rng
        self.ne = int(r.integers(1, 4))
        self.k = int(r.choice([0, 0, 1, 2, 3]))
        self.axis = int(r.choice([0, -1]))
        self.flen = int(r.integers(1, 4))
        self.dtype = np.dtype(str(r.choice(OBS_DTYPES)))
        self.act_shape = () if r.random() < 0.5 else (2,)
        self.act_dtype = np.dtype("int64" if r.random() < 0.5 else "float32")
        lo = max(2, self.k + 1)
        per_env = int(r.integers(lo, lo + 8))
        obs_shape = (
            (self.flen,)
            if self.k == 0
            else ((self.k, self.flen) if self.axis == 0 else (self.flen, self.k))
        )
        self.kw: dict[str, Any] = dict(
            capacity=per_env * self.ne + int(r.integers(0, self.ne)),
            num_envs=self.ne,
            obs_shape=obs_shape,
            obs_dtype=self.dtype,
            action_shape=self.act_shape,
            action_dtype=self.act_dtype,
            n_step=int(r.choice([1, 1, 2, 3, 4])),  # 1: hindsight relabelling runs too
            gamma=float(r.choice([0.0, 0.5, 0.99, 1.0])),
            frame_stack=self.k,
            stack_axis=self.axis,
            prioritized=bool(r.random() < 0.6),
            alpha=float(r.choice([0.0, 0.6, 1.0, 2.0, 10.0])),
            priority_eps=float(r.choice([0.0, 1e-6, 1e-3])),
            seed=int(r.integers(0, 2**31)),
        )
        if r.random() < 0.1:
            self.kw.update(BAD_INIT[int(r.integers(len(BAD_INIT)))])
        self.hist: list[list[np.ndarray]] = [[] for _ in range(self.ne)]
        self.next_frame = 1

    def frame(self) -> np.ndarray:
        self.next_frame += 1
        return np.full(self.flen, self.next_frame % 120, self.dtype)

    def stack(self, frames: list[np.ndarray]) -> np.ndarray:
        if self.k == 0:
            return frames[-1]
        last = frames[-self.k :]
        last = [last[0]] * (self.k - len(last)) + last
        return np.stack(last, axis=0 if self.axis == 0 else -1)

    def step(self) -> tuple[tuple[Any, ...], dict[str, Any], list[list[np.ndarray]]]:
        """A consistent step (args, kwargs) and the histories it leads to if stored."""
        r, hist = self.rng, [list(h) for h in self.hist]
        obs, nxt, ends = [], [], []
        valid = r.random(self.ne) < 0.8 if r.random() < 0.2 else None
        for e in range(self.ne):
            if not hist[e]:
                hist[e] = [self.frame()]
            obs.append(self.stack(hist[e]))
            end = bool(r.random() < 0.2)
            nf = self.frame()
            nxt.append(self.stack([*hist[e], nf]))
            ends.append(end)
            if valid is not None and not valid[e]:
                hist[e] = list(self.hist[e])
            elif end:
                hist[e] = []
            else:
                hist[e].append(nf)
        term = np.array([e and r.random() < 0.5 for e in ends])
        trunc = np.array(ends) & ~term
        acts = r.integers(-3, 4, (self.ne, *self.act_shape)).astype(self.act_dtype)
        args = (np.stack(obs), acts, r.normal(size=self.ne), term, trunc, np.stack(nxt))
        return args, {"valid": valid}, hist

    def corrupt_step(self, args: tuple[Any, ...], kw: dict[str, Any]) -> tuple[Any, ...]:
        r = self.rng
        a = list(args)
        how = int(r.integers(7))
        if how == 0 and self.k > 1:  # an older frame that is not the previous step's
            a[0] = a[0].copy()
            e = int(r.integers(self.ne))
            sl = (e, 0) if self.axis == 0 else (e, ..., 0)
            a[0][sl] = a[0][sl] + 1
        elif how == 1:
            a[0] = a[0][:, :1]
        elif how == 2:
            a[0] = a[0].astype(np.complex64)
        elif how == 3:
            a[int(r.integers(6))] = None
        elif how == 4:
            a[2] = np.array(["x"] * self.ne)
        elif how == 5:
            a[3] = a[3].astype(np.int64)
        else:
            kw["valid"] = [True] * (self.ne + 1)
        return tuple(a)

    def corrupt_state(self, s: dict[str, Any]) -> None:
        r = self.rng
        key = str(r.choice(["counts", "flags", "offs", "leaves", "max_leaf", "frames", "gone"]))
        if key == "gone":
            del s[str(r.choice(["frames", "rewards", "leaves", "max_leaf"]))]
        elif key == "max_leaf":
            s["max_leaf"] = [0.5, 2.0**961, "x", float("nan"), 10**400, 3.0, True][
                int(r.integers(7))
            ]
        elif key == "frames":
            s["frames"] = s["frames"].astype(np.float16)
        else:
            a = s[key].reshape(-1)
            i = int(r.integers(a.size))
            if key == "counts":
                a[i] = [2**63 - 1, -1, a[i] + 1, a[i] - 1, 2**62 + 1][int(r.integers(5))]
            elif key == "leaves":
                a[i] = [0.0, 1.0, 2.0**960, np.nan, np.inf, 1e-300][int(r.integers(6))]
            else:
                a[i] = int(r.integers(0, 16))


def relabel(rb: Any, batch: Any, r: np.random.Generator, native: bool) -> tuple[Any, ...]:
    """Hindsight relabelling of a sampled batch (rlblocks.her's kernel) with random, at times
    invalid, strategy, goal columns, relabelled rows and uniforms."""
    from rlblocks import _core
    from rlblocks._reference import her as ref_her

    fn = _core.her_relabel if native else ref_her.her_relabel
    b, d = len(batch.indices), int(np.prod(batch.obs.shape[1:], dtype=np.int64))
    bad = r.random() < 0.2  # else valid goal columns and rows
    size = int(r.integers(0, d + 2)) if bad else int(r.integers(1, max(d, 1) + 1))
    ag, dg = (int(r.integers(0, max(d - size, 0) + 1)) for _ in range(2))
    if bad:
        ag, dg = int(r.integers(-1, d + 1)), int(r.integers(-1, d + 1))
    u = r.random(b)
    if r.random() < 0.1 and b:
        u[int(r.integers(b))] = [1.0, np.nan, -0.5][int(r.integers(3))]
    obs, nxt = batch.obs.copy(), batch.next_obs.copy()
    goals = fn(
        rb.storage,
        str(r.choice(["future", "final", "episode", "best" if bad else "future"])),
        ag,
        dg,
        size,
        batch.indices,
        u,
        int(r.integers(-1, b + 2)) if bad else int(r.integers(0, b + 1)),
        obs,
        nxt,
    )
    return goals, obs, nxt


def run_case(seed: int, native: bool, inject: str | None) -> list[str]:
    from rlblocks import _impl
    from rlblocks.replay import ReplayBuffer

    _impl.use_numpy_reference(not native)
    case, out = Case(seed), []

    def record(fn: Any) -> Any:
        try:
            value = fn()
        except Exception as err:  # noqa: BLE001 - the type is part of the outcome
            out.append(f"{type(err).__name__}: {err}")
            return None
        out.append("ok " + (digest(*value) if isinstance(value, tuple) else ""))
        return value

    if inject == "crash" and native:
        os.abort()
    rb = record(lambda: ReplayBuffer(**case.kw))
    if rb is None:
        return out
    r = case.rng
    last = None
    for _ in range(int(r.integers(10, 50))):
        op = r.random()
        if op < 0.55:
            args, kw, hist = case.step()
            if r.random() < 0.1:
                args = case.corrupt_step(args, kw)
            record(lambda a=args, k=kw, rb=rb: rb.add(*a, **k))
            if out[-1].startswith("ok"):  # stored: the envs' stacks move on
                case.hist = hist
        elif op < 0.75:
            b = int(r.integers(0, len(rb) + 2))
            beta = (
                [0.4, 0.0, 1.0, float("nan"), "x"][int(r.integers(5))] if r.random() < 0.2 else 0.4
            )
            o = last if last is not None and r.random() < 0.4 and len(last.indices) == b else None
            if o is not None and r.random() < 0.3:
                o = o._replace(obs=o.obs.astype(np.float16))
            s = record(lambda b=b, beta=beta, o=o, rb=rb: tuple(rb.sample(b, beta, out=o)))
            if s is not None:
                last = rb.sample(b, 0.4)
                out.append("ok " + digest(*last))
                record(lambda rb=rb, last=last: relabel(rb, last, r, native))
        elif op < 0.87:
            if last is not None and r.random() < 0.7:
                idx = last.indices
            else:
                idx = r.integers(-2, rb.capacity + 2, int(r.integers(0, 4)))
            p = r.random(len(idx)) * 10.0 ** float(r.choice([0, 3, 100, 290, 308]))
            if r.random() < 0.2 and len(p):
                p[0] = [np.nan, -1.0, np.inf, 0.0][int(r.integers(4))]
            record(lambda i=idx, p=p, rb=rb: rb.update_priorities(i, p))
        elif op < 0.95:
            state = rb.state_dict()
            if r.random() < 0.5:
                case.corrupt_state(state)
            record(lambda s=state, rb=rb: rb.load_state_dict(s))
        else:
            rb = pickle.loads(pickle.dumps(rb))
        out.append(f"len {len(rb)}")
    state = rb.state_dict()
    out.append("state " + digest(*(state[k] for k in sorted(state) if k not in ("config", "rng"))))
    if inject == "differ" and not native:
        out.append("injected")
    return out


def worker(args: argparse.Namespace) -> None:
    for i in range(args.cases):
        outcome = run_case(args.seed + i, args.worker == "native", args.inject)
        print(json.dumps(outcome), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--inject", choices=["crash", "differ"])
    ap.add_argument("--show", action="store_true")
    ap.add_argument("--worker", choices=["native", "numpy"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    runs = {}
    for impl in ("native", "numpy"):
        cmd = [sys.executable, __file__, "--worker", impl, "--cases", str(args.cases)]
        cmd += ["--seed", str(args.seed)] + (["--inject", args.inject] if args.inject else [])
        p = subprocess.run(cmd, capture_output=True, text=True)
        runs[impl] = (p.returncode, [json.loads(x) for x in p.stdout.splitlines()], p.stderr)
    findings = []
    for impl, (rc, lines, err) in runs.items():
        if rc != 0:
            findings.append(
                f"{impl} worker crashed (rc {rc}) at seed {args.seed + len(lines)}: "
                f"{err.strip()[-300:]}"
            )
    n_cases = min(len(runs["native"][1]), len(runs["numpy"][1]))
    for i in range(n_cases):
        a, b = runs["native"][1][i], runs["numpy"][1][i]
        if args.show:
            for line in a:
                print(f"seed {args.seed + i}: {line}")
        for j, line in enumerate(a):
            if not (line.startswith(("ok", "len", "state", "ValueError"))):
                findings.append(f"seed {args.seed + i} op {j}: native raised {line}")
                break
        if a != b:
            j = next(
                (j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)),
            )
            findings.append(
                f"seed {args.seed + i} op {j}: outputs differ: native "
                f"{a[j] if j < len(a) else None!r} vs numpy {b[j] if j < len(b) else None!r}"
            )
    for f in findings[:20]:
        print("FINDING", f)
    print(f"{n_cases} cases, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
