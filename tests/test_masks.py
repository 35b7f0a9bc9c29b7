"""RLlib's action-mask convention ``Dict(action_mask, observations)`` (rlblocks.masks): every
catalog model, the native trainer through the CLI, evaluate, both export runtimes.

The training tests count, in the env itself (:class:`MaskedBanditEnv.counts`), every masked
action taken over a whole run: it must be 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import rlblocks.envs  # noqa: F401  (registers rlblocks/MaskedBandit-v0)
import torch
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple
from rlblocks.catalog import ModelCatalog
from rlblocks.cli import main
from rlblocks.distributions import FLOAT_MIN, ActionDistribution, Categorical
from rlblocks.envs.masked_bandit import MaskedBanditEnv
from rlblocks.filters import MeanStdFilter
from rlblocks.masks import (
    apply_action_mask,
    check_action_mask,
    is_mask_space,
    mask_layout,
    masked_action_rows,
)
from rlblocks.models import ModelV2
from rlblocks.models.action_mask import ActionMaskModel
from rlblocks.models.attention import AttentionWrapper
from rlblocks.models.complex_input import ComplexInputNetwork
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.models.parametric import ParametricActionsModel
from rlblocks.models.recurrent import LSTMWrapper
from rlblocks.models.visionnet import VisionNetwork
from rlblocks.train import PPOTrainer
from rlblocks.train.policy import Policy
from rlblocks.train.runner import EnvRunner
from rlblocks.train.trainer_config import PPOConfig

ENV = "rlblocks/MaskedBandit-v0"
TINY = [
    "--set",
    "num_envs=2",
    "--set",
    "train_batch_size=64",
    "--set",
    "sgd_minibatch_size=32",
    "--set",
    "num_sgd_iter=2",
    "--set",
    "model.fcnet_hiddens=[16]",
    "--set",
    "seed=1",
    "--stop-timesteps",
    "128",
    "--no-progress",
    "--no-default-stop-reward",
]
LSTM = {
    "use_lstm": True,
    "lstm_cell_size": 8,
    "max_seq_len": 4,
    "lstm_use_prev_action": True,
    "lstm_use_prev_reward": True,
}
ATTENTION = {
    "use_attention": True,
    "attention_dim": 16,
    "attention_head_dim": 8,
    "attention_num_transformer_units": 1,
    "attention_memory_inference": 4,
    "attention_memory_training": 4,
    "max_seq_len": 5,
    "attention_position_wise_mlp_dim": 16,
}
ATTENTION_PREV = {**ATTENTION, "attention_use_n_prev_actions": 2, "attention_use_n_prev_rewards": 2}
VISION = {"conv_filters": [[8, [3, 3], 2], [16, [3, 2], 1]]}


def mask_space(obs: gym.Space, n: int) -> Dict:
    return Dict({"action_mask": MultiBinary(n), "observations": obs})


def build(
    obs: gym.Space, action_space: gym.Space, config: dict[str, Any] | None = None
) -> tuple[ModelV2, Any, Any]:
    """(model, preprocessor, dist class) as the trainer builds them."""
    prep = ModelCatalog.get_preprocessor_for_space(obs, config)
    dist, n = ModelCatalog.get_action_dist(action_space, config)
    model = ModelCatalog.get_model_v2(prep.observation_space, action_space, n, config or {})
    return model, prep, dist


def settings(model: dict[str, Any]) -> list[str]:
    return [arg for k, v in model.items() for arg in ("--set", f"model.{k}={json.dumps(v)}")]


@pytest.fixture(autouse=True)
def _counts() -> None:
    MaskedBanditEnv.reset_counts()


# --- the layout ---------------------------------------------------------------------------------
def test_layout_covers_the_discrete_components_in_flatten_order() -> None:
    assert mask_layout(Discrete(4), 4, MultiBinary(4)).segments == ((0, 4),)
    md = mask_layout(MultiDiscrete([2, 3]), 5, Box(0, 1, (5,)))
    assert md.segments == ((0, 2), (2, 5)) and md.pieces == (("mask", 0, 5),)
    # Dict keys sorted ("a" Box first): the Box's 4 logits (mean, log-std) stay open
    space = gym.spaces.Dict({"b": MultiDiscrete([2, 2]), "a": Box(-1, 1, (2,)), "c": Discrete(3)})
    lay = mask_layout(space, 4 + 4 + 3, MultiBinary(7))
    assert lay.pieces == (("open", 4, 0), ("mask", 0, 4), ("mask", 4, 7))
    assert lay.segments == ((0, 2), (2, 4), (4, 7))
    logits = torch.zeros(2, 11)
    mask = torch.tensor([[1, 0, 0, 1, 0, 1, 1], [0, 1, 1, 1, 1, 0, 0.0]])
    out = apply_action_mask(logits, mask, lay)
    assert bool((out[:, :4] == 0).all())  # the continuous part is untouched
    assert torch.equal(out[:, 4:] == FLOAT_MIN, mask <= 0)


def test_wrong_mask_length_fails_at_build_time_naming_both() -> None:
    with pytest.raises(ValueError, match=r"has 5 entries but .* needs 4"):
        build(mask_space(Box(-1, 1, (3,)), 5), Discrete(4))
    with pytest.raises(ValueError, match=r"has 3 entries but .* needs 5"):
        build(mask_space(Box(-1, 1, (3,)), 3), MultiDiscrete([2, 3]))
    with pytest.raises(ValueError, match=r"has 5 entries but .* needs 3"):
        build(mask_space(Box(-1, 1, (3,)), 5), Tuple((Discrete(3), Box(-1, 1, (2,)))))
    with pytest.raises(ValueError, match="needs a Discrete or MultiDiscrete"):
        build(mask_space(Box(-1, 1, (3,)), 2), Box(-1, 1, (2,)))
    with pytest.raises(ValueError, match="1-D MultiBinary or Box"):
        build(
            Dict({"action_mask": Box(0, 1, (2, 2)), "observations": Box(-1, 1, (3,))}), Discrete(4)
        )
    # through the trainer too, before any step is taken
    with pytest.raises(ValueError, match=r"has 5 entries but .* needs 4"):
        PPOTrainer({"env": lambda cfg: WrongMask(), "num_envs": 1})


class WrongMask(gym.Env):
    """A mask of 5 entries for 4 actions."""

    observation_space = mask_space(Box(-1, 1, (3,), np.float32), 5)
    action_space = Discrete(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        raise AssertionError("never stepped")


def test_fully_masked_rows_are_refused_when_acting() -> None:
    lay = mask_layout(MultiDiscrete([2, 2]), 4, MultiBinary(4))
    check_action_mask(np.array([[1, 0, 0, 1]]), lay)
    with pytest.raises(ValueError, match=r"row 1 leaves no legal action .* component 1"):
        check_action_mask(np.array([[1, 0, 0, 1], [1, 1, 0, 0]]), lay)
    # inside the model a fully masked block stays open (the zero padding of training
    # sequences), so distributions never see an all-FLOAT_MIN row
    out = apply_action_mask(torch.zeros(1, 4), torch.tensor([[1.0, 0, 0, 0]]), lay)
    assert out.tolist() == [[0.0, FLOAT_MIN, 0.0, 0.0]]


def test_masked_action_rows() -> None:
    space = Tuple((Box(-1, 1, (1,)), MultiDiscrete([2, 3], start=[1, 0])))
    lay = mask_layout(space, 2 + 5, MultiBinary(5))
    mask = np.array([[1, 0, 1, 1, 1], [1, 1, 0, 0, 1]])
    actions = (np.zeros((2, 1)), np.array([[1, 2], [2, 1]]))
    assert masked_action_rows(actions, mask, lay).tolist() == [False, True]


# --- every catalog model sees `observations` only ---------------------------------------------
@pytest.mark.parametrize(
    "obs, config, inner_cls",
    [
        (Box(-1, 1, (5,)), {}, FullyConnectedNetwork),
        (Box(0, 255, (6, 4, 3), np.uint8), VISION, VisionNetwork),
        (Dict({"x": Box(-1, 1, (3,)), "k": Discrete(3)}), {}, FullyConnectedNetwork),
        (
            Dict({"img": Box(0, 1, (6, 4, 1)), "k": Discrete(3)}),
            {"conv_filters": VISION["conv_filters"]},
            ComplexInputNetwork,
        ),
        (Box(-1, 1, (5,)), LSTM, LSTMWrapper),
        (Box(-1, 1, (5,)), ATTENTION_PREV, AttentionWrapper),
    ],
    ids=["fc", "vision", "dict-fc", "complex", "lstm", "attention"],
)
def test_catalog_models_see_observations_only(
    obs: gym.Space, config: dict[str, Any], inner_cls: type
) -> None:
    torch.manual_seed(0)
    space = mask_space(obs, 4)
    prep = ModelCatalog.get_preprocessor_for_space(space, config)
    # the trainer's policy builds the model and its inputs (previous actions / rewards)
    policy = Policy(
        prep.observation_space, Discrete(4), PPOConfig(model={"fcnet_hiddens": [16], **config})
    )
    model, dist_cls = policy.model, policy.dist_class
    assert isinstance(model, ActionMaskModel) and type(model.inner) is inner_cls
    inner_prep = ModelCatalog.get_preprocessor_for_space(obs, config)
    assert model._inner_shape == inner_prep.observation_space.shape
    raw = [space.sample() for _ in range(6)]
    for i, o in enumerate(raw):
        o["action_mask"] = np.array([1, 0, i % 2, 0], np.int8)
    policy.set_training(False)
    inputs = policy.input_dict(prep.transform_batch(raw))
    state = policy.initial_state(6)
    seq_lens = torch.ones(6, dtype=torch.int64) if state else None
    with torch.no_grad():
        out, _ = model(inputs, state, seq_lens)
        inner_inputs = {
            **inputs,
            "obs": torch.from_numpy(inner_prep.transform_batch([o["observations"] for o in raw])),
        }
        want, _ = model.inner(inner_inputs, state, seq_lens)
    mask = torch.from_numpy(np.stack([o["action_mask"] for o in raw])).float()
    torch.testing.assert_close(out[mask > 0], want[mask > 0])
    assert bool((out[mask <= 0] == FLOAT_MIN).all())
    dist = dist_cls(out, model)
    for _ in range(10):
        assert bool(mask.gather(1, dist.sample()[:, None]).all())
    assert bool(mask.gather(1, dist.deterministic_sample()[:, None]).all())


class ObsOnly(ModelV2):
    """A custom model written for `observations` alone."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.seen_shape = obs_space.shape
        self.layer = torch.nn.Linear(int(np.prod(obs_space.shape)), num_outputs)
        self.value = torch.nn.Linear(int(np.prod(obs_space.shape)), 1)

    def forward(self, input_dict, state, seq_lens):
        self._v = self.value(input_dict["obs_flat"]).squeeze(-1)
        return self.layer(input_dict["obs_flat"]), state

    def value_function(self):
        return self._v


