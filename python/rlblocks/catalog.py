"""``ModelCatalog``: registries and factories for models, preprocessors and action dists.

The default model for an observation space (RLlib's rules): a rank-3 Box gives a
:class:`~rlblocks.models.visionnet.VisionNetwork`; a rank-1 Box whose original space has
no image-like (rank >= 2 Box) component gives a
:class:`~rlblocks.models.fcnet.FullyConnectedNetwork`; anything else (a rank-2 Box, a Dict
holding an image, a raw Discrete) gives a
:class:`~rlblocks.models.complex_input.ComplexInputNetwork`. ``use_lstm`` /
``use_attention`` wrap the chosen model (``LSTMWrapper`` / ``AttentionWrapper``), and
``model_interface`` puts an extra API on top, all by composition: no classes are created
at run time. An observation space whose ``original_space`` is RLlib's action-mask Dict
``Dict(action_mask, observations)`` gets the model for ``observations`` alone inside an
:class:`~rlblocks.models.action_mask.ActionMaskModel` that masks its outputs (a custom
model class with ``handles_action_mask = True`` gets the whole Dict instead, and is masked
too).

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks.models import ModelV2
    >>> class Tiny(ModelV2):
    ...     def __init__(self, obs_space, action_space, num_outputs, model_config, name,
    ...                  scale=1.0):
    ...         super().__init__(obs_space, action_space, num_outputs, model_config, name)
    ...         self.scale = scale
    ...         self.layer = torch.nn.Linear(obs_space.shape[0], num_outputs)
    ...     def forward(self, input_dict, state, seq_lens):
    ...         return self.scale * self.layer(input_dict["obs_flat"]), state
    >>> ModelCatalog.register_custom_model("tiny_doc", Tiny)
    >>> m = ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), 2,
    ...     {"custom_model": "tiny_doc", "custom_model_config": {"scale": 2.0}})
    >>> type(m).__name__, m.scale
    ('Tiny', 2.0)
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
from gymnasium.spaces import Box, Dict, Tuple

from rlblocks.config import ModelConfig
from rlblocks.masks import is_mask_space, refuse_unread_mask
from rlblocks.models.action_mask import build_masked_model
from rlblocks.models.modelv2 import ModelInterface, ModelV2
from rlblocks.preprocessors import Preprocessor, get_preprocessor
from rlblocks.spaces import flatten_space

__all__ = ["ModelCatalog"]


def import_object(path: str, what: str) -> Any:
    """``"package.module:Name"`` -> the object (how config files name custom models and
    distributions without registering them first).

    Raises:
        ValueError: The module does not import or has no such name.
    """
    module, _, name = path.partition(":")
    try:
        found = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(
            f"{what} {path!r}: cannot import it ({type(err).__name__}: {err})"
        ) from None
    return found


def _structured_kinds(space: gym.Space) -> set[str]:
    """The structured layout kinds (Repeated, Sequence, Graph, text, OneOf) anywhere in
    ``space``, looked up without building a layout (no model-config bounds needed)."""
    from rlblocks.layout import is_string_space
    from rlblocks.spaces import Repeated

    found: set[str] = set()
    stack = [space]
    while stack:
        node = stack.pop()
        if isinstance(node, Repeated):
            found.add("repeated")
            stack.append(node.child_space)
        elif isinstance(node, gym.spaces.Sequence):
            found.add("sequence")
            stack.append(node.feature_space)
        elif isinstance(node, gym.spaces.Graph):
            found.add("graph")
        elif isinstance(node, gym.spaces.OneOf):
            found.add("oneof")
            stack.extend(node.spaces)
        elif isinstance(node, (Tuple, Dict)):
            stack.extend(node.spaces.values() if isinstance(node, Dict) else node.spaces)
        elif is_string_space(node):
            found.add("text")
    return found


class ModelCatalog:
    """Registries of custom models / action distributions, and the factories using them.

    All methods are static; the registries are process-wide, as in RLlib.
    """

    _custom_models: ClassVar[dict[str, type[ModelV2]]] = {}
    _custom_action_dists: ClassVar[dict[str, Any]] = {}

    # --- registries --------------------------------------------------------------------------
    @staticmethod
    def register_custom_model(model_name: str, model_class: type[ModelV2]) -> None:
        """Makes ``model_class`` available as ``model_config["custom_model"] = model_name``.

        Raises:
            ValueError: ``model_class`` is not a ModelV2 subclass.
        """
        _check_model_class(model_class, f"register_custom_model({model_name!r})")
        if not isinstance(model_name, str) or not model_name:
            raise ValueError(
                f"register_custom_model: the name must be a non-empty str, got {model_name!r}"
            )
        ModelCatalog._custom_models[model_name] = model_class

    @staticmethod
    def register_custom_action_dist(action_dist_name: str, action_dist_class: Any) -> None:
        """Makes a distribution class available as ``model_config["custom_action_dist"]``."""
        if not isinstance(action_dist_name, str) or not action_dist_name:
            raise ValueError(
                f"register_custom_action_dist: the name must be a non-empty str, got "
                f"{action_dist_name!r}"
            )
        if not callable(action_dist_class):
            raise ValueError(
                f"register_custom_action_dist({action_dist_name!r}): expected a distribution "
                f"class, got {action_dist_class!r}"
            )
        ModelCatalog._custom_action_dists[action_dist_name] = action_dist_class

    @staticmethod
    def is_custom_model(name: str) -> bool:
        """Whether a custom model is registered as ``name``."""
        return name in ModelCatalog._custom_models

    @staticmethod
    def get_custom_model(name: str) -> type[ModelV2]:
        """The model class registered as ``name`` (``register_custom_model``).

        Raises:
            ValueError: No model is registered as ``name``; the message lists the registered
                names and the closest ones.

        Examples:
            >>> from rlblocks.models.fcnet import FullyConnectedNetwork
            >>> ModelCatalog.register_custom_model("my_fc", FullyConnectedNetwork)
            >>> ModelCatalog.get_custom_model("my_fc").__name__
            'FullyConnectedNetwork'
            >>> ModelCatalog.is_custom_model("my_fc"), ModelCatalog.is_custom_model("my_fx")
            (True, False)
        """
        registry = ModelCatalog._custom_models
        if name not in registry:
            close = difflib.get_close_matches(name, list(registry), n=3)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ValueError(
                f"custom_model {name!r} is not registered (registered: "
                f"{sorted(registry)}){hint} Register it with "
                "ModelCatalog.register_custom_model(name, cls) or pass the class itself."
            )
        return registry[name]

    @staticmethod
    def is_custom_action_dist(name: str) -> bool:
        """Whether a custom action distribution is registered as ``name``."""
        return name in ModelCatalog._custom_action_dists

    @staticmethod
    def get_custom_action_dist(name: str) -> Any:
        """The distribution class registered as ``name`` (``register_custom_action_dist``).

        Raises:
            ValueError: No distribution is registered as ``name``.

        Examples:
            >>> from rlblocks.distributions import Categorical
            >>> ModelCatalog.register_custom_action_dist("my_cat", Categorical)
            >>> ModelCatalog.get_custom_action_dist("my_cat").__name__
            'Categorical'
        """
        registry = ModelCatalog._custom_action_dists
        if name not in registry:
            raise ValueError(
                f"custom_action_dist {name!r} is not registered; registered names: "
                f"{sorted(registry)}"
            )
        return registry[name]

    # --- models ------------------------------------------------------------------------------
    @staticmethod
    def get_model_v2(
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any] | ModelConfig | None,
        framework: str = "torch",
        name: str = "default_model",
        model_interface: type[ModelInterface] | None = None,
        default_model: type[ModelV2] | None = None,
        **model_kwargs: Any,
    ) -> ModelV2:
        """Builds the model for a config: custom or default, auto-wrapped, with an interface.

        Args:
            obs_space: The (preprocessed) observation space.
            action_space: The action space.
            num_outputs: Model output size (e.g. from ``get_action_dist``), or None.
            model_config: RLlib model config dict (validated here) or a ModelConfig.
            framework: Only ``"torch"``.
            name: The model's name.
            model_interface: A :class:`~rlblocks.models.modelv2.ModelInterface` subclass
                put on top of the chosen model (e.g. ``DuelingQModel``).
            default_model: Class to use instead of the catalog's default choice (ignored
                when ``custom_model`` is set).
            **model_kwargs: Extra constructor keyword arguments for the model.

        Returns:
            The model. A custom model also receives ``custom_model_config`` as keyword
            arguments (if its constructor does not accept them, they stay available in
            ``model_config["custom_model_config"]`` and a warning says so).

        Raises:
            ValueError: A non-torch framework, an invalid config, an unregistered custom
                model name, a class that is not a ModelV2, or a bad ``model_interface``.
            ImportError: ``use_lstm``/``use_attention`` while the wrapper is not available.
        """
        if framework != "torch":
            raise ValueError(
                f"rlblocks models are torch-only: framework must be 'torch', got {framework!r}"
            )
        config = ModelConfig.from_dict(model_config)
        if model_interface is not None and not (
            isinstance(model_interface, type) and issubclass(model_interface, ModelInterface)
        ):
            raise ValueError(
                "model_interface must be a subclass of rlblocks.models.ModelInterface (e.g. "
                f"DuelingQModel, ContinuousActionQModel), got {model_interface!r}. rlblocks "
                "composes instead of mixing classes: write the extra API as a ModelInterface "
                "subclass, whose self.base_model is the chosen model"
            )
        original = getattr(obs_space, "original_space", obs_space)
        if not config.custom_model:  # a custom model may read an 'action_mask' key its way
            refuse_unread_mask(original)
        if is_mask_space(obs_space) and not getattr(
            ModelCatalog._resolve_custom_model(config.custom_model)
            if config.custom_model
            else None,
            "handles_action_mask",
            False,
        ):
            raise ValueError(
                "an 'action_mask' observation space must be preprocessed before the model is "
                "built (pass ModelCatalog.get_preprocessor_for_space(space).observation_space), "
                "so that the model can mask its outputs"
            )
        if is_mask_space(original) and not isinstance(obs_space, Dict):
            # RLlib's action-mask convention: the chosen model sees ``observations`` only
            # (or the whole Dict, for a model with ``handles_action_mask = True``) and its
            # outputs are masked (rlblocks.masks).
            if model_interface is not None:
                raise ValueError(
                    f"model_interface {model_interface.__name__} with an 'action_mask' "
                    "observation is not supported; mask the outputs in the interface instead"
                )
            reads_mask = bool(config.custom_model) and bool(
                getattr(
                    ModelCatalog._resolve_custom_model(config.custom_model),
                    "handles_action_mask",
                    False,
                )
            )

            def build(space: gym.Space) -> ModelV2:
                return ModelCatalog._build_model(
                    space,
                    action_space,
                    num_outputs,
                    config,
                    name,
                    None,
                    default_model,
                    model_kwargs,
                )

            return build_masked_model(
                obs_space, action_space, num_outputs, config, name, build, reads_mask
            )
        return ModelCatalog._build_model(
            obs_space,
            action_space,
            num_outputs,
            config,
            name,
            model_interface,
            default_model,
            model_kwargs,
        )

    @staticmethod
    def _build_model(
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        config: ModelConfig,
        name: str,
        model_interface: type[ModelInterface] | None,
        default_model: type[ModelV2] | None,
        model_kwargs: Mapping[str, Any],
    ) -> ModelV2:
        """``get_model_v2`` for a validated config (no action-mask handling)."""
        kwargs = dict(model_kwargs)
        model_cfg_arg: Mapping[str, Any] = config
        if config.custom_model:
            model_cls = ModelCatalog._resolve_custom_model(config.custom_model)
            kwargs = _custom_kwargs(model_cls, kwargs, config.custom_model_config)
            model_cfg_arg = config.to_dict()  # user models get RLlib's plain dict
        elif default_model is not None:
            model_cls = _check_model_class(default_model, "default_model")
        else:
            model_cls = ModelCatalog.default_model_class(obs_space, config)
        _refuse_unread_head_initializers(config, model_cls, model_interface)
        _refuse_unread_log_std_init(config, model_cls, model_interface)
        base_outputs = (
            model_interface.base_num_outputs(num_outputs) if model_interface else num_outputs
        )
        if config.use_lstm or config.use_attention:
            wrapper = _wrapper_class("lstm" if config.use_lstm else "attention")
            model: ModelV2 = wrapper(
                obs_space, action_space, base_outputs, config, name, wrapped_cls=model_cls, **kwargs
            )
        else:
            model = model_cls(obs_space, action_space, base_outputs, model_cfg_arg, name, **kwargs)
        if not isinstance(model, ModelV2):
            raise ValueError(f"{model_cls.__name__}(...) did not return a ModelV2")
        if model_interface is not None:
            model = model_interface(
                obs_space, action_space, num_outputs, config, name, base_model=model
            )
        return model

    @staticmethod
    def default_model_class(
        obs_space: gym.Space, model_config: Mapping[str, Any] | ModelConfig | None = None
    ) -> type[ModelV2]:
        """The built-in model class RLlib's rules pick for ``obs_space``.

        Examples:
            >>> import gymnasium as gym
            >>> ModelCatalog.default_model_class(gym.spaces.Box(0, 1, (84, 84, 4))).__name__
            'VisionNetwork'
            >>> ModelCatalog.default_model_class(gym.spaces.Box(0, 1, (8,))).__name__
            'FullyConnectedNetwork'
            >>> ModelCatalog.default_model_class(gym.spaces.Box(0, 1, (4, 4))).__name__
            'ComplexInputNetwork'

            A Repeated, Sequence, Graph, text or OneOf part anywhere in the space gets
            ComplexInputNetwork (its entity / graph encoders), unless the only such parts
            are lists and ``entity_encoder`` has type "flatten" (RLlib's rules):

            >>> from rlblocks.spaces import Repeated
            >>> items = Repeated(gym.spaces.Box(0, 1, (2,)), max_len=4)
            >>> ModelCatalog.default_model_class(items).__name__
            'ComplexInputNetwork'
            >>> flat = {"entity_encoder": {"type": "flatten"}}
            >>> ModelCatalog.default_model_class(gym.spaces.Box(0, 1, (9,)), flat).__name__
            'FullyConnectedNetwork'
        """
        from rlblocks.models.complex_input import ComplexInputNetwork
        from rlblocks.models.fcnet import FullyConnectedNetwork
        from rlblocks.models.visionnet import VisionNetwork

        original = getattr(obs_space, "original_space", obs_space)
        kinds = _structured_kinds(original)
        if kinds:
            cfg = ModelConfig.from_dict(model_config)
            # entity_encoder type "flatten" keeps RLlib's rules for lists (an FC over the
            # zero-padded block); any other structured kind needs ComplexInputNetwork.
            if cfg.entity_encoder["type"] != "flatten" or kinds - {"repeated", "sequence"}:
                return ComplexInputNetwork
        if isinstance(obs_space, Box) and len(obs_space.shape) == 3:
            return VisionNetwork
        if isinstance(obs_space, Box) and len(obs_space.shape) == 1:
            if not isinstance(original, (Dict, Tuple)) or not any(
                isinstance(s, Box) and len(s.shape) >= 2 for s in flatten_space(original)
            ):
                return FullyConnectedNetwork
        return ComplexInputNetwork

    @staticmethod
    def _resolve_custom_model(custom: Any) -> type[ModelV2]:
        if isinstance(custom, str) and ":" in custom and custom not in ModelCatalog._custom_models:
            return _check_model_class(import_object(custom, "custom_model"), "custom_model")
        if isinstance(custom, str):
            return ModelCatalog.get_custom_model(custom)
        return _check_model_class(custom, "custom_model")

    # --- action distributions ----------------------------------------------------------------
    @staticmethod
    def get_action_dist(
        action_space: gym.Space,
        config: Mapping[str, Any] | ModelConfig | None,
        dist_type: Any = None,
        framework: str = "torch",
        **kwargs: Any,
    ) -> tuple[Any, int]:
        """The action distribution class (or partial) and the model output size it needs.

        Delegates to :func:`rlblocks.distributions.select_action_dist` with the registered
        custom distributions.

        Raises:
            ValueError: A non-torch framework or an invalid config (and whatever
                ``select_action_dist`` rejects).
        """
        if framework != "torch":
            raise ValueError(
                f"rlblocks is torch-only: framework must be 'torch', got {framework!r}"
            )
        if kwargs:
            raise ValueError(f"get_action_dist: unexpected keyword arguments {sorted(kwargs)}")
        cfg = ModelConfig.from_dict(config)
        from rlblocks.distributions import select_action_dist

        dists = dict(ModelCatalog._custom_action_dists)
        custom = cfg.custom_action_dist
        if isinstance(custom, str) and ":" in custom and custom not in dists:
            dists[custom] = import_object(custom, "custom_action_dist")
        return select_action_dist(
            action_space,
            cfg.to_dict(),
            dist_type=dist_type,
            custom_action_dists=dists,
        )

    # --- preprocessors -----------------------------------------------------------------------
    @staticmethod
    def get_preprocessor_for_space(
        observation_space: gym.Space,
        options: Mapping[str, Any] | ModelConfig | None = None,
        include_multi_binary: bool = False,
    ) -> Preprocessor:
        """The default preprocessor instance for a space, built with a validated config.

        Examples:
            >>> import gymnasium as gym
            >>> p = ModelCatalog.get_preprocessor_for_space(gym.spaces.Discrete(4))
            >>> type(p).__name__, p.shape
            ('OneHotPreprocessor', (4,))
        """
        cfg = ModelConfig.from_dict(options)
        cls = get_preprocessor(observation_space, include_multi_binary=include_multi_binary)
        return cls(observation_space, cfg.to_dict())

    @staticmethod
    def get_preprocessor(
        env: gym.Env, options: Mapping[str, Any] | ModelConfig | None = None
    ) -> Preprocessor:
        """The default preprocessor for ``env.observation_space``."""
        return ModelCatalog.get_preprocessor_for_space(env.observation_space, options)


def _check_model_class(cls: Any, what: str) -> type[ModelV2]:
    if not (isinstance(cls, type) and issubclass(cls, ModelV2)):
        raise ValueError(
            f"{what}: expected a subclass of rlblocks.models.ModelV2 (TorchModelV2), got {cls!r}"
        )
    return cls


def _custom_kwargs(
    model_cls: type, model_kwargs: dict[str, Any], custom_config: Mapping[str, Any]
) -> dict[str, Any]:
    """``model_kwargs`` plus ``custom_model_config`` if the constructor takes those keys."""
    if not custom_config:
        return model_kwargs
    params = inspect.signature(model_cls).parameters
    takes_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if takes_var_kw or set(custom_config) <= named:
        return {**model_kwargs, **custom_config}
    missing = sorted(set(custom_config) - named)
    warnings.warn(
        f"{model_cls.__name__}.__init__ does not accept custom_model_config keys {missing} as "
        "keyword arguments, so none are passed; they are in model_config['custom_model_config']",
        UserWarning,
        stacklevel=3,
    )
    return model_kwargs


def _refuse_unread_head_initializers(
    config: ModelConfig, model_cls: type[ModelV2], model_interface: type[ModelInterface] | None
) -> None:
    """ValueError when ``logits_weights_initializer`` / ``vf_weights_initializer`` are set
    but the heads come from elsewhere than a plain ``FullyConnectedNetwork`` (the only model
    that reads them), so they would be silently ignored."""
    keys = [k for k in ("logits_weights_initializer", "vf_weights_initializer") if config[k]]
    owner = _heads_owner(config, model_cls, model_interface) if keys else None
    if owner is not None:
        raise ValueError(
            f"{' and '.join(keys)} set the heads of the default FullyConnectedNetwork only; "
            f"here the heads are {owner}'s, which would ignore them: unset them"
        )


def _refuse_unread_log_std_init(
    config: ModelConfig, model_cls: type[ModelV2], model_interface: type[ModelInterface] | None
) -> None:
    """ValueError when ``log_std_init`` is set but the model is not a plain
    ``FullyConnectedNetwork`` (the only model that appends a free log-std), so it would be
    silently ignored."""
    owner = None
    if config.log_std_init != 0.0:
        owner = _heads_owner(config, model_cls, model_interface)
    if owner is not None:
        raise ValueError(
            f"log_std_init={config.log_std_init:g} sets the free log-std of the default "
            f"FullyConnectedNetwork (with free_log_std=True) only; here the outputs are "
            f"{owner}'s, which would ignore it: unset it"
        )


def _heads_owner(
    config: ModelConfig, model_cls: type[ModelV2], model_interface: type[ModelInterface] | None
) -> str | None:
    """What builds the model's output layers when it is not a plain
    ``FullyConnectedNetwork`` (a wrapper, a model interface or another class); None when it
    is one."""
    from rlblocks.models.fcnet import FullyConnectedNetwork

    if config.use_lstm or config.use_attention:
        return "the use_lstm / use_attention wrapper"
    if model_interface is not None:
        return f"the model interface {model_interface.__name__}"
    if not issubclass(model_cls, FullyConnectedNetwork):
        return model_cls.__name__
    return None


def _wrapper_class(kind: str) -> Any:
    try:
        if kind == "lstm":
            from rlblocks.models.recurrent import LSTMWrapper

            return LSTMWrapper
        from rlblocks.models.attention import AttentionWrapper

        return AttentionWrapper
    except ImportError as err:
        key = "use_lstm" if kind == "lstm" else "use_attention"
        raise ImportError(
            f"model config {key}=True needs rlblocks.models."
            f"{'recurrent.LSTMWrapper' if kind == 'lstm' else 'attention.AttentionWrapper'}, "
            f"which could not be imported ({err})"
        ) from err
