"""``rlblocks export`` of ``--backend rllib`` runs: the artifact acts as the run's module.

One tiny run per algorithm (one iteration, [16] hidden units) in one local Ray shared by the
module; each export is compared with the checkpoint's module run through the env runner's
own path (the run's connector pieces on RLlib episodes, ``forward_inference``, RLlib's
deterministic action and its ``unsquash_action`` / ``clip_action``).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks.cli import main
from rlblocks.export.sidecar import read_sidecar

ray = pytest.importorskip("ray")
pytest.importorskip("onnxruntime")

from rlblocks.export import OnnxPolicy, TorchExportPolicy  # noqa: E402
from rlblocks.rllib._ray import Columns  # noqa: E402
from rlblocks.rllib.algo_config import build_algo_config, make_env, run_env_to_module  # noqa: E402
from rlblocks.rllib.checkpoints import load_module, newest_checkpoint  # noqa: E402
from rlblocks.rllib.connectors import MeanStdFilterBatched  # noqa: E402
from rlblocks.rllib.export import export_rllib_policies as export_policies  # noqa: E402
from rlblocks.rllib.export import export_rllib_policy as export_policy  # noqa: E402
from rlblocks.rllib.trainer import RLlibTrainer  # noqa: E402

pytestmark = pytest.mark.native

PPO = {
    "env": "CartPole-v1",
    "num_envs": 1,
    "train_batch_size": 64,
    "sgd_minibatch_size": 32,
    "num_sgd_iter": 1,
    "model": {"fcnet_hiddens": [16]},
}
Q = {
    "env": "CartPole-v1",
    "num_envs": 1,
    "model": {"fcnet_hiddens": [16]},
    # the native DQNConfig / SACConfig keys, as on the native backend
    "learning_starts": 32,
    "train_batch_size": 32,
    "timesteps_per_iteration": 64,
}
RUNS: dict[str, tuple[dict[str, Any], str, int]] = {
    "ppo": (PPO, "PPO", 0),
    # Box actions (unsquashed to Pendulum's bounds) and a mean/std filter baked in
    "ppo_box": ({**PPO, "env": "Pendulum-v1", "observation_filter": "MeanStdFilter"}, "PPO", 0),
    "ppo_lstm": (
        {**PPO, "model": {"fcnet_hiddens": [16], "use_lstm": True, "lstm_cell_size": 8}},
        "PPO",
        0,
    ),
    "dqn": (Q, "DQN", 0),
    "sac": ({**Q, "env": "Pendulum-v1"}, "SAC", 0),
    # RLlib's action-mask form with a mean/std filter of its observations: the export
    # widens the filter to the row, the mask passed through
    "ppo_masked_filter": (
        {**PPO, "env": "rlblocks/MaskedBandit-v0", "observation_filter": "MeanStdFilter"},
        "PPO",
        0,
    ),
    # scouts (Discrete(3)) and pilots (Discrete(5)) sharing one module: an action mask
    "multiagent": (
        {
            **PPO,
            "env": "rlblocks.envs.multiagent_zoo:parallel_env",
            "multiagent": {"policy_mapping": "shared"},
        },
        "PPO",
        0,
    ),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, local_ray: Any) -> Any:
    """One tiny trained run per entry of RUNS, trained on first use (on the tests' Ray)."""
    root = tmp_path_factory.mktemp("rllib_export")
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            config, algo, runners = RUNS[name]
            trainer = RLlibTrainer(config, root / name, algo=algo, num_env_runners=runners)
            try:
                trainer.train()
                trainer.save()
            finally:
                trainer.close()
            made[name] = root / name
        return made[name]

    return get


def observations(run: Path, n: int, seed: int = 0) -> list[Any]:
    """``n`` raw observations of the run's env under random actions."""
    ckpt = newest_checkpoint(run)
    env = make_env(ckpt.trainer_config, ckpt.backend["algo"])
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    while len(out) < n:
        out.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return out


class ModuleActor:
    """The run's module acting as its env runner acts (deterministically): the connector
    pieces on RLlib episodes, ``forward_inference`` and the env runner's action mapping."""

    def __init__(self, run: Path) -> None:
        from ray.rllib.utils.spaces.space_utils import (
            clip_action,
            get_base_struct_from_space,
            unsquash_action,
        )

        ckpt = newest_checkpoint(run)
        config = ckpt.trainer_config
        algo = ckpt.backend["algo"]
        self.module = load_module(ckpt.module_dir)
        env = make_env(config, algo)
        self.obs_space, self.action_space = env.observation_space, env.action_space
        env.close()
        runner = build_algo_config(config, algo, ckpt.backend["num_env_runners"])
        struct = get_base_struct_from_space(self.action_space)
        if runner.normalize_actions:
            self.to_env = lambda a: unsquash_action(a, struct)
        elif runner.clip_actions:
            self.to_env = lambda a: clip_action(a, struct)
        else:
            self.to_env = lambda a: a
        self.pieces = run_env_to_module(config, algo, training=False)()
        space = self.obs_space
        for piece in self.pieces:
            piece.input_action_space = self.action_space
            piece.input_observation_space = space
            space = piece.observation_space
            if isinstance(piece, MeanStdFilterBatched):
                piece.update_stats = False
                piece.set_state(ckpt.filter_state)
        self.stateful = bool(self.module.get_initial_state())

    def initial_state(self, b: int) -> dict[str, torch.Tensor]:
        return {
            k: torch.from_numpy(np.repeat(v[None], b, 0))
            for k, v in self.module.get_initial_state().items()
        }

    def act(self, obs: list[Any], state: dict[str, torch.Tensor] | None = None) -> Any:
        from ray.rllib.env.single_agent_episode import SingleAgentEpisode

        episodes = []
        for o in obs:
            ep = SingleAgentEpisode(
                observation_space=self.obs_space, action_space=self.action_space
            )
            ep.add_env_reset(observation=o)
            episodes.append(ep)
        for piece in self.pieces:
            piece(rl_module=self.module, batch={}, episodes=episodes, explore=False, shared_data={})
        rows = [ep.get_observations(-1) for ep in episodes]
        if isinstance(rows[0], dict):  # the action-mask form
            obs_in: Any = {k: torch.as_tensor(np.stack([r[k] for r in rows])) for k in rows[0]}
        else:
            x = torch.as_tensor(np.stack(rows))
            obs_in = x[:, None] if self.stateful else x
        batch: dict[str, Any] = {Columns.OBS: obs_in}
        if self.stateful:
            batch[Columns.STATE_IN] = state if state is not None else self.initial_state(len(obs))
        with torch.no_grad():
            out = self.module.forward_inference(batch)
        state_out = out.get(Columns.STATE_OUT)
        if Columns.ACTIONS in out:
            actions = out[Columns.ACTIONS].numpy()
        else:
            logits = out[Columns.ACTION_DIST_INPUTS]
            logits = logits[:, 0] if self.stateful else logits
            dist = self.module.get_inference_action_dist_cls().from_logits(logits)
            actions = dist.to_deterministic().sample().numpy()
        return self.to_env(actions), state_out


def assert_same_actions(exported: Any, actor: ModuleActor, obs: list[Any]) -> None:
    mine, state = exported.compute_actions(obs)
    theirs, their_state = actor.act(obs)
    if isinstance(actor.action_space, gym.spaces.Discrete):
        np.testing.assert_array_equal(mine, theirs)
    else:
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)
    assert actor.action_space.contains(np.asarray(mine[0], actor.action_space.dtype))
    if actor.stateful:  # a second step from the returned state
        assert len(state) == len(their_state)
        for i, s in enumerate(state):
            np.testing.assert_allclose(s, their_state[str(i)].numpy(), rtol=1e-5, atol=1e-5)
        mine, _ = exported.compute_actions(obs[::-1], state)
        theirs, _ = actor.act(obs[::-1], their_state)
        np.testing.assert_array_equal(mine, theirs)