class ReadsMask(ObsOnly):
    """A custom model that reads the mask itself (RLlib's old-stack ActionMaskModel)."""

    handles_action_mask = True

    def forward(self, input_dict, state, seq_lens):
        assert set(input_dict["obs"]) == {"action_mask", "observations"}
        return super().forward(input_dict, state, seq_lens)


def test_custom_models_see_observations_unless_they_read_the_mask() -> None:
    space = mask_space(Box(-1, 1, (3,)), 4)
    model, prep, _ = build(space, Discrete(4), {"custom_model": ObsOnly})
    assert type(model.inner) is ObsOnly and model.inner.seen_shape == (3,)
    model2, _, _ = build(space, Discrete(4), {"custom_model": ReadsMask})
    assert type(model2.inner) is ReadsMask and model2.inner.seen_shape == (7,)
    raw = [{"action_mask": np.array([0, 1, 0, 1], np.int8), "observations": np.ones(3)}]
    for m in (model, model2):
        out, _ = m({"obs": torch.from_numpy(prep.transform_batch(raw))})
        assert (out[0] == FLOAT_MIN).tolist() == [True, False, True, False]


def test_an_unpreprocessed_mask_space_is_refused_unless_the_model_reads_the_mask() -> None:
    space = mask_space(Box(-1, 1, (3,)), 4)
    with pytest.raises(ValueError, match="must be preprocessed"):
        ModelCatalog.get_model_v2(space, Discrete(4), 4, {})
    model = ModelCatalog.get_model_v2(
        space, Discrete(4), 4, {"custom_model": ParametricActionsModel}
    )
    assert type(model) is ParametricActionsModel  # it masks the raw Dict itself
    obs = {"action_mask": torch.tensor([[1.0, 0, 0, 1]]), "observations": torch.zeros(1, 3)}
    out, _ = model({"obs": obs})
    assert (out[0] == FLOAT_MIN).tolist() == [False, True, True, False]


