"""Shared check for the recurrent and attention wrappers built through the catalog."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import rlblocks as rb
import torch

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def spaces_for(kind):
    if kind == "fc":
        return OBS, None
    if kind == "vision":
        return gym.spaces.Box(0.0, 1.0, (10, 10, 3), np.float32), None
    space = gym.spaces.Dict(
        {
            "img": gym.spaces.Box(0.0, 1.0, (10, 10, 3), np.float32),
            "pos": gym.spaces.Box(-1, 1, (2,), np.float32),
            "kind": gym.spaces.Discrete(3),
        }
    )
    prep = rb.get_preprocessor(space)(space)
    return prep.observation_space, prep


def check_catalog_wraps_default_model(kind, model_config, wrapper_cls):
    """The catalog wraps the default model for ``kind`` in ``wrapper_cls``, and a whole
    two-sequence forward equals stepping each sequence one observation at a time."""
    obs_space, prep = spaces_for(kind)
    torch.manual_seed(0)
    model = rb.ModelCatalog.get_model_v2(obs_space, gym.spaces.Discrete(2), 2, model_config)
    assert isinstance(model, wrapper_cls)
    obs_space.seed(0)
    raw = (
        [obs_space.sample() for _ in range(6)]
        if prep is None
        else [prep.observation_space.original_space.sample() for _ in range(6)]
    )
    obs = np.stack(raw) if prep is None else prep.transform_batch(raw)
    obs = torch.as_tensor(obs, dtype=torch.float32)
    lens = torch.tensor([3, 3])
    with torch.no_grad():
        state = [s[None].expand(2, *s.shape).contiguous() for s in model.get_initial_state()]
        out, new_state = model({"obs": obs}, state, lens)
        assert out.shape == (6, 2) and model.value_function().shape == (6,)
        steps = []
        for b in range(2):
            st = [s[b : b + 1] for s in state]
            for t in range(3):
                o, st = model({"obs": obs[3 * b + t : 3 * b + t + 1]}, st, torch.tensor([1]))
                steps.append(o[0])
            for s_seq, s_step in zip(new_state, st, strict=True):
                torch.testing.assert_close(s_seq[b : b + 1], s_step, atol=1e-5, rtol=0)
        torch.testing.assert_close(out, torch.stack(steps), atol=1e-5, rtol=0)
