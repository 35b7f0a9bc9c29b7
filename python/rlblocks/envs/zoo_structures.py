"""The zoo's structured observation tasks: one bandit per gymnasium space whose values have
no fixed shape — ``Sequence``, ``Graph``, ``Text`` and ``OneOf`` (see :mod:`rlblocks.envs.zoo`).

Each step's right action is a function of that step's observation alone, and of its
structure: which item of a list holds the largest value, how many neighbours one node of a
graph has, which word a string spells, which branch of a union was drawn. An agent that acts
on a stale observation scores random, and so does one that ignores the structure (e.g. reads
a list's slots by position, where the items come in random order).

Examples:
    >>> env = SequenceBandit(max_len=4, episode_len=4)
    >>> obs, _ = env.reset(seed=0)
    >>> total = 0.0
    >>> for _ in range(4):
    ...     obs, reward, terminated, truncated, info = env.step(env.answer(obs))
    ...     total += reward
    >>> total, truncated, env.max_return, env.random_return
    (4.0, True, 4.0, 2.0)
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium import spaces

from rlblocks.envs.zoo import ZooEnv

__all__ = ["GraphBandit", "OneOfBandit", "SequenceBandit", "TextBandit"]


def _check_int(name: str, arg: str, value: int, low: int) -> int:
    if isinstance(value, bool) or int(value) != value or value < low:
        raise ValueError(f"{name}: {arg} must be an int >= {low}, got {value!r}")
    return int(value)


class SequenceBandit(ZooEnv):
    """A gymnasium ``Sequence(Box(-1, 1, (2,)))`` of an even number (2..``max_len``) of items
    ``(x, y)`` in random order; the answer (``Discrete(2)``) is whether the item with the
    largest ``x`` has a positive ``y``.

    Half the items have a positive ``y`` and half a negative one (``|y| >= 0.1``), and the
    ``x`` are uniform: whatever does not tell WHICH item has the largest ``x`` (the length,
    any one slot, the sum or the signs of the ``y``) says nothing about the answer, so a
    model must compare the items. Either answer has probability 1/2.

    Args:
        max_len: Longest sequence (even, >= 2).
        episode_len: Steps per episode.

    Examples:
        >>> env = SequenceBandit()
        >>> obs = (np.array([0.2, -0.5], np.float32), np.array([0.9, 0.3], np.float32))
        >>> env.answer(obs), env.answer(obs[::-1]), env.answer(obs[:1]), env.random_return
        (1, 1, 0, 8.0)
    """

    random_step_reward = 0.5

    def __init__(self, max_len: int = 6, episode_len: int = 16):
        super().__init__(episode_len)
        self.max_len = _check_int("SequenceBandit", "max_len", max_len, 2)
        if self.max_len % 2:
            raise ValueError(f"SequenceBandit: max_len must be even, got {max_len!r}")
        self.observation_space = spaces.Sequence(spaces.Box(-1.0, 1.0, (2,), np.float32))
        self.action_space = spaces.Discrete(2)

    def _draw(self) -> tuple[np.ndarray, ...]:
        rng = self.np_random
        half = int(rng.integers(1, self.max_len // 2 + 1))
        y = rng.uniform(0.1, 1.0, 2 * half) * np.repeat([1.0, -1.0], half)
        items = np.stack([rng.uniform(-1.0, 1.0, 2 * half), rng.permutation(y)], axis=1)
        return tuple(items.astype(np.float32))

    def answer(self, obs: Any) -> int:
        items = np.asarray(obs, np.float32).reshape(-1, 2)
        return int(items[int(np.argmax(items[:, 0])), 1] > 0.0)

    def score(self, obs: Any, action: Any) -> float:
        return float(int(action) == self.answer(obs))


class GraphBandit(ZooEnv):
    """A gymnasium ``Graph(node_space=Box(0, 1, (2,)), edge_space=Box(0, 1, (1,)))`` of
    ``min_nodes..max_nodes`` nodes: node feature 0 flags the one marked node, feature 1 and
    the edge feature are noise. Undirected edges are stored in both directions (the links
    ``(i, j)`` and ``(j, i)``, in random order). The answer (``Discrete(2)``) is whether the
    marked node has at least 2 neighbours.

    Each pair of nodes is linked with probability 0.3, redrawn until some node has at least
    2 neighbours and some node at most 1; then the answer is drawn (1/2 each) and a node of
    that kind is marked. The unmarked graph (its size, edge count, degrees) is thus the same
    whatever the answer: only the marked node's own links tell it.

    Args:
        min_nodes: Fewest nodes (>= 3).
        max_nodes: Most nodes (>= ``min_nodes``).
        episode_len: Steps per episode.

    Examples:
        >>> from gymnasium.spaces import GraphInstance
        >>> env = GraphBandit()
        >>> nodes = np.array([[0, 0.5], [1, 0.1], [0, 0.7]], np.float32)
        >>> links = np.array([[1, 0], [0, 1], [1, 2], [2, 1]])
        >>> obs = GraphInstance(nodes, np.zeros((4, 1), np.float32), links)
        >>> env.answer(obs), env.answer(GraphInstance(nodes, obs.edges[:2], links[:2]))
        (1, 0)
    """

    random_step_reward = 0.5

    def __init__(self, min_nodes: int = 3, max_nodes: int = 8, episode_len: int = 16):
        super().__init__(episode_len)
        self.min_nodes = _check_int("GraphBandit", "min_nodes", min_nodes, 3)
        self.max_nodes = _check_int("GraphBandit", "max_nodes", max_nodes, self.min_nodes)
        self.observation_space = spaces.Graph(
            node_space=spaces.Box(0.0, 1.0, (2,), np.float32),
            edge_space=spaces.Box(0.0, 1.0, (1,), np.float32),
        )
        self.action_space = spaces.Discrete(2)

    def _draw(self) -> spaces.GraphInstance:
        rng = self.np_random
        n = int(rng.integers(self.min_nodes, self.max_nodes + 1))
        rows, cols = np.triu_indices(n, 1)
        while True:
            keep = rng.random(len(rows)) < 0.3
            degree = np.bincount(np.concatenate([rows[keep], cols[keep]]), minlength=n)
            many, few = np.flatnonzero(degree >= 2), np.flatnonzero(degree <= 1)
            if len(many) and len(few):
                break
        marked = int(rng.choice(many if rng.integers(2) else few))
        pairs = np.stack([rows[keep], cols[keep]], axis=1)
        links = np.concatenate([pairs, pairs[:, ::-1]]).astype(np.int64)
        links = links[rng.permutation(len(links))]
        nodes = np.zeros((n, 2), np.float32)
        nodes[marked, 0] = 1.0
        nodes[:, 1] = rng.uniform(0.0, 1.0, n)
        edges = rng.uniform(0.0, 1.0, (len(links), 1)).astype(np.float32)
        return spaces.GraphInstance(nodes, edges, links)

    def answer(self, obs: Any) -> int:
        nodes = np.asarray(obs.nodes, np.float32)
        marked = int(np.argmax(nodes[:, 0]))
        links = np.asarray(obs.edge_links if obs.edge_links is not None else [], np.int64)
        links = links.reshape(-1, 2)
        neighbours = set(links[links[:, 0] == marked, 1].tolist())
        neighbours |= set(links[links[:, 1] == marked, 0].tolist())
        neighbours.discard(marked)
        return int(len(neighbours) >= 2)

    def score(self, obs: Any, action: Any) -> float:
        return float(int(action) == self.answer(obs))


_WORDS = ("ball", "key", "box", "door")
_FILLER = "".join(c for c in string.ascii_lowercase if c not in "".join(_WORDS))


class TextBandit(ZooEnv):
    """A gymnasium ``Text(max_length, min_length=3, charset=a..z)`` string that spells one of
    :attr:`WORDS` at a random position among random filler letters (letters no word uses);
    the answer (``Discrete(4)``) is the word's index.

    Args:
        max_length: Longest string (>= 4, the longest word).
        episode_len: Steps per episode.

    Examples:
        >>> env = TextBandit()
        >>> [env.answer(s) for s in ("ball", "qkeyz", "vbox", "door")], env.random_return
        ([0, 1, 2, 3], 4.0)
        >>> obs, _ = env.reset(seed=3)
        >>> obs in env.observation_space, env.score(obs, env.answer(obs))
        (True, 1.0)
    """

    #: The words to recognise; their index is the answer.
    WORDS: tuple[str, ...] = _WORDS
    #: Letters of the filler (none of them is in a word).
    FILLER: str = _FILLER
    random_step_reward = 0.25

    def __init__(self, max_length: int = 8, episode_len: int = 16):
        super().__init__(episode_len)
        longest = max(len(w) for w in self.WORDS)
        self.max_length = _check_int("TextBandit", "max_length", max_length, longest)
        self.observation_space = spaces.Text(
            self.max_length, min_length=3, charset=string.ascii_lowercase
        )
        self.action_space = spaces.Discrete(len(self.WORDS))

    def _draw(self) -> str:
        rng = self.np_random
        word = self.WORDS[int(rng.integers(len(self.WORDS)))]
        length = int(rng.integers(len(word), self.max_length + 1))
        start = int(rng.integers(length - len(word) + 1))
        filler = [self.FILLER[int(i)] for i in rng.integers(len(self.FILLER), size=length)]
        return "".join(filler[:start]) + word + "".join(filler[start + len(word) :])

    def answer(self, obs: str) -> int:
        for i, word in enumerate(self.WORDS):
            if word in str(obs):
                return i
        raise ValueError(f"TextBandit: {obs!r} spells none of {self.WORDS}")

    def score(self, obs: str, action: Any) -> float:
        return float(int(action) == self.answer(obs))


class OneOfBandit(ZooEnv):
    """A gymnasium ``OneOf((Discrete(3), Box(-1, 1, (2,))))`` value ``(branch, value)``, each
    branch drawn with probability 1/2; the answer (``Discrete(3)``) depends on both:

    * branch 0 (a code ``v``): ``(v + 1) % 3``;
    * branch 1 (a point ``(x, y)``): the third of ``[-1, 1]`` that ``x`` lies in (0, 1, 2),
      mirrored (``2 - third``) when ``y <= 0``.

    Every answer has probability 1/3 in either branch.

    Args:
        episode_len: Steps per episode.

    Examples:
        >>> env = OneOfBandit()
        >>> point = np.array([0.9, -0.2], np.float32)
        >>> env.answer((0, 2)), env.answer((1, point)), env.answer((1, -point))
        (0, 0, 0)
        >>> env.answer((1, np.array([0.0, 0.5], np.float32))), env.random_return
        (1, 5.333333)
    """

    random_step_reward = 1.0 / 3.0

    def __init__(self, episode_len: int = 16):
        super().__init__(episode_len)
        self.observation_space = spaces.OneOf(
            (spaces.Discrete(3), spaces.Box(-1.0, 1.0, (2,), np.float32))
        )
        self.action_space = spaces.Discrete(3)

    def _draw(self) -> tuple[int, Any]:
        rng = self.np_random
        if rng.integers(2) == 0:
            return (0, int(rng.integers(3)))
        return (1, rng.uniform(-1.0, 1.0, 2).astype(np.float32))

    def answer(self, obs: tuple[int, Any]) -> int:
        branch, value = obs
        if int(branch) == 0:
            return (int(value) + 1) % 3
        x, y = (float(v) for v in np.asarray(value).reshape(2))
        third = min(int((x + 1.0) * 1.5), 2)
        return third if y > 0.0 else 2 - third

    def score(self, obs: tuple[int, Any], action: Any) -> float:
        return float(int(action) == self.answer(obs))
