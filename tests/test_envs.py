"""Semantics of the bundled environments (rlblocks.envs)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import rlblocks.envs as envs
from gymnasium.spaces import GraphInstance
from gymnasium.utils.env_checker import check_env, data_equivalence
from rlblocks.envs import (
    CorrelatedActionsEnv,
    ParametricCartPole,
    RepeatAfterMe,
    StatelessCartPole,
    correlated_reward,
    zoo,
    zoo_actions,
    zoo_memory,
    zoo_observations,
    zoo_structures,
)
from rlblocks.envs.masked_bandit import MaskedBanditEnv


@pytest.mark.parametrize("env_id", sorted(envs.ENV_IDS))
def test_registered_ids_make_checked_envs(env_id: str) -> None:
    env = gym.make(env_id)
    if env_id != "rlblocks/ParametricCartPole-v0":  # check_env steps with masked actions
        check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    for _ in range(3):
        masked = isinstance(obs, dict) and "action_mask" in obs
        mask = obs["action_mask"].astype(np.int8) if masked else None
        obs = env.step(
            env.action_space.sample(mask=mask) if mask is not None else env.action_space.sample()
        )[0]
        assert env.observation_space.contains(obs)


def test_stateless_cartpole_is_cartpole_without_velocities() -> None:
    full = gym.make("CartPole-v1").unwrapped
    stateless = StatelessCartPole()
    full_obs, _ = full.reset(seed=123)
    obs, _ = stateless.reset(seed=123)
    np.testing.assert_array_equal(obs, full_obs[[0, 2]])
    rng = np.random.default_rng(0)
    steps = 0
    while True:
        action = int(rng.integers(2))
        f_obs, f_rew, f_term, _, _ = full.step(action)
        obs, rew, term, trunc, _ = stateless.step(action)
        steps += 1
        np.testing.assert_array_equal(obs, f_obs[[0, 2]])
        assert obs.dtype == np.float32 and obs.shape == (2,)
        assert (rew, term) == (f_rew, f_term)
        if term:
            break
    assert not trunc and steps > 1
    box = full.observation_space
    np.testing.assert_array_equal(stateless.observation_space.high, box.high[[0, 2]])


def test_stateless_cartpole_truncates_at_limit() -> None:
    env = StatelessCartPole(max_episode_steps=5)
    env.reset(seed=0)
    flags = []
    for _ in range(5):
        _, _, term, trunc, _ = env.step(0 if len(flags) % 2 else 1)
        flags.append((term, trunc))
    assert flags[-1] == (False, True) and not any(t for _, t in flags[:-1])
    env.reset(seed=0)
    assert env.step(1)[3] is False  # the counter restarts on reset


@pytest.mark.parametrize("delay", [0, 1, 3])
def test_repeat_after_me_reward_is_echo_of_delayed_obs(delay: int) -> None:
    env = RepeatAfterMe(repeat_delay=delay, episode_len=50)
    obs, _ = env.reset(seed=delay)
    seen = [0] * delay + [obs]  # pre-episode observations count as 0
    rng = np.random.default_rng(1)
    rewards = []
    for t in range(50):
        action = int(rng.integers(2))
        obs, rew, term, trunc, info = env.step(action)
        expected_target = seen[t]  # o_{t - delay}, shifted by the delay-long zero prefix
        assert info["target"] == expected_target
        assert rew == (1.0 if action == expected_target else -1.0)
        rewards.append(rew)
        seen.append(obs)
        assert not term and trunc == (t == 49)
    assert set(rewards) == {1.0, -1.0}


def test_repeat_after_me_perfect_echo_policy_scores_episode_len() -> None:
    env = RepeatAfterMe(repeat_delay=2, episode_len=30)
    obs, _ = env.reset(seed=7)
    history = [0, 0, obs]
    total = 0.0
    for _ in range(30):
        obs, rew, _, trunc, _ = env.step(history[-3])
        history.append(obs)
        total += rew
    assert total == 30.0 and trunc


def test_repeat_after_me_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="repeat_delay"):
        RepeatAfterMe(repeat_delay=-1)
    env = RepeatAfterMe()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="0 or 1"):
        env.step(2)


def test_parametric_cartpole_mask_and_embeddings() -> None:
    env = ParametricCartPole(max_avail_actions=7)
    obs, info = env.reset(seed=5)
    left, right = env.left_embed.copy(), env.right_embed.copy()
    slots_seen = set()
    for _ in range(30):
        assert obs["action_mask"].shape == (7,) and obs["avail_actions"].shape == (7, 2)
        assert obs["cart"].shape == (4,)
        legal = np.flatnonzero(obs["action_mask"])
        assert sorted(legal) == sorted([info["left_slot"], info["right_slot"]])
        np.testing.assert_array_equal(obs["avail_actions"][info["left_slot"]], left)
        np.testing.assert_array_equal(obs["avail_actions"][info["right_slot"]], right)
        slots_seen.add(info["left_slot"])
        obs, _, term, _, info = env.step(
            info["left_slot"] if len(slots_seen) % 2 else info["right_slot"]
        )
        if term:
            obs, info = env.reset()
    assert len(slots_seen) > 2  # the real actions move between slots
    np.testing.assert_array_equal(env.left_embed, left)  # fixed for the environment
    other = ParametricCartPole(max_avail_actions=3)  # every instance: the same embeddings
    other.reset(seed=99)
    np.testing.assert_array_equal(other.left_embed, left)
    assert not np.array_equal(ParametricCartPole(embedding_seed=1).left_embed, left)


def test_parametric_cartpole_slot_maps_to_cartpole_action() -> None:
    env = ParametricCartPole(max_avail_actions=4)
    ref = gym.make("CartPole-v1").unwrapped
    obs, info = env.reset(seed=11)
    ref_obs, _ = ref.reset(seed=12)  # the env seeds its CartPole with seed + 1
    np.testing.assert_array_equal(obs["cart"], ref_obs)
    for real in [1, 1, 0, 1, 0, 0]:
        slot = info["right_slot"] if real else info["left_slot"]
        obs, rew, term, _, info = env.step(slot)
        ref_obs, ref_rew, ref_term, _, _ = ref.step(real)
        np.testing.assert_array_equal(obs["cart"], ref_obs)
        assert (rew, term) == (ref_rew, ref_term)


def test_parametric_cartpole_rejects_masked_action() -> None:
    env = ParametricCartPole(max_avail_actions=5)
    obs, info = env.reset(seed=0)
    masked = int(np.flatnonzero(obs["action_mask"] == 0)[0])
    with pytest.raises(ValueError, match="masked out"):
        env.step(masked)
    with pytest.raises(ValueError, match=">= 2"):
        ParametricCartPole(max_avail_actions=1)


def test_correlated_actions_reward_definition() -> None:
    env = CorrelatedActionsEnv(episode_len=40)
    obs, _ = env.reset(seed=2)
    rng = np.random.default_rng(3)
    for t in range(40):
        a1, a2 = (int(a) for a in rng.integers(2, size=2))
        expected = 5.0 * (a1 == obs) + 5.0 * (a2 == a1)
        obs, rew, term, trunc, _ = env.step((a1, a2))
        assert rew == expected
        assert not term and trunc == (t == 39)
    assert correlated_reward(0, 0, 0) == 10.0
    assert correlated_reward(0, 1, 1) == 5.0  # a2 == a1 pays even when a1 is wrong
    assert correlated_reward(1, 1, 0) == 5.0
    assert correlated_reward(1, 0, 1) == 0.0


def test_same_seed_same_episode() -> None:
    for make in (
        lambda: RepeatAfterMe(),
        lambda: CorrelatedActionsEnv(),
        lambda: ParametricCartPole(),
    ):
        a, b = make(), make()
        oa, _ = a.reset(seed=9)
        ob, _ = b.reset(seed=9)
        for _ in range(5):
            act = a.action_space.sample() if not isinstance(a, ParametricCartPole) else None
            if act is None:
                act = int(np.flatnonzero(oa["action_mask"])[0])
            oa = a.step(act)[0]
            ob = b.step(act)[0]
        if isinstance(oa, dict):
            for k in oa:
                np.testing.assert_array_equal(oa[k], ob[k])
        else:
            assert oa == ob


# --- the zoo (rlblocks.envs.zoo, rlblocks.envs.ZOO) ---------------------------------------

ZOO_IDS = sorted(envs.ZOO)


def _mean_return(env: gym.Env, policy, episodes: int, seed: int) -> float:
    """Mean return of ``policy(obs, previous_obs)`` over whole episodes."""
    total = 0.0
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        previous, done = obs, False
        while not done:
            nxt, reward, term, trunc, _ = env.step(policy(obs, previous))
            previous, obs, done = obs, nxt, term or trunc
            total += reward
    return total / episodes


def _legal_random(env: MaskedBanditEnv, rng: np.random.Generator):
    def act(obs, _previous):
        blocks = np.asarray(obs["action_mask"]).reshape(env.k, env.n)
        picks = np.array([rng.choice(np.flatnonzero(b)) for b in blocks])
        return int(picks[0]) if env.kind == "discrete" else picks

    return act


@pytest.mark.parametrize("env_id", ZOO_IDS)
def test_zoo_ids_are_checked_16_step_envs(env_id: str) -> None:
    entry = envs.ZOO[env_id]
    env = gym.make(env_id)
    assert env.spec is not None and env.spec.reward_threshold == entry.threshold
    check_env(env.unwrapped, skip_render_check=True)
    # nothing tuned: only the model a task needs (memory; an order-aware list encoder)
    assert set(entry.model) <= {"use_lstm", "use_attention", "entity_encoder"}
    assert entry.random_return < entry.threshold
    obs, _ = env.reset(seed=1)
    steps, trunc = 0, False
    while not trunc:
        masked = isinstance(obs, dict) and "action_mask" in obs
        action = env.unwrapped.best_action() if masked else env.action_space.sample()
        obs, _, term, trunc, _ = env.step(action)
        assert env.observation_space.contains(obs) and not term
        steps += 1
    assert steps == 16


@pytest.mark.parametrize("env_id", ZOO_IDS)
def test_zoo_random_and_stale_policies_score_the_random_return(env_id: str) -> None:
    """The table's random return is right, the best policy scores the maximum, and acting
    on the previous step's observation is no better than random."""
    entry = envs.ZOO[env_id]
    env = gym.make(env_id).unwrapped
    rng = np.random.default_rng(0)
    if isinstance(env, MaskedBanditEnv):
        assert entry.random_return == pytest.approx(env.random_legal_return)
        random = _legal_random(env, rng)
        best = _mean_return(env, lambda o, p: env.best_action(), 20, 0)
        assert best == 16.0
        got = _mean_return(env, random, 250, 0)
        assert got == pytest.approx(entry.random_return, abs=0.4)
        # ignoring the mask (a uniform pick among all actions) scores far below the floor
        env.action_space.seed(0)
        unmasked = _mean_return(env, lambda o, p: env.action_space.sample(), 250, 0)
        assert entry.first_return is not None and unmasked < entry.first_return - 3
        return
    assert isinstance(env, zoo.ZooEnv)
    assert entry.random_return == pytest.approx(env.random_return)
    env.action_space.seed(0)
    got = _mean_return(env, lambda o, p: env.action_space.sample(), 250, 0)
    assert got == pytest.approx(entry.random_return, abs=0.35)
    if isinstance(env, zoo_memory.Recall):
        # a memoryless agent that answers for the CURRENT symbol scores random too
        stale = _mean_return(env, lambda o, p: int(o), 250, 0)
        assert stale == pytest.approx(entry.random_return, abs=0.35)
        return
    assert _mean_return(env, lambda o, p: env.answer(o), 20, 0) == env.max_return == 16.0
    stale = _mean_return(env, lambda o, p: env.answer(p), 250, 0)
    # the first step's "previous" observation is the current one: one step in 16 is right
    expected = entry.random_return + (1 - env.random_step_reward) * 1.0
    assert stale == pytest.approx(expected, abs=0.35)


