"""The export of an RLlib module whose observation is ``Dict(action_mask, observations)`` with
an image ``observations`` (tictactoe's 3x3x2 board: the catalog's vision net), driven without
starting Ray: the exported graph takes the flat row of the run's preprocessor and must give
the module's own (masked) outputs and greedy actions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Dict, Discrete

pytest.importorskip("ray")

from ray.rllib.core.columns import Columns  # noqa: E402
from rlblocks.export.graph import PolicyGraph  # noqa: E402
from rlblocks.masks import MASK_KEY, OBS_KEY  # noqa: E402
from rlblocks.models.visionnet import VisionNetwork  # noqa: E402
from rlblocks.preprocessors import get_preprocessor  # noqa: E402
from rlblocks.rllib import rl_module_spec  # noqa: E402
from rlblocks.rllib.export import module_policy  # noqa: E402

pytestmark = pytest.mark.ray


@pytest.mark.parametrize("algo", ["PPO", "DQN"])
def test_masked_image_module_exports_its_own_greedy_actions(algo: str) -> None:
    board = Box(0.0, 1.0, (3, 3, 2), np.float32)
    space = Dict({MASK_KEY: Box(0, 1, (9,), np.int8), OBS_KEY: board})
    spec = rl_module_spec({}, algo=algo)
    spec.observation_space, spec.action_space = space, Discrete(9)
    module = spec.build()
    module.eval()
    net = module.model if algo == "PPO" else module.q_model.base_model  # DQN: dueling heads
    assert isinstance(net, VisionNetwork)  # the image reaches the conv net unflattened

    rng = np.random.default_rng(0)
    n = 6
    images = rng.random((n, 3, 3, 2), dtype=np.float32)
    masks = (rng.random((n, 9)) < 0.5).astype(np.int8)
    masks[np.arange(n), rng.integers(0, 9, n)] = 1  # a legal action in every row
    prep = get_preprocessor(space)(space, {})
    rows = np.stack(
        [prep.transform({MASK_KEY: m, OBS_KEY: im}) for m, im in zip(masks, images, strict=True)]
    ).astype(np.float32)

    graph = PolicyGraph(module_policy(module, {}, None), prep.shape)
    with torch.no_grad():
        action, dist_inputs, _ = graph(torch.from_numpy(rows))
        obs = {MASK_KEY: torch.from_numpy(masks), OBS_KEY: torch.from_numpy(images)}
        out = module.forward_inference({Columns.OBS: obs})
    if algo == "PPO":
        expected = out[Columns.ACTION_DIST_INPUTS]
        torch.testing.assert_close(dist_inputs, expected)
        greedy = expected.argmax(-1)
    else:
        greedy = out[Columns.ACTIONS]
    assert torch.equal(action, torch.as_tensor(greedy, dtype=action.dtype))
    assert bool((torch.from_numpy(masks).gather(1, action[:, None]) == 1).all())
    # what `rlblocks export` does: torch.export traces it (main: IndexError in the conv net)
    torch.export.export(graph, (torch.from_numpy(rows),))
