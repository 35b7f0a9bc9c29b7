"""rlblocks' Q heads inside RLlib's DQN and SAC: the modules against the rlblocks heads and
closed-form maths, RLlib's target sync, masks, and (bounded) learning runs.

Learning tests stop as soon as their target is reached and fail when the budget runs out;
wall times are printed, never asserted.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest

ray = pytest.importorskip("ray")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from gymnasium.spaces import Box, Dict, Discrete  # noqa: E402
from ray.rllib.algorithms.dqn import DQNConfig  # noqa: E402
from ray.rllib.core.columns import Columns  # noqa: E402
from rlblocks.config import ModelConfig  # noqa: E402
from rlblocks.models.fcnet import FullyConnectedNetwork  # noqa: E402
from rlblocks.models.heads import DuelingQModel  # noqa: E402
from rlblocks.rllib import (  # noqa: E402
    FlattenObservationsBatched,
    RLBlocksDQN,
    RLBlocksDQNRLModule,
    RLBlocksDQNTorchLearner,
    RLBlocksSACRLModule,
    VectorEnvRunner,
    env_to_module,
    rl_module_spec,
)
from rlblocks.rllib.qlearning import (  # noqa: E402
    QF_LOGITS,
    QF_NEXT_PREDS,
    QF_PREDS,
    QF_PROBS,
    QF_TARGET_NEXT_PREDS,
)
from rlblocks.spaces import Repeated  # noqa: E402
from test_training import MaskedPick  # noqa: E402

MODEL = {"fcnet_hiddens": [32, 32], "fcnet_activation": "relu"}
OBS = Box(-1.0, 1.0, (5,), np.float32)


pytestmark = pytest.mark.usefixtures("local_ray")  # tests/conftest.py
# the MaskedPick env's module travels to Ray's workers by value too
ray.cloudpickle.register_pickle_by_value(sys.modules[MaskedPick.__module__])


def build(
    algo: str,
    obs_space: gym.Space,
    action_space: gym.Space,
    model: dict | None = None,
    **algo_keys: Any,
) -> Any:
    """A learner-side module (with target networks), as RLlib builds it."""
    spec = rl_module_spec(model or MODEL, algo=algo)
    spec.observation_space, spec.action_space = obs_space, action_space
    spec.model_config = {**spec.model_config, **algo_keys}
    module = spec.build()
    module.make_target_networks()
    return module


def obs_batch(n: int = 64, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).uniform(-1, 1, (n, 5)).astype(np.float32))


# --- DQN module ------------------------------------------------------------------------------
def test_dueling_q_values_equal_the_rlblocks_head_and_closed_form():
    module = build("DQN", OBS, Discrete(4), dueling=True)
    assert isinstance(module, RLBlocksDQNRLModule)
    obs = obs_batch()
    q = module.compute_q_values({Columns.OBS: obs})[QF_PREDS]
    # an independently built rlblocks DuelingQModel with the module's weights
    cfg = ModelConfig.from_dict({**MODEL, "vf_share_layers": True})
    base = FullyConnectedNetwork(OBS, Discrete(4), None, cfg, "base")
    head = DuelingQModel(OBS, Discrete(4), 4, cfg, "q", base_model=base)
    head.load_state_dict(module.q_model.state_dict())
    features, _ = head({"obs": obs})
    torch.testing.assert_close(q, head.get_q_values(features), rtol=0, atol=1e-6)
    # closed form: V + A - mean(A) from the two head layers
    a, v = head.A(features), head.V(features)
    torch.testing.assert_close(q, v + a - a.mean(1, keepdim=True), rtol=0, atol=1e-6)


def test_dqn_module_computes_what_rllibs_default_module_computes():
    """Same layers (64-64 ReLU encoder, linear dueling heads), RLlib's weights copied in: the
    outputs RLlib's DQN learner reads are equal."""
    from ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module import (
        DefaultDQNTorchRLModule,
    )
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    keys = {"dueling": True, "double_q": True, "num_atoms": 1, "epsilon": 0.1}
    theirs = RLModuleSpec(
        module_class=DefaultDQNTorchRLModule,
        observation_space=OBS,
        action_space=Discrete(3),
        model_config={
            **DQNConfig().model_config,
            "fcnet_hiddens": [64, 64],
            "fcnet_activation": "relu",
            "head_fcnet_hiddens": [],
            **keys,
        },
    ).build()
    ours = build(
        "DQN", OBS, Discrete(3), {"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"}, **keys
    )
    src = theirs.state_dict()
    names = {
        "base_model._hidden_layers.0._model.0": "encoder.net.mlp.0",
        "base_model._hidden_layers.1._model.0": "encoder.net.mlp.2",
        "A._model.0": "af.net.mlp.0",
        "V._model.0": "vf.net.mlp.0",
    }
    state = {
        f"{ours_name}.{p}": src[f"{theirs_name}.{p}"].clone()
        for ours_name, theirs_name in names.items()
        for p in ("weight", "bias")
    }
    ours.q_model.load_state_dict(state, strict=False)
    theirs.make_target_networks()
    ours.make_target_networks()
    batch = {Columns.OBS: obs_batch(seed=6), Columns.NEXT_OBS: obs_batch(seed=7)}
    expected, got = theirs.forward_train(batch), ours.forward_train(batch)
    assert set(expected) == set(got)
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=0, atol=1e-6)


