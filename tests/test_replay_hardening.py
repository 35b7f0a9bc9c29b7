"""Replay buffer hardening (issue 42), each case on the C++ core and on its numpy twin, which
must accept / refuse alike with the same message: loaded states are checked invariant by
invariant; buffers that never become sampleable or cannot fit in memory are refused; frame
stacks that storage would silently change are refused; priorities that overflow the sum tree
are refused and importance weights stay finite and > 0; buffers pickle and deep-copy; the
twin holds a lock; every argument error is a one-line ValueError naming the argument."""

from __future__ import annotations

import copy
import pickle
import re
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from rlblocks import _core, _impl
from rlblocks._reference import replay as ref
from rlblocks.replay import MAX_ALPHA, ReplayBuffer, ReplaySample, replay_bytes

pytestmark = pytest.mark.native

IMPLS = [True, False]
IDS = ["native", "twin"]


def make(native: bool, *args: Any, **kwargs: Any) -> ReplayBuffer:
    before = _impl.native()
    _impl.use_numpy_reference(not native)
    try:
        return ReplayBuffer(*args, **kwargs)
    finally:
        _impl.use_numpy_reference(not before)


def error_of(fn: Callable[[], Any]) -> str:
    """The ValueError message of fn() (fails the test on success or another exception)."""
    with pytest.raises(ValueError) as info:
        fn()
    return str(info.value)


def same_error(fn: Callable[[bool], Any], match: str) -> str:
    """fn(native) raises the same ValueError on both implementations, matching `match`."""
    native, twin = error_of(lambda: fn(True)), error_of(lambda: fn(False))
    assert native == twin
    assert re.search(match, native), native
    assert "\n" not in native
    return native


def filled(native: bool, prioritized: bool = True, **kw: Any) -> ReplayBuffer:
    """A 2-env buffer with frame_stack=2, episodes ending, the ring wrapped."""
    rb = make(
        native,
        12,
        2,
        (2, 1),
        np.float32,
        prioritized=prioritized,
        frame_stack=2,
        stack_axis=0,
        seed=3,
        **kw,
    )
    last: list[float | None] = [None, None]
    for t in range(9):
        obs, nxt = np.zeros((2, 2, 1), np.float32), np.zeros((2, 2, 1), np.float32)
        ended = np.array([t % 4 == 3, t == 5])
        for e in range(2):
            f = float(10 * e + t)
            prev = last[e]
            obs[e, :, 0] = [f if prev is None else prev, f]
            last[e] = f
            if ended[e]:
                nxt[e, :, 0] = [f, f + 0.5]
                last[e] = None
        rb.add(obs, [0, 1], [1.0, 2.0], ended, [False, False], nxt)
    if prioritized:
        s = rb.sample(4)
        rb.update_priorities(s.indices, np.arange(4) + 0.5)
    return rb


# -- 1. loaded states: every invariant ------------------------------------------------------


def corrupt(state: dict[str, Any], how: str) -> dict[str, Any]:
    s = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()}
    flags, leaves = s["flags"], s["leaves"]
    live = np.flatnonzero(flags.reshape(-1) & 8)
    if how == "counts_huge":
        s["counts"][0] = 2**63 - 1
    elif how == "counts_negative":
        s["counts"][1] = -1
    elif how == "counts_past_the_episode":
        s["counts"][1] += 1  # an entry never written (flags 0) after a step that did not end
    elif how == "flag_term_without_step":
        flags.reshape(-1)[live[0]] = 2
    elif how == "flag_both_ends":
        flags.reshape(-1)[live[0]] = 1 | 2 | 4 | 8
    elif how == "sample_bit_cleared":
        flags.reshape(-1)[live[0]] &= ~np.uint8(8)
    elif how == "offs_shifted":
        s["offs"].reshape(-1)[live[-1]] += 1
    elif how == "leaf_of_unsampleable":
        leaves[np.flatnonzero(~(flags.reshape(-1) & 8).astype(bool))[0]] = 5.0
    elif how == "leaf_above_max":
        leaves[live[0]] = s["max_leaf"] * 2
    elif how == "leaf_nan":
        leaves[live[0]] = np.nan
    elif how == "max_leaf_str":
        s["max_leaf"] = "big"
    elif how == "max_leaf_inf":
        s["max_leaf"] = float("inf")
    elif how == "max_leaf_small":
        s["max_leaf"] = 0.5
    elif how == "frames_dtype":
        s["frames"] = s["frames"].astype(np.float64)
    elif how == "rewards_missing":
        del s["rewards"]
    return s


