"""rlblocks.envs.multiagent_zoo: PettingZoo's API rules, the schedule of agents, the rewards."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

pytest.importorskip("pettingzoo")

from pettingzoo.test import api_test, parallel_api_test  # noqa: E402
from rlblocks.envs.multiagent_zoo import HeterogeneousBandit, parallel_env  # noqa: E402
from rlblocks.envs.multiagent_zoo import env as aec_env  # noqa: E402

Policy = Callable[[HeterogeneousBandit, str, Any], Any]

# What PettingZoo's API tests may say about this env: it is heterogeneous on purpose, pilots
# observe a Dict, and ids that sit an episode out never terminate.
EXPECTED_WARNINGS = (
    "Agents have different observation space sizes",
    "No agents present but not all possible_agents are terminated or truncated",
    "Observation is not a NumPy array",
    "Observation space for each agent probably should be",
    "The class of observation spaces is different between two agents",
)


def _unexpected(caught: list[warnings.WarningMessage]) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if not str(w.message).startswith(EXPECTED_WARNINGS)
        and not issubclass(w.category, DeprecationWarning)
    ]


def _n(env: HeterogeneousBandit, agent: str) -> int:
    space = env.action_space(agent)
    assert isinstance(space, spaces.Discrete)
    return int(space.n)


def perfect(env: HeterogeneousBandit, agent: str, obs: Any) -> int:
    return env.answer(agent, obs)


def run_episode(
    env: HeterogeneousBandit, seed: int | None, policy: Policy
) -> tuple[dict[str, float], list[tuple[Any, ...]]]:
    """Plays one episode; returns each agent's return and the trace of every step."""
    obs, infos = env.reset(seed=seed)
    trace: list[tuple[Any, ...]] = [("reset", obs, infos, list(env.agents))]
    returns: dict[str, float] = {}
    while env.agents:
        actions = {agent: policy(env, agent, obs[agent]) for agent in env.agents}
        obs, rewards, terminated, truncated, infos = env.step(actions)
        trace.append((actions, obs, rewards, terminated, truncated, infos, list(env.agents)))
        for agent, reward in rewards.items():
            returns[agent] = returns.get(agent, 0.0) + reward
    return returns, trace


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


# -- PettingZoo's own API tests ----------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"max_scouts": 3, "max_pilots": 1, "episode_len": 3}, {"episode_len": 2}],
    ids=["default", "3x1-len3", "len2"],
)
def test_parallel_api(kwargs: dict[str, Any]) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):  # each run plays a few episodes with different schedules
            parallel_api_test(parallel_env(**kwargs), num_cycles=100)
    assert _unexpected(caught) == []


def test_aec_api() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            api_test(aec_env(), num_cycles=100)
    assert _unexpected(caught) == []


def test_spaces() -> None:
    par = parallel_env(max_scouts=2, max_pilots=3)
    assert par.possible_agents == ["scout_0", "scout_1", "pilot_0", "pilot_1", "pilot_2"]
    assert par.metadata["name"] == "rlblocks_heterogeneous_bandit_v0"
    assert str(par.observation_space("scout_1")) == "Box(-1.0, 1.0, (3,), float32)"
    assert str(par.observation_space("pilot_2")) == (
        "Dict('cue': Discrete(4), 'noise': Box(-1.0, 1.0, (2,), float32))"
    )
    assert (_n(par, "scout_0"), _n(par, "pilot_0")) == (3, 5)
    for agent in par.possible_agents:
        assert par.observation_space(agent) is par.observation_space(agent)
        assert par.action_space(agent) is par.action_space(agent)
    with pytest.raises(ValueError, match="unknown agent 'pilot_3'"):
        par.action_space("pilot_3")


# -- seeding ---------------------------------------------------------------------------------


def _random_policy(seed: int) -> Policy:
    rng = np.random.default_rng(seed)
    return lambda env, agent, obs: int(rng.integers(_n(env, agent)))


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_seeded_episodes_repeat(seed: int) -> None:
    a, b = parallel_env(), parallel_env()
    first = run_episode(a, seed, _random_policy(1))
    assert _same(first, run_episode(b, seed, _random_policy(1)))
    assert _same(first, run_episode(a, seed, _random_policy(1)))  # the same env, reseeded
    # Unseeded resets go on from the seeded generator, identically in both envs.
    assert _same(run_episode(a, None, _random_policy(2)), run_episode(b, None, _random_policy(2)))


def test_seeds_differ() -> None:
    traces = [run_episode(parallel_env(), seed, perfect)[1] for seed in range(5)]
    assert not any(_same(traces[i], traces[j]) for i in range(5) for j in range(i))


# -- who takes part, when ----------------------------------------------------------------------


