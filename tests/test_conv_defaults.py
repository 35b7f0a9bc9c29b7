"""Default conv stacks for images of any size (difference 26): RLlib's table where it has the
size, a derived stack ending at 1x1 elsewhere; the native trainer writes the filters it used
into the run's config.json."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rlblocks import get_preprocessor
from rlblocks.catalog import ModelCatalog
from rlblocks.config import ConvFilter
from rlblocks.models import ComplexInputNetwork, VisionNetwork
from rlblocks.models.misc import (
    DERIVED_MAX_FINAL_KERNEL,
    default_filter_config,
    derive_filter_config,
    get_filter_config,
    same_padding,
)
from rlblocks.models.recurrent import LSTMWrapper
from rlblocks.models.visionnet import conv_stack_output_size, resolved_conv_filters
from rlblocks.train import PPOTrainer

DISCRETE4 = gym.spaces.Discrete(4)
RLLIB_SIZES = (96, 84, 64, 42, 10)


def parsed(filters):
    return [ConvFilter.parse(f) for f in filters]


@pytest.mark.parametrize("size", [s for s in RLLIB_SIZES if s != 64])
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_rllib_sizes_keep_rllib_filters(size, channels):
    shape = (size, size, channels)
    assert default_filter_config(shape) == get_filter_config(shape)
    for share in (True, False):
        m = VisionNetwork(
            gym.spaces.Box(0, 1, shape), DISCRETE4, 4, {"vf_share_layers": share}, "v"
        )
        assert m.model_config["conv_filters"] == get_filter_config(shape)
    features = VisionNetwork(gym.spaces.Box(0, 1, shape), DISCRETE4, None, {}, "f")
    assert features.model_config["conv_filters"] == get_filter_config(shape)


def test_rllib_64x64_stack_where_it_works():
    """RLlib's 64x64 stack ends at 3x3: kept for a feature extractor (flattened output),
    replaced by a derived stack with RLlib's first three layers where 1x1 is needed."""
    space = gym.spaces.Box(0, 1, (64, 64, 3))
    rllib = get_filter_config((64, 64, 3))
    features = VisionNetwork(space, DISCRETE4, None, {}, "f")
    assert features.model_config["conv_filters"] == rllib
    assert features.num_outputs == 128 * 3 * 3
    for cfg, n_out in (({}, 4), ({"vf_share_layers": False}, None)):
        m = VisionNetwork(space, DISCRETE4, n_out, cfg, "v")
        assert m.model_config["conv_filters"][:3] == rllib[:3]
        assert m.model_config["conv_filters"][3] == [256, [8, 8], 1]
    assert default_filter_config((64, 64, 3), need_1x1=False) == rllib


def test_rllib_helper_itself_is_unchanged():
    with pytest.raises(ValueError, match=r"No default CNN configuration .*default_filter_config"):
        get_filter_config((7, 7, 3))
    assert get_filter_config((3, 84, 84)) == get_filter_config((84, 84, 3))  # RLlib's CHW match


def test_derived_examples():
    assert derive_filter_config((7, 7, 3)) == [[16, [3, 3], 1], [32, [3, 3], 1], [256, [7, 7], 1]]
    assert derive_filter_config((1, 1)) == [[16, [1, 1], 1], [32, [1, 1], 1], [256, [1, 1], 1]]
    assert derive_filter_config((12, 12, 1)) == [[16, [4, 4], 2], [256, [6, 6], 1]]
    f = derive_filter_config((1, 50))
    assert f[0] == [16, [1, 4], [1, 2]] and f[-1] == [256, [1, 7], 1]
    # a channel-first (C, H, W) shape is an image of H=C: the vision net reads HWC
    assert default_filter_config((3, 84, 84))[-1] == [256, [3, 11], 1]


@pytest.mark.parametrize("shape", [(7,), (1, 7, 7, 3), (0, 5), (5, 0, 3)])
def test_derive_rejects_non_images(shape):
    with pytest.raises(ValueError, match=r"\(H, W\) or \(H, W, C\)"):
        derive_filter_config(shape)