def test_zoo_recall_rewards_the_delayed_symbol() -> None:
    env = zoo_memory.Recall(delay=3, n=3, episode_len=10)
    obs, _ = env.reset(seed=4)
    seen, rewards = [obs], []
    for t in range(10):
        action = seen[t - 3] if t >= 3 else 2
        obs, reward, _, trunc, _ = env.step(action)
        seen.append(obs)
        rewards.append(reward)
    assert rewards == [0.0] * 3 + [1.0] * 7 and trunc
    env.reset(seed=4)
    assert env.step(seen[0])[1] == 0.0  # nothing scores during the first `delay` steps


def test_zoo_answers_need_every_part_of_the_observation() -> None:
    nested = zoo_observations.NestedBandit("tuple")
    obs = (2, (np.array([0.1, 0.9, -0.5], np.float32), np.zeros(2, np.float32)))
    assert nested.answer(obs) == 7
    assert nested.answer((0, obs[1])) == 1  # the code is one digit ...
    assert nested.answer((2, (np.array([0.9, 0.1, -0.5], np.float32), obs[1][1]))) == 6
    md = zoo_observations.MultiDiscreteBandit(n=3, k=2)
    assert [md.answer(np.array(v)) for v in ([0, 0], [0, 2], [2, 0], [1, 1])] == [0, 2, 6, 4]
    rep = zoo_observations.RepeatedBandit("last", max_len=4)
    assert [rep.answer(v) for v in ([1], [1, 2], [0, 2, 2, 1])] == [1, 2, 1]
    count = zoo_observations.RepeatedBandit("count", max_len=4)
    assert [count.answer(v) for v in ([], [2], [0, 0, 0, 0])] == [0, 1, 4]
    box = zoo_observations.BoxBandit(shape=(10, 10, 2), dtype="float64")
    image = zoo_observations.ImageBandit()
    obs, _ = image.reset(seed=0)
    flipped = obs[:, ::-1]  # the square changes sides
    assert image.answer(flipped) == 1 - image.answer(obs)
    grid = zoo_observations.GridBandit()
    obs, _ = grid.reset(seed=0)
    assert grid.answer(obs[:, ::-1]) == 2 - grid.answer(obs)
    x, _ = box.reset(seed=0)
    assert box.answer(x) != box.answer(-x) and x.dtype == np.float64


