"""The env-to-module pipeline of a run: :func:`env_to_module` picks the pieces from the model
config, the observation filter and the Atari switch.

Examples:
    >>> factory = env_to_module({"fcnet_hiddens": [64]}, "MeanStdFilter")
    >>> [type(piece).__name__ for piece in factory()]
    ['FlattenObservationsBatched', 'MeanStdFilterBatched']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlblocks.config import ModelConfig
from rlblocks.rllib.connectors.atari_frames import AtariFramesBatched
from rlblocks.rllib.connectors.flatten_observations import FlattenObservationsBatched
from rlblocks.rllib.connectors.mean_std_filter import MeanStdFilterBatched
from rlblocks.rllib.connectors.model_view_observations import ModelViewObservations

__all__ = ["FILTERS", "EnvToModule", "env_to_module"]

#: Accepted ``observation_filter`` values.
FILTERS = ("NoFilter", "MeanStdFilter", "ConcurrentMeanStdFilter")


class EnvToModule:
    """The env-to-module connector factory, the value for
    ``config.env_runners(env_to_module_connector=...)``: called by RLlib as
    ``(env, spaces, device)``, it returns the pieces (picklable, so it travels to env
    runners).

    Args:
        model_config: rlblocks model config (preprocessor options).
        observation_filter: ``"NoFilter"`` or ``"MeanStdFilter"``
            (``"ConcurrentMeanStdFilter"`` is the same here: each env runner has its own).
        sequence_max_len: Overrides the config's ``sequence_max_len`` (the most items of a
            gymnasium ``Sequence`` observation; None: keep it).
        atari: Raw RGB Atari frames: the DeepMind frame pipeline
            (:class:`AtariFramesBatched` with the config's ``dim`` and ``framestack``).
        stack_in_episode: With ``atari``: False keeps one frame per episode step (a replay
            buffer stores each frame once; pair it with
            :func:`rlblocks.rllib.atari_replay_buffer_config`), True the stacked frames
            (what on-policy learners such as PPO's read).

    Raises:
        ValueError: An unknown filter, an invalid model config or ``sequence_max_len``, a
            filter together with ``atari``, or ``stack_in_episode=False`` without ``atari``.
    """

    def __init__(
        self,
        model_config: Mapping[str, Any] | None = None,
        observation_filter: str = "NoFilter",
        sequence_max_len: int | None = None,
        atari: bool = False,
        stack_in_episode: bool = True,
    ) -> None:
        if observation_filter not in FILTERS:
            raise ValueError(
                f"observation_filter must be one of {FILTERS}, got {observation_filter!r}"
            )
        self.model_config = ModelConfig.from_dict(model_config).to_dict()
        self.observation_filter = observation_filter
        self.sequence_max_len = sequence_max_len
        self.atari = bool(atari)
        self.stack_in_episode = bool(stack_in_episode)
        if self.atari and observation_filter != "NoFilter":
            raise ValueError(
                "atari=True frames are not mean/std filtered; use observation_filter='NoFilter'"
            )
        if not self.stack_in_episode and not self.atari:
            raise ValueError(
                "stack_in_episode=False is an option of the Atari frame pipeline; give atari=True"
            )
        FlattenObservationsBatched(
            model_config=self.model_config, sequence_max_len=sequence_max_len
        )  # validates early

    def __call__(self, env: Any = None, spaces: Any = None, device: Any = None) -> list[Any]:
        if self.atari:
            cfg = self.model_config
            return [
                AtariFramesBatched(
                    dim=cfg["dim"],
                    framestack=4 if cfg["framestack"] else 1,
                    stack_in_episode=self.stack_in_episode,
                )
            ]
        pieces: list[Any] = [
            FlattenObservationsBatched(
                model_config=self.model_config, sequence_max_len=self.sequence_max_len
            )
        ]
        if self.observation_filter != "NoFilter":
            pieces.append(MeanStdFilterBatched())
        cfg = self.model_config
        if (
            cfg["custom_model"]
            or (cfg["use_lstm"] and (cfg["lstm_use_prev_action"] or cfg["lstm_use_prev_reward"]))
            or (
                cfg["use_attention"]
                and (cfg["attention_use_n_prev_actions"] or cfg["attention_use_n_prev_rewards"])
            )
        ):
            # the model may read past observations/actions/rewards (its view requirements)
            pieces.append(ModelViewObservations(model_config=cfg))
        return pieces


#: The factory's name in RLlib's style: ``env_to_module(model_config, "MeanStdFilter")``.
env_to_module = EnvToModule
