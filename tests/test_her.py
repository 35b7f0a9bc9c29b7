"""Hindsight relabelling (rlblocks/her.hpp, rlblocks._reference.her, rlblocks.her): the
native kernel and its numpy twin relabel the same batch bit for bit, both equal a
hand-written reference built from the log of what was added (not from the ring), and bad
input is one ValueError with the same message from both, before anything is written."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rlblocks import _core
from rlblocks._reference import her as ref_her
from rlblocks._reference import replay as ref_replay
from rlblocks.her import GoalColumns, HindsightSampler, goal_columns
from rlblocks.layout import layout
from rlblocks.replay import ReplayBuffer

pytestmark = pytest.mark.native

# a row: [achieved goal (2), desired goal (2), step id]
D, AG, DG, G = 5, 0, 2, 2
STRATEGIES = ("future", "final", "episode")


class Log:
    """Both storages fed the same adds, and the log of every entry they should hold:
    per env, ("step" | "final", episode id, row) by absolute index."""

    def __init__(self, per_env: int, num_envs: int) -> None:
        args = (per_env * num_envs, num_envs, (D,), np.float32, (), np.int64, 1, 0.9, 0, -1)
        self.cores = [_core.ReplayCore(*args, False), ref_replay.ReplayCore(*args, False)]
        self.L, self.n = per_env, num_envs
        self.entries: list[list[tuple[str, int, np.ndarray]]] = [[] for _ in range(num_envs)]
        self.episode = list(range(num_envs))
        self.next_episode = num_envs
        self.counter = 0

    def row(self) -> np.ndarray:
        self.counter += 1
        c = float(self.counter)
        return np.array([c, -c, 1000 + c, -1000 - c, c], np.float32)

    def add(self, term: list[bool], trunc: list[bool], valid: list[bool]) -> None:
        obs = np.stack([self.row() for _ in range(self.n)])
        nxt = np.stack([self.row() for _ in range(self.n)])
        for core in self.cores:
            core.add(
                obs,
                np.zeros(self.n, np.int64),
                np.full(self.n, -1.0),
                np.array(term),
                np.array(trunc),
                nxt,
                np.array(valid),
            )
        for e in range(self.n):
            if not valid[e]:
                continue
            self.entries[e].append(("step", self.episode[e], obs[e]))
            if term[e] or trunc[e]:
                self.entries[e].append(("final", self.episode[e], nxt[e]))
                self.episode[e], self.next_episode = self.next_episode, self.next_episode + 1

    def reference(self, idx: int, u: float, strategy: str) -> tuple[int, np.ndarray]:
        """The goal leaf and goal of sampled leaf ``idx`` from the log alone."""
        e, slot = divmod(idx, self.L)
        log = self.entries[e]
        cnt = len(log)
        oldest = max(0, cnt - self.L)
        a = next(x for x in range(oldest, cnt) if x % self.L == slot)
        assert log[a][0] == "step"
        candidates = [
            g
            for g in range(oldest, cnt - 1)  # kept, with its next observation stored
            if log[g][0] == "step" and log[g][1] == log[a][1] and (strategy != "future" or g >= a)
        ]
        if strategy == "final":
            g = max(candidates)
        else:
            g = candidates[min(int(u * len(candidates)), len(candidates) - 1)]
        return e * self.L + g % self.L, log[g + 1][2][AG : AG + G]


@st.composite
def layouts(draw: Any) -> tuple[int, int, list[Any]]:
    n = draw(st.integers(1, 3))
    per_env = draw(st.integers(2, 7))
    flag = st.sampled_from(["", "", "", "term", "trunc"])
    adds = draw(
        st.lists(
            st.tuples(
                st.lists(flag, min_size=n, max_size=n),
                st.lists(st.integers(0, 9), min_size=n, max_size=n),
            ),
            min_size=1,
            max_size=25,
        )
    )
    return n, per_env, adds


def fill(n: int, per_env: int, adds: list[Any]) -> Log:
    log = Log(per_env, n)
    for flags, skip in adds:
        log.add([f == "term" for f in flags], [f == "trunc" for f in flags], [s > 0 for s in skip])
    return log


@given(layouts(), st.integers(0, 2**31 - 1), st.sampled_from(STRATEGIES), st.integers(0, 8))
def test_kernel_equals_twin_and_the_log_reference(layout_, seed, strategy, n_relabel) -> None:
    log = fill(*layout_)
    N = len(log.cores[0])
    assert N == len(log.cores[1])
    if N == 0:
        return
    rng = np.random.default_rng(seed)
    B = min(8, N)  # the buffer samples at most len(buffer) at a time
    n_relabel = min(n_relabel, B)
    u, u2 = rng.random(B), rng.random(B)
    results = []
    for core, fn in zip(log.cores, (_core.her_relabel, ref_her.her_relabel), strict=True):
        obs, _, _, nxt, _, idx, *_ = core.sample(u)
        before = (obs.copy(), nxt.copy())
        goals = fn(core, strategy, AG, DG, G, idx, u2, n_relabel, obs, nxt)
        results.append((obs, nxt, idx, goals, before))
    (o1, n1, i1, g1, b1), (o2, n2, i2, g2, _) = results
    assert o1.tobytes() == o2.tobytes() and n1.tobytes() == n2.tobytes()
    assert np.array_equal(i1, i2) and np.array_equal(g1, g2)
    for b in range(B):
        if b >= n_relabel:
            assert g1[b] == -1
            assert np.array_equal(o1[b], b1[0][b]) and np.array_equal(n1[b], b1[1][b])
            continue
        leaf, goal = log.reference(int(i1[b]), float(u2[b]), strategy)
        assert g1[b] == leaf
        assert np.array_equal(o1[b, DG : DG + G], goal) and np.array_equal(n1[b, DG : DG + G], goal)
        keep = [c for c in range(D) if not DG <= c < DG + G]  # everything else as sampled
        assert np.array_equal(o1[b, keep], b1[0][b, keep])
        assert np.array_equal(n1[b, keep], b1[1][b, keep])


def test_each_strategy_by_hand() -> None:
    """One env, ring of 8: episode A = steps 0, 1, 2 (truncated, final obs stored), then the
    running episode B = steps 4, 5, 6 (entry 6 the newest: its successor is not stored, so B
    offers goals 4 and 5 only). The goal of step g is row g + 1's achieved goal."""
    log = Log(8, 1)
    for t in range(6):
        log.add([False], [t == 2], [True])
    core = log.cores[0]
    rows = {x: entry[2][AG] for x, entry in enumerate(log.entries[0])}
    want = {  # (strategy, step, u2) -> goal step
        ("future", 0, 0.0): 0,
        ("future", 0, 0.999): 2,
        ("future", 1, 0.0): 1,
        ("final", 0, 0.0): 2,
        ("final", 2, 0.5): 2,
        ("final", 4, 0.0): 5,
        ("episode", 2, 0.0): 0,
        ("episode", 5, 0.0): 4,
        ("episode", 4, 0.999): 5,
        ("future", 5, 0.5): 5,
    }
    for (strategy, step, u), g in want.items():
        idx = np.array([step], np.int64)
        obs = np.zeros((1, D), np.float32)
        nxt = np.zeros((1, D), np.float32)
        goals = _core.her_relabel(core, strategy, AG, DG, G, idx, np.array([u]), 1, obs, nxt)
        assert goals.tolist() == [g], (strategy, step, u)
        assert obs[0, DG] == rows[g + 1] == nxt[0, DG], (strategy, step, u)


