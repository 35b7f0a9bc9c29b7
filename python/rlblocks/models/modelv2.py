"""``ModelV2``: RLlib's model API on top of ``torch.nn.Module``.

A model maps an input dict (``obs`` plus optional extras) and an RNN state list to
``(outputs, new_state)``; ``value_function()`` then returns the value estimate of the last
forward pass. This one piece of state between calls is what RLlib's API requires.

Both ways RLlib users write a torch model work unchanged::

    class A(ModelV2):                      # single inheritance
        def __init__(self, obs_space, action_space, num_outputs, model_config, name):
            super().__init__(obs_space, action_space, num_outputs, model_config, name)

    class B(TorchModelV2, nn.Module):      # RLlib's double-inheritance form
        def __init__(self, obs_space, action_space, num_outputs, model_config, name):
            TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
            nn.Module.__init__(self)

Examples:
    >>> import gymnasium as gym, torch
    >>> class Linear(ModelV2):
    ...     def __init__(self, obs_space, action_space, num_outputs, model_config, name):
    ...         super().__init__(obs_space, action_space, num_outputs, model_config, name)
    ...         self.layer = torch.nn.Linear(obs_space.shape[0], num_outputs)
    ...     def forward(self, input_dict, state, seq_lens):
    ...         return self.layer(input_dict["obs_flat"]), state
    >>> m = Linear(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), 2, {}, "lin")
    >>> out, state = m({"obs": torch.zeros(5, 3)})
    >>> out.shape, state
    (torch.Size([5, 2]), [])
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Dict, Tuple
from torch import nn

from rlblocks.config import ModelConfig
from rlblocks.spaces import Repeated

__all__ = ["ExportAdapter", "ModelInterface", "ModelV2", "TorchModelV2", "flatten_obs_space_size"]

_STATE_IN = "state_in_"
_NO_CONTEXT: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


def flatten_obs_space_size(space: gym.Space) -> int:
    """Number of floats in one flat (preprocessed) observation of ``space``.

    Examples:
        >>> flatten_obs_space_size(gym.spaces.Box(0, 1, (2, 3)))
        6
    """
    if space.shape is None:
        raise ValueError(f"observation space {space} has no shape; preprocess it first")
    return int(np.prod(space.shape, dtype=np.int64))


class ModelV2(nn.Module):
    """Base class of every rlblocks model (RLlib's ``TorchModelV2``; it IS an ``nn.Module``).

    Args:
        obs_space: The (preprocessed) observation space; a flattening preprocessor's
            ``observation_space`` carries the nested ``original_space``.
        action_space: The action space.
        num_outputs: Size of the output vector (e.g. the action distribution's inputs), or
            None for models that just produce features (``self.num_outputs`` is then set by
            the model to its feature size).
        model_config: The RLlib model config dict (or a validated :class:`ModelConfig`).
        name: The model's name.

    Attributes:
        model_config: The full RLlib dict (every key of ``MODEL_DEFAULTS``).
        config: The same config, typed (:class:`rlblocks.config.ModelConfig`).
        time_major: ``model_config["_time_major"]``.
        framework: Always ``"torch"``.
    """

    framework = "torch"

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any] | ModelConfig | None,
        name: str,
    ):
        # Called again (harmlessly) by RLlib-style subclasses that also run nn.Module.__init__
        # themselves: nothing registered here lives in nn.Module's registries.
        if "_parameters" not in self.__dict__:
            nn.Module.__init__(self)
        config = ModelConfig.from_dict(model_config)
        self.obs_space = obs_space
        self.action_space = action_space
        self.num_outputs = None if num_outputs is None else int(num_outputs)
        self.config = config
        self.model_config = config.to_dict()
        self.name = name or "default_model"
        self.time_major = config.time_major
        self._last_output: torch.Tensor | None = None
        self._view_requirements: dict[str, Any] | None = None

    # --- the RLlib API ----------------------------------------------------------------------
    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: torch.Tensor | None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Computes the model outputs; subclasses implement it.

        Args:
            input_dict: ``obs`` (restored to its nested structure), ``obs_flat`` (the flat
                ``[B, N]`` batch), and any extra columns (``prev_actions``, ``is_training``).
            state: The RNN state list (empty for feed-forward models).
            seq_lens: ``[num_sequences]`` lengths for RNNs, else None.

        Returns:
            ``(outputs [B, num_outputs], new_state_list)``.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement forward()")

    def value_function(self) -> torch.Tensor:
        """The value estimate ``[B]`` of the most recent ``forward`` call."""
        raise NotImplementedError(f"{type(self).__name__} does not implement value_function()")

    def get_initial_state(self) -> list[torch.Tensor]:
        """Initial RNN state (unbatched tensors); empty for feed-forward models."""
        return []

    def custom_loss(self, policy_loss: Any, loss_inputs: Any) -> Any:
        """Hook to add to or replace the policy loss; returns ``policy_loss`` unchanged."""
        return policy_loss

    def metrics(self) -> dict[str, Any]:
        """Extra statistics to report; none by default."""
        return {}

    def is_time_major(self) -> bool:
        """Whether sequences are ``[T, B, ...]`` (``_time_major``) rather than ``[B, T, ...]``."""
        return self.time_major is True

    def last_output(self) -> torch.Tensor | None:
        """The outputs of the most recent ``__call__``."""
        return self._last_output

    def variables(self, as_dict: bool = False) -> list[torch.Tensor] | dict[str, torch.Tensor]:
        """All parameters (a list), or the ``state_dict`` when ``as_dict``."""
        if as_dict:
            return dict(self.state_dict())
        return list(self.parameters())

    def trainable_variables(
        self, as_dict: bool = False
    ) -> list[torch.Tensor] | dict[str, torch.Tensor]:
        """Parameters with ``requires_grad`` (a list, or ``{name: parameter}``)."""
        if as_dict:
            return {k: p for k, p in self.named_parameters() if p.requires_grad}
        return [p for p in self.parameters() if p.requires_grad]

    @property
    def view_requirements(self) -> dict[str, Any]:
        """Which data columns (and time shifts) the model reads; ``{"obs": shift 0}`` by default.

        Subclasses add entries (``state_in_0``, ``prev_actions``) by mutating this dict or
        assigning a new one.
        """
        if self._view_requirements is None:
            from rlblocks.views import ViewRequirement

            self._view_requirements = {"obs": ViewRequirement(shift=0, space=self.obs_space)}
        return self._view_requirements

    @view_requirements.setter
    def view_requirements(self, value: dict[str, Any]) -> None:
        self._view_requirements = value

    def exportable(self, with_value: bool = True) -> ExportAdapter:
        """A pure-tensor view of this model for ``torch.jit.trace`` and ``torch.export``.

        See :class:`ExportAdapter`. (``torch.compile(model)`` works on the model itself.)
        """
        return ExportAdapter(self, with_value=with_value)

    def context(self) -> contextlib.AbstractContextManager[None]:
        """Context entered around ``forward`` (a no-op for torch models)."""
        return _NO_CONTEXT

    # --- calling ----------------------------------------------------------------------------
    def __call__(  # type: ignore[override]
        self,
        input_dict: Mapping[str, Any],
        state: list[torch.Tensor] | None = None,
        seq_lens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Runs ``forward`` on a batch, as RLlib's ``ModelV2.__call__``.

        ``input_dict["obs"]`` (the flat preprocessed batch) is restored to the nested
        structure of ``obs_space.original_space`` (unless ``_disable_preprocessor_api``) and
        the flat batch goes into ``"obs_flat"`` (flattened to ``[B, -1]`` if it has more
        than 2 dims). The state defaults to the ``state_in_i`` columns of ``input_dict``.

        Returns:
            ``(outputs, state_out)``; an empty returned state gives back the input state.
        """
        if not isinstance(input_dict, dict) and not isinstance(input_dict, Mapping):
            raise ValueError(
                f"{type(self).__name__}: expected an input dict with an 'obs' entry, got "
                f"{type(input_dict).__name__}"
            )
        restored = dict(input_dict)
        obs = input_dict["obs"]
        if isinstance(obs, np.ndarray):
            obs = torch.from_numpy(obs)
        if isinstance(obs, torch.Tensor):
            restored["obs_flat"] = obs.flatten(1) if obs.dim() > 2 else obs
        restored["obs"] = obs
        if not self.config.disable_preprocessor_api and _is_nested(self.obs_space):
            from rlblocks.restore import restore_original_dimensions

            # A model whose obs_space is the original space (ComplexInputNetwork) keeps the
            # preprocessed one, whose layout (the model config's list / graph bounds) is what
            # the flat batch was written with, as processed_obs_space.
            space = getattr(self, "processed_obs_space", self.obs_space)
            restored["obs"] = restore_original_dimensions(obs, space, "torch")
        if state is None:
            state = []
            i = 0
            while f"{_STATE_IN}{i}" in input_dict:
                state.append(input_dict[f"{_STATE_IN}{i}"])
                i += 1
        if seq_lens is None:
            seq_lens = input_dict.get("seq_lens")
        with self.context():
            result = nn.Module.__call__(self, restored, state, seq_lens)
        if not isinstance(result, tuple) or len(result) != 2:
            raise ValueError(
                f"{type(self).__name__}.forward must return (outputs, state_list), got "
                f"{type(result).__name__}"
            )
        outputs, state_out = result
        if not isinstance(state_out, (list, tuple)):
            raise ValueError(
                f"{type(self).__name__}.forward must return a list of state tensors as its "
                f"second output, got {type(state_out).__name__}"
            )
        if len(state_out) == 0:
            state_out = state
        self.__dict__["_last_output"] = outputs  # a plain attribute; skips nn.Module.__setattr__
        return outputs, list(state_out)


class ExportAdapter(nn.Module):
    """``forward(obs) -> (outputs, value)`` (or just ``outputs``) around a feed-forward model.

    ``torch.jit.trace`` and ``torch.export`` need a module whose inputs and outputs are
    tensors; a ModelV2 takes an input dict and returns a state list, and hands its value
    through ``value_function()``. This adapter shares the model's parameters.

    Args:
        model: The model (its ``forward`` must not need RNN state).
        with_value: Also return ``model.value_function()``.

    Examples:
        >>> import gymnasium as gym, torch
        >>> from rlblocks.models.fcnet import FullyConnectedNetwork
        >>> m = FullyConnectedNetwork(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), 2,
        ...                           {"fcnet_hiddens": [8]}, "fc")
        >>> traced = torch.jit.trace(m.exportable(), torch.zeros(4, 3))
        >>> [t.shape for t in traced(torch.ones(5, 3))]
        [torch.Size([5, 2]), torch.Size([5])]
    """

    def __init__(self, model: ModelV2, with_value: bool = True):
        super().__init__()
        self.model = model
        self.with_value = with_value

    def forward(self, obs: torch.Tensor) -> Any:
        outputs, _ = self.model({"obs": obs})
        if self.with_value:
            return outputs, self.model.value_function()
        return outputs


def _is_nested(space: gym.Space) -> bool:
    return isinstance(getattr(space, "original_space", space), (Dict, Tuple, Repeated))


#: RLlib's name for the torch model base class (the same class).
TorchModelV2 = ModelV2


class ModelInterface(ModelV2):
    """Adds an API (extra heads, extra methods) on top of another model, by composition.

    ``ModelCatalog.get_model_v2(..., model_interface=Cls)`` builds the chosen model with
    ``Cls.base_num_outputs(num_outputs)`` outputs, then ``Cls(obs_space, action_space,
    num_outputs, model_config, name, base_model=model)``. The interface forwards ``forward``,
    ``value_function``, ``get_initial_state``, ``custom_loss``, ``metrics`` and the view
    requirements to the base model, and unknown attributes too, so the base model's own
    methods stay reachable. ``self.num_outputs`` is the base model's output size.

    Examples:
        >>> import gymnasium as gym, torch
        >>> from rlblocks.models.fcnet import FullyConnectedNetwork
        >>> class Doubled(ModelInterface):
        ...     def doubled(self, out):
        ...         return 2 * out
        >>> obs, act = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2)
        >>> base = FullyConnectedNetwork(obs, act, 2, {"fcnet_hiddens": [4]}, "base")
        >>> m = Doubled(obs, act, 2, {"fcnet_hiddens": [4]}, "m", base_model=base)
        >>> out, _ = m({"obs": torch.zeros(1, 3)})
        >>> m.doubled(out).shape, m.value_function().shape
        (torch.Size([1, 2]), torch.Size([1]))
    """

    @classmethod
    def base_num_outputs(cls, num_outputs: int | None) -> int | None:
        """How many outputs the base model is built with (``num_outputs`` by default)."""
        return num_outputs

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any] | ModelConfig | None,
        name: str,
        *,
        base_model: ModelV2,
    ):
        if not isinstance(base_model, ModelV2):
            raise ValueError(
                f"{type(self).__name__}: base_model must be a ModelV2, got "
                f"{type(base_model).__name__}"
            )
        super().__init__(obs_space, action_space, base_model.num_outputs, model_config, name)
        self.base_model = base_model
        self.time_major = base_model.time_major

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: torch.Tensor | None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        return self.base_model.forward(input_dict, state, seq_lens)

    def value_function(self) -> torch.Tensor:
        return self.base_model.value_function()

    def get_initial_state(self) -> list[torch.Tensor]:
        return self.base_model.get_initial_state()

    def custom_loss(self, policy_loss: Any, loss_inputs: Any) -> Any:
        return self.base_model.custom_loss(policy_loss, loss_inputs)

    def metrics(self) -> dict[str, Any]:
        return self.base_model.metrics()

    @property
    def view_requirements(self) -> dict[str, Any]:
        return self.base_model.view_requirements

    @view_requirements.setter
    def view_requirements(self, value: dict[str, Any]) -> None:
        if "base_model" in self._modules:
            self.base_model.view_requirements = value
        else:
            self._view_requirements = value

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            base = self.__dict__.get("_modules", {}).get("base_model")
            if base is None:
                raise
            return getattr(base, name)