def test_parametric_actions_model_without_avail_actions() -> None:
    space = mask_space(Box(-1, 1, (3,)), 4)
    config = {
        "custom_model": ParametricActionsModel,
        "custom_model_config": {"action_embed_size": 3},
    }
    model, prep, _ = build(space, Discrete(4), config)
    inner = model.inner
    assert isinstance(inner, ParametricActionsModel) and not inner.observed_embeddings
    assert tuple(inner.action_embeddings.shape) == (4, 3)
    raw = [{"action_mask": np.array([0, 1, 1, 0], np.int8), "observations": np.ones(3)}]
    out, _ = model({"obs": torch.from_numpy(prep.transform_batch(raw))})
    assert (out[0] == FLOAT_MIN).tolist() == [True, False, False, True]
    out.sum().backward()  # the learned embeddings are trained
    assert inner.action_embeddings.grad is not None


# --- the native trainer, through the command line -----------------------------------------------
@pytest.mark.parametrize(
    "action, obs, model",
    # one case per action space and per model (each case trains, evaluates and exports in
    # both formats): attention with previous actions on the multidiscrete action (previous
    # actions take no Tuple), the convolutions alone on the tuple one, under the LSTM on the
    # multidiscrete one
    [
        ("discrete", "box", {}),
        ("multidiscrete", "box", ATTENTION_PREV),
        ("tuple", "image", VISION),
        ("multidiscrete", "image", {**VISION, **LSTM}),
        ("dict", "box", {}),
    ],
    ids=[
        "discrete-fc",
        "multidiscrete-attention-prev",
        "tuple-vision",
        "multidiscrete-vision-lstm",
        "dict-fc",
    ],
)
def test_cli_train_evaluate_export_never_take_a_masked_action(
    tmp_path: Path, capsys: Any, action: str, obs: str, model: dict[str, Any]
) -> None:
    run = tmp_path / "run"
    argv = [
        "train",
        "--env",
        ENV,
        "--run-dir",
        str(run),
        *TINY,
        "--set",
        f"env_config.action={action}",
        "--set",
        f"env_config.obs={obs}",
        *settings(model),
    ]
    assert main(argv) == 0, capsys.readouterr().err
    trained = dict(MaskedBanditEnv.counts)
    assert trained["steps"] >= 128 and trained["masked"] == 0, trained
    assert main(["evaluate", str(run), "--episodes", "3", "--seed", "5"]) == 0
    assert main(["evaluate", str(run), "--episodes", "2", "--explore"]) == 0
    capsys.readouterr()
    assert main(["export", str(run)]) == 0
    assert main(["export", str(run), "--format", "torch-export"]) == 0
    for artifact in ("policy.onnx", "policy.pt2"):
        assert (
            main(
                [
                    "evaluate",
                    str(run),
                    "--episodes",
                    "3",
                    "--seed",
                    "5",
                    "--exported",
                    str(run / artifact),
                ]
            )
            == 0
        )
    sidecar = json.loads((run / "policy.onnx.json").read_text())
    size = 2 * 4 if action in ("multidiscrete", "dict") else 4
    assert sidecar["observation"]["action_mask"]["offset"] == 0
    assert sidecar["observation"]["action_mask"]["size"] == size
    counts = MaskedBanditEnv.counts  # 3 + 2 + 3 + 3 evaluation episodes of 10 steps
    assert counts["steps"] == trained["steps"] + 11 * 10 and counts["masked"] == 0, counts