def test_zoo_action_bandits_give_partial_credit() -> None:
    x = np.array([-0.9, 0.5], np.float32)
    md = zoo_actions.ActionBandit("multidiscrete")
    assert md.score(x, np.array([0, 2])) == 1.0 and md.score(x, np.array([0, 1])) == 0.5
    box = zoo_actions.ActionBandit("box")
    assert box.score(x, np.array([0.9, -0.5])) == pytest.approx(1.0)
    assert box.score(x, np.array([0.4, -0.5])) == pytest.approx(0.75)
    assert box.score(x, np.array([5.0, -0.5])) == pytest.approx(0.95)  # clipped to 1.0
    d = zoo_actions.ActionBandit("dict")
    assert d.score(x, {"third": 0, "sign": 1}) == 1.0
    assert d.score(x, {"third": 0, "sign": 0}) == 0.5
    tup = zoo_actions.ActionBandit("tuple")
    assert tup.score(x, (0, np.array([-0.5], np.float32))) == pytest.approx(1.0)
    assert tup.score(x, (1, np.array([-0.5], np.float32))) == pytest.approx(0.5)


def test_zoo_rejects_bad_arguments_and_actions() -> None:
    for make, match in [
        (lambda: zoo_observations.BoxBandit(dtype="int8"), "dtype"),
        (lambda: zoo_observations.BoxBandit(shape=()), "shape"),
        (lambda: zoo_observations.ImageBandit(shape=(10, 4, 3)), "shape"),
        (lambda: zoo_observations.GridBandit(size=6), "odd"),
        (lambda: zoo_observations.DiscreteBandit(n=1), "n must"),
        (lambda: zoo_observations.NestedBandit("list"), "kind"),
        (lambda: zoo_observations.RepeatedBandit("first"), "target"),
        (lambda: zoo_actions.ActionBandit("graph"), "action"),
        (lambda: zoo_memory.Recall(delay=16, episode_len=16), "delay"),
        (lambda: zoo_observations.DiscreteBandit(episode_len=0), "episode_len"),
    ]:
        with pytest.raises(ValueError, match=match):
            make()
    with pytest.raises(RuntimeError, match="reset"):
        zoo_observations.DiscreteBandit().step(0)
    for env, bad in [
        (zoo_observations.DiscreteBandit(n=5), 5),
        (zoo_actions.ActionBandit("box"), np.zeros(3)),
        (zoo_actions.ActionBandit("box"), np.array([np.nan, 0.0])),
        (zoo_actions.ActionBandit("multidiscrete"), np.array([0, 3])),
        (zoo_actions.ActionBandit("tuple"), (0,)),
        (zoo_actions.ActionBandit("dict"), {"third": 0}),
        (zoo_actions.ActionBandit("dict"), {"third": 3, "sign": 0}),
    ]:
        env.reset(seed=0)
        with pytest.raises(ValueError, match="action"):
            env.step(bad)