def test_overwritten_slots_are_never_goals() -> None:
    """A ring of 4 after 6 steps of one episode keeps steps 2..5: `episode` starts at 2."""
    log = Log(4, 1)
    for _ in range(6):
        log.add([False], [False], [True])
    for core, fn in zip(log.cores, (_core.her_relabel, ref_her.her_relabel), strict=True):
        idx = np.array([3], np.int64)  # step 3
        obs, nxt = np.zeros((1, D), np.float32), np.zeros((1, D), np.float32)
        assert fn(core, "episode", AG, DG, G, idx, np.array([0.0]), 1, obs, nxt).tolist() == [2]
        assert fn(core, "final", AG, DG, G, idx, np.array([0.0]), 1, obs, nxt).tolist() == [0]
        # step 4 is the newest with a stored successor; 4 % 4 = leaf 0


def _bad_cases(core: Any, other: Any) -> list[tuple[str, dict[str, Any]]]:
    ok = {
        "replay": core,
        "strategy": "future",
        "achieved_offset": AG,
        "desired_offset": DG,
        "goal_size": G,
        "indices": np.array([0, 1], np.int64),
        "u": np.array([0.1, 0.2]),
        "n_relabel": 2,
    }
    ro = np.zeros((2, D), np.float32)
    ro.flags.writeable = False
    return [
        ("replay: expected a ReplayCore", {**ok, "replay": []}),
        ("needs n_step=1", {**ok, "replay": other["nstep"]}),
        ("needs observations stored whole", {**ok, "replay": other["stack"]}),
        ("needs flat observations", {**ok, "replay": other["flat"]}),
        ("strategy: expected", {**ok, "strategy": "best"}),
        ("strategy: expected", {**ok, "strategy": None}),
        ("goal_size: expected an int in [1, 5]", {**ok, "goal_size": 0}),
        ("goal_size: expected an int in [1, 5]", {**ok, "goal_size": True}),
        ("achieved_offset: expected an int in [0, 3]", {**ok, "achieved_offset": 4}),
        ("desired_offset: expected an int in [0, 3]", {**ok, "desired_offset": -1}),
        ("desired_offset: expected an int in [0, 3]", {**ok, "desired_offset": 2**70}),
        ("indices: expected a 1-d int64 array", {**ok, "indices": np.array([0.0, 1.0])}),
        ("indices: expected a 1-d int64 array", {**ok, "indices": np.zeros((2, 1), np.int64)}),
        ("u: expected a float64 array of shape (2,)", {**ok, "u": np.array([0.1], np.float64)}),
        ("u: expected a float64 array of shape (2,)", {**ok, "u": np.zeros(2, np.float32)}),
        ("u[1] = 1.0: expected a number in [0, 1)", {**ok, "u": np.array([0.5, 1.0])}),
        ("u[0] = nan", {**ok, "u": np.array([np.nan, 0.0])}),
        ("n_relabel: expected an int in [0, 2]", {**ok, "n_relabel": 3}),
        ("n_relabel: expected an int in [0, 2]", {**ok, "n_relabel": 1.0}),
        ("her_relabel: obs: out must be", {**ok, "obs": np.zeros((2, D), np.float64)}),
        ("her_relabel: obs: out must be", {**ok, "obs": ro}),
        (
            "her_relabel: next_obs: out must be",
            {**ok, "next_obs": np.zeros((2, D + 1), np.float32)[:, :D]},
        ),
        ("indices[1] = 7: not a sampleable step", {**ok, "indices": np.array([0, 7], np.int64)}),
        ("indices[0] = -1: not a sampleable step", {**ok, "indices": np.array([-1, 0], np.int64)}),
        ("indices[0] = 99: not a sampleable step", {**ok, "indices": np.array([99, 0], np.int64)}),
    ]


