"""The evaluation loops: one for single-agent envs, one for multi-agent envs.

:func:`play_episode` plays one episode of a plain gymnasium env with one policy;
:func:`play_episodes` steps a :class:`~rlblocks.multiagent.envs.MultiAgentVectorEnv` until
a number of episodes end; :func:`play_agents_episode` plays one episode of a dict-keyed
multi-agent env (RLlib's ``MultiAgentEnv`` API, as an RLlib run's
:class:`~rlblocks.rllib.multiagent_env.UnionMultiAgentEnv`), each policy acting for those of
its agents that observe in a step. Each policy acts through a :class:`LaneActor` (the native
trainer's :class:`~rlblocks.train.policy.Policy` and an exported artifact are both driven
this way), and the loop carries each policy's lanes: the observation the policy reads, its
recurrent state and its previous actions and rewards, started over for a lane whose agent
starts anew. The loops drive every policy through :class:`LaneActor` (a single-agent
env is one lane): the native trainer's policies, exported artifacts and the modules of an
RLlib run's checkpoint (:mod:`rlblocks.rllib.module_actor`) alike; they import neither torch
nor Ray (``rlblocks evaluate --exported`` runs them).

Examples:
    >>> import numpy as np
    >>> class Zeros:  # a LaneActor that always takes action 0, without state
    ...     def initial_state(self, n): return None
    ...     def initial_prev(self, n): return None, None
    ...     def observe(self, raw, x, fresh): return raw
    ...     def act(self, x, state, pa, pr): return np.zeros(len(x), np.int64), None
    ...     def restart(self, state, fresh): return state
    >>> isinstance(Zeros(), LaneActor)
    True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from rlblocks.nest import tree_index
from rlblocks.spaces import clip_actions
from rlblocks.wrappers.vector_steps import episode_success

if TYPE_CHECKING:  # the multi-agent side imports torch (its masks); the loop needs none
    from rlblocks.multiagent.envs import MultiAgentVectorEnv

__all__ = ["LaneActor", "play_agents_episode", "play_episode", "play_episodes"]


@runtime_checkable
class LaneActor(Protocol):
    """One policy acting for its ``n`` lanes (its agents) of a multi-agent env."""

    def initial_state(self, n: int) -> list[Any] | None:
        """The recurrent state of ``n`` lanes at an episode start (None: stateless)."""
        ...

    def initial_prev(self, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``prev_actions`` ``[n, k, *action_shape]`` and ``prev_rewards`` ``[n, m]`` at an
        episode start (None where the policy reads none)."""
        ...

    def observe(self, raw: list[Any], x: Any, fresh: np.ndarray | None) -> Any:
        """What the policy reads from the lanes' raw observations ``raw``, given what it
        read before (``x``; None at the first reset) and the lanes starting anew."""
        ...

    def act(self, x: Any, state: Any, pa: Any, pr: Any) -> tuple[Any, Any]:
        """``(actions, state_out)`` for the lanes (``state_out`` None when stateless)."""
        ...

    def restart(self, state: list[Any], fresh: np.ndarray) -> list[Any]:
        """``state`` (not changed) with the rows ``fresh`` set to the initial state."""
        ...


def play_episode(
    actor: LaneActor,
    env: Any,
    seed: int | None,
    clip: Any = None,
    successes: list[float] | None = None,
) -> tuple[float, int]:
    """One episode of the single-agent ``env`` from ``reset(seed=seed)``, ``actor`` acting
    for its one lane; ``(return, length)``.

    Args:
        actor: The policy (its state and previous actions/rewards start from their initial
            values).
        env: A plain gymnasium env.
        seed: The reset seed.
        clip: The action space to clip Box actions into before stepping (None: no clipping).
        successes: A list to append the episode's success flag to, when the info of its
            last step has one (``is_success`` or ``success``).
    """
    raw, _ = env.reset(seed=seed)
    state = actor.initial_state(1)
    pa, pr = actor.initial_prev(1)
    total, length, done = 0.0, 0, False
    x: Any = None
    while not done:
        x = actor.observe([raw], x, None)
        actions, state = actor.act(x, state, pa, pr)
        action = tree_index(actions, 0)
        if clip is not None:
            action = clip_actions(action, clip)
        raw, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        length += 1
        done = bool(terminated or truncated)
        if pa is not None:
            pa = np.roll(pa, -1, axis=1)
            pa[0, -1] = np.asarray(actions).reshape(pa.shape[2:])
        if pr is not None:
            pr = np.roll(pr, -1, axis=1)
            pr[0, -1] = reward
    if successes is not None:
        success = episode_success([info], 0)
        if success is not None:
            successes.append(success)
    return total, length


