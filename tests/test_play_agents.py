"""``play_agents_episode``: the evaluation loop of dict-keyed multi-agent envs (an RLlib
run's checkpoint and its exported policies are played by it): the agents that observe act,
policy by policy, each agent a lane whose recurrent state follows it between the steps it
acts in; an actor reading previous actions or rewards is refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from rlblocks.train.play import LaneActor, play_agents_episode


class _TurnTaking:
    """Agents ``a``, ``b`` and ``c``; ``b`` observes (and acts) on even steps only; every
    agent's reward is its action; ``steps`` steps per episode. Records what it was sent."""

    def __init__(self, steps: int) -> None:
        self.steps, self.t = steps, 0
        self.agents = ["a", "b", "c"]
        self.sent: list[dict[str, Any]] = []
        self.seeds: list[Any] = []

    def _obs(self) -> dict[str, Any]:
        return {a: np.float32(self.t) for a in self.agents if a != "b" or self.t % 2 == 0}

    def reset(self, seed: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        self.t = 0
        self.seeds.append(seed)
        return self._obs(), {}

    def step(self, actions: dict[str, Any]) -> tuple[Any, ...]:
        self.sent.append(dict(actions))
        self.t += 1
        end = self.t >= self.steps
        rewards = {a: float(x) for a, x in actions.items()}
        return self._obs(), rewards, {"__all__": end}, {"__all__": False}, {}


class _Counter:
    """A recurrent stand-in policy: each lane's action is how often it acted before (its
    state), plus ``offset``; it reads the observation to check what the loop gives it."""

    def __init__(self, offset: int, reads_prev: bool = False) -> None:
        self.offset, self.reads_prev = offset, reads_prev
        self.seen: list[list[Any]] = []

    def initial_state(self, n: int) -> list[Any] | None:
        return [np.zeros((n,), np.int64)]

    def initial_prev(self, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        return (None, np.zeros((n, 1))) if self.reads_prev else (None, None)

    def observe(self, raw: list[Any], x: Any, fresh: np.ndarray | None) -> Any:
        return raw

    def act(self, x: Any, state: Any, pa: Any, pr: Any) -> tuple[Any, Any]:
        self.seen.append(list(x))
        return state[0] + self.offset, [state[0] + 1]

    def restart(self, state: list[Any], fresh: np.ndarray) -> list[Any]:
        return state


def test_each_agent_keeps_its_own_state_between_the_steps_it_acts_in() -> None:
    env = _TurnTaking(steps=4)
    shared, solo = _Counter(0), _Counter(100)
    assert isinstance(shared, LaneActor)
    mapping = {"a": "shared", "b": "shared", "c": "solo"}
    totals, steps = play_agents_episode(env, {"shared": shared, "solo": solo}, mapping, 11)
    assert steps == 4 and env.seeds == [11]
    # b acts on steps 0 and 2 only: its count is its own, not a's
    assert [sorted(s.items()) for s in env.sent] == [
        [("a", 0), ("b", 0), ("c", 100)],
        [("a", 1), ("c", 101)],
        [("a", 2), ("b", 1), ("c", 102)],
        [("a", 3), ("c", 103)],
    ]
    assert totals == {"a": 6.0, "b": 1.0, "c": 406.0}
    assert shared.seen[1] == [np.float32(1)]  # only the observing agent's observation


def test_prepare_gives_the_policies_what_they_read() -> None:
    env = _TurnTaking(steps=2)
    actor = _Counter(0)
    play_agents_episode(
        env,
        {"p": actor},
        {"a": "p", "b": "p", "c": "p"},
        None,
        prepare=lambda obs: {a: (a, float(v) * 10) for a, v in obs.items()},
    )
    assert actor.seen == [[("a", 0.0), ("b", 0.0), ("c", 0.0)], [("a", 10.0), ("c", 10.0)]]


def test_an_actor_reading_previous_rewards_is_refused() -> None:
    with pytest.raises(ValueError, match="policy 'p' reads previous actions or rewards"):
        play_agents_episode(_TurnTaking(2), {"p": _Counter(0, True)}, {"a": "p"}, 0)
