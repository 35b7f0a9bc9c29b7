"""The union model of agents whose spaces differ (an action-mask model around a
ComplexInputNetwork with one FC encoder over the ``OneOf`` block) takes the closed-form PPO
update and the numpy actor, with autograd's gradients and the module's outputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Discrete, OneOf, Tuple
from rlblocks.catalog import ModelCatalog
from rlblocks.models.complex_input import ComplexInputNetwork
from rlblocks.multiagent.union import UnionSpec
from rlblocks.train.fast import FCActor, FCBackprop
from rlblocks.train.fast.dense_layers import FCLayers
from test_fc_backprop import STAT_NAMES, assert_grads_close, both_paths, make
from test_fc_backprop_heads import make_minibatch_on

#: Two agent types: other observation shapes, other action counts (so a mask).
OBS_SPACES = {"pred": Box(-1, 1, (3, 2), np.float32), "prey": Box(-1, 1, (5,), np.float32)}
SPEC = UnionSpec.build(OBS_SPACES, {"pred": Discrete(3), "prey": Discrete(5)})
PREP = ModelCatalog.get_preprocessor_for_space(SPEC.observation_space)


def union_rows(n: int, seed: int) -> torch.Tensor:
    """``n`` preprocessed union observations, the agent types mixed."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        agent = "pred" if i % 3 else "prey"
        space = OBS_SPACES[agent]
        value = rng.uniform(-1, 1, space.shape).astype(np.float32)
        rows.append(PREP.transform(SPEC.value(agent, value)))
    return torch.from_numpy(np.stack(rows))


MODELS = {
    "separate": {"fcnet_hiddens": [8, 6]},
    "shared": {"fcnet_hiddens": [8], "vf_share_layers": True},
    "post-fc": {"fcnet_hiddens": [8], "post_fcnet_hiddens": [4], "fcnet_activation": "relu"},
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_union_update_matches_autograd(name):
    """The closed form covers the union model (it declined it: autograd ran) and gives
    every parameter autograd's gradient and the same statistics."""
    cfg, pol, learner = make(SPEC.action_space, MODELS[name], 3, PREP.observation_space)
    assert isinstance(pol.model.inner, ComplexInputNetwork)
    assert learner._backprop is not None, FCBackprop.choose(pol.model, pol.dist_class, cfg)
    data = make_minibatch_on(pol, cfg, union_rows(23, 1), 23)
    res = both_paths(learner, data, True)
    (fast_g, fast_s), (auto_g, auto_s) = res[True], res[False]
    assert_grads_close(fast_g, auto_g, f"{name}: fast vs autograd")
    assert sum(float(g.abs().sum()) for g in fast_g) > 0.0
    for stat, a, b in zip(STAT_NAMES, fast_s, auto_s, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m, s=stat: f"{s}: {m}")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_union_actor_is_numpy_and_matches_the_module(name):
    """Acting goes through the numpy layers, which give the module's logits and values."""
    cfg, pol, _ = make(SPEC.action_space, MODELS[name], 4, PREP.observation_space)
    assert isinstance(pol.actor, FCActor) and pol.actor.numpy, getattr(pol.actor, "declined", "")
    obs = union_rows(7, 2)
    layers = FCLayers.from_model(pol.model.inner, complex_input=True)
    assert layers is not None
    inner_obs = obs[:, pol.model.obs_columns]
    out, values = layers.infer(inner_obs)
    with torch.no_grad():
        ref, _ = pol.model.inner({"obs": inner_obs})
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(values, pol.model.inner.value_function())
    legal = np.stack([PREP.transform(SPEC.value("pred", np.zeros((3, 2), np.float32)))] * 50)
    taken = pol.act(legal.astype(np.float32), [])["actions"]
    assert set(np.asarray(taken).tolist()) <= {0, 1, 2}  # pred's mask: 3 of the 5 actions


def test_a_complex_input_of_two_components_still_declines():
    """Two encoders concatenated are not one FC network: autograd, the reason named."""
    space = Tuple((OneOf([Box(-1, 1, (3,), np.float32), Box(-1, 1, (2,))]), Discrete(4)))
    prep = ModelCatalog.get_preprocessor_for_space(space)
    cfg, pol, learner = make(Discrete(2), {"fcnet_hiddens": [8]}, 0, prep.observation_space)
    assert isinstance(pol.model, ComplexInputNetwork) and pol.model.dense_layers() is None
    assert learner._backprop is None
    assert FCBackprop.choose(pol.model, pol.dist_class, cfg) == "a ComplexInputNetwork model"
    assert not isinstance(pol.actor, FCActor)
