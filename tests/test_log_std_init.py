"""``log_std_init`` (the free log-std's start) and the ``"torch_default"`` initializer
(SB3's ``ortho_init=False``): the torch model, the numpy acting path and the closed-form
PPO update start from the same std, and the key is refused where nothing would read it."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks.catalog import ModelCatalog
from rlblocks.config import ModelConfig
from rlblocks.models.misc import SlimFC, get_initializer, torch_default_initializer
from rlblocks.train.actor import ActorInput
from rlblocks.train.fast import FCActor, FCBackprop
from rlblocks.train.learners.ppo import PPOLearner
from rlblocks.train.policy import Policy
from rlblocks.train.trainer_config import PPOConfig
from test_fc_backprop import synthetic_batch, twin_updates

OBS = gym.spaces.Box(-2.0, 2.0, (5,), np.float32)
BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ZOO_MODEL = {
    "fcnet_hiddens": [16, 16],
    "fcnet_activation": "relu",
    "free_log_std": True,
    "log_std_init": -2.0,
    "fcnet_weights_initializer": "torch_default",
    "logits_weights_initializer": "torch_default",
    "vf_weights_initializer": "torch_default",
}


def test_the_initial_std_is_exp_log_std_init_on_torch_numpy_and_closed_form_paths():
    """Built with ``log_std_init=-2``: the torch distribution's std, the numpy actor's
    distribution inputs and the parameter the closed-form update differentiates all start at
    exp(-2) (today's default 0 gives std 1, so the key is read everywhere, not only in torch)."""
    cfg = PPOConfig.from_dict({"model": ZOO_MODEL})
    torch.manual_seed(0)
    pol = Policy(OBS, BOX, cfg)
    obs = np.random.default_rng(0).uniform(-2, 2, (32, 5)).astype(np.float32)
    with torch.no_grad():
        dist, _, _ = pol.forward(pol.input_dict(torch.from_numpy(obs)), [], None)
    torch.testing.assert_close(dist.std, torch.full((32, 3), math.exp(-2.0)))

    assert isinstance(pol.actor, FCActor) and pol.actor.numpy
    for actor in (pol.actor, pol.actor.fallback):  # the numpy path and its torch twin
        out = actor.act(ActorInput(obs, [], None, None), True, True)
        np.testing.assert_array_equal(out["dist_inputs"][:, 3:], np.full((32, 3), -2.0))

    learner = PPOLearner(pol, cfg)
    assert isinstance(learner._backprop, FCBackprop)
    assert learner._backprop.free_log_std is pol.model._append_free_log_std.log_std
    np.testing.assert_array_equal(learner._backprop.free_log_std.detach().numpy(), [-2.0] * 3)


def test_a_zoo_model_acts_the_same_on_the_numpy_and_torch_paths():
    """torch-default hidden and head layers (non-zero biases) with a free log-std of -2:
    same seed, same actions, log-probs and values on either acting path."""
    torch.manual_seed(3)
    pol = Policy(OBS, BOX, PPOConfig.from_dict({"model": ZOO_MODEL}))
    assert isinstance(pol.actor, FCActor) and pol.actor.numpy
    obs = np.random.default_rng(1).uniform(-2, 2, (64, 5)).astype(np.float32)
    outs = []
    for actor in (pol.actor, pol.actor.fallback):
        torch.manual_seed(7)
        outs.append(actor.act(ActorInput(obs, [], None, None), True, True))
    fast, ref = outs
    for key in ("actions", "logp", "vf_preds", "dist_inputs"):
        np.testing.assert_allclose(fast[key], ref[key], rtol=1e-5, atol=1e-5, err_msg=key)


def test_a_zoo_model_updates_the_same_on_the_closed_form_and_autograd_paths():
    """Two PPO updates of a ``log_std_init=-2``, torch-default model: the closed-form
    gradients (FCBackprop) and autograd end with the same parameters, log-std included."""
    twin_updates(
        BOX,
        ZOO_MODEL,
        lambda pol, r: synthetic_batch(pol, 16, 4, 200 + r),
        rounds=2,
        lr=5e-3,
        train_batch_size=64,
        sgd_minibatch_size=32,
        num_sgd_iter=2,
        entropy_coeff=0.01,
    )


@pytest.mark.parametrize(
    "space, model, words",
    [
        (BOX, {"log_std_init": -1.0}, "needs free_log_std=True"),
        (gym.spaces.Discrete(4), {"free_log_std": True, "log_std_init": -1.0}, "must be a Box"),
        (
            BOX,
            {"free_log_std": True, "log_std_init": -1.0, "use_lstm": True},
            "use_lstm / use_attention wrapper",
        ),
        (BOX, {"free_log_std": True, "log_std_init": -21.0}, "in [-20, 20]"),
        (BOX, {"log_std_init": "low"}, "log_std_init must be a number, got 'low'"),
    ],
    ids=["no-free-log-std", "discrete", "lstm", "beyond-the-clamp", "not-a-number"],
)
def test_log_std_init_is_refused_where_nothing_would_read_it(space, model, words):
    """A one-line ValueError naming the key, not a silently ignored start."""
    with pytest.raises(ValueError, match="log_std_init") as err:
        ModelCatalog.get_model_v2(OBS, space, 6 if space is BOX else 4, model)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_log_std_init_zero_is_todays_behaviour_everywhere():
    """The default (0.0) changes nothing: the free log-std starts at 0 and a model without
    one, an LSTM, or a discrete head builds as before."""
    assert ModelConfig.from_dict({}).log_std_init == 0.0
    m = ModelCatalog.get_model_v2(OBS, BOX, 6, {"free_log_std": True})
    assert m._append_free_log_std.log_std.tolist() == [0.0, 0.0, 0.0]
    ModelCatalog.get_model_v2(OBS, gym.spaces.Discrete(2), 2, {"use_lstm": True})


def test_torch_default_is_torchs_own_linear_start():
    """Under one seed, a SlimFC with ``"torch_default"`` weights (and no bias initializer)
    equals a plain ``nn.Linear``: torch's kaiming-uniform weight and its uniform bias."""
    torch.manual_seed(4)
    want = torch.nn.Linear(9, 4)
    torch.manual_seed(4)
    got = SlimFC(9, 4, get_initializer("torch_default"), bias_init=None)._model[0]
    torch.testing.assert_close(got.weight, want.weight, rtol=0, atol=0)
    torch.testing.assert_close(got.bias, want.bias, rtol=0, atol=0)
    assert get_initializer("Torch_Default_") is torch_default_initializer
    with pytest.raises(ValueError, match="'torch_default' takes no arguments"):
        get_initializer("torch_default", {"gain": 2.0})


def test_torch_default_weights_give_the_fcnet_torchs_biases():
    """In the default model, ``"torch_default"`` weights with no bias initializer keep
    torch's non-zero biases (SB3's ``ortho_init=False``); other weights keep RLlib's zeros."""
    m = ModelCatalog.get_model_v2(OBS, BOX, 6, {**ZOO_MODEL, "vf_share_layers": False})
    biases = [
        m._hidden_layers[0]._model[0].bias,
        m._logits._model[0].bias,
        m._value_branch._model[0].bias,
        m._value_branch_separate[1]._model[0].bias,
    ]
    for b in biases:
        assert float(b.detach().abs().min()) > 0 and float(b.detach().abs().max()) <= 1 / math.sqrt(
            5
        )
    plain = ModelCatalog.get_model_v2(OBS, BOX, 6, {"fcnet_weights_initializer": "orthogonal"})
    assert float(plain._hidden_layers[0]._model[0].bias.detach().abs().max()) == 0.0