def play_episodes(
    hub: MultiAgentVectorEnv,
    actors: Mapping[str, LaneActor],
    episodes: int,
    seed: int | None,
) -> None:
    """Steps ``hub`` (reset with ``seed``, policy by policy in the order of ``actors``; the
    next episodes follow as the copies reset themselves) until ``episodes`` episodes end.

    The returns are in ``hub`` afterwards (``episode_returns``, ``episode_lengths``,
    :meth:`~rlblocks.multiagent.envs.MultiAgentVectorEnv.metrics`).

    Args:
        hub: The env copies, one ``actors`` entry for each of its policies.
        actors: ``{policy_id: actor}``.
        episodes: Episodes to play.
        seed: The reset seed.
    """
    lanes: dict[str, dict[str, Any]] = {}
    for pid, actor in actors.items():
        n = len(hub.specs[pid].agents)
        pa, pr = actor.initial_prev(n)
        state = actor.initial_state(n)
        x = actor.observe(hub.reset_lanes(pid, seed), None, None)
        lanes[pid] = {"x": x, "state": state, "pa": pa, "pr": pr}
    while hub.episodes_total < episodes:
        actions: dict[str, Any] = {}
        for pid, actor in actors.items():
            lane = lanes[pid]
            acted, lane["state"] = actor.act(lane["x"], lane["state"], lane["pa"], lane["pr"])
            actions[pid] = lane["acted"] = acted
        results = hub.step(actions)
        for pid, actor in actors.items():
            lane, res = lanes[pid], results[pid]
            fresh = np.flatnonzero(np.asarray(res.starts, bool))
            lane["x"] = actor.observe(res.raw, lane["x"], fresh)
            if lane["pa"] is not None:
                pa = np.roll(lane["pa"], -1, axis=1)
                pa[:, -1] = np.asarray(lane["acted"]).reshape((len(pa), *pa.shape[2:]))
                pa[fresh] = actor.initial_prev(len(fresh))[0]
                lane["pa"] = pa
            if lane["pr"] is not None:
                pr = np.roll(lane["pr"], -1, axis=1)
                pr[:, -1] = res.rewards
                pr[fresh] = 0.0
                lane["pr"] = pr
            if fresh.size and lane["state"]:
                lane["state"] = actor.restart(lane["state"], fresh)


def play_agents_episode(
    env: Any,
    actors: Mapping[Any, LaneActor],
    mapping: Mapping[Any, Any],
    seed: int | None,
    prepare: Callable[[dict[Any, Any]], Mapping[Any, Any]] | None = None,
) -> tuple[dict[Any, float], int]:
    """One episode of the dict-keyed multi-agent ``env`` from ``reset(seed=seed)``:
    ``({agent_id: return}, steps)`` (the agents that got a reward).

    Each step the agents of ``env.agents`` that observe act: policy by policy (in the order
    of their first acting agent), one :meth:`LaneActor.act` for the policy's acting agents,
    each agent a lane of its policy (its recurrent state kept between the steps it acts in).
    The episode ends when ``terminated`` or ``truncated`` says ``"__all__"``.

    Args:
        env: ``reset(seed=) -> (obs, infos)`` and ``step(actions) -> (obs, rewards,
            terminated, truncated, infos)``, each a dict keyed by agent id.
        actors: ``{policy_id: actor}``, each acting in its policy's env actions.
        mapping: ``{agent_id: policy_id}`` for every agent the env may have.
        seed: The reset seed.
        prepare: What the policies read of the acting agents' observations
            (``{agent_id: obs} -> {agent_id: value}``; None: the observations themselves).

    Raises:
        ValueError: An actor that reads previous actions or rewards (this loop carries
            none: the agents that act change from step to step).
    """
    lanes: dict[Any, list[Any]] = {pid: [a for a in mapping if mapping[a] == pid] for pid in actors}
    states: dict[Any, Any] = {}
    for pid, actor in actors.items():
        if any(v is not None for v in actor.initial_prev(len(lanes[pid]))):
            raise ValueError(
                f"policy {pid!r} reads previous actions or rewards, which the multi-agent "
                "evaluation does not carry"
            )
        states[pid] = actor.initial_state(len(lanes[pid]))
    obs, _ = env.reset(seed=seed)
    totals: dict[Any, float] = {}
    steps, done = 0, False
    while not done:
        acting = [a for a in env.agents if a in obs]
        seen = {a: obs[a] for a in acting}
        if prepare is not None:
            seen = dict(prepare(seen))
        actions: dict[Any, Any] = {}
        for pid in dict.fromkeys(mapping[a] for a in acting):
            agents = [a for a in acting if mapping[a] == pid]
            rows = np.array([lanes[pid].index(a) for a in agents], np.int64)
            state = states[pid]
            sub = None if not state else [np.asarray(s)[rows] for s in state]
            x = actors[pid].observe([seen[a] for a in agents], None, None)
            acted, out = actors[pid].act(x, sub, None, None)
            if state and out is not None:
                states[pid] = state = [np.array(s) for s in state]
                for s, o in zip(state, out, strict=True):
                    s[rows] = np.asarray(o)
            for i, a in enumerate(agents):
                actions[a] = tree_index(acted, i)
        obs, rewards, terminated, truncated, _ = env.step(actions)
        for a, r in rewards.items():
            totals[a] = totals.get(a, 0.0) + float(r)
        steps += 1
        done = bool(terminated["__all__"] or truncated["__all__"])
    return totals, steps
