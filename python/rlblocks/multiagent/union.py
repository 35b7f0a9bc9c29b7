"""One observation and one action space for agents whose spaces differ (the ``shared`` policy).

:class:`UnionSpec` lays every agent's observation into its own block of one union space,
so that one model reads all agents:

* agents with equal observation spaces share a block (their weights are shared too);
* one block: the union observation is that space itself; several blocks: a gymnasium
  ``OneOf`` of the block spaces, whose branch one-hot is the agent-type one-hot and whose
  inactive blocks are zero (rlblocks' ``oneof`` layout, written by the C++ preprocessor);
* ``agent_id_one_hot=True`` appends ``Discrete(n_agents)`` (the agent's index) in a Tuple.

Actions are unified: equal spaces stay as they are; ``Discrete`` of different sizes become
``Discrete(max n)`` and ``MultiDiscrete`` of one length ``MultiDiscrete(max per component)``,
with each agent's impossible actions masked; float ``Box`` of one rank become the
per-dimension largest ``Box`` (an agent takes its leading slice). When a mask is needed (or
an agent already observes RLlib's ``{"action_mask", "observations"}`` Dict), the union
observation is in that Dict form, so the native trainer, export and ``rlblocks.rllib`` mask
the impossible actions: an agent never takes an action outside its own space.

Examples:
    >>> from gymnasium.spaces import Box, Discrete
    >>> spec = UnionSpec.build(
    ...     {"a": Box(-1, 1, (2,)), "b": Discrete(3)}, {"a": Discrete(2), "b": Discrete(4)}
    ... )
    >>> spec.action_space
    Discrete(4)
    >>> value = spec.value("a", np.array([0.5, -0.5], np.float32))
    >>> value["action_mask"].tolist(), value["observations"][0]
    ([1.0, 1.0, 0.0, 0.0], 0)
    >>> from rlblocks.catalog import ModelCatalog
    >>> prep = ModelCatalog.get_preprocessor_for_space(spec.observation_space)
    >>> prep.transform(value).tolist()  # mask, type one-hot, a's block, b's (zero) block
    [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.5, -0.5, 0.0, 0.0, 0.0]
    >>> spec.agent_action("b", 3), spec.block("a")
    (3, (6, 8))
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, OneOf, Tuple

from rlblocks.masks import MASK_KEY, OBS_KEY, is_mask_space, mask_form, mask_form_space, mask_layout
from rlblocks.spaces import Repeated

__all__ = ["UnionSpec", "unify_actions"]


def _discrete_sizes(space: gym.Space) -> list[int] | None:
    if isinstance(space, Discrete):
        return [int(space.n)]
    if isinstance(space, MultiDiscrete) and space.nvec.ndim == 1:
        return [int(n) for n in space.nvec]
    return None


def _starts(space: Any) -> np.ndarray:
    return np.asarray(space.start, np.int64)


def unify_actions(spaces: Mapping[Any, gym.Space]) -> gym.Space:
    """The one action space of agents with ``spaces`` (see the module docstring).

    Raises:
        ValueError: Spaces that cannot be unified (the agents and spaces are named).

    Examples:
        >>> unify_actions({"a": Box(-1, 1, (2,)), "b": Box(-2, 2, (3,))})
        Box(-2.0, 2.0, (3,), float32)
    """
    items: list[tuple[Any, Any]] = list(spaces.items())
    first = items[0][1]
    if all(s == first for _, s in items):
        return first
    kinds = {type(s) for _, s in items}
    if kinds == {Discrete}:
        return Discrete(max(int(s.n) for _, s in items))
    if kinds == {MultiDiscrete} and len({s.nvec.shape for _, s in items}) == 1:
        if items[0][1].nvec.ndim == 1:
            return MultiDiscrete(np.max([s.nvec for _, s in items], axis=0))
    if kinds == {Box} and all(np.issubdtype(s.dtype, np.floating) for _, s in items):
        if len({len(s.shape) for _, s in items}) == 1:
            shape = tuple(int(d) for d in np.max([s.shape for _, s in items], axis=0))
            low = np.full(shape, np.inf, np.float64)
            high = np.full(shape, -np.inf, np.float64)
            for _, s in items:
                where = tuple(slice(0, d) for d in s.shape)
                low[where] = np.minimum(low[where], s.low)
                high[where] = np.maximum(high[where], s.high)
            dtype = np.result_type(*(s.dtype for _, s in items))
            return Box(low.astype(dtype), high.astype(dtype), shape, dtype)
    listed = ", ".join(f"{agent}: {space}" for agent, space in items)
    raise ValueError(
        f"the agents' action spaces cannot be unified for one shared policy ({listed}); "
        "a shared policy takes Discrete spaces of any size, MultiDiscrete of one length or "
        "float Box spaces of one rank. Use multiagent.policy_mapping: by_space (one policy "
        "per kind of agent) or per_agent"
    )


def _blank(space: gym.Space) -> Any:
    """A legal value of ``space`` for an idle lane (zeros where the space allows them)."""
    if isinstance(space, Box):
        return np.clip(np.zeros(space.shape, space.dtype), space.low, space.high)
    if isinstance(space, Discrete):
        return int(space.start)
    if isinstance(space, MultiDiscrete):
        return np.asarray(space.start, space.dtype).copy()
    if isinstance(space, MultiBinary):
        return np.zeros(space.shape, space.dtype)
    if isinstance(space, Dict):
        return {k: _blank(s) for k, s in space.spaces.items()}
    if isinstance(space, Tuple):
        return tuple(_blank(s) for s in space.spaces)
    if isinstance(space, (Repeated, gym.spaces.Sequence)):
        return []
    if isinstance(space, OneOf):
        return (0, _blank(space.spaces[0]))
    if isinstance(space, gym.spaces.Graph):  # one node of zeros, no edges
        nodes = np.asarray(_blank(space.node_space))[None]
        return gym.spaces.GraphInstance(nodes, None, np.zeros((0, 2), np.int64))
    if isinstance(space, gym.spaces.Text):
        return space.character_list[0] * space.min_length
    sampler = copy.deepcopy(space)
    sampler.seed(0)
    return sampler.sample()


@dataclass(frozen=True)
class _Agent:
    index: int
    block: int
    own_mask: bool  # the agent observes {"action_mask", "observations"} itself
    mask_slots: np.ndarray | None  # its mask entries' positions in the union mask
    type_mask: np.ndarray | None  # the union mask of its own actions (float32)


class UnionSpec:
    """The union observation / unified action space of a set of agents (module docstring).

    Build it with :meth:`build`; the constructor is internal.
    """

    def __init__(
        self,
        agents: tuple[Any, ...],
        obs_spaces: dict[Any, gym.Space],
        action_spaces: dict[Any, gym.Space],
        blocks: tuple[gym.Space, ...],
        observation_space: gym.Space,
        action_space: gym.Space,
        info: dict[Any, _Agent],
        mask_size: int,
        mask_firsts: np.ndarray,
        agent_id_one_hot: bool,
    ):
        self.agents = agents
        self.obs_spaces = obs_spaces
        self.action_spaces = action_spaces
        self.blocks = blocks
        self.observation_space = observation_space
        self.action_space = action_space
        self.agent_id_one_hot = agent_id_one_hot
        self._info = info
        self._mask_size = mask_size
        self._mask_firsts = mask_firsts
        self._blank: Any = None

    @classmethod
    def build(
        cls,
        obs_spaces: Mapping[Any, gym.Space],
        action_spaces: Mapping[Any, gym.Space],
        agent_id_one_hot: bool = False,
    ) -> UnionSpec:
        """The union of ``obs_spaces`` / ``action_spaces`` (one entry per agent, the order
        of ``obs_spaces`` is the agent index order).

        Raises:
            ValueError: No agents, mismatched agent sets, or action spaces that cannot be
                unified (:func:`unify_actions`).
        """
        agents = tuple(obs_spaces)
        if not agents:
            raise ValueError("a union needs at least one agent")
        if set(action_spaces) != set(agents):
            raise ValueError(
                f"observation spaces are given for {sorted(map(str, agents))} but action "
                f"spaces for {sorted(map(str, action_spaces))}"
            )
        # PettingZoo's {observation, action_mask} is read as RLlib's mask form (rlblocks.masks)
        spaces: dict[Any, Any] = {a: mask_form_space(s) for a, s in obs_spaces.items()}
        own_mask = {a: is_mask_space(spaces[a]) for a in agents}
        inner = {a: spaces[a][OBS_KEY] if own_mask[a] else spaces[a] for a in agents}
        blocks: list[gym.Space] = []
        block_of: dict[Any, int] = {}
        for a in agents:
            for i, b in enumerate(blocks):
                if b == inner[a]:
                    block_of[a] = i
                    break
            else:
                block_of[a] = len(blocks)
                blocks.append(inner[a])
        action_space = unify_actions({a: action_spaces[a] for a in agents})
        needs_mask = any(own_mask.values()) or any(action_spaces[a] != action_space for a in agents)
        union_sizes = _discrete_sizes(action_space)
        info: dict[Any, _Agent] = {}
        mask_size = 0
        firsts = np.zeros(0, np.int64)  # the first entry of each component's mask block
        if needs_mask and union_sizes is not None:
            mask_size = sum(union_sizes)
            offsets = np.concatenate([[0], np.cumsum(union_sizes)[:-1]]).astype(np.int64)
            firsts = offsets
            for i, a in enumerate(agents):
                sizes = _discrete_sizes(action_spaces[a]) or union_sizes
                slots = np.concatenate(
                    [off + np.arange(n) for off, n in zip(offsets, sizes, strict=True)]
                ).astype(np.int64)
                type_mask = np.zeros(mask_size, np.float32)
                type_mask[slots] = 1.0
                info[a] = _Agent(i, block_of[a], own_mask[a], slots, type_mask)
        elif needs_mask and any(own_mask.values()):
            # equal (e.g. Tuple/Dict) action spaces: the agents' own masks pass through
            masked = next(a for a in agents if own_mask[a])
            lay = mask_layout(action_space, None, spaces[masked][MASK_KEY])
            mask_size = lay.size
            firsts = np.asarray([start for start, _ in lay.segments], np.int64)
            for i, a in enumerate(agents):
                opened = None if own_mask[a] else np.ones(mask_size, np.float32)
                info[a] = _Agent(i, block_of[a], own_mask[a], np.arange(mask_size), opened)
        else:
            info = {a: _Agent(i, block_of[a], False, None, None) for i, a in enumerate(agents)}
        obs: gym.Space = blocks[0] if len(blocks) == 1 else OneOf(tuple(blocks))
        if agent_id_one_hot:
            obs = Tuple((obs, Discrete(len(agents))))
        if mask_size:
            obs = Dict({MASK_KEY: Box(0.0, 1.0, (mask_size,), np.float32), OBS_KEY: obs})
        return cls(
            agents,
            dict(obs_spaces),
            dict(action_spaces),
            tuple(blocks),
            obs,
            action_space,
            info,
            mask_size,
            firsts,
            agent_id_one_hot,
        )

    # --- observations -------------------------------------------------------------------------
    def _agent(self, agent: Any) -> _Agent:
        try:
            return self._info[agent]
        except KeyError:
            raise ValueError(
                f"agent {agent!r} is not one of this policy's agents {list(self.agents)}"
            ) from None

    def value(self, agent: Any, obs: Any) -> Any:
        """The union value of ``agent``'s raw observation ``obs``."""
        info = self._agent(agent)
        obs = mask_form(obs)
        inner = obs
        own = None
        if info.own_mask:
            if not isinstance(obs, Mapping) or MASK_KEY not in obs or OBS_KEY not in obs:
                raise ValueError(
                    f"agent {agent!r}: its observation space is a {{{MASK_KEY!r}, {OBS_KEY!r}}} "
                    f"Dict but it observed {type(obs).__name__}"
                )
            inner, own = obs[OBS_KEY], obs[MASK_KEY]
        value: Any = inner if len(self.blocks) == 1 else (info.block, inner)
        if self.agent_id_one_hot:
            value = (value, info.index)
        if not self._mask_size:
            return value
        if own is None:
            assert info.type_mask is not None
            mask = info.type_mask
        else:
            own_arr = np.asarray(own, np.float32).reshape(-1)
            slots = info.mask_slots
            assert slots is not None
            if own_arr.shape != slots.shape:
                raise ValueError(
                    f"agent {agent!r}: obs[{MASK_KEY!r}] has {own_arr.size} entries, its "
                    f"action space {self.action_spaces[agent]} needs {slots.size}"
                )
            mask = np.zeros(self._mask_size, np.float32)
            mask[slots] = own_arr
        return {MASK_KEY: mask, OBS_KEY: value}

    def blank(self) -> Any:
        """The union value of an idle lane: block 0's zero value, a mask allowing the first
        action of every component (never acted on; it only keeps the batch's shape)."""
        if self._blank is None:
            value: Any = _blank(self.blocks[0])
            if len(self.blocks) > 1:
                value = (0, value)
            if self.agent_id_one_hot:
                value = (value, 0)
            if self._mask_size:
                mask = np.zeros(self._mask_size, np.float32)
                mask[self._mask_firsts] = 1.0
                value = {MASK_KEY: mask, OBS_KEY: value}
            self._blank = value
        return self._blank

    def block(self, agent: Any, options: Mapping[str, Any] | None = None) -> tuple[int, int]:
        """``(start, stop)`` of ``agent``'s own preprocessed observation in the preprocessed
        union row (``options``: the model config the preprocessor was built with)."""
        from rlblocks.layout import layout

        info = self._agent(agent)
        path: tuple[Any, ...] = ()
        if self._mask_size:
            path += (OBS_KEY,)
        if self.agent_id_one_hot:
            path += (0,)
        if len(self.blocks) > 1:
            path += (info.block,)
        slot = layout(self.observation_space, options).find(path)
        return slot.offset, slot.offset + slot.node.size

    # --- actions ------------------------------------------------------------------------------
    def agent_action(self, agent: Any, action: Any) -> Any:
        """``agent``'s own action from a unified ``action`` (Box: its leading slice;
        Discrete / MultiDiscrete: shifted by its ``start``)."""
        space = self.action_spaces[agent]
        if space == self.action_space:
            return action
        if isinstance(space, Discrete):
            return int(space.start) + int(action)
        if isinstance(space, MultiDiscrete):
            return (_starts(space) + np.asarray(action, np.int64)).astype(space.dtype)
        if isinstance(space, Box):
            arr = np.asarray(action)
            return arr[tuple(slice(0, d) for d in space.shape)].astype(space.dtype)
        raise AssertionError(f"unhandled action space {space}")  # unify_actions refused it

    def __repr__(self) -> str:
        return (
            f"UnionSpec({len(self.agents)} agents, {len(self.blocks)} blocks, "
            f"obs={self.observation_space}, action={self.action_space})"
        )