def test_plain_q_head_is_the_catalog_model():
    module = build("DQN", OBS, Discrete(3), dueling=False)
    obs = obs_batch()
    out, _ = module.q_model({"obs": obs})
    assert out.shape == (64, 3)
    torch.testing.assert_close(module.compute_q_values({Columns.OBS: obs})[QF_PREDS], out)


@pytest.mark.parametrize("dueling", [True, False])
def test_distributional_q_is_the_expectation_over_the_support(dueling):
    module = build("DQN", OBS, Discrete(3), dueling=dueling, num_atoms=7, v_min=-2.0, v_max=5.0)
    out = module.compute_q_values({Columns.OBS: obs_batch()})
    probs, logits = out[QF_PROBS], out[QF_LOGITS]
    assert logits.shape == probs.shape == (64, 3, 7)
    torch.testing.assert_close(probs.sum(-1), torch.ones(64, 3))
    support = torch.linspace(-2.0, 5.0, 7)
    torch.testing.assert_close(out[QF_PREDS], (probs * support).sum(-1))
    if dueling:  # advantages centred over actions, per atom: the mean logit is V's
        features, _ = module.q_model({"obs": obs_batch()})
        torch.testing.assert_close(logits.mean(1), module.q_model.V(features), rtol=0, atol=1e-5)


def test_train_forward_double_q_and_target_outputs():
    module = build("DQN", OBS, Discrete(4), double_q=True)
    obs, nxt = obs_batch(seed=1), obs_batch(seed=2)
    out = module.forward_train({Columns.OBS: obs, Columns.NEXT_OBS: nxt})
    torch.testing.assert_close(out[QF_PREDS], module.compute_q_values({Columns.OBS: obs})[QF_PREDS])
    torch.testing.assert_close(
        out[QF_NEXT_PREDS], module.compute_q_values({Columns.OBS: nxt})[QF_PREDS]
    )
    torch.testing.assert_close(
        out[QF_TARGET_NEXT_PREDS], module.forward_target({Columns.OBS: nxt})[QF_PREDS]
    )
    # the target network is a copy: changing the online net leaves it alone
    before = module.forward_target({Columns.OBS: nxt})[QF_PREDS].clone()
    with torch.no_grad():
        for p in module.q_model.parameters():
            p.add_(0.1)
    torch.testing.assert_close(module.forward_target({Columns.OBS: nxt})[QF_PREDS], before)
    assert not torch.allclose(module.compute_q_values({Columns.OBS: nxt})[QF_PREDS], before)
    assert all(not p.requires_grad for p in module.target_q_model.parameters())