def test_zoo_same_seed_same_episode() -> None:
    for env_id in ZOO_IDS:
        a, b = gym.make(env_id), gym.make(env_id)
        oa, _ = a.reset(seed=5)
        ob, _ = b.reset(seed=5)
        a.action_space.seed(1)
        for _ in range(4):
            masked = isinstance(oa, dict) and "action_mask" in oa
            act = a.unwrapped.best_action() if masked else a.action_space.sample()
            oa, ra = a.step(act)[:2]
            ob, rb = b.step(act)[:2]
            assert ra == rb
        assert data_equivalence(oa, ob, exact=True), env_id
        assert a.observation_space.contains(oa), env_id


def _answer_frequencies(env: zoo.ZooEnv, draws: int) -> np.ndarray:
    env.reset(seed=0)
    counts = np.zeros(int(env.action_space.n), np.int64)  # type: ignore[attr-defined]
    for _ in range(draws):
        counts[env.answer(env._draw())] += 1
    return counts / draws


@pytest.mark.parametrize(
    "make",
    [
        zoo_structures.SequenceBandit,
        zoo_structures.GraphBandit,
        zoo_structures.TextBandit,
        zoo_structures.OneOfBandit,
    ],
)
def test_zoo_structured_answers_are_balanced(make) -> None:
    """Every answer is equally likely, so a constant (or stale) answer scores random."""
    env = make()
    freq = _answer_frequencies(env, 4000)
    np.testing.assert_allclose(freq, env.random_step_reward, atol=0.03)