# APPO's checkpoint (an asynchronous algorithm's, one env runner) is exported and played
# against its module by tests/rllib/test_cli.py's APPO run; IMPALA's module class is PPO's
@pytest.mark.parametrize("name", ["ppo", "ppo_box", "ppo_lstm", "dqn", "sac", "ppo_masked_filter"])
def test_export_acts_as_the_module(runs: Any, name: str) -> None:
    run = runs(name)
    path = export_policy(run)
    assert path == run / "policy.onnx"
    policy = OnnxPolicy(path)
    sidecar = read_sidecar(path)
    assert sidecar["rllib"]["algo"] == RUNS[name][1]
    filtered = name in ("ppo_box", "ppo_masked_filter")
    assert sidecar["observation"]["filter"]["baked_in"] == filtered
    assert policy.recurrent == (name == "ppo_lstm")
    obs = observations(run, 300)
    assert_same_actions(policy, ModuleActor(run), obs)


def test_filter_state_is_baked_in(runs: Any) -> None:
    """The graph normalises with the saved statistics: its distribution inputs for raw rows
    are the module's for the filtered rows, not for the raw ones."""
    run = runs("ppo_box")
    policy = OnnxPolicy(export_policy(run))
    actor = ModuleActor(run)
    filt = next(p for p in actor.pieces if isinstance(p, MeanStdFilterBatched)).filter
    assert filt.running_stats.n > 0
    raw = np.stack(observations(run, 200, seed=1)).astype(np.float32)
    got = policy.forward(raw)["dist_inputs"]

    def logits(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = actor.module.forward_inference({Columns.OBS: torch.as_tensor(x)})
        return out[Columns.ACTION_DIST_INPUTS].numpy()

    np.testing.assert_allclose(got, logits(filt(raw, update=False)), rtol=1e-5, atol=1e-5)
    assert not np.allclose(got, logits(raw), atol=1e-3)


def test_cli_export_torch_export_and_checkpoint_dir(
    runs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = runs("dqn")
    ckpt = newest_checkpoint(run).path
    out = tmp_path / "q.pt2"
    assert main(["export", str(ckpt), "--format", "torch-export", "--out", str(out)]) == 0
    assert f"exported: {out}" in capsys.readouterr().out
    assert_same_actions(TorchExportPolicy(out), ModuleActor(run), observations(run, 200))
    assert export_policies(run, tmp_path)["default"] == tmp_path / "policy.onnx"


def test_evaluate_exported_on_an_rllib_run(runs: Any, capsys: pytest.CaptureFixture[str]) -> None:
    run = runs("sac")
    path = export_policy(run, run / "sac.onnx")
    assert main(["evaluate", str(run), "--episodes", "2", "--exported", str(path)]) == 0
    exported = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # the module itself, as `rlblocks evaluate RUN` runs it (in a fresh process: RLlib logs
    # its RLModule(config=...) notice once per process)
    direct = subprocess.run(
        [sys.executable, "-m", "rlblocks.cli", "evaluate", str(run), "--episodes", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert direct.returncode == 0, direct.stderr[-2000:]
    assert "RLModule(config=" not in direct.stderr  # RLlib's notice is gone
    module = json.loads(direct.stdout.strip().splitlines()[-1])
    assert exported["exported"] == str(path) and exported["episodes"] == 2
    assert exported["checkpoint"] == module["checkpoint"]
    # the same seeds, the same deterministic actions: the same returns
    np.testing.assert_allclose(exported["episode_returns"], module["episode_returns"], rtol=1e-4)


def test_load_module_drops_rllibs_config_notice(runs: Any) -> None:
    from ray.rllib.core.rl_module.rl_module import RLModule
    from ray.util.debug import reset_log_once

    module_dir = newest_checkpoint(runs("ppo")).module_dir
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("ray._common.deprecation")
    log.addHandler(handler)
    try:
        reset_log_once()
        load_module(module_dir)
        assert not [m for m in seen if "RLModule(config=" in m]
        reset_log_once()
        RLModule.from_checkpoint(str(module_dir))  # RLlib's own door: the notice (control)
        assert [m for m in seen if "RLModule(config=" in m]
    finally:
        log.removeHandler(handler)


def test_multiagent_run_exports_one_policy_per_module(
    runs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlblocks.rllib.algo_config import multiagent_env_to_module, multiagent_setup
    from rlblocks.rllib.module_actor import RLModuleActor
    from rlblocks.rllib.multiagent_envs import make_multiagent_env

    run = runs("multiagent")
    assert main(["export", str(run)]) == 0
    path = run / "policy_shared.onnx"
    assert f"exported: {path}" in capsys.readouterr().out
    with pytest.raises(ValueError, match="multi-agent run"):
        export_policy(run)
    policy = OnnxPolicy(path)
    info = read_sidecar(path)["multiagent"]
    assert info["policy_id"] == "shared" and len(info["agents"]) == 4
    assert policy.sidecar["observation"]["action_mask"]["size"] == 5
    ckpt = newest_checkpoint(run)
    config = ckpt.trainer_config
    setup = multiagent_setup(config)
    assert setup is not None
    module = RLModuleActor(load_module(ckpt.module_dir.parent / "shared"))
    env = make_multiagent_env(config, setup.mapping)
    piece = multiagent_env_to_module(config, "PPO", setup)()[0]
    piece.input_action_space = env.action_space
    piece.input_observation_space = env.observation_space
    obs, _ = env.reset(seed=0)
    compared = 0
    for _ in range(40):
        agents = [a for a in env.agents if a in obs]
        mine, _ = policy.compute_actions([obs[a] for a in agents])
        flat = piece.transform({a: obs[a] for a in agents})
        theirs, _ = module.act([flat[a] for a in agents], None, None, None)
        np.testing.assert_array_equal(mine, theirs)
        logits = policy.forward(policy.preprocess([obs[a] for a in agents]))["dist_inputs"]
        scouts = [i for i, a in enumerate(agents) if a.startswith("scout")]
        assert (logits[scouts, 3:] < -1e30).all()  # the scouts' 3 actions only
        compared += len(agents)
        obs, _, term, trunc, _ = env.step({a: int(x) for a, x in zip(agents, mine, strict=True)})
        if term["__all__"] or trunc["__all__"]:
            obs, _ = env.reset()
    env.close()
    assert compared >= 100
    # every policy's artifact acting together gives the checkpoint's returns (issue 44)
    capsys.readouterr()
    evaluate = ["evaluate", str(run), "--episodes", "3", "--seed", "2"]
    assert main(evaluate) == 0
    checkpoint = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main([*evaluate, "--exported", str(path)]) == 0
    exported = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert exported["exported"] == {"shared": str(path)}
    assert exported["episode_returns"] == checkpoint["episode_returns"]


def test_what_cannot_be_exported_is_refused(runs: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown format"):
        export_policy(runs("ppo"), fmt="tflite")
    ckpt = newest_checkpoint(runs("ppo"))
    from rlblocks.rllib.export import module_policy

    class Foreign:
        observation_space = gym.spaces.Box(-1, 1, (4,))
        action_space = gym.spaces.Discrete(2)

    with pytest.raises(ValueError, match="Foreign is not one of rlblocks' RLlib modules"):
        module_policy(Foreign(), {}, None)
    assert ckpt.module_dir.is_dir()