def test_masked_actions_are_never_chosen_explored_or_bootstrapped():
    space = Dict({"action_mask": Box(0, 1, (5,), np.int8), "observations": OBS})
    module = build("DQN", space, Discrete(5), epsilon=1.0)  # always explore
    rng = np.random.default_rng(0)
    mask = (rng.random((500, 5)) < 0.4).astype(np.int8)
    mask[np.arange(500), rng.integers(0, 5, 500)] = 1
    batch = {Columns.OBS: {"observations": obs_batch(500), "action_mask": torch.from_numpy(mask)}}
    for forward in (module.forward_exploration, module.forward_inference):
        actions = forward(batch)[Columns.ACTIONS].numpy()
        assert mask[np.arange(500), actions].all()
    explored = module.forward_exploration(batch)[Columns.ACTIONS].numpy()
    assert len(np.unique(explored)) == 5  # uniform among the allowed ones
    q = module.compute_q_values(batch)[QF_PREDS]
    assert torch.isneginf(q[torch.from_numpy(mask) == 0]).all()
    assert torch.isfinite(q[torch.from_numpy(mask) == 1]).all()


def test_image_and_nested_observations_build_their_catalog_encoders():
    image = Box(0, 255, (42, 42, 4), np.uint8)
    frames = torch.randint(0, 255, (3, 42, 42, 4), dtype=torch.uint8)
    conv = {"conv_filters": [[8, [4, 4], 2], [16, [3, 3], 2], [32, [11, 11], 1]]}
    dqn_module = build("DQN", image, Discrete(6), conv)
    assert type(dqn_module.q_model.base_model).__name__ == "VisionNetwork"
    assert dqn_module.compute_q_values({Columns.OBS: frames})[QF_PREDS].shape == (3, 6)
    sac_module = build("SAC", image, Box(-1, 1, (2,)), conv)
    batch = {Columns.OBS: frames, Columns.ACTIONS: torch.zeros(3, 2)}
    assert sac_module.compute_q_values(batch).shape == (3,)
    # a nested Dict with a Repeated list, flattened by the C++ connector
    nested = Dict(
        {"a": Box(-1, 1, (3,)), "b": Repeated(Dict({"c": Discrete(3), "d": Box(-1, 1, (2,))}), 4)}
    )
    piece = FlattenObservationsBatched(nested, Discrete(2), model_config={})
    module = build("DQN", piece.observation_space, Discrete(2))
    rows = np.stack([piece.preprocessor.transform(nested.sample()) for _ in range(7)])
    assert module.compute_q_values({Columns.OBS: torch.from_numpy(rows)})[QF_PREDS].shape == (7, 2)


def test_recurrent_models_and_bad_spaces_are_refused():
    with pytest.raises(ValueError, match="recurrent"):
        build("DQN", OBS, Discrete(2), {"use_lstm": True})
    with pytest.raises(ValueError, match="Discrete action space"):
        build("DQN", OBS, Box(-1, 1, (2,)))
    with pytest.raises(ValueError, match="finite"):
        build("SAC", OBS, Box(-np.inf, np.inf, (2,)))
    with pytest.raises(ValueError, match="algo must be one of"):
        rl_module_spec(MODEL, algo="DDPG")