def test_zoo_sequence_answer_needs_the_argmax_item() -> None:
    env = zoo_structures.SequenceBandit(max_len=6)
    rng = np.random.default_rng(0)
    env.reset(seed=1)
    lengths = set()
    for _ in range(200):
        obs = env._draw()
        assert isinstance(obs, tuple) and obs in env.observation_space
        lengths.add(len(obs))
        items = np.stack(obs)
        assert (items[:, 1] > 0).sum() == len(items) // 2 and np.all(np.abs(items[:, 1]) >= 0.1)
        best = int(np.argmax(items[:, 0]))
        assert env.answer(obs) == int(items[best, 1] > 0)
        shuffled = tuple(items[rng.permutation(len(items))])
        assert env.answer(shuffled) == env.answer(obs)  # the order does not matter
        flipped = items.copy()
        flipped[best, 1] = -flipped[best, 1]
        assert env.answer(tuple(flipped)) == 1 - env.answer(obs)
        # the other items' y never matters
        others = items.copy()
        others[np.arange(len(items)) != best, 1] *= -1
        assert env.answer(tuple(others)) == env.answer(obs)
    assert lengths == {2, 4, 6}


def _relabel(obs: GraphInstance, perm: np.ndarray) -> GraphInstance:
    """The same graph with node i renamed perm[i]."""
    nodes = np.empty_like(obs.nodes)
    nodes[perm] = obs.nodes
    return GraphInstance(nodes, obs.edges, perm[obs.edge_links])


def test_zoo_graph_answer_is_the_marked_nodes_degree() -> None:
    env = zoo_structures.GraphBandit(min_nodes=3, max_nodes=8)
    env.reset(seed=2)
    rng = np.random.default_rng(0)
    sizes = set()
    for _ in range(300):
        obs = env._draw()
        assert obs in env.observation_space
        n, links = len(obs.nodes), obs.edge_links
        sizes.add(n)
        assert obs.nodes[:, 0].sum() == 1.0  # one marked node
        pairs = [tuple(p) for p in links.tolist()]
        assert len(set(pairs)) == len(pairs) and all(i != j for i, j in pairs)
        assert all((j, i) in set(pairs) for i, j in pairs)  # undirected: both directions
        marked = int(np.argmax(obs.nodes[:, 0]))
        degrees = np.bincount(links[:, 0], minlength=n)
        assert degrees.max() >= 2 and degrees.min() <= 1  # either answer could be marked
        assert env.answer(obs) == int(degrees[marked] >= 2)
        assert env.answer(_relabel(obs, rng.permutation(n))) == env.answer(obs)
        keep = (links[:, 0] != marked) & (links[:, 1] != marked)
        cut = GraphInstance(obs.nodes, obs.edges[keep], links[keep])
        assert env.answer(cut) == 0  # the other nodes' edges never count
    assert sizes == set(range(3, 9))


