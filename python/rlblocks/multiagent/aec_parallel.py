"""PettingZoo's ``aec_to_parallel`` without its per-step overhead, for the parallel envs
PettingZoo builds from an AEC env (MPE's ``parallel_env()``, ``parallel_wrapper_fn`` envs).

PettingZoo's wrapper steps each agent of the cycle after reading ``aec_env.last()`` (every
agent's observation, computed and dropped each step), and reads ``agents``, ``rewards``,
``terminations``, ... through each wrapper layer's ``__getattr__``: on MPE simple_spread
that overhead was about half of the env's time. :class:`AECParallelEnv` steps the same
cycle with the same results, reads the env's state from the env itself, and makes the
wrappers' order and action-bounds checks itself before the env's own step (PettingZoo's
standard ``OrderEnforcingWrapper`` around ``AssertOutOfBoundsWrapper``: their calls and
attribute look-ups were a tenth of simple_spread's step; any other chain of
:data:`PLAIN_LAYERS` steps through the outermost wrapper). It is used
only when every layer between PettingZoo's wrapper and the env is one whose reads forward
unchanged (:data:`PLAIN_LAYERS`); any other wrapper keeps PettingZoo's conversion.

Examples:
    >>> from rlblocks.envs.multiagent_zoo import env
    >>> par = aec_to_parallel_wrapper(env())
    >>> fast_parallel(par) is par  # parallel_to_aec's AEC env is not plain: PettingZoo's kept
    True
"""

from __future__ import annotations

from typing import Any

try:
    from pettingzoo.utils.conversions import aec_to_parallel_wrapper
    from pettingzoo.utils.env import ParallelEnv
    from pettingzoo.utils.env_logger import EnvLogger
    from pettingzoo.utils.wrappers import (
        AssertOutOfBoundsWrapper,
        BaseWrapper,
        ClipOutOfBoundsWrapper,
        OrderEnforcingWrapper,
    )
except ImportError as e:  # pragma: no cover - exercised by tests/test_dependencies.py
    raise ImportError(
        "rlblocks.multiagent.aec_parallel needs PettingZoo: "
        f'pip install "rlblocks[multiagent]" ({e})'
    ) from e

__all__ = ["PLAIN_LAYERS", "AECParallelEnv", "fast_parallel"]

#: PettingZoo wrappers that change ``step`` / ``observe`` checks only, never what the env's
#: ``agents``, ``rewards``, ``terminations``, ``truncations``, ``infos`` or observations read.
PLAIN_LAYERS = (OrderEnforcingWrapper, AssertOutOfBoundsWrapper, ClipOutOfBoundsWrapper)


def fast_parallel(env: Any) -> Any:
    """``env`` as an :class:`AECParallelEnv` when it is exactly PettingZoo's
    ``aec_to_parallel`` wrapper over :data:`PLAIN_LAYERS` only, above an env that is its own
    ``unwrapped``; otherwise ``env`` itself."""
    if type(env) is not aec_to_parallel_wrapper:
        return env
    layer = env.aec_env
    while isinstance(layer, BaseWrapper):
        if type(layer) not in PLAIN_LAYERS:
            return env
        layer = layer.env
    if layer is not getattr(layer, "unwrapped", None):  # e.g. parallel_to_aec's own AEC env
        return env
    return AECParallelEnv(env)


class AECParallelEnv(ParallelEnv):  # type: ignore[misc]
    """PettingZoo's ``aec_to_parallel`` wrapper ``env``, stepped as it steps (module
    docstring)."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.aec_env = env.aec_env
        self.raw = env.aec_env.unwrapped
        self.possible_agents = list(env.possible_agents)
        self.metadata = env.metadata
        self.render_mode = getattr(env, "render_mode", None)
        self.agents: list[Any] = []
        layers = []
        layer = env.aec_env
        while isinstance(layer, BaseWrapper):
            layers.append(type(layer))
            layer = layer.env
        #: PettingZoo's standard chain (the order check around the bounds assertion):
        #: its two checks made here, then the env's own step, without the layers' calls.
        self._inline = layers == [OrderEnforcingWrapper, AssertOutOfBoundsWrapper]

    def _checked(self, action: Any) -> bool:
        """The checks ``aec_env.step(action)`` makes for :data:`_inline`'s chain: the order
        wrapper's, then the bounds assertion (the same message); False where the order
        wrapper would not step the env (it warned)."""
        outer, raw = self.aec_env, self.raw
        if not outer._has_reset:
            EnvLogger.error_step_before_reset()
        outer._has_updated = True
        if not raw.agents:
            EnvLogger.warn_step_after_terminated_truncated()
            return False
        agent = raw.agent_selection
        assert (
            action is None and (raw.terminations[agent] or raw.truncations[agent])
        ) or raw.action_space(agent).contains(action), "action is not in action space"
        return True

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("env", "aec_env", "raw"):
            raise AttributeError(name)
        return getattr(self.env, name)

    @property
    def unwrapped(self) -> Any:
        return self.raw

    def observation_space(self, agent: Any) -> Any:
        return self.env.observation_space(agent)

    def action_space(self, agent: Any) -> Any:
        return self.env.action_space(agent)

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[Any, Any], dict[Any, Any]]:
        out = self.env.reset(seed=seed, options=options)
        self.agents = list(self.env.agents)
        return out  # type: ignore[no-any-return]

    def step(self, actions: dict[Any, Any]) -> tuple[dict[Any, Any], ...]:
        """One cycle: each agent in the env's order steps with its action; the rewards are
        summed over the cycle, as PettingZoo's wrapper sums them."""
        raw = self.raw
        step = self.aec_env.step
        if self._inline:  # the wrappers' checks here, then the env's own step

            def step(action: Any) -> None:
                if self._checked(action):
                    raw.step(action)

        rewards: dict[Any, float] = {}
        for agent in list(raw.agents):
            if agent != raw.agent_selection:
                dead = raw.terminations[agent] or raw.truncations[agent]
                raise AssertionError(
                    f"expected agent {agent} got "
                    + ("termination or truncation agent " if dead else "agent ")
                    + f"{raw.agent_selection}: a parallel env's agents step in a cycle and "
                    "die only at its end"
                )
            step(actions[agent])
            now = raw.rewards
            for other in raw.agents:
                rewards[other] = rewards.get(other, 0) + now[other]
        terminations = dict(raw.terminations)
        truncations = dict(raw.truncations)
        infos = dict(raw.infos)
        observations = {agent: raw.observe(agent) for agent in raw.agents}
        while raw.agents and (
            raw.terminations[raw.agent_selection] or raw.truncations[raw.agent_selection]
        ):
            step(None)
        self.agents = raw.agents
        return observations, rewards, terminations, truncations, infos

    def render(self) -> Any:
        return self.env.render()

    def state(self) -> Any:
        return self.env.state()

    def close(self) -> None:
        self.env.close()
