"""``rlblocks export``: the exported artifact acts like the trainer's policy.

For each model family (FC, vision, complex input, LSTM, attention) and action space
(Discrete, MultiDiscrete, Box, nested Tuple), the artifact's actions, distribution inputs,
values and next states equal the torch policy's on 200 random observations (recurrent
models: 10 envs x 20 steps, each side carrying its own state). Evaluation through
``OnnxPolicy`` gives the trainer's episode returns; the MeanStdFilter statistics are baked
in; bad input gets the preprocessor's ValueError; ``OnnxPolicy`` never imports torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks.cli import main
from rlblocks.export import TorchExportPolicy, export_policy
from rlblocks.export.runtime import ExportedPolicy
from rlblocks.export.sidecar import read_sidecar, space_from_json, space_to_json
from rlblocks.nest import tree_map
from rlblocks.train import PPOConfig, PPOTrainer

ort = pytest.importorskip("onnxruntime")

from rlblocks.export import OnnxPolicy  # noqa: E402  (needs onnxruntime)

Box, Discrete, MultiDiscrete = gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete
TOL = 1e-5  # absolute, and relative for values above 1


class SpacesEnv(gym.Env):
    """Random observations of any space; ten steps per episode."""

    def __init__(self, obs_space: gym.Space, action_space: gym.Space):
        self.observation_space = obs_space
        self.action_space = action_space
        self._t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self._t = 0
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> Any:
        self._t += 1
        return self.observation_space.sample(), 0.0, self._t >= 10, False, {}


def _trainer(
    obs_space: gym.Space, action_space: gym.Space, model: dict[str, Any], **config: Any
) -> PPOTrainer:
    return PPOTrainer(
        PPOConfig.from_dict(
            {
                "env": lambda _cfg: SpacesEnv(obs_space, action_space),
                "num_envs": 1,
                "seed": 3,
                "model": model,
                **config,
            }
        )
    )


NESTED_OBS = gym.spaces.Dict(
    {
        "pos": Box(-1, 1, (3,)),
        "kind": Discrete(4, start=-1),
        "inner": gym.spaces.Dict({"image": Box(0, 1, (10, 10, 3)), "md": MultiDiscrete([2, 3])}),
    }
)
NESTED_ACTIONS = gym.spaces.Tuple(
    (
        Discrete(3, start=1),
        gym.spaces.Dict({"move": Box(-2, 2, (2,)), "pick": MultiDiscrete([2, 3])}),
    )
)

# gymnasium's samples stay within the default bounds (64 items, 64 nodes, 256 edges)
STRUCTURES_OBS = gym.spaces.Dict(
    {
        "items": gym.spaces.Sequence(Box(-1, 1, (2,))),
        "graph": gym.spaces.Graph(Box(0, 1, (3,)), Discrete(2)),
        "word": gym.spaces.Text(4, charset="abcd"),
        "either": gym.spaces.OneOf((Discrete(3), Box(-1, 1, (2,)))),
    }
)
STRUCTURES_MODEL = {
    "fcnet_hiddens": [16],
    "entity_encoder": {"dim": 16, "heads": 2},
    "graph_encoder": {"dim": 16},
}

FEED_FORWARD = {
    "fc-discrete": (Box(-1, 1, (5,)), Discrete(3, start=2), {"fcnet_hiddens": [16, 16]}),
    "fc-multidiscrete": (
        Box(-1, 1, (5,)),
        MultiDiscrete([3, 4], start=[1, -2]),
        {"fcnet_hiddens": [16]},
    ),
    "fc-box": (Box(-1, 1, (5,)), Box(-1, 1, (2,)), {"fcnet_hiddens": [16]}),
    "fc-nested-tuple": (Box(-1, 1, (5,)), NESTED_ACTIONS, {"fcnet_hiddens": [16]}),
    # pixels scaled to [0, 1]: raw 0..255 inputs put float32 rounding of the convolutions
    # (which differ between torch and onnxruntime) above 1e-5
    "vision": (Box(0, 1, (42, 42, 3)), Discrete(4), {}),
    "complex-input": (
        NESTED_OBS,
        MultiDiscrete([2, 5]),
        {"fcnet_hiddens": [16], "conv_filters": [[4, [3, 3], 2], [8, [5, 5], 1]]},
    ),
    # STRUCTURES_MODEL itself (attention entities, text as characters) is RECURRENT's
    # lstm-structures: the same encoders, exported and compared over 20 steps
    "structures-text-ids": (
        STRUCTURES_OBS,
        Discrete(3),
        {**STRUCTURES_MODEL, "text_encoding": "ids", "entity_encoder": {"type": "deepsets"}},
    ),
}

RECURRENT = {
    "lstm-structures": (
        STRUCTURES_OBS,
        Discrete(3),
        {**STRUCTURES_MODEL, "use_lstm": True, "lstm_cell_size": 8},
    ),
    # no Discrete start here: the trainer starts prev_actions at 0 (outside Discrete(n, start=1))
    "lstm": (
        Box(-1, 1, (5,)),
        Discrete(3),
        {
            "use_lstm": True,
            "lstm_cell_size": 16,
            "fcnet_hiddens": [16],
            "lstm_use_prev_action": True,
            "lstm_use_prev_reward": True,
        },
    ),
    "lstm-box": (
        NESTED_OBS,
        Box(-1, 1, (2,)),
        {
            "use_lstm": True,
            "lstm_cell_size": 8,
            "fcnet_hiddens": [8],
            "conv_filters": [[4, [3, 3], 2], [8, [5, 5], 1]],
        },
    ),
    "attention": (
        Box(-1, 1, (5,)),
        MultiDiscrete([2, 3]),
        {
            "use_attention": True,
            "attention_dim": 16,
            "attention_num_heads": 2,
            "attention_head_dim": 8,
            "attention_memory_inference": 6,
            "attention_memory_training": 6,
            "attention_position_wise_mlp_dim": 16,
            "fcnet_hiddens": [16],
            "attention_use_n_prev_actions": 2,
            "attention_use_n_prev_rewards": 2,
        },
    ),
}


SUFFIXES = {"onnx": ".onnx", "torch-export": ".pt2"}


def _shared_trainer(shared: Any, case: str, spec: tuple[Any, ...] | None = None) -> PPOTrainer:
    """The session's trainer of ``case`` (FEED_FORWARD, RECURRENT, or ``spec``): read only."""
    trainer: PPOTrainer = shared.trainer(
        case, spec or {**FEED_FORWARD, **RECURRENT}[case], _trainer
    )
    return trainer