def test_exported_policies_respect_random_masks_and_refuse_empty_ones(tmp_path: Path) -> None:
    from rlblocks.export import export_policy
    from rlblocks.export.evaluate import load_exported

    trainer = PPOTrainer(
        {
            "env": ENV,
            "num_envs": 1,
            "seed": 0,
            "env_config": {"action": "tuple"},
            "model": {"fcnet_hiddens": [8]},
        }
    )
    try:
        space = trainer.venv.single_observation_space
        rng = np.random.default_rng(0)
        obs = []
        for _ in range(200):
            o = space.sample()
            m = (rng.random(4) < 0.3).astype(np.int8)
            m[rng.integers(4)] = 1
            o["action_mask"] = m
            obs.append(o)
        legal = np.stack([o["action_mask"] for o in obs])
        want, _ = trainer.compute_actions(obs)
        assert legal[np.arange(200), want[0]].all()
        for fmt, name in (("onnx", "p.onnx"), ("torch-export", "p.pt2")):
            policy = load_exported(export_policy(trainer, tmp_path / name, fmt))
            actions, _ = policy.compute_actions(obs)
            assert legal[np.arange(200), actions[0]].all()  # never a masked action
            np.testing.assert_array_equal(actions[0], want[0])  # the trainer's choice
            empty = {**obs[0], "action_mask": np.zeros(4, np.int8)}
            with pytest.raises(ValueError, match="row 1 leaves no legal action"):
                policy.compute_actions([obs[0], empty])
        with pytest.raises(ValueError, match="row 1 leaves no legal action"):
            trainer.compute_actions([obs[0], {**obs[0], "action_mask": np.zeros(4, np.int8)}])
    finally:
        trainer.close()