# --- SAC module ------------------------------------------------------------------------------
def test_sac_critics_actor_and_squashed_samples():
    space = Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
    module = build("SAC", OBS, space, twin_q=True)
    assert isinstance(module, RLBlocksSACRLModule)
    obs = obs_batch()
    actions = torch.from_numpy(np.stack([space.sample() for _ in range(64)]))
    q1 = module._critic_q(module.qf, obs, actions)
    q2 = module._critic_q(module.qf_twin, obs, actions)
    assert q1.shape == (64,) and not torch.allclose(q1, q2)  # independent critics
    batch = {Columns.OBS: obs, Columns.ACTIONS: actions}
    torch.testing.assert_close(module.compute_q_values(batch), torch.min(q1, q2))
    # the critic is Q(features(obs), action) of rlblocks' ContinuousActionQModel
    features, _ = module.qf({"obs": obs})
    torch.testing.assert_close(q1, module.qf.get_single_q_value(features, actions).squeeze(-1))

    logits = module.forward_exploration({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    dist = module.get_train_action_dist_cls().from_logits(logits)
    sample, logp = dist.rsample_and_logp()
    # [-1, 1], as RLlib's own SAC module: the env runner unsquashes to the Box bounds
    assert (sample.abs() <= 1.0).all()
    inside = (1.0 - sample.abs()).min(-1).values > 1e-3
    torch.testing.assert_close(logp[inside], dist.logp(sample)[inside], rtol=1e-4, atol=1e-4)
    logp.sum().backward()
    # every actor weight but the (unused) value branch of the catalog model gets a gradient
    assert all(
        p.grad is not None for n, p in module.pi.named_parameters() if "_value_branch" not in n
    )


def test_sac_train_forward_keeps_the_actor_loss_off_the_critics():
    module = build("SAC", OBS, Box(-1, 1, (2,)), twin_q=True)
    batch = {
        Columns.OBS: obs_batch(seed=3),
        Columns.NEXT_OBS: obs_batch(seed=4),
        Columns.ACTIONS: torch.zeros(64, 2),
    }
    out = module.forward_train(batch)
    assert out["q_curr"].shape == out["logp_resampled"].shape == (64,)
    assert not out["q_target_next"].requires_grad
    out["q_curr"].sum().backward()
    assert all(p.grad is None for p in module.qf.parameters())
    assert any(p.grad is not None for p in module.pi.parameters())
    assert all(p.requires_grad for p in module.qf.parameters())  # restored after the pass


@pytest.mark.parametrize("space", [Box(-1, 1, (2,)), Discrete(3)], ids=["box", "discrete"])
def test_sac_plain_tensor_pass_equals_calling_the_modules(space):
    """The SAC module runs the catalog's FC networks as plain tensors (no ``nn.Module``
    calls); with a hook set it calls the modules. Both give the same outputs and
    gradients, and the same random draws."""
    module = build("SAC", OBS, space, twin_q=True)
    actions = torch.from_numpy(np.stack([space.sample() for _ in range(64)]))
    batch = {Columns.OBS: obs_batch(seed=3), Columns.NEXT_OBS: obs_batch(seed=4)}
    batch[Columns.ACTIONS] = actions

    def run() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        module.zero_grad(set_to_none=True)
        torch.manual_seed(7)
        out = module.forward_train(batch)
        sum(v.sum() for v in out.values() if torch.is_tensor(v) and v.requires_grad).backward()
        grads = {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
        return {k: v.detach().clone() for k, v in out.items() if torch.is_tensor(v)}, grads

    networks = [module.pi, module.qf, module.qf_twin, module.target_qf, module.target_qf_twin]
    assert module._plain(module.pi) is not None
    plain_out, plain_grads = run()
    hooks = [net.register_forward_hook(lambda *args: None) for net in networks]
    try:
        assert module._plain(module.pi) is None
        module_out, module_grads = run()
    finally:
        for hook in hooks:
            hook.remove()
    assert sorted(plain_out) == sorted(module_out) and sorted(plain_grads) == sorted(module_grads)
    assert any("qf" in name for name in plain_grads) and any("pi" in n for n in plain_grads)
    for key in plain_out:
        torch.testing.assert_close(plain_out[key], module_out[key], rtol=1e-6, atol=1e-6)
    for name in plain_grads:
        torch.testing.assert_close(plain_grads[name], module_grads[name], rtol=1e-5, atol=1e-6)


def test_discrete_sac_outputs():
    module = build("SAC", OBS, Discrete(3), twin_q=True)
    out = module.forward_train(
        {
            Columns.OBS: obs_batch(),
            Columns.NEXT_OBS: obs_batch(seed=5),
            Columns.ACTIONS: torch.zeros(64, dtype=torch.int64),
        }
    )
    for key in ("qf_preds", "qf_twin_preds", "q_target_next", "action_probs"):
        assert out[key].shape == (64, 3), key
    torch.testing.assert_close(out["action_probs"].sum(-1), torch.ones(64))


# --- inside RLlib -------------------------------------------------------------------------------
def dqn(
    env: Any,
    model: dict,
    *,
    envs: int = 1,
    lr: float = 1e-3,
    batch: int = 64,
    gamma: float = 0.99,
    **training: Any,
) -> DQNConfig:
    train = dict(
        lr=lr,
        gamma=gamma,
        train_batch_size_per_learner=batch,
        n_step=3,
        target_network_update_freq=500,
        epsilon=[(0, 1.0), (5000, 0.02)],
        replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": 50000},
        num_steps_sampled_before_learning_starts=1000,
    )
    train.update(training)
    # the stack of ``rlblocks train --backend rllib --algo DQN``
    return (
        DQNConfig(algo_class=RLBlocksDQN)
        .environment(env)
        .rl_module(rl_module_spec=rl_module_spec(model, algo="DQN"))
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=envs,
            rollout_fragment_length=4,
            env_to_module_connector=env_to_module(model),
            env_runner_cls=VectorEnvRunner,
        )
        .learners(num_learners=0, learner_class=RLBlocksDQNTorchLearner)
        .training(**train)
        .reporting(min_time_s_per_iteration=0)
        .debugging(seed=0)
    )


def learner_module(algo: Any) -> Any:
    return algo.learner_group._learner.module["default_policy"]


def test_rllib_target_sync_copies_exactly():
    synced = dqn(
        "CartPole-v1",
        MODEL,
        target_network_update_freq=1,
        tau=1.0,
        num_steps_sampled_before_learning_starts=64,
    ).build_algo()
    frozen = dqn(
        "CartPole-v1",
        MODEL,
        target_network_update_freq=10**9,
        tau=1.0,
        num_steps_sampled_before_learning_starts=64,
    ).build_algo()
    try:
        for algo, equal in ((synced, True), (frozen, False)):
            algo.train()
            module = learner_module(algo)
            pairs = list(
                zip(
                    module.q_model.state_dict().values(),
                    module.target_q_model.state_dict().values(),
                    strict=True,
                )
            )
            assert all(torch.equal(a, b) for a, b in pairs) is equal
    finally:
        synced.stop()
        frozen.stop()


def train_until(config: Any, target: float, max_seconds: float) -> tuple[float, int, float]:
    """(best mean return, env steps, seconds): trains until ``target`` or the time budget."""
    algo = config.build_algo()
    start, best, steps = time.perf_counter(), -np.inf, 0
    try:
        while time.perf_counter() - start < max_seconds:
            runners = algo.train()["env_runners"]
            ret = runners.get("episode_return_mean")
            steps = int(runners.get("num_env_steps_sampled_lifetime", steps))
            if ret is not None and np.isfinite(ret):
                best = max(best, float(ret))
            if best >= target:
                break
        return best, steps, time.perf_counter() - start
    finally:
        algo.stop()


@pytest.mark.parametrize("atoms", [1, 51], ids=["expected", "distributional"])
def test_dqn_dueling_double_cartpole_reaches_150(atoms):
    model = {"fcnet_hiddens": [64, 64]}  # MODEL_DEFAULTS' tanh (steadier here than ReLU)
    config = dqn(
        "CartPole-v1", model, dueling=True, double_q=True, num_atoms=atoms, v_min=0.0, v_max=100.0
    )
    best, steps, secs = train_until(config, 150.0, max_seconds=240)
    print(
        f"\nDQN ({atoms} atoms) CartPole-v1: mean return {best:.1f} after {steps} steps, "
        f"{secs:.1f} s"
    )
    assert best >= 150.0


def test_dqn_learns_a_nested_dict_masked_env():
    # MaskedPick: nested Dict observation + action mask; random legal picks score ~6 of 20
    config = dqn(
        MaskedPick,
        {"fcnet_hiddens": [32]},
        gamma=0.5,
        epsilon=[(0, 1.0), (2000, 0.02)],
        num_steps_sampled_before_learning_starts=500,
    )
    best, steps, secs = train_until(config, 15.0, max_seconds=120)
    print(f"\nDQN MaskedPick: mean return {best:.1f} after {steps} steps, {secs:.1f} s")
    assert best >= 15.0


@pytest.mark.parametrize("twin_q", [True, False], ids=["twin", "single"])
def test_sac_closed_form_update_equals_rllibs_learner(twin_q):
    """``RLBlocksSACTorchLearner``'s closed-form update for rlblocks' FC SAC module: the
    same gradients (actor, critics, temperature), target updates, TD errors and metrics as
    RLlib's autograd update of the same learner from the same state and seed, for the
    first update and for a second one in a row (no gradient left by the first counts)."""
    from ray.rllib.algorithms.sac import SACConfig
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
    from rlblocks.rllib import RLBlocksSACTorchLearner

    config = (
        SACConfig()
        .environment("Pendulum-v1")
        .rl_module(rl_module_spec=rl_module_spec(MODEL, algo="SAC"))
        .training(twin_q=twin_q, tau=0.3, train_batch_size_per_learner=64, initial_alpha=0.5)
        .learners(num_learners=0, learner_class=RLBlocksSACTorchLearner)
        .debugging(seed=0)
    )
    learner = config.build_learner_group(env=gym.make("Pendulum-v1"))._learner
    module = learner.module[DEFAULT_MODULE_ID]
    rng = np.random.default_rng(0)
    n = 64
    columns = {
        "obs": rng.normal(size=(n, 3)).astype(np.float32),
        "new_obs": rng.normal(size=(n, 3)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (n, 1)).astype(np.float32),
        "rewards": rng.normal(size=n).astype(np.float32) * 5,  # Huber's both branches
        "terminateds": rng.random(n) < 0.2,
        "truncateds": np.zeros(n, bool),
        "n_step": rng.integers(1, 4, n),
        "weights": rng.uniform(0.2, 1.0, n).astype(np.float32),
    }
    start = learner.get_state()
    log_alpha = learner.curr_log_alpha[DEFAULT_MODULE_ID]
    start_log_alpha = log_alpha.detach().clone()  # not in the learner's state
    names = {
        ref: name
        for name, p in module.named_parameters()
        for ref, q in learner._params.items()
        if q is p
    }
    names[learner.get_param_ref(learner.curr_log_alpha[DEFAULT_MODULE_ID])] = "log_alpha"
    apply = learner.apply_gradients

    def update(seed: int) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, Any]]:
        grads: dict[str, Any] = {}

        def record(gradients: dict[Any, Any]) -> None:
            grads.update({names[r]: None if g is None else g.clone() for r, g in gradients.items()})
            apply(gradients)

        learner.apply_gradients = record
        torch.manual_seed(seed)
        batch = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(columns)}, env_steps=n)
        results = learner.update(batch=batch, timesteps={"num_env_steps_sampled_lifetime": 1})
        del learner.apply_gradients
        state = {k: v.detach().clone() for k, v in module.state_dict().items()}
        return grads, state, results[DEFAULT_MODULE_ID]

    def restore(state: Any, alpha: torch.Tensor) -> None:
        learner.set_state(state)
        with torch.no_grad():
            log_alpha.copy_(alpha)

    # the closed form twice in a row (the second update starts with the first one's
    # gradients set), then RLlib's autograd update from the same two starting points
    serves = {DEFAULT_MODULE_ID: {"weights": 0, "n_step": 0}}
    assert learner._closed_form(serves) is not None
    fast = [update(11)]
    middle, middle_log_alpha = learner.get_state(), log_alpha.detach().clone()
    fast.append(update(12))
    hook = module.pi.register_forward_hook(lambda *args: None)  # RLlib's autograd path
    try:
        assert learner._closed_form(serves) is None
        restore(start, start_log_alpha)
        ref = [update(11)]
        restore(middle, middle_log_alpha)
        ref.append(update(12))
    finally:
        hook.remove()
    for (fast_grads, fast_state, fast_metrics), (ref_grads, ref_state, ref_metrics) in zip(
        fast, ref, strict=True
    ):
        assert sorted(fast_grads) == sorted(ref_grads) and "log_alpha" in ref_grads
        for name, want in ref_grads.items():
            if want is None:  # the unused value branches
                assert fast_grads[name] is None, name
            else:
                torch.testing.assert_close(
                    fast_grads[name], want, rtol=1e-4, atol=1e-6, msg=lambda m, k=name: f"{k}: {m}"
                )
        assert any("qf_twin" in n for n in ref_grads) is twin_q
        for key, want in ref_state.items():  # after the optimizer steps and the target update
            torch.testing.assert_close(fast_state[key], want, rtol=1e-4, atol=1e-5, msg=key)
        assert sorted(fast_metrics) == sorted(ref_metrics)
        np.testing.assert_allclose(  # this update's TD errors: the series' last n
            np.asarray(fast_metrics["td_error"].peek()).reshape(-1)[-n:],
            np.asarray(ref_metrics["td_error"].peek()).reshape(-1)[-n:],
            rtol=1e-5,
        )
        keys = ["qf_loss", "policy_loss", "alpha_loss", "alpha_value", "qf_mean", "logps"]
        for key in [*keys, "qf_max", *(["qf_twin_loss"] if twin_q else [])]:
            np.testing.assert_allclose(
                float(fast_metrics[key].peek()),
                float(ref_metrics[key].peek()),
                rtol=1e-4,
                atol=1e-5,
            )