def test_every_size_up_to_160_ends_at_1x1():
    """The arithmetic of the vision net's padding ("same" but the last, "valid" last)."""
    for h in range(1, 161):
        for w in range(1, 161):
            filters = parsed(default_filter_config((h, w, 3)))
            assert conv_stack_output_size((h, w), filters) == (1, 1), (h, w)
            if h == w and h in RLLIB_SIZES:
                continue
            size = (h, w)
            for f in filters[:-1]:
                # no kernel is larger than the map it slides over
                assert f.kernel[0] <= size[0] and f.kernel[1] <= size[1], (h, w)
                _, size = same_padding(size, f.kernel, f.stride)
            assert filters[-1].kernel == size and filters[-1].stride == (1, 1)
            assert max(size) <= DERIVED_MAX_FINAL_KERNEL


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    h=st.integers(1, 128),
    w=st.integers(1, 128),
    c=st.sampled_from([1, 3, 4]),
    share=st.booleans(),
    post=st.sampled_from([[], [8]]),
)
@example(h=10, w=10, c=1, share=False, post=[])  # RLlib's table sizes, on every run
@example(h=64, w=64, c=3, share=True, post=[8])
def test_vision_net_builds_for_any_size(h, w, c, share, post):
    space = gym.spaces.Box(0.0, 1.0, (h, w, c), np.float32)
    cfg = {"vf_share_layers": share, "post_fcnet_hiddens": post}
    m = VisionNetwork(space, DISCRETE4, 4, cfg, "v")
    with torch.no_grad():
        out, _ = m({"obs": torch.rand(2, h, w, c)})
        assert out.shape == (2, 4)
        assert m.value_function().shape == (2,)
        features = VisionNetwork(space, DISCRETE4, None, {}, "f")
        feats, _ = features({"obs": torch.rand(3, h, w, c)})
    # RLlib's 64x64 stack ends at a 3x3 map of 128, its 10x10 one at 1x1 of 32 channels
    n_features = {(64, 64): 128 * 3 * 3, (10, 10): 32}.get((h, w), 256)
    assert feats.shape == (3, n_features) == (3, features.num_outputs)
    assert resolved_conv_filters(m) == default_filter_config((h, w, c))


@pytest.mark.parametrize(
    "shape",
    [
        (7, 7, 3),
        (10, 10, 3),
        (42, 42, 1),
        (64, 64, 3),
        (96, 96, 3),
        (84, 84, 4),
        (1, 37, 1),
        (53, 1, 3),
    ],
)
def test_catalog_models_for_odd_and_rllib_sizes(shape):
    space = gym.spaces.Box(0.0, 1.0, shape, np.float32)
    m = ModelCatalog.get_model_v2(space, DISCRETE4, 4, {})
    assert isinstance(m, VisionNetwork)
    with torch.no_grad():
        out, _ = m({"obs": torch.rand(2, *shape)})
    assert out.shape == (2, 4) and m.value_function().shape == (2,)


def test_minigrid_sized_images_inside_other_models():
    image = gym.spaces.Box(0, 10, (7, 7, 3), np.float32)  # MiniGrid's partial view
    nested = gym.spaces.Dict({"image": image, "direction": gym.spaces.Discrete(4)})
    flat = get_preprocessor(nested)(nested).observation_space
    m = ModelCatalog.get_model_v2(flat, DISCRETE4, 4, {"fcnet_hiddens": [16]})
    assert isinstance(m, ComplexInputNetwork)
    with torch.no_grad():
        out, _ = m({"obs": torch.zeros(2, flat.shape[0])})
    assert out.shape == (2, 4)
    assert resolved_conv_filters(m) == derive_filter_config((7, 7, 3))

    lstm = ModelCatalog.get_model_v2(image, DISCRETE4, 4, {"use_lstm": True, "lstm_cell_size": 8})
    assert isinstance(lstm, LSTMWrapper)
    state = [s[None].expand(2, -1) for s in lstm.get_initial_state()]
    with torch.no_grad():
        out, _ = lstm({"obs": torch.zeros(2, 7, 7, 3)}, state, torch.tensor([1, 1]))
    assert out.shape == (2, 4)


def test_resolved_filters_none_when_images_differ():
    nested = gym.spaces.Dict(
        {"a": gym.spaces.Box(0, 1, (7, 7, 1)), "b": gym.spaces.Box(0, 1, (9, 9, 1))}
    )
    flat = get_preprocessor(nested)(nested).observation_space
    m = ComplexInputNetwork(flat, DISCRETE4, 4, {"fcnet_hiddens": [4]}, "c")
    assert resolved_conv_filters(m) is None


class GridBandit(gym.Env):
    """A 7x7x3 image whose brightness says which of 2 actions pays; one step per episode."""

    observation_space = gym.spaces.Box(0, 255, (7, 7, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None):
        self._context = 0

    def _obs(self):
        return np.full((7, 7, 3), 200 if self._context else 20, np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._context = int(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == self._context)
        self._context = int(self.np_random.integers(2))
        return self._obs(), reward, True, False, {}


def test_native_trainer_writes_the_filters_it_used(tmp_path):
    base = {
        "env": GridBandit,
        "num_envs": 2,
        "train_batch_size": 32,
        "sgd_minibatch_size": 16,
        "num_sgd_iter": 1,
    }
    trainer = PPOTrainer(base, run_dir=tmp_path / "derived")
    try:
        metrics = trainer.train()
    finally:
        trainer.runner.close()
    assert np.isfinite(metrics["total_loss"])
    saved = json.loads((tmp_path / "derived" / "config.json").read_text())
    assert saved["model"]["conv_filters"] == derive_filter_config((7, 7, 3))
    assert saved["model"]["conv_filters"] == trainer.model.model_config["conv_filters"]

    mine = [[8, [3, 3], 1], [16, [7, 7], 1]]
    trainer = PPOTrainer({**base, "model": {"conv_filters": mine}}, run_dir=tmp_path / "mine")
    trainer.runner.close()
    saved = json.loads((tmp_path / "mine" / "config.json").read_text())
    assert saved["model"]["conv_filters"] == mine