# --- distributions and refusals -----------------------------------------------------------------
def test_masked_categorical_custom_dist_works_or_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--env",
                ENV,
                "--run-dir",
                str(run),
                *TINY,
                "--set",
                "model.custom_action_dist=rlblocks.distributions:MaskedCategorical",
            ]
        )
        == 0
    )
    assert MaskedBanditEnv.counts["steps"] >= 128 and MaskedBanditEnv.counts["masked"] == 0
    with pytest.raises(ValueError, match="needs a Discrete action space"):
        PPOTrainer(
            {
                "env": ENV,
                "env_config": {"action": "multidiscrete"},
                "num_envs": 1,
                "model": {"custom_action_dist": "rlblocks.distributions:MaskedCategorical"},
            }
        )
    with PPOTrainer(
        {
            "env": ENV,
            "env_config": {"action": "multidiscrete"},
            "num_envs": 2,
            "train_batch_size": 64,
            "sgd_minibatch_size": 32,
            "num_sgd_iter": 2,
            "model": {"custom_action_dist": "rlblocks.distributions:MaskedMultiCategorical"},
        }
    ) as trainer:
        trainer.train()
        trainer.evaluate(2)
    assert MaskedBanditEnv.counts["steps"] >= 128 + 64 + 20
    assert MaskedBanditEnv.counts["masked"] == 0


class IgnoresLogits(Categorical):
    """A custom distribution that draws uniformly, whatever the logits say."""

    def sample(self):
        return torch.randint(0, self.logits.shape[-1], self.logits.shape[:-1])