CORRUPTIONS = [
    (
        "counts_huge",
        r"state\['counts'\]\[0\] = 9223372036854775807: "
        r"expected an int in \[0, 4611686018427387904\]",
    ),
    ("counts_negative", r"state\['counts'\]\[1\] = -1"),
    ("counts_past_the_episode", r"state\['(flags|offs)'\]\[1, \d+\]"),
    ("flag_term_without_step", r"state\['flags'\]\[\d, \d+\] = 2: expected 0 .* or 1, 3, 5"),
    ("flag_both_ends", r"state\['flags'\]\[\d, \d+\] = 15"),
    ("sample_bit_cleared", r"state\['flags'\].*the sample bit"),
    ("offs_shifted", r"state\['offs'\]\[\d, \d+\] = \d+: expected"),
    ("leaf_of_unsampleable", r"state\['leaves'\]\[\d+\]"),
    ("leaf_above_max", r"state\['leaves'\]\[\d+\]: expected a value in \[0, max_leaf\]"),
    ("leaf_nan", r"state\['leaves'\]\[\d+\]"),
    ("max_leaf_str", r"state\['max_leaf'\]: expected a float in \[1, 2\*\*960\], got 'big'"),
    ("max_leaf_inf", r"state\['max_leaf'\]"),
    ("max_leaf_small", r"state\['max_leaf'\]"),
    ("frames_dtype", r"state\['frames'\]: expected a float32 array"),
    ("rewards_missing", r"state: missing 'rewards'"),
]