def test_agent_count_varies_and_agents_enter_and_leave_mid_episode() -> None:
    par = parallel_env()  # episode_len 8
    counts, late_entries, early_exits = set(), 0, 0
    for seed in range(60):
        obs, _ = par.reset(seed=seed)
        participants = par.schedule
        assert set(participants) <= set(par.possible_agents)
        # at least one agent of each kind at step 0
        assert {a.split("_")[0] for a in obs} == {"scout", "pilot"}
        counts.add((sum(a.startswith("scout") for a in participants), len(participants)))
        seen_at: dict[str, int] = {agent: 0 for agent in obs}
        left_at: dict[str, int] = {}
        acted: dict[str, int] = {}
        t = 0
        while par.agents:
            live_before = list(par.agents)
            obs, rewards, terminated, truncated, infos = par.step(
                {agent: 0 for agent in live_before}
            )
            t += 1
            for agent in live_before:
                acted[agent] = acted.get(agent, 0) + 1
            # the dicts hold exactly the agents that acted and those entering now
            entering = set(obs) - set(live_before)
            assert set(rewards) == set(terminated) == set(truncated) == set(infos) == set(obs)
            assert set(live_before) <= set(obs)
            for agent in entering:
                assert agent not in seen_at and agent not in left_at, agent  # no revival
                assert (rewards[agent], terminated[agent], truncated[agent]) == (0.0, False, False)
                seen_at[agent] = t
            for agent in obs:
                assert par.observation_space(agent).contains(obs[agent]), agent
                done = terminated[agent] or truncated[agent]
                assert not (terminated[agent] and truncated[agent])
                assert truncated[agent] == (done and t == par.episode_len)
                if done:
                    left_at[agent] = t
                assert (agent in par.agents) == (not done)
            assert par.agents == [a for a in par.possible_agents if a in par.agents]
        assert t <= par.episode_len
        assert set(seen_at) == set(left_at) == set(participants)
        for agent, (entry, exit_) in participants.items():
            assert (seen_at[agent], left_at[agent]) == (entry, exit_)
            assert 0 <= entry <= par.episode_len // 2 and exit_ >= entry + 2
            assert acted[agent] == exit_ - entry
        late_entries += sum(entry > 0 for entry, _ in participants.values())
        early_exits += sum(exit_ < par.episode_len for _, exit_ in participants.values())
    assert len({total for _, total in counts}) >= 3  # 2, 3 and 4 agents all occur
    assert len({scouts for scouts, _ in counts}) == 2
    assert late_entries >= 10 and early_exits >= 10


def test_no_gap_before_the_last_entrant() -> None:
    # Nobody live while someone has yet to enter would end the episode early for a
    # trainer: every step until the last agent leaves has a live agent.
    # (Without the rule that keeps the first scout until the last entrant arrives, about
    # one schedule in 200 of these would have such a gap.)
    for par in parallel_env(), parallel_env(max_scouts=2, max_pilots=1, episode_len=12):
        for seed in range(2000):
            par.reset(seed=seed)
            schedule = par.schedule
            last = max(exit_ for _, exit_ in schedule.values())
            for t in range(last):
                assert any(entry <= t < exit_ for entry, exit_ in schedule.values()), (seed, t)


# -- rewards ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [{}, {"max_scouts": 3, "max_pilots": 4, "episode_len": 13}])
def test_perfect_policy_scores_one_per_agent(kwargs: dict[str, Any]) -> None:
    par = parallel_env(**kwargs)
    assert par.max_agent_return == 1.0
    for seed in range(30):
        returns, _ = run_episode(par, seed, perfect)
        assert set(returns) == set(par.schedule)
        for agent, ret in returns.items():
            assert ret == pytest.approx(1.0, abs=1e-12), (seed, agent)


def test_wrong_policies_score_zero() -> None:
    par = parallel_env()

    def wrong(env: HeterogeneousBandit, agent: str, obs: Any) -> int:
        if agent.startswith("pilot"):
            return 4  # always wrong
        return (env.answer(agent, obs) + 1) % 3

    for seed in range(10):
        returns, _ = run_episode(par, seed, wrong)
        assert returns and all(ret == 0.0 for ret in returns.values())


def _mean_returns(policy: Policy, episodes: int) -> dict[str, float]:
    par = parallel_env()
    totals = {"scout": [0.0, 0], "pilot": [0.0, 0]}
    for seed in range(episodes):
        returns, _ = run_episode(par, seed, policy)
        for agent, ret in returns.items():
            assert 0.0 <= ret <= 1.0 + 1e-12
            totals[agent.split("_")[0]][0] += ret
            totals[agent.split("_")[0]][1] += 1
    return {kind: total / n for kind, (total, n) in totals.items()}


def test_random_policy_scores_a_third_and_a_fifth() -> None:
    par = parallel_env()
    assert par.random_agent_return("scout_1") == pytest.approx(1 / 3)
    assert par.random_agent_return("pilot_0") == pytest.approx(1 / 5)
    means = _mean_returns(_random_policy(0), 1500)  # ~2000 agent-episodes per kind, sd < 0.01
    assert means["scout"] == pytest.approx(1 / 3, abs=0.04)
    assert means["pilot"] == pytest.approx(1 / 5, abs=0.04)


