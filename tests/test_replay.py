"""ReplayBuffer: C++ against the numpy twin (bit for bit) and against a step log (closed
form: n-step returns, episode ends, truncation, frame stacks at episode starts, overwriting);
prioritized sampling frequencies (chi-square), importance weights; checkpoints; bad input."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rlblocks import _impl
from rlblocks.replay import ReplayBuffer, ReplaySample
from scipy import stats

pytestmark = pytest.mark.native


@pytest.fixture(params=["native", "numpy"])
def impl(request):
    before = _impl.native()
    _impl.use_numpy_reference(request.param == "numpy")
    yield request.param
    _impl.use_numpy_reference(not before)


def make(native: bool, *args: Any, **kwargs: Any) -> ReplayBuffer:
    before = _impl.native()
    _impl.use_numpy_reference(not native)
    try:
        rb = ReplayBuffer(*args, **kwargs)
    finally:
        _impl.use_numpy_reference(not before)
    assert rb.native == native
    return rb


def assert_same(a: ReplaySample, b: ReplaySample) -> None:
    for name, x, y in zip(ReplaySample._fields, a, b, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert x.tobytes() == y.tobytes(), name  # bit for bit (NaN-safe, -0.0-safe)


# -- a step log: what the buffer must return, computed from the raw stream ---------------------


@dataclass
class Step:
    obs: np.ndarray  # the stacked observation given to add
    action: np.ndarray
    reward: np.float32
    terminated: bool
    truncated: bool
    entry: int  # the env's running entry number (steps and final observations)
    final_obs: np.ndarray | None = None  # the episode's final observation, if it ended here


@dataclass
class EnvLog:
    episodes: list[list[Step]] = field(default_factory=list)
    entries: int = 0  # entries written (steps + final observations)
    by_entry: dict[int, tuple[int, int]] = field(default_factory=dict)  # entry -> (episode, t)


class Stream:
    """Generates consistent vector-env steps (unique frame per entry: [env, entry, ...]) and
    keeps the log the buffer is checked against."""

    def __init__(self, rng, num_envs, frame_stack, stack_axis, frame_len, p_end, act_shape):
        self.rng, self.num_envs = rng, num_envs
        self.k, self.axis, self.frame_len = max(frame_stack, 1), stack_axis, frame_len
        self.stacked = frame_stack > 0
        self.p_end, self.act_shape = p_end, act_shape
        self.logs = [EnvLog() for _ in range(num_envs)]
        self.frames: list[list[np.ndarray]] = [[] for _ in range(num_envs)]  # current episode

    def frame(self, env: int, entry: int) -> np.ndarray:
        f = np.full(self.frame_len, -1.0, np.float32)  # frame_len >= 2
        f[0], f[1] = env, entry
        return f

    def stack(self, frames: list[np.ndarray]) -> np.ndarray:
        if not self.stacked:
            return frames[-1]
        last = frames[-self.k :]
        last = [last[0]] * (self.k - len(last)) + last  # a reset fills the stack
        return np.stack(last, axis=0 if self.axis == 0 else -1)

    def step(self) -> tuple[np.ndarray, ...]:
        obs, nxt, acts, rews, terms, truncs = [], [], [], [], [], []
        for e, log in enumerate(self.logs):
            if not self.frames[e]:  # a new episode: its first frame
                log.episodes.append([])
                self.frames[e] = [self.frame(e, log.entries)]
            o = self.stack(self.frames[e])
            a = self.rng.integers(-5, 6, size=self.act_shape).astype(np.int64)
            r = np.float32(self.rng.normal())
            end = self.rng.random() < self.p_end
            term = bool(end and self.rng.random() < 0.5)
            trunc = bool(end and not term) or bool(term and self.rng.random() < 0.1)
            step = Step(o, a, r, term, trunc, log.entries)
            log.by_entry[log.entries] = (len(log.episodes) - 1, len(log.episodes[-1]))
            log.episodes[-1].append(step)
            log.entries += 1
            self.frames[e].append(self.frame(e, log.entries))
            n = self.stack(self.frames[e])
            if term or trunc:
                step.final_obs = n
                log.entries += 1
                self.frames[e] = []
            else:
                # next_obs of an env that goes on is ignored: pass garbage
                n = np.full_like(n, 7.0)
            obs.append(o), nxt.append(n), acts.append(a), rews.append(r)
            terms.append(term), truncs.append(trunc)
        return (
            np.stack(obs),
            np.stack(acts),
            np.array(rews, np.float32),
            np.array(terms),
            np.array(truncs),
            np.stack(nxt),
        )

    def newest_entry(self, obs: np.ndarray) -> tuple[int, int]:
        """(env, entry) of a sampled observation, from its newest frame."""
        newest = obs if not self.stacked else (obs[-1] if self.axis == 0 else obs[..., -1])
        return int(newest[0]), int(newest[1])

    def sampleable(self, env: int, capacity_per_env: int) -> set[int]:
        """Entries of steps that have a successor and whose stack frames are all kept."""
        log = self.logs[env]
        oldest = max(0, log.entries - capacity_per_env)
        out = set()
        for ep in log.episodes:
            for t, s in enumerate(ep):
                has_next = s.final_obs is not None or t + 1 < len(ep)
                first_read = ep[max(0, t - (self.k - 1))].entry
                if has_next and first_read >= oldest:
                    out.add(s.entry)
        return out

    def expected(self, env: int, entry: int, n: int, gamma: float) -> tuple[Any, ...]:
        """(obs, action, n-step reward, next_obs, discount) from the log, in closed form."""
        ep_i, t = self.logs[env].by_entry[entry]
        ep = self.logs[env].episodes[ep_i]
        complete = len(ep) if ep[-1].final_obs is not None else len(ep) - 1
        m = min(n, complete - t)  # steps used: an episode's end, n, or the newest step
        ret = sum(gamma**i * float(ep[t + i].reward) for i in range(m))
        last = ep[t + m - 1]
        if last.final_obs is not None:
            nxt = last.final_obs
            disc = 0.0 if last.terminated else gamma**m
        else:
            nxt, disc = ep[t + m].obs, gamma**m
        return ep[t].obs, ep[t].action, ret, nxt, disc


def check_against_log(
    s: ReplaySample, stream: Stream, rb: ReplayBuffer, n: int, gamma: float
) -> None:
    per_env = rb.capacity // rb.num_envs
    allowed = {e: stream.sampleable(e, per_env) for e in range(rb.num_envs)}
    assert len(rb) == sum(len(v) for v in allowed.values())
    for b in range(len(s.indices)):
        env, entry = stream.newest_entry(s.obs[b])
        assert entry in allowed[env], (env, entry)
        assert s.indices[b] // per_env == env
        obs, action, ret, nxt, disc = stream.expected(env, entry, n, gamma)
        np.testing.assert_array_equal(s.obs[b], obs)
        np.testing.assert_array_equal(s.actions[b], action)
        np.testing.assert_array_equal(s.next_obs[b], nxt)
        assert s.rewards[b] == pytest.approx(ret, rel=1e-5, abs=1e-5)
        assert s.discounts[b] == pytest.approx(disc, rel=1e-6, abs=1e-12)
        assert (s.discounts[b] == 0) == (disc == 0)


@st.composite
def configs(draw):
    frame_stack = draw(st.sampled_from([0, 0, 1, 2, 3, 4]))
    return {
        "num_envs": draw(st.integers(1, 3)),
        "per_env": draw(st.integers(max(2, frame_stack + 1), 12)),  # smaller: refused
        "n_step": draw(st.integers(1, 4)),
        "gamma": draw(st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0])),
        "frame_stack": frame_stack,
        "stack_axis": draw(st.sampled_from([0, -1])),
        "frame_len": draw(st.integers(2, 3)),
        "obs_dtype": draw(st.sampled_from([np.float32, np.int32, np.float64])),
        "act_shape": draw(st.sampled_from([(), (2,)])),
        "prioritized": draw(st.booleans()),
        "p_end": draw(st.sampled_from([0.0, 0.1, 0.3, 0.7])),
        "steps": draw(st.integers(1, 40)),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs())
def test_native_equals_twin_and_the_step_log(cfg: dict[str, Any]) -> None:
    ne, k = cfg["num_envs"], cfg["frame_stack"]
    frame_shape = (cfg["frame_len"],)
    if k:
        obs_shape = (k, *frame_shape) if cfg["stack_axis"] == 0 else (*frame_shape, k)
    else:
        obs_shape = frame_shape
    kwargs = dict(
        n_step=cfg["n_step"],
        gamma=cfg["gamma"],
        frame_stack=k,
        stack_axis=cfg["stack_axis"],
        prioritized=cfg["prioritized"],
        alpha=0.7,
        seed=cfg["seed"],
    )
    args = (ne * cfg["per_env"] + ne - 1, ne, obs_shape, cfg["obs_dtype"], cfg["act_shape"])
    native, twin = make(True, *args, **kwargs), make(False, *args, **kwargs)
    assert native.capacity == twin.capacity == ne * cfg["per_env"]
    assert native.nbytes == twin.nbytes
    rng = np.random.default_rng(cfg["seed"])
    stream = Stream(rng, ne, k, cfg["stack_axis"], cfg["frame_len"], cfg["p_end"], cfg["act_shape"])
    dt = cfg["obs_dtype"]
    for _ in range(cfg["steps"]):
        o, a, r, te, tr, n = stream.step()
        step = (o.astype(dt), a, r, te, tr, n.astype(dt))
        native.add(*step)
        twin.add(*step)
        assert len(native) == len(twin)
        if len(native) == 0 or rng.random() < 0.3:
            continue
        batch = int(rng.integers(1, len(native) + 1))
        beta = float(rng.random())
        s_native, s_twin = native.sample(batch, beta), twin.sample(batch, beta)
        assert_same(s_native, s_twin)
        check_against_log(s_native, stream, native, cfg["n_step"], cfg["gamma"])
        if cfg["prioritized"] and rng.random() < 0.7:
            pr = rng.exponential(size=batch) * (rng.random(batch) < 0.9)
            native.update_priorities(s_native.indices, pr)
            twin.update_priorities(s_twin.indices, pr)
    a, b = native.state_dict(), twin.state_dict()
    for key in ("frames", "actions", "rewards", "flags", "offs", "counts", "leaves"):
        assert a[key].tobytes() == b[key].tobytes(), key
    assert a["max_leaf"] == b["max_leaf"]


def atari_stream(rb: ReplayBuffer, steps: int, seed: int, axis: int) -> None:
    """Frame-stacked 84x84 uint8 steps with episode ends, as FrameStacker would stack them."""
    rng = np.random.default_rng(seed)
    ne = rb.num_envs
    frames = [[] for _ in range(ne)]
    for _ in range(steps):
        obs, nxt = [], []
        ends = rng.random(ne) < 0.05
        for e in range(ne):
            if not frames[e]:
                frames[e] = [rng.integers(0, 256, (84, 84), np.uint8)] * 4
            obs.append(np.stack(frames[e][-4:], axis=axis))
            frames[e].append(rng.integers(0, 256, (84, 84), np.uint8))
            nxt.append(np.stack(frames[e][-4:], axis=axis))
            if ends[e]:
                frames[e] = []
        actions = rng.integers(0, 6, ne)
        rb.add(
            np.stack(obs),
            actions,
            rng.normal(size=ne),
            ends & (rng.random(ne) < 0.5),
            ends,
            np.stack(nxt),
        )


@pytest.mark.parametrize("axis", [0, -1])
def test_atari_bytes_per_step_and_large_batches(axis: int) -> None:
    shape = (4, 84, 84) if axis == 0 else (84, 84, 4)
    kw = dict(n_step=3, frame_stack=4, stack_axis=axis, seed=3)
    native, twin = (
        make(True, 600, 4, shape, np.uint8, **kw),
        make(False, 600, 4, shape, np.uint8, **kw),
    )
    before = native.nbytes
    atari_stream(native, 400, 0, axis)
    atari_stream(twin, 400, 0, axis)
    assert native.nbytes == before == twin.nbytes  # preallocated, bounded
    assert native.bytes_per_step <= 7100, native.bytes_per_step
    assert 0 < len(native) < native.capacity
    s_native, s_twin = native.sample(256), twin.sample(256)  # threaded assembly
    assert_same(s_native, s_twin)
    assert s_native.obs.shape == (256, *shape) and s_native.obs.dtype == np.uint8


def test_atari_prioritized_fits_7_1_kb_at_1m_steps() -> None:
    # The trees grow with capacity: check the million-step budget without the frames.
    rb = make(
        True, 2**20 - 48_576, 8, (4, 1, 1), np.uint8, frame_stack=4, stack_axis=0, prioritized=True
    )
    assert rb.bytes_per_step - 1 + 84 * 84 <= 7100


def test_prioritized_frequencies_chi_square(impl: str) -> None:
    rb = ReplayBuffer(
        64, 1, (1,), np.float32, prioritized=True, alpha=0.8, priority_eps=0.01, seed=11
    )
    for t in range(21):
        rb.add([[t + 0.0]], [t], [0.0], [False], [False], [[t + 1.0]])
    assert len(rb) == 20
    prio = np.random.default_rng(5).exponential(size=20)
    prio[3] = 0.0  # only eps left
    rb.update_priorities(np.arange(20), prio)
    p = (prio + 0.01) ** 0.8
    p /= p.sum()
    counts = np.zeros(20)
    for _ in range(1000):
        s = rb.sample(20)
        np.add.at(counts, s.indices, 1)
    chi2, pval = stats.chisquare(counts, p * counts.sum())
    assert pval > 1e-3, (chi2, pval)
    # a wrong distribution (alpha ignored) is rejected
    q = prio + 0.01
    assert stats.chisquare(counts, q / q.sum() * counts.sum())[1] < 1e-6


def test_importance_weights_closed_form(impl: str) -> None:
    rb = ReplayBuffer(32, 2, (), np.float32, prioritized=True, alpha=0.6, priority_eps=1e-3, seed=2)
    for t in range(9):
        rb.add([t + 0.0, -t], [0, 1], [1.0, 2.0], [False, t == 4], [False, False], [t + 1.0, -t])
    n = len(rb)
    s = rb.sample(n)
    idx = np.unique(s.indices)
    prio = np.linspace(0.0, 3.0, idx.size)
    rb.update_priorities(idx, prio)
    leaves = dict(zip(idx.tolist(), ((prio + 1e-3) ** 0.6).tolist(), strict=True))
    # the steps never updated keep the initial max priority 1
    all_leaves = np.array([leaves.get(i, 1.0) for i in range(rb.capacity)])
    state = rb.state_dict()
    live = np.flatnonzero(state["flags"].reshape(-1) & 8)
    assert live.size == n
    total = all_leaves[live].sum()
    beta = 0.7
    s = rb.sample(n, beta)
    probs = all_leaves[s.indices] / total
    max_w = (n * all_leaves[live].min() / total) ** -beta
    np.testing.assert_allclose(s.weights, (n * probs) ** -beta / max_w, rtol=1e-6)
    assert s.weights.max() <= 1.0
    # a step that becomes sampleable later gets the largest priority so far
    rb.add([9.0, -9], [0, 1], [0.0, 0.0], [False, False], [False, False], [0.0, 0])
    new = np.flatnonzero(np.isclose(rb.state_dict()["leaves"], (3.0 + 1e-3) ** 0.6, rtol=1e-12))
    assert new.size == 3  # the updated max plus the two steps that became complete


def test_uniform_weights_are_one_and_sampling_covers_all(impl: str) -> None:
    rb = ReplayBuffer(10, 1, (1,), np.float32, seed=0)
    for t in range(30):  # wraps around three times
        rb.add([[t + 0.0]], [t], [0.0], [False], [t % 7 == 6], [[100.0 + t]])
    assert len(rb) <= rb.capacity
    seen = set()
    for _ in range(50):
        s = rb.sample(len(rb))
        assert (s.weights == 1).all()
        seen |= set(s.obs[:, 0].tolist())
    assert len(seen) == len(rb)
    assert min(seen) >= 30 - 10  # the oldest steps were overwritten


@pytest.mark.parametrize("cross", [False, True])
def test_state_dict_round_trip_continues_identically(cross: bool) -> None:
    kw = dict(n_step=3, gamma=0.9, frame_stack=2, stack_axis=-1, prioritized=True, seed=4)
    args = (24, 2, (3, 2), np.float32, (2,), np.float32)
    a = make(True, *args, **kw)
    rng = np.random.default_rng(0)
    stream = Stream(rng, 2, 2, -1, 3, 0.2, (2,))

    def run(rb: ReplayBuffer, steps: list[tuple[np.ndarray, ...]]) -> list[ReplaySample]:
        out = []
        for step in steps:
            rb.add(*step)
            if len(rb) >= 4:
                s = rb.sample(4, 0.5)
                rb.update_priorities(s.indices, np.abs(s.rewards) + 0.1)
                out.append(s)
        return out

    first = [stream.step() for _ in range(20)]
    second = [stream.step() for _ in range(20)]
    run(a, first)
    state = a.state_dict()
    b = make(not cross, *args, **kw)
    b.load_state_dict(state)
    assert len(b) == len(a)
    for x, y in zip(run(a, second), run(b, second), strict=True):
        assert_same(x, y)


def test_obs_stack_at_episode_start_repeats_the_first_frame(impl: str) -> None:
    rb = ReplayBuffer(16, 1, (3, 1), np.int32, frame_stack=3, stack_axis=0, n_step=2, seed=0)
    f = lambda *v: np.array([[[x] for x in v]], np.int32)  # noqa: E731
    rb.add(f(1, 1, 1), [0], [1.0], [False], [False], f(0, 0, 0))
    rb.add(f(1, 1, 2), [0], [1.0], [False], [True], f(1, 2, 3))  # truncated: final o = 3
    rb.add(f(5, 5, 5), [0], [1.0], [True], [False], f(5, 5, 6))
    rb.add(f(7, 7, 7), [0], [1.0], [False], [False], f(0, 0, 0))
    got = {}
    for _ in range(30):
        s = rb.sample(len(rb))
        for b in range(len(s.indices)):
            got[int(s.obs[b, -1, 0])] = (
                s.obs[b, :, 0].tolist(),
                s.next_obs[b, :, 0].tolist(),
                float(s.rewards[b]),
                float(s.discounts[b]),
            )
    approx = pytest.approx
    assert got == {
        1: ([1, 1, 1], [1, 2, 3], approx(1.0 + 0.99), approx(0.99**2)),  # final obs bootstrap
        2: ([1, 1, 2], [1, 2, 3], 1.0, approx(0.99)),
        5: ([5, 5, 5], [5, 5, 6], 1.0, 0.0),  # terminated: no bootstrap
    }


def test_overwritten_stack_frames_are_not_sampled(impl: str) -> None:
    rb = ReplayBuffer(4, 1, (1, 3), np.float32, frame_stack=3, seed=0)
    for t in range(10):
        rb.add(
            np.array([[[max(t - 2, 0), max(t - 1, 0), t]]], np.float32),  # one episode's stacks
            [0],
            [0.0],
            [False],
            [False],
            np.zeros((1, 1, 3), np.float32),
        )
    # entries 6..9 kept; 9 has no successor; 6 and 7 read 4/5: only 8 is sampleable
    assert len(rb) == 1


BAD_INIT = [
    (dict(capacity=0), "capacity"),
    (dict(capacity=3, num_envs=2), "capacity"),
    (dict(num_envs=0), "num_envs"),
    (dict(n_step=0), "n_step"),
    (dict(gamma=1.5), "gamma"),
    (dict(gamma=float("nan")), "gamma"),
    (dict(frame_stack=3), "obs_shape"),
    (dict(frame_stack=4, stack_axis=2), "stack_axis"),
    (dict(obs_dtype=np.complex64), "obs_dtype"),
    (dict(action_dtype="U3"), "action_dtype"),
    (dict(obs_shape=(4, -1)), "obs_shape"),
    (dict(alpha=-1.0), "alpha"),
    (dict(priority_eps=float("inf")), "priority_eps"),
    (dict(frame_stack=-1), "frame_stack"),
]


@pytest.mark.parametrize(("changes", "name"), BAD_INIT)
def test_bad_settings_name_the_argument(impl: str, changes: dict[str, Any], name: str) -> None:
    kw: dict[str, Any] = dict(capacity=16, num_envs=2, obs_shape=(4, 5), obs_dtype=np.uint8)
    kw.update(changes)
    with pytest.raises(ValueError, match=name):
        ReplayBuffer(**kw)


def small(prioritized: bool = True) -> ReplayBuffer:
    rb = ReplayBuffer(8, 2, (2,), np.uint8, (), np.int64, prioritized=prioritized, seed=0)
    o = np.zeros((2, 2), np.uint8)
    for _ in range(2):
        rb.add(o, [0, 1], [0.0, 1.0], [False, False], [False, False], o)
    return rb


GOOD = dict(
    obs=np.zeros((2, 2), np.uint8),
    actions=np.array([0, 1]),
    rewards=np.zeros(2),
    terminated=np.zeros(2, bool),
    truncated=np.zeros(2, bool),
    next_obs=np.zeros((2, 2), np.uint8),
)
BAD_ADD = [
    ("obs", np.zeros((2, 3), np.uint8), r"obs: expected shape \(2, 2\), got \(2, 3\)"),
    ("obs", np.zeros((2, 2), np.float32), "obs: expected dtype uint8"),
    ("next_obs", np.zeros((1, 2), np.uint8), "next_obs: expected shape"),
    ("actions", np.zeros(2, np.float32), "actions: expected dtype int64"),
    ("actions", np.zeros(3, np.int64), "actions: expected shape"),
    ("rewards", np.array(["a", "b"]), "rewards"),
    ("rewards", np.zeros(3), "rewards: expected shape"),
    ("terminated", np.zeros(2, np.int64), "terminated: expected a bool array"),
    ("truncated", np.zeros(3, bool), "truncated: expected a bool array"),
]


@pytest.mark.parametrize(("arg", "value", "match"), BAD_ADD)
def test_bad_add_names_the_argument_and_changes_nothing(
    impl: str, arg: str, value: Any, match: str
) -> None:
    rb = small()
    before = rb.state_dict()
    with pytest.raises(ValueError, match=match):
        rb.add(**{**GOOD, arg: value})
    after = rb.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in ("frames", "counts", "flags"))


def test_bad_sample_and_priorities(impl: str) -> None:
    rb = small()
    assert len(rb) == 2
    with pytest.raises(ValueError, match="batch_size.*<= 2.*got 3"):
        rb.sample(3)
    with pytest.raises(ValueError, match="batch_size"):
        rb.sample(0)
    with pytest.raises(ValueError, match="beta"):
        rb.sample(1, beta=float("nan"))
    s = rb.sample(2)
    for bad in (np.nan, -1.0, np.inf):
        with pytest.raises(ValueError, match=r"priorities\[1\]"):
            rb.update_priorities(s.indices, np.array([1.0, bad]))
    with pytest.raises(ValueError, match=r"indices\[0\] = 99 is out of range \[0, 8\)"):
        rb.update_priorities(np.array([99]), np.array([1.0]))
    with pytest.raises(ValueError, match=r"indices\[0\] = 1 is not a sampleable step"):
        rb.update_priorities(np.array([1]), np.array([1.0]))  # env 0's newest: incomplete
    with pytest.raises(ValueError, match="priorities: expected"):
        rb.update_priorities(s.indices, np.ones(3))
    with pytest.raises(ValueError, match="uniform"):
        small(prioritized=False).update_priorities(s.indices, np.ones(2))


def test_bad_state_is_refused_and_changes_nothing(impl: str) -> None:
    rb = small()
    good = rb.state_dict()
    other = ReplayBuffer(16, 2, (2,), np.uint8, prioritized=True).state_dict()
    with pytest.raises(ValueError, match="capacity"):
        rb.load_state_dict(other)
    broken = {**good, "offs": good["offs"] + 5}
    with pytest.raises(ValueError, match="offs"):
        rb.load_state_dict(broken)
    with pytest.raises(ValueError, match="flags"):
        rb.load_state_dict({**good, "flags": good["flags"].astype(np.int64)})
    assert len(rb) == 2
    rb.load_state_dict(good)
    assert len(rb) == 2


def test_uniform_sampling_is_uniform(impl: str) -> None:
    rb = ReplayBuffer(40, 2, (), np.float32, seed=9)
    for t in range(15):
        rb.add([t + 0.0, t], [0, 0], [0.0, 0.0], [False, t == 7], [False, False], [0.0, 0])
    counts = np.zeros(rb.capacity)
    for _ in range(300):
        np.add.at(counts, rb.sample(len(rb)).indices, 1)
    live = counts[counts > 0]
    assert live.size == len(rb)
    assert stats.chisquare(live)[1] > 1e-3
    assert math.isclose(live.sum(), 300 * len(rb))


def test_sample_into_out_equals_fresh_batches(impl: str) -> None:
    kw: dict[str, Any] = dict(n_step=2, frame_stack=2, stack_axis=0, prioritized=True, seed=1)
    a = ReplayBuffer(40, 2, (2, 3), np.float32, **kw)
    b = ReplayBuffer(40, 2, (2, 3), np.float32, **kw)
    stream = Stream(np.random.default_rng(0), 2, 2, 0, 3, 0.1, ())
    for _ in range(15):
        step = stream.step()
        a.add(*step)
        b.add(*step)
    out = b.sample(8)
    a.sample(8)
    for _ in range(5):
        fresh = a.sample(8, 0.5)
        assert b.sample(8, 0.5, out=out) is out
        assert_same(fresh, out)
        for arr in fresh:
            assert arr.flags.c_contiguous and arr.flags.writeable
    with pytest.raises(ValueError, match="out: expected a ReplaySample of batch size 4"):
        b.sample(4, out=out)
    bad = out._replace(obs=np.zeros((8, 2, 3), np.float64))
    with pytest.raises(ValueError, match="out.obs"):
        b.sample(8, out=bad)


def test_all_zero_priorities_are_refused(impl: str) -> None:
    rb = ReplayBuffer(8, 1, (1,), np.float32, prioritized=True, priority_eps=0.0, seed=0)
    for t in range(3):
        rb.add([[t + 0.0]], [t], [0.0], [False], [False], [[0.0]])
    rb.update_priorities(np.array([0, 1]), np.zeros(2))
    with pytest.raises(ValueError, match="priority 0"):
        rb.sample(1)
    rb.update_priorities(np.array([1]), np.array([2.0]))
    assert (rb.sample(2).indices == 1).all()  # a zero priority is never drawn


@pytest.mark.native
@pytest.mark.parametrize("native", [True, False], ids=["native", "twin"])
def test_valid_skips_rows_as_if_those_envs_had_not_stepped(native: bool) -> None:
    """``valid`` (a next-step autoreset env's reset step): a buffer of 2 envs with rows
    skipped stores exactly what one buffer per env, given only its valid steps, stores."""
    rng = np.random.default_rng(7)
    kw = dict(n_step=2, gamma=0.9, frame_stack=2, stack_axis=-1, seed=3)
    both = make(native, 20, 2, (3, 2), np.float32, **kw)
    alone = [make(native, 10, 1, (3, 2), np.float32, **kw) for _ in range(2)]
    last: list[np.ndarray | None] = [None, None]  # each env's newest stored frame (episode)
    for _ in range(25):
        # stacks consistent with each env's valid steps; skipped rows hold anything
        o = rng.normal(size=(2, 3, 2)).astype(np.float32)
        nx = rng.normal(size=(2, 3, 2)).astype(np.float32)
        a, r = rng.integers(0, 4, 2), rng.normal(size=2)
        te, tr = rng.random(2) < 0.15, rng.random(2) < 0.1
        valid = rng.random(2) < 0.7
        for e in np.flatnonzero(valid):
            prev = last[e]
            o[e, :, 0] = o[e, :, 1] if prev is None else prev
            last[e] = o[e, :, 1]
            if te[e] or tr[e]:
                nx[e, :, 0] = o[e, :, 1]
                last[e] = None
        both.add(o, a, r, te, tr, nx, valid=valid)
        for e in np.flatnonzero(valid):
            alone[e].add(
                o[e : e + 1],
                a[e : e + 1],
                r[e : e + 1],
                te[e : e + 1],
                tr[e : e + 1],
                nx[e : e + 1],
            )
    whole = both.state_dict()
    for e in range(2):
        part = alone[e].state_dict()
        for key in ("frames", "actions", "rewards", "flags", "offs"):
            np.testing.assert_array_equal(whole[key][e], part[key][0], err_msg=key)
    assert len(both) == len(alone[0]) + len(alone[1])
    with pytest.raises(ValueError, match="valid"):
        both.add(o, a, r, te, tr, nx, valid=[True])
