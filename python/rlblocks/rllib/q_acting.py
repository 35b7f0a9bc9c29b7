"""rlblocks' DQN and SAC RLModules acting on numpy observations, for
:class:`~rlblocks.rllib.env_runner.VectorEnvRunner`.

RLlib's modules draw their random numbers in their own order (DQN draws the uniform action
before the epsilon test; SAC samples through the bound distribution), so these functions
follow the module's draws op for op, with the forward pass on plain arrays or tensors
instead of the module's wrappers. The runner's episodes are the same as through the module
(``tests/rllib/test_env_runner.py`` compares them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlblocks.rllib._ray import Columns
from rlblocks.rllib.distribution import RLBlocksDistribution
from rlblocks.rllib.qlearning import RLBlocksDQNRLModule, RLBlocksSACRLModule, uniform_actions
from rlblocks.train.fast.dense_layers import FCLayers
from rlblocks.train.fast.q_layers import DenseQ

__all__ = ["act_sac", "dense_q", "epsilon_greedy", "plain_sac_actor"]


def dense_q(module: Any) -> DenseQ | None:
    """The numpy Q-network of rlblocks' DQN ``module`` (fully connected, one atom, no
    action mask), else None."""
    if type(module) is not RLBlocksDQNRLModule or module.masked or module.num_atoms != 1:
        return None
    return DenseQ.from_body(module.q_model, module.uses_dueling)


def plain_sac_actor(module: Any) -> FCLayers | None:
    """The actor of rlblocks' SAC ``module`` (Box actions, the catalog's FC network) as
    plain tensors, when its distribution is rlblocks' (the module's own pass and draw
    without the module and distribution wrappers); else None."""
    if type(module) is not RLBlocksSACRLModule or module.discrete or module.masked:
        return None
    for dist_cls in (
        module.get_exploration_action_dist_cls(),
        module.get_inference_action_dist_cls(),
    ):
        if not (isinstance(dist_cls, type) and issubclass(dist_cls, RLBlocksDistribution)):
            return None
        if dist_cls.dist_fn is not module.dist_fn or dist_cls.model is not module.pi:
            return None
    return module._plain(module.pi)


def act_sac(
    module: Any, layers: FCLayers, obs: np.ndarray, explore: bool, device: Any
) -> tuple[np.ndarray, dict[str, Any]]:
    """``(actions, extra model outputs)``: what the general path computes for rlblocks'
    SAC ``module`` (its ``_pi``, the bound distribution's draw or deterministic action,
    ``logp`` of it), op for op."""
    if module.training:
        module.eval()
    with torch.no_grad():
        out = layers.forward_graph(torch.from_numpy(obs).to(device))
        dist = module.dist_fn(out, module.pi)
        actions = dist.sample() if explore else dist.deterministic_sample()
        logp = dist.logp(actions)
    extra = {
        Columns.ACTION_DIST_INPUTS: out.cpu().numpy(),
        Columns.ACTION_LOGP: logp.cpu().numpy(),
    }
    return actions.cpu().numpy(), extra


def epsilon_greedy(module: Any, q_net: DenseQ, obs: np.ndarray, explore: bool, t: int) -> Any:
    """``RLBlocksDQNRLModule``'s actions with the Q-values computed in numpy: the same
    random draws from torch's generator (a uniform action, then whether to take it)."""
    q = q_net.forward_numpy(np.asarray(obs, np.float32))
    greedy = q.argmax(axis=1)
    if not explore:
        return greedy
    schedule = module.epsilon_schedule
    schedule.update(t)
    epsilon = float(schedule.get_current_value())
    random = uniform_actions(torch.from_numpy(q), masked=False).numpy()
    return np.where(torch.rand(q.shape[0]).numpy() < epsilon, random, greedy)