def test_acting_on_a_stale_observation_scores_random() -> None:
    last: dict[str, Any] = {}

    def stale(env: HeterogeneousBandit, agent: str, obs: Any) -> int:
        action = env.answer(agent, last[agent]) if agent in last else 0
        last[agent] = obs
        return action

    means = _mean_returns(stale, 1000)
    assert means["scout"] == pytest.approx(1 / 3, abs=0.05)
    # a stale pilot never says 4, so it guesses among 4 answers, not 5
    assert means["pilot"] == pytest.approx(1 / 4, abs=0.05)


# -- bad input -------------------------------------------------------------------------------


def _live(par: HeterogeneousBandit, seed: int = 0) -> dict[str, int]:
    par.reset(seed=seed)
    return {agent: 0 for agent in par.agents}


@pytest.mark.parametrize(
    ("action", "shown"),
    [
        (3, "3"),
        (4, "4"),
        (-1, "-1"),
        (1.0, "1.0"),
        ("1", "'1'"),
        (True, "True"),
        (np.array([1]), "array([1])"),
        (None, "None"),
    ],
)
def test_scout_actions_outside_its_space_raise(action: Any, shown: str) -> None:
    par = parallel_env()
    actions = _live(par)
    scout = next(a for a in actions if a.startswith("scout"))
    with pytest.raises(ValueError) as err:
        par.step({**actions, scout: action})
    message = str(err.value)
    assert f"actions['{scout}'] = {shown}" in message
    assert "Discrete(3)" in message and "[0, 2]" in message


def test_pilot_action_outside_its_space_raises() -> None:
    par = parallel_env()
    actions = _live(par)
    pilot = next(a for a in actions if a.startswith("pilot"))
    par.step({**actions, pilot: 4})  # 4 is in a pilot's space (always wrong, but legal)
    actions = {agent: 0 for agent in par.agents}
    assert pilot in actions  # an agent acts at least twice
    with pytest.raises(ValueError, match=rf"actions\['{pilot}'\] = 5 .*\[0, 4\]"):
        par.step({**actions, pilot: 5})


def test_integer_scalars_of_any_kind_are_actions() -> None:
    par = parallel_env()
    actions = _live(par)
    kinds = [np.int32(1), np.int64(2), np.array(0), np.uint8(1)]
    par.step({agent: kinds[i % 4] for i, agent in enumerate(actions)})


def test_missing_extra_and_unknown_agents_raise() -> None:
    par = parallel_env()
    for seed in range(20):  # find an episode where someone sits out or enters late
        actions = _live(par, seed)
        absent = [a for a in par.possible_agents if a not in actions]
        if absent:
            break
    assert absent
    dropped = next(iter(actions))
    with pytest.raises(ValueError, match=rf"no action for live agent '{dropped}'"):
        par.step({a: v for a, v in actions.items() if a != dropped})
    with pytest.raises(ValueError, match=rf"'{absent[0]}' is not live at step 0"):
        par.step({**actions, absent[0]: 0})
    with pytest.raises(ValueError, match="'medic_0' is not live"):
        par.step({**actions, "medic_0": 0})
    with pytest.raises(ValueError, match="must be a dict"):
        par.step([0] * len(actions))  # type: ignore[arg-type]


def test_a_refused_step_changes_nothing() -> None:
    a, b = parallel_env(), parallel_env()
    actions = _live(a, 5)
    _live(b, 5)
    with pytest.raises(ValueError):
        a.step({**actions, next(iter(actions)): 7})
    assert _same(a.step(actions), b.step(actions))


def test_an_agent_that_left_cannot_act() -> None:
    par = parallel_env(max_scouts=2, max_pilots=2, episode_len=8)
    for seed in range(50):
        obs, _ = par.reset(seed=seed)
        while par.agents:
            before = list(par.agents)
            _, _, terminated, truncated, _ = par.step({agent: 0 for agent in before})
            gone = [a for a in before if terminated[a]]
            if gone and par.agents:
                with pytest.raises(ValueError, match=rf"'{gone[0]}' is not live"):
                    par.step({**{agent: 0 for agent in par.agents}, gone[0]: 0})
                return
    pytest.fail("no episode had an agent terminate before the end")


def test_stepping_without_live_agents_raises() -> None:
    par = parallel_env()
    with pytest.raises(RuntimeError, match="call reset"):
        par.step({})
    run_episode(par, 0, perfect)
    with pytest.raises(RuntimeError, match="call reset"):
        par.step({})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_scouts": 0}, "max_scouts must be an int >= 1, got 0"),
        ({"max_pilots": 1.5}, "max_pilots must be an int >= 1, got 1.5"),
        ({"episode_len": 1}, "episode_len must be an int >= 2, got 1"),
        ({"render_mode": "human"}, "render_mode must be None"),
    ],
)
def test_bad_arguments_raise(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parallel_env(**kwargs)
