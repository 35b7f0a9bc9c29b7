"""rlblocks.rllib.env_actions: RLlib's unsquash_action / clip_action on batched actions,
planned once per action space, give RLlib's functions' results (values, dtypes and
containers) and leave what they would refuse to them."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.spaces import Box, Dict, Discrete, MultiDiscrete, Tuple

pytest.importorskip("ray")

from ray.rllib.utils.spaces.space_utils import (  # noqa: E402
    clip_action,
    get_base_struct_from_space,
    unsquash_action,
)
from rlblocks.rllib.env_actions import env_action_fn  # noqa: E402

SPACES = {
    "box": Box(-2.0, 3.0, (2,), np.float32),
    "tuple": Tuple((Discrete(3), Box(-1.0, 1.0, (1,), np.float32))),
    "dict": Dict(
        {
            "move": Box(np.array([-1.0, 0.0]), np.array([1.0, 5.0]), dtype=np.float64),
            "pick": MultiDiscrete([4, 2]),
            "int": Box(-3, 3, (2,), np.int64),
            "free": Box(-np.inf, np.inf, (1,), np.float32),
            "nested": Tuple((Box(0.0, 1.0, (1,), np.float32), Discrete(2))),
        }
    ),
}


def _batch(space, n: int, rng: np.random.Generator):
    """``n`` actions as a policy emits them: Box leaves around [-1.5, 1.5] (some outside
    the unsquashed range), integer leaves as drawn."""
    if isinstance(space, Tuple):
        return tuple(_batch(s, n, rng) for s in space.spaces)
    if isinstance(space, Dict):
        return {k: _batch(s, n, rng) for k, s in space.spaces.items()}
    if isinstance(space, Box) and np.issubdtype(space.dtype, np.floating):
        return rng.uniform(-1.5, 1.5, (n, *space.shape)).astype(space.dtype)
    return np.stack([space.sample() for _ in range(n)])


def _assert_same(got, want) -> None:
    assert type(got) is type(want)
    if isinstance(want, tuple):
        for g, w in zip(got, want, strict=True):
            _assert_same(g, w)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            _assert_same(got[k], want[k])
    else:
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", sorted(SPACES))
@pytest.mark.parametrize("normalize", [True, False])
def test_the_planned_function_gives_rllibs_actions(name: str, normalize: bool) -> None:
    space = SPACES[name]
    to_env = env_action_fn(space, normalize=normalize, clip=not normalize)
    assert to_env is not None
    struct = get_base_struct_from_space(space)
    rllib_fn = unsquash_action if normalize else clip_action
    rng = np.random.default_rng(0)
    for n in (1, 8):
        actions = _batch(space, n, rng)
        _assert_same(to_env(actions), rllib_fn(actions, struct))


def test_nothing_to_do_gives_none() -> None:
    assert env_action_fn(Discrete(3), normalize=True, clip=True) is None
    assert env_action_fn(SPACES["tuple"], normalize=False, clip=False) is None
    unbounded = Tuple((Discrete(2), Box(-np.inf, np.inf, (1,), np.float32)))
    assert env_action_fn(unbounded, normalize=True, clip=False) is None


def test_actions_of_another_structure_go_to_rllib() -> None:
    space = SPACES["tuple"]
    to_env = env_action_fn(space, normalize=True, clip=False)
    assert to_env is not None
    struct = get_base_struct_from_space(space)
    wrong = [np.array([1]), np.array([[0.5]], np.float32)]  # a list, not a tuple
    with pytest.raises(Exception) as ours:
        to_env(wrong)
    with pytest.raises(Exception) as theirs:
        unsquash_action(wrong, struct)
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_span_of_two_gives_rllibs_actions_at_the_extremes(dtype) -> None:
    """Bounds two apart (the shortcut without RLlib's exact ``* 2 / 2``): RLlib's values
    at the dtype's extremes, tiny values, signed zeros and NaN."""
    space = Box(np.array([-1.0, 0.0, -3.5]), np.array([1.0, 2.0, -1.5]), dtype=dtype)
    to_env = env_action_fn(space, normalize=True, clip=False)
    assert to_env is not None
    big, tiny = np.finfo(dtype).max, np.finfo(dtype).smallest_subnormal
    col = np.array([big, -big, tiny, -tiny, 0.0, -0.0, np.nan, -1.0, 1.0, 0.3], dtype)
    actions = np.stack([col, col[::-1], col], 1)
    _assert_same(to_env(actions), unsquash_action(actions, get_base_struct_from_space(space)))