@pytest.mark.parametrize(("how", "match"), CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_a_corrupted_state_is_refused_naming_the_field_and_changes_nothing(
    how: str, match: str
) -> None:
    good = filled(True).state_dict()
    bad = corrupt(good, how)

    def load(native: bool) -> None:
        rb = filled(native)
        before = rb.state_dict()
        try:
            rb.load_state_dict(bad)
        finally:  # refused: the buffer is as it was, and still works
            after = rb.state_dict()
            for key in ("frames", "flags", "offs", "counts", "leaves"):
                np.testing.assert_array_equal(before[key], after[key])
            rb.sample(2)

    same_error(load, match)


@pytest.mark.parametrize("native", IMPLS, ids=IDS)
def test_huge_counts_no_longer_reach_the_adds(native: bool) -> None:
    rb = filled(native, prioritized=False)
    state = rb.state_dict()
    state["counts"] = np.full(2, 2**63 - 1, np.int64)
    with pytest.raises(ValueError, match=r"state\['counts'\]\[0\]"):
        rb.load_state_dict(state)
    untouched = filled(native, prioritized=False)
    rb.add(*_next_step(rb))  # adds go on exactly as in a buffer never given that state
    untouched.add(*_next_step(untouched))
    for key in ("frames", "flags", "offs", "counts"):
        np.testing.assert_array_equal(rb.state_dict()[key], untouched.state_dict()[key])


def _next_step(rb: ReplayBuffer) -> tuple[Any, ...]:
    """filled()'s next step: env 0's episode is at frame 8, env 1's at frame 18."""
    obs = np.array([[[8.0], [9.0]], [[18.0], [19.0]]], np.float32)
    return obs, [0, 0], [0.0, 0.0], [False, False], [False, False], obs


@pytest.mark.parametrize("native", IMPLS, ids=IDS)
def test_every_state_a_buffer_saves_is_accepted(native: bool) -> None:
    for prioritized in (False, True):
        rb = filled(native, prioritized)
        other = make(
            native, 12, 2, (2, 1), np.float32, prioritized=prioritized, frame_stack=2, stack_axis=0
        )
        other.load_state_dict(rb.state_dict())
        assert len(other) == len(rb)


def test_the_core_refuses_a_non_dict_state_and_uniform_leaves() -> None:
    for core in (_core.ReplayCore, ref.ReplayCore):
        c = core(8, 1, (2,), np.float32, (), np.int64, 1, 0.9, 0, -1, False)
        with pytest.raises(ValueError, match="state: expected a dict from get_state"):
            c.set_state([1, 2])
        with pytest.raises(ValueError, match="set_leaves: this buffer is uniform"):
            c.set_leaves(np.array([0]), np.array([1.0]))


# -- 2. buffers that never sample, or do not fit ----------------------------------------------


def test_a_buffer_too_small_for_its_frame_stack_is_refused() -> None:
    msg = same_error(
        lambda n: make(n, 4, 1, (4, 1), np.uint8, frame_stack=4, stack_axis=0),
        r"capacity: frame_stack=4 needs capacity // num_envs >= frame_stack \+ 1 = 5 .* "
        r"got capacity=4 with num_envs=1; use capacity >= 5",
    )
    assert "sampleable" in msg
    same_error(
        lambda n: make(n, 7, 2, (3, 1), np.uint8, frame_stack=3, stack_axis=0),
        "use capacity >= 8",
    )


@pytest.mark.parametrize("native", IMPLS, ids=IDS)
def test_the_smallest_capacity_allowed_samples(native: bool) -> None:
    rb = make(native, 5, 1, (4, 1), np.float32, frame_stack=4, stack_axis=0)
    for t in range(12):  # one episode: stack t holds frames t-3..t (0 repeated at first)
        obs = np.array([[[max(t - 3 + j, 0)] for j in range(4)]], np.float32)
        rb.add(obs, [0], [0.0], [False], [False], obs)
    assert len(rb) >= 1
    s = rb.sample(1)
    newest = s.obs[0, -1, 0]
    np.testing.assert_array_equal(s.obs[0, :, 0], np.arange(newest - 3, newest + 1))


def test_a_buffer_larger_than_memory_says_the_bytes_against_the_memory() -> None:
    msg = same_error(
        lambda n: make(n, 10**11, 1, (4,), np.float32),
        r"capacity: 100000000000 steps need \d+ bytes \(frames 1600000000000, actions "
        r"800000000000, rewards, flags, offsets and counts \d+, sum trees \d+\), more than this "
        r"machine's memory \(\d+ bytes\); use capacity <= \d+",
    )
    need = int(re.search(r"need (\d+) bytes", msg)[1])
    assert need == replay_bytes(10**11, 1, (4,), np.float32)
    fit = int(re.search(r"capacity <= (\d+)", msg)[1])
    assert replay_bytes(fit, 1, (4,), np.float32) < int(re.search(r"memory \((\d+)", msg)[1])


@pytest.mark.parametrize("native", IMPLS, ids=IDS)
@pytest.mark.parametrize(
    "kw",
    [
        dict(capacity=10, num_envs=1, obs_shape=(3,), obs_dtype=np.float32),
        dict(
            capacity=37,
            num_envs=3,
            obs_shape=(4, 2, 2),
            obs_dtype=np.uint8,
            frame_stack=4,
            stack_axis=0,
            prioritized=True,
            action_shape=(2,),
            action_dtype=np.float32,
        ),
        dict(capacity=9, num_envs=2, obs_shape=(), obs_dtype=np.float64, prioritized=True),
    ],
)
def test_replay_bytes_is_the_buffers_nbytes(native: bool, kw: dict[str, Any]) -> None:
    assert replay_bytes(**kw) == make(native, **kw).nbytes


# -- 3. frame stacks that frame-once storage would change -------------------------------------


def test_a_stack_whose_older_frame_is_not_the_previous_newest_is_refused() -> None:
    def add(native: bool) -> None:
        rb = make(native, 8, 1, (2, 1), np.float32, frame_stack=2, stack_axis=0, seed=0)
        rb.add([[[2.0], [2.0]]], [0], [0.0], [False], [False], [[[0.0], [0.0]]])
        before = rb.state_dict()
        try:
            rb.add([[[103.0], [3.0]]], [0], [0.0], [False], [False], [[[0.0], [0.0]]])
        finally:
            np.testing.assert_array_equal(rb.state_dict()["counts"], before["counts"])

    same_error(add, r"obs\[0\]: frame 0 of the stack is not the frame .*frame_stack=2")


@pytest.mark.parametrize(
    ("obs", "nxt", "end", "match"),
    [
        ([[1.0, 7.0]], [[0.0, 0.0]], False, r"obs\[0\]: frame 0"),  # a first step, not repeated
        ([[1.0, 1.0]], [[2.0, 3.0]], True, r"next_obs\[0\]: frame 0"),  # the final observation
    ],
)
def test_first_and_final_stacks_are_checked(obs, nxt, end, match) -> None:
    def add(native: bool) -> None:
        rb = make(native, 8, 1, (2,), np.float32, frame_stack=2, stack_axis=-1)
        rb.add(np.array([obs], np.float32)[0], [0], [0.0], [end], [False], nxt)

    same_error(add, match)


@pytest.mark.parametrize("native", IMPLS, ids=IDS)
@pytest.mark.parametrize("axis", [0, -1])
def test_consistent_stacks_come_back_as_added(native: bool, axis: int) -> None:
    rb = make(
        native,
        12,
        1,
        (3, 2) if axis == 0 else (2, 3),
        np.int32,
        frame_stack=3,
        stack_axis=axis,
        seed=1,
    )
    added = {}
    hist: list[np.ndarray] = []
    for t in range(10):
        f = np.array([t, -t], np.int32)
        hist = (hist or [f] * 3)[-2:] + [f] if hist else [f] * 3
        o = np.stack(hist, axis=0 if axis == 0 else -1)
        added[t] = o
        end = t == 4
        nx = np.stack(hist[1:] + [f + 100], axis=0 if axis == 0 else -1)
        rb.add(o[None], [0], [0.0], [end], [False], nx[None])
        if end:
            hist = []
    for _ in range(5):
        s = rb.sample(len(rb))
        for o in s.obs:
            t = int(o[-1, 0] if axis == 0 else o[0, -1])
            np.testing.assert_array_equal(o, added[t])


# -- 4. priorities that overflow the tree, weights that vanish ---------------------------------


def test_alpha_is_bounded() -> None:
    same_error(
        lambda n: make(n, 8, 1, (1,), np.float32, prioritized=True, alpha=2000),
        rf"alpha: expected a number in \[0.0, {MAX_ALPHA}\], got 2000",
    )


def prioritized(native: bool, alpha: float, eps: float = 1e-6) -> ReplayBuffer:
    rb = make(
        native, 16, 1, (1,), np.float32, prioritized=True, alpha=alpha, priority_eps=eps, seed=0
    )
    for t in range(9):
        rb.add([[t + 0.0]], [t], [0.0], [False], [False], [[0.0]])
    return rb


@pytest.mark.parametrize(
    ("alpha", "priority", "limit"),
    [
        (1.0, 1.7e308, r"9\.745\d*e\+288"),
        (10.0, 1e30, r"7\.922\d*e\+28"),
        (2.0, 1e160, r"3\.121\d*e\+144"),
    ],
)
def test_a_priority_whose_power_overflows_names_priority_alpha_and_limit(
    alpha: float, priority: float, limit: str
) -> None:
    def update(native: bool) -> None:
        rb = prioritized(native, alpha)
        before = rb.state_dict()["leaves"]
        try:
            rb.update_priorities(np.array([0, 1]), np.array([1.0, priority]))
        finally:
            np.testing.assert_array_equal(rb.state_dict()["leaves"], before)

    same_error(
        update,
        rf"priorities\[1\] = {re.escape(repr(priority))}: \(priority \+ priority_eps\) \*\* "
        rf"alpha = .* exceeds 2\*\*960.*with alpha={alpha!r} priorities must be <= {limit}",
    )


@pytest.mark.parametrize("native", IMPLS, ids=IDS)
def test_huge_priority_ranges_give_finite_positive_weights_and_all_indices(native: bool) -> None:
    rb = prioritized(native, alpha=1.0)
    idx = np.arange(8)
    prio = np.array([9e288, 9e288, 9e288, 9e288, 1e-300, 0.0, 1.0, 5e287])
    rb.update_priorities(idx, prio)  # the leaves sum to ~3.7e289: finite
    seen = set()
    for _ in range(20):
        s = rb.sample(8, beta=1.0)
        assert np.isfinite(s.weights).all() and (s.weights > 0).all() and (s.weights <= 1).all()
        seen |= set(s.indices.tolist())
    assert {0, 1, 2, 3} <= seen  # the draws are spread, not one index
    # leaf ratios of 1e294: the smallest weights are float32's smallest normal, not 0
    rb.update_priorities(idx, np.where(prio > 1, prio, 1.0))
    assert (rb.sample(8, beta=1.0).weights > 0).all()


@pytest.mark.parametrize("native", IMPLS, ids=IDS)
def test_weights_equal_the_closed_form_in_log_space(native: bool) -> None:
    rb = prioritized(native, alpha=0.7, eps=1e-3)
    prio = np.linspace(0.0, 4.0, 8)
    rb.update_priorities(np.arange(8), prio)
    leaves = (prio + 1e-3) ** 0.7
    s = rb.sample(8, beta=0.6)
    want = (leaves[s.indices] / leaves.min()) ** -0.6
    np.testing.assert_allclose(s.weights, want, rtol=1e-6)


# -- 5. pickling and deep copies ---------------------------------------------------------------


@pytest.mark.parametrize("native", IMPLS, ids=IDS)
@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_buffer_pickles_and_deep_copies_to_an_equal_buffer(native: bool, how: str) -> None:
    rb = filled(native)
    twin = pickle.loads(pickle.dumps(rb)) if how == "pickle" else copy.deepcopy(rb)
    assert twin.native == native and twin is not rb
    a, b = rb.state_dict(), twin.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_equal(a[key], b[key], err_msg=key)
    for _ in range(3):  # and they go on alike, independently
        x, y = rb.sample(3, 0.5), twin.sample(3, 0.5)
        for name, u, v in zip(ReplaySample._fields, x, y, strict=True):
            assert u.tobytes() == v.tobytes(), name
        rb.update_priorities(x.indices, np.ones(3))
        twin.update_priorities(y.indices, np.ones(3))
    twin.add(*_next_step(twin))
    assert rb.state_dict()["counts"].tolist() != twin.state_dict()["counts"].tolist()


def test_the_cores_pickle() -> None:
    for core in (_core.ReplayCore, ref.ReplayCore):
        c = core(8, 2, (2,), np.uint8, (), np.int64, 2, 0.5, 0, -1, True)
        c.add(
            np.ones((2, 2), np.uint8),
            [1, 2],
            [1.0, 2.0],
            [False, True],
            [False, False],
            np.ones((2, 2), np.uint8),
        )
        d = pickle.loads(pickle.dumps(c))
        assert type(d) is core and len(d) == len(c) == 1
        np.testing.assert_equal(d.get_state(), c.get_state())


# -- 6. the twin is as strict and as thread-safe as native --------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        lambda s: s._replace(obs=np.zeros_like(s.obs)[::-1].copy().T.copy()),
        lambda s: s._replace(obs=s.obs.copy()[:, ::-1]),  # non-contiguous
        lambda s: s._replace(rewards=np.frombuffer(s.rewards.tobytes(), np.float32)),  # read-only
        lambda s: s._replace(indices=[0, 1]),
        lambda s: s._replace(discounts=s.discounts.astype(np.float64)),
    ],
)
def test_sample_out_messages_are_the_natives(bad: Callable[[ReplaySample], ReplaySample]) -> None:
    def sample(native: bool) -> None:
        rb = filled(native)
        rb.sample(2, out=bad(rb.sample(2)))

    same_error(sample, r"sample: out\.\w+: out must be a writeable C-contiguous")