def test_an_lr_schedule_moves_every_sac_optimizer_on_rllib():
    """``lr_schedule`` on ``--backend rllib``: the actor's, the critics' and the
    temperature's optimizers each follow it through RLlib's schedulers, with
    ``RLBlocksSACTorchLearner``'s closed-form update (never a fixed rate, silently)."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
    from rlblocks.rllib.algo_config import build_algo_config
    from rlblocks.train.offpolicy_config import SACConfig as NativeSACConfig

    native = NativeSACConfig(
        env="Pendulum-v1",
        lr_schedule=[[0, 1e-3], [1000, 0.0]],
        model={"fcnet_hiddens": [16]},
        train_batch_size=16,
    )
    learner = (
        build_algo_config(native, "SAC").build_learner_group(env=gym.make("Pendulum-v1"))._learner
    )
    rng = np.random.default_rng(0)
    n = 16
    columns = {
        "obs": rng.normal(size=(n, 3)).astype(np.float32),
        "new_obs": rng.normal(size=(n, 3)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (n, 1)).astype(np.float32),
        "rewards": rng.normal(size=n).astype(np.float32),
        "terminateds": np.zeros(n, bool),
        "truncateds": np.zeros(n, bool),
        "n_step": np.ones(n, np.int64),
        "weights": np.ones(n, np.float32),
    }
    assert learner._closed_form({DEFAULT_MODULE_ID: {"weights": 0, "n_step": 0}}) is not None
    names = learner._module_optimizers[DEFAULT_MODULE_ID]
    assert len(names) == 4  # the critic, the twin critic, the actor, the temperature
    for timestep, want in ((250, 7.5e-4), (500, 5e-4)):
        batch = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(columns)}, env_steps=n)
        learner.update(batch=batch, timesteps={"num_env_steps_sampled_lifetime": timestep})
        for name in names:
            optimizer = learner.get_optimizer(DEFAULT_MODULE_ID, name)
            assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([want]), name
