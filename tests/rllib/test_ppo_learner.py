"""``RLBlocksPPOTorchLearner`` makes RLlib's ``PPOTorchLearner``'s update.

Both learners start from the same weights and take the same episodes (sampled by
:class:`VectorEnvRunner`) with the same ``np.random`` state (the minibatch shuffles): the
weights after two updates (the second from moved weights and Adam moments) and the logged
loss terms must agree up to float rounding (the closed form and fused Adam round
differently from autograd).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("ray")

import rlblocks.envs  # noqa: E402,F401  (registers the zoo)
from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner  # noqa: E402
from rlblocks.rllib import (  # noqa: E402
    RLBlocksPPOTorchLearner,
    VectorEnvRunner,
    env_to_module,
    rl_module_spec,
)
from rlblocks.rllib.learner import minibatch_rows  # noqa: E402

pytestmark = pytest.mark.native


def _config(env: str, model: dict[str, Any], **training: Any) -> Any:
    model = {"fcnet_hiddens": [16, 16], "vf_share_layers": False, **model}
    return (
        PPOConfig()
        .environment(env)
        .rl_module(rl_module_spec=rl_module_spec(model))
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=4,
            env_to_module_connector=env_to_module(model),
            env_runner_cls=VectorEnvRunner,
        )
        .training(**{"train_batch_size": 256, "minibatch_size": 48, "num_epochs": 3, **training})
        .learners(num_learners=0)
        .debugging(seed=0)
    )


def _learners(config: Any, runner: Any) -> tuple[Any, Any]:
    built = []
    for cls in (PPOTorchLearner, RLBlocksPPOTorchLearner):
        config.learners(learner_class=cls)
        learner = config.build_learner(spaces=runner.get_spaces())
        learner.set_state({"rl_module": runner.get_state()["rl_module"]})
        built.append(learner)
    ref, ours = built
    module = ours.module["default_policy"]
    assert ours._closed_form("default_policy") is not None, type(module)
    return ref, ours


def _update(learner: Any, episodes: list[Any], config: Any) -> dict[str, Any]:
    np.random.seed(7)  # noqa: NPY002  (RLlib shuffles with the global RNG)
    return learner.update(
        episodes=copy.deepcopy(episodes),  # RLlib's learner connector extends them in place
        timesteps={"num_env_steps_sampled_lifetime": 256},
        num_epochs=config.num_epochs,
        minibatch_size=config.minibatch_size,
        shuffle_batch_per_epoch=True,
    )


CASES = {
    "categorical_kl_clip": ("CartPole-v1", {}, {"grad_clip": 0.5, "entropy_coeff": 0.01}),
    "nested_dict_no_kl": ("rlblocks/zoo-Dict-v0", {}, {"use_kl_loss": False}),
    "gaussian_vf_clip": (
        "rlblocks/zoo-BoxAction-v0",
        {},
        {"vf_clip_param": 0.05, "entropy_coeff": 0.003, "kl_coeff": 0.3},
    ),
    "shared_layers_free_log_std": (
        "rlblocks/zoo-BoxAction-v0",
        {"vf_share_layers": True, "free_log_std": True},
        {},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_update_as_rllibs_learner(case: str) -> None:
    env, model, training = CASES[case]
    config = _config(env, model, **training)
    runner = VectorEnvRunner(config=config)
    torch.manual_seed(0)
    episodes = runner.sample(num_timesteps=256)
    ref, ours = _learners(config, runner)
    for _ in range(2):  # twice: the second update starts from moved weights and moments
        r_ref = _update(ref, episodes, config)
        r_ours = _update(ours, episodes, config)
    a = ref.module["default_policy"].state_dict()
    b = ours.module["default_policy"].state_dict()
    assert sorted(a) == sorted(b)
    moved = 0.0
    start = runner.module.state_dict()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=2e-4, atol=2e-5, msg=k)
        moved = max(moved, float((a[k] - start[k]).abs().max()))
    assert moved > 1e-3  # the update did something
    mid = r_ref["default_policy"]
    mine = r_ours["default_policy"]
    for key in (
        "policy_loss",
        "vf_loss",
        "vf_loss_unclipped",
        "entropy",
        "mean_kl_loss",
        "vf_explained_var",
        "total_loss",
        "num_module_steps_trained",
        "diff_num_grad_updates_vs_sampler_policy",
    ):
        assert key in mine, key
        assert float(mine[key].peek()) == pytest.approx(
            float(mid[key].peek()), rel=1e-3, abs=1e-5
        ), key
    if training.get("grad_clip"):
        norm = "gradients_default_optimizer_global_norm"
        assert float(mine[norm].peek()) == pytest.approx(float(mid[norm].peek()), rel=1e-3)


def test_minibatch_rows_match_rllibs_cyclic_iterator() -> None:
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
    from ray.rllib.utils.minibatch_utils import MiniBatchCyclicIterator

    for n, size, epochs, total in [(10, 3, 2, 0), (7, 7, 3, 0), (5, 8, 2, 0), (9, 4, 1, 5)]:
        batch = MultiAgentBatch({"p": SampleBatch({"i": np.arange(n)})}, n)
        np.random.seed(3)  # noqa: NPY002
        theirs = [
            mb.policy_batches["p"]["i"].tolist()
            for mb in MiniBatchCyclicIterator(
                batch,
                num_epochs=epochs,
                minibatch_size=size,
                shuffle_batch_per_epoch=True,
                num_total_minibatches=total,
            )
        ]
        np.random.seed(3)  # noqa: NPY002
        ours = [r.tolist() for r in minibatch_rows(n, size, epochs, True, total)]
        assert ours == theirs, (n, size, epochs, total)


def test_what_the_closed_form_does_not_cover_runs_rllibs_update() -> None:
    config = _config("CartPole-v1", {"use_lstm": True, "lstm_cell_size": 8}, num_epochs=1)
    runner = VectorEnvRunner(config=config)
    episodes = runner.sample(num_timesteps=64)
    config.learners(learner_class=RLBlocksPPOTorchLearner)
    learner = config.build_learner(spaces=runner.get_spaces())
    assert learner._closed_form("default_policy") is None
    result = learner.update(
        episodes=episodes, timesteps={"num_env_steps_sampled_lifetime": 64}, num_epochs=1
    )
    assert np.isfinite(float(result["default_policy"]["total_loss"].peek()))


def test_plain_adam_is_rebuilt_fused_with_the_same_steps():
    """``fused_adam_like``: a plain Adam becomes the fused kernel with the same
    hyperparameters (the same parameters after a few steps, up to rounding); other
    optimizers and Adam variants stay as they are."""
    from rlblocks.rllib.learner import fused_adam_like

    torch.manual_seed(0)
    a = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(3))]
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    plain = torch.optim.Adam(a, lr=3e-3, eps=1e-7)
    fused = fused_adam_like(torch.optim.Adam(b, lr=3e-3, eps=1e-7))
    assert fused.param_groups[0]["fused"] or fused.param_groups[0]["foreach"]
    assert fused.param_groups[0]["eps"] == 1e-7 and fused.param_groups[0]["lr"] == 3e-3
    for _ in range(5):
        grads = [torch.randn_like(p) for p in a]
        for params, opt in ((a, plain), (b, fused)):
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
            opt.step()
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)
    sgd = torch.optim.SGD(a, lr=0.1)
    assert fused_adam_like(sgd) is sgd
    ams = torch.optim.Adam(a, amsgrad=True)
    assert fused_adam_like(ams) is ams


def test_polyak_average_is_rllibs_target_update_bit_for_bit():
    """``FastTargetUpdates``' averager: the same tensors as RLlib's ``update_target_network``
    (float parameters and buffers, and an integer buffer), for several ``tau``, built once
    while the main network keeps changing in place (as the optimizer changes it)."""
    import copy

    from ray.rllib.utils.torch_utils import update_target_network
    from rlblocks.train.fast.polyak import PolyakUpdate

    torch.manual_seed(1)
    layers = torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2)
    main = torch.nn.Sequential(*layers)
    main(torch.randn(16, 4))  # running statistics and the integer batch counter move
    target = copy.deepcopy(main)
    with torch.no_grad():
        for t in target.state_dict().values():
            floats = t.is_floating_point()
            t.copy_(torch.randn_like(t) if floats else torch.randint(0, 9, t.shape))
    reference = copy.deepcopy(target)
    average = PolyakUpdate.of_state_dict(main, target)
    for tau in (0.005, 0.3, 1.0):
        main(torch.randn(16, 4))
        with torch.no_grad():
            for p in main.parameters():
                p.add_(torch.randn_like(p))
        update_target_network(main_net=main, target_net=reference, tau=tau)
        average(tau)
        for (key, want), got in zip(
            reference.state_dict().items(), target.state_dict().values(), strict=True
        ):
            assert want.dtype == got.dtype and torch.equal(want, got), (tau, key)
    with pytest.raises(ValueError, match="different keys"):
        PolyakUpdate.of_state_dict(main, torch.nn.Linear(4, 8))