def test_the_twin_samples_consistently_under_concurrent_updates() -> None:
    rb = prioritized(False, alpha=1.0)
    stop = threading.Event()
    rng = np.random.default_rng(0)
    bad: list[float] = []

    def update() -> None:
        while not stop.is_set():
            rb.update_priorities(np.arange(8), rng.random(8) * 10 ** rng.integers(0, 6))

    def sample() -> None:
        for _ in range(200):
            w = rb.sample(8, beta=1.0).weights
            bad.extend(w[(w > 1) | ~np.isfinite(w)].tolist())

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=update)] + [
            threading.Thread(target=sample) for _ in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads[1:]:
            t.join()
        stop.set()
        threads[0].join()
    finally:
        sys.setswitchinterval(old)
    assert bad == []


# -- 7. every argument: a ValueError naming it -------------------------------------------------

BAD_ARGS = [
    (dict(capacity=2**70), r"capacity: expected an int in \[-9223372036854775808, "),
    (dict(n_step=2**70), r"n_step: expected an int in \["),
    (dict(frame_stack=2**70), r"frame_stack: expected an int in \["),
    (dict(num_envs=-(2**64)), r"num_envs: expected an int in \["),
    (dict(obs_shape=(2**64,)), r"obs_shape: expected an int in \["),
    (dict(gamma="0.9"), r"gamma: expected a float in \[0, 1\], got '0.9'"),
    (dict(gamma=10**400), r"gamma: expected a float in \[0, 1\]"),
    (dict(prioritized="yes"), r"prioritized: expected a bool, got 'yes'"),
    (dict(obs_shape=(2**40, 2**40)), r"ReplayBuffer: frame size: 1099511627776 \* 1099511627776"),
]


@pytest.mark.parametrize(("changes", "match"), BAD_ARGS)
def test_core_arguments_give_one_line_value_errors(changes: dict[str, Any], match: str) -> None:
    kw: dict[str, Any] = dict(
        capacity=8,
        num_envs=1,
        obs_shape=(2,),
        obs_dtype=np.float32,
        action_shape=(),
        action_dtype=np.int64,
        n_step=1,
        gamma=0.9,
        frame_stack=0,
        stack_axis=-1,
        prioritized=False,
    )
    kw.update(changes)
    native, twin = error_of(lambda: _core.ReplayCore(**kw)), error_of(lambda: ref.ReplayCore(**kw))
    assert native == twin and re.search(match, native), (native, twin)


def test_buffer_arguments_and_max_leaf_give_value_errors() -> None:
    same_error(lambda n: make(n, 2**70, 1, (2,), np.float32), r"capacity: expected an int in")
    same_error(lambda n: make(n, 8, 1, (2,), np.float32, n_step=2**70), r"n_step: expected")

    def load(native: bool) -> None:
        rb = filled(native)
        rb.load_state_dict({**rb.state_dict(), "config": "x"})

    same_error(load, r"state\['config'\]: expected a dict")
