"""Issue 42, items 1 and 5: every native object a user holds (preprocessors, filters, frame
stacks, running statistics) pickles and deep-copies to an equal object, and every state
they take is checked field by field before anything changes, on the C++ core and on its
numpy twin alike (same acceptance, same message)."""

from __future__ import annotations

import copy
import pickle
import re

import gymnasium as gym
import numpy as np
import pytest
import rlblocks as rb
from rlblocks import _core
from rlblocks.filters import ConcurrentMeanStdFilter, MeanStdFilter
from rlblocks.framestack import FrameStacker
from rlblocks.running_stat import RunningStat

pytestmark = pytest.mark.native

COPIES = {
    "pickle": lambda obj: pickle.loads(pickle.dumps(obj)),
    "deepcopy": copy.deepcopy,
}


def fields(stat: RunningStat) -> dict:
    return {k: np.asarray(v).tolist() for k, v in stat.state().items()}


@pytest.mark.parametrize("how", COPIES)
def test_running_stats_and_filters_copy_to_equal_objects(impl, how) -> None:
    rng = np.random.default_rng(0)
    stat = RunningStat((2, 3))
    stat.push_batch(rng.normal(size=(5, 2, 3)))
    core = stat.backend
    for cls in (MeanStdFilter, ConcurrentMeanStdFilter):
        f = cls((3,), clip=4.0)
        f(rng.normal(size=(4, 3)))
        g = COPIES[how](f)
        assert type(g) is cls and g.state_dict().keys() == f.state_dict().keys()
        assert fields(g.running_stats) == fields(f.running_stats)
        assert fields(g.buffer) == fields(f.buffer)
        x = rng.normal(size=3)
        np.testing.assert_array_equal(g(x), f(x))  # and they go on alike
    twin = COPIES[how](stat)
    assert twin.native == stat.native and fields(twin) == fields(stat)
    raw = COPIES[how](core)  # the backend object itself (native: rlblocks._core.RunningStat)
    assert type(raw) is type(core) and raw is not core
    assert {k: np.asarray(v).tolist() for k, v in raw.get_state().items()} == fields(stat)


@pytest.mark.parametrize("how", COPIES)
@pytest.mark.parametrize("channels_last", [True, False])
def test_frame_stacks_copy_to_equal_objects(impl, how, channels_last) -> None:
    fs = FrameStacker(3, 3, (2, 2, 2), np.int16, channels_last=channels_last)
    frames = np.arange(24, dtype=np.int16).reshape(3, 2, 2, 2)
    fs.reset(frames[:2], env_ids=[0, 2])  # env 1 not ready yet
    fs.push(frames + 100, reset_mask=np.array([False, True, False]))
    fs.push(frames + 200)
    twin = COPIES[how](fs)
    assert twin == fs and twin.native == fs.native
    np.testing.assert_array_equal(twin.observation(), fs.observation())
    np.testing.assert_array_equal(twin.push(frames), fs.push(frames))
    fresh = FrameStacker(2, 2, (1, 1))  # never reset: it copies, and stays unready
    with pytest.raises(ValueError, match="env 0 has no frames yet"):
        COPIES[how](fresh).observation()


@pytest.mark.parametrize("how", COPIES)
def test_preprocessors_copy_to_equal_objects(impl, how) -> None:
    space = gym.spaces.Dict(
        {"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(-1, 1, (2,)), "c": gym.spaces.Text(4)}
    )
    for obs_space, options in (
        (space, {}),
        (gym.spaces.Box(0, 255, (210, 160, 3), np.uint8), {"dim": 42}),
        (gym.spaces.Box(-1, 1, (3,)), {}),
    ):
        pre = rb.get_preprocessor(obs_space)(obs_space, options)
        twin = COPIES[how](pre)
        assert type(twin) is type(pre) and twin.shape == pre.shape
        obs_space.seed(0)
        obs = obs_space.sample()
        np.testing.assert_array_equal(twin.transform(obs), pre.transform(obs))


def test_the_native_core_objects_pickle() -> None:
    fs = _core.FrameStacker(2, 2, (1, 2), np.dtype(np.uint8), True)
    fs.reset(np.ones((2, 1, 2), np.uint8))
    twin = pickle.loads(pickle.dumps(fs))
    np.testing.assert_array_equal(twin.observation(), fs.observation())
    stat = _core.RunningStat((2,))
    stat.push(np.array([1.0, 2.0]))
    assert pickle.loads(pickle.dumps(stat)).mean.tolist() == [1.0, 2.0]


# ------------------------------------------------------------------ checked states


def both_messages(make, load) -> list[str]:
    """The ValueError ``load(make())`` raises on the C++ core, then on the numpy twin."""
    messages = []
    for numpy_ref in (False, True):
        rb._impl.use_numpy_reference(numpy_ref)
        try:
            obj = make()
            with pytest.raises(ValueError) as err:
                load(obj)
            messages.append(str(err.value))
        finally:
            rb._impl.use_numpy_reference(False)
    return messages


def good_stat_state() -> dict:
    s = RunningStat((2,))
    s.push_batch(np.array([[1.0, 2.0], [3.0, 5.0]]))
    return s.state()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"mean_array": np.array([1e300, 0.0])}, r"state\['mean_array'\]: .*within \+-2\*\*479"),
        ({"num_pushes": 0, "num_pushes_delta": 0}, r"'mean_array'\]: must be 0 while"),
        ({"num_pushes_delta": 0}, r"'mean_delta_array'\]: must be 0 while"),
        (
            {"num_pushes_delta": 0, "mean_delta_array": np.zeros(2)},
            r"'sum_sq_diff_delta_array'\]: must be 0 while state\['num_pushes_delta'\] is 0",
        ),
        ({"sum_sq_diff_array": np.array([-1.0, 0.0])}, r"'sum_sq_diff_array'\]: .*>= 0.*got -1\.0"),
        ({"sum_sq_diff_delta_array": np.array([-0.5, 0.0])}, r"'sum_sq_diff_delta_array'\]"),
        ({"mean_array": np.array([np.nan, 0.0])}, r"'mean_array'\]: values must be finite"),
        ({"num_pushes": 2**63}, r"'num_pushes'\]: expected a non-negative int below 2\*\*63"),
        ({"mean_array": np.zeros(3)}, r"'mean_array'\]: expected shape \(2,\)"),
    ],
)
def test_running_stat_states_are_checked_field_by_field(change, field) -> None:
    state = good_stat_state()
    native, twin = both_messages(
        lambda: RunningStat((2,)), lambda s: s.set_state({**state, **change})
    )
    assert native == twin
    assert re.search(field, native), native