def test_zoo_structured_shortcuts_score_random() -> None:
    """What does not single out the right item / node says nothing about the answer: a
    sequence's length, one slot, the sum of its y; a graph's size and edge count."""
    seq = zoo_structures.SequenceBandit()
    seq.reset(seed=5)
    hits = np.zeros(4)
    for _ in range(4000):
        obs = seq._draw()
        y = np.stack(obs)[:, 1]
        answer = seq.answer(obs)
        guesses = [y[0] > 0, y[-1] > 0, y.sum() > 0, len(obs) == 2]
        hits += [int(g) == answer for g in guesses]
    np.testing.assert_allclose(hits / 4000, 0.5, atol=0.03)
    graph = zoo_structures.GraphBandit()
    graph.reset(seed=6)
    by_size: dict[tuple[int, int], list[int]] = {}
    for _ in range(6000):
        obs = graph._draw()
        by_size.setdefault((len(obs.nodes), len(obs.edge_links)), []).append(graph.answer(obs))
    # the best guess from (nodes, edges) alone, scored on the draws it was fitted to (a
    # slight optimistic bias from the many small groups)
    best = sum(max(sum(a), len(a) - sum(a)) for a in by_size.values()) / 6000
    assert best < 0.56


def test_zoo_text_answer_is_the_spelt_word() -> None:
    env = zoo_structures.TextBandit(max_length=8)
    assert not set(env.FILLER) & set("".join(env.WORDS))
    env.reset(seed=3)
    starts, lengths = set(), set()
    for _ in range(300):
        obs = env._draw()
        assert isinstance(obs, str) and obs in env.observation_space
        found = [i for i, w in enumerate(env.WORDS) if w in obs]
        assert found == [env.answer(obs)]
        word = env.WORDS[found[0]]
        starts.add(obs.index(word))
        lengths.add(len(obs))
        assert set(obs.replace(word, "", 1)) <= set(env.FILLER)
    assert starts == set(range(6)) and lengths == set(range(3, 9))
    with pytest.raises(ValueError, match="spells none"):
        env.answer("zzzz")


def test_zoo_oneof_answer_needs_the_branch_and_its_value() -> None:
    env = zoo_structures.OneOfBandit()
    assert [env.answer((0, v)) for v in range(3)] == [1, 2, 0]
    xs = [-0.9, -0.5, -0.2, 0.0, 0.3, 0.9]
    up = [env.answer((1, np.array([x, 0.5], np.float32))) for x in xs]
    down = [env.answer((1, np.array([x, -0.5], np.float32))) for x in xs]
    assert up == [0, 0, 1, 1, 1, 2] and down == [2 - a for a in up]
    env.reset(seed=4)
    branches = [env._draw()[0] for _ in range(400)]
    assert set(branches) == {0, 1} and 150 < sum(branches) < 250


def test_zoo_structured_reject_bad_arguments() -> None:
    for make, match in [
        (lambda: zoo_structures.SequenceBandit(max_len=1), "max_len"),
        (lambda: zoo_structures.SequenceBandit(max_len=5), "even"),
        (lambda: zoo_structures.GraphBandit(min_nodes=2), "min_nodes"),
        (lambda: zoo_structures.GraphBandit(min_nodes=5, max_nodes=4), "max_nodes"),
        (lambda: zoo_structures.TextBandit(max_length=3), "max_length"),
        (lambda: zoo_structures.OneOfBandit(episode_len=0), "episode_len"),
    ]:
        with pytest.raises(ValueError, match=match):
            make()
    env = zoo_structures.OneOfBandit()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action"):
        env.step(3)
