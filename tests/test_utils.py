"""one_hot helpers against np.eye and torch."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from rlblocks.utils import one_hot, one_hot_multidiscrete, torch_one_hot


@given(st.lists(st.integers(0, 9), min_size=1, max_size=20), st.integers(10, 12))
def test_one_hot_equals_eye(values, depth):
    np.testing.assert_array_equal(one_hot(values, depth), np.eye(depth, dtype=np.float32)[values])


def test_one_hot_rllib_semantics():
    assert one_hot([0, 2]).shape == (2, 3)  # depth 0 -> max + 1
    assert one_hot(np.array([True, False])).tolist() == [[0, 1], [1, 0]]  # bool -> depth 2
    assert one_hot(1, depth=3, on_value=2.0, off_value=-1.0).tolist() == [-1, 2, -1]
    assert one_hot(torch.tensor([1]), depth=2).tolist() == [[0, 1]]
    assert one_hot([[1], [0]], depth=2).shape == (2, 1, 2)
    with pytest.raises(ValueError, match="values must be in 0..2"):
        one_hot([3], depth=3)
    with pytest.raises(ValueError, match="expected integers"):
        one_hot([0.5])


def test_one_hot_multidiscrete():
    out = one_hot_multidiscrete([[1, 2], [0, 0]], [2, 3])
    assert out.tolist() == [[0, 1, 0, 0, 1], [1, 0, 1, 0, 0]]


def test_torch_one_hot_discrete_and_multidiscrete():
    out = torch_one_hot(torch.tensor([-1, 1]), gym.spaces.Discrete(3, start=-1))
    assert out.dtype == torch.float32 and out.tolist() == [[1, 0, 0], [0, 0, 1]]
    space = gym.spaces.MultiDiscrete(np.array([[2, 3], [2, 2]]))
    x = torch.tensor([[[1, 2], [0, 1]]])
    out = torch_one_hot(x, space)
    assert out.tolist() == [[0, 1, 0, 0, 1, 1, 0, 0, 1]]
    with pytest.raises(ValueError, match="Discrete or MultiDiscrete"):
        torch_one_hot(torch.zeros(2), gym.spaces.Box(0, 1, (2,)))
