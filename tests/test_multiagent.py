"""Multi-agent: the union layout, action unification, policy mapping, the lanes of
MultiAgentVectorEnv, and MultiAgentPPOTrainer (train / save / restore / evaluate / CLI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.spaces import Box, Dict, Discrete, MultiDiscrete, Tuple
from hypothesis import given, settings
from hypothesis import strategies as st
from rlblocks.catalog import ModelCatalog
from rlblocks.multiagent import UnionSpec, resolve_mapping, unify_actions
from rlblocks.multiagent.envs import MultiAgentVectorEnv
from rlblocks.train.trainer_config import PPOConfig

from tests.spaces_strategies import NEW_KIND_OPTIONS, nested_spaces, sample_value

pytest.importorskip("pettingzoo", reason="pettingzoo is the multiagent extra")

ZOO = "rlblocks.envs.multiagent_zoo:parallel_env"
TINY = {
    "num_envs": 2,
    "train_batch_size": 64,
    "sgd_minibatch_size": 32,
    "num_sgd_iter": 1,
    "model": {"fcnet_hiddens": [16]},
}


# --- the union layout -----------------------------------------------------------------------
@pytest.mark.native
@settings(max_examples=40, deadline=None)
@given(
    spaces=st.lists(nested_spaces(new_kinds=True, max_leaves=4), min_size=1, max_size=4),
    sizes=st.lists(st.integers(1, 5), min_size=4, max_size=4),
    one_hot=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_union_blocks_equal_each_agents_own_preprocessor(
    spaces: list[gym.Space], sizes: list[int], one_hot: bool, seed: int
) -> None:
    agents = [f"agent_{i}" for i in range(len(spaces))]
    obs_spaces = dict(zip(agents, spaces, strict=False))
    act_spaces = {a: Discrete(sizes[i]) for i, a in enumerate(agents)}
    spec = UnionSpec.build(obs_spaces, act_spaces, agent_id_one_hot=one_hot)
    prep = ModelCatalog.get_preprocessor_for_space(spec.observation_space, NEW_KIND_OPTIONS)
    rng = np.random.default_rng(seed)
    values = {a: sample_value(obs_spaces[a], rng) for a in agents}
    rows = prep.transform_batch([spec.value(a, values[a]) for a in agents])  # one call
    rows = rows.reshape(len(agents), -1)
    assert rows.shape == (len(agents), prep.size)
    blocks = {a: spec.block(a, NEW_KIND_OPTIONS) for a in agents}
    for i, a in enumerate(agents):
        own = ModelCatalog.get_preprocessor_for_space(obs_spaces[a], NEW_KIND_OPTIONS)
        start, stop = blocks[a]
        # the union's rows are float32; an agent's own pass-through Box keeps its dtype
        expected = own.transform(values[a]).ravel().astype(rows.dtype)
        np.testing.assert_array_equal(rows[i, start:stop], expected)
        for b in agents:  # every other block is zero (blocks shared by equal spaces excepted)
            if blocks[b] != blocks[a]:
                assert not rows[i, blocks[b][0] : blocks[b][1]].any()
        mask_cols = (
            slice(0, max(sizes[: len(agents)]))
            if "action_mask" in str(spec.observation_space)
            else None
        )
        if mask_cols is not None:  # the mask opens exactly the agent's own actions
            assert rows[i, mask_cols].tolist() == [
                1.0 if k < sizes[i] else 0.0 for k in range(max(sizes[: len(agents)]))
            ]
    # the blank value of an idle lane is a legal union value too
    assert prep.transform(spec.blank()).size == prep.size


def test_union_of_one_space_is_that_space_and_shares_the_block() -> None:
    box = Box(-1, 1, (3,), np.float32)
    spec = UnionSpec.build(dict.fromkeys("abc", box), dict.fromkeys("abc", Discrete(2)))
    assert spec.observation_space == box and spec.action_space == Discrete(2)
    obs = np.array([0.1, 0.2, 0.3], np.float32)
    assert spec.value("b", obs) is obs  # no copy, no wrapping: plain FC input
    indexed = UnionSpec.build(
        dict.fromkeys("abc", box), dict.fromkeys("abc", Discrete(2)), agent_id_one_hot=True
    )
    prep = ModelCatalog.get_preprocessor_for_space(indexed.observation_space)
    assert prep.transform(indexed.value("c", obs)).tolist() == pytest.approx(
        [0.1, 0.2, 0.3, 0.0, 0.0, 1.0]
    )


def test_agent_masks_combine_with_the_union_mask() -> None:
    masked = Dict({"action_mask": Box(0, 1, (3,)), "observations": Box(-1, 1, (2,))})
    spec = UnionSpec.build(
        {"m": masked, "p": Box(-1, 1, (4,))}, {"m": Discrete(3), "p": Discrete(5)}
    )
    value = spec.value("m", {"action_mask": np.array([1, 0, 1]), "observations": np.zeros(2)})
    assert value["action_mask"].tolist() == [1.0, 0.0, 1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"obs\['action_mask'\] has 2 entries"):
        spec.value("m", {"action_mask": np.array([1, 0]), "observations": np.zeros(2)})
    with pytest.raises(ValueError, match="not one of this policy's agents"):
        spec.value("x", np.zeros(4))


def test_actions_are_unified_and_mapped_back_into_each_agents_space() -> None:
    spec = UnionSpec.build(
        {"a": Box(-1, 1, (2,)), "b": Box(-1, 1, (2,))},
        {"a": Discrete(3, start=2), "b": Discrete(5)},
    )
    assert spec.action_space == Discrete(5)
    assert spec.agent_action("a", 2) == 4 and spec.agent_action("b", 4) == 4
    multi = unify_actions({"a": MultiDiscrete([2, 3]), "b": MultiDiscrete([4, 1])})
    assert multi == MultiDiscrete([4, 3])
    boxes = UnionSpec.build(
        {"a": Box(-1, 1, (1,)), "b": Box(-1, 1, (1,))},
        {"a": Box(-1, 1, (2,)), "b": Box(-3, 3, (3,))},
    )
    assert boxes.action_space == Box(-3, 3, (3,))
    assert boxes.agent_action("a", np.array([0.5, -0.5, 2.0], np.float32)).shape == (2,)
    with pytest.raises(ValueError, match="by_space"):
        unify_actions({"a": Discrete(2), "b": Box(-1, 1, (2,))})


# --- policy mapping and config --------------------------------------------------------------
def test_policy_mappings() -> None:
    obs = {"adversary_0": Box(-1, 1, (8,)), "agent_0": Box(-1, 1, (10,))}
    obs["agent_1"] = obs["agent_0"]
    act = dict.fromkeys(obs, Discrete(5))
    agents = list(obs)
    assert set(resolve_mapping(agents, obs, act, "shared").values()) == {"shared"}
    assert resolve_mapping(agents, obs, act, "per_agent")["agent_1"] == "agent_1"
    assert resolve_mapping(agents, obs, act, "by_space") == {
        "adversary_0": "adversary",
        "agent_0": "agent",
        "agent_1": "agent",
    }
    assert resolve_mapping(agents, obs, act, "tests.test_multiagent:_by_first_letter") == {
        "adversary_0": "a",
        "agent_0": "a",
        "agent_1": "a",
    }
    with pytest.raises(ValueError, match="cannot load it"):
        resolve_mapping(agents, obs, act, "tests.test_multiagent:nope")


def _by_first_letter(agent: str) -> str:
    return agent[0]


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"policy_mapping": "everyone"}, "policy_mapping must be one of"),
        ({"mapping": "shared"}, "unknown key 'mapping'"),
        ({"agent_id_one_hot": "yes"}, "agent_id_one_hot must be True or False"),
        ({"policies": {"p": {"lr": 1.0}}}, r"policies\['p'\] must be"),
        ({"policies": {"p": {"model": {"fcnet_hidens": [8]}}}}, r"policies\['p'\].model"),
    ],
)
def test_bad_multiagent_blocks_are_refused(block: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PPOConfig(multiagent=block)


# --- lanes ----------------------------------------------------------------------------------
def test_lanes_follow_agents_that_come_and_go() -> None:
    from rlblocks.envs.multiagent_zoo import parallel_env

    hub = MultiAgentVectorEnv(parallel_env, 3, "by_space", name="zoo")
    assert hub.policy_ids == ("scout", "pilot")
    rng = np.random.default_rng(0)
    raw = {pid: hub.reset_lanes(pid, seed=5) for pid in hub.policy_ids}
    live = {pid: hub.live_lanes(pid) for pid in hub.policy_ids}
    assert all(len(raw[p]) == 6 for p in raw)
    acted_while_idle = 0
    for _ in range(60):
        actions = {p: rng.integers(0, hub.specs[p].action_space.n, 6) for p in hub.policy_ids}
        results = hub.step(actions)
        for pid, res in results.items():
            # exactly the lanes that held an agent acted; idle lanes got nothing
            np.testing.assert_array_equal(res.valid, live[pid])
            assert not res.rewards[~res.valid].any()
            assert not (res.terminated | res.truncated)[~res.valid].any()
            # a lane starts a trajectory when an agent enters it or re-enters after a done
            entered = res.live & ~res.valid
            assert (res.starts[entered]).all()
            acted_while_idle += int((res.starts & ~res.live).sum())
            live[pid] = res.live
    assert acted_while_idle == 0
    assert hub.episodes_total > 5
    returns = [r for values in hub.agent_returns.values() for r in values]
    assert returns and all(-1e-9 <= r <= 1.0 + 1e-9 for r in returns)
    hub.close()


# --- the trainer ----------------------------------------------------------------------------
def test_trainer_trains_saves_restores_and_evaluates(tmp_path: Path) -> None:
    from rlblocks.train import MultiAgentPPOTrainer, restore_trainer

    trainer = MultiAgentPPOTrainer(
        {"env": ZOO, **TINY, "multiagent": {"policy_mapping": "by_space"}}, run_dir=tmp_path
    )
    first = trainer.train()
    for key in (
        "episode_return_mean",
        "agent_episode_return_mean/pilot_0",
        "module_episode_return_mean/scout",
        "policy_loss/scout",
        "policy_loss/pilot",
        "agent_steps_per_s",
    ):
        assert key in first
    assert first["timesteps_total"] == 64 and first["agent_timesteps_total"] > 64
    path = trainer.save()
    second = trainer.train()  # the uninterrupted run
    weights = {
        p: {k: v.clone() for k, v in m.state_dict().items()} for p, m in trainer.models.items()
    }
    trainer.close()
    resumed = restore_trainer(path)  # its envs pickle: it continues exactly, no warning
    assert isinstance(resumed, MultiAgentPPOTrainer) and resumed.iteration == 1
    again = resumed.train()
    assert again["training_iteration"] == 2 and again["timesteps_total"] == 128
    for key in ("policy_loss/scout", "vf_loss/pilot", "agent_timesteps_total", "episodes_total"):
        assert again[key] == second[key], key
    for pid, model in resumed.models.items():
        for name, tensor in model.state_dict().items():
            assert tensor.equal(weights[pid][name]), (pid, name)
    result = resumed.evaluate(3)
    assert result["episodes"] == 3 and "agent_episode_return_mean/scout_0" in result
    obs = {"scout_0": np.zeros(3, np.float32), "pilot_1": {"cue": 2, "noise": np.zeros(2)}}
    actions, _ = resumed.compute_actions(obs)
    assert actions["scout_0"] in range(3) and actions["pilot_1"] in range(5)
    resumed.close()


def test_aec_envs_are_converted_and_agents_stay_in_their_own_action_space() -> None:
    from rlblocks.train import MultiAgentPPOTrainer

    # the env raises a ValueError for any action outside the acting agent's own space
    trainer = MultiAgentPPOTrainer(
        {"env": "rlblocks.envs.multiagent_zoo:env", **TINY, "train_batch_size": 256}
    )
    assert trainer.hub.specs["shared"].action_space == Discrete(5)
    for _ in range(3):
        trainer.train()
    assert trainer.agent_timesteps_total > 3 * 256
    trainer.close()


def test_single_agent_trainer_points_to_the_multi_agent_one() -> None:
    from rlblocks.train import PPOTrainer

    with pytest.raises(ValueError, match="MultiAgentPPOTrainer"):
        PPOTrainer({"env": ZOO, **TINY})


def test_unknown_policy_in_config_is_refused() -> None:
    from rlblocks.train import MultiAgentPPOTrainer

    with pytest.raises(ValueError, match=r"names \['pilots'\], which the mapping"):
        MultiAgentPPOTrainer(
            {"env": ZOO, **TINY, "multiagent": {"policies": {"pilots": {"model": {}}}}}
        )


def test_cli_trains_resumes_and_evaluates_a_multiagent_env(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlblocks.cli import main

    run = tmp_path / "run"
    base = ["--no-progress", "--stop-timesteps"]
    sets = ["--set", "num_envs=2", "--set", "train_batch_size=64", "--set", "num_sgd_iter=1"]
    assert main(["train", "--env", ZOO, *sets, "--run-dir", str(run), *base, "128"]) == 0
    config = json.loads((run / "config.json").read_text())
    assert config["multiagent_policies"]["shared"]["agents"] == [
        "scout_0",
        "scout_1",
        "pilot_0",
        "pilot_1",
    ]
    assert main(["train", "--resume", str(run), *base, "192"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run), "--episodes", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["episodes"] == 2 and "agent_episode_return_mean/pilot_0" in result
    header = (run / "progress.csv").read_text().splitlines()[0].split(",")
    assert (
        "agent_episode_return_mean/scout_0" in header
        and "module_episode_return_mean/shared" in header
    )


def test_tuple_actions_with_equal_spaces_need_no_union() -> None:
    space = Tuple((Discrete(2), Box(-1, 1, (1,))))
    spec = UnionSpec.build(
        {"a": Box(-1, 1, (1,)), "b": Box(-1, 1, (1,))}, dict.fromkeys("ab", space)
    )
    assert spec.action_space == space and spec.observation_space == Box(-1, 1, (1,))


@pytest.mark.native
def test_export_writes_one_artifact_per_policy_that_acts_as_the_trainer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("onnxruntime", reason="the export extra")
    from rlblocks.cli import main
    from rlblocks.export.evaluate import load_exported
    from rlblocks.export.sidecar import read_sidecar, space_from_json
    from rlblocks.train import MultiAgentPPOTrainer

    trainer = MultiAgentPPOTrainer(
        {"env": ZOO, **TINY, "multiagent": {"policy_mapping": "by_space"}}, run_dir=tmp_path
    )
    trainer.train()
    trainer.save()
    capsys.readouterr()
    assert main(["export", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    rng = np.random.default_rng(1)
    for pid in ("scout", "pilot"):
        artifact = tmp_path / f"policy_{pid}.onnx"
        assert f"exported: {artifact}" in printed
        side = read_sidecar(artifact)["multiagent"]
        assert side["policy_id"] == pid and side["agents"] == [f"{pid}_0", f"{pid}_1"]
        # the sidecar's spaces rebuild the union the artifact reads
        spec = UnionSpec.build(
            {a: space_from_json(s) for a, s in side["agent_observation_spaces"].items()},
            {a: space_from_json(s) for a, s in side["agent_action_spaces"].items()},
            side["agent_id_one_hot"],
        )
        exported = load_exported(artifact)
        agents = side["agents"]
        obs = {a: sample_value(trainer.hub.obs_spaces[a], rng) for a in agents}
        greedy, _ = trainer.compute_actions(obs)
        actions, _ = exported.compute_actions([spec.value(a, obs[a]) for a in agents])
        assert [spec.agent_action(a, actions[i]) for i, a in enumerate(agents)] == [
            greedy[a] for a in agents
        ]
    trainer.close()


@pytest.mark.parametrize(
    "model",
    [
        {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4, "lstm_use_prev_action": True},
        {"use_attention": True, "attention_dim": 8, "attention_memory_inference": 2},
    ],
    ids=["lstm", "attention"],
)
def test_recurrent_models_train_per_lane(model: dict[str, Any]) -> None:
    from rlblocks.train import MultiAgentPPOTrainer

    trainer = MultiAgentPPOTrainer({"env": ZOO, **TINY, "model": {"fcnet_hiddens": [8], **model}})
    for _ in range(2):
        trainer.train()
    batch_lanes = trainer.policies["shared"].runner.num_envs
    assert batch_lanes == 2 * 4  # 2 copies x 4 possible agents
    assert trainer.evaluate(2)["episodes"] == 2
    trainer.close()