def _shared_artifact(
    shared: Any, case: str, fmt: str = "onnx", spec: tuple[Any, ...] | None = None
) -> Path:
    """That trainer exported once in ``fmt`` for the session (conftest's shared_exports)."""
    path: Path = shared.artifact(
        case,
        spec or {**FEED_FORWARD, **RECURRENT}[case],
        _trainer,
        fmt,
        export_policy,
        SUFFIXES[fmt],
    )
    return path


def _observations(space: gym.Space, n: int, seed: int) -> list[Any]:
    space.seed(seed)
    return [space.sample() for _ in range(n)]


def _leaves(actions: Any) -> list[np.ndarray]:
    if isinstance(actions, tuple):
        return [x for a in actions for x in _leaves(a)]
    if isinstance(actions, dict):
        return [x for k in actions for x in _leaves(actions[k])]
    return [np.asarray(actions)]


def _assert_actions_equal(got: Any, expected: Any, space: gym.Space) -> None:
    got_leaves, exp_leaves = _leaves(got), _leaves(expected)
    assert len(got_leaves) == len(exp_leaves)
    from rlblocks.spaces import space_path_items

    for g, e, (_, leaf) in zip(got_leaves, exp_leaves, space_path_items(space), strict=True):
        assert g.dtype == leaf.dtype, (g.dtype, leaf)
        assert g.shape == e.shape
        if np.issubdtype(g.dtype, np.integer):
            np.testing.assert_array_equal(g, e)
        else:
            np.testing.assert_allclose(g, e, rtol=TOL, atol=TOL)