def test_bad_input_is_one_identical_value_error_and_writes_nothing() -> None:
    log = Log(8, 1)
    for _ in range(4):
        log.add([False], [False], [True])
    others = []
    for mod in (_core, ref_replay):
        others.append(
            {
                "nstep": mod.ReplayCore(8, 1, (D,), np.float32, (), np.int64, 2, 0.9, 0, -1, False),
                "stack": mod.ReplayCore(
                    8, 1, (D, 2), np.float32, (), np.int64, 1, 0.9, 2, -1, False
                ),
                "flat": mod.ReplayCore(
                    8, 1, (D, 2), np.float32, (), np.int64, 1, 0.9, 0, -1, False
                ),
            }
        )
    native_cases = _bad_cases(log.cores[0], others[0])
    twin_cases = _bad_cases(log.cores[1], others[1])
    for (want, kw1), (_, kw2) in zip(native_cases, twin_cases, strict=True):
        messages = []
        for fn, kw in ((_core.her_relabel, kw1), (ref_her.her_relabel, kw2)):
            kw = dict(kw)
            obs = kw.pop("obs", None)
            nxt = kw.pop("next_obs", None)
            fresh = obs is None and nxt is None
            obs = np.full((2, D), 7, np.float32) if obs is None else obs
            nxt = np.full((2, D), 7, np.float32) if nxt is None else nxt
            with pytest.raises(ValueError) as err:
                fn(**kw, obs=obs, next_obs=nxt)
            messages.append(str(err.value))
            if fresh:  # nothing written
                assert (obs == 7).all() and (nxt == 7).all()
        assert messages[0] == messages[1], want
        assert want in messages[0] and "\n" not in messages[0]
    obs = np.zeros((2, D), np.float32)
    for fn, core in ((_core.her_relabel, log.cores[0]), (ref_her.her_relabel, log.cores[1])):
        with pytest.raises(ValueError, match="next_obs must not overlap obs"):
            fn(core, "future", AG, DG, G, np.array([0, 1], np.int64), np.zeros(2), 2, obs, obs)