def test_a_distribution_that_ignores_the_mask_is_refused_loudly() -> None:
    assert issubclass(IgnoresLogits, ActionDistribution)
    trainer = PPOTrainer(
        {"env": ENV, "num_envs": 4, "seed": 0, "model": {"custom_action_dist": IgnoresLogits}}
    )
    try:
        with pytest.raises(ValueError, match="chose a masked action"):
            for _ in range(5):
                trainer.train()
    finally:
        trainer.close()
    assert MaskedBanditEnv.counts["masked"] == 0


#: One short PPO iteration on the masked bandit.
SHORT = {
    "env": ENV,
    "num_envs": 2,
    "train_batch_size": 64,
    "sgd_minibatch_size": 32,
    "num_sgd_iter": 2,
    "seed": 0,
}


def test_parametric_actions_model_trains_on_a_plain_mask() -> None:
    model = {
        "custom_model": "rlblocks.models.parametric:ParametricActionsModel",
        "fcnet_hiddens": [16],
    }
    with PPOTrainer({**SHORT, "model": model}) as trainer:
        assert isinstance(trainer.model.inner, ParametricActionsModel)
        trainer.train()
        trainer.evaluate(2)
    assert MaskedBanditEnv.counts["steps"] >= 64 and MaskedBanditEnv.counts["masked"] == 0


def test_a_mean_std_filter_normalises_the_observations_and_passes_the_mask_through() -> None:
    config = {**SHORT, "observation_filter": "MeanStdFilter", "model": {"fcnet_hiddens": [16]}}
    with PPOTrainer(config) as trainer:
        trainer.train()
        trainer.evaluate(2)
        lay = trainer.preprocessor.layout
        mask, obs = lay.find(("action_mask",)).columns, lay.find(("observations",)).columns
        env = gym.make(ENV)
        raw = [env.reset(seed=s)[0] for s in range(8)]
        rows = np.stack([trainer.preprocessor.transform(o) for o in raw])
        filtered = trainer.obs_filter(rows, update=False)
        stats = trainer.obs_filter.running_stats
        np.testing.assert_array_equal(filtered[:, mask], np.stack([o["action_mask"] for o in raw]))
        expected = (rows[:, obs] - stats.mean[obs]) / (stats.std[obs] + 1e-6)
        np.testing.assert_allclose(filtered[:, obs], expected, rtol=1e-4, atol=1e-4)
    assert MaskedBanditEnv.counts["steps"] >= 64 + 2 and MaskedBanditEnv.counts["masked"] == 0


def test_an_env_runner_refuses_a_filter_that_would_normalise_the_mask() -> None:
    with PPOTrainer({"env": ENV, "num_envs": 1, "seed": 0}) as trainer:
        plain = MeanStdFilter(trainer.preprocessor.shape)  # no passthrough columns
        with pytest.raises(ValueError, match="counts, indices, characters or the action mask"):
            EnvRunner(trainer.config, trainer.policy, trainer.preprocessor, plain, 0)


def test_is_mask_space_needs_exactly_the_two_keys() -> None:
    assert is_mask_space(mask_space(Discrete(3), 2))
    assert not is_mask_space(Dict({"action_mask": MultiBinary(2), "cart": Discrete(3)}))


def test_masked_bandit_env_scores_and_counts() -> None:
    for kind in ("discrete", "multidiscrete", "tuple", "dict"):
        env = gym.make(ENV, action=kind, obs="image", mask="box", episode_len=100)
        obs, _ = env.reset(seed=1)
        assert env.observation_space.contains(obs) and obs["action_mask"].dtype == np.float32
        _, reward, *_ = env.step(env.unwrapped.best_action())
        assert reward == 1.0
        lay = mask_layout(env.action_space, None, env.observation_space["action_mask"])
        for _ in range(50):  # a masked action scores -1 and is counted
            obs, *_ = env.step(env.action_space.sample())
        batched = gym.vector.utils.concatenate(
            env.action_space,
            [env.unwrapped.best_action()],
            gym.vector.utils.create_empty_array(env.action_space, 1),
        )
        assert not masked_action_rows(batched, obs["action_mask"][None], lay).any()
    counts = MaskedBanditEnv.counts
    assert counts["steps"] == 4 * 51 and 0 < counts["masked"] < 4 * 51