def _torch_step(
    trainer: PPOTrainer, obs: list[Any], state: list[Any], pa: Any, pr: Any
) -> dict[str, Any]:
    x = np.asarray(trainer.obs_filter(trainer.preprocessor.transform_batch(obs), update=False))
    return trainer.policy.act(x, state, pa, pr, explore=False, full=True)


def _check_outputs(
    exported: ExportedPolicy,
    trainer: PPOTrainer,
    obs: list[Any],
    state_t: list[Any],
    state_e: list[Any] | None,
    pa: Any,
    pr: Any,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    want = _torch_step(trainer, obs, state_t, pa, pr)
    got = exported.forward(exported.preprocess(obs), state_e, pa, pr)
    n = len(exported.sidecar["outputs"]["actions"])
    actions = exported._structure([got[name] for name in exported.output_names[:n]])
    _assert_actions_equal(actions, want["actions"], trainer.policy.action_space)
    np.testing.assert_allclose(got["dist_inputs"], want["dist_inputs"], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(got["value"], want["vf_preds"], rtol=TOL, atol=TOL)
    for i, s in enumerate(want["state_out"]):
        np.testing.assert_allclose(got[f"state_out_{i}"], s.numpy(), rtol=TOL, atol=TOL)
    return want, got


@pytest.mark.parametrize("case", list(FEED_FORWARD))
def test_feed_forward_models_match_the_trainer(case: str, shared_exports: Any) -> None:
    obs_space, action_space, _ = FEED_FORWARD[case]
    trainer = _shared_trainer(shared_exports, case)
    exported = OnnxPolicy(_shared_artifact(shared_exports, case))
    obs = _observations(obs_space, 200, seed=1)
    _check_outputs(exported, trainer, obs, [], None, None, None)
    # compute_actions gives the same structure as the trainer's compute_actions
    got, _ = exported.compute_actions(obs[:7])
    want, _ = trainer.compute_actions(obs[:7])
    _assert_actions_equal(got, want, action_space)


@pytest.mark.parametrize("case", list(RECURRENT))
def test_recurrent_models_match_the_trainer_over_20_steps(case: str, shared_exports: Any) -> None:
    obs_space = RECURRENT[case][0]
    trainer = _shared_trainer(shared_exports, case)
    exported = OnnxPolicy(_shared_artifact(shared_exports, case))
    pol, b = trainer.policy, 10
    state_t = pol.initial_state(b)
    state_e = exported.initial_state(b)
    for s_t, s_e in zip(state_t, state_e, strict=True):
        np.testing.assert_array_equal(s_t.numpy(), s_e)
    pa, pr = exported.initial_prev(b)
    rng = np.random.default_rng(0)
    for step in range(20):
        obs = _observations(obs_space, b, seed=100 + step)
        want, got = _check_outputs(exported, trainer, obs, state_t, state_e, pa, pr)
        state_t, state_e = (
            want["state_out"],
            [got[f"state_out_{i}"] for i in range(len(state_e))],
        )
        if pa is not None:
            pa = np.roll(pa, -1, axis=1)
            pa[:, -1] = np.asarray(want["actions"]).reshape(pa.shape[0], *pa.shape[2:])
        if pr is not None:
            pr = np.roll(pr, -1, axis=1)
            pr[:, -1] = rng.normal(size=b)
    # the state really is carried: it moved away from the initial state
    assert any(np.abs(s).max() > 1e-3 for s in state_e)


@pytest.mark.parametrize("case", ["fc-nested-tuple", "lstm"])
def test_torch_export_artifact_matches_the_trainer(case: str, shared_exports: Any) -> None:
    obs_space = {**FEED_FORWARD, **RECURRENT}[case][0]
    trainer = _shared_trainer(shared_exports, case)
    exported = TorchExportPolicy(_shared_artifact(shared_exports, case, "torch-export"))
    b = 20
    state = trainer.policy.initial_state(b)
    pa, pr = exported.initial_prev(b)
    _check_outputs(
        exported,
        trainer,
        _observations(obs_space, b, seed=5),
        state,
        [s.numpy() for s in state] if state else None,
        pa,
        pr,
    )


def _far_from_unit(space: gym.Space, n: int, rng: np.random.Generator) -> list[Any]:
    """Observations whose statistics are far from (0, 1): a Box's values around 3, and in a
    Dict every Box leaf so (a list's items too; its length stays what the space says)."""
    space.seed(int(rng.integers(2**31)))
    return [
        rng.normal(3.0, 0.2, size=(5,)).astype(np.float32)
        if isinstance(space, Box)
        else {
            "x": rng.normal(3.0, 0.2, size=(3,)).astype(np.float32),
            "items": [
                rng.normal(3.0, 0.2, size=(2,)).astype(np.float32)
                for _ in range(int(rng.integers(0, 5)))
            ],
        }
        for _ in range(n)
    ]


@pytest.mark.parametrize("structured", [False, True], ids=["box", "repeated"])
def test_mean_std_filter_is_baked_in(structured: bool, tmp_path: Path) -> None:
    from rlblocks.spaces import Repeated

    obs_space: gym.Space = Box(-1, 1, (5,))
    if structured:  # the list's length passes the filter unchanged, in the artifact too
        obs_space = gym.spaces.Dict(
            {"x": Box(-5, 5, (3,)), "items": Repeated(Box(-5, 5, (2,)), max_len=4)}
        )
    trainer = _trainer(
        obs_space, Discrete(3), {"fcnet_hiddens": [16]}, observation_filter="MeanStdFilter"
    )
    try:
        rng = np.random.default_rng(0)
        # statistics far from (0, 1): an artifact without them would act differently
        trainer.obs_filter(
            trainer.preprocessor.transform_batch(_far_from_unit(obs_space, 500, rng))
        )
        if structured:
            assert trainer.obs_filter.passthrough.tolist() == [0]
        exported = OnnxPolicy(export_policy(trainer, tmp_path / "p.onnx"))
        obs = _far_from_unit(obs_space, 200, rng)
        _check_outputs(exported, trainer, obs, [], None, None, None)
        want, _ = trainer.compute_actions(obs)
        got, _ = exported.compute_actions(obs)
        np.testing.assert_array_equal(got, want)
        sidecar = read_sidecar(exported.path)
        assert sidecar["observation"]["filter"] == {"kind": "MeanStdFilter", "baked_in": True}
        # the check can fail: the unfiltered network acts differently on these inputs
        rows = trainer.preprocessor.transform_batch(obs)
        raw = trainer.policy.act(rows, [], explore=False, full=True)
        assert not np.allclose(raw["dist_inputs"], exported.forward(rows)["dist_inputs"], atol=TOL)
    finally:
        trainer.close()


def test_sidecar_describes_layout_outputs_and_state(tmp_path: Path) -> None:
    trainer = _trainer(
        NESTED_OBS,
        NESTED_ACTIONS,
        {
            "use_lstm": True,
            "lstm_cell_size": 8,
            "fcnet_hiddens": [8],
            "conv_filters": [[4, [3, 3], 2], [8, [5, 5], 1]],
        },
    )
    try:
        path = export_policy(trainer, tmp_path / "p.pt2", "torch-export")
    finally:
        trainer.close()
    side = json.loads((tmp_path / "p.pt2.json").read_text())
    layout = {leaf["path"]: leaf for leaf in side["observation"]["layout"]}
    # gymnasium sorts a Dict's keys: inner (image, md), kind, pos
    assert layout['obs["inner"]["image"]']["offset"] == 0
    assert layout['obs["inner"]["md"]']["kind"] == "multi_one_hot"
    assert layout['obs["inner"]["md"]']["offset"] == 300
    assert layout['obs["kind"]']["offset"] == 305
    assert layout['obs["kind"]']["kind"] == "one_hot" and layout['obs["kind"]']["start"] == -1
    assert layout['obs["pos"]'] == {
        "path": 'obs["pos"]',
        "offset": 309,
        "size": 3,
        "dtype": "float32",
        "kind": "box",
        "shape": [3],
    }
    # the layout is the one the preprocessor writes: one-hot slot of kind=-1 at 305
    prep = TorchExportPolicy(path).preprocessor
    obs = NESTED_OBS.sample()
    obs["kind"] = -1
    row = prep.transform(obs)
    assert row[305] == 1.0 and row[306:309].sum() == 0.0
    np.testing.assert_array_equal(row[309:312], obs["pos"])
    assert side["observation"]["size"] == 312
    assert [o["name"] for o in side["outputs"]["actions"]] == [
        "action.0",
        "action.1.move",
        "action.1.pick",
    ]
    assert [o["dtype"] for o in side["outputs"]["actions"]] == ["int64", "float32", "int64"]
    assert [o["shape"] for o in side["outputs"]["actions"]] == [["B"], ["B", 2], ["B", 2]]
    assert side["outputs"]["dist_inputs"]["shape"] == ["B", 3 + 4 + 5]
    # PPO's separate value layers (difference 25): the value LSTM's h_v, c_v follow h, c
    assert side["input_names"] == ["obs", "state_in_0", "state_in_1", "state_in_2", "state_in_3"]
    assert [i["shape"] for i in side["inputs"][1:]] == [["B", 8]] * 4
    assert side["output_names"][-4:] == [f"state_out_{i}" for i in range(4)]
    assert space_from_json(side["observation"]["space"]) == NESTED_OBS
    assert space_from_json(side["action_space"]) == NESTED_ACTIONS
    assert path.is_file()


def test_space_json_round_trip() -> None:
    from rlblocks.spaces import Repeated

    spaces = [
        Box(np.array([-1.0, 0.0]), np.array([1.0, np.inf]), dtype=np.float64),
        Box(0, 255, (4, 4), np.uint8),
        MultiDiscrete([[2, 3], [4, 5]]),
        gym.spaces.MultiBinary(3),
        Repeated(gym.spaces.Dict({"a": Discrete(2), "b": Box(-1, 1, (2,))}), 4),
        NESTED_OBS,
        NESTED_ACTIONS,
        STRUCTURES_OBS,
        gym.spaces.Sequence(gym.spaces.Dict({"a": Discrete(2)}), stack=True),
        gym.spaces.Graph(Box(0, 1, (2,)), None),
    ]
    for space in spaces:
        back = space_from_json(json.loads(json.dumps(space_to_json(space))))
        assert back == space, space


def test_bad_observations_get_the_preprocessors_value_error(shared_exports: Any) -> None:
    # complex-input: NESTED_OBS through the same convolutions (the action space plays no part)
    policy = OnnxPolicy(_shared_artifact(shared_exports, "complex-input"))
    good = _observations(NESTED_OBS, 2, seed=0)
    missing = {k: v for k, v in good[1].items() if k != "pos"}
    wrong_shape = {**good[1], "pos": np.zeros(4, np.float32)}
    nan_index = {**good[1], "kind": float("nan")}
    for bad in (missing, wrong_shape, nan_index):
        with pytest.raises(ValueError) as direct:
            policy.preprocessor.transform_batch([good[0], bad])
        with pytest.raises(ValueError) as through:
            policy.compute_actions([good[0], bad])
        assert str(through.value) == str(direct.value)
        assert "obs[1]" in str(through.value)
    nan_box = {**good[1], "pos": np.array([0.0, np.nan, 0.0], np.float32)}
    with pytest.raises(ValueError, match=r"obs\[1\]: NaN"):
        policy.compute_actions([good[0], nan_box])


def _train_cartpole(run_dir: Path, **config: Any) -> PPOTrainer:
    trainer = PPOTrainer(
        {
            "env": "CartPole-v1",
            "num_envs": 4,
            "train_batch_size": 512,
            "sgd_minibatch_size": 128,
            "num_sgd_iter": 4,
            "seed": 0,
            **config,
        },
        run_dir=run_dir,
    )
    trainer.fit(stop_iters=4, progress=False)
    return trainer


def test_cli_export_and_evaluate_give_the_trainers_returns(tmp_path: Path, capsys: Any) -> None:
    run = tmp_path / "run"
    trainer = _train_cartpole(run, observation_filter="MeanStdFilter")
    trainer.close()
    assert main(["export", str(run)]) == 0
    assert (run / "policy.onnx").is_file() and (run / "policy.onnx.json").is_file()
    capsys.readouterr()
    assert main(["evaluate", str(run), "--episodes", "3", "--seed", "11"]) == 0
    want = json.loads(capsys.readouterr().out)
    assert (
        main(
            [
                "evaluate",
                str(run),
                "--episodes",
                "3",
                "--seed",
                "11",
                "--exported",
                str(run / "policy.onnx"),
            ]
        )
        == 0
    )
    got = json.loads(capsys.readouterr().out)
    assert got["episode_returns"] == want["episode_returns"]
    assert len(set(want["episode_returns"])) > 1 or want["episode_return_mean"] > 30
    # torch.export artifact, same returns
    assert (
        main(["export", str(run), "--format", "torch-export", "--out", str(tmp_path / "p.pt2")])
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "evaluate",
                str(run),
                "--episodes",
                "3",
                "--seed",
                "11",
                "--exported",
                str(tmp_path / "p.pt2"),
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["episode_returns"] == want["episode_returns"]


def test_cli_user_errors_are_one_line(tmp_path: Path, capsys: Any) -> None:
    assert main(["export", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlblocks export: error:") and "\n" not in err
    run = tmp_path / "run"
    PPOTrainer({"env": "CartPole-v1", "num_envs": 1}, run_dir=run).save()
    assert main(["export", str(run), "--out", str(tmp_path / "no" / "dir" / "p.onnx")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["evaluate", str(run), "--exported", str(tmp_path / "missing.onnx")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlblocks evaluate: error:") and "\n" not in err
    assert main(["export", str(run)]) == 0
    assert main(["evaluate", str(run), "--explore", "--exported", str(run / "policy.onnx")]) == 2
    assert "--explore cannot be combined" in capsys.readouterr().err


_NO_TORCH = textwrap.dedent("""
    import sys
    import gymnasium as gym
    from rlblocks.export import OnnxPolicy
    policy = OnnxPolicy(sys.argv[1])
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    action, state = policy.compute_single_action(obs)
    actions, _ = policy.compute_actions([obs] * 3)
    assert action in (0, 1) and actions.shape == (3,), (action, actions)
    print("torch" in sys.modules)
""")


def test_onnx_policy_does_not_import_torch(tmp_path: Path) -> None:
    trainer = PPOTrainer({"env": "CartPole-v1", "num_envs": 1})
    try:
        path = export_policy(trainer, tmp_path / "p.onnx")
    finally:
        trainer.close()
    import rlblocks

    where = str(Path(rlblocks.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([where, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", _NO_TORCH, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_single_action_matches_compute_single_action(shared_exports: Any) -> None:
    # fc-nested-tuple: Box(5) observations, NESTED_ACTIONS, fcnet_hiddens [16]
    trainer = _shared_trainer(shared_exports, "fc-nested-tuple")
    policy = OnnxPolicy(_shared_artifact(shared_exports, "fc-nested-tuple"))
    for obs in _observations(Box(-1, 1, (5,)), 5, seed=9):
        got, _ = policy.compute_single_action(obs)
        want, _ = trainer.compute_single_action(obs)
        _assert_actions_equal(
            tree_map(lambda a: np.asarray(a)[None], got),
            tree_map(lambda a: np.asarray(a)[None], want),
            NESTED_ACTIONS,
        )


def test_export_refuses_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown format"):
        export_policy(tmp_path, tmp_path / "x", fmt="tflite")


def test_export_refuses_an_rllib_run(tmp_path: Path) -> None:
    """A ``--backend rllib`` run is the RLlib exporter's (``rlblocks export`` picks it):
    ``rlblocks.export`` refuses it by name instead of importing ``rlblocks.rllib``."""
    from rlblocks.export.exporter import export_policies

    (tmp_path / "config.json").write_text(json.dumps({"backend": {"name": "rllib"}}))
    with pytest.raises(ValueError, match=r"--backend rllib; .*export_rllib_policy\b"):
        export_policy(tmp_path)
    with pytest.raises(ValueError, match=r"--backend rllib; .*export_rllib_policies"):
        export_policies(tmp_path / "checkpoint_000001")


def test_benchmark_runs_and_reports_the_same_action(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_export as bench

    rows = bench.run(quick=True, min_time=0.004)
    assert {r.method for r in rows} == {
        "rlblocks OnnxPolicy",
        "rlblocks TorchExportPolicy",
        "trainer.compute_single_action",
        "torch model forward",
        "torch model forward + value",
    }
    assert len({r.case for r in rows}) == 2
    assert all(r.extra["same_action"] for r in rows)
    assert all(r.us_per_item > 0 for r in rows)


def test_masked_model_applies_its_mask_inside(tmp_path: Path) -> None:
    import rlblocks.envs  # noqa: F401  (registers rlblocks/ParametricCartPole-v0)

    trainer = PPOTrainer(
        {
            "env": "rlblocks/ParametricCartPole-v0",
            "num_envs": 1,
            "seed": 1,
            "env_config": {"max_avail_actions": 6},
            "model": {
                "custom_model": "rlblocks.models.parametric:ParametricActionsModel",
                "vf_share_layers": True,
            },
        }
    )
    try:
        policy = OnnxPolicy(export_policy(trainer, tmp_path / "p.onnx"))
        space = trainer.venv.single_observation_space
        rng = np.random.default_rng(0)
        obs = _observations(space, 200, seed=2)
        for o in obs:
            mask = (rng.random(6) < 0.4).astype(np.float32)
            mask[rng.integers(6)] = 1.0
            o["action_mask"] = mask
        _check_outputs(policy, trainer, obs, [], None, None, None)
        actions, _ = policy.compute_actions(obs)
        legal = np.stack([o["action_mask"] for o in obs])
        assert legal[np.arange(200), actions].all()  # never a masked action
        assert (legal.sum(1) < 6).mean() > 0.9  # and most rows did mask some
    finally:
        trainer.close()


def test_layout_of_repeated_and_atari_ram() -> None:
    from rlblocks.preprocessors import get_preprocessor
    from rlblocks.spaces import Repeated

    space = gym.spaces.Dict(
        {
            "ram": Box(0, 255, (128,), np.uint8),
            "items": Repeated(gym.spaces.Tuple((Discrete(3), Box(-1, 1, (2,)))), 4),
        }
    )
    layout = get_preprocessor(space)(space).layout.describe()
    assert [(e["path"], e["offset"], e["kind"]) for e in layout] == [
        ('obs["items"]', 0, "repeated_length"),
        ('obs["items"][0][0]', 1, "one_hot"),
        ('obs["items"][0][1]', 4, "box"),
        ('obs["ram"]', 21, "box"),
    ]
    assert layout[0]["max_len"] == 4 and layout[0]["item_size"] == 5
    assert layout[3]["map"] == "(x - 128) / 128"


@pytest.mark.parametrize(
    "model",
    [
        {
            "use_lstm": True,
            "lstm_cell_size": 16,
            "lstm_use_prev_action": True,
            "lstm_use_prev_reward": True,
        },
        {
            "use_attention": True,
            "attention_dim": 16,
            "attention_num_heads": 2,
            "attention_head_dim": 8,
            "attention_memory_inference": 4,
            "attention_memory_training": 4,
            "attention_position_wise_mlp_dim": 16,
            "attention_use_n_prev_actions": 2,
            "attention_use_n_prev_rewards": 2,
        },
    ],
    ids=["lstm", "attention"],
)
def test_recurrent_episodes_match_the_trainers_evaluate(
    model: dict[str, Any], tmp_path: Path
) -> None:
    from rlblocks.export import evaluate_exported

    trainer = PPOTrainer(
        {"env": "CartPole-v1", "num_envs": 1, "seed": 4, "model": {"fcnet_hiddens": [16], **model}}
    )
    try:
        with torch.no_grad():  # large weights: the state and previous actions sway actions
            for p in trainer.model.parameters():
                p.mul_(20.0)
        policy = OnnxPolicy(export_policy(trainer, tmp_path / "p.onnx"))
        want = trainer.evaluate(4, seed=21)
        got = evaluate_exported(
            policy, trainer.evaluation_env(), 4, seed=trainer.evaluation_seed(21)
        )
        assert got["episode_returns"] == want["episode_returns"]
        assert len(set(want["episode_returns"])) > 1  # not one constant action
    finally:
        trainer.close()