# --- the sampler (rlblocks.her) -----------------------------------------------------------


def _distance_reward(achieved: np.ndarray, desired: np.ndarray, info: Any) -> np.ndarray:
    assert achieved.shape == desired.shape == (len(info), G)
    return -np.abs(achieved - desired).sum(-1)


def _buffer(seed: int = 3, **kw: Any) -> ReplayBuffer:
    rb = ReplayBuffer(32, 2, (D,), np.float32, seed=seed, **kw)
    rng = np.random.default_rng(0)
    for t in range(20):
        obs = rng.integers(0, 5, (2, D)).astype(np.float32)
        rb.add(obs, [0, 0], [-1.0, -1.0], [False, t % 7 == 6], [t % 5 == 4, False], obs + 1)
    return rb


def test_sampler_relabels_k_over_k_plus_1_and_recomputes_their_rewards(impl) -> None:
    cols = GoalColumns(slice(AG, AG + G), slice(DG, DG + G), (G,))
    sampler = HindsightSampler(_buffer(), cols, _distance_reward, "future", n_sampled_goal=3)
    batch = sampler.sample(16)
    n = 16 * 3 // 4
    assert (sampler.last_goals[:n] >= 0).all() and (sampler.last_goals[n:] == -1).all()
    want = _distance_reward(batch.next_obs[:n, AG : AG + G], batch.obs[:n, DG : DG + G], [{}] * n)
    assert np.array_equal(batch.rewards[:n], want.astype(np.float32))
    assert (batch.rewards[n:] == -1.0).all()
    again = HindsightSampler(_buffer(), cols, _distance_reward, "future", 3).sample(16)
    assert all(np.array_equal(x, y) for x, y in zip(batch, again, strict=True))


def test_sampler_refuses_what_it_cannot_relabel() -> None:
    cols = GoalColumns(slice(0, 2), slice(2, 4), (2,))
    with pytest.raises(ValueError, match="prioritized replay is not supported"):
        HindsightSampler(_buffer(prioritized=True), cols, _distance_reward)
    with pytest.raises(ValueError, match="needs n_step=1"):
        HindsightSampler(_buffer(n_step=3), cols, _distance_reward)
    with pytest.raises(ValueError, match="her_strategy: expected one of"):
        HindsightSampler(_buffer(), cols, _distance_reward, "last")
    with pytest.raises(ValueError, match="her_n_sampled_goal: expected an int >= 1"):
        HindsightSampler(_buffer(), cols, _distance_reward, "future", 0)
    bad = HindsightSampler(_buffer(), cols, lambda a, d, i: np.zeros((len(a), 2)))
    with pytest.raises(ValueError, match=r"compute_reward returned shape \(12, 2\)"):
        bad.sample(16)


def test_goal_columns_need_a_goal_dict_of_equal_box_goals() -> None:
    box = gym.spaces.Box(-1, 1, (3,))
    with pytest.raises(ValueError, match="needs a goal Dict observation"):
        goal_columns(layout(gym.spaces.Dict({"observation": box})))
    odd = gym.spaces.Dict(
        {"observation": box, "achieved_goal": box, "desired_goal": gym.spaces.Box(-1, 1, (2,))}
    )
    with pytest.raises(ValueError, match="differ in shape"):
        goal_columns(layout(odd))
    disc = gym.spaces.Dict(
        {
            "observation": box,
            "achieved_goal": gym.spaces.Discrete(3),
            "desired_goal": gym.spaces.Discrete(3),
        }
    )
    with pytest.raises(ValueError, match="must be a Box"):
        goal_columns(layout(disc))
    first = gym.spaces.Dict({"observation": box, "achieved_goal": box, "desired_goal": box})
    cols = goal_columns(layout(first))
    assert (cols.achieved, cols.desired, cols.shape) == (slice(0, 3), slice(3, 6), (3,))
