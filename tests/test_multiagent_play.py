"""The one multi-agent evaluation loop (rlblocks.train.play): native and exported
policies drive it through the LaneActor protocol and give the same returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="pettingzoo is the multiagent extra")

ZOO = "rlblocks.envs.multiagent_zoo:parallel_env"
TINY = {"num_envs": 2, "train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 1}


class _Counting:
    """A LaneActor taking the zero action in every lane, counting its restarts."""

    def __init__(self, space: Any) -> None:
        self.space = space
        self.restarts = 0

    def initial_state(self, n: int) -> list[Any] | None:
        return [np.zeros((n, 1), np.float32)]

    def initial_prev(self, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        return None, np.zeros((n, 2), np.float32)

    def observe(self, raw: list[Any], x: Any, fresh: np.ndarray | None) -> Any:
        return raw

    def act(self, x: Any, state: Any, pa: Any, pr: Any) -> tuple[Any, Any]:
        assert pr.shape == (len(x), 2)
        zero = np.zeros(self.space.shape, self.space.dtype)
        return np.stack([zero] * len(x)), [s + 1.0 for s in state]

    def restart(self, state: list[Any], fresh: np.ndarray) -> list[Any]:
        self.restarts += len(fresh)
        out = [np.array(s) for s in state]
        for s in out:
            s[fresh] = 0.0
        return out


def test_play_episodes_drives_any_lane_actor_until_the_episodes_end() -> None:
    from rlblocks.multiagent.envs import MultiAgentVectorEnv
    from rlblocks.train.multiagent import multiagent_creator
    from rlblocks.train.play import LaneActor, play_episodes
    from rlblocks.train.trainer_config import PPOConfig

    make = multiagent_creator(PPOConfig.from_dict({"env": ZOO}))
    hub = MultiAgentVectorEnv(make, 1, "by_space", False, True, "zoo", smoothing=3)
    try:
        actors = {pid: _Counting(hub.specs[pid].action_space) for pid in hub.policy_ids}
        assert all(isinstance(a, LaneActor) for a in actors.values())
        play_episodes(hub, actors, 3, 11)
        assert hub.episodes_total >= 3 and len(hub.episode_returns) >= 3
        assert sum(a.restarts for a in actors.values()) > 0
    finally:
        hub.close()


@pytest.mark.native
def test_recurrent_exported_policies_evaluate_as_the_trainer(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime", reason="the export extra")
    from rlblocks.cli import main
    from rlblocks.export.evaluate import load_exported
    from rlblocks.export.evaluate_multiagent import evaluate_exported_multiagent
    from rlblocks.train import MultiAgentPPOTrainer
    from rlblocks.train.multiagent import multiagent_creator

    model = {
        "fcnet_hiddens": [8],
        "use_lstm": True,
        "lstm_cell_size": 8,
        "max_seq_len": 4,
        "lstm_use_prev_action": True,
        "lstm_use_prev_reward": True,
    }
    trainer = MultiAgentPPOTrainer({"env": ZOO, **TINY, "model": model}, run_dir=tmp_path)
    trainer.train()
    trainer.save()
    assert main(["export", str(tmp_path)]) == 0
    native = trainer.evaluate(3, seed=5)
    policies = {pid: load_exported(tmp_path / f"policy_{pid}.onnx") for pid in trainer.policies}
    cfg = trainer.config
    exported = evaluate_exported_multiagent(
        policies,
        multiagent_creator(cfg),
        cfg.multiagent,
        3,
        trainer.evaluation_seed(5),
        clip_actions=cfg.clip_actions,
        name=cfg.env_name,
    )
    trainer.close()
    assert exported["episode_returns"] == native["episode_returns"]
    for key, value in native.items():
        if key.startswith(("agent_", "module_")):
            assert exported[key] == value, key
