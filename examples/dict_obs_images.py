"""Dict observations with an image: the built-in multi-input model (ComplexInputNetwork).

Re-creates RLlib's models guide, "A multi-input capable model for Tuple observation spaces" section:
for a Dict observation holding an image and flat parts, the catalog builds a
``ComplexInputNetwork`` that runs a convolutional tower (``conv_filters``) on the image,
one-hot encodes the discrete part, concatenates everything with the flat Box part and
feeds a fully connected head (``post_fcnet_hiddens``).

The environment below needs both inputs: a 12x12 image shows one lit pixel, on the left or
the right half; ``flip`` (``Discrete(2)``) says whether to move toward it or away from it;
``noise`` is an irrelevant Box. Action 0 = left, 1 = right; reward +1 for the correct side,
episodes last 20 steps, so the best mean return is 20 and guessing gives 10.

Run: ``python examples/dict_obs_images.py`` (until mean return 19), ``--smoke`` for a few
seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from _runner import budget, example_parser, report, train
from gymnasium import spaces
from rlblocks.train import PPOConfig

SIZE = 12


class LitSideEnv(gym.Env):
    """Pick the side of the lit pixel, or the other side when ``flip`` is 1.

    Args:
        episode_len: Steps per episode.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, episode_len: int = 20):
        self.episode_len = episode_len
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0.0, 1.0, (SIZE, SIZE, 1), np.float32),
                "flip": spaces.Discrete(2),
                "noise": spaces.Box(-1.0, 1.0, (3,), np.float32),
            }
        )
        self.action_space = spaces.Discrete(2)
        self._answer = 0
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        reward = 1.0 if int(action) == self._answer else 0.0
        self._t += 1
        return self._observe(), reward, False, self._t >= self.episode_len, {}

    def _observe(self) -> dict[str, Any]:
        rng = self.np_random
        row, col = int(rng.integers(SIZE)), int(rng.integers(SIZE))
        flip = int(rng.integers(2))
        image = np.zeros((SIZE, SIZE, 1), np.float32)
        image[row, col, 0] = 1.0
        self._answer = int(col >= SIZE // 2) ^ flip
        noise = rng.uniform(-1.0, 1.0, 3).astype(np.float32)
        return {"image": image, "flip": flip, "noise": noise}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Trains PPO on the Dict-observation env; returns the last training result."""
    parser = example_parser(__doc__, stop_reward=19.0, stop_timesteps=300_000)
    args = parser.parse_args(argv)

    config = PPOConfig.from_dict(
        {
            "env": lambda env_config: LitSideEnv(**env_config),
            "model": {
                # 12x12 -> (same, stride 2) 6x6 -> (valid 6x6) 1x1x32.
                "conv_filters": [[16, [3, 3], 2], [32, [6, 6], 1]],
                "post_fcnet_hiddens": [64],
            },
            **budget(args.smoke, batch=(80, 1600), minibatch=(40, 400)),
            "lr": 1e-3,
            "gamma": 0.5,
            "seed": args.seed,
        }
    )
    result = train(config, args)
    report("dict obs with images", result, " (best 20)")
    return result


if __name__ == "__main__":
    main()