def test_running_stat_refuses_a_state_that_is_not_a_dict() -> None:
    native, twin = both_messages(lambda: RunningStat((2,)), lambda s: s.backend.set_state([1]))
    assert native == twin == "state: expected a dict, got list"


def test_a_bad_state_changes_nothing_and_names_the_filter_stat(impl) -> None:
    f = MeanStdFilter((2,))
    f(np.array([1.0, 2.0]))
    before = f.state_dict()
    bad = copy.deepcopy(before)
    bad["buffer"]["mean_array"] = np.array([1e300, 0.0])
    with pytest.raises(ValueError, match=r"^state\['buffer'\]\['mean_array'\]: values must lie"):
        f.load_state_dict(bad)
    after = f.state_dict()
    assert fields_equal(after, before)


def fields_equal(a: dict, b: dict) -> bool:
    return all(
        {k: np.asarray(v).tolist() for k, v in a[key].items()}
        == {k: np.asarray(v).tolist() for k, v in b[key].items()}
        for key in ("running_stats", "buffer")
    )


def good_stack() -> FrameStacker:
    fs = FrameStacker(2, 2, (1, 2))
    fs.reset(np.ones((1, 1, 2), np.uint8), env_ids=[1])
    return fs


@pytest.mark.parametrize(
    ("state", "field"),
    [
        ([1, 2], "state: expected a dict, got list"),
        ({"frames": None}, "state: missing key 'ready'"),
        (
            {"frames": np.zeros((2, 2, 1, 2), np.int8), "ready": np.array([False, True])},
            r"state\['frames'\]: expected a uint8 array of shape \(2, 2, 1, 2\)",
        ),
        (
            {"frames": np.zeros((2, 2, 2, 1), np.uint8), "ready": np.array([False, True])},
            r"state\['frames'\]: expected .* got uint8 array of shape \(2, 2, 2, 1\)",
        ),
        (
            {"frames": [[[[0, 0]]] * 2] * 2, "ready": np.array([False, True])},
            r"state\['frames'\]: expected .* got list",
        ),
        (
            {"frames": np.zeros((2, 2, 1, 2), np.uint8), "ready": np.array([0, 1])},
            r"state\['ready'\]: expected a bool array of shape \(2,\), got int64",
        ),
        (
            {"frames": np.ones((2, 2, 1, 2), np.uint8), "ready": np.array([False, True])},
            r"state\['frames'\]\[0\]: env 0 is not ready",
        ),
    ],
)
def test_frame_stack_states_are_checked_field_by_field(state, field) -> None:
    native, twin = both_messages(good_stack, lambda fs: fs.set_state(state))
    assert native == twin
    assert re.search(field, native), native


def test_a_refused_frame_stack_state_changes_nothing(impl) -> None:
    fs = good_stack()
    before = fs.get_state()
    with pytest.raises(ValueError):
        fs.set_state(
            {"frames": np.full((2, 2, 1, 2), 9, np.uint8), "ready": np.array([False, True])}
        )
    after = fs.get_state()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    fs.set_state({"frames": np.full((2, 2, 1, 2), 9, np.uint8), "ready": np.array([True, True])})
    assert fs.observation().tolist() == [[[[9, 9], [9, 9]]]] * 2


def test_a_drifted_delta_state_is_taken(impl) -> None:
    # RLlib's delta fields record the drift pushes caused, not moments: after an update
    # they may lie beyond the tracked range, and such a reachable state must load
    edge = 2.0**479
    a, b = RunningStat((1,)), RunningStat((1,))
    b.push(np.array([-edge]))
    a.update(b)
    a.push_batch(np.full((1000, 1), edge))
    state = a.state()
    assert abs(state["mean_delta_array"][0]) > edge
    c = RunningStat((1,))
    c.set_state(state)
    assert fields(c) == fields(a)
