"""PettingZoo's aec_to_parallel of an AEC env (MPE's parallel_env) is stepped by
rlblocks.multiagent.aec_parallel.AECParallelEnv: the same observations, rewards, flags and
agents as PettingZoo's wrapper, without its per-step overhead; another wrapper layer keeps
PettingZoo's conversion."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="pettingzoo is the multiagent extra")
mpe2 = pytest.importorskip("mpe2")

from pettingzoo.utils.conversions import aec_to_parallel_wrapper  # noqa: E402
from pettingzoo.utils.wrappers import BaseWrapper  # noqa: E402
from rlblocks.multiagent.aec_parallel import AECParallelEnv, fast_parallel  # noqa: E402
from rlblocks.multiagent.envs import MultiAgentVectorEnv, as_parallel_env  # noqa: E402


def _same(a: object, b: object) -> None:
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b)
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b)
    else:
        assert a == b


@pytest.mark.parametrize("name", ["simple_spread_v3", "simple_adversary_v3"])
def test_steps_as_pettingzoos_wrapper_does(name: str) -> None:
    module = getattr(__import__("mpe2", fromlist=[name]), name)
    theirs, ours = (
        module.parallel_env(max_cycles=6),
        fast_parallel(module.parallel_env(max_cycles=6)),
    )
    assert isinstance(ours, AECParallelEnv) and ours.possible_agents == theirs.possible_agents
    rng = np.random.default_rng(0)
    for episode in range(2):  # through a truncation at max_cycles and a new reset
        _same(theirs.reset(seed=episode), ours.reset(seed=episode))
        while theirs.agents:
            actions = {a: int(rng.integers(theirs.action_space(a).n)) for a in theirs.agents}
            for mine, pz in zip(ours.step(actions), theirs.step(actions), strict=True):
                _same(dict(pz), mine)
            assert ours.agents == theirs.agents
    ours.close()
    theirs.close()


def test_the_trainer_steps_mpe_through_it_and_other_wrappers_stay_pettingzoos() -> None:
    hub = MultiAgentVectorEnv(mpe2.simple_spread_v3.parallel_env, num_envs=1)
    assert isinstance(hub.envs[0], AECParallelEnv)
    hub.close()

    class Recolour(BaseWrapper):  # a user's layer may change what the env reads
        pass

    par = aec_to_parallel_wrapper(Recolour(mpe2.simple_spread_v3.env()))
    assert as_parallel_env(par) is par


def test_the_wrappers_checks_made_inline_refuse_as_pettingzoo_does() -> None:
    """MPE's chain (the order check around the bounds assertion) is checked inline: an
    action outside its space is PettingZoo's AssertionError before anything steps, and the
    episode then goes on as PettingZoo's wrapper steps it."""
    theirs = mpe2.simple_spread_v3.parallel_env(max_cycles=4)
    ours = fast_parallel(mpe2.simple_spread_v3.parallel_env(max_cycles=4))
    assert isinstance(ours, AECParallelEnv) and ours._inline
    _same(theirs.reset(seed=3), ours.reset(seed=3))
    bad = {a: 0 for a in theirs.agents} | {theirs.agents[0]: 5}  # Discrete(5): 0 to 4
    for env in (theirs, ours):
        with pytest.raises(AssertionError, match="action is not in action space"):
            env.step(bad)
    while theirs.agents:
        actions = {a: 4 for a in theirs.agents}
        for mine, pz in zip(ours.step(actions), theirs.step(actions), strict=True):
            _same(dict(pz), mine)
    assert ours.agents == theirs.agents == []
