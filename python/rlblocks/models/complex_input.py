"""``ComplexInputNetwork``: RLlib's default model for nested (Dict/Tuple) observations.

Each encoder leaf of the original space (Dict keys sorted, Tuple in order; the walk stops
at Repeated, Sequence, Graph, text and OneOf nodes) gets its own encoder: a rank-3 Box goes
through a :class:`VisionNetwork` (flattened conv features), a Discrete/MultiDiscrete through
a :class:`FullyConnectedNetwork` on its one-hot (``fcnet_hiddens``), any other
Box/MultiBinary through a FullyConnectedNetwork on its flattened values. The encodings are
concatenated and go through ``post_fc_stack`` (an FC stack of ``post_fcnet_hiddens`` with
``post_fcnet_activation``), then a linear ``logits_layer`` and ``value_layer``
(normc(0.01)).

rlblocks' structured leaves (issue 26), read from the flat row at their layout offsets
(:mod:`rlblocks.layout`):

* Repeated / gymnasium Sequence: an :class:`~rlblocks.models.entity.EntityEncoder` over the
  items (``entities.<i>.encoder``; the ``entity_encoder`` config: masked self-attention or
  DeepSets, pooled), or with ``entity_encoder={"type": "flatten"}`` RLlib's behaviour, an
  FC stack over the zero-padded block (``flatten.<i>``);
* text (gymnasium Text, MiniGrid's mission): a :class:`~rlblocks.models.entity.TextEncoder`
  (``entities.<i>.encoder``; ``flatten`` type: FC over the block);
* Graph: a :class:`~rlblocks.models.graph.GraphEncoder` (``graphs.<i>.encoder``, the
  ``graph_encoder`` config);
* OneOf: an FC stack over its whole block, branch one-hot included (``flatten.<i>``).

Entity, text and graph encodings then go through an FC stack of ``fcnet_hiddens``
(``entities.<i>.fc`` / ``graphs.<i>.fc``), as every other component does.

Departure from RLlib (difference 18): the encoders are registered once (``cnns.<i>``,
``one_hot.<i>``, ``flatten.<i>``; RLlib also registers every one a second time under
``cnn_<i>`` etc.) and have no value heads (RLlib builds value towers that are never used),
so the parameter count is RLlib's minus those unused towers.

``vf_share_layers`` (difference 25; RLlib ignores the key here and always shares): when
False, ``value_layer`` sits on ``value_trunk``, a second set of encoders and post-FC stack of
the same architecture (``value_trunk.cnns.<i>``, ``value_trunk.post_fc_stack``, ...), so the
value loss never changes the policy's layers.

Examples:
    >>> import gymnasium as gym, torch
    >>> from rlblocks import get_preprocessor
    >>> space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (3,)),
    ...                          "kind": gym.spaces.Discrete(4)})
    >>> flat = get_preprocessor(space)(space).observation_space
    >>> m = ComplexInputNetwork(flat, gym.spaces.Discrete(2), 2, {"fcnet_hiddens": [8]}, "c")
    >>> out, _ = m({"obs": torch.zeros(5, 7)})
    >>> out.shape, m.value_function().shape
    (torch.Size([5, 2]), torch.Size([5]))

    A list of entities next to a vector (the list goes through masked self-attention):

    >>> from rlblocks.spaces import Repeated
    >>> space = gym.spaces.Dict({"me": gym.spaces.Box(-1, 1, (2,)),
    ...                          "others": Repeated(gym.spaces.Box(-1, 1, (3,)), max_len=5)})
    >>> cfg = {"fcnet_hiddens": [8], "entity_encoder": {"dim": 8, "heads": 2}}
    >>> m = ComplexInputNetwork(space, gym.spaces.Discrete(2), 2, cfg, "c")
    >>> sorted(m.entities), m({"obs": torch.zeros(4, 2 + 16)})[0].shape
    (['1'], torch.Size([4, 2]))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box, Discrete, MultiBinary, MultiDiscrete
from torch import nn

from rlblocks.config import ModelConfig
from rlblocks.layout import Layout, Node, layout
from rlblocks.models.entity import EntityEncoder, TextEncoder
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.models.graph import GraphEncoder, split_graph
from rlblocks.models.misc import SlimFC, normc_initializer
from rlblocks.models.modelv2 import ModelV2
from rlblocks.models.visionnet import VisionNetwork
from rlblocks.spaces import format_path

__all__ = ["ComplexInputNetwork", "STRUCTURED_KINDS", "encoder_leaves"]

#: Layout kinds that are one encoder leaf of ComplexInputNetwork as a whole (not walked into).
STRUCTURED_KINDS = ("repeated", "sequence", "graph", "text", "oneof")
_LIST_KINDS = ("repeated", "sequence")


def encoder_leaves(lay: Layout) -> list[tuple[tuple[Any, ...], int, Node]]:
    """``(path, offset, node)`` of each part of the row that gets its own encoder: Dict
    (keys sorted, as RLlib's ``flatten_space``) and Tuple nodes are walked into, every other
    node (Box, Discrete, ..., and the whole of a Repeated, Sequence, Graph, text or OneOf) is
    one leaf.

    Examples:
        >>> import gymnasium as gym
        >>> space = gym.spaces.Dict({"b": gym.spaces.Discrete(2),
        ...                          "a": gym.spaces.Tuple((gym.spaces.Box(0, 1, (3,)),))})
        >>> [(path, offset, node.kind) for path, offset, node in encoder_leaves(layout(space))]
        [(('a', 0), 0, 'box'), (('b',), 3, 'discrete')]
    """
    out: list[tuple[tuple[Any, ...], int, Node]] = []

    def walk(node: Node, path: tuple[Any, ...], offset: int) -> None:
        if node.kind not in ("tuple", "dict"):
            out.append((path, offset, node))
            return
        parts = list(zip(node.keys, node.offsets, node.children, strict=True))
        if node.kind == "dict":
            parts.sort(key=lambda part: part[0])
        for key, off, child in parts:
            walk(child, (*path, key), offset + off)

    walk(lay.root, (), 0)
    return out


def _leaf(obs: Any, path: tuple) -> Any:
    for key in path:
        obs = obs[key]
    return obs


def _reflatten(value: Any, node: Node, batch: int) -> torch.Tensor:
    """A restored view of ``node`` (:func:`rlblocks.restore_original_dimensions`) back to its
    flat block ``[batch, node.size]`` (the layout's order)."""

    def flat(x: Any, rows: int) -> torch.Tensor:
        return torch.as_tensor(x).to(torch.float32).reshape(rows, -1)

    def go(v: Any, n: Node, rows: int) -> torch.Tensor:
        if n.kind in _LIST_KINDS:
            items = go(v.values, n.item, rows * n.max_len).reshape(rows, -1)
            return torch.cat([flat(v.lengths, rows), items], dim=1)
        if n.kind in ("tuple", "dict"):
            return torch.cat(
                [go(v[k], c, rows) for k, c in zip(n.keys, n.children, strict=True)], dim=1
            )
        if n.kind == "oneof":
            branches = [go(b, c, rows) for b, c in zip(v.values, n.children, strict=True)]
            return torch.cat([flat(v.branch, rows), *branches], dim=1)
        if n.kind == "graph":
            parts = [flat(v.n_nodes, rows), flat(v.n_edges, rows), flat(v.nodes, rows)]
            if v.edges is not None:
                parts.append(flat(v.edges, rows))
            return torch.cat([*parts, flat(v.edge_index, rows)], dim=1)
        if n.kind == "text":
            return torch.cat([flat(v.lengths, rows), flat(v.values, rows)], dim=1)
        return flat(v, rows)

    out = go(value, node, batch)
    if out.shape[1] != node.size:
        raise ValueError(
            f"ComplexInputNetwork: a {node.kind} component restored to {out.shape[1]} floats, "
            f"its layout has {node.size}"
        )
    return out


class _Encoded(nn.Module):
    """A structured leaf's encoder (entity, text or graph) reading the leaf's flat block,
    then an FC stack (``fcnet_hiddens``) over its features, as every other leaf has."""

    def __init__(
        self, encoder: EntityEncoder | TextEncoder | GraphEncoder, fc: FullyConnectedNetwork
    ):
        super().__init__()
        self.encoder, self.fc = encoder, fc
        self.num_outputs = fc.num_outputs

    def forward(self, block: torch.Tensor, node: Node) -> torch.Tensor:
        enc = self.encoder
        if isinstance(enc, TextEncoder):
            features = enc.forward_flat(block)
        elif isinstance(enc, EntityEncoder):
            features = enc.forward_flat(block, node.max_len)
        else:
            edge_size = node.children[1].size if len(node.children) > 1 else 0
            features = enc(
                *split_graph(
                    block, node.children[0].size, edge_size, node.max_nodes, node.max_edges
                )
            )
        out, _ = self.fc({"obs": features})
        return out


class _Trunk(nn.Module):
    """The value function's own encoders and post-FC stack (``vf_share_layers`` False)."""

    def __init__(
        self,
        cnns: nn.ModuleDict,
        one_hot: nn.ModuleDict,
        flatten: nn.ModuleDict,
        post_fc_stack: FullyConnectedNetwork,
        entities: nn.ModuleDict,
        graphs: nn.ModuleDict,
    ):
        super().__init__()
        self.cnns, self.one_hot, self.flatten = cnns, one_hot, flatten
        self.post_fc_stack = post_fc_stack
        self.entities, self.graphs = entities, graphs


class ComplexInputNetwork(ModelV2):
    """Per-component encoders, concatenation, a post-FC stack, logits and value heads.

    Args:
        obs_space: The flattening preprocessor's observation space (carrying
            ``original_space``) or the nested Dict/Tuple space itself.
        action_space: The action space.
        num_outputs: Logits size, or None/0 to output the post-FC-stack features.
        model_config: RLlib model config (dict or :class:`ModelConfig`). Read:
            ``conv_filters``, ``conv_activation`` (image encoders), ``fcnet_hiddens``,
            ``fcnet_activation`` (other encoders), ``post_fcnet_hiddens``,
            ``post_fcnet_activation`` (post-FC stack), ``vf_share_layers``,
            ``entity_encoder`` (Repeated, Sequence and text components),
            ``graph_encoder`` (Graph components), the layout keys (``sequence_max_len``,
            ``graph_max_nodes``, ...) when ``obs_space`` carries no layout, and
            ``_disable_preprocessor_api``.
        name: Model name.

    Raises:
        ValueError: A component that no encoder supports, or bad encoder options.
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: Mapping[str, Any] | ModelConfig | None,
        name: str,
    ):
        original = getattr(obs_space, "original_space", obs_space)
        super().__init__(original, action_space, num_outputs, model_config, name)
        cfg = self.config
        self.original_space = original
        self.processed_obs_space = original if cfg.disable_preprocessor_api else obs_space
        carried = getattr(obs_space, "layout", None)
        self.layout: Layout = (
            carried
            if isinstance(carried, Layout) and carried.space is original
            else layout(original, cfg.to_dict())
        )
        self._leaves = encoder_leaves(self.layout)
        # A flat observation is read at the layout's offsets; a plain (non-container) space
        # other than the structured kinds arrives as is.
        self._flat_input = self.layout.root.kind in ("tuple", "dict", *STRUCTURED_KINDS)
        if self._flat_input and obs_space is original and not cfg.disable_preprocessor_api:
            # Built on the original space: the flat batch has this layout (the config's
            # bounds), so ModelV2.__call__ restores with it too.
            box = Box(-np.inf, np.inf, (self.layout.size,), np.float32)
            box.original_space = original  # type: ignore[attr-defined]
            box.layout = self.layout  # type: ignore[attr-defined]
            self.processed_obs_space = box
        (
            self.cnns,
            self.one_hot,
            self.flatten,
            self.post_fc_stack,
            self.entities,
            self.graphs,
        ) = self._build_trunk(cfg)
        self.flatten_dims: dict[str, int] = {
            str(i): node.size
            for i, (_, _, node) in enumerate(self._leaves)
            if str(i) in self.flatten
        }
        features = self.post_fc_stack.num_outputs
        assert features is not None
        self.logits_layer: SlimFC | None = None
        self.value_layer: SlimFC | None = None
        if self.num_outputs:
            self.logits_layer = SlimFC(features, self.num_outputs, normc_initializer(0.01), None)
            self.value_layer = SlimFC(features, 1, normc_initializer(0.01), None)
        else:
            self.num_outputs = features
        # vf_share_layers False: the value head sits on its own copy of the encoders and the
        # post-FC stack (difference 25), so the value loss never reaches the policy's layers.
        self.value_trunk: _Trunk | None = None
        if not cfg.vf_share_layers and self.value_layer is not None:
            self.value_trunk = _Trunk(*self._build_trunk(cfg))
        self._value_out: torch.Tensor | None = None

    def _build_trunk(
        self, cfg: ModelConfig
    ) -> tuple[
        nn.ModuleDict,
        nn.ModuleDict,
        nn.ModuleDict,
        FullyConnectedNetwork,
        nn.ModuleDict,
        nn.ModuleDict,
    ]:
        """One set of per-component encoders (cnns, one_hot, flatten, entities, graphs) and
        the post-FC stack."""
        action_space = self.action_space
        cnns, one_hot, flatten = nn.ModuleDict(), nn.ModuleDict(), nn.ModuleDict()
        entities, graphs = nn.ModuleDict(), nn.ModuleDict()
        encoder_cfg = ModelConfig.from_dict(
            {
                "fcnet_hiddens": list(cfg.fcnet_hiddens),
                "fcnet_activation": cfg.fcnet_activation,
                "conv_filters": cfg["conv_filters"],
                "conv_activation": cfg.conv_activation,
                "post_fcnet_hiddens": [],
            }
        )
        entity_opts = dict(cfg["entity_encoder"])
        graph_opts = dict(cfg["graph_encoder"])

        def fc(size: int, enc_name: str) -> FullyConnectedNetwork:
            return FullyConnectedNetwork(
                Box(-1.0, 1.0, (size,), np.float32),
                action_space,
                None,
                encoder_cfg,
                enc_name,
                value_branch=False,
            )

        concat_size = 0
        for i, (path, _, node) in enumerate(self._leaves):
            key, leaf = str(i), node.space
            where = format_path(path)
            enc: nn.Module
            if node.kind in _LIST_KINDS + ("text",) and entity_opts["type"] == "flatten":
                enc = flatten[key] = fc(node.size, f"flatten_{i}")
            elif node.kind in _LIST_KINDS:
                entity = EntityEncoder.from_config(node.item.size, entity_opts)
                enc = entities[key] = _Encoded(entity, fc(entity.num_outputs, f"entity_{i}"))
            elif node.kind == "text":
                text = TextEncoder(len(node.charset), node.max_len, node.encoding, entity_opts)
                enc = entities[key] = _Encoded(text, fc(text.num_outputs, f"text_{i}"))
            elif node.kind == "graph":
                edge_size = node.children[1].size if len(node.children) > 1 else 0
                graph = GraphEncoder.from_config(node.children[0].size, edge_size, graph_opts)
                enc = graphs[key] = _Encoded(graph, fc(graph.num_outputs, f"graph_{i}"))
            elif node.kind == "oneof":
                enc = flatten[key] = fc(node.size, f"flatten_{i}")
            elif isinstance(leaf, Box) and len(leaf.shape) == 3:
                enc = cnns[key] = VisionNetwork(
                    leaf, action_space, None, encoder_cfg, f"cnn_{i}", value_branch=False
                )
            elif isinstance(leaf, (Discrete, MultiDiscrete)):
                size = int(leaf.n) if isinstance(leaf, Discrete) else int(np.sum(leaf.nvec))
                enc = one_hot[key] = fc(size, f"one_hot_{i}")
            elif isinstance(leaf, (Box, MultiBinary)):
                enc = flatten[key] = fc(int(np.prod(leaf.shape, dtype=np.int64)), f"flatten_{i}")
            else:
                raise ValueError(
                    f"ComplexInputNetwork: component {where} is a {type(leaf).__name__}; "
                    "supported components are Box (rank 3 -> CNN, others -> FC), Discrete, "
                    "MultiDiscrete, MultiBinary, Repeated, Sequence, Graph, Text and OneOf. "
                    "Write a custom model for this space."
                )
            assert isinstance(enc.num_outputs, int)
            concat_size += enc.num_outputs
        self.concat_size = concat_size

        post_cfg = ModelConfig.from_dict(
            {
                "fcnet_hiddens": list(cfg.post_fcnet_hiddens),
                "fcnet_activation": cfg.post_fcnet_activation,
                "post_fcnet_hiddens": [],
            }
        )
        post_fc_stack = FullyConnectedNetwork(
            Box(-np.inf, np.inf, (concat_size,), np.float32),
            action_space,
            None,
            post_cfg,
            "post_fc_stack",
            value_branch=False,
        )
        return cnns, one_hot, flatten, post_fc_stack, entities, graphs

    def _components(self, obs: Any) -> list[Any]:
        """Each encoder leaf's input: a structured leaf's flat block ``[B, size]``, other
        leaves as :func:`rlblocks.restore_original_dimensions` unpacks them."""
        if isinstance(obs, torch.Tensor) and self._flat_input:
            size = self.layout.size
            if obs.dim() < 2 or obs.shape[-1] != size:
                raise ValueError(
                    f"{self.name}: expected flattened obs shape of [..., {size}] for "
                    f"{self.original_space}, got {list(obs.shape)}"
                )
            batch = tuple(obs.shape[:-1])
            out = []
            for _, offset, node in self._leaves:
                block = obs[..., offset : offset + node.size]
                if node.kind in STRUCTURED_KINDS:
                    out.append(block.reshape(-1, node.size))
                else:
                    out.append(block.reshape(batch + node.shape))
            return out
        if isinstance(obs, torch.Tensor):
            from rlblocks.restore import restore_original_dimensions

            obs = restore_original_dimensions(obs, self.processed_obs_space, "torch")
        out = []
        for path, _, node in self._leaves:
            component = _leaf(obs, path)
            if node.kind in STRUCTURED_KINDS and not isinstance(component, torch.Tensor):
                lead = {"graph": "n_nodes", "oneof": "branch"}.get(node.kind, "lengths")
                rows = getattr(component, lead).shape[: -1 if node.kind == "oneof" else None]
                component = _reflatten(component, node, int(np.prod(tuple(rows))))
            elif node.kind in STRUCTURED_KINDS:
                component = component.reshape(-1, node.size)
            out.append(component)
        return out

    def _encode(self, components: list[Any], trunk: _Trunk | ComplexInputNetwork) -> torch.Tensor:
        outs = []
        for i, ((_, _, node), component) in enumerate(zip(self._leaves, components, strict=True)):
            key = str(i)
            if key in trunk.cnns:
                out, _ = trunk.cnns[key]({"obs": component})
            elif key in trunk.one_hot:
                if not torch.is_floating_point(component):
                    from rlblocks.utils import torch_one_hot

                    component = torch_one_hot(component, node.space)
                out, _ = trunk.one_hot[key]({"obs": component})
            elif key in trunk.entities or key in trunk.graphs:
                structured = trunk.entities[key] if key in trunk.entities else trunk.graphs[key]
                assert isinstance(structured, _Encoded)
                out = structured(component, node)
            else:
                flat = component.reshape(-1, self.flatten_dims[key])
                out, _ = trunk.flatten[key]({"obs": flat})
            outs.append(out)
        out, _ = trunk.post_fc_stack({"obs": torch.cat(outs, dim=1)})
        return out

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: torch.Tensor | None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        obs, flat = input_dict["obs"], input_dict.get("obs_flat")
        if (
            self._flat_input
            and isinstance(flat, torch.Tensor)
            and flat.dim() == 2
            and flat.shape[-1] == self.layout.size
        ):
            obs = flat  # read at the layout's offsets, no restored views needed
        components = self._components(obs)
        out = self._encode(components, self)
        if self.logits_layer is None or self.value_layer is None:
            return out, []
        vt = self.value_trunk
        value_features = out if vt is None else self._encode(components, vt)
        self._value_out = self.value_layer(value_features).reshape(-1)
        return self.logits_layer(out), []

    def dense_layers(self) -> tuple[list[nn.Module], list[nn.Module] | None] | None:
        """The layers of the fully connected network this one computes, when it is one:
        ``(policy layers, value layers)`` (value layers None: the value head shares the
        policy's), each the encoder's hidden layers then the post-FC stack's; the logits
        and value heads are :attr:`logits_layer` and :attr:`value_layer`. That holds when
        the flat observation is one component read whole by one fully connected encoder
        (a ``OneOf`` block: the union of agents whose spaces differ; a flat ``Box``); None
        otherwise. The closed-form PPO update and the numpy actor run it as such."""
        if self.logits_layer is None or self.value_layer is None or len(self._leaves) != 1:
            return None
        _, offset, node = self._leaves[0]
        if not self._flat_input or offset != 0 or node.size != self.layout.size:
            return None

        def stack(trunk: _Trunk | ComplexInputNetwork) -> list[nn.Module] | None:
            if set(trunk.flatten) != {"0"} or any(
                len(d) for d in (trunk.cnns, trunk.one_hot, trunk.entities, trunk.graphs)
            ):
                return None
            parts = (trunk.flatten["0"], trunk.post_fc_stack)
            if any(
                type(p) is not FullyConnectedNetwork
                or p._logits is not None
                or p._append_free_log_std is not None
                or p._value_branch is not None
                for p in parts
            ):
                return None
            stacks = [p._hidden_layers for p in parts]
            if not all(isinstance(h, nn.Sequential) for h in stacks):
                return None
            return [layer for h in stacks for layer in h.children()]  # type: ignore[union-attr]

        policy = stack(self)
        value = None if self.value_trunk is None else stack(self.value_trunk)
        if policy is None or (self.value_trunk is not None and value is None):
            return None
        return policy, value

    def value_function(self) -> torch.Tensor:
        if self.value_layer is None:
            raise ValueError(f"{self.name}: built with num_outputs=None, it has no value head")
        if self._value_out is None:
            raise ValueError(f"{self.name}: call the model on a batch before value_function()")
        return self._value_out
