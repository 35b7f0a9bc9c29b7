"""Two simulated Ray nodes (``ray.cluster_utils.Cluster``): the RLlib backend connects by
address and runs its env runners on both."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402
from rlblocks.rllib.trainer import RLlibTrainer  # noqa: E402


def test_env_runners_on_two_nodes_through_an_address(tmp_path):
    if ray.is_initialized():
        ray.shutdown()
    # one CPU per node and one CPU per env runner: the two runners cannot share a node
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        trainer = RLlibTrainer(
            {
                "env": "CartPole-v1",
                "num_envs": 2,
                "train_batch_size": 400,
                "sgd_minibatch_size": 100,
                "num_sgd_iter": 1,
                "model": {"fcnet_hiddens": [16]},
            },
            tmp_path / "run",
            num_env_runners=2,
            num_cpus_per_env_runner=1.0,
            ray_address=cluster.address,
        )
        try:
            metrics = trainer.train()
            nodes = trainer.algo.env_runner_group.foreach_env_runner(
                lambda w: ray.get_runtime_context().get_node_id(), local_env_runner=False
            )
        finally:
            trainer.close()
        assert metrics["timesteps_total"] >= 400
        assert len(nodes) == 2 and len(set(nodes)) == 2
        assert set(nodes) == {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    finally:
        ray.shutdown()
        cluster.shutdown()