# --- learning -----------------------------------------------------------------------------------
def test_learns_above_random_with_defaults(tmp_path: Path, capsys: Any) -> None:
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--env",
                ENV,
                "--run-dir",
                str(run),
                "--stop-timesteps",
                "12000",
                "--no-progress",
                "--set",
                "seed=0",
            ]
        )
        == 0
    )
    env = MaskedBanditEnv()
    random_legal = env.random_legal_return  # 4.69 for n=4, 10 steps
    capsys.readouterr()
    assert main(["evaluate", str(run), "--episodes", "20", "--seed", "3"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["episode_return_mean"] > random_legal + 2.0, (result, random_legal)
    assert MaskedBanditEnv.counts["masked"] == 0


# --- the RLlib backend (the ray extra) ----------------------------------------------------------
@pytest.mark.ray
def test_rllib_module_masks_tuple_actions_with_the_shared_helper() -> None:
    from ray.rllib.core.columns import Columns
    from rlblocks.rllib import rl_module_spec

    space = mask_space(Box(-1, 1, (4,)), 5)
    spec = rl_module_spec({"fcnet_hiddens": [8]})
    spec.observation_space = space
    spec.action_space = Tuple((Discrete(3), Box(-1, 1, (2,)), MultiDiscrete([2])))
    module = spec.build()
    assert module.mask_layout.pieces == (("mask", 0, 3), ("open", 4, 0), ("mask", 3, 5))
    mask = torch.tensor([[1, 0, 1, 0, 1], [0, 0, 1, 1, 1]], dtype=torch.int8)
    obs = torch.randn(2, 4)
    with torch.no_grad():
        logits = module.forward_inference(
            {Columns.OBS: {"action_mask": mask, "observations": obs}}
        )[Columns.ACTION_DIST_INPUTS]
    assert torch.equal(logits[:, [0, 1, 2, 7, 8]] == FLOAT_MIN, mask <= 0)
    assert not bool((logits[:, 3:7] == FLOAT_MIN).any())
    dist = module.get_exploration_action_dist_cls().from_logits(logits)
    for _ in range(30):
        a = dist.sample()
        assert not masked_action_rows(a, mask, module.mask_layout).any()
    empty = torch.tensor([[1, 0, 1, 0, 1], [0, 0, 0, 1, 1]], dtype=torch.int8)
    with pytest.raises(ValueError, match=r"row 1 leaves no legal action for action\[0\]"):
        module.forward_inference({Columns.OBS: {"action_mask": empty, "observations": obs}})
    # training batches (zero-padded sequences) are not refused
    module.forward_train({Columns.OBS: {"action_mask": empty, "observations": obs}})
    spec.observation_space = mask_space(Box(-1, 1, (4,)), 4)
    with pytest.raises(ValueError, match=r"has 4 entries but .* needs 5"):
        spec.build()


@pytest.mark.ray
def test_rllib_backend_cli_never_takes_a_masked_action(tmp_path: Path) -> None:
    argv = [
        "train",
        "--backend",
        "rllib",
        "--env",
        ENV,
        "--run-dir",
        str(tmp_path / "run"),
        *TINY,
        "--set",
        "env_config.action=tuple",
        *settings({"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4}),
    ]
    assert main(argv) == 0
    assert MaskedBanditEnv.counts["steps"] >= 128 and MaskedBanditEnv.counts["masked"] == 0
    trained = MaskedBanditEnv.counts["steps"]
    for extra in ([], ["--explore"]):  # greedy and sampled actions of the restored run
        assert main(["evaluate", str(tmp_path / "run"), "--episodes", "3", *extra]) == 0
    assert MaskedBanditEnv.counts["steps"] > trained and MaskedBanditEnv.counts["masked"] == 0
